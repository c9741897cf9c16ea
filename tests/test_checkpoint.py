import json
import os
from pathlib import Path

import numpy as np
import pytest

from engine import CheckpointError, MambaLM
from engine.checkpoint import atomic_write_bytes, atomic_write_json, atomic_write_tensors
from engine.run import load_model
from engine.tokenizer import ByteTokenizer
from tests.helpers import random_batch, tiny_config, write_legacy_checkpoint


def _lm():
    return MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer(), seed=1)


def test_round_trip_gives_identical_logits_and_hf_layout(tmp_path):
    lm = _lm()
    lm.save(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["model_type"] == "mamba" and cfg["architectures"] == ["MambaForCausalLM"]
    assert cfg["hidden_size"] == 16 and cfg["state_size"] == 4 and cfg["time_step_rank"] == 1
    from safetensors.numpy import load_file

    keys = set(load_file(str(tmp_path / "model.safetensors")))
    assert "backbone.layers.1.mixer.A_log" in keys and "lm_head.weight" not in keys
    again = MambaLM.load(tmp_path)
    tokens, _ = random_batch(lm.config, b=1, length=5)
    np.testing.assert_array_equal(again.logits(tokens), lm.logits(tokens))


def test_loads_hf_style_folder_with_tied_lm_head_present(tmp_path):
    lm = _lm()
    tensors = dict(lm.params)
    tensors["lm_head.weight"] = lm.params["backbone.embeddings.weight"]
    atomic_write_tensors(tmp_path / "model.safetensors", tensors)
    hf = lm.config.to_hf_dict()
    del hf["tie_word_embeddings"]
    (tmp_path / "config.json").write_text(json.dumps(hf))
    again = MambaLM.load(tmp_path)  # no tokenizer.json -> bytes
    np.testing.assert_array_equal(again.params["backbone.norm_f.weight"],
                                  lm.params["backbone.norm_f.weight"])


def test_truncated_file_is_a_clear_error(tmp_path):
    _lm().save(tmp_path)
    p = tmp_path / "model.safetensors"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        MambaLM.load(tmp_path)


def test_garbage_and_missing_files(tmp_path):
    with pytest.raises(CheckpointError, match="an empty folder, not a model folder"):
        MambaLM.load(tmp_path)
    _lm().save(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    with pytest.raises(CheckpointError, match="corrupt"):
        MambaLM.load(tmp_path)


def test_mismatched_shape_names_the_tensor(tmp_path):
    lm = _lm()
    lm.save(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["hidden_size"] = 32
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"backbone\.embeddings\.weight has shape \(264, 16\)"):
        MambaLM.load(tmp_path)


def test_missing_tensor_is_named(tmp_path):
    lm = _lm()
    tensors = dict(lm.params)
    del tensors["backbone.layers.1.mixer.D"]
    lm.save(tmp_path)
    atomic_write_tensors(tmp_path / "model.safetensors", tensors)
    with pytest.raises(CheckpointError, match=r"layers\.1\.mixer\.D is missing"):
        MambaLM.load(tmp_path)


@pytest.mark.parametrize("fails", ["os.replace", "os.fsync"])
def test_atomic_write_leaves_old_file_on_failure(tmp_path, monkeypatch, fails):
    """The disk fills while the new bytes are written (fsync reports it) or at the rename: the
    old file stays whole (a write in place, or a rename before the write, would not)."""
    target = tmp_path / "f.bin"
    atomic_write_bytes(target, b"old")

    def boom(*a, **k):  # noqa: ANN002, ANN003
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fails, boom)
    with pytest.raises(CheckpointError, match="No space left"):
        atomic_write_bytes(target, b"new contents")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]  # no temp file left behind



@pytest.mark.parametrize("fails", ["os.replace", "os.fsync"])
def test_atomic_write_tensors_leaves_old_file_on_failure(tmp_path, monkeypatch, fails):
    """As ``atomic_write_bytes``: the disk fills at the fsync of the new tensors or at the
    rename, and the old weights stay whole, with no temporary file left. The tensors writer
    had no such test, so a save that never fsynced its file (its bytes lost, the file empty,
    after a power cut) passed."""
    target = tmp_path / "model.safetensors"
    atomic_write_tensors(target, {"a": np.zeros(3, np.float32)})
    old = target.read_bytes()

    def boom(*a, **k):  # noqa: ANN002, ANN003
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fails, boom)
    with pytest.raises(CheckpointError, match="No space left"):
        atomic_write_tensors(target, {"a": np.ones(5, np.float32)})
    assert target.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == ["model.safetensors"]


