"""The model card: README.md in an exported folder (corpus, config, training, held-out loss,
samples, and how to load the files)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import checkpoint as ckpt
from ..defaults import DEFAULT_PROMPT
from ..errors import MambaStudioError
from ..sampling import SamplingConfig
from ..words import plural
from .source import RunSource

SAMPLE_PROMPTS = (DEFAULT_PROMPT,)  # a model folder's; a run's card uses its preview prompts
SAMPLE_TOKENS = 48
MAX_CARD_SAMPLES = 2
# The exported weights are evaluated on the run's held-out split at export time, over the same
# bounded sample as training and ``eval RUN`` (HELDOUT_SAMPLE_TOKENS): 0.15-0.4 s for the presets
# on the bundled corpus; a large model on a large corpus can take longer, so the evaluation gives up
# after EVAL_SECONDS and the card states the last loss measured, with its step.
EVAL_SECONDS = 10.0

USAGE = {
    "merged": """```python
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained("{out}")
model = AutoModelForCausalLM.from_pretrained("{out}")
# a prompt is read after <|endoftext|>, as every training document starts
ids = torch.tensor([[tok.eos_token_id, *tok("The").input_ids]])
out = model.generate(ids, max_new_tokens=40, do_sample=False)  # transformers 4.x: with a
print(tok.decode(out[0], skip_special_tokens=True))  # 2-token prompt, add use_cache=False
```""",
    "peft": """```python
from peft import AutoPeftModelForCausalLM, PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained("{out}")
# base_model_name_or_path in adapter_config.json points at ./base (the unmerged base):
model = AutoPeftModelForCausalLM.from_pretrained("{out}")
# or, wherever the folder moved to:
model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("{out}/base"), "{out}")
```""",
    "base": """This is the unmerged base of a PEFT adapter (the folder above); load it with
`AutoModelForCausalLM.from_pretrained` and apply the adapter with `PeftModel.from_pretrained`.""",
}


def _samples(run: RunSource) -> list[str]:
    """Greedy samples for the card: of the run's own preview prompts (the first two), else of
    SAMPLE_PROMPTS. Its second prompt was a line break, whose sample a small model often made
    blank lines: a sample of only blank space says so."""
    own = run.spec.get("prompts") if isinstance(run.spec, dict) else None
    prompts = ([p for p in own if isinstance(p, str) and p][:MAX_CARD_SAMPLES]
               if isinstance(own, list) else []) or list(SAMPLE_PROMPTS)
    out = []
    for prompt in prompts:
        cfg = SamplingConfig(temperature=0.0, max_new_tokens=SAMPLE_TOKENS, seed=0)
        text = prompt + "".join(run.lm.generate(prompt, cfg))
        out.append(text if text.strip() else f"(only blank space after {prompt!r})")
    return out


@dataclass(frozen=True)
class HeldOut:
    """The held-out loss the card states: ``report`` (an EvalReport dict; only "loss" when a
    snapshot saved just the loss) measured at ``step`` of a run whose exported weights are from
    ``exported_step``; ``report`` None when nothing was measured."""

    report: dict[str, Any] | None
    step: int | None
    exported_step: int
    note: str | None = None  # why the exported weights were not evaluated now (for the user)

    @property
    def current(self) -> bool:
        return self.report is not None and self.step == self.exported_step


def _heldout_set(run: RunSource) -> Any:
    """The run's saved held-out split as training evaluates it (``run.held_out_set``); None
    without one."""
    from .. import runformat as rf
    from ..run import held_out_set

    assert run.run_dir is not None
    val = held_out_set(rf.read_data(run.run_dir), int(run.train.get("seq_len") or 0),
                       run.lm.tokenizer)
    return None if isinstance(val, np.ndarray) and len(val) < 2 else val


def measure_held_out(run: RunSource, budget_s: float = EVAL_SECONDS,
                     progress: Callable[[str], None] | None = None) -> HeldOut:
    """The held-out loss of the exported weights: evaluated now on the run's saved held-out
    split (the sample ``python -m engine eval RUN`` scores, stopped after ``budget_s``); else the
    loss saved with the exported snapshot; else the last one recorded, at an earlier step.
    ``progress`` hears a line as the scoring starts (up to ``budget_s``, said nowhere before)."""
    from ..evaluation import HELDOUT_SAMPLE_TOKENS, EvalStopped, evaluate

    note = None
    if run.run_dir is not None and run.train.get("seq_len"):
        t0 = time.perf_counter()
        try:
            val = _heldout_set(run)
            if val is not None:
                if progress is not None:
                    progress(f"scoring the weights on the run's held-out set for the model card "
                             f"(at most {budget_s:.0f} s)...")
                r = evaluate(run.lm, val, int(run.train["seq_len"]), max_tokens=HELDOUT_SAMPLE_TOKENS,
                             should_stop=lambda: time.perf_counter() - t0 > budget_s)
                return HeldOut(asdict(r), run.step, run.step)
        except EvalStopped:
            note = (f"the exported weights' held-out loss was not measured (it takes over "
                    f"{budget_s:.0f} s); run `python -m engine eval {run.run_dir}` for it")
        except (MambaStudioError, OSError, ValueError, KeyError, TypeError) as exc:
            note = f"the exported weights' held-out loss was not measured ({exc})"
    if run.snap_val_loss is not None:  # saved with these weights (the loss only): nothing to say
        return HeldOut({"loss": run.snap_val_loss}, run.step, run.step)
    if run.val is not None and run.val_step is not None:
        if run.val_step != run.step and note is not None:
            note += f"; the card states the loss at step {run.val_step:,}"
        return HeldOut(run.val, run.val_step, run.step, note)
    return HeldOut(None, None, run.step, note)


def _held_out_line(h: HeldOut, run: RunSource) -> str:
    """"- held-out loss L at step S (the exported weights; perplexity ...)", or, measured at an
    earlier step than the exported weights', that step and how to measure theirs."""
    v = h.report
    if v is None:
        return "- held-out loss: not measured (no held-out split, or no evaluation finished)"
    parts = []
    if h.current:
        parts.append("the exported weights")
    if "perplexity" in v:
        parts.append(f"perplexity {v['perplexity']:.2f}, {v['bits_per_byte']:.3f} bits/byte, "
                     f"top-1 {v['accuracy']:.3f}, {_scored(v)}")
    if not h.current:
        how = (f"`python -m engine eval {run.run_dir}`" if run.run_dir is not None
               else f"`python -m engine eval {run.folder} CORPUS` on the held-out text")
        parts.append(f"the exported weights are from step {h.exported_step:,}; run {how} for "
                     "their loss")
    where = f" at step {h.step:,}" if h.step is not None else ""
    return f"- held-out loss {v['loss']:.4f}{where} ({'; '.join(parts)})"


