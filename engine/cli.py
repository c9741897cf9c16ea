"""``python -m engine {train,generate,eval,bench,export}``: the headless face of Mamba Studio."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import math
import os
import re
import shlex
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from .cli_train import RANK_TIMEOUT_S, cmd_train
from .cliout import PROGRESS, forgiving_stderr, stdout_gone, terminal_safe, text_out, write_text
from .defaults import (
    DEFAULT_PRESET,
    DEFAULT_PROMPT,
    PRESET_DEFAULTS,
    PROMPT_PIECE,
    SAMPLE_CORPUS,
)
from .documents import RECORDS
from .errors import CorpusError, MambaStudioError, one_line
from .safeio import resolved
from .samples import SAMPLE_EVERY
from .signals import Interrupted, interrupt_on_signals, note_interrupted

if TYPE_CHECKING:
    from .evaluation import EvalReport
    from .limits import Range

_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


class _Parser(argparse.ArgumentParser):
    """Bad arguments give one line (``error: ...``) and exit code 2, without the usage block.

    A value such as ``-1e-3`` or ``-inf`` is read as a (negative) number, so its option's own
    check names what is wrong with it; argparse's default takes only ``-1`` / ``-.5`` forms as
    numbers and said "expected one argument" for the others."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

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


def _preview_prompt(value: str) -> str:
    """``train --prompt``: a preview prompt kept in run.json (at most MAX_PROMPT_CHARS; a longer
    one was refused by the run's settings check without naming the flag)."""
    from .runspec import MAX_PROMPT_CHARS

    if len(_text(value)) > MAX_PROMPT_CHARS:
        raise argparse.ArgumentTypeError(f"{len(value):,} characters; a preview prompt holds at "
                                         f"most {MAX_PROMPT_CHARS:,}")
    return value


