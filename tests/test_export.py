"""engine.export: merged, PEFT (adapter + unmerged base) and GGUF files, and the CLI face."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from engine import ByteTokenizer, LoRAConfig, MambaLM, TrainConfig, Trainer, load_adapter
from engine.cli import main
from engine.errors import CheckpointError
from engine.export import PEFT_SUPPORT, export_gguf, export_merged, export_peft, peft_notices

from .helpers import tiny_config, write_legacy_checkpoint

TEXT = "the quick brown fox jumps over the lazy dog. " * 60


def _train(folder: Path, lora: LoRAConfig | None = None, steps: int = 4) -> MambaLM:
    lm = MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer(), seed=1)
    ids = lm.tokenizer.encode(TEXT)
    cfg = TrainConfig(epochs=1, batch_size=2, seq_len=16, max_steps=steps, lr=1e-2, warmup_steps=0,
                      lora=lora)
    tr = Trainer(lm, ids[:2000], ids[2000:], cfg)
    tr.run()
    write_legacy_checkpoint(tr, folder)
    return tr.lm


def _start_run(root: Path, lora: LoRAConfig | None, steps: int = 4, **spec_kw: object) -> Path:
    """A run folder (engine.run: run.json + snapshots), as the CLI and the app write them."""
    from engine.run import RunSpec, start

    (root / "corpus.txt").write_text(TEXT)
    spec = RunSpec(model={"d_model": 16, "n_layer": 2, "d_state": 4},
                   train=TrainConfig(epochs=1, batch_size=2, seq_len=16, max_steps=steps, lr=1e-2,
                                     warmup_steps=0, lora=lora), **spec_kw)  # type: ignore[arg-type]
    with start(spec, [root / "corpus.txt"], out=root / "run") as run:
        run.train()
    return root / "run"


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _start_run(tmp_path_factory.mktemp("run"), LoRAConfig(("in_proj", "x_proj", "dt_proj"), rank=2))


def _trained(run: Path) -> MambaLM:
    from engine.run import load_model

    return load_model(run)


def test_legacy_checkpoint_exports_too(tmp_path: Path) -> None:
    _train(tmp_path / "old", LoRAConfig(("in_proj",), rank=2), steps=2)
    assert export_peft(tmp_path / "old", tmp_path / "p") == []
    base = MambaLM.load(tmp_path / "p" / "base")
    load_adapter(base.params, tmp_path / "p")
    trained = MambaLM.load(tmp_path / "old")
    for n, a in trained.params.items():
        np.testing.assert_allclose(base.params[n], a, rtol=1e-6, atol=1e-6, err_msg=n)


def test_merged_export_is_the_trained_model_with_a_card(lora_run: Path, tmp_path: Path) -> None:
    assert export_merged(lora_run, tmp_path / "m") == []
    a, b = _trained(lora_run), MambaLM.load(tmp_path / "m")
    for name in a.params:
        np.testing.assert_array_equal(a.params[name], b.params[name])
    assert not (tmp_path / "m" / "optimizer.safetensors").exists()
    card = (tmp_path / "m" / "README.md").read_text()
    for needed in ("LoRA r=2 (alpha 2, dropout 0.0) on in_proj, x_proj, dt_proj",
                   "4 optimizer steps", "Samples (greedy)",
                   "AutoModelForCausalLM.from_pretrained", "1 file(s), 2,700 bytes"):
        assert needed in card, needed
    assert "Caveats" not in card  # (merged: exact in every tool)


def test_peft_export_points_at_an_unmerged_base_the_adapter_completes(lora_run: Path,
                                                                      tmp_path: Path) -> None:
    notes = export_peft(lora_run, tmp_path / "p")
    assert notes == peft_notices(["dt_proj", "in_proj", "x_proj"]) and "dt_proj" in notes[0]
    card = (tmp_path / "p" / "README.md").read_text()  # the caveat travels with the files
    assert f"## Caveats\n\n- {notes[0]}" in card and card.index(notes[0]) < card.index("## Use")
    conf = json.loads((tmp_path / "p" / "adapter_config.json").read_text())
    assert conf["base_model_name_or_path"] == str((tmp_path / "p" / "base").resolve())
    assert (tmp_path / "p" / "tokenizer_config.json").exists()
    base = MambaLM.load(tmp_path / "p" / "base")
    trained = _trained(lora_run)
    name = "backbone.layers.0.mixer.in_proj.weight"
    assert np.abs(base.params[name] - trained.params[name]).max() > 1e-6  # not the merged weights
    load_adapter(base.params, tmp_path / "p")  # applied once: the trained model again
    for n, a in trained.params.items():
        np.testing.assert_allclose(base.params[n], a, rtol=1e-6, atol=1e-6, err_msg=n)


def test_a_moved_peft_export_without_its_base_says_which_base_it_took(lora_run: Path,
                                                                      tmp_path: Path) -> None:
    """A moved export whose base/ was deleted took whatever model sat at the path its
    adapter_config.json names, without a word (another model there: eval 4.07 for 3.82)."""
    import shutil

    from engine.run import load_model

    export_peft(lora_run, tmp_path / "p")
    shutil.copytree(tmp_path / "p", tmp_path / "moved")
    shutil.rmtree(tmp_path / "moved" / "base")
    said: list[str] = []
    load_model(tmp_path / "moved", notify=said.append)
    assert len(said) == 1 and "has no base/ folder" in said[0]
    assert str((tmp_path / "p" / "base").resolve()) in said[0]
    said.clear()
    load_model(tmp_path / "p", notify=said.append)  # its own base/: nothing to say
    assert said == []
    with pytest.raises(CheckpointError, match="already a PEFT adapter export"):  # (it said
        export_peft(tmp_path / "p", tmp_path / "again")  # "not a LoRA run")
    notes = export_merged(tmp_path / "moved", tmp_path / "merged")  # (it said nothing)
    assert any("has no base/ folder" in n for n in notes), notes


def test_peft_export_refuses_what_peft_cannot_apply(tmp_path: Path) -> None:
    run = _start_run(tmp_path, LoRAConfig(("in_proj", "out_proj"), rank=2), steps=2)
    with pytest.raises(CheckpointError, match=r"out_proj.*use the merged export"):
        export_peft(run, tmp_path / "p")
    assert not (tmp_path / "p").exists()


def test_peft_notices_follow_the_measured_table() -> None:
    assert peft_notices(["in_proj", "x_proj"]) == []
    (line,) = peft_notices(["dt_proj"])
    assert "transformers 5.x: bypassed" in line and "4.x: exact" in line
    assert set(PEFT_SUPPORT) == {"in_proj", "x_proj", "dt_proj", "out_proj", "conv1d", "A_log",
                                 "embeddings"}
    from engine.lora import PEFT_PARTIAL, PEFT_REFUSES  # the window's warnings and tooltips

    exact = {t: [v == "exact" for v in row.values()] for t, row in PEFT_SUPPORT.items()}
    assert set(PEFT_PARTIAL) == {t for t, e in exact.items() if any(e) and not all(e)}
    for t, lines in PEFT_PARTIAL.items():  # the lines the window names are the table's
        assert lines == ", ".join(f"transformers {line}" for line, v in PEFT_SUPPORT[t].items()
                                  if v != "exact")
    assert set(PEFT_REFUSES) == {t for t, e in exact.items() if not any(e)}


def test_gguf_export_holds_llama_cpp_names_and_our_values(lora_run: Path, tmp_path: Path) -> None:
    import gguf

    export_gguf(lora_run, tmp_path / "m.gguf")
    r = gguf.GGUFReader(str(tmp_path / "m.gguf"))
    lm = _trained(lora_run)
    t = {x.name: np.asarray(x.data) for x in r.tensors}
    np.testing.assert_array_equal(t["token_embd.weight"], lm.params["backbone.embeddings.weight"])
    np.testing.assert_array_equal(t["blk.1.ssm_conv1d.weight"],
                                  lm.params["backbone.layers.1.mixer.conv1d.weight"][:, 0, :])
    np.testing.assert_allclose(t["blk.0.ssm_a"], -np.exp(lm.params["backbone.layers.0.mixer.A_log"]),
                               rtol=1e-6)
    assert "output.weight" not in t  # tied
    assert len(r.fields["tokenizer.ggml.tokens"].data) == lm.config.vocab_size  # padded with [PAD]
    arch = r.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "mamba"


def test_cli_export_writes_each_kind(lora_run: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["export", "--merged", str(lora_run), str(tmp_path / "m")]) == 0
    assert main(["export", "--gguf", str(lora_run), str(tmp_path / "m.gguf")]) == 0
    assert main(["export", "--peft", str(lora_run), str(tmp_path / "p")]) == 0
    err = capsys.readouterr().err
    assert "note: PEFT un-merged LoRA on dt_proj" in err and "wrote" in err
    assert f"PeftModel over {tmp_path / 'p'}/base" in err, err  # the path written, not "OUT"


@pytest.mark.parametrize("args,message", [
    (["--peft", "{run}", "{tmp}/p"], "not a LoRA run"),
    (["--merged", "{tmp}/missing", "{tmp}/m"], "missing: no such file or folder"),
    (["--gguf", "{tmp}/empty", "{tmp}/x.gguf"], "an empty folder, not a model folder"),
    (["--merged", "{run}", "{run}/out"], "of its own"),
    (["--gguf", "{run}", "{tmp}/afile/m.gguf"], "afile is a file, not a folder; choose another"),
    (["--merged", "{run}", "{tmp}/afile/hf"], "afile is a file, not a folder; choose another"),
])
def test_cli_export_errors_are_one_line(tmp_path: Path, capsys, args, message) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "full"
    MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer()).save(run)
    (tmp_path / "empty").mkdir()
    (tmp_path / "afile").write_text("not a folder")
    argv = ["export", *(a.format(run=run, tmp=tmp_path) for a in args)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_cli_export_write_error_names_the_output_not_a_temp_file(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "full"
    MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer()).save(run)
    out = tmp_path / "m.gguf"

    def denied(*_a: object, **_k: object) -> list[str]:  # what /sys (read-only) answered
        raise PermissionError(13, "Permission denied", str(tmp_path / ".m.gguf.1a2b3c.tmp"))

    monkeypatch.setattr("engine.export.export_gguf", denied)
    assert main(["export", "--gguf", str(run), str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {out}: cannot write (Permission denied); choose another output path"


def test_cli_export_read_error_of_the_run_is_not_blamed_on_the_output(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                                     monkeypatch) -> None:
    """The run unreadable, beside a writable output: it said "OUT: cannot write (Permission
    denied); choose another output path" (every error under the output's folder was its)."""
    run = tmp_path / "run"
    MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer()).save(run)

    def denied(*_a: object, **_k: object) -> list[str]:
        raise PermissionError(13, "Permission denied", str(run / "run.json"))

    monkeypatch.setattr("engine.export.export_merged", denied)
    assert main(["export", "--merged", str(run), str(tmp_path / "e1")]) == 2
    assert capsys.readouterr().err.strip() == f"error: {run / 'run.json'}: Permission denied"