def test_ctrl_c_during_a_tensor_save_is_still_ctrl_c(tmp_path, monkeypatch):
    """Only safetensors' Rust panic (an allocation failing) is said as a MemoryError: a
    KeyboardInterrupt while the file is written goes on as itself (every BaseException was
    made "out of memory", Ctrl-C too), and no temporary file is left."""
    import safetensors.numpy

    def interrupted(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise KeyboardInterrupt

    monkeypatch.setattr(safetensors.numpy, "save_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_tensors(tmp_path / "model.safetensors", {"a": np.zeros(3, np.float32)})
    assert list(tmp_path.iterdir()) == []


def test_training_checkpoint_detects_mixed_files(tmp_path):
    from engine import TrainConfig, Trainer

    lm = _lm()
    ids = np.random.default_rng(0).integers(0, 200, 200)
    tr = Trainer(lm, ids, ids[:0], TrainConfig(batch_size=2, seq_len=16, max_steps=2))
    tr.run()
    write_legacy_checkpoint(tr, tmp_path)
    MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer(), seed=9).save(tmp_path)
    with pytest.raises(CheckpointError, match="do not match trainer_state"):
        load_model(tmp_path)


def test_bfloat16_weights_load_as_float32(tmp_path):
    """Many Hugging Face checkpoints are bfloat16, which NumPy has no type for: such a file was
    refused ("convert the weights"). Each bf16 value is its float32's upper 16 bits."""
    import struct

    from engine.checkpoint import read_tensors

    want = np.array([[0.0, 1.0, -2.5], [3.140625, 1e-3, 65280.0]], dtype=np.float32)
    bf16 = (want.view(np.uint32) >> 16).astype("<u2").tobytes()
    other = np.arange(3, dtype="<f2").tobytes()
    hdr = json.dumps({"__metadata__": {"format": "pt"},
                      "w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
                      "h": {"dtype": "F16", "shape": [3], "data_offsets": [12, 18]}}).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(hdr)) + hdr + bf16 + other)
    got = read_tensors(path)
    trunc = (want.view(np.uint32) & 0xFFFF0000).view(np.float32)  # what bf16 holds of each
    assert got["w"].dtype == np.float32 and np.array_equal(got["w"], trunc)
    assert np.array_equal(got["h"], np.arange(3, dtype=np.float16))
    path.write_bytes(struct.pack("<Q", len(hdr)) + hdr + bf16)  # cut short: refused, one line
    with pytest.raises(CheckpointError, match="corrupt or truncated safetensors file"):
        read_tensors(path)


