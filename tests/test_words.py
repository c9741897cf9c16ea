"""Counts in words: one spelling for the engine and the window ("1 tokens", "1 ranks" were
printed where each message spelled its own plural)."""

from engine.earlystop import EarlyStopping
from engine.words import plural


def test_plural_says_one_without_an_s_and_groups_thousands():
    assert plural(1, "token") == "1 token"
    assert plural(0, "token") == "0 tokens"
    assert plural(2, "rank") == "2 ranks"
    assert plural(12_345, "step") == "12,345 steps"


def test_the_window_counts_with_the_engines_words():
    from app import words

    assert words.plural is plural


def test_early_stopping_after_one_evaluation_says_one():
    early = EarlyStopping(patience=1)
    assert not early.update(2.0)
    assert early.update(2.5)
    assert "for 1 evaluation (patience 1)" in early.reason, early.reason


def test_listing_names_the_first_few_and_counts_the_rest():
    from engine.words import listing

    assert listing(["a"]) == "a"
    assert listing(["a", "b", "c"]) == "a, b, c"
    assert listing(["a", "b", "c", "d", "e"]) == "a, b, c and 2 more"
    assert listing([str(i) for i in range(1_005)], most=2) == "0, 1 and 1,003 more"


def test_the_engines_advice_reaches_the_window_without_command_line_flags(tmp_path):
    """Six of the engine's fixes reached the window as the CLI's words ("--init it to a new
    run", "--out X --force", "python -m engine export --merged"): each situation made for
    real, its message said in the window's terms, names no flag and says the window's way."""
    import json
    import shutil
    from pathlib import Path

    import pytest

    from app.words import in_window_terms
    from engine import run as runapi
    from engine.errors import MambaStudioError
    from engine.export import export_peft
    from engine.lora import LoRAConfig
    from engine.trainer import TrainConfig

    corpus = Path(__file__).resolve().parents[1] / "assets" / "sample_corpus"
    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=1))
    with runapi.start(spec, [corpus], root=tmp_path / "runs") as run:
        run.train()
    lspec = runapi.RunSpec(preset="tiny", init=str(run.folder), train=TrainConfig(
        batch_size=2, seq_len=32, max_steps=1, lora=LoRAConfig(("in_proj", "out_proj"))))
    with runapi.start(lspec, [corpus], root=tmp_path / "runs") as lora:
        lora.train()

    def variant(name: str) -> Path:
        return Path(shutil.copytree(run.folder, tmp_path / name))

    said: dict[str, str] = {}

    def window_words(key: str, call, *args) -> None:  # noqa: ANN001
        with pytest.raises(MambaStudioError) as info:
            call(*args)
        said[key] = in_window_terms(str(info.value))

    corrupt = variant("corrupt")
    (corrupt / "run.json").write_text("{not json")
    window_words("corrupt", runapi.open_run, corrupt)
    lost = variant("lost")
    (lost / "run.json").unlink()
    window_words("lost", runapi.open_run, lost)
    old = variant("old")
    d = json.loads((old / "run.json").read_text())
    (old / "run.json").write_text(json.dumps({**d, "version": d["version"] - 1}))
    window_words("old", runapi.open_run, old)
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    (prepared / "lock").write_text("")
    window_words("prepared", runapi.load_model, prepared)
    damaged = variant("damaged")
    for snap in (damaged / "snapshots").iterdir():
        (snap / "model.safetensors").write_bytes(b"")
    window_words("damaged", runapi.load_model, damaged)
    window_words("peft", export_peft, lora.folder, tmp_path / "adapter")
    for snap in (lora.folder / "snapshots").iterdir():
        (snap / "state.safetensors").write_bytes(b"")
    window_words("state", export_peft, lora.folder, tmp_path / "adapter2")
    for key, msg in said.items():
        assert " --" not in msg and "python -m" not in msg, (key, msg)
    assert "and Start a new run from it" in said["corrupt"], said["corrupt"]
    assert "to train on, open " in said["lost"] and "File > Open model…" in said["lost"]
    assert "open one of its snapshots with File > Open model…" in said["old"], said["old"]
    assert "delete it in the Runs tab and Start the run again" in said["prepared"]
    assert "File > Open model… starts one from any other model folder" in said["damaged"]
    assert "use File > Export model (merged)…" in said["peft"], said["peft"]
    assert "File > Export model (merged)… still writes its weights" in said["state"]


