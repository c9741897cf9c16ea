"""The model card: README.md in an exported folder (corpus, config, training, held-out loss,
samples, and how to load the files)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import checkpoint as ckpt
from ..errors import MambaStudioError
from ..sampling import SamplingConfig
from .source import RunSource

SAMPLE_PROMPTS = ("The ", "\n")
SAMPLE_TOKENS = 48

USAGE = {
    "merged": """```python
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained("{out}")
model = AutoModelForCausalLM.from_pretrained("{out}")
ids = tok("The ", return_tensors="pt").input_ids
print(tok.decode(model.generate(ids, max_new_tokens=40, do_sample=False)[0]))
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
    out = []
    for prompt in SAMPLE_PROMPTS:
        cfg = SamplingConfig(temperature=0.0, max_new_tokens=SAMPLE_TOKENS, seed=0)
        out.append(prompt + "".join(run.lm.generate(prompt, cfg)))
    return out


def corpus_summary(folder: Path) -> str:
    """"N files, B bytes, T tokens (H held out)" from a run folder's data manifest and held-out
    spans ("" if none)."""
    from .. import runformat as rf
    from ..safeio import read_json

    path = Path(folder) / rf.DATA_MANIFEST
    try:
        m = read_json(path, what="data manifest")
        ids = np.load(Path(folder) / rf.IDS, mmap_mode="r")
        val = np.load(Path(folder) / rf.DATA_FILES["val_spans"], allow_pickle=False)
        sources = m.get("sources", [])
        n_bytes = sum(int(s.get("bytes", 0)) for s in sources)
        # held-out targets: the spans' lengths, as ``train`` prints them, for every records mode
        return (f"{len(sources)} file(s), {n_bytes:,} bytes, {len(ids):,} tokens "
                f"({int(val[:, 1].sum()) if val.size else 0:,} held out)")
    except (MambaStudioError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return ""


def card_text(run: RunSource, kind: str, out: str = ".") -> str:
    """Markdown for ``kind`` in ("merged", "peft", "base")."""
    cfg, tok, tc = run.lm.config, run.lm.tokenizer, run.train
    lines = ["---", "library_name: transformers" if kind != "peft" else "library_name: peft",
             "tags: [mamba, mamba-studio]", "---", "",
             "# A Mamba-1 language model trained with Mamba Studio", "",
             "## Model", "",
             f"- {cfg.n_layer} layers, d_model {cfg.d_model}, d_state {cfg.d_state}, d_conv "
             f"{cfg.d_conv}, expand {cfg.expand}, dt_rank {cfg.dt_rank}; {run.lm.n_params:,} parameters",
             f"- tokenizer: {tok.kind} ({tok.vocab_size:,} tokens; `<|endoftext|>` = {tok.eos_id} "
             f"is bos/eos/pad); embedding table {cfg.vocab_size:,} rows, "
             f"{'tied' if cfg.tie_embeddings else 'untied'} output head"]
    if tc:
        lora = tc.get("lora")
        how = (f"LoRA r={lora['rank']} on {', '.join(lora['targets'])}" if lora
               else "only x_proj (WSLA)" if tc.get("wsla") else "all weights")
        lines += ["", "## Training", "",
                  f"- {run.step:,} optimizer steps, batch {tc.get('batch_size')} x "
                  f"{tc.get('seq_len')} tokens x {tc.get('grad_accum', 1)} accumulation, "
                  f"lr {tc.get('lr')}; trained: {how}"]
        corpus = corpus_summary(run.folder)
        if corpus:
            lines.append(f"- corpus: {corpus}")
        v = run.val
        lines.append(f"- held-out loss {v['loss']:.4f} (perplexity {v['perplexity']:.2f}, "
                     f"{v['bits_per_byte']:.3f} bits/byte, top-1 {v['accuracy']:.3f}, "
                     f"{v['tokens']:,} tokens)" if v else
                     "- held-out loss: not measured (no epoch finished with a held-out split)")
    if kind != "base":
        lines += ["", "## Samples (greedy)", ""]
        for s in _samples(run):
            lines += ["```", s.replace("```", "'''"), "```"]
    lines += ["", "## Use", "", USAGE[kind].format(out=out), "",
              "llama.cpp: `python -m engine export --gguf RUN model.gguf`, then "
              "`llama-cli -m model.gguf -p \"The \"`.", ""]
    return "\n".join(lines)


def write_card(out: str | Path, run: RunSource, kind: str) -> None:
    ckpt.atomic_write_bytes(Path(out) / "README.md", card_text(run, kind, ".").encode("utf-8"))
