"""Train one task through the engine's public API and write its learning curve as JSON lines.

    python -m benchmarks.learning copy --out benchmarks/results/learning
    python -m benchmarks.learning text --steps 3000 --set lr=2e-3 --set seq_len=512

The model and training settings are the engine's defaults for ``--preset`` (nothing
task-specific); ``--set key=value`` overrides a TrainConfig field for a study, ``--init`` picks
the init scheme. The first line describes the run (settings, n-gram baselines for text); each
following line is one evaluation: step, tokens, train_s (training time, evaluations excluded),
wall_s, train loss and the metric (answer ``accuracy`` or held-out ``bpb``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from engine.runtime import configure

configure(tune_allocator=True)  # same process settings as training

import numpy as np

import engine.defaults
import engine.params
from engine import (
    PRESETS,
    BPETokenizer,
    ByteTokenizer,
    MambaConfig,
    MambaLM,
    StepReport,
    TrainConfig,
    TrainControl,
    Trainer,
    encode_documents,
    evaluate,
    load_corpus,
)
from engine.config import padded_vocab
from engine.packing import PackedRows, line_end_table, pack_documents

from .ngram import baselines
from .score import answer_accuracy, token_chars
from .tasks import TASKS, split_documents, stdlib_documents

TEXT_TRAIN_BYTES = 8_000_000
TEXT_HELDOUT_BYTES = 300_000


def _parse_set(items: list[str]) -> dict[str, Any]:
    types = {f.name: f.type for f in fields(TrainConfig)}
    out: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in types:
            raise SystemExit(f"--set {item}: no TrainConfig field {key!r}")
        kind = str(types[key])
        out[key] = float(value) if "float" in kind else int(value) if "int" in kind else value
    return out


def line_bounds(line_end: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) (k,) of the lines of ``ids`` (T,): a line ends after a token marked in
    ``line_end`` (vocab,), or at the end of ``ids``."""
    ends = np.flatnonzero(line_end[ids]) + 1
    ends = np.append(ends, len(ids)) if not len(ends) or ends[-1] != len(ids) else ends
    return np.concatenate([[0], ends[:-1]]), ends


def predict_next(lm: MambaLM, ids: np.ndarray, batch: int = 64, lead: bool = False) -> np.ndarray:
    """ids (T,) -> (T,) argmax guess for each position from the logits one step before, each
    line read on its own from its first token (a fresh state, whatever the training rows were;
    lines are right-padded to a batch, which a causal model never sees). Entry 0 of a line is -1,
    unless ``lead``: each line is then read after an end-of-text token, as line records train it
    (``engine.documents``: every record starts with one), and its entry 0 is guessed too."""
    out = np.full(len(ids), -1, dtype=np.int64)
    starts, ends = line_bounds(line_end_table(lm.tokenizer), ids)
    k = int(lead)
    for s in range(0, len(starts), batch):
        a, b = starts[s : s + batch], ends[s : s + batch]
        width = int((b - a).max()) + k
        x = np.zeros((len(a), width), dtype=np.int64)
        x[:, 0] = lm.tokenizer.eos_id  # overwritten below unless ``lead``
        for r, (i, j) in enumerate(zip(a, b, strict=True)):
            x[r, k : k + j - i] = ids[i:j]
        guess = lm.logits(x).argmax(axis=-1)
        for r, (i, j) in enumerate(zip(a, b, strict=True)):
            out[i + 1 - k : j] = guess[r, : j - i - 1 + k]
    return out


def calibrate(lm: MambaLM, train_ids: np.ndarray, cfg: TrainConfig, steps: int = 20) -> float:
    """Seconds per optimizer step of ``cfg`` on this machine, from a throwaway copy of ``lm``
    (this also compiles the kernels, or loads them from Numba's cache, before the clock starts)."""
    copy = MambaLM(lm.config, {k: v.copy() for k, v in lm.params.items()}, lm.tokenizer)
    trial = Trainer(copy, train_ids, train_ids[:0], replace(cfg, max_steps=steps + 3, warmup_steps=0))
    times: list[float] = []
    trial.run(on_step=lambda r: times.append(r.elapsed_s))
    return (times[-1] - times[2]) / (len(times) - 3)


