"""Model parameters: named arrays with the Hugging Face ``MambaForCausalLM`` key names and shapes.

    backbone.embeddings.weight                 (v, d)     tied lm_head
    backbone.layers.{i}.norm.weight            (d,)
    backbone.layers.{i}.mixer.in_proj.weight   (2e, d)    rows [:e] -> x branch, [e:] -> gate z
    backbone.layers.{i}.mixer.conv1d.weight    (e, 1, k)  causal depthwise
    backbone.layers.{i}.mixer.conv1d.bias      (e,)
    backbone.layers.{i}.mixer.x_proj.weight    (r+2n, e)  rows -> (dt, B, C)
    backbone.layers.{i}.mixer.dt_proj.weight   (e, r)
    backbone.layers.{i}.mixer.dt_proj.bias     (e,)
    backbone.layers.{i}.mixer.A_log            (e, n)     A = -exp(A_log)
    backbone.layers.{i}.mixer.D                (e,)
    backbone.layers.{i}.mixer.out_proj.weight  (d, e)
    backbone.norm_f.weight                     (d,)
    lm_head.weight                             (v, d)     only when untied (tie_embeddings=False)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .config import MambaConfig

Params = dict[str, np.ndarray]

EMBEDDINGS = "backbone.embeddings.weight"
NORM_F = "backbone.norm_f.weight"
LM_HEAD = "lm_head.weight"
MIXER_TENSORS = (
    "in_proj.weight",
    "conv1d.weight",
    "conv1d.bias",
    "x_proj.weight",
    "dt_proj.weight",
    "dt_proj.bias",
    "A_log",
    "D",
    "out_proj.weight",
)


def layer_prefix(i: int) -> str:
    return f"backbone.layers.{i}."


def param_shapes(cfg: MambaConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter name -> shape, in checkpoint order."""
    d, e, n, r, k = cfg.d_model, cfg.d_inner, cfg.d_state, cfg.dt_rank, cfg.d_conv
    mixer = {
        "in_proj.weight": (2 * e, d),
        "conv1d.weight": (e, 1, k),
        "conv1d.bias": (e,),
        "x_proj.weight": (r + 2 * n, e),
        "dt_proj.weight": (e, r),
        "dt_proj.bias": (e,),
        "A_log": (e, n),
        "D": (e,),
        "out_proj.weight": (d, e),
    }
    shapes: dict[str, tuple[int, ...]] = {EMBEDDINGS: (cfg.vocab_size, d)}
    for i in range(cfg.n_layer):
        p = layer_prefix(i)
        shapes[p + "norm.weight"] = (d,)
        for name in MIXER_TENSORS:
            shapes[p + "mixer." + name] = mixer[name]
    shapes[NORM_F] = (d,)
    if not cfg.tie_embeddings:
        shapes[LM_HEAD] = (cfg.vocab_size, d)
    return shapes


def head_name(p: Mapping[str, object]) -> str:
    """The output projection's parameter: ``lm_head.weight`` when untied, else the embeddings."""
    return LM_HEAD if LM_HEAD in p else EMBEDDINGS


def short_name(name: str) -> str:
    """``backbone.layers.3.mixer.x_proj.weight`` -> ``x_proj``; ``...embeddings.weight`` -> ``embeddings``."""
    parts = name.split(".")
    if parts[-1] in ("weight", "bias"):
        return parts[-2] if parts[-1] == "weight" else parts[-2] + ".bias"
    return parts[-1]


def decays(name: str) -> bool:
    """Decoupled weight decay applies to 2-D projection weights only: never A_log, D, biases,
    norms or embeddings (as mamba_ssm, which marks A_log and D ``_no_weight_decay``)."""
    return short_name(name) in ("in_proj", "conv1d", "x_proj", "dt_proj", "out_proj")