def _path(value: str) -> str:
    """A file or folder argument: an empty one (``--resume "$RUN"`` with RUN unset) meant "not
    given", so a new run trained in its place; it is refused. Must be valid UTF-8 like any text."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty path; name a file or folder (is a shell "
                                         "variable unset?)")
    return _text(value)


def _names(choices: Iterable[str]) -> Callable[[str], str]:
    allowed = list(choices)

    def parse(text: str) -> str:
        bad = [x for x in text.split(",") if x not in allowed]
        if bad or not text:
            raise argparse.ArgumentTypeError(f"unknown {bad or [text]}; choose from {allowed}")
        return ",".join(dict.fromkeys(text.split(",")))  # each once (--modes full,full crashed)

    return parse


NONNEG = _int_in(0, 1 << 40)


def _ranged(rng: Range) -> Callable[[str], Any]:
    """The flag's type for one of the engine's setting ranges (``TRAIN_RANGES``, ...)."""
    if rng.whole:
        return _int_in(int(rng.lo), int(rng.hi))
    return _float_in(rng.lo, rng.hi, lo_open=rng.lo_open)


def cmd_export(a: argparse.Namespace) -> int:
    before = _identity(Path(a.out))
    try:
        return _export(a)
    except KeyboardInterrupt:  # Ctrl-C after the export was published: it said "interrupted",
        if _identity(Path(a.out)) in (None, before):  # exit 130, over a complete export
            raise
        note_interrupted()
        print(f"\nwrote {a.out} (the interrupt came once it was written)", file=sys.stderr)
        return 0


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``, or None: an export is published by a rename, so a new one
    has a new inode."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _export(a: argparse.Namespace) -> int:
    from .export import export_gguf, export_merged, export_peft

    if a.kind != "gguf" and Path(a.out).suffix.lower() == ".gguf" and not Path(a.out).is_dir():
        raise ValueError(f"{a.out}: a GGUF file's name for a --{a.kind} export, which writes a "
                         "folder; pass --gguf for one GGUF file, or a folder name")  # (a folder
        # named m.gguf was written with a note; the window asks)
    if a.kind == "gguf" and a.out.endswith(("/", os.sep)):  # (a file named "dir" was written)
        raise ValueError(f"{a.out}: a folder's name (it ends in /) for a --gguf export, which "
                         f"writes one file; name the file, e.g. {a.out}model.gguf")

    def say(line: str) -> None:  # (10 s of scoring for the card passed without a word)
        print(line, file=sys.stderr)

    best = _better_best(Path(a.run))  # the snapshot the export is about to read (read after
    try:  # it, a run in training had saved on: it named step 140 of an export of step 112)
        if a.kind == "gguf":
            notes = export_gguf(a.run, a.out, force=a.force)
        else:
            fn = export_merged if a.kind == "merged" else export_peft
            notes = fn(a.run, a.out, force=a.force, progress=say)
    except OSError as exc:  # writing the output: named by it, not by a temp file beside it
        if not (exc.filename and _is_output(Path(exc.filename), Path(a.out))):
            raise  # (reading the run: it said the output "cannot write")
        raise MambaStudioError(f"{a.out}: cannot write ({exc.strerror or exc}); choose another "
                               "output path") from None
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    suffix = Path(a.out).suffix.lower()
    if a.kind == "gguf" and suffix != ".gguf":  # llama.cpp reads it; Ollama / LM Studio list
        print(f"note: {a.out} is one GGUF file; name it *.gguf for the tools that look for "
              "that extension", file=sys.stderr)  # only *.gguf files
    if best:
        print(f"note: {best}", file=sys.stderr)
    out = shlex.quote(str(a.out))  # (it said "llama-cli -m OUT", the placeholder)
    loads = {"merged": "AutoModelForCausalLM.from_pretrained (transformers 4.x/5.x)",
             "peft": f"AutoPeftModelForCausalLM.from_pretrained, or PeftModel over {out}/base",
             "gguf": f"llama.cpp (llama-cli -m {out}), Ollama, LM Studio"}[a.kind]
    print(f"wrote {a.out}: loads with {loads}", file=sys.stderr)
    return 0


def _is_output(path: Path, out: Path) -> bool:
    """``path`` is the export ``out``, inside it, its folder, or a hidden file or folder beside
    it that the export writes first (``.NAME...``)."""
    p, o = resolved(path), resolved(out)
    return (p == o or p.is_relative_to(o) or p == o.parent
            or (p.parent == o.parent and p.name.startswith(f".{o.name}")))


def _better_best(folder: Path) -> str:
    """For an export of a run's latest weights: a line naming its best snapshot when that is
    another one, and how to export it (the window asks; the CLI exported the latest silently)."""
    from . import runformat as rf

    if not rf.is_run(folder):
        return ""
    found = rf.best_if_not_latest(folder)
    latest = rf.read_pointer(folder)
    if found is None or latest is None:
        return ""
    snap, best = found
    now = latest.get("val_loss")
    now_text = f"held-out {now:.4f}" if isinstance(now, float) else "held-out loss not measured"
    return (f"this is the latest snapshot, step {latest['step']} ({now_text}); the best held-out "
            f"loss is step {best['step']}'s ({best['val_loss']:.4f}): to export that one, give "
            f"its snapshot folder, {snap}, in place of the run")


PROMPT_FILE_LIMIT = 16 << 20  # bytes of a --prompt-file: its text and ids are held whole, ~17
# bytes of memory a byte (a 63 MB file took over 1.3 GB and minutes to read; 256 MB was allowed)


def read_prompt(path: str) -> str:
    """``generate --prompt-file``: the file's text, checked as a corpus file is (binary,
    compressed, UTF-16 or not UTF-8: one line naming the file and the fix)."""
    from .data import iter_text
    from .safeio import check_regular

    check_regular(path, "prompt file", PROMPT_FILE_LIMIT)
    return "".join(iter_text(Path(path), limit=PROMPT_FILE_LIMIT, what="prompt file"))


def cmd_generate(a: argparse.Namespace) -> int:
    from . import SamplingConfig
    from .run import load_model

    if a.prompt_file:  # (read first: a wrong file is said before a model is loaded)
        a.prompt = read_prompt(a.prompt_file)
        if len(a.prompt) > 100_000:  # (a 2 MB prompt read for 6 s with nothing said)
            print(f"note: reading a prompt of {len(a.prompt):,} characters first",
                  file=sys.stderr)
    lm = load_model(a.model, notify=lambda m: print(f"warning: {m}", file=sys.stderr))
    lm.check_finite(a.model)
    backend = None
    if a.backend in ("gpu", "auto"):
        from .gpu import pick_backend

        backend, reason = pick_backend(lm, a.backend)
        print(f"backend: {reason}", file=sys.stderr)
        if backend is None and a.backend == "gpu":
            return 2
    s = SamplingConfig(temperature=a.temperature, top_k=a.top_k, top_p=a.top_p,
                       max_new_tokens=a.max_new_tokens, seed=a.seed,
                       repetition_penalty=a.repetition_penalty, stop_at_eos=a.stop)
    out = text_out()
    shown = terminal_safe if out.isatty() else str  # a file or pipe gets the exact text
    held: list[str] = []  # --no-stream: the text so far, written at the end or at an interrupt
    printed = 0  # characters of new text
    seen = False  # any of them other than blank space (an end-of-text --no-stop goes past is a
    # line break: a model making only those printed blank lines, and no note, as "text")
    if a.stream:
        write_text(out, shown(a.prompt))  # (`| head -c 10`: the reader's going is main's to end)
    try:
        for piece in lm.generate(a.prompt, s, backend=backend):
            printed += len(piece)
            seen = seen or not piece.isspace()
            if a.stream:
                write_text(out, shown(piece), flush=True)  # each piece once sampled
            else:
                held.append(piece)
    finally:  # (an interrupted --no-stream run printed nothing of minutes of text)
        if not a.stream:
            write_text(out, shown(a.prompt + "".join(held)))
        write_text(out, "\n", flush=True)
    if s.max_new_tokens > 0 and (not printed if a.stop else not seen):  # (an empty line, and
        why = ("ended the text at once (end-of-text); train it longer, give a prompt it can go "
               "on from, or pass --no-stop" if a.stop else "generated only end-of-text tokens "
               "(each printed as a line break) or blank space; train it longer, or give a "
               "prompt it can go on from")  # nothing said)
        print(f"note: no text after the prompt: the model {why}", file=sys.stderr)
    return 0


def cmd_eval(a: argparse.Namespace) -> int:
    from . import encode_corpus, evaluate, load_corpus
    from . import runformat as rf
    from .corpuswalk import summary
    from .data import id_dtype, require_present
    from .documents import encode_documents
    from .limits import MemorySpec, check_fits
    from .packing import pack_documents
    from .run import _megabytes, load_model, read_run_spec

    is_run = rf.is_run(Path(a.model))
    path = Path(a.model)  # a run, or one of its snapshots: split CORPUS as that run did
    owner = path if is_run else rf.snapshot_run(path)
    if not a.corpus and owner is not None:  # a run knows its own held-out split (a snapshot of
        given = [f for f, v in (("--seq-len", a.seq_len), ("--records", a.records)) if v]
        if given:  # one scored the sample corpus); --seq-len / --records were ignored
            own = read_run_spec(owner)
            raise ValueError(f"{' and '.join(given)} appl{'y' if len(given) > 1 else 'ies'} to a "
                             "corpus given after the model; "
                             f"the run's own held-out split is scored as it trains (seq len "
                             f"{own.train.seq_len}, {own.records} records): give a corpus, or "
                             "leave them out")
        return _eval_run_heldout(str(owner), a.max_tokens, None if is_run else path)
    spec = read_run_spec(owner) if owner is not None else None
    records = a.records or (spec.records if spec is not None else "stream")
    seq_len = a.seq_len or (spec.train.seq_len if spec is not None else 256)
    lm = load_model(a.model, notify=lambda m: print(f"warning: {m}", file=sys.stderr))
    lm.check_finite(a.model)
    if not a.corpus:
        print(f"note: no corpus given; evaluating on the bundled sample corpus ({SAMPLE_CORPUS})",
              file=sys.stderr)
    require_present(a.corpus)
    corpus = load_corpus(a.corpus or [SAMPLE_CORPUS])
    for line in summary(corpus.rejected):
        print(line, file=sys.stderr)
    check_fits(MemorySpec(lm.config, batch_size=8, seq_len=seq_len, training=False,
                          corpus_tokens=corpus.n_bytes,
                          id_bytes=id_dtype(lm.tokenizer.vocab_size).itemsize))
    print(f"tokenizing {_megabytes(corpus.n_bytes)} of text, then scoring "  # (a 150 MB corpus
          f"{'all of it' if not a.max_tokens else f'up to {a.max_tokens:,} tokens'}...",  # said
          file=sys.stderr)  # nothing for 47 s)
    if records == "stream":
        ids = encode_corpus(corpus, lm.tokenizer)
        if len(ids) < 2:  # it said only "evaluation text has fewer than 2 tokens"
            named = ", ".join(str(c) for c in (a.corpus or [SAMPLE_CORPUS]))
            raise ValueError(f"{named}: {len(ids)} token(s), and a stream needs 2 to score one; "
                             "give more text (or --records file, which scores each file's end "
                             "of text)")
        r = evaluate(lm, ids, seq_len, max_tokens=a.max_tokens)
    else:  # documents packed into rows with the state reset at each, as training does
        docs = encode_documents(corpus, lm.tokenizer, records)
        rows = pack_documents(docs.ids, docs.spans(), seq_len, lm.tokenizer)
        r = evaluate(lm, rows, seq_len, max_tokens=a.max_tokens)
    how = (f"{records} records" + (", as the run was trained" if spec is not None
                                   and records == spec.records and not a.records else ""))
    _eval_line(r, f"{r.describe()}; {how}, seq len {seq_len}")
    return 0


def _eval_line(r: EvalReport, what: str) -> None:
    """eval's result, one line on stdout (its output: a full disk there is said as generate says
    it, naming standard output; it was "error: No space left on device")."""
    write_text(text_out(), f"loss {r.loss:.4f}  perplexity {r.perplexity:.3f}  bits/token "
               f"{r.bits_per_token:.4f}  bits/byte {r.bits_per_byte:.4f}  top-1 {r.accuracy:.4f}"
               f"  ({what})\n", flush=True)


def _eval_run_heldout(folder: str, max_tokens: int, snapshot: Path | None = None) -> int:
    """``eval RUN`` (or one of its snapshots) without a corpus: the run's saved held-out split,
    the loss its training reports (at that snapshot's step: metrics.csv's earlier ones)."""
    from . import runformat as rf
    from .run import _trainer, load_model, open_run, read_run_spec

    if snapshot is None:
        view = open_run(folder)
        for note in view.notices:
            print(f"warning: {note}", file=sys.stderr)
        lm, step, data, spec = view.lm, view.step, view.data, view.spec
    else:  # that snapshot's weights alone (the latest's were loaded too, and warned about)
        lm, step = load_model(snapshot), rf.snapshot_step(snapshot.name) or 0
        data, spec = rf.read_data(Path(folder)), read_run_spec(folder)
    lm.check_finite(str(snapshot or folder))
    tr = _trainer(lm, data, spec.train)
    if not tr.has_val:
        why = (f"holdout {spec.holdout:g}" if not spec.holdout else  # (it said "holdout 0" of
               "its corpus was too small to split")                  # a run of holdout 0.1)
        raise CorpusError(f"{folder}: the run has no held-out split ({why}); pass a corpus")
    r = tr.evaluate(max_tokens=max_tokens)
    _eval_line(r, f"{r.describe()}, the run's held-out split at step {step}")
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
    run(a.configs.split(","), a.json, a.steps, a.modes.split(","), a.threads, a.workers)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m engine", description="Mamba Studio without a window: train a "
                "model, generate from it, evaluate it, benchmark a step, export it for other tools.")
    commands = "{train,generate,eval,bench,export}"  # named in the error when none is given
    sub = p.add_subparsers(dest="cmd", required=True, metavar=commands)
    _add_train(sub)
    _add_generate(sub)
    _add_eval(sub)
    _add_bench(sub)
    _add_export(sub)
    return p


def _add_train(sub: Any) -> None:
    """The ``train`` command's arguments."""
    from .limits import EARLY_RANGES, LORA_RANGES, RUN_RANGES, TRAIN_RANGES
    from .lora import LORA_TARGETS, LoRAConfig
    from .params import INITS
    from .runspec import BPE_VOCAB_RANGE, RunSpec
    from .trainer import TrainConfig

    preset = PRESET_DEFAULTS[DEFAULT_PRESET]
    t = sub.add_parser("train", help="train on text files/folders (default: bundled sample corpus)")
    t.add_argument("corpus", nargs="*", type=_path,
                   help="text/code files or folders to train on (default: the bundled sample "
                        "corpus; none with --resume)")
    t.add_argument("--config", metavar="TOML", type=_path,
                   help="run settings file (the app's File > Save settings as…); flags override it")
    t.add_argument("--out", type=_path, help="run folder (default: a new runs/<date>-<preset>-<n>)")
    t.add_argument("--force", action="store_true",
                   help="replace the run already in --out (never a folder holding other files) and an "
                        "earlier export in --export-adapter")
    t.add_argument("--resume", metavar="RUN", type=_path, help="continue this run folder (no corpus needed)")
    t.add_argument("--preset", choices=list(PRESET_DEFAULTS),
                   help=f"model size and its training defaults (default {DEFAULT_PRESET}: "
                        + "; ".join(f"{k} d {v.d_model} x {v.n_layer} layers"
                                    for k, v in PRESET_DEFAULTS.items()) + ")")
    t.add_argument("--tokenizer", choices=["auto", "bytes", "bpe"],
                   help="auto (default): bytes below 4 MB of corpus, else a BPE trained on it")
    t.add_argument("--bpe-vocab", type=_ranged(BPE_VOCAB_RANGE),
                   help=f"tokens of a BPE tokenizer trained on the corpus (default "
                        f"{RunSpec.bpe_vocab:,}; a small corpus may learn fewer)")
    t.add_argument("--init", type=_path, help="start from this model folder, run or snapshot (ours or HF)")
    t.add_argument("--init-scheme", choices=INITS,
                   help="weight init of a new model (default: default; reference = mamba_ssm / "
                        "Hugging Face init)")
    t.add_argument("--epochs", type=_ranged(TRAIN_RANGES["epochs"]),
                   help=f"passes over the training text (default {TrainConfig.epochs}; "
                        "--max-steps may end the run sooner)")
    t.add_argument("--lr", type=_ranged(TRAIN_RANGES["lr"]),
                   help=f"peak learning rate (default: the preset's, {preset.lr:g} for "
                        f"{DEFAULT_PRESET}, twice as high when a new "
                        "run's tokenizer is BPE; a rate equal to the byte default also doubles "
                        "then; --init and --resume runs take the rate as it is)")
    t.add_argument("--batch", type=_ranged(TRAIN_RANGES["batch_size"]),
                   help=f"rows a step (default: the preset's, {preset.batch_size})")
    t.add_argument("--seq-len", type=_ranged(TRAIN_RANGES["seq_len"]),
                   help=f"tokens a row (default: the preset's, {preset.seq_len})")
    t.add_argument("--accum", type=_ranged(TRAIN_RANGES["grad_accum"]),
                   help=f"gradient accumulation: batches summed into one optimizer step, as one "
                        f"batch this many times larger (default {TrainConfig.grad_accum})")
    t.add_argument("--warmup", type=NONNEG,
                   help=f"steps of linear learning-rate warmup (default: the preset's, "
                        f"{preset.warmup_steps}; cut to a fifth of a shorter run)")
    t.add_argument("--weight-decay", type=_ranged(TRAIN_RANGES["weight_decay"]),
                   help=f"AdamW's decoupled weight decay on the projections (default: the "
                        f"preset's, {preset.weight_decay:g}; never A_log, D, norms, embeddings)")
    t.add_argument("--clip", type=_ranged(TRAIN_RANGES["max_grad_norm"]),
                   help=f"global gradient-norm clip (default {TrainConfig.max_grad_norm:g}; 0: "
                        "off)")
    t.add_argument("--seed", type=_ranged(TRAIN_RANGES["seed"]),
                   help=f"weights, data order and held-out split (default {TrainConfig.seed})")
    t.add_argument("--max-steps", type=NONNEG,
                   help="total optimizer steps (default: none, all epochs; with --resume: new "
                        "total); 0: no limit (all epochs; "
                        "with --resume: lifts the run's limit)")
    t.add_argument("--holdout", type=_ranged(RUN_RANGES["holdout"]),
                   help=f"fraction of the corpus held out to score the model, whole documents "
                        f"(default {RunSpec.holdout:g}; 0: none)")
    t.add_argument("--records", choices=[*RECORDS, "stream"],
                   help="documents: each file (default) / blank-line-separated block / line "
                        "(use 'line' for one example per line); each is packed into rows with "
                        "the state reset at its start; stream: one text cut into rows")
    t.add_argument("--eval-every", type=NONNEG,
                   help="held-out loss every N steps (default 0: auto, under 10%% of the "
                        "training time; and at every epoch's end)")
    t.add_argument("--autosave-steps", type=_ranged(RUN_RANGES["autosave_steps"]),
                   help=f"save every N steps (default {RunSpec.autosave_steps}: off)")
    t.add_argument("--autosave-minutes", type=_ranged(RUN_RANGES["autosave_minutes"]),
                   help=f"save every M minutes (default {RunSpec.autosave_minutes:g}; 0: off; "
                        "always at epoch ends and on exit)")
    t.add_argument("--patience", type=_ranged(EARLY_RANGES["patience"]),
                   help="early stopping: stop after N held-out evaluations without improvement "
                        "(default 0: off; kept by the run: --resume goes on with it)")
    t.add_argument("--target-loss", type=_ranged(EARLY_RANGES["target_loss"]),
                   help="early stopping: stop once held-out loss reaches this (nats/token; "
                        "default: none; 0: off; kept by the run)")
    t.add_argument("--tensorboard", action=argparse.BooleanOptionalAction,
                   help="write TensorBoard events into <run>/tb (tensorboard --logdir runs/); "
                        "default: on for a new run, as the run had it for --resume")
    t.add_argument("--checkpointing", action="store_true",
                   help="activation checkpointing: each layer's activations are recomputed in "
                        "the backward instead of kept (less memory, more time a step)")
    t.add_argument("--wsla", action="store_true", help="WSLA fast-adapt: train only x_proj")
    t.add_argument("--lora", type=_names(LORA_TARGETS),
                   help="comma-separated LoRA targets, e.g. in_proj,x_proj (the default of the "
                        "window and of a settings file's [train.lora]; out_proj, conv1d, "
                        "A_log and embeddings export merged only)")
    t.add_argument("--lora-rank", type=_ranged(LORA_RANGES["rank"]),
                   help=f"with --lora (default {LoRAConfig.rank})")
    t.add_argument("--lora-alpha", type=_ranged(LORA_RANGES["alpha"]),
                   help="with --lora: the update's scale is alpha / rank (default: the rank, "
                        "scale 1)")
    t.add_argument("--lora-dropout", type=_ranged(LORA_RANGES["dropout"]),
                   help=f"with --lora (default {LoRAConfig.dropout:g})")
    t.add_argument("--export-adapter", type=_path,
                   help="with --lora: write the PEFT adapter here (+ its unmerged base in ./base)")
    t.add_argument("--prompt", type=_preview_prompt,
                   help="preview prompt (default 'The '); kept in run.json, so a resumed run "
                        "keeps it; with --resume: a new one")
    t.add_argument("--sample-tokens", type=_int_in(0, 1_000_000), default=160,
                   help="tokens of each sample shown before training, every --sample-every "
                        "steps and after each epoch (default 160; 0: no samples)")
    t.add_argument("--sample-every", type=_int_in(0, 1_000_000_000), default=SAMPLE_EVERY,
                   help="inside an epoch, a sample once this many steps have gone by since the "
                        f"last one (default {SAMPLE_EVERY}; 0: after each epoch only)")
    t.add_argument("--distributed", action="store_true",
                   help="one rank of a data-parallel job: mpirun -n N python -m engine train ... "
                        "--distributed (docs/distributed.md)")
    t.add_argument("--rank-timeout", type=_float_in(1.0, 1e6),
                   help="with --distributed: seconds without an answer from another rank before "
                        f"the job is ended (default {RANK_TIMEOUT_S:g})")
    t.set_defaults(fn=cmd_train)