def test_cli_export_needs_exactly_one_kind(capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as e:
        main(["export", "--merged", "--gguf", "a", "b"])
    assert e.value.code == 2


def test_export_never_writes_into_the_source(lora_run: Path) -> None:
    with pytest.raises(CheckpointError, match="of its own"):
        export_merged(lora_run, lora_run / "merged")
    with pytest.raises(CheckpointError, match="of its own"):
        export_gguf(lora_run, lora_run / "m.gguf")
    with pytest.raises(CheckpointError, match="of its own"):
        export_peft(lora_run, lora_run)


def test_an_export_never_writes_into_a_plain_model_folder_it_reads(lora_run: Path,
                                                                    tmp_path: Path) -> None:
    """Only runs were tried as the source, where the run-folder check fires first: without the
    source check `export --gguf M M/m.gguf` wrote into the model folder it read."""
    model = tmp_path / "model"
    export_merged(lora_run, model)
    before = sorted(p.name for p in model.iterdir())
    for fn, out in ((export_gguf, model / "m.gguf"), (export_merged, model / "again"),
                    (export_merged, model)):
        with pytest.raises(CheckpointError, match="inside \\(or around\\) the folder being exported"):
            fn(model, out)
    assert sorted(p.name for p in model.iterdir()) == before


def test_a_gguf_path_that_is_no_gguf_file_is_said_before_force_is_offered(
        lora_run: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """`export --gguf RUN afile` said "pass --force to replace an earlier GGUF export there",
    and with --force: "--force only replaces an earlier export"."""
    (tmp_path / "afile").write_text("file")
    assert main(["export", "--gguf", str(lora_run), str(tmp_path / "afile")]) == 2
    err = capsys.readouterr().err
    assert "afile: exists and is not a GGUF file" in err and "pass --force" not in err, err
    assert (tmp_path / "afile").read_text() == "file"


def test_a_gguf_export_to_a_name_ending_in_a_slash_is_refused(
        lora_run: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """`export --gguf RUN out/` wrote a file named "out" (a trailing slash names a folder)."""
    out = f"{tmp_path / 'ggdir'}/"
    assert main(["export", "--gguf", str(lora_run), out]) == 2
    err = capsys.readouterr().err
    assert f"{out}: a folder's name (it ends in /) for a --gguf export" in err, err
    assert f"{out}model.gguf" in err and not (tmp_path / "ggdir").exists()


def test_an_empty_folder_given_as_the_output_keeps_its_mode(lora_run: Path, tmp_path: Path
                                                            ) -> None:
    """The export is renamed onto an empty folder given as its output: the folder came back
    with the umask's mode (a read-only one became writable; a group-shared one private)."""
    import os
    import stat

    out = tmp_path / "shared"
    out.mkdir()
    group = 100 if os.geteuid() == 0 else out.stat().st_gid  # ("users": root may give it)
    os.chown(out, -1, group)
    out.chmod(0o2770)
    export_merged(lora_run, out)
    assert (out / "model.safetensors").is_file()
    assert stat.S_IMODE(out.stat().st_mode) == 0o2770
    assert out.stat().st_gid == group  # its group too (a shared folder's members lost it)


def test_an_export_killed_before_its_rename_leaves_nothing_for_good(lora_run: Path,
                                                                     tmp_path: Path) -> None:
    """A killed export left its hidden staging folder (a full copy of the weights) beside the
    output for good; the next export to that output removes it, never a live export's."""
    import fcntl
    import os

    dead = tmp_path / ".out.export-dead0000"
    dead.mkdir()
    (dead / "model.safetensors").write_bytes(b"\0" * 1000)
    live = tmp_path / ".out.export-live0000"
    live.mkdir()
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a running export holds its own
    try:
        export_merged(lora_run, tmp_path / "out")
        assert not dead.exists() and live.is_dir()
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.export-live0000", "out"]


def test_existing_outputs_are_refused_in_one_line_unless_force(lora_run: Path, tmp_path: Path,
                                                                capsys) -> None:  # type: ignore[no-untyped-def]
    """An existing file where a folder goes, a non-empty folder, an existing .gguf: one line
    naming the path and the fix; --force replaces an earlier export, never other files."""
    (tmp_path / "afile").write_text("x")
    assert main(["export", "--merged", str(lora_run), str(tmp_path / "afile")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "afile: exists and is not a folder" in err, err
    out = tmp_path / "adapter"
    assert main(["export", "--peft", str(lora_run), str(out)]) == 0
    capsys.readouterr()
    before = (out / "adapter_model.safetensors").stat().st_mtime_ns
    for kind in ("--peft", "--merged"):
        assert main(["export", kind, str(lora_run), str(out)]) == 2
        err = capsys.readouterr().err
        assert "folder is not empty" in err and "--force" in err and err.count("\n") == 1, err
    assert (out / "adapter_model.safetensors").stat().st_mtime_ns == before  # untouched
    assert main(["export", "--merged", str(lora_run), str(out), "--force"]) == 0
    capsys.readouterr()
    assert (out / "model.safetensors").exists() and not (out / "adapter_config.json").exists()
    (out / "notes.txt").write_text("mine")
    assert main(["export", "--peft", str(lora_run), str(out), "--force"]) == 2
    assert "does not write (notes.txt)" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine"
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"old")  # a file of the user's, not an export: --force leaves it alone
    assert main(["export", "--gguf", str(lora_run), str(gguf), "--force"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "m.gguf: exists and is not a GGUF file" in err, err
    assert gguf.read_bytes() == b"old"
    gguf.write_bytes(b"GGUF old export")
    assert main(["export", "--gguf", str(lora_run), str(gguf)]) == 2
    assert "m.gguf: exists; choose a new file name, or pass --force" in capsys.readouterr().err
    assert main(["export", "--gguf", str(lora_run), str(gguf), "--force"]) == 0
    capsys.readouterr()
    assert gguf.read_bytes()[:4] == b"GGUF"
    assert main(["export", "--gguf", str(lora_run), str(tmp_path)]) == 2
    assert "is a folder; give a file path" in capsys.readouterr().err


def test_missing_parent_folders_are_created_and_said(lora_run: Path, tmp_path: Path) -> None:
    """Every export creates missing parent folders (as train --out does) and says so."""
    for fn, out in ((export_merged, tmp_path / "a" / "b" / "merged"),
                    (export_peft, tmp_path / "c" / "d" / "adapter"),
                    (export_gguf, tmp_path / "e" / "f" / "m.gguf")):
        notes = fn(lora_run, out)
        assert out.exists() and f"created the missing folder {out.parent.parent}" in notes[0], notes


@pytest.mark.parametrize("records", ["file", "line", "stream"])
def test_card_counts_the_held_out_targets_the_run_trains_against(tmp_path: Path,
                                                                 records: str) -> None:
    """The card's "(H held out)" is the count ``train`` prints: by-document splits used to read
    0 (every token sits before n_train there) and stream runs one more than the targets; its
    total "T tokens" is train's train + held-out counts (it counted the leading end-of-text id
    too)."""
    from engine.export.card import corpus_summary
    from engine.run import RunSpec, start

    (tmp_path / "corpus.txt").write_text("\n".join(f"line {i} of the corpus, some words"
                                                   for i in range(120)))
    spec = RunSpec(model={"d_model": 16, "n_layer": 2, "d_state": 4}, records=records,
                   train=TrainConfig(epochs=1, batch_size=2, seq_len=16, max_steps=1))
    with start(spec, [tmp_path / "corpus.txt"], out=tmp_path / "run") as run:
        train, held = run.trainer.token_counts
    assert held > 0
    assert f"{train + held:,} tokens ({held:,} held out)" in corpus_summary(tmp_path / "run")


def _eval_run_loss(run: Path, capsys) -> str:  # type: ignore[no-untyped-def]
    """The loss ``python -m engine eval RUN`` prints (the run's held-out split), as text."""
    capsys.readouterr()
    assert main(["eval", str(run)]) == 0
    return capsys.readouterr().out.split()[1]


def test_card_states_the_held_out_loss_of_the_exported_weights(lora_run: Path, tmp_path: Path,
                                                               capsys) -> None:  # type: ignore[no-untyped-def]
    """The card used to state the last epoch's held-out loss whatever step the weights were
    from (a walk-through: 2.1350 measured at step 22 for step-30 weights, which `eval` puts at
    2.0895); the exported weights are now evaluated on the run's held-out split, as `eval` does."""
    loss = _eval_run_loss(lora_run, capsys)
    export_merged(lora_run, tmp_path / "m")
    export_peft(lora_run, tmp_path / "p")
    for card in (tmp_path / "m" / "README.md", tmp_path / "p" / "README.md"):
        text = card.read_text()
        assert f"held-out loss {loss} at step 4 (the exported weights; perplexity" in text, text


def test_card_says_when_its_held_out_loss_is_from_an_earlier_step(lora_run: Path) -> None:
    """When the exported weights cannot be evaluated in time (nor carry their own loss), the card
    states the last loss measured, its step, the weights' step, and how to measure theirs."""
    from dataclasses import replace

    from engine.export.card import card_text, measure_held_out
    from engine.export.source import open_source

    val = {"loss": 2.135, "perplexity": 8.46, "bits_per_byte": 3.08, "accuracy": 0.4,
           "tokens": 2909, "of_tokens": 2909}
    run = replace(open_source(lora_run), val=val, val_step=2, snap_val_loss=None)
    held = measure_held_out(run, budget_s=0.0)  # gives up at once
    assert held.step == 2 and held.exported_step == 4 and not held.current
    assert held.note is not None and "not measured" in held.note and "step 2" in held.note
    text = card_text(run, "merged", held=held)
    assert (f"held-out loss 2.1350 at step 2 (perplexity 8.46, 3.080 bits/byte, top-1 0.400, "
            f"2,909 tokens; the exported weights are from step 4; run `python -m engine eval "
            f"{lora_run}` for their loss)") in text, text
    snap = replace(run, snap_val_loss=1.5)  # the loss saved with the exported snapshot
    assert "held-out loss 1.5000 at step 4 (the exported weights)" in card_text(
        snap, "merged", held=measure_held_out(snap, budget_s=0.0))


def test_peft_base_card_describes_the_unmerged_base_not_the_training(lora_run: Path,
                                                                     tmp_path: Path) -> None:
    """base/README.md used to be the trained run's card (steps, LoRA, held-out loss, samples of
    the trained model); base/ holds the weights before the adapter."""
    export_peft(lora_run, tmp_path / "p")
    card = (tmp_path / "p" / "base" / "README.md").read_text()
    for wrong in ("optimizer steps", "held-out loss 1", "held-out loss 2", "Samples (greedy)",
                  "# A Mamba-1 language model trained"):
        assert wrong not in card, wrong
    for needed in ("unmerged base", "folder above", "a new model (a custom configuration, "
                   "`default` weight init, seed 0) that the run did not train",
                   "r=2 on in_proj, x_proj, dt_proj", "../README.md", "PeftModel.from_pretrained"):
        assert needed in card, needed


def test_the_card_of_a_run_from_another_runs_snapshot_names_that_run_and_step(tmp_path: Path
                                                                            ) -> None:
    """A run from --init of another run's snapshot: the card names that run and the step its
    weights are from (not the snapshot folder's name), and the LoRA's own alpha and dropout."""
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first = _start_run(tmp_path / "first", None, steps=2)
    first = first.rename(tmp_path / "first" / "pretrain")
    run = _start_run(tmp_path / "second", LoRAConfig(("in_proj",), rank=2, alpha=4.0, dropout=0.1),
                     steps=1, init=str(first))
    export_merged(run, tmp_path / "m")
    card = (tmp_path / "m" / "README.md").read_text()
    assert "started from the trained weights of run `pretrain` at step 2, not from random" in card, card
    assert "LoRA r=2 (alpha 4.0, dropout 0.1) on in_proj" in card, card


def test_peft_base_card_names_the_init_model(tmp_path: Path) -> None:
    pre = tmp_path / "pre"
    MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer(), seed=3).save(pre)
    run = _start_run(tmp_path, LoRAConfig(("in_proj",), rank=2), steps=2, init=str(pre))
    export_peft(run, tmp_path / "p")
    card = (tmp_path / "p" / "base" / "README.md").read_text()
    assert f"the model the run started from (`--init {pre}` as it was then), unchanged" in card, card
    card = (tmp_path / "p" / "README.md").read_text()  # the adapter's: a reader took its 2
    assert "started from the trained weights of `pre`, not from random" in card, card  # steps
    assert str(tmp_path) not in card  # (its path as typed: a home folder in a shared card)
    assert "LoRA r=2 (alpha 2, dropout 0.0) on in_proj" in card, card
    base, init = MambaLM.load(tmp_path / "p" / "base"), MambaLM.load(pre)
    for n, a in init.params.items():
        np.testing.assert_array_equal(base.params[n], a, err_msg=n)
    record = json.loads((run / "run.json").read_text())  # a run.json without init_from (an
    del record["init_from"]  # older run's): the card names the model, not the path as typed
    (run / "run.json").write_text(json.dumps(record))
    export_merged(run, tmp_path / "m")
    card = (tmp_path / "m" / "README.md").read_text()
    assert "started from the trained weights of `pre`, not from random" in card, card
    assert str(tmp_path) not in card


def test_export_says_when_it_passes_over_a_corrupt_latest_snapshot(tmp_path: Path,
                                                                   capsys) -> None:  # type: ignore[no-untyped-def]
    """A truncated model.safetensors in the latest snapshot: export used to fall back to an older
    snapshot silently; it now says so, as eval and generate do."""
    run = _start_run(tmp_path, LoRAConfig(("in_proj",), rank=2), steps=4, autosave_steps=2)
    assert (run / "snapshots" / "step-2").is_dir()
    weights = run / "snapshots" / "step-4" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    capsys.readouterr()
    assert main(["export", "--merged", str(run), str(tmp_path / "m")]) == 0
    err = capsys.readouterr().err
    assert "step-4" in err and "using step-2 instead" in err, err
    assert "at step 2 (the exported weights" in (tmp_path / "m" / "README.md").read_text()
    assert main(["export", "--gguf", str(run), str(tmp_path / "m.gguf")]) == 0
    assert "using step-2 instead" in capsys.readouterr().err
    (note,) = export_peft(run, tmp_path / "p")
    assert note.endswith("; using step-2 instead"), note


@pytest.mark.parametrize("kind", ["merged", "peft"])
def test_a_failed_export_leaves_no_partial_folder(lora_run: Path, tmp_path: Path, monkeypatch,
                                                  kind: str) -> None:  # type: ignore[no-untyped-def]
    """A full disk mid-export left a folder without its weights (config.json and a card only),
    which looked like an export; now nothing appears under the output name."""
    import engine.export.card as card

    def full(*_a: object, **_k: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(card.ckpt, "atomic_write_bytes", full)
    out = tmp_path / "out"
    with pytest.raises(CheckpointError, match="cannot write the export .No space left"):
        (export_merged if kind == "merged" else export_peft)(lora_run, out)
    assert not out.exists() and list(tmp_path.iterdir()) == []  # nor its hidden staging folder


def test_an_export_racing_another_for_one_new_folder_says_so(lora_run: Path, tmp_path: Path,
                                                             monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Two exports into one new folder at once: one printed "wrote" for a folder without its
    weights. Now the one that publishes second refuses, and the folder is the first one's whole."""
    import engine.export.merged as merged

    out = tmp_path / "out"
    real = merged.write_card

    def other_export_first(folder: Path, *a: object, **k: object) -> None:
        real(folder, *a, **k)
        if not other:
            other.append(1)
            export_merged(lora_run, out)  # the other process finishes while this one writes

    other: list[int] = []

    monkeypatch.setattr(merged, "write_card", other_export_first)
    with pytest.raises(CheckpointError, match="written by another export meanwhile"):
        export_merged(lora_run, out)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["README.md", "config.json", "generation_config.json", "model.safetensors",
         "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"])
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_force_replaces_an_earlier_export_whole(lora_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    export_merged(lora_run, out)
    (out / "model.safetensors").write_bytes(b"old")
    export_merged(lora_run, out, force=True)
    assert (out / "model.safetensors").stat().st_size > 1000
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    peft = tmp_path / "peft"
    export_peft(lora_run, peft)
    cfg = json.loads((peft / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == str((peft / "base").resolve())  # not the staging folder


def test_a_short_gguf_write_names_the_file_and_the_free_space(lora_run: Path, tmp_path: Path,
                                                             monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A full disk during a GGUF export said only "2048 requested and 1344 written"."""
    import gguf

    def short(*_a: object, **_k: object) -> None:
        raise OSError("2048 requested and 1344 written")

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", short)
    out = tmp_path / "m.gguf"
    with pytest.raises(CheckpointError, match=r"m\.gguf: cannot write the GGUF file \(the disk "
                                              r"took only part of it\); the disk has room, so a "
                                              r"file-size limit stopped it"):
        export_gguf(lora_run, out)  # (this disk has room: so it was a limit; it said numpy's
    assert list(tmp_path.iterdir()) == []  # "2048 requested and 1344 written")
    real = os.statvfs

    def nearly_full(path):  # noqa: ANN001, ANN202
        st = real(path)  # (the fields as they are, but free space for a hundredth of the model)
        return type("S", (), {"f_bavail": 1, "f_frsize": 4096, "f_files": st.f_files,
                              "f_favail": st.f_favail})()
    monkeypatch.setattr(os, "statvfs", nearly_full)
    with pytest.raises(CheckpointError, match=r"\(the disk took only part of it\); 0\.0 MB free "
                                              "on its disk: free some space"):
        export_gguf(lora_run, out)


def test_two_gguf_exports_to_one_new_name_do_not_both_say_wrote(lora_run: Path, tmp_path: Path,
                                                                 monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Two exports to one new file at once: both said "wrote", the later had replaced the
    earlier without --force. The one that finds the file made meanwhile refuses and leaves it."""
    from engine.export import gguf_file

    out = tmp_path / "m.gguf"
    write = gguf_file._write

    def other_export_first(gguf, run, out_path, tmp):  # noqa: ANN001, ANN202
        write(gguf, run, out_path, tmp)
        out_path.write_bytes(b"the other export's file")  # published while this one wrote

    monkeypatch.setattr(gguf_file, "_write", other_export_first)
    with pytest.raises(CheckpointError, match=r"m\.gguf: written by another export meanwhile; "
                                              "export into a new file name"):
        export_gguf(lora_run, out)
    assert out.read_bytes() == b"the other export's file"
    assert [p.name for p in tmp_path.iterdir()] == ["m.gguf"]  # no temporary file left
    monkeypatch.setattr(gguf_file, "_write", write)
    export_gguf(lora_run, tmp_path / "n.gguf")  # alone: published, no temporary file left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf", "n.gguf"]
    assert (tmp_path / "n.gguf").read_bytes()[:4] == b"GGUF"
    assert (tmp_path / "n.gguf").stat().st_nlink == 1
    before = (tmp_path / "n.gguf").stat().st_ino
    export_gguf(lora_run, tmp_path / "n.gguf", force=True)  # --force replaces an earlier one
    assert (tmp_path / "n.gguf").stat().st_ino != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf", "n.gguf"]


def test_an_export_folder_is_readable_as_mkdir_makes_it(lora_run: Path, tmp_path: Path) -> None:
    """Staged through mkdtemp, exports were published with mode 0700 (only their writer could
    read them)."""
    import os

    umask = os.umask(0o022)
    try:
        export_merged(lora_run, tmp_path / "out")
    finally:
        os.umask(umask)
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o755


def test_an_export_to_a_link_to_a_folder_writes_into_that_folder(lora_run: Path,
                                                                 tmp_path: Path) -> None:
    """A link to an empty folder was refused with "written by another export meanwhile (Not a
    directory)"; with --force over an earlier export through the link, a hidden .old- folder
    was left behind."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "latest"
    link.symlink_to(real)
    export_merged(lora_run, link)
    assert link.is_symlink() and (real / "model.safetensors").stat().st_size > 1000
    export_merged(lora_run, link, force=True)
    assert link.is_symlink() and (real / "model.safetensors").stat().st_size > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["links", "real"]  # nothing hidden left
    assert [p.name for p in (tmp_path / "links").iterdir()] == ["latest"]
    dangling = tmp_path / "links" / "gone"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="which does not exist; create that folder or "):
        export_merged(lora_run, dangling)
    gone = tmp_path / "links" / "gone.gguf"  # a file's link: not "create that folder"
    gone.symlink_to(tmp_path / "nowhere.gguf")
    with pytest.raises(CheckpointError, match="which does not exist; remove the link or choose"):
        export_gguf(lora_run, gone)


def test_a_gguf_export_through_a_link_replaces_the_file_it_points_to(lora_run: Path,
                                                                      tmp_path: Path) -> None:
    """--force through a link to an earlier .gguf replaced the link with a file and left the
    earlier export where the link had pointed."""
    real = tmp_path / "real.gguf"
    export_gguf(lora_run, real)
    real.write_bytes(real.read_bytes()[:64])  # an earlier, different export (still GGUF magic)
    link = tmp_path / "model.gguf"
    link.symlink_to(real)
    export_gguf(lora_run, link, force=True)
    assert link.is_symlink() and real.stat().st_size > 1000


def test_an_export_inside_an_earlier_export_is_refused(lora_run: Path, tmp_path: Path) -> None:
    """A save dialog that stepped into an earlier export folder wrote ``X/X`` (an export nested
    in another) without a word: it is refused, naming how to replace the earlier one."""
    out = tmp_path / "m"
    export_merged(lora_run, out)
    with pytest.raises(CheckpointError, match=r"inside an earlier export, .*m; choose a folder"):
        export_merged(lora_run, out / "m")
    with pytest.raises(CheckpointError, match="inside an earlier export"):
        export_peft(lora_run, out / "deeper" / "a")
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == []
    export_gguf(lora_run, out / "model.gguf")  # a .gguf beside the merged files is fine
    assert (out / "model.gguf").is_file()


@pytest.mark.parametrize("raised", ["oserror", "checkpoint"])
def test_a_full_disk_during_a_merged_export_names_the_output_and_the_fix(
        lora_run: Path, tmp_path: Path, capsys, monkeypatch, raised) -> None:  # type: ignore[no-untyped-def]
    """It said "could not write .../.m.export-XXXX/model.safetensors: No space left on device":
    a hidden folder's file, and no fix (the GGUF export said how much was free and what to do)."""
    import errno

    from engine import checkpoint as ckpt

    def full(folder: Path, *_a: object, **_k: object) -> None:
        path = Path(folder) / "model.safetensors"
        if raised == "oserror":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        raise CheckpointError(f"could not write {path}: No space left on device")

    monkeypatch.setattr(ckpt, "save_model_files", full)
    out = tmp_path / "m"
    assert main(["export", "--merged", str(lora_run), str(out)]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said[:-1] == ["scoring the weights on the run's held-out set for the model card (at "
                         "most 10 s)..."], said  # what it did first, then the one error line
    err = said[-1]
    assert err.startswith(f"error: {out}: cannot write the export (No space left on device); "
                          "nothing new was written there"), err
    assert "free some space or choose another folder" in err and ".export-" not in err, err
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == []
    deep = tmp_path / "a" / "b" / "m"  # the folders made for it go too (a/ and a/b/ stayed
    assert main(["export", "--merged", str(lora_run), str(deep)]) == 2  # while it said
    err = capsys.readouterr().err  # "nothing new"), with the disk's advice (it read the space
    assert "nothing new was written there" in err  # of a folder it had removed: "choose
    assert "MB free on its disk: free some space or choose another folder" in err, err  # another")
    assert [p.name for p in tmp_path.iterdir()] == []
    import gguf

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file",  # the GGUF export's too
                        lambda *_a, **_k: full(tmp_path))
    assert main(["export", "--gguf", str(lora_run), str(tmp_path / "c" / "m.gguf")]) == 2
    assert [p.name for p in tmp_path.iterdir()] == []


def test_a_mount_point_is_refused_with_a_folder_inside_it_named(lora_run: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """An empty folder that is the top of a mounted disk (a USB stick, a Docker volume) failed
    after the whole export with "written by another export meanwhile (Device or resource
    busy)": a rename cannot replace a mount point. It is refused first, with the fix."""
    import os

    from engine.export.source import check_dest

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == mnt or real(p))
    for kind in (export_merged, export_peft):
        with pytest.raises(CheckpointError, match="the top of a mounted disk; export into a new "
                           "folder inside it, e.g. .*mnt/model"):
            kind(lora_run, mnt)
    with pytest.raises(CheckpointError, match="mounted disk"):
        check_dest(mnt)  # what train --export-adapter checks before training
    check_dest(mnt / "model")  # a folder inside it is fine
    assert list(mnt.iterdir()) == []


def test_a_publish_refused_for_another_reason_is_not_blamed_on_another_export(
        lora_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import os

    real = os.rename

    def busy(src: object, dst: object) -> None:
        if Path(str(dst)).name == "out":
            raise OSError(errno.EBUSY, "Device or resource busy")
        real(src, dst)

    monkeypatch.setattr(os, "rename", busy)
    with pytest.raises(CheckpointError) as info:
        export_merged(lora_run, tmp_path / "out")
    msg = str(info.value)
    assert "another export" not in msg and "Device or resource busy" in msg, msg
    assert "nothing new was written there; choose another folder" in msg
    assert [p.name for p in tmp_path.iterdir()] == []  # no staging folder left


def test_a_failed_forced_export_keeps_the_earlier_one(lora_run: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """--force over an earlier export moves it aside first: a publish refused after that puts
    it back whole, with no hidden copy left beside it."""
    import errno
    import os

    out = tmp_path / "out"
    export_merged(lora_run, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = os.rename

    def busy(src: object, dst: object) -> None:
        if ".export-" in Path(str(src)).name:  # the new export's staging folder, published
            raise OSError(errno.EBUSY, "Device or resource busy")
        real(src, dst)

    monkeypatch.setattr(os, "rename", busy)
    with pytest.raises(CheckpointError, match="Device or resource busy"):
        export_merged(lora_run, out, force=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_an_export_cut_short_leaves_no_staging_folder(lora_run: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      error: type[BaseException]) -> None:
    """Ctrl-C (or a bug) while the export's files are written: nothing is left beside the
    output, not even the hidden staging folder."""
    import engine.export.card as card

    def cut(*_a: object, **_k: object) -> None:
        raise error()

    monkeypatch.setattr(card.ckpt, "atomic_write_bytes", cut)
    with pytest.raises(error):
        export_merged(lora_run, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["snapshots/step-99", "data/hf", "tb/hf"])
def test_an_export_of_a_snapshot_is_refused_inside_its_run(lora_run: Path, tmp_path: Path,
                                                           where: str) -> None:
    """From one snapshot into the run's own snapshots/ (then read as a broken snapshot and
    pruned by the next save), data/ or tb/: it was accepted."""
    snap = sorted((lora_run / "snapshots").iterdir())[-1]
    with pytest.raises(CheckpointError, match=f"inside the run folder {lora_run}"):
        export_merged(snap, lora_run / where)
    assert not (lora_run / where).exists()


def test_an_export_set_aside_by_a_killed_force_comes_back_or_goes(lora_run: Path,
                                                                  tmp_path: Path) -> None:
    """--force sets the earlier export aside as `.<out>.old-*` before its rename: a kill after
    that left the copy hidden for good, and a kill between the two renames left no output at
    all (the earlier export hidden, the new one in a staging folder the next export removed)."""
    out = tmp_path / "out"
    export_merged(lora_run, out)
    # a kill between the renames: the earlier export set aside, nothing at `out`
    aside = tmp_path / ".out.old-killed01"
    out.rename(aside)
    staged = tmp_path / ".out.export-killed01"
    staged.mkdir()
    assert main(["export", "--merged", str(lora_run), str(out)]) == 2  # it is back, and kept
    assert (out / "model.safetensors").is_file() and not aside.exists() and not staged.exists()
    # a kill after the new one was in: the set-aside copy goes with the next export
    aside.mkdir()
    (aside / "model.safetensors").write_bytes(b"\0" * 1000)
    export_merged(lora_run, out, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_export_in_progress_keeps_its_staging_folder_from_another(lora_run: Path,
                                                                     tmp_path: Path) -> None:
    """A second export to the same output tidies what killed exports left: never the staging
    folder of one that is writing now (it is locked; removing it crashed that export)."""
    from engine.export.source import _clear_stale, staged_folder

    out = tmp_path / "out"
    with staged_folder(out) as tmp:
        (tmp / "model.safetensors").write_bytes(b"\0" * 10)
        _clear_stale(out)  # what another export to `out` does first
        assert (tmp / "model.safetensors").is_file()
    assert (out / "model.safetensors").is_file()


def test_an_empty_output_folder_this_user_cannot_write_in_is_refused(
        lora_run: Path, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """(Tests run as root, where permission bits stop nothing: the access check is faked.)"""
    import os

    from engine.export import source

    out = tmp_path / "ro"
    out.mkdir()
    real = os.access
    monkeypatch.setattr(source.os, "access",
                        lambda p, mode: False if Path(p) == out else real(p, mode))
    with pytest.raises(CheckpointError, match="cannot write in it"):
        export_merged(lora_run, out)
    assert list(out.iterdir()) == []


def test_peft_export_says_it_scores_and_a_run_from_it_records_where_it_came_from(
        lora_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`export --peft` scored its card's held-out set without a word (only --merged said it);
    a run started from a PEFT export recorded no init_from."""
    from engine import runformat as rf
    from engine.cli import main

    out = tmp_path / "adapter"
    assert main(["export", "--peft", str(lora_run), str(out)]) == 0
    assert "scoring the weights on the run's held-out set" in capsys.readouterr().err
    (tmp_path / "c.txt").write_text("the cat sat on the mat. " * 80)
    new = tmp_path / "from-peft"
    assert main(["train", str(tmp_path / "c.txt"), "--init", str(out), "--max-steps", "1",
                 "--seq-len", "32", "--batch", "2", "--sample-tokens", "0", "--out",
                 str(new)]) == 0
    assert rf.read_run_json(new)["init_from"] == {"path": str(out.resolve()), "step": None}


def test_a_folder_export_may_replace_an_earlier_one_named_like_a_gguf_file(
        lora_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The .gguf-name refusal is for a new output: an existing folder of that name (an export
    made before the refusal) is replaced with --force as any earlier export."""
    from engine.cli import main

    out = tmp_path / "old.gguf"
    assert main(["export", "--merged", str(lora_run), str(tmp_path / "x")]) == 0
    (tmp_path / "x").rename(out)
    assert main(["export", "--merged", str(lora_run), str(out), "--force"]) == 0
    assert (out / "config.json").is_file()


def test_an_export_of_a_run_another_process_trains_names_its_snapshot(lora_run: Path,
                                                                       tmp_path: Path) -> None:
    """`export` of a run in training took its latest snapshot without a word (the window's list
    said step 121, the export was of step 143)."""
    from engine import runformat as rf

    step = rf.read_pointer(lora_run)["step"]
    assert not any("is training" in n for n in export_merged(lora_run, tmp_path / "a"))
    lock = rf.RunLock(lora_run).acquire()  # (held as a training process holds it)
    try:
        for notes in (export_merged(lora_run, tmp_path / "b"),
                      export_gguf(lora_run, tmp_path / "b.gguf")):
            assert f"{lora_run} is training: this is its latest snapshot, step-{step}; the steps " \
                "after it are not in the export" in notes, notes
    finally:
        lock.release()


def test_a_peft_export_exports_merged_and_as_gguf(lora_run: Path, tmp_path: Path) -> None:
    """`export --gguf` / `--merged` of a PEFT export said "no config.json (not a model folder)",
    though generate and eval read the same folder: its base with the adapter merged in."""
    from engine import load_model

    export_peft(lora_run, tmp_path / "peft")
    want = load_model(tmp_path / "peft")
    export_merged(tmp_path / "peft", tmp_path / "merged")
    got = MambaLM.load(tmp_path / "merged")
    for k, v in want.params.items():
        np.testing.assert_array_equal(got.params[k], v)
    base = MambaLM.load(tmp_path / "peft" / "base")  # the adapter is in: not the bare base
    assert any(not np.array_equal(base.params[k], v) for k, v in got.params.items())
    export_gguf(tmp_path / "peft", tmp_path / "m.gguf")
    assert (tmp_path / "m.gguf").read_bytes()[:4] == b"GGUF"


def test_a_killed_gguf_export_leaves_no_temp_file_past_the_next_export(lora_run: Path,
                                                                       tmp_path: Path) -> None:
    """A GGUF export killed before its rename left its hidden .k.gguf.<hex>.tmp (up to the
    model's size) through every later export, --force too. The next export removes it, and
    leaves alone one a live export holds (its lock)."""
    import fcntl
    import os

    from engine.export.source import locked_temp

    out = tmp_path / "k.gguf"
    stale = tmp_path / ".k.gguf.a59a77786be1.tmp"
    stale.write_bytes(b"GGUF" + b"\0" * 20)  # as a kill -9 mid-write leaves it
    other = tmp_path / ".other.gguf.0123456789ab.tmp"  # another output's: not ours to take
    other.write_bytes(b"x")
    with locked_temp(out) as live:  # an export writing to the same name right now
        export_gguf(lora_run, out)
        assert Path(live).exists() and not stale.exists() and other.exists()
        fd = os.open(live, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                raise AssertionError("the live export's temp file was not locked")
            except BlockingIOError:
                pass
        finally:
            os.close(fd)
        Path(live).unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, "k.gguf"]
    stale.write_bytes(b"GGUF")  # and an export refused (no --force over k.gguf) removes it too
    with pytest.raises(CheckpointError, match="force"):
        export_gguf(lora_run, out)
    assert not stale.exists()


def test_the_card_samples_the_runs_own_prompts_and_says_a_blank_one() -> None:
    """The card sampled "The " and a line break, whose greedy sample a small model often made
    blank lines (a card showing an empty code block): it samples the run's preview prompts,
    and a sample of only blank space says so."""
    from types import SimpleNamespace

    from engine.export.card import SAMPLE_PROMPTS, _samples

    class LM:
        def generate(self, prompt, cfg):  # noqa: ANN001, ANN202
            assert cfg.temperature == 0.0  # greedy
            yield "  \n " if prompt == "\n" else "xyz"

    run = SimpleNamespace(spec={"prompts": ["Once", "\n", "def "]}, lm=LM())
    assert _samples(run) == ["Oncexyz", "(only blank space after '\\n')"]  # the first two
    assert _samples(SimpleNamespace(spec={}, lm=LM())) == [p + "xyz" for p in SAMPLE_PROMPTS]


def test_gguf_temp_cleanup_takes_only_its_hex_names(tmp_path):
    """A killed GGUF export's .k.gguf.<12 hex>.tmp is removed; a user's .k.gguf.backup.tmp stays."""
    from engine.export.source import clear_stale_temps

    mine = tmp_path / ".k.gguf.a59a77786be1.tmp"
    users = tmp_path / ".k.gguf.backup.tmp"
    for p in (mine, users):
        p.write_bytes(b"x")
    clear_stale_temps(tmp_path / "k.gguf")
    assert not mine.exists() and users.exists()


def test_a_name_too_long_for_the_hidden_staging_name_is_refused_with_the_limit(
        lora_run: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Names of 240-254 bytes are legal, yet were refused with "cannot write (File name too
    long)": the export is first written under a longer hidden name. The refusal now says the
    longest name an export may have; that one works."""
    from engine.export.source import check_dest

    with pytest.raises(CheckpointError, match="a name of 240 bytes; an export's name may have "
                                              "at most 238 bytes"):
        export_merged(lora_run, tmp_path / ("z" * 240))
    with pytest.raises(CheckpointError, match="at most 237 bytes"):
        check_dest(tmp_path / ("g" * 236 + ".gguf"), file=True)
    check_dest(tmp_path / ("g" * 232 + ".gguf"), file=True)
    export_merged(lora_run, tmp_path / ("z" * 238))
    assert (tmp_path / ("z" * 238) / "config.json").is_file()


@pytest.mark.parametrize("kind", ["--gguf", "--merged", "--peft"])
def test_an_export_stopped_by_a_file_size_limit_does_not_say_free_some_space(lora_run, tmp_path,
                                                                              kind):
    """Under `ulimit -f` the GGUF export said "free some space" with 54 GB free on the disk, and
    the merged and PEFT exports said so with 48 GB free."""
    import subprocess
    import sys

    code = ("import resource, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))\n"
            "from engine.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    dest = tmp_path / ("m.gguf" if kind == "--gguf" else "m")
    out = subprocess.run([sys.executable, "-c", code, "export", kind, str(lora_run), str(dest)],
                         capture_output=True, text=True, timeout=240,
                         cwd=Path(__file__).resolve().parents[1])
    err = out.stderr.strip().splitlines()[-1]
    what = "the GGUF file" if kind == "--gguf" else "the export"
    assert out.returncode == 2 and err.startswith(f"error: {dest}: cannot write {what}"), (
        out.returncode, out.stderr)
    assert "a file-size limit stopped it (ulimit -f" in err and "free some space" not in err, err
    assert not dest.exists()


def test_an_export_name_is_measured_in_bytes_not_characters(tmp_path):
    """The file system's limit is 255 bytes, and "é" is two: 120 of them are a name of 240
    bytes, refused with the limit in bytes (238; the temporary file's 237 for a .gguf). The
    tests had ASCII names only, so a limit counted in characters ("at most 118 bytes") passed."""
    from engine.export.source import check_dest

    with pytest.raises(CheckpointError, match="a name of 240 bytes; an export's name may have "
                                              "at most 238 bytes"):
        check_dest(tmp_path / ("é" * 120))
    with pytest.raises(CheckpointError, match="a name of 241 bytes; .* at most 237 bytes"):
        check_dest(tmp_path / ("é" * 118 + ".gguf"), file=True)
    check_dest(tmp_path / ("é" * 116 + ".gguf"), file=True)  # 237 bytes: taken


def test_a_lora_run_whose_training_state_is_damaged_exports_merged_not_its_adapters(
        lora_run: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Every export refused a run whose snapshots' training state was damaged, its weights
    intact. The merged export writes them; the PEFT export, whose adapters live in that state,
    says so (it would have said "not a LoRA run")."""
    import shutil

    from engine import runformat as rf

    run = tmp_path / "run"
    shutil.copytree(lora_run, run)
    for _, snap in rf.snapshots(run):
        with open(snap / rf.SNAP_STATE, "r+b") as f:
            f.truncate(100)
    assert main(["export", "--merged", str(run), str(tmp_path / "m")]) == 0
    err = capsys.readouterr().err
    step = rf.snapshots(run)[-1][0]
    assert step > 0 and ("its training state is damaged (" in err and f"its weights, step-{step}"
                         ", are intact and exported" in err), err
    card = (tmp_path / "m" / "README.md").read_text()
    assert f"- {step} optimizer step" in card, card  # the snapshot's step, not 0
    assert main(["export", "--peft", str(run), str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "its LoRA adapters are kept in its training state, which is damaged" in err, err
    assert "export --merged still writes its weights" in err and not (tmp_path / "p").exists()
