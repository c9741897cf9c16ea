"""Wrong files a new user hands the CLI: each is refused in one line that names the file, what it
is and the fix (found by a walk-through of the README's commands)."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

import engine.__main__ as entry
from engine.cli import main
from engine.data import iter_bytes
from engine.errors import CorpusError
from engine.run import _megabytes

TEXT = b"The river ferry crosses twice an hour.\n" * 40


def _zip(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("notes.txt", TEXT)


@pytest.mark.parametrize("name,write,says", [
    ("notes.txt.gz", lambda p: p.write_bytes(gzip.compress(TEXT)), "gzip-compressed, not text; decompress"),
    ("notes.zip", _zip, "a zip archive, not text; unzip"),
    ("notes.txt.bz2", lambda p: p.write_bytes(bz2.compress(TEXT)), "bzip2-compressed, not text"),
    ("notes.txt.xz", lambda p: p.write_bytes(lzma.compress(TEXT)), "xz-compressed, not text"),
    ("paper.pdf", lambda p: p.write_bytes(b"%PDF-1.7\n" + TEXT), "a PDF, not text; save it as plain text"),
    ("photo.txt", lambda p: p.write_bytes(b"\xff\xd8\xff\xe0" + TEXT), "a JPEG image, not text; add text"),
    ("chart.png", lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + TEXT), "a PNG image, not text"),
    ("anim.gif", lambda p: p.write_bytes(b"GIF89a" + TEXT), "a GIF image, not text"),
    ("prog.txt", lambda p: p.write_bytes(b"\x7fELF\x02\x01\x00" + TEXT),
     "looks binary (contains NUL bytes), not text; add text or code files only"),
    ("notepad.txt", lambda p: p.write_bytes(TEXT.decode().encode("utf-16")),
     "UTF-16 text, not UTF-8; convert it first, e.g. iconv -f UTF-16 -t UTF-8"),
    ("no_bom.txt", lambda p: p.write_bytes(TEXT.decode().encode("utf-16-be")),
     "UTF-16 text, not UTF-8; convert it first"),
    ("latin.txt", lambda p: p.write_bytes("caf\xe9 au lait\n".encode("latin-1") * 9),
     "not valid UTF-8 (byte 0xe9 at offset 3, line 1); if it is text, save it as UTF-8"),
    # UTF-8 and then Latin-1: converting it all from Latin-1, as that advice says, garbled the
    # UTF-8 part ("cafÃ©"), which the corpus then took
    ("mixed.txt", lambda p: p.write_bytes("café naïve —\n".encode() * 3
                                          + "caf\xe9\n".encode("latin-1")),
     "mixes encodings: UTF-8 text, then byte 0xe9 at offset 54, line 4 that is not UTF-8; "
     "convert only the lines from there (converting the whole file from Latin-1 would garble "
     "its UTF-8 part), or leave the file out"),
])
def test_files_that_are_not_utf8_text_say_what_they_are_and_the_fix(tmp_path, capsys, name, write, says):
    path = tmp_path / name
    write(path)
    with pytest.raises(CorpusError, match=re.escape(says.split(";")[0])):
        list(iter_bytes(path))
    assert main(["train", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and name in err and says in err


def test_plain_text_that_starts_like_nothing_special_still_loads(tmp_path):
    path = tmp_path / "bzh.txt"
    path.write_bytes(b"BZh is not bzip2 without its block magic\n")
    assert b"".join(iter_bytes(path)).startswith(b"BZh")


def test_a_missing_or_file_model_path_says_so(tmp_path, capsys):
    assert main(["generate", str(tmp_path / "nope")]) == 2
    assert "nope: no such file or folder; pass a run folder" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_bytes(TEXT)
    assert main(["eval", str(tmp_path / "notes.txt")]) == 2
    assert "notes.txt: a file, not a folder; pass a run folder" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path / "nope")]) == 2
    assert "nope: no such folder; pass a run folder" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path / "notes.txt")]) == 2
    assert "notes.txt: a file, not a folder" in capsys.readouterr().err


def test_a_python_without_the_dependencies_gets_one_line(monkeypatch, capsys):
    def missing(**_kw: object) -> None:
        raise ModuleNotFoundError("No module named 'numba'", name="numba")

    monkeypatch.setattr("engine.runtime.configure", missing)
    assert entry.run() == 2
    err = capsys.readouterr().err
    assert err.startswith("error: numba is not installed for ") and "scripts/setup.sh" in err

    def ours(**_kw: object) -> None:  # a module of the package itself missing is a bug: traceback
        raise ModuleNotFoundError("No module named 'engine.gone'", name="engine.gone")

    monkeypatch.setattr("engine.runtime.configure", ours)
    with pytest.raises(ModuleNotFoundError):
        entry.run()


def test_ctrl_c_while_the_parser_loads_is_one_line(monkeypatch, capsys):
    """Ctrl-C in the first second of a command, while the parser imports the run's modules,
    printed a 17-line traceback ending in KeyboardInterrupt."""
    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("engine.cli.build_parser", interrupted)
    monkeypatch.setattr("engine.runtime.configure", lambda **_kw: None)
    assert entry.run() == 130
    assert capsys.readouterr().err == "\ninterrupted (Ctrl-C)\n"


def test_corpus_size_in_the_auto_tokenizer_line_is_never_zero():
    assert _megabytes(7_800) == "7,800 bytes" and _megabytes(1) == "1 byte"  # (not "1 bytes")
    assert _megabytes(21_520) == "0.02 MB"
    assert _megabytes(4_000_000) == "4.00 MB"


def test_an_unknown_preset_in_a_settings_file_names_the_file_before_any_work(tmp_path, capsys):
    toml = tmp_path / "run.toml"
    toml.write_text('[run]\npreset = "huge"\n')
    assert main(["train", "--config", str(toml), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "run.toml: preset must be one of tiny, small, medium; not 'huge'" in err
    assert "tokenizer:" not in err and not (tmp_path / "run").exists()


def test_no_command_names_the_commands(capsys):
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2
    err = capsys.readouterr().err  # was "the following arguments are required: cmd"
    assert "required: {train,generate,eval,bench,export}" in err and err.count("\n") == 1


def test_a_nul_byte_past_the_first_block_is_refused(tmp_path):
    """Only the first 64 KiB were sniffed for NUL bytes: one later went into the token ids."""
    path = tmp_path / "late.txt"
    path.write_bytes(TEXT * 3000 + b"tail\x00more\n")
    with pytest.raises(CorpusError, match=f"a NUL byte at offset {len(TEXT) * 3000 + 4}"):
        list(iter_bytes(path))


def test_the_window_without_the_dependencies_gets_the_same_line(monkeypatch, capsys, tmp_path):
    """`python3 -m app` with a Python lacking Numba printed a traceback where the CLI says one
    line."""
    from app import __main__ as app_entry

    def missing(**_kw: object) -> None:
        raise ModuleNotFoundError("No module named 'numba'", name="numba")

    monkeypatch.setattr("engine.configure", missing)
    assert app_entry.run(["--runs-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: numba is not installed for ") and "scripts/setup.sh" in err
    assert err.count("\n") == 1

    def ours(**_kw: object) -> None:
        raise ModuleNotFoundError("No module named 'app.gone'", name="app.gone")

    monkeypatch.setattr("engine.configure", ours)
    with pytest.raises(ModuleNotFoundError):
        app_entry.run(["--runs-root", str(tmp_path)])


def test_a_gguf_file_given_as_a_model_says_what_it_is(tmp_path, capsys):
    """A .gguf export passed to generate, eval or export was "a file, not a folder" (export:
    "not a folder", for a missing one too): it is named a GGUF file, for llama.cpp."""
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    renamed = tmp_path / "model.bin"  # by its magic, whatever its name
    renamed.write_bytes(b"GGUF" + bytes(60))
    for cmd in (["generate", str(gguf)], ["eval", str(renamed)],
                ["export", "--merged", str(gguf), str(tmp_path / "out")]):
        assert main(cmd) == 2
        err = capsys.readouterr().err
        assert "a GGUF file, for llama.cpp" in err and "merged export folder" in err, (cmd, err)
        assert err.count("\n") == 1
    assert main(["export", "--merged", str(tmp_path / "gone"), str(tmp_path / "out")]) == 2
    assert "gone: no such file or folder" in capsys.readouterr().err
    plain = tmp_path / "notes.txt"
    plain.write_text("text")
    assert main(["generate", str(plain)]) == 2
    assert "notes.txt: a file, not a folder" in capsys.readouterr().err


def test_generate_caps_its_length(capsys):
    """`--max-new-tokens 100000000` was taken (it generated until Ctrl-C)."""
    with pytest.raises(SystemExit):
        main(["generate", "runs/x", "--max-new-tokens", "100000000"])
    assert "--max-new-tokens" in capsys.readouterr().err


def test_a_runs_snapshots_folder_given_as_a_model_names_what_to_pass(tmp_path, capsys):
    """`generate RUN/snapshots` said "no config.json (not a model folder)"."""
    out = tmp_path / "run"
    (tmp_path / "c.txt").write_bytes(TEXT * 20)
    assert main(["train", str(tmp_path / "c.txt"), "--preset", "tiny", "--seq-len", "32",
                 "--batch", "2", "--max-steps", "1", "--sample-tokens", "0", "--out",
                 str(out)]) == 0
    capsys.readouterr()
    assert main(["generate", str(out / "snapshots")]) == 2
    err = capsys.readouterr().err
    assert "the snapshots folder of a run; pass the run" in err and "step-1" in err, err


def test_an_empty_or_cut_gguf_file_is_still_named_by_its_extension(tmp_path, capsys):
    for data in (b"", b"GG"):  # (no magic to read)
        gguf = tmp_path / "model.gguf"
        gguf.write_bytes(data)
        assert main(["generate", str(gguf)]) == 2
        assert "a GGUF file, for llama.cpp" in capsys.readouterr().err


def test_a_tokenizer_of_another_kind_is_named_by_its_own_type(tmp_path):
    """A WordLevel tokenizer.json in a byte model's folder was refused as "a 'bpe' tokenizer"."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.models import WordLevel

    from engine.errors import TokenizerError
    from engine.tokenizer import load_tokenizer

    (tmp_path / "config.json").write_text(json.dumps({"mamba_studio": {"tokenizer": "bytes"}}))
    HFTokenizer(WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")).save(
        str(tmp_path / "tokenizer.json"))
    with pytest.raises(TokenizerError, match=r"tokenizer.json: a WordLevel tokenizer, but "
                                              r"config.json records 'bytes'"):
        load_tokenizer(tmp_path)