def _add_generate(sub: Any) -> None:
    """The ``generate`` command's arguments."""
    from .sampling import GENERATION_DEFAULTS

    g = sub.add_parser("generate", help="generate text from a model folder")
    g.add_argument("model", type=_path, help="run folder (latest snapshot), snapshot or model folder")
    gen = GENERATION_DEFAULTS  # the defaults the app's Playground and previews show too
    said = g.add_mutually_exclusive_group()
    said.add_argument("--prompt", type=_text, default=DEFAULT_PROMPT,
                      help=f"text to continue (default {DEFAULT_PROMPT!r})")
    said.add_argument("--prompt-file", type=_path,
                      help=f"a UTF-8 text file of up to {PROMPT_FILE_LIMIT >> 20} MB to continue "
                           "(a prompt too long for the command line; the model reads it "
                           f"{PROMPT_PIECE:,} tokens at a time)")
    g.add_argument("--max-new-tokens", type=_int_in(0, 1_000_000), default=gen.max_new_tokens,
                   help=f"tokens to generate at most (default {gen.max_new_tokens})")
    g.add_argument("--temperature", type=_float_in(0.0, 1e6), default=gen.temperature,
                   help=f"sampling temperature (default {gen.temperature:g}; 0 = greedy)")
    g.add_argument("--top-k", type=NONNEG, default=gen.top_k,
                   help=f"sample among the k likeliest tokens (default {gen.top_k}; 0 = off)")
    g.add_argument("--top-p", type=_float_in(0.0, 1.0, lo_open=True), default=gen.top_p,
                   help=f"... and within probability mass p (default {gen.top_p:g}; 1 = off)")
    g.add_argument("--seed", type=_int_in(0, (1 << 63) - 1), default=gen.seed,
                   help=f"sampling seed: the same seed, the same text (default {gen.seed})")
    g.add_argument("--repetition-penalty", type=_float_in(1.0, 100.0),
                   default=gen.repetition_penalty,
                   help=f"> 1 makes tokens of the last {gen.repetition_window} less likely "
                        f"(1 = off; default {gen.repetition_penalty})")
    g.add_argument("--stop", action=argparse.BooleanOptionalAction, default=gen.stop_at_eos,
                   help="end at the model's end-of-text token (default; training puts one after "
                        "every document / record, for both tokenizers); --no-stop: always "
                        "generate --max-new-tokens")
    g.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True,
                   help="print each token as it is generated (default) or the text at the end")
    g.add_argument("--backend", default="cpu", choices=["cpu", "gpu", "auto"],
                   help="cpu (default), gpu (wgpu: a hardware GPU, else Mesa's software "
                        "lavapipe), or auto: a hardware GPU if any, else the CPU")
    g.set_defaults(fn=cmd_generate)