def test_advice_naming_a_folder_with_a_space_or_a_quote_is_whole_in_both_front_ends(tmp_path):
    """The window's rewording cut a path at its first space ("open /home/u/My with File > Open
    model… and Start a new run Runs/run-3/..."), and the CLI printed such paths unquoted (not
    one word to paste after --init): every path in advice is one shell word, and the window
    names it unquoted, whole."""
    import shlex
    import shutil
    from pathlib import Path

    import pytest

    from app.words import in_window_terms
    from engine import run as runapi
    from engine.errors import MambaStudioError
    from engine.runformat import snapshot_dirs
    from engine.trainer import TrainConfig

    corpus = Path(__file__).resolve().parents[1] / "assets" / "sample_corpus"
    root = tmp_path / "My Runs"
    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=1))
    with runapi.start(spec, [corpus], root=root) as made:
        made.train()

    def refusal(name: str, damage, call) -> tuple[Path, str]:  # noqa: ANN001
        folder = Path(shutil.copytree(made.folder, root / name))
        damage(folder)
        with pytest.raises(MambaStudioError) as info:
            call(folder)
        return folder, str(info.value)

    def tail(msg: str, before: str, after: str) -> str:
        """The one shell word between ``before`` and ``after`` in ``msg``, unquoted."""
        word = msg.split(before, 1)[1].split(after, 1)[0]
        parts = shlex.split(word)
        assert len(parts) == 1, (word, msg)
        return parts[0]

    folder, msg = refusal("lost it's", lambda f: (f / "run.json").unlink(), runapi.open_run)
    snap = str(folder / "snapshots" / "step-1")
    assert shlex.split(msg.split("start a new run with --init ", 1)[1]) == [snap], msg
    assert in_window_terms(msg).endswith(
        f"to train on, open {snap} with File > Open model… and Start a new run"), msg

    folder, msg = refusal("corrupt run", lambda f: (f / "run.json").write_text("{not json"),
                          runapi.open_run)
    snap = str(folder / "snapshots" / "step-1")
    assert tail(msg, "give ", " to generate, eval or export") == snap, msg
    assert f"open {snap} with File > Open model… (the Playground generates from it) and Start " \
           "a new run from it" in in_window_terms(msg), in_window_terms(msg)

    def state(f: Path) -> None:
        for snap_dir in (f / "snapshots").iterdir():
            (snap_dir / "trainer.json").write_text('"nope"')
    folder, msg = refusal("damaged state", state, snapshot_dirs.find_snapshot)
    assert tail(msg, "start a new run with --init ", " to keep them") == str(folder), msg
    assert in_window_terms(msg).endswith(
        f"still load: open {folder} with File > Open model… (the Playground generates from it) "
        "and Start a new run to keep them"), in_window_terms(msg)

    folder, msg = refusal("no data", lambda f: shutil.rmtree(f / "data"),
                          lambda f: runapi.resume(f, max_steps=2))
    steps = str(folder / "snapshots" / "step-N")
    assert tail(msg, "start a new run on the corpus with --init ", " to keep its weights") == \
        steps, msg
    assert in_window_terms(msg).endswith(
        f"open {steps} with File > Open model… and Start a new run to keep its weights"), msg

    prepared = root / "half made"
    prepared.mkdir()
    (prepared / "lock").write_text("")
    with pytest.raises(MambaStudioError) as info:
        runapi.load_model(prepared)
    msg = str(info.value)
    assert tail(msg, "start it again on its corpus with --out ", " --force") == str(prepared)
    assert in_window_terms(msg).endswith(
        "delete it in the Runs tab and Start the run again"), in_window_terms(msg)


def test_an_exports_unmeasured_held_out_note_is_said_in_the_windows_words(tmp_path, monkeypatch):
    """The card's note "run `python -m engine eval RUN` for it" reached the window's Log."""
    from pathlib import Path

    import engine.evaluation
    from app.words import in_window_terms
    from engine import run as runapi
    from engine.export.card import measure_held_out
    from engine.export.source import open_source
    from engine.trainer import TrainConfig

    corpus = Path(__file__).resolve().parents[1] / "assets" / "sample_corpus"
    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=1))
    with runapi.start(spec, [corpus], root=tmp_path / "my runs") as made:
        made.train()
    def slow(*_a, **_k):  # noqa: ANN002, ANN003, ANN202  (a scoring past its 10 s)
        raise engine.evaluation.EvalStopped()
    monkeypatch.setattr(engine.evaluation, "evaluate", slow)
    src = open_source(made.folder)
    src.snap_val_loss = None  # (a snapshot saved without one: a Stop, the window's Save)
    note = measure_held_out(src).note
    assert note is not None and "`python -m engine eval " in note, note
    said = in_window_terms(note)
    assert said == ("the exported weights' held-out loss was not measured (it takes over 10 s); "
                    "the Train tab's held-out curve has the run's losses as it trained"), said