def test_a_blown_up_A_log_prints_no_numpy_warning(recwarn):
    """The divergence guard reports a blown-up model; NumPy's overflow warning printed a source
    line of the scan before it."""
    from engine.ops.selective_scan import _A_transposed

    assert np.isinf(_A_transposed(np.array([[1e4, 0.0]], dtype=np.float32))).any()
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_resume_of_a_run_killed_while_it_was_prepared_says_what_to_do(tmp_path, capsys):
    """kill -9 while a new run tokenized its corpus leaves its folder with only its lock (and
    data/); --resume said "no run.json, not a run folder" and nothing of what to do."""
    half = tmp_path / "half"
    (half / "data").mkdir(parents=True)
    (half / "lock").touch()
    assert main(["train", "--resume", str(half)]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: {half}: a run ended while it was being prepared, before its first "
                   "save; nothing of it can be resumed: start it again on its corpus with --out "
                   f"{half} --force\n"), err


def test_generate_of_an_empty_folder_or_a_run_killed_while_prepared_says_what_it_is(tmp_path,
                                                                                    capsys):
    """Both said only "no config.json (not a model folder)"; train --resume explained the
    second."""
    from engine.cli import main

    empty = tmp_path / "empty"
    empty.mkdir()
    prepared = tmp_path / "prepared"  # what a kill -9 while tokenizing leaves
    (prepared / "data").mkdir(parents=True)
    (prepared / "lock").write_text("")
    for folder, said in ((empty, "an empty folder, not a model folder"),
                         (prepared, "a run ended while it was being prepared, before its first "
                                    "save; there is no model in it")):
        for cmd in (["generate", str(folder)], ["eval", str(folder), str(folder)]):
            assert main(cmd) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"error: {folder}: {said}") and err.count("\n") == 1, err