def _add_eval(sub: Any) -> None:
    """The ``eval`` command's arguments."""
    from .evaluation import HELDOUT_SAMPLE_TOKENS

    e = sub.add_parser("eval", help="held-out metrics of a model on a corpus")
    e.add_argument("model", type=_path,
                   help="run folder (latest snapshot), snapshot or model folder")
    e.add_argument("corpus", nargs="*", type=_path,
                   help="default: a run's (or its snapshot's) own held-out split; for a model "
                        "folder, the bundled sample corpus")
    e.add_argument("--seq-len", type=_int_in(2, 1 << 24),
                   help="row length (default: the run's; 256 for a model folder)")
    e.add_argument("--records", choices=[*RECORDS, "stream"],
                   help="how CORPUS is split into documents (default: as the run was trained; "
                        "stream for a model folder)")
    e.add_argument("--max-tokens", type=NONNEG, default=HELDOUT_SAMPLE_TOKENS,
                   help=f"score a fixed sample of about this many tokens in whole rows spread "
                        f"evenly over the text, at least one row (default "
                        f"{HELDOUT_SAMPLE_TOKENS:,}, as training does; 0: all)")
    e.set_defaults(fn=cmd_eval)


def _add_bench(sub: Any) -> None:
    """The ``bench`` command's arguments."""
    from .bench import BENCH_CONFIGS

    b = sub.add_parser(
        "bench", help="training-step throughput",
        description="Time training steps (forward + backward + AdamW) of fixed shapes, so "
                    "rounds and machines compare; the PyTorch peers are in benchmarks/ "
                    "(docs/performance.md). Configs: " + "; ".join(
                        f"{k} d {c['d_model']} x {c['n_layer']} layers, batch {c['batch']} x "
                        f"{c['seq_len']}, vocab {c['vocab']:,}" for k, c in BENCH_CONFIGS.items()))
    b.add_argument("--json", action="store_true",
                   help="one JSON line per config and mode (min/median/max, GEMM figures)")
    b.add_argument("--configs", type=_names(BENCH_CONFIGS), default="small,medium",
                   help=f"comma-separated, of {', '.join(BENCH_CONFIGS)} (default small,medium)")
    b.add_argument("--modes", type=_names(("full", "lora", "wsla")), default="full",
                   help="comma-separated, of full, lora (r 8), wsla (default full)")
    b.add_argument("--steps", type=_int_in(1, 100_000), default=10,
                   help="timed steps a config and mode, after 2 warm-up ones (default 10)")
    b.add_argument("--threads", type=_int_in(1, os.cpu_count() or 1),
                   default=min(2, os.cpu_count() or 1),
                   help=f"Numba and BLAS threads (default {min(2, os.cpu_count() or 1)}; "
                        "training picks its own)")
    b.add_argument("--workers", type=_int_in(1, 2), default=1,
                   help="2: each micro-batch's halves at once in two threads of threads / 2 "
                        "threads each, as training does where that is fastest (default 1)")
    b.add_argument("--generate", type=_names(("cpu", "wgpu")),
                   help="decode throughput instead, e.g. cpu,wgpu")
    b.set_defaults(fn=cmd_bench)


