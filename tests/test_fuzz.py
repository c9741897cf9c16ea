"""Property-based fuzzing of everything a user (or a crafted folder) can hand the engine:
config.json, trainer_state.json, tokenizer.json, safetensors headers, CLI arguments, and a run
folder's state files (run.json's spec, latest/best/status.json, the data manifest, a snapshot's
trainer.json).

Every case must end in success or a one-line ``MambaStudioError`` (CLI: exit code 2 and one
``error:`` line) -- never another exception, a hang (each case runs under ``CASE_SECONDS``) or an
allocation above ``CASE_BYTES`` (traced by tracemalloc, which sees NumPy buffers too).
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import BPETokenizer, ByteTokenizer, MambaLM, TrainConfig, Trainer
from engine import runformat as rf
from engine.cli import build_parser, main
from engine.errors import MambaStudioError
from engine.run import load_model
from engine.tokenizer import load_tokenizer
from tests.helpers import tiny_config, write_legacy_checkpoint

CASE_SECONDS = 10
CASE_BYTES = 64 << 20
FUZZ = settings(max_examples=100, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


class _Hang(Exception):
    pass


@contextlib.contextmanager
def bounded():
    """Fail the case if it runs longer than CASE_SECONDS or traces more than CASE_BYTES."""
    def alarm(signum, frame):  # type: ignore[no-untyped-def]
        raise _Hang(f"case ran over {CASE_SECONDS} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
        assert peak < CASE_BYTES, f"allocated {peak:,} bytes"
    finally:
        tracemalloc.stop()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def expect_clean(fn) -> None:  # type: ignore[no-untyped-def]
    """``fn()`` succeeds or raises a one-line MambaStudioError."""
    with bounded():
        try:
            fn()
        except MambaStudioError as exc:
            assert "\n" not in str(exc) and str(exc), repr(exc)


# JSON values with the awkward cases: huge/negative ints, NaN/Inf, deep nesting, wrong types
scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.sampled_from([0, 1, -1, 2**31, 2**63, 10**8, 10**18])
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from(["auto", "nan", "../../../../dev/zero", "/dev/zero", ""]))
json_values = st.recursive(scalars, lambda c: st.lists(c, max_size=4)
                           | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=12)


def _mutate(base: dict, draw_keys, values):  # type: ignore[no-untyped-def]
    out = dict(base)
    for k, v in zip(draw_keys, values, strict=False):
        out[k] = v
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fuzz_model")
    lm = MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer())
    ids = (np.arange(400) * 7 % 97).astype(np.uint16)
    write_legacy_checkpoint(Trainer(lm, ids, ids[:0], TrainConfig(seq_len=16, batch_size=2, max_steps=1)),
                            folder)
    (folder / "corpus.txt").write_text("hello world, this is a small corpus.\n" * 20)
    lm.logits(np.zeros((1, 4), np.int64))  # compile the kernels outside the per-case limit
    return folder


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file():
            (dst / f.name).write_bytes(f.read_bytes())
    return dst


@FUZZ
@given(data=st.data())
def test_fuzz_config_json(model_dir, tmp_path_factory, data):
    folder = _copy(model_dir, tmp_path_factory.mktemp("cfg"))
    good = json.loads((model_dir / "config.json").read_text())
    keys = data.draw(st.lists(st.sampled_from(sorted(good) + ["d_model", "n_layer"]), max_size=4))
    cfg = data.draw(st.one_of(
        st.builds(lambda vals: _mutate(good, keys, vals), st.lists(json_values, min_size=len(keys),
                                                                    max_size=len(keys))),
        json_values,
    ))
    raw = json.dumps(cfg, allow_nan=True).encode()
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw)))]  # truncated
    (folder / "config.json").write_bytes(raw)
    expect_clean(lambda: MambaLM.load(folder))


@FUZZ
@given(data=st.data())
def test_fuzz_trainer_state_json(model_dir, tmp_path_factory, data):
    folder = _copy(model_dir, tmp_path_factory.mktemp("state"))
    good = json.loads((model_dir / "trainer_state.json").read_text())
    target = data.draw(st.sampled_from(["top", "train_config", "files"]))
    base = good if target == "top" else good[target]
    keys = data.draw(st.lists(st.sampled_from(sorted(base) + ["bogus", "../x"]), min_size=1, max_size=3))
    vals = data.draw(st.lists(json_values, min_size=len(keys), max_size=len(keys)))
    mutated = _mutate(base, keys, vals)
    state = mutated if target == "top" else {**good, target: mutated}
    if data.draw(st.integers(0, 9)) == 0:
        state = data.draw(json_values)
    (folder / "trainer_state.json").write_text(json.dumps(state, allow_nan=True))
    expect_clean(lambda: load_model(folder))


@pytest.fixture(scope="module")
def bpe_json() -> dict:
    tok = BPETokenizer.train(["the cat sat on the mat. " * 30], vocab_size=280)
    return json.loads(tok._tok.to_str())


@FUZZ
@given(data=st.data())
def test_fuzz_tokenizer_json(bpe_json, tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("tok")
    choice = data.draw(st.integers(0, 3))
    if choice == 0:
        spec = data.draw(json_values)
    elif choice == 1:
        spec = {"mamba_studio_tokenizer": data.draw(json_values)}
    else:
        section = data.draw(st.sampled_from(["model", "decoder", "pre_tokenizer", "added_tokens",
                                             "normalizer", "post_processor"]))
        spec = dict(bpe_json)
        if section == "model" and choice == 2:
            key = data.draw(st.sampled_from(sorted(bpe_json["model"])))
            spec["model"] = {**bpe_json["model"], key: data.draw(json_values)}
        else:
            spec[section] = data.draw(json_values)
    (folder / "tokenizer.json").write_text(json.dumps(spec, allow_nan=True))
    expect_clean(lambda: load_tokenizer(folder))


@FUZZ
@given(data=st.data())
def test_fuzz_safetensors_header(model_dir, tmp_path_factory, data):
    folder = _copy(model_dir, tmp_path_factory.mktemp("st"))
    real = (model_dir / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", real[:8])[0]
    header = json.loads(real[8 : 8 + n])
    name = data.draw(st.sampled_from(sorted(k for k in header if k != "__metadata__")))
    entry = dict(header[name])
    field = data.draw(st.sampled_from(["dtype", "shape", "data_offsets"]))
    entry[field] = data.draw(st.one_of(
        json_values, st.lists(st.integers(-(2**65), 2**65), max_size=4),
        st.sampled_from(["F16", "BF16", "F64", "I64", "U8", "BOOL", "F8_E4M3"]),
    ))
    new_header = json.dumps({**header, name: entry}).encode()
    length = data.draw(st.one_of(st.just(len(new_header)), st.integers(0, 2**64 - 1)))
    blob = struct.pack("<Q", length) + new_header + real[8 + n :]
    if data.draw(st.booleans()):
        blob = blob[: data.draw(st.integers(0, len(blob)))]
    (folder / "model.safetensors").write_bytes(blob)
    expect_clean(lambda: MambaLM.load(folder))


_NUMBERS = st.sampled_from(["0", "1", "-1", "2", "nan", "inf", "-inf", "1e30", "0.5", "1.5",
                            "99999999999999999999", "", "x", "3", "\udcff", "٣"])
_FLAGS = {
    "train": ["--epochs", "--lr", "--batch", "--seq-len", "--accum", "--warmup", "--weight-decay",
              "--clip", "--seed", "--max-steps", "--holdout", "--eval-every", "--lora",
              "--lora-rank", "--lora-alpha", "--lora-dropout", "--bpe-vocab", "--sample-tokens",
              "--preset", "--tokenizer", "--prompt"],
    "generate": ["--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed", "--prompt",
                 "--backend"],
    "eval": ["--seq-len"],
    "bench": ["--configs", "--modes", "--steps", "--threads", "--generate"],
}


@FUZZ
@given(data=st.data())
def test_fuzz_cli_arguments(model_dir, capsys, data):
    cmd = data.draw(st.sampled_from(sorted(_FLAGS)))
    argv = [cmd]
    if cmd in ("generate", "eval"):
        argv.append(str(model_dir))
    if cmd == "eval":
        argv.append(str(model_dir / "corpus.txt"))
    for flag in data.draw(st.lists(st.sampled_from(_FLAGS[cmd]), max_size=4)):
        argv += [flag, data.draw(_NUMBERS | st.sampled_from(["in_proj", "foo", "small", "bpe"]))]
    capsys.readouterr()
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        assert exc.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, err
        return
    for key, value in vars(args).items():  # the argument types let no non-finite number through
        if isinstance(value, float):
            assert math.isfinite(value), (key, value)
    runnable = cmd == "eval" or (cmd == "generate" and args.max_new_tokens <= 64)
    if runnable:
        with bounded():
            rc = main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert rc in (0, 2)
        if rc == 2:
            assert err[-1].startswith("error: "), err


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny finished run with snapshots at steps 2 and 4 (its kernels compiled here)."""
    from engine.run import RunSpec, start

    tmp = tmp_path_factory.mktemp("fuzz_run")
    (tmp / "c.txt").write_text("the cat sat on the mat. " * 200)
    spec = RunSpec(preset="tiny", autosave_steps=2, autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=16, max_steps=4, eval_every=2))
    with start(spec, [tmp / "c.txt"], root=tmp / "runs") as run:
        run.train()
    return run.folder


