"""``python -m engine {train,generate,eval,bench}``: the headless face of Mamba Studio."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .errors import MambaStudioError
from .trainer import format_duration

SAMPLE_CORPUS = Path(__file__).resolve().parent.parent / "assets" / "sample_corpus"


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

    corpus = load_corpus(a.corpus or [SAMPLE_CORPUS])
    for path, why in corpus.rejected:
        print(f"skipped {path}: {why}", file=sys.stderr)
    print(f"corpus: {len(corpus.files)} files, {corpus.n_bytes:,} bytes", file=sys.stderr)
    lora = None
    if a.lora:
        lora = LoRAConfig(tuple(a.lora.split(",")), rank=a.lora_rank, alpha=a.lora_alpha,
                          dropout=a.lora_dropout)
    cfg = TrainConfig(
        epochs=a.epochs, batch_size=a.batch, seq_len=a.seq_len, grad_accum=a.accum, lr=a.lr,
        weight_decay=a.weight_decay, max_grad_norm=a.clip, seed=a.seed, max_steps=a.max_steps,
        activation_checkpointing=a.checkpointing, wsla=a.wsla, lora=lora,
        warmup_steps=a.warmup, eval_every=a.eval_every,
    )
    if a.resume:
        ids = encode_corpus(corpus.texts, load_tokenizer(a.resume))
        train_ids, val_ids = split_holdout(ids, a.holdout, a.seq_len)
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
        ids = encode_corpus(corpus.texts, lm.tokenizer)
        train_ids, val_ids = split_holdout(ids, a.holdout, a.seq_len)
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

    lm = MambaLM.load(a.model)
    corpus = load_corpus(a.corpus or [SAMPLE_CORPUS])
    r = evaluate(lm, encode_corpus(corpus.texts, lm.tokenizer), a.seq_len)
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
    p = argparse.ArgumentParser(prog="python -m engine", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train on text files/folders (default: bundled sample corpus)")
    t.add_argument("corpus", nargs="*")
    t.add_argument("--out", default="runs/latest")
    t.add_argument("--preset", default="small", choices=["tiny", "small", "medium"])
    t.add_argument("--tokenizer", default="bytes", choices=["bytes", "bpe"])
    t.add_argument("--bpe-vocab", type=int, default=2048)
    t.add_argument("--init", help="start from this model folder (ours or a local HF Mamba)")
    t.add_argument("--resume", help="continue this training checkpoint exactly")
    t.add_argument("--epochs", type=int, default=3)
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--batch", type=int, default=8)
    t.add_argument("--seq-len", type=int, default=256)
    t.add_argument("--accum", type=int, default=1)
    t.add_argument("--warmup", type=int, default=10)
    t.add_argument("--weight-decay", type=float, default=0.01)
    t.add_argument("--clip", type=float, default=1.0)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--max-steps", type=int)
    t.add_argument("--holdout", type=float, default=0.1)
    t.add_argument("--eval-every", type=int, default=0, help="held-out loss every N steps")
    t.add_argument("--checkpointing", action="store_true", help="activation checkpointing")
    t.add_argument("--wsla", action="store_true", help="WSLA fast-adapt: train only x_proj")
    t.add_argument("--lora", help="comma-separated LoRA targets, e.g. in_proj,x_proj,out_proj")
    t.add_argument("--lora-rank", type=int, default=8)
    t.add_argument("--lora-alpha", type=float)
    t.add_argument("--lora-dropout", type=float, default=0.0)
    t.add_argument("--export-adapter", help="with --lora: write the PEFT adapter here")
    t.add_argument("--prompt", default="The ")
    t.add_argument("--sample-tokens", type=int, default=160)
    t.set_defaults(fn=cmd_train)
    g = sub.add_parser("generate", help="generate text from a model folder")
    g.add_argument("model")
    g.add_argument("--prompt", default="The ")
    g.add_argument("--max-new-tokens", type=int, default=200)
    g.add_argument("--temperature", type=float, default=0.8)
    g.add_argument("--top-k", type=int, default=40)
    g.add_argument("--top-p", type=float, default=0.95)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--backend", default="cpu", choices=["cpu", "gpu", "auto"])
    g.set_defaults(fn=cmd_generate)
    e = sub.add_parser("eval", help="held-out metrics of a model on a corpus")
    e.add_argument("model")
    e.add_argument("corpus", nargs="*")
    e.add_argument("--seq-len", type=int, default=256)
    e.set_defaults(fn=cmd_eval)
    b = sub.add_parser("bench", help="training-step throughput")
    b.add_argument("--json", action="store_true")
    b.add_argument("--configs", default="small,medium")
    b.add_argument("--modes", default="full")
    b.add_argument("--steps", type=int, default=10)
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--generate", help="decode throughput instead, e.g. cpu,wgpu")
    b.set_defaults(fn=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except MambaStudioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