def _add_export(sub: Any) -> None:
    """The ``export`` command's arguments."""
    from .export.peft import LINES, PEFT_SUPPORT

    table = "; ".join(f"{t}: " + "/".join(PEFT_SUPPORT[t][line] for line in LINES)
                      for t in PEFT_SUPPORT)
    x = sub.add_parser(
        "export", help="write a run for other tools: --merged (transformers), --peft, --gguf",
        description="Export a run folder. PEFT un-merged LoRA per target on transformers "
                    f"{'/'.join(LINES)}: {table}. Anything not exact: use --merged.")
    kind = x.add_mutually_exclusive_group(required=True)
    kind.add_argument("--merged", dest="kind", action="store_const", const="merged",
                      help="HF MambaForCausalLM folder, LoRA merged in")
    kind.add_argument("--peft", dest="kind", action="store_const", const="peft",
                      help="PEFT adapter folder + OUT/base (the unmerged base)")
    kind.add_argument("--gguf", dest="kind", action="store_const", const="gguf",
                      help="one .gguf file for llama.cpp / Ollama / LM Studio")
    x.add_argument("run", type=_path, help="run folder (written by train)")
    x.add_argument("out", type=_path, help="output folder (--merged/--peft: new or empty; "
                   "missing parents are created) or .gguf file (--gguf)")
    x.add_argument("--force", action="store_true",
                   help="replace an earlier export in OUT (a folder holding other files is "
                        "never emptied)")
    x.set_defaults(fn=cmd_export)