def _scored(v: dict[str, Any]) -> str:
    n, of = int(v.get("tokens", 0)), int(v.get("of_tokens", 0) or 0)
    return f"a sample of {n:,} of {of:,} tokens" if of > n else f"{n:,} tokens"


def corpus_summary(folder: Path) -> str:
    """"N files, B bytes, T tokens (H held out)" from a run folder's data manifest and its
    training and held-out spans ("" if none): T and H are the targets ``train`` counts (the
    token file also holds each document's leading end-of-text id, which predicts nothing)."""
    from .. import runformat as rf
    from ..safeio import open_regular, read_json

    path = Path(folder) / rf.DATA_MANIFEST
    try:
        m = read_json(path, what="data manifest")
        rf.npy_length(Path(folder) / rf.IDS)  # a token file that is one (a FIFO hung the export)
        spans = {}
        for kind in ("train_spans", "val_spans"):  # (bounded reads)
            with open_regular(Path(folder) / rf.DATA_FILES[kind], "token file") as f:
                a = np.load(f, allow_pickle=False)
            spans[kind] = int(a[:, 1].sum()) if a.size else 0
        sources = m.get("sources", [])
        n_bytes = rf.corpus_bytes(m)
        # targets: the spans' lengths, as ``train`` prints them, for every records mode
        held = spans["val_spans"]
        return (f"{len(sources)} file(s), {n_bytes:,} bytes, {spans['train_spans'] + held:,} "
                f"tokens ({held:,} held out)")
    except (MambaStudioError, OSError, ValueError, KeyError, TypeError, AttributeError,
            MemoryError):  # (a damaged .npy header asking for 14.6 TiB failed the export)
        return ""


def _model_lines(run: RunSource) -> list[str]:
    cfg, tok = run.lm.config, run.lm.tokenizer
    return ["## Model", "",
            f"- {cfg.n_layer} layers, d_model {cfg.d_model}, d_state {cfg.d_state}, d_conv "
            f"{cfg.d_conv}, expand {cfg.expand}, dt_rank {cfg.dt_rank}; {run.lm.n_params:,} parameters",
            f"- tokenizer: {tok.kind} ({tok.vocab_size:,} tokens; `<|endoftext|>` = {tok.eos_id} "
            f"is bos/eos/pad); embedding table {cfg.vocab_size:,} rows, "
            f"{'tied' if cfg.tie_embeddings else 'untied'} output head"]


def _use_lines(kind: str, out: str) -> list[str]:
    return ["", "## Use", "", USAGE[kind].format(out=out), "",
            "llama.cpp: `python -m engine export --gguf RUN model.gguf`, then "
            "`llama-cli -m model.gguf -p \"The\"`.", ""]