def _uniform(rng: np.random.Generator, bound: float, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(-bound, bound, size=shape)


# Init schemes: (std of the embedding table, norm_f.weight at init). With a tied head the logits
# are norm_f(h) . embeddings, so norm_f.weight is the logit scale. Evidence: docs/learning.md.
# - "reference": mamba_ssm exactly, N(0, 0.02) and 1; for loading/continuing HF-style models. At
#   widths 64-256 every logit starts near 0 and the token identities are nearly equal after
#   norm_f: selective copying stayed at chance (7% after 2,500 steps).
# - "unit-embeddings": N(0, 1) and 1: learns induction fastest (tiny: 100 % at 750 steps against
#   1,250-1,500 for "default"), but a token's logit for itself starts at ~d = 128 nats: the
#   first loss is ~100 and text trails "default" by 0.25 bits/byte after 700 steps.
# - "default": N(0, 1) and 1/sqrt(d): unit-scale token identities with logits ~ N(0, 1) plus
#   ~sqrt(d) for the current token (first loss ~9 on text); solves copying (99.7 %) and
#   induction (100 %) on tiny and is the best of the three on text.
# An untied lm_head of zeros (logits 0 at init) was tried and stayed at chance on both tasks.
INIT_SCALES: dict[str, tuple[float, str]] = {
    "default": (1.0, "1/sqrt(d)"),
    "unit-embeddings": (1.0, "1"),
    "reference": (0.02, "1"),
}
INITS = tuple(INIT_SCALES)


def init_params(cfg: MambaConfig, seed: int = 0, dtype: type = np.float32,
                init: str = "default") -> Params:
    """Mamba init (mamba_ssm ``Mamba.__init__`` + ``_init_weights``); ``init`` picks the
    embedding and logit scale (``INIT_SCALES``): "reference" is mamba_ssm exactly, the others
    differ only in the embeddings and norm_f.weight. Loading a checkpoint never calls this.

    Linear weights: PyTorch default U(+-1/sqrt(fan_in)); out_proj additionally / sqrt(n_layer);
    embeddings N(0, INIT_SCALES[init][0]); A_log = log(1..n) (S4D-real); D = 1;
    dt_proj.weight U(+-r^-0.5); dt_proj.bias = softplus^-1(dt), dt log-uniform in [1e-3, 0.1]
    clamped at 1e-4.
    """
    if init not in INIT_SCALES:
        raise ValueError(f"unknown init {init!r}; choose one of {list(INITS)}")
    rng = np.random.default_rng(seed)
    d, e, n, r, k = cfg.d_model, cfg.d_inner, cfg.d_state, cfg.dt_rank, cfg.d_conv
    std, logit_scale = INIT_SCALES[init]
    p: dict[str, np.ndarray] = {EMBEDDINGS: rng.normal(0.0, std, size=(cfg.vocab_size, d))}
    for i in range(cfg.n_layer):
        pre = layer_prefix(i)
        dt = np.exp(rng.uniform(size=e) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        dt = np.maximum(dt, 1e-4)
        p[pre + "norm.weight"] = np.ones(d)
        m = pre + "mixer."
        p[m + "in_proj.weight"] = _uniform(rng, 1 / math.sqrt(d), (2 * e, d))
        p[m + "conv1d.weight"] = _uniform(rng, 1 / math.sqrt(k), (e, 1, k))
        p[m + "conv1d.bias"] = _uniform(rng, 1 / math.sqrt(k), (e,))
        p[m + "x_proj.weight"] = _uniform(rng, 1 / math.sqrt(e), (r + 2 * n, e))
        p[m + "dt_proj.weight"] = _uniform(rng, r**-0.5, (e, r))
        p[m + "dt_proj.bias"] = dt + np.log(-np.expm1(-dt))
        p[m + "A_log"] = np.log(np.tile(np.arange(1, n + 1, dtype=np.float64), (e, 1)))
        p[m + "D"] = np.ones(e)
        p[m + "out_proj.weight"] = _uniform(rng, 1 / math.sqrt(e), (d, e)) / math.sqrt(cfg.n_layer)
    p[NORM_F] = np.full(d, d**-0.5 if logit_scale == "1/sqrt(d)" else 1.0)
    if not cfg.tie_embeddings:
        p[LM_HEAD] = rng.normal(0.0, 0.02, size=(cfg.vocab_size, d))
    shapes = param_shapes(cfg)
    return {name: np.ascontiguousarray(p[name], dtype=dtype) for name in shapes}


def zeros_like(params: Params) -> Params:
    return {name: np.zeros_like(a) for name, a in params.items()}


def count(params: Params) -> int:
    return int(sum(a.size for a in params.values()))
