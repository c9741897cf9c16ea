"""Walking corpus folders (engine.corpuswalk): bounded, never opening a special file, never
entering another filesystem, every skip counted with a reason."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from engine import corpuswalk
from engine import data as data_mod
from engine.corpuswalk import summary, walk
from engine.data import load_corpus
from engine.errors import CorpusError


def _tree(root: Path) -> Path:
    c = root / "c"
    (c / "sub" / "deeper").mkdir(parents=True)
    (c / "b.txt").write_text("b\n")
    (c / "a.md").write_text("a\n")
    (c / "sub" / "x.py").write_text("x = 1\n")
    (c / "sub" / "deeper" / "y.txt").write_text("y\n")
    (c / "sub.txt").write_text("s\n")
    (c / "image.png").write_bytes(b"\x89PNG")
    (c / ".hidden").mkdir()
    (c / ".hidden" / "h.txt").write_text("h\n")
    return c


def test_order_is_sorted_by_path_parts_and_hidden_is_skipped(tmp_path):
    c = _tree(tmp_path)
    files, rejected = walk(c)
    want = sorted(p for p in c.rglob("*") if p.is_file() and p.suffix != ".png"
                  and ".hidden" not in p.parts)
    assert files == want  # the order the old sorted(rglob) gave: same documents, same split
    assert [(p.name, r) for p, r in rejected] == [
        ("image.png", "not a text file type (.png); if it is text, name the file itself to read it")]


def test_log_and_text_files_in_a_folder_are_read(tmp_path):
    """A walk-through's notes.log and story.text were skipped as "not a text file type"."""
    for name in ("notes.log", "story.text", "README.markdown", "data.jsonl"):
        (tmp_path / name).write_text("words\n")
    files, rejected = walk(tmp_path)
    assert sorted(p.name for p in files) == ["README.markdown", "data.jsonl", "notes.log",
                                             "story.text"] and rejected == []


@pytest.mark.skipif(corpuswalk.pseudo_fs(Path("/proc")) != "proc", reason="no /proc mount here")
def test_a_pseudo_filesystem_named_as_the_corpus_is_refused_without_a_walk(monkeypatch):
    """``train /proc`` walked 29k entries and trained on them: the folder is refused at once."""
    def listing(*_a: object, **_k: object) -> None:
        raise AssertionError("walked")

    monkeypatch.setattr(corpuswalk, "_listing", listing)
    for top in (Path("/proc"), Path("/proc/self")):
        files, rejected = walk(top)
        assert files == [] and rejected == [
            (top, "a kernel pseudo-filesystem (proc), not a corpus; give folders of text files")]
    with pytest.raises(CorpusError, match=r"/proc: a kernel pseudo-filesystem \(proc\)"):
        load_corpus([Path("/proc")])
    # a file of one, named by itself: "/proc/cpuinfo: file is empty" (its size is 0; it is not)
    with pytest.raises(CorpusError, match=r"/proc/cpuinfo: a file of a kernel pseudo-filesystem"):
        load_corpus([Path("/proc/cpuinfo")])


def test_special_files_links_and_loops_are_skipped_with_reasons_unopened(tmp_path):
    c = _tree(tmp_path)
    os.mkfifo(c / "pipe.txt")  # opening it would block forever
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(c / "sock.txt"))
    (c / "loop").symlink_to(c)  # a cycle if followed
    (tmp_path / "outside.txt").write_text("a file outside the folder\n")
    (c / "to_file.txt").symlink_to(tmp_path / "outside.txt")  # a link to a regular file is read
    (c / "to_b.txt").symlink_to(c / "b.txt")  # ... once: this one is b.txt again
    (c / "broken.txt").symlink_to(c / "nowhere")
    (c / "zero.txt").write_text("")
    try:
        corpus = load_corpus([c])
    finally:
        sock.close()
    why = {p.name: r for p, r in corpus.rejected}
    assert "FIFO" in why["pipe.txt"] and "socket" in why["sock.txt"]
    assert "link to a folder" in why["loop"] and "broken link" in why["broken.txt"]
    assert why["zero.txt"] == "file is empty"
    assert "to_file.txt" in {f.path.name for f in corpus.files}
    assert why["to_b.txt"].startswith(f"the same file as {c / 'b.txt'}")


def test_the_walk_is_bounded_and_says_where_it_stopped(tmp_path, monkeypatch):
    c = _tree(tmp_path)
    monkeypatch.setattr(corpuswalk, "MAX_ENTRIES", 3)
    corpus = load_corpus([c])
    assert [f.path.name for f in corpus.files] == ["a.md", "b.txt"]
    assert (c, "stopped after 3 entries; give smaller folders (the files found so far are used)") \
        in corpus.rejected
    flat = tmp_path / "flat"  # every entry a file: the limit is exactly the files taken
    flat.mkdir()
    for i in range(5):
        (flat / f"{i}.txt").write_text(f"file {i}\n")
    files, rejected = walk(flat, max_entries=3)
    assert [f.name for f in files] == ["0.txt", "1.txt", "2.txt"]
    assert [why for _, why in rejected] == [
        "stopped after 3 entries; give smaller folders (the files found so far are used)"]