def _base_origin(run: RunSource) -> str:
    """Where the weights a LoRA run started from came from: its --init model or a new model."""
    spec = run.spec
    if spec.get("init"):
        return (f"the model the run started from (`--init {spec['init']}` as it was then), "
                "unchanged by the run")
    if spec:
        what = ("a custom configuration" if spec.get("model")
                else f"the {spec.get('preset', '?')} preset")
        return (f"a new model ({what}, `{spec.get('init_scheme', 'default')}` weight init, seed "
                f"{run.train.get('seed', 0)}) that the run did not train: random weights, "
                "useless without the adapter")
    return "the weights the run started from, before its adapter"


def _started_from(run: RunSource) -> str:
    """The weights a run from ``--init`` started from, by name: run.json's record (a run and its
    step) rather than the path as typed (relative to where the user was, or a home folder's
    absolute path in a card meant to be shared)."""
    from .. import runformat as rf

    init = run.run_dir and rf.read_run_json(run.run_dir).get("init_from")
    if isinstance(init, dict) and isinstance(init.get("path"), str):
        p, step = Path(init["path"]), init.get("step")
        if type(step) is int:
            return f"run `{p.parent.parent.name}` at step {step:,}"
        return f"`{p.name}`"
    return f"`{Path(str(run.spec['init'])).name}`"


def _base_card(run: RunSource, out: str) -> str:
    lora = run.train.get("lora") or {}
    targets = ", ".join(lora.get("targets", [])) or "?"
    return "\n".join(
        ["---", "library_name: transformers", "tags: [mamba, mamba-studio]", "---", "",
         "# The unmerged base of a Mamba Studio LoRA adapter", "",
         "These are the weights the adapter in the folder above (`..`: adapter_config.json, "
         "adapter_model.safetensors and its README.md) was trained on, before any adapter: "
         f"{_base_origin(run)}. The run trained only the LoRA adapter (r={lora.get('rank', '?')} "
         f"on {targets}); its training and held-out loss are in `../README.md`. On their own "
         "these weights are not the trained model: apply the adapter (below) or use the merged "
         f"export (`python -m engine export --merged {run.run_dir or 'RUN'} OUT`).", "",
         *_model_lines(run), "",
         "## Use", "", USAGE["base"], "",
         "```python",
         "from peft import PeftModel",
         "from transformers import AutoModelForCausalLM",
         f'model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("{out}"), "{out}/..")',
         "```", ""])


def card_text(run: RunSource, kind: str, out: str = ".", held: HeldOut | None = None,
              caveats: list[str] | tuple[str, ...] = ()) -> str:
    """Markdown for ``kind`` in ("merged", "peft", "base"). ``held``: the held-out loss to state
    (``measure_held_out``; measured here when None). ``caveats``: lines the card says before
    its Use section (a PEFT adapter's targets that not every transformers line applies: the
    export said so, and the card, which travels with the files, did not)."""
    if kind == "base":
        return _base_card(run, out)
    tc = run.train
    lines = ["---", "library_name: transformers" if kind != "peft" else "library_name: peft",
             "tags: [mamba, mamba-studio]", "---", "",
             "# A Mamba-1 language model trained with Mamba Studio", "", *_model_lines(run)]
    if tc:
        lora = tc.get("lora")
        how = (f"LoRA r={lora['rank']} (alpha {lora.get('alpha') or lora['rank']}, dropout "
               f"{lora.get('dropout', 0.0)}) on {', '.join(lora['targets'])}" if lora
               else "only x_proj (WSLA)" if tc.get("wsla") else "all weights")
        lines += ["", "## Training", "",
                  f"- {plural(run.step, 'optimizer step')}, batch {tc.get('batch_size')} x "
                  f"{tc.get('seq_len')} tokens x {tc.get('grad_accum', 1)} accumulation, "
                  f"lr {tc.get('lr')}; trained: {how}"]
        if run.spec.get("init"):  # (a reader took 15 steps of LoRA for the whole training)
            lines.append(f"- started from the trained weights of {_started_from(run)}, not "
                         "from random ones")
        corpus = corpus_summary(run.folder if run.run_dir is None else run.run_dir)
        if corpus:
            lines.append(f"- corpus: {corpus}")
        lines.append(_held_out_line(held if held is not None else measure_held_out(run), run))
    lines += ["", "## Samples (greedy)", ""]
    for s in _samples(run):
        lines += ["```", s.replace("```", "'''"), "```"]
    if caveats:
        lines += ["", "## Caveats", "", *(f"- {c}" for c in caveats)]
    lines += _use_lines(kind, out)
    return "\n".join(lines)


def write_card(out: str | Path, run: RunSource, kind: str, held: HeldOut | None = None,
               caveats: list[str] | tuple[str, ...] = ()) -> None:
    ckpt.atomic_write_bytes(Path(out) / "README.md",
                            card_text(run, kind, ".", held, caveats).encode("utf-8"))
