"""What a run is made from: ``RunSpec``, the only copy of every default (the CLI, the app and
settings files read theirs from it), its range checks, and what a resume may change
(``RESUME_OVERRIDES``)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from .config import PRESETS, MambaConfig, preset
from .defaults import DEFAULT_PROMPT, PRESET_DEFAULTS, choose_tokenizer
from .documents import RECORDS
from .earlystop import EarlyStopping
from .errors import CheckpointError
from .limits import RUN_RANGES, Problems, Range, check_model, problems_of, train_problems
from .runformat import KEEP, RUN_JSON
from .tokenizer import MAX_BPE
from .trainer import TrainConfig

RESUME_OVERRIDES = ("epochs", "max_steps", "lr", "eval_every", "warmup_steps", "min_lr_ratio",
                    "autosave_steps", "autosave_minutes", "prompts", "early_stopping")
BPE_VOCAB_RANGE = Range(257, MAX_BPE)  # a trained BPE's tokens: the 256 bytes and more (the
# check here, the CLI's --bpe-vocab and the window's box)
MAX_PROMPTS = 16  # preview prompts of a run, each at most MAX_PROMPT_CHARS
MAX_PROMPT_CHARS = 4096


def _whole(v: object) -> bool:
    """An int setting's value as a hand-edited run.json may hold it: an int, not a bool."""
    return type(v) is int


def _number(v: object) -> bool:
    """A real number (int or float, not a bool or a string "0.1": compared, it raised)."""
    return isinstance(v, int | float) and not isinstance(v, bool)


def _upto(hi: float) -> str:
    """' to HI' of a range's upper end in messages (2^40 as a power, 1000000 as 1,000,000),
    ' or more' where it has none."""
    if not math.isfinite(hi):
        return " or more"
    n = int(hi)
    if n == hi and n >= 1 << 20 and n & (n - 1) == 0:
        return f" to 2^{n.bit_length() - 1}"
    return f" to {n:,}" if n == hi else f" to {hi:g}"