def text_rows(tok: Any, text: str, seq_len: int, records: str) -> PackedRows:
    """Packed rows of ``text`` made by the product's path: the text is written as a one-file
    corpus, split by ``engine.encode_documents`` ("file": one document, cut into rows after line
    breaks; "line": every non-blank line its own document, its line break replaced by the
    end-of-text id) and packed with a state reset at each document, as ``engine.run`` does."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "train.txt"
        path.write_text(text, encoding="utf-8")
        docs = encode_documents(load_corpus([path]), tok, records)
    return pack_documents(docs.ids, docs.spans(), seq_len, tok)


def load_data(task: str, tokenizer: str, bpe_vocab: int, seed: int,  # type: ignore[no-untyped-def]
              train_bytes: int = TEXT_TRAIN_BYTES):
    """-> (tokenizer, train text, train ids, held-out text, held-out ids, baselines dict)."""
    if task in TASKS:
        t = TASKS[task]
        train_text, held_text = t.text(200_000, seed), t.text(1_000, seed + 1)
        base = {"chance": 1 / 16}
    else:
        docs = stdlib_documents()
        train_text, held_text = split_documents(docs, train_bytes, TEXT_HELDOUT_BYTES)
        t0 = time.perf_counter()
        base = baselines(train_text.encode(), held_text.encode())
        base["ngram_s"] = round(time.perf_counter() - t0, 1)
        base["train_bytes"], base["heldout_bytes"] = len(train_text.encode()), len(held_text.encode())
    kind = engine.choose_tokenizer(tokenizer, len(train_text.encode()))  # "auto": as a run picks
    tok = BPETokenizer.train([train_text], vocab_size=bpe_vocab) if kind == "bpe" else ByteTokenizer()
    return tok, train_text, tok.encode(train_text), held_text, tok.encode(held_text), base


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.learning", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("task", choices=[*TASKS, "text"])
    ap.add_argument("--preset", default=engine.defaults.DEFAULT_PRESET, choices=sorted(PRESETS))
    ap.add_argument("--init", default="default", choices=list(engine.params.INITS))
    ap.add_argument("--tokenizer", default="auto", choices=["auto", "bytes", "bpe"],
                    help="auto (the product's default): by the training text's size")
    ap.add_argument("--bpe-vocab", type=int, default=2048)
    ap.add_argument("--minutes", type=float, default=10.0, help="training time (evaluations excluded)")
    ap.add_argument("--steps", type=int, help="optimizer steps, the schedule's length (default: as many "
                    "as fit in --minutes at the speed measured over the first steps)")
    ap.add_argument("--evals", type=int, default=12, help="evaluations along the run")
    ap.add_argument("--target", type=float, help="stop once the metric reaches this")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--model", action="append", default=[], metavar="KEY=VALUE",
                    help="override a MambaConfig field of the preset (d_model, n_layer, d_state...)")
    ap.add_argument("--out-proj", default="init", choices=["init", "zero", "depth"],
                    help="study only: out_proj.weight as initialised, zeros, or / n_layer more")
    ap.add_argument("--records", default="file", choices=["file", "line", "stream"],
                    help="file (as a run of the app or CLI on one file): the text is one document "
                         "cut into rows after line breaks; line: every line its own document "
                         "(state reset at each line); stream: rows cut anywhere")
    ap.add_argument("--train-bytes", type=int, default=TEXT_TRAIN_BYTES,
                    help="text: bytes of training text (held-out stays %(default)s's split)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", default="", help="name suffix of the output file")
    ap.add_argument("--out", default="benchmarks/results/learning")
    a = ap.parse_args(argv)

    tok, train_text, train_ids, held_text, held_ids, base = load_data(a.task, a.tokenizer,
                                                                      a.bpe_vocab, a.seed, a.train_bytes)
    cfg = TrainConfig.for_preset(a.preset, tok.kind, epochs=1_000, seed=a.seed, **_parse_set(a.set))
    shape = {k: int(v) for k, _, v in (m.partition("=") for m in a.model)}
    # a new config (not ``replace`` of the preset's), so dt_rank and d_inner follow d_model
    model_cfg = MambaConfig(**{**PRESETS[a.preset], **shape}, vocab_size=padded_vocab(tok.vocab_size))
    lm = MambaLM.create(model_cfg, tok, seed=a.seed, init=a.init)
    for name, w in lm.params.items():
        if name.endswith("out_proj.weight") and a.out_proj != "init":
            w *= 0.0 if a.out_proj == "zero" else 1.0 / math.sqrt(lm.config.n_layer)
    steps, speed = a.steps, calibrate(lm, train_ids, cfg)
    if steps is None:
        steps = max(1, int(0.97 * a.minutes * 60 / speed))
    cfg = replace(cfg, max_steps=steps)
    rows = None if a.records == "stream" else text_rows(tok, train_text, cfg.seq_len, a.records)
    if rows is not None:
        train_ids = rows.ids
    trainer = Trainer(lm, train_ids, train_ids[:0], cfg, rows=rows)
    name = f"{a.task}_{a.preset}{'_' + a.tag if a.tag else ''}"
    out = Path(a.out) / f"{name}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    head = {"run": name, "task": a.task, "preset": a.preset, "init": a.init, "tokenizer": tok.kind,
            "records": a.records, "model": shape, "out_proj": a.out_proj,
            "vocab": lm.config.vocab_size, "params": lm.n_params, "train_tokens": len(train_ids),
            "train_config": {k: v for k, v in asdict(cfg).items() if k != "lora"},
            "baselines": base, "s_per_step": round(speed, 4), "cpus": len(os.sched_getaffinity(0))}
    every = max(1, steps // a.evals)
    control = TrainControl()
    chars = token_chars(tok, lm.config.vocab_size)
    state = {"eval_s": 0.0, "t0": time.perf_counter()}

    def measure(rep: StepReport) -> None:
        te = time.perf_counter()
        if a.task in TASKS:
            guess = predict_next(lm, held_ids, lead=a.records == "line")
            metric = {"accuracy": answer_accuracy(held_text, guess, TASKS[a.task].answer_len,
                                                  held_ids, chars)}
        else:
            metric = {"bpb": evaluate(lm, held_ids, cfg.seq_len).bits_per_byte}
        state["eval_s"] += time.perf_counter() - te
        train_s = rep.elapsed_s - (state["eval_s"] - (time.perf_counter() - te))
        row = {"step": rep.step, "tokens": rep.step * trainer.rows_per_step * cfg.seq_len,
               "train_s": round(train_s, 1), "wall_s": round(time.perf_counter() - state["t0"], 1),
               "loss": round(rep.loss, 4), "lr": rep.lr, **{k: round(v, 4) for k, v in metric.items()}}
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(name, json.dumps(row), file=sys.stderr, flush=True)
        value = next(iter(metric.values()))
        if a.target is not None and (value >= a.target if a.task in TASKS else value <= a.target):
            control.stop()
        if train_s > a.minutes * 60:
            control.stop()

    def on_step(rep: StepReport) -> None:
        overdue = rep.elapsed_s - state["eval_s"] > a.minutes * 60
        if rep.step % every == 0 or rep.step == trainer.total_steps or overdue:
            measure(rep)

    out.write_text(json.dumps(head) + "\n")
    print(name, json.dumps(head), file=sys.stderr, flush=True)
    trainer.run(on_step=on_step, control=control)
    return 0