_STATE_FILES = ("run.json", "latest.json", "best.json", "status.json", "data/manifest.json",
                "snapshots/step-4/trainer.json")


def _readers(run: Path) -> None:
    """What the CLI and the window read from a run folder before and while resuming it."""
    from engine.run import list_runs, open_run, read_run_spec, resume

    for info in list_runs(run.parent):  # the Runs tab formats these; it must never raise
        assert isinstance(info.steps, int) and isinstance(info.created, str)
        assert info.best_val_loss is None or math.isfinite(info.best_val_loss)
    rows = rf.read_kept_metrics(run)
    assert all(isinstance(r["step"], int) for r in rows)
    from engine.export.card import corpus_summary

    per_byte = rf.read_tokens_per_byte(run)  # the window's bits/byte axis on Open
    assert per_byte is None or (isinstance(per_byte, float) and per_byte > 0)
    assert isinstance(rf.read_epochs_done(run), int) and isinstance(corpus_summary(run), str)
    for which in (rf.LATEST, rf.BEST):
        ptr = rf.read_pointer(run, which)
        assert ptr is None or (isinstance(ptr["step"], int) and (
            ptr["val_loss"] is None or math.isfinite(ptr["val_loss"])))
    for fn in (lambda: read_run_spec(run), lambda: open_run(run)):
        try:
            fn()
        except MambaStudioError as exc:
            assert "\n" not in str(exc) and str(exc), repr(exc)
    try:
        with resume(run) as r:
            r.save()  # compares with the saved best, writes the pointers again
    except MambaStudioError as exc:
        assert "\n" not in str(exc) and str(exc), repr(exc)