def test_a_save_that_runs_out_of_memory_inside_safetensors_is_a_memory_error(tmp_path,
                                                                          monkeypatch):
    """An allocation failing inside safetensors' Rust code is a PanicException, a
    BaseException: it printed a Rust backtrace and a traceback instead of "out of memory".
    It is a MemoryError now, and no temporary file is left."""
    import safetensors.numpy

    class PanicException(BaseException):  # (pyo3's, by name)
        pass

    def panic(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise PanicException("PyObject pointer is null")

    monkeypatch.setattr(safetensors.numpy, "save_file", panic)
    with pytest.raises(MemoryError, match="writing model.safetensors"):
        atomic_write_tensors(tmp_path / "model.safetensors", {"a": np.zeros(3, np.float32)})
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_inside_safetensors_is_a_one_line_checkpoint_error(tmp_path):
    """safetensors raises its own SafetensorError (not an OSError) when the disk fills or a
    file limit is hit: it reached the user as a traceback. A child under `ulimit -f` hits it
    for real; the error names the file and the reason, and no temporary file is left."""
    import subprocess
    import sys

    code = ("import resource, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))\n"
            "import numpy as np\n"
            "from engine.checkpoint import atomic_write_tensors\n"
            "from engine.errors import CheckpointError\n"
            "try:\n"
            f"    atomic_write_tensors('{tmp_path}/model.safetensors', "
            "{'a': np.zeros(10**6, np.float32)})\n"
            "except CheckpointError as exc:\n"
            "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == f"could not write {tmp_path}/model.safetensors: File too large", (
        out.stdout, out.stderr)
    assert list(tmp_path.iterdir()) == []


def test_weights_are_written_with_the_modes_of_every_other_file(tmp_path):
    """safetensors writes its file owner-only (0600): a run's and an export's weights were
    unreadable by another account or a service that read their config.json (0644)."""
    import os

    old = os.umask(0o022)
    try:
        atomic_write_tensors(tmp_path / "model.safetensors", {"a": np.zeros(3, np.float32)})
        atomic_write_json(tmp_path / "config.json", {})
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {"model.safetensors": 0o644, "config.json": 0o644}, modes


@pytest.mark.parametrize("wrong", ["extra", "shape", "int"])
def test_weights_that_cannot_be_this_model_are_refused_before_they_are_read(tmp_path, wrong,
                                                                           monkeypatch):
    """A model folder whose weights file held 600 MB of other tensors took 1.33 GB of memory to
    be refused ("unexpected tensors"): the files' headers are checked against config.json
    first, and nothing of a file that cannot be this model is read."""
    import tracemalloc

    import engine.checkpoint as ckpt

    lm = _lm()
    lm.save(tmp_path)
    tensors = dict(lm.params)
    name = "backbone.layers.0.mixer.D"
    if wrong == "extra":
        tensors["backbone.extra.weight"] = np.zeros((4096, 2048), np.float32)  # 32 MB
    elif wrong == "shape":
        tensors[name] = np.zeros(tensors[name].size + 8_000_000, np.float32)
    else:
        tensors[name] = np.zeros((8_000_000, 1), np.int32)[:tensors[name].size, 0]
        tensors["backbone.pad"] = np.zeros(8_000_000, np.int32)
    atomic_write_tensors(tmp_path / "model.safetensors", tensors)
    read: list[object] = []
    real = ckpt.read_tensors
    monkeypatch.setattr(ckpt, "read_tensors", lambda p: read.append(p) or real(p))
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError) as info:
            ckpt.load_model_files(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(info.value)
    said = {"extra": "unexpected tensors ['backbone.extra.weight']",
            "shape": f"tensor {name} has shape (8000032,), the config needs (32,)",
            "int": f"tensor {name} has dtype int32, expected float"}[wrong]
    assert msg.startswith(f"{tmp_path / 'model.safetensors'}: ") and said in msg, msg
    assert read == [] and peak < 2_000_000, (read, peak)
    lm.save(tmp_path)  # the model's own file: read, once
    assert ckpt.load_model_files(tmp_path)[1].keys() == lm.params.keys() and len(read) == 1



def test_a_tokenizer_file_a_full_disk_stops_at_its_close_is_named(tmp_path, monkeypatch):
    """tokenizer.json's write failing at its close (a full disk) raised "No space left on
    device" naming no file: a run's save said so of nothing."""
    import errno

    real = Path.write_text

    def full(self, text, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        if self.name == "tokenizer.json":
            raise OSError(errno.ENOSPC, "No space left on device")  # (as a close raises it)
        return real(self, text, *a, **k)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError) as info:
        ByteTokenizer().save(tmp_path)
    assert info.value.filename == str(tmp_path / "tokenizer.json")


@pytest.mark.parametrize("target", ["loop", "nowhere"])
def test_a_weights_file_that_is_a_broken_link_is_named_so(tmp_path, target):
    """A model.safetensors that is a link to nothing or a loop was "no model.safetensors"."""
    _lm().save(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.unlink()
    weights.symlink_to(weights if target == "loop" else tmp_path / "nowhere")
    why = "loops back to itself" if target == "loop" else "points to nothing"
    with pytest.raises(CheckpointError, match=f"model.safetensors: a link that {why}"):
        MambaLM.load(tmp_path)


def test_a_folder_of_runs_names_one_of_them(tmp_path):
    """The runs root given where a run goes (generate RUNS, Open model on it) names its newest
    model, shell-quoted, instead of 'no config.json (not a model folder)'."""
    old, new = tmp_path / "run-1", tmp_path / "my run 2"
    _lm().save(old)
    _lm().save(new)
    (tmp_path / "notes").mkdir()
    os.utime(old, (1, 1))  # the newest is the one named
    with pytest.raises(CheckpointError, match=r"a folder of models, not a model; pass one of "
                                              r"them, e\.g\. '.*my run 2'$"):
        MambaLM.load(tmp_path)  # (exported models: it called them runs)
    (new / "run.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"a folder of runs, not a run; pass one of them, "
                                              r"e\.g\. '.*my run 2'$"):
        MambaLM.load(tmp_path)
    (tmp_path / "stray").mkdir()
    (tmp_path / "stray" / "config.json").mkdir()  # not a file: not a model
    os.utime(tmp_path / "stray", (2**31, 2**31))
    with pytest.raises(CheckpointError, match="my run 2"):
        MambaLM.load(tmp_path)