@dataclass(frozen=True)
class RunSpec:
    """Everything a run is made from (the corpus aside). JSON-able through ``to_dict``."""

    preset: str = "small"  # tiny | small | medium (``model`` sizes go over its shape; unused with ``init``)
    model: dict[str, int] | None = None  # explicit MambaConfig fields (d_model, n_layer, ...)
    tokenizer: str = "auto"  # auto | bytes | bpe (auto: engine.defaults.choose_tokenizer)
    bpe_vocab: int = 2048
    init: str | None = None  # start from this model folder / run / snapshot instead
    init_scheme: str = "default"  # weight init of a new model: one of engine.params.INITS
    records: str = "file"  # documents: file | blank-line | line (packed, reset); or "stream"
    holdout: float = 0.1  # fraction held out (whole documents, seeded by train.seed)
    train: TrainConfig = field(default_factory=TrainConfig)  # TrainConfig.for_preset(preset)
    autosave_steps: int = 0  # also save every N optimizer steps (0: off)
    autosave_minutes: float = 5.0  # ... and every M minutes (0: off); always at epoch ends
    keep: int = KEEP  # most recent snapshots kept, plus the best by held-out loss
    prompts: tuple[str, ...] = (DEFAULT_PROMPT,)  # preview prompts (train --prompt, the Preview)
    # kept by the run, so a resume stops as the run was set to (its settings only: each
    # ``Run.train`` tracks a ``fresh`` copy)
    early_stopping: EarlyStopping = field(default_factory=EarlyStopping)

    def __post_init__(self) -> None:
        if isinstance(self.prompts, str):  # one prompt given as a string
            object.__setattr__(self, "prompts", (self.prompts,))
        elif isinstance(self.prompts, list):  # run.json / TOML hold a list
            object.__setattr__(self, "prompts", tuple(self.prompts))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["train"] = self.train.to_dict()
        d["prompts"] = list(self.prompts)
        d["early_stopping"] = self.early_stopping.settings()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = RUN_JSON) -> RunSpec:
        """A saved spec (run.json's), its ranges checked as a resume checks them (a hand-edited
        patience "3" reached the window's Continue and raised there); CheckpointError naming
        ``where``."""
        try:
            d = dict(d)
            # a run.json written before decay_fraction existed resumes with its cosine schedule
            d["train"] = TrainConfig.from_dict({"decay_fraction": 1.0, **d["train"]})
            # a run.json written before runs kept their early stopping: off, as it trained
            es = d.get("early_stopping", {})
            if isinstance(es, dict) and (odd := sorted(set(es) - set(EarlyStopping().settings()))):
                raise CheckpointError(f"{where}: early_stopping has no setting {odd[0]!r:.40} (it "
                                      f"has {', '.join(EarlyStopping().settings())})")
            d["early_stopping"] = EarlyStopping(**es) if isinstance(es, dict) else es
            unknown = sorted(set(d) - {f.name for f in fields(cls)})
            if unknown:  # (it said "RunSpec.__init__() got an unexpected keyword argument")
                raise CheckpointError(f"{where}: its spec has no setting {unknown[0]!r:.40} "
                                      "(edited by hand?); remove it from the file")
            spec = cls(**d)
        except (TypeError, KeyError, ValueError) as exc:
            raise CheckpointError(f"{where}: unusable spec ({exc})") from None
        try:
            spec.check(new=False)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"{where}: {exc}") from None
        return spec

    def check(self, new: bool = True) -> None:
        """Ranges of every setting (non-finite / non-positive values refused before any work),
        every problem named in one ValueError (a settings file with four took four tries)."""
        if problems := self.problems(new):
            raise Problems(problems)

    def problems(self, new: bool = True) -> list[str]:
        """Each setting out of range (``check``). ``new=False`` (resume) skips
        ``init_scheme``: it only made the step-0 weights, and a scheme renamed since must not
        stop a saved run from continuing."""
        from .params import INITS

        sized = new and self.model is not None  # sizes and the BPE vocabulary now, not after
        problems = train_problems(self.train) + problems_of(  # the tokenizer trained
            [lambda: check_model(self.model_config(256), "model")] if sized else [])
        if not isinstance(self.early_stopping, EarlyStopping):
            problems.append(f"early_stopping must be patience / target_loss / min_delta, not "
                            f"{self.early_stopping!r:.60}")
        else:
            problems += self.early_stopping.problems(stored=not new)
        hold, steps, minutes = (RUN_RANGES[k] for k in ("holdout", "autosave_steps",
                                                        "autosave_minutes"))
        if not new:  # a run's own run.json: an earlier version had no upper ends for these
            steps, minutes = steps._replace(hi=math.inf), minutes._replace(hi=math.inf)
        cases = [
            (new and self.model is None and self.init is None
             and self.preset not in PRESET_DEFAULTS,
             f"preset must be one of {', '.join(PRESET_DEFAULTS)}; not {self.preset!r}"),
            (new and self.init_scheme not in INITS,
             f"init scheme must be one of {', '.join(INITS)}; not {self.init_scheme!r}"),
            (new and bool(self.init) and self.init_scheme != RunSpec.init_scheme,
             f"init scheme {self.init_scheme!r} applies to a new model; starting from "
             f"{self.init} keeps its trained weights (drop one)"),
            (new and self.tokenizer != "bytes" and (
                type(self.bpe_vocab) is not int
                or not BPE_VOCAB_RANGE.lo <= self.bpe_vocab <= BPE_VOCAB_RANGE.hi),
             f"bpe_vocab must be an integer in [{BPE_VOCAB_RANGE.lo:,}, {BPE_VOCAB_RANGE.hi:,}], "
             f"not {self.bpe_vocab!r:.40}"),
            (self.records not in ("stream", *RECORDS),
             f"records must be stream, {', '.join(RECORDS)}; not {self.records!r}"),
            (self.tokenizer not in ("auto", "bytes", "bpe"),
             f"tokenizer must be 'auto', 'bytes' or 'bpe', not {self.tokenizer!r}"),
            (not (_number(self.holdout) and hold.lo <= self.holdout <= hold.hi),
             f"held-out fraction {self.holdout!r:.40} is outside [{hold.lo:g}, {hold.hi:g}]"
             if _number(self.holdout) else f"held-out fraction must be a number in "
             f"[{hold.lo:g}, {hold.hi:g}], not {self.holdout!r:.40}"),
            (not (_whole(self.autosave_steps) and steps.lo <= self.autosave_steps <= steps.hi),
             f"autosave_steps = {self.autosave_steps!r:.40} is outside 0 (off)"
             f"{_upto(steps.hi)}" if _whole(self.autosave_steps) else
             f"autosave_steps must be a whole number from 0 (off){_upto(steps.hi)}, not "
             f"{self.autosave_steps!r:.40}"),
            (not (_number(self.autosave_minutes) and math.isfinite(self.autosave_minutes)
                  and minutes.lo <= self.autosave_minutes <= minutes.hi),
             f"autosave_minutes = {self.autosave_minutes!r:.40} is not a number from 0 (off)"
             f"{_upto(minutes.hi)}"),
            (not (_whole(self.keep) and self.keep >= 1),  # (1.5 passed, and the run ended in a
             f"keep = {self.keep!r:.40}: a run keeps a whole number of its latest snapshots, "
             "at least 1"),  # TypeError after its last save; "3" said "'>=' not supported")
            (not (isinstance(self.prompts, tuple) and 1 <= len(self.prompts) <= MAX_PROMPTS
                  and all(isinstance(p, str) and len(p) <= MAX_PROMPT_CHARS
                          for p in self.prompts)),
             f"prompts must be 1 to {MAX_PROMPTS} texts of at most {MAX_PROMPT_CHARS} "
             "characters"),
        ]
        return problems + [message for bad, message in cases if bad]

    def model_config(self, vocab: int) -> MambaConfig:
        """The new model's config: the preset's, with the sizes ``model`` gives over it (a
        settings file's [model] naming only norm_eps got d 128 x 4 layers, MambaConfig's own,
        not the preset's shape)."""
        if self.model:
            fields: dict[str, Any] = {**PRESETS.get(self.preset, {}), **self.model}  # validated
            return MambaConfig(vocab_size=vocab, **fields)  # by MambaConfig
        return preset(self.preset, vocab)

    def for_corpus(self, corpus_bytes: int) -> RunSpec:
        """This spec with tokenizer "auto" made concrete for a corpus of ``corpus_bytes``
        (``choose_tokenizer``). A learning rate left at the preset's byte default follows the
        tokenizer (a BPE run's is ``BPE_LR_SCALE`` times higher); any other rate is kept."""
        kind = choose_tokenizer(self.tokenizer, corpus_bytes)
        train, d = self.train, PRESET_DEFAULTS.get(self.preset)
        if kind == "bpe" and d is not None and train.lr == d.lr:
            train = replace(train, lr=d.training(kind)["lr"])
        return replace(self, tokenizer=kind, train=train)