def test_an_unknown_flag_points_at_its_commands_help(capsys):
    """`generate RUN --bogus` pointed at `python -m engine --help`, which lists no flag of
    generate's."""
    with pytest.raises(SystemExit) as info:
        main(["generate", "somewhere", "--bogus"])
    assert info.value.code == 2
    assert capsys.readouterr().err == ("error: unrecognized arguments: --bogus (see python -m "
                                       "engine generate --help)\n")


@pytest.mark.parametrize(("flag", "hint"), [("--batch-size", " (did you mean --batch?)"),
                                            ("--learning-rate=3", ""),
                                            ("--max_steps", " (did you mean --max-steps?)")])
def test_an_unknown_flag_near_a_known_one_is_named(capsys, flag, hint):
    """``train --batch-size 0`` said only "unrecognized arguments" (a walk-through guessed the
    flag's name from other trainers)."""
    with pytest.raises(SystemExit) as info:
        main(["train", flag, "0"])
    assert info.value.code == 2
    assert capsys.readouterr().err == (f"error: unrecognized arguments: {flag}{hint} (see python -m "
                                       "engine train --help)\n")


def test_a_corpus_file_named_but_missing_is_refused_before_any_work(tmp_path, capsys):
    """``train a.txt typo.txt`` trained on a.txt alone after one "skipped" line, exit 0 (and a
    settings file naming a moved file did the same): a run read as one on both files. Train and
    eval refuse it in one line naming the file; no run folder is made."""
    text = tmp_path / "a.txt"
    text.write_bytes(TEXT)
    typo = tmp_path / "typo.txt"
    out = tmp_path / "r"
    assert main(["train", str(text), str(typo), "--preset", "tiny", "--max-steps", "1",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {typo}: no such file or folder; check the name, or leave it out of the corpus", err
    assert not out.exists()
    assert main(["train", str(text), "--preset", "tiny", "--max-steps", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["eval", str(out), str(text), str(typo), str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"error: {typo}: no such file or folder; check the name, or leave it out "
                        "of the corpus (1 more named is missing too)"), err
    from app.words import in_window_terms  # the window's words hold for several files too

    assert "Remove it" in in_window_terms(err), in_window_terms(err)


def test_an_out_folder_that_cannot_be_made_is_refused_before_the_corpus_is_read(tmp_path, capsys,
                                                                               monkeypatch):
    """``--out a.txt/sub`` was refused only after the corpus was read and a BPE tokenizer
    trained on it (8 s for 97 MB, minutes for more)."""
    import engine.run as run_mod

    text = tmp_path / "a.txt"
    text.write_bytes(TEXT)
    read: list[object] = []
    monkeypatch.setattr(run_mod, "load_corpus", lambda *a, **k: read.append(a) or 1 / 0)
    assert main(["train", str(text), "--preset", "tiny", "--out", str(text / "sub")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {text / 'sub'}: cannot create the run folder ({text} is not a "
                   "folder); choose another --out"), err
    assert read == []
    from engine.runformat import out_folder  # a parent this user may not write (tests run as
    ro = tmp_path / "ro"  # root here, where a mode 0555 folder is writable: its answer faked)
    ro.mkdir()
    real = out_folder.os.access
    monkeypatch.setattr(out_folder.os, "access", lambda p, m: Path(p) != ro and real(p, m))
    assert main(["train", str(text), "--preset", "tiny", "--out", str(ro / "new")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {ro / 'new'}: cannot create the run folder ({ro} is not writable); "
                   "choose another --out"), err
    assert read == []


def test_a_temperature_too_small_to_divide_by_samples_greedily():
    """generate --temperature 1e-320: the logits overflowed to inf, printed a numpy warning
    and ended in "Probabilities contain NaN"; its limit is greedy decoding."""
    import warnings

    from engine.sampling import SamplingConfig, sample

    logits = np.array([0.5, 3.0, -1.0, 2.9], np.float32)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for top_k in (0, 1, 2):
            cfg = SamplingConfig(temperature=1e-320, top_k=top_k)
            assert [sample(logits, cfg, rng) for _ in range(5)] == [1] * 5


def test_a_read_only_out_folder_is_refused_before_the_corpus_is_read(tmp_path, capsys,
                                                                     monkeypatch):
    """An existing --out this user may not write (a read-only disk) was refused only after the
    corpus was read and its tokenizer trained."""
    import os

    import engine.run as run_mod
    from engine.runformat import out_folder

    text = tmp_path / "a.txt"
    text.write_bytes(TEXT)
    out = tmp_path / "ro"
    out.mkdir()
    monkeypatch.setattr(out_folder.os, "access", lambda p, mode: Path(p) != out and os.access(p, mode))
    monkeypatch.setattr(run_mod, "load_corpus", lambda *a, **k: 1 / 0)
    assert main(["train", str(text), "--preset", "tiny", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {out}: not writable; choose another --out"


def test_a_mixed_encoding_past_the_first_chunk_is_named_with_its_line(tmp_path):
    """The UTF-8 before the bad byte and the lines counted across chunks of the read."""
    from engine.data import iter_bytes
    from engine.errors import CorpusError

    path = tmp_path / "m.txt"
    path.write_bytes("café naïve —\n".encode() * 3 + "caf\xe9\n".encode("latin-1"))
    for chunk in (7, 16, 1 << 20):
        with pytest.raises(CorpusError) as info:
            list(iter_bytes(path, chunk))
        assert str(info.value).startswith(f"{path}: mixes encodings: UTF-8 text, then byte 0xe9 "
                                          "at offset 54, line 4 that is not UTF-8"), chunk
    path.write_bytes(b"plain ascii\n" * 3 + "caf\xe9\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"not valid UTF-8 \(byte 0xe9 at offset 39, line 4\)"):
        list(iter_bytes(path, 5))


def test_a_second_name_of_a_corpus_file_is_told_by_same_file_as(tmp_path):
    """The window matched "the same file as " in two places on its own."""
    import engine

    real = tmp_path / "a, under another name.txt"  # (a name holding the words that follow it)
    real.write_text("the cat sat on the mat. " * 20)
    (tmp_path / "link.txt").symlink_to(real)
    (tmp_path / "empty.txt").write_text("")
    corpus = engine.load_corpus([real, tmp_path / "link.txt", tmp_path / "empty.txt"])
    why = {str(p): w for p, w in corpus.rejected}
    assert engine.same_file_as(why[str(tmp_path / "link.txt")]) == str(real), why
    assert engine.same_file_as(why[str(tmp_path / "empty.txt")]) is None


def test_a_name_too_long_for_the_disk_is_said_with_a_fix(tmp_path, capsys):
    """`--out` of 300 letters said "error: aaaa...(all 300): File name too long", no fix."""
    from engine.cli import main

    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat. " * 100)
    out = tmp_path / ("a" * 300)
    assert main(["train", str(corpus), "--preset", "tiny", "--max-steps", "1", "--out",
                 str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and err.endswith(
        "File name too long (most disks take names of at most 255 bytes and paths of 4,096); "
        "choose a shorter one"), err
    assert "a" * 100 not in err  # the name cut short