def test_folders_on_another_filesystem_are_not_entered(tmp_path, monkeypatch):
    c = _tree(tmp_path)
    real = os.stat
    monkeypatch.setattr(corpuswalk.os, "stat", lambda p, *a, **k: os.stat_result(
        (*real(p, *a, **k)[:2], -1, *real(p, *a, **k)[3:])) if Path(p) == c else real(p, *a, **k))
    files, rejected = walk(c)  # c "is on device -1": sub/ is a mount point
    assert [f.name for f in files] == ["a.md", "b.txt", "sub.txt"]
    assert "on another filesystem" in dict(rejected)[c / "sub"]


@pytest.mark.skipif(not os.path.ismount("/dev"), reason="no /dev mount here")
def test_root_does_not_enter_dev():
    files, rejected = walk(Path("/"), max_entries=2000)
    assert "on another filesystem" in dict(rejected)[Path("/dev")]
    assert not any(Path("/dev") in f.parents for f in files)


def test_a_file_swapped_for_a_fifo_after_the_check_does_not_block(tmp_path, monkeypatch):
    fifo = tmp_path / "late.txt"
    os.mkfifo(fifo)
    monkeypatch.setattr(data_mod, "check_regular", lambda *a, **k: 10)  # the check "passed"
    with pytest.raises(CorpusError, match=r"is a FIFO \(named pipe\); give a regular corpus file"):
        data_mod.read_text_file(fifo)


def test_summary_is_short_and_counts_by_reason():
    rejected = [(Path(f"/x/{i}.bin"), "not a text file type (.bin)") for i in range(5000)]
    rejected.append((Path("/x"), "stopped after 9 entries; give smaller folders"))
    lines = summary(rejected, show=3)
    assert lines[0].startswith("/x: stopped after") and len(lines) == 5
    assert lines[-1] == "skipped 4,997 more: 4,997 not a text file type"


def test_an_empty_folder_is_named_in_the_error(tmp_path):
    """An empty folder (or one of hidden files only) says so, not 'no files given'."""
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".hidden").write_text("x")
    with pytest.raises(CorpusError, match=r"empty: empty folder \(no files; hidden ones"):
        load_corpus([empty])
    assert load_corpus([empty], allow_empty=True).rejected[0][0] == empty


def test_a_run_folder_inside_the_corpus_is_not_trained_on(tmp_path):
    """`train notes/ --out notes/run1`, then `train notes/`: the second run read run1's run.json,
    metrics.csv, tokenizer.json... as training text (4.3 KB of notes became 21 KB)."""
    from engine.cli import main

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("the cat sat on the mat and looked at the hat. " * 40)
    assert main(["train", str(notes), "--out", str(notes / "run1"), "--preset", "tiny",
                 "--max-steps", "1", "--seq-len", "32", "--sample-tokens", "0"]) == 0
    files, rejected = walk(notes)
    assert files == [notes / "a.txt"]
    assert rejected == [(notes / "run1", corpuswalk.RUN_FOLDER)]
    # dropped by itself it trained on its 36 files (run.json, metrics.csv, tokenizer.json...)
    assert walk(notes / "run1") == ([], [(notes / "run1", corpuswalk.RUN_FOLDER)])
    snap = next((notes / "run1" / "snapshots").iterdir())
    assert walk(snap) == ([], [(snap, corpuswalk.MODEL_FOLDER)])
    assert main(["export", "--merged", str(notes / "run1"), str(notes / "merged")]) == 0
    files, rejected = walk(notes)  # an export beside the notes: its README and JSON are not text
    assert files == [notes / "a.txt"]
    assert (notes / "merged", corpuswalk.MODEL_FOLDER) in rejected


def test_a_link_loop_given_by_name_says_it_loops_not_cannot_read(tmp_path):
    """A dropped link loop said "cannot read (Too many levels of symbolic links)", and the window
    added "check that you may read it": a permission problem's fix."""
    (tmp_path / "la").symlink_to(tmp_path / "lb")
    (tmp_path / "lb").symlink_to(tmp_path / "la")
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere.txt")
    c = load_corpus([tmp_path / "la", tmp_path / "gone"], allow_empty=True)
    why = {p.name: r for p, r in c.rejected}
    assert why["la"].startswith("a link that loops back to itself") and "; point it at" in why["la"]
    assert why["gone"].startswith("a broken link (No such file or directory); point it at")


def test_an_unreadable_subfolder_is_skipped_not_the_whole_corpus(tmp_path, monkeypatch):
    """A chmod 000 subfolder stopped train and eval with "sub/run.json: Permission denied" (a file
    that does not exist): Python 3.11's is_file raises EACCES there. The folder is skipped with
    its reason; the rest is read. (The permission is faked: the tests may run as root.)"""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("hidden")
    (tmp_path / "a.txt").write_text("kept")
    real_is_file, real_scandir = Path.is_file, os.scandir

    def is_file(self):  # noqa: ANN001, ANN202
        if self.parent.name == "sub":
            raise PermissionError(13, "Permission denied", str(self))
        return real_is_file(self)

    def scandir(path):  # noqa: ANN001, ANN202
        if Path(path).name == "sub":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(Path, "is_file", is_file)
    monkeypatch.setattr(os, "scandir", scandir)
    files, rejected = walk(tmp_path)
    assert files == [tmp_path / "a.txt"]
    assert rejected == [(tmp_path / "sub", "cannot list the folder (Permission denied)")]
    if os.geteuid() != 0:  # the real thing where it can be had
        monkeypatch.undo()
        (tmp_path / "sub").chmod(0)
        try:
            assert walk(tmp_path)[0] == [tmp_path / "a.txt"]
        finally:
            (tmp_path / "sub").chmod(0o755)
