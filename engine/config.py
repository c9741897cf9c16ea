"""Model configuration and the shape glossary used in every docstring.

Glossary (mamba-minimal):
    b  batch size            l  sequence length       d  d_model
    e  d_inner = expand * d  n  d_state               r  dt_rank = ceil(d / 16) when "auto"
    k  d_conv                v  vocab_size (exactly the config's; ``preset`` pads new models to a
                                              multiple of ``pad_vocab_size_multiple``)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .defaults import PRESET_DEFAULTS


@dataclass(frozen=True)
class MambaConfig:
    """Frozen Mamba-1 LM config. ``dt_rank`` is resolved to an int at construction; ``vocab_size``
    is kept as given (HF never pads a loaded config either). ``tie_embeddings=False`` adds an
    ``lm_head.weight`` (v, d) of its own."""

    vocab_size: int
    d_model: int = 128
    n_layer: int = 4
    d_state: int = 16
    d_conv: int = 4
    expand: int = 2
    dt_rank: int = 0  # 0 (or "auto", as in HF config.json): ceil(d_model / 16)
    norm_eps: float = 1e-5
    pad_vocab_size_multiple: int = 8
    tie_embeddings: bool = True
    bos_token_id: int = 0
    eos_token_id: int = 0
    pad_token_id: int = 0
    d_inner: int = field(init=False)

    def __post_init__(self) -> None:
        auto = self.dt_rank == 0 or isinstance(self.dt_rank, str) and self.dt_rank == "auto"
        if auto:
            object.__setattr__(self, "dt_rank", math.ceil(self.d_model / 16)
                               if isinstance(self.d_model, int) else 0)
        bad = [f"model: {name} = {value!r:.40}; expected a whole number >= 1"
               for name in ("vocab_size", "d_model", "n_layer", "d_state", "d_conv", "expand",
                            "dt_rank", "pad_vocab_size_multiple")
               if (name != "dt_rank" or not auto)  # (d_model's problem, not a second one)
               and (not isinstance(value := getattr(self, name), int) or isinstance(value, bool)
                    or value < 1)]  # all of them (a file's three sizes of 0 took three tries)
        if bad:
            from .limits import Problems

            raise Problems(bad)
        object.__setattr__(self, "d_inner", self.expand * self.d_model)

    # ------------------------------------------------------------------ HF config.json
    def to_hf_dict(self) -> dict[str, Any]:
        """A ``config.json`` dict that transformers' ``MambaConfig`` accepts."""
        return {
            "architectures": ["MambaForCausalLM"],
            "model_type": "mamba",
            "vocab_size": self.vocab_size,
            "hidden_size": self.d_model,
            "num_hidden_layers": self.n_layer,
            "state_size": self.d_state,
            "conv_kernel": self.d_conv,
            "expand": self.expand,
            "intermediate_size": self.d_inner,
            "time_step_rank": self.dt_rank,
            "layer_norm_epsilon": self.norm_eps,
            "use_bias": False,
            "use_conv_bias": True,
            "hidden_act": "silu",
            "residual_in_fp32": True,
            "rms_norm": True,
            "tie_word_embeddings": self.tie_embeddings,
            "pad_vocab_size_multiple": self.pad_vocab_size_multiple,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id,
            "time_step_min": 0.001,
            "time_step_max": 0.1,
            "time_step_floor": 1e-4,
            "time_step_init_scheme": "random",
            "time_step_scale": 1.0,
            "torch_dtype": "float32",  # transformers 4.x
            "dtype": "float32",  # transformers 5.x
        }

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any]) -> MambaConfig:
        """Read an HF ``MambaConfig`` dict (also the mamba_ssm ``d_model``/``n_layer`` spelling)."""
        if d.get("model_type", "mamba") != "mamba":
            raise ValueError(f"not a Mamba-1 config: model_type={d.get('model_type')!r}")
        if d.get("use_bias", False):
            raise ValueError("in_proj/out_proj biases (use_bias=true) are not supported")
        if not d.get("use_conv_bias", True):
            raise ValueError("use_conv_bias=false is not supported")
        if d.get("hidden_act", "silu") not in ("silu", "swish"):  # HF applies it: gelu ran SiLU
            raise ValueError(f"hidden_act={d.get('hidden_act')!r} is not supported (only silu)")
        d_model = d.get("hidden_size", d.get("d_model"))
        if d_model is None:
            raise ValueError("config has neither hidden_size nor d_model")
        return cls(
            vocab_size=int(d["vocab_size"]),
            d_model=int(d_model),
            n_layer=int(d.get("num_hidden_layers", d.get("n_layer", 1))),
            d_state=int(d.get("state_size", 16)),
            d_conv=int(d.get("conv_kernel", 4)),
            expand=int(d.get("expand", 2)),
            dt_rank=_rank(d.get("time_step_rank", "auto")),
            norm_eps=float(d.get("layer_norm_epsilon", 1e-5)),
            pad_vocab_size_multiple=int(d.get("pad_vocab_size_multiple", 8)),
            tie_embeddings=bool(d.get("tie_word_embeddings", True)),
            bos_token_id=_first_id(d.get("bos_token_id")),
            eos_token_id=_first_id(d.get("eos_token_id")),
            pad_token_id=_first_id(d.get("pad_token_id")),
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("d_inner")
        return out

    def with_vocab(self, vocab_size: int) -> MambaConfig:
        return replace(self, vocab_size=vocab_size)


def _first_id(value: Any) -> int:
    """A token id from config.json: an int, null (-> 0) or a list (HF allows several eos ids)."""
    if isinstance(value, list):
        value = value[0] if value else None
    return int(value or 0)


PRESETS: dict[str, dict[str, Any]] = {name: d.model() for name, d in PRESET_DEFAULTS.items()}


def preset(name: str, vocab_size: int) -> MambaConfig:
    """``preset("small", 257)`` -> MambaConfig(d_model=128, n_layer=2, vocab padded to 264).

    A new model's embedding table is padded to a multiple of 8 (as mamba_ssm does); the config
    then says 264 and every file we write has exactly 264 rows."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return MambaConfig(vocab_size=padded_vocab(vocab_size), **PRESETS[name])


def _rank(value: Any) -> int:
    """config.json's ``time_step_rank``: an int, or "auto" (0 here, resolved by MambaConfig)."""
    return 0 if value == "auto" else value  # anything else is validated by MambaConfig


def padded_vocab(vocab_size: int, multiple: int = 8) -> int:
    """The smallest multiple of ``multiple`` that is >= ``vocab_size``."""
    return -(-vocab_size // multiple) * multiple