def _did_you_mean(parser: argparse.ArgumentParser, extra: list[str]) -> str:
    """" (did you mean --batch?)" for the first unknown flag close to one of ``parser``'s
    (``--batch-size`` was refused with no hint), else ""."""
    flags = [f for a in parser._actions for f in a.option_strings if f.startswith("--")]
    for word in extra:
        if word.startswith("--"):
            close = difflib.get_close_matches(word.split("=", 1)[0], flags, n=1, cutoff=0.7)
            if close:
                return f" (did you mean {close[0]}?)"
    return ""


def _intermixed(command: argparse.ArgumentParser, argv: list[str], args: argparse.Namespace,
                extra: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The command's arguments parsed again with options and positionals in any order (the
    top-level parser's subcommands rule that out for it); ``args`` and ``extra`` as they were
    where that cannot be done."""
    try:
        sub, more = command.parse_known_intermixed_args(argv[argv.index(args.cmd) + 1:])
    except (TypeError, ValueError):
        return args, extra
    sub.cmd = args.cmd
    return sub, more


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand. Anything caused by user input (a MambaStudioError, an OSError, a
    ValueError, a diverged model's FloatingPointError) is one line ``error: ...`` and exit code 2;
    only real bugs show a traceback."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:  # the command's own --help lists its flags (it pointed at the top level's)
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        command = commands.choices[args.cmd]
        if any(not w.startswith("-") for w in extra):  # words after an option: argparse gave
            args, extra = _intermixed(command, argv, args, extra)  # a command's positionals
        if extra:  # only before the first option ("eval RUN --records line CORPUS")
            command.error(f"unrecognized arguments: {' '.join(extra)}"
                          f"{_did_you_mean(command, extra)}")
    PROGRESS.reset()
    with forgiving_stderr():  # a stderr gone (a closed pipe): training goes on (engine.cliout)
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        with interrupt_on_signals():  # SIGTERM/SIGHUP as Ctrl-C (they killed it silently)
            return int(args.fn(args))
    except BrokenPipeError as exc:  # stdout's reader went away (stderr's is let go by
        if stdout_gone():  # forgiving_stderr): its reader has what it wanted, as generate's
            return 0
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    except (MambaStudioError, OSError, ValueError, FloatingPointError, MemoryError) as exc:
        with contextlib.suppress(OSError, ValueError, AttributeError):  # (closed, or gone)
            sys.stdout.flush()
        end = "\n" if PROGRESS.open else ""  # not glued to the end of a progress line
        print(f"{end}error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C outside training (which saves and exits 0):
        note_interrupted()
        with contextlib.suppress(OSError, ValueError, AttributeError):  # reading the corpus,
            sys.stdout.flush()  # training the tokenizer, loading; a new run
        name = str(exc) if isinstance(exc, Interrupted) else "Ctrl-C"  # leaves nothing
        from .distributed import launched_as

        follower = getattr(args, "distributed", False) and launched_as()[0] != 0
        with contextlib.suppress(OSError, ValueError):
            if not follower:  # (every rank of a distributed job said it: rank 0 speaks for all)
                print(f"\ninterrupted ({name})", file=sys.stderr)
        return 128 + (signal.Signals[name].value if isinstance(exc, Interrupted) else 2)