@FUZZ
@given(data=st.data())
def test_fuzz_run_folder_state_files(run_dir, tmp_path_factory, data):
    """A hand-edited or damaged state file of a run (run.json's spec, the pointers, the status,
    the data manifest, a snapshot's trainer.json): every reader the CLI and the window use ends
    in its result or one line, never another exception (best.json's val_loss "abc" stopped the
    window from opening; a manifest's empty checksum map let a FIFO hang eval)."""
    import shutil

    run = tmp_path_factory.mktemp("state") / "runs" / run_dir.name
    shutil.copytree(run_dir, run, symlinks=True)
    (run / rf.LOCK).unlink(missing_ok=True)  # (it unlinked "run.lock", which no run writes)
    name = data.draw(st.sampled_from(_STATE_FILES))
    good = json.loads((run / name).read_text())
    base = good["spec"] if name == "run.json" else good
    sub = data.draw(st.sampled_from(["top", *[k for k, v in base.items()
                                              if isinstance(v, dict)],
                                     *[f"{k}[0]" for k, v in base.items()  # a list's first item
                                       if isinstance(v, list) and v and isinstance(v[0], dict)]]))
    item = sub.endswith("[0]")  # (a data manifest's sources: "bytes": "abc" raised in the window)
    key = sub.removesuffix("[0]")
    target = base if sub == "top" else base[key][0] if item else base[key]
    keys = data.draw(st.lists(st.sampled_from(sorted(target) + ["bogus"]), min_size=1,
                              max_size=3))
    vals = data.draw(st.lists(json_values, min_size=len(keys), max_size=len(keys)))
    mutated = _mutate(target, keys, vals)
    if item:
        mutated = {**base, key: [mutated, *base[key][1:]]}
    elif sub != "top":
        mutated = {**base, sub: mutated}
    doc = {**good, "spec": mutated} if name == "run.json" else mutated
    if data.draw(st.integers(0, 9)) == 0:
        doc = data.draw(json_values)
    (run / name).write_text(json.dumps(doc, allow_nan=True))
    with bounded():
        _readers(run)
