"""``python -m engine {train,generate,eval,bench}``: the headless face of Mamba Studio."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NoReturn

from .errors import MambaStudioError
from .trainer import format_duration

SAMPLE_CORPUS = Path(__file__).resolve().parent.parent / "assets" / "sample_corpus"


class _Parser(argparse.ArgumentParser):
    """Bad arguments give one line (``error: ...``) and exit code 2, without the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{v} is out of range [{lo}, {hi}]")
        return v

    return parse


def _float_in(lo: float, hi: float, lo_open: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(v) or v < lo or v > hi or (lo_open and v == lo):
            raise argparse.ArgumentTypeError(
                f"{text} is out of range {'(' if lo_open else '['}{lo:g}, {hi:g}]")
        return v

    return parse


def _text(value: str) -> str:
    """A command-line string must be valid UTF-8 (Python maps undecodable bytes to surrogates)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise argparse.ArgumentTypeError(
            f"not valid UTF-8 (byte 0x{ord(value[exc.start]) & 0xFF:02x} at character {exc.start})"
        ) from None
    return value


def _names(choices: Iterable[str]) -> Callable[[str], str]:
    allowed = list(choices)

    def parse(text: str) -> str:
        bad = [x for x in text.split(",") if x not in allowed]
        if bad or not text:
            raise argparse.ArgumentTypeError(f"unknown {bad or [text]}; choose from {allowed}")
        return text

    return parse


POS = _int_in(1, 1 << 40)
NONNEG = _int_in(0, 1 << 40)


def _progress(report) -> None:  # type: ignore[no-untyped-def]
    frac = report.step / max(report.total_steps, 1)
    bar = "#" * int(30 * frac) + "-" * (30 - int(30 * frac))
    flag = " NaN-skipped" if report.nonfinite else ""
    sys.stderr.write(
        f"\r[{bar}] {report.step}/{report.total_steps} ep {report.epoch + 1} loss {report.loss:.4f} "
        f"gnorm {report.grad_norm:.3f} lr {report.lr:.2e} {report.tokens_per_s:,.0f} tok/s "
        f"ETA {format_duration(report.eta_s)}{flag}   "
    )
    sys.stderr.flush()


def cmd_train(a: argparse.Namespace) -> int:
    from . import (
        BPETokenizer,
        ByteTokenizer,
        LoRAConfig,
        MambaLM,
        SamplingConfig,
        TrainConfig,
        Trainer,
        encode_corpus,
        load_corpus,
        load_tokenizer,
        preset,
        split_holdout,
    )
    from .limits import check_run

    corpus = load_corpus(a.corpus or [SAMPLE_CORPUS])
    for path, why in corpus.rejected:
        print(f"skipped {path}: {why}", file=sys.stderr)
    print(f"corpus: {len(corpus.files)} files, {corpus.n_bytes:,} bytes", file=sys.stderr)
    lora = None
    if a.lora:
        lora = LoRAConfig(tuple(a.lora.split(",")), rank=a.lora_rank, alpha=a.lora_alpha,
                          dropout=a.lora_dropout)
    given = {"batch_size": a.batch, "seq_len": a.seq_len, "lr": a.lr, "warmup_steps": a.warmup,
             "weight_decay": a.weight_decay}  # None: the preset's default (engine/defaults.py)
    cfg = TrainConfig.for_preset(
        a.preset, epochs=a.epochs, grad_accum=a.accum, max_grad_norm=a.clip, seed=a.seed,
        max_steps=a.max_steps, activation_checkpointing=a.checkpointing, wsla=a.wsla, lora=lora,
        eval_every=a.eval_every, **{k: v for k, v in given.items() if v is not None},
    )
    if a.resume:
        from .checkpoint import read_config

        check_run(read_config(Path(a.resume)), cfg, corpus.n_bytes)
        ids = encode_corpus(corpus.texts, load_tokenizer(a.resume))
        train_ids, val_ids = split_holdout(ids, a.holdout, cfg.seq_len)
        trainer = Trainer.resume(a.resume, train_ids, val_ids)
        lm = trainer.lm
        print(f"resumed at step {trainer.cursor.step}", file=sys.stderr)
    else:
        if a.init:
            lm = MambaLM.load(a.init)
        else:
            tok = (BPETokenizer.train(corpus.texts, vocab_size=a.bpe_vocab)
                   if a.tokenizer == "bpe" else ByteTokenizer())
            lm = MambaLM.create(preset(a.preset, tok.vocab_size), tok, seed=a.seed)
        est = check_run(lm.config, cfg, corpus.n_bytes)
        print(f"memory: {est.human()}", file=sys.stderr)
        ids = encode_corpus(corpus.texts, lm.tokenizer)
        train_ids, val_ids = split_holdout(ids, a.holdout, cfg.seq_len)
        trainer = Trainer(lm, train_ids, val_ids, cfg)
    assert trainer.trainable is not None
    print(f"model: {lm.n_params:,} parameters; {trainer.trainable.describe()}; optimizer state "
          f"{trainer.optimizer.state_bytes():,} bytes; {len(train_ids):,} train / "
          f"{len(val_ids):,} held-out tokens", file=sys.stderr)
    for note in trainer.trainable.notices:
        print(f"note: {note}", file=sys.stderr)
    sampling = SamplingConfig(max_new_tokens=a.sample_tokens, seed=a.seed)

    def show_sample(tag: str) -> None:
        if a.sample_tokens > 0:
            text = "".join(lm.generate(a.prompt, sampling))
            print(f"\n--- sample {tag} ---\n{a.prompt}{text}\n", file=sys.stderr)

    def on_epoch(rep) -> None:  # type: ignore[no-untyped-def]
        sys.stderr.write("\n")
        val = (f" | held-out loss {rep.val.loss:.4f} ppl {rep.val.perplexity:.2f} "
               f"bpb {rep.val.bits_per_byte:.3f} acc {rep.val.accuracy:.3f}") if rep.val else ""
        print(f"epoch {rep.epoch + 1}: train loss {rep.train_loss:.4f}, grad norm "
              f"{rep.grad_norm:.3f}{val}", file=sys.stderr)
        show_sample(f"after epoch {rep.epoch + 1}")
        trainer.save(a.out)

    show_sample("before training")
    t0 = time.perf_counter()
    try:
        trainer.run(on_step=_progress, on_epoch=on_epoch)
    except KeyboardInterrupt:
        print("\ninterrupted: saving a consistent checkpoint", file=sys.stderr)
    trainer.save(a.out)
    print(f"\nsaved {a.out} after {trainer.cursor.step} steps in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)
    if lora is not None and a.export_adapter:
        from .lora import LoRATrainable

        assert isinstance(trainer.trainable, LoRATrainable)
        for w in trainer.trainable.save_adapter(a.export_adapter):
            print(f"warning: {w}", file=sys.stderr)
    return 0


def cmd_generate(a: argparse.Namespace) -> int:
    from . import MambaLM, SamplingConfig

    lm = MambaLM.load(a.model)
    lm.check_finite(a.model)
    backend = None
    if a.backend in ("gpu", "auto"):
        from .gpu import open_stepper

        backend, reason = open_stepper(lm)
        print(f"backend: {'wgpu' if backend else 'cpu'} ({reason})", file=sys.stderr)
        if backend is None and a.backend == "gpu":
            return 2
    s = SamplingConfig(temperature=a.temperature, top_k=a.top_k, top_p=a.top_p,
                       max_new_tokens=a.max_new_tokens, seed=a.seed)
    sys.stdout.write(a.prompt)
    for piece in lm.generate(a.prompt, s, backend=backend):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return 0


def cmd_eval(a: argparse.Namespace) -> int:
    from . import MambaLM, encode_corpus, evaluate, load_corpus
    from .data import id_dtype
    from .limits import MemorySpec, check_fits

    lm = MambaLM.load(a.model)
    lm.check_finite(a.model)
    corpus = load_corpus(a.corpus or [SAMPLE_CORPUS])
    for path, why in corpus.rejected:
        print(f"skipped {path}: {why}", file=sys.stderr)
    check_fits(MemorySpec(lm.config, batch_size=8, seq_len=a.seq_len, training=False,
                          corpus_tokens=corpus.n_bytes,
                          id_bytes=id_dtype(lm.tokenizer.vocab_size).itemsize))
    r = evaluate(lm, encode_corpus(corpus, lm.tokenizer), a.seq_len)
    print(f"loss {r.loss:.4f}  perplexity {r.perplexity:.3f}  bits/token {r.bits_per_token:.4f}  "
          f"bits/byte {r.bits_per_byte:.4f}  top-1 {r.accuracy:.4f}  ({r.tokens:,} tokens)")
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    import json

    from .bench import bench_generate, run

    if a.generate:
        for name in a.configs.split(","):
            for backend in a.generate.split(","):
                res = bench_generate(name, backend, threads=a.threads)
                print(json.dumps(res) if a.json else
                      f"{name:7s} {backend:5s} {res.get('tokens_per_s', 0):>9,.1f} tok/s  "
                      f"({res.get('median_ms_per_token', '-')} ms/token, prefill "
                      f"{res.get('prefill_ms', '-')} ms) {res.get('device', res.get('error'))}",
                      flush=True)
        return 0
    run(a.configs.split(","), a.json, a.steps, a.modes.split(","), a.threads)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .bench import BENCH_CONFIGS
    from .lora import LORA_TARGETS

    p = _Parser(prog="python -m engine", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train on text files/folders (default: bundled sample corpus)")
    t.add_argument("corpus", nargs="*")
    t.add_argument("--out", default="runs/latest")
    t.add_argument("--preset", default="small", choices=["tiny", "small", "medium"])
    t.add_argument("--tokenizer", default="bytes", choices=["bytes", "bpe"])
    t.add_argument("--bpe-vocab", type=_int_in(257, 1 << 20), default=2048)
    t.add_argument("--init", help="start from this model folder (ours or a local HF Mamba)")
    t.add_argument("--resume", help="continue this training checkpoint exactly")
    t.add_argument("--epochs", type=_int_in(1, 1_000_000), default=3)
    t.add_argument("--lr", type=_float_in(0.0, 10.0, lo_open=True), help="default: the preset's")
    t.add_argument("--batch", type=_int_in(1, 65_536), help="default: the preset's")
    t.add_argument("--seq-len", type=_int_in(2, 1 << 24), help="default: the preset's")
    t.add_argument("--accum", type=_int_in(1, 65_536), default=1)
    t.add_argument("--warmup", type=NONNEG, help="default: the preset's")
    t.add_argument("--weight-decay", type=_float_in(0.0, 1e3), help="default: the preset's")
    t.add_argument("--clip", type=_float_in(0.0, 1e12), default=1.0)
    t.add_argument("--seed", type=_int_in(0, (1 << 63) - 1), default=0)
    t.add_argument("--max-steps", type=POS)
    t.add_argument("--holdout", type=_float_in(0.0, 0.9), default=0.1)
    t.add_argument("--eval-every", type=NONNEG, default=0, help="held-out loss every N steps")
    t.add_argument("--checkpointing", action="store_true", help="activation checkpointing")
    t.add_argument("--wsla", action="store_true", help="WSLA fast-adapt: train only x_proj")
    t.add_argument("--lora", type=_names(LORA_TARGETS),
                   help="comma-separated LoRA targets, e.g. in_proj,x_proj,out_proj")
    t.add_argument("--lora-rank", type=_int_in(1, 4096), default=8)
    t.add_argument("--lora-alpha", type=_float_in(0.0, 1e6, lo_open=True))
    t.add_argument("--lora-dropout", type=_float_in(0.0, 0.999), default=0.0)
    t.add_argument("--export-adapter", help="with --lora: write the PEFT adapter here")
    t.add_argument("--prompt", type=_text, default="The ")
    t.add_argument("--sample-tokens", type=_int_in(0, 1_000_000), default=160)
    t.set_defaults(fn=cmd_train)
    g = sub.add_parser("generate", help="generate text from a model folder")
    g.add_argument("model")
    g.add_argument("--prompt", type=_text, default="The ")
    g.add_argument("--max-new-tokens", type=_int_in(0, 1 << 40), default=200)
    g.add_argument("--temperature", type=_float_in(0.0, 1e6), default=0.8,
                   help="0 = greedy")
    g.add_argument("--top-k", type=NONNEG, default=40, help="0 = off")
    g.add_argument("--top-p", type=_float_in(0.0, 1.0, lo_open=True), default=0.95)
    g.add_argument("--seed", type=_int_in(0, (1 << 63) - 1), default=0)
    g.add_argument("--backend", default="cpu", choices=["cpu", "gpu", "auto"])
    g.set_defaults(fn=cmd_generate)
    e = sub.add_parser("eval", help="held-out metrics of a model on a corpus")
    e.add_argument("model")
    e.add_argument("corpus", nargs="*")
    e.add_argument("--seq-len", type=_int_in(2, 1 << 24), default=256)
    e.set_defaults(fn=cmd_eval)
    b = sub.add_parser("bench", help="training-step throughput")
    b.add_argument("--json", action="store_true")
    b.add_argument("--configs", type=_names(BENCH_CONFIGS), default="small,medium")
    b.add_argument("--modes", type=_names(("full", "lora", "wsla")), default="full")
    b.add_argument("--steps", type=_int_in(1, 100_000), default=10)
    b.add_argument("--threads", type=_int_in(1, os.cpu_count() or 1), default=min(2, os.cpu_count() or 1))
    b.add_argument("--generate", type=_names(("cpu", "wgpu")),
                   help="decode throughput instead, e.g. cpu,wgpu")
    b.set_defaults(fn=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand. Anything caused by user input (a MambaStudioError, an OSError, a
    ValueError, a diverged model's FloatingPointError) is one line ``error: ...`` and exit code 2;
    only real bugs show a traceback."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except (MambaStudioError, OSError, ValueError, FloatingPointError, MemoryError) as exc:
        sys.stdout.flush()
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror}"
    if isinstance(exc, MemoryError):
        return "out of memory; use a smaller model, batch or sequence length"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 2000 else text[:2000] + "..."
