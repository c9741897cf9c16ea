"""Corpus loading and validation, streaming tokenisation into a compact id array, the
train/held-out split, and chunking into (input, target) rows.

Memory: files are validated and tokenised in chunks (``CHUNK`` bytes), never held whole as ``str``
or as Python lists of ints; the corpus becomes one array of ``id_dtype(vocab)`` (uint8 up to 256
tokens, uint16 up to 65,536, else uint32) -- 2 bytes per corpus byte for the byte tokenizer, whose
257th token is the end-of-text id. Rows are views over that array (``RowView``) materialised as
int64 only for the rows of one batch.

Chunking: a token stream of length T gives rows starting at 0, S, 2S, ... with inputs
ids[s : s + S] and targets ids[s + 1 : s + S + 1]; the last row is padded with target -1 (ignored).
Every token after the first is a target exactly once per epoch (the seed library dropped S - 1
targets when T was a multiple of S).
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from .corpuswalk import link_reason, walk
from .errors import CorpusError, MambaStudioError, Stopped
from .safeio import GiB, MiB, UnsafeFileError, check_regular, kernel_file, open_regular
from .words import plural

FILE_LIMIT = 4 * GiB  # one corpus file; larger ones are refused before any byte is read
CHUNK = 4 * MiB  # bytes read (and text tokenised) at a time
SAME_FILE = "the same file as "  # how a file's second name (a link) is refused, ``same_file_as``
SAME_TEXT = "the same text as "  # ... and a byte-identical copy of a file read before
SNIFF = 64 * 1024  # a NUL byte in the first SNIFF bytes means binary
_BOM = b"\xef\xbb\xbf"
_WS = b" \t\n\r\x0b\x0c"
# (leading bytes, what the file is, the fix): archives, documents and images that are not text, named
# so the error says what to do (none of these prefixes starts valid UTF-8 text a user would train on)
_NOT_TEXT = (
    (b"\x1f\x8b", "gzip-compressed", "decompress it first (gunzip)"),
    (b"PK\x03\x04", "a zip archive", "unzip it and add the text files"),
    (b"\xfd7zXZ\x00", "xz-compressed", "decompress it first (unxz)"),
    (b"(\xb5/\xfd", "zstd-compressed", "decompress it first (unzstd)"),
    (b"7z\xbc\xaf'\x1c", "a 7-Zip archive", "extract it and add the text files"),
    (b"%PDF-", "a PDF", "save it as plain text first"),
    (b"\xff\xd8\xff", "a JPEG image", "add text or code files only"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image", "add text or code files only"),
    (b"GIF8", "a GIF image", "add text or code files only"),
)


def _not_text(head: bytes) -> str | None:
    """What a file starting with ``head`` is and how to make it text (compressed, an archive,
    a PDF), or None when it does not start like one of those."""
    for magic, kind, fix in _NOT_TEXT:
        if head.startswith(magic):
            return f"{kind}, not text; {fix}"
    if head[:3] == b"BZh" and head[4:10] == b"1AY&SY":
        return "bzip2-compressed, not text; decompress it first (bunzip2)"
    even, odd = head[0:512:2], head[1:512:2]
    zeros = sorted((even.count(0) / max(len(even), 1), odd.count(0) / max(len(odd), 1)))
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") or (len(head) >= 16 and zeros[1] > 0.9
                                                      and zeros[0] < 0.1):  # ASCII in UTF-16
        return ("UTF-16 text, not UTF-8; convert it first, e.g. iconv -f UTF-16 -t UTF-8 "
                "FILE > FILE.utf8.txt")
    return None


Progress = Callable[[int, int], None]  # (bytes done, bytes total)


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds ids 0 .. vocab_size - 1."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if vocab_size <= np.iinfo(dt).max + 1:
            return np.dtype(dt)
    raise CorpusError(f"vocabulary of {vocab_size:,} tokens is too large")


@dataclass
class CorpusFile:
    """A validated UTF-8 text file. Its text is not kept in memory; ``text`` reads it again."""

    path: Path
    n_bytes: int
    digest: bytes = b""  # of its bytes (BLAKE2b, 16 bytes): a copy is read once

    @property
    def text(self) -> str:
        return "".join(iter_text(self.path))


class _Texts(Sequence[str]):
    """``Corpus.texts``: each file's text, read on access (a whole corpus is never one list)."""

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus

    def __len__(self) -> int:
        return len(self.corpus.files)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [f.text for f in self.corpus.files[i]]
        return self.corpus.files[i].text


class FileGone(CorpusError):
    """A corpus file that passed the scan could not be read again (deleted, made unreadable or
    changed in between): the readers skip it (``Corpus.drop``) instead of ending the run."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def reread(path: Path, pieces: Iterator[Any]) -> Iterator[Any]:
    """``pieces`` of ``path`` (``iter_bytes`` / ``iter_text``) read after the scan: any failure
    to read them (not one of the caller's own) is raised as ``FileGone``."""
    try:
        yield from pieces
    except FileGone:
        raise
    except (MambaStudioError, OSError) as exc:
        text = str(exc) if isinstance(exc, MambaStudioError) else (exc.strerror or str(exc))
        reason = text.split(": ", 1)[-1] if text.startswith(str(path)) else text
        raise FileGone(path, f"{reason} (since the scan)") from None


@dataclass
class Corpus:
    files: list[CorpusFile] = field(default_factory=list)
    rejected: list[tuple[Path, str]] = field(default_factory=list)  # (path, reason)
    gone: list[tuple[Path, str]] = field(default_factory=list)  # scanned, then unreadable: skipped
    # asked between pieces while the corpus is read again (a tokenizer trained on it, its
    # encoding): once it says True, ``check_stop`` raises Stopped
    should_stop: Callable[[], bool] | None = None

    def check_stop(self) -> None:
        if self.should_stop is not None and self.should_stop():
            raise Stopped("stopped while preparing the run; nothing was trained or kept")

    def drop(self, f: CorpusFile, reason: str, allow_empty: bool = False) -> None:
        """Skip ``f``, which could not be read again after the scan (listed in ``gone``). Raises
        CorpusError when no file is left, unless ``allow_empty``."""
        if f in self.files:
            self.files.remove(f)
            self.gone.append((f.path, reason))
        if not self.files and not allow_empty:
            why = "; ".join(f"{p}: {r}" for p, r in self.gone[:3])
            raise CorpusError(f"no usable text left: every corpus file vanished or became "
                              f"unreadable after the scan ({why})")

    @property
    def texts(self) -> Sequence[str]:
        return _Texts(self)

    @property
    def n_bytes(self) -> int:
        return sum(f.n_bytes for f in self.files)

    def chunks(self, size: int | None = None) -> Iterator[str]:
        """Every file's text in pieces of about ``size`` bytes (default ``CHUNK``) cut where
        byte-level BPE pre-tokenisation cuts too (``iter_text``)."""
        for f in list(self.files):
            try:
                for piece in reread(f.path, iter_text(f.path, size)):
                    self.check_stop()
                    yield piece
            except FileGone as exc:
                self.drop(f, exc.reason)


def count_tokens(corpus: Corpus, tokenizer: Any = None) -> dict[Path, int]:
    """Tokens of each file of ``corpus`` for ``tokenizer`` (None: the byte tokenizer, one token
    per byte, as the scan counted). A file that vanished or turned unreadable since the scan is
    skipped as training skips it (``Corpus.drop``: listed in ``corpus.gone``) and the others are
    counted; with none left the result is empty."""
    counts: dict[Path, int] = {}
    for f in list(corpus.files):
        if tokenizer is None:
            counts[f.path] = f.n_bytes
            continue
        try:
            counts[f.path] = sum(len(tokenizer.encode(text))
                                 for text in reread(f.path, iter_text(f.path)))
        except FileGone as exc:
            corpus.drop(f, exc.reason, allow_empty=True)
    return counts


def _open_checked(path: Path, limit: int, what: str = "corpus file"):
    """Open a regular file for reading; never blocks (a file swapped for a FIFO after the check
    is opened non-blocking and refused by ``fstat``). A size of 0 is refused unread: an empty
    file, or a kernel file (/proc, /sys) that may block or never end."""
    if check_regular(path, what, limit) == 0:  # /proc/cpuinfo "is empty" by its size
        raise CorpusError(kernel_file(path, what) or f"{path}: file is empty")
    try:
        return open_regular(path, what)
    except UnsafeFileError as exc:  # a FIFO or device swapped in after the check, unreadable
        raise CorpusError(str(exc)) from None


def grew_while_read(path: Path, size: int) -> str:
    """Why a file that grew past ``size`` bytes (its size when opened) while it was read is
    refused: reading to its end read a file that a program kept writing (``yes > f``) for ever."""
    return (f"{path}: grew while it was read (it had {size:,} bytes when opened); a program is "
            "still writing it: wait until it is complete, or train on a copy")


def _not_utf8(path: Path, exc: UnicodeDecodeError, start: int, lines: int, utf8: bool) -> str:
    """Why a file is refused at its first byte that is not UTF-8 (``start``: the offset of
    ``exc.object``; ``lines``: the line breaks before it; ``utf8``: valid multi-byte UTF-8 came
    before the bad byte), and the fix: converting a file that mixes encodings from Latin-1 as a
    whole garbled its UTF-8 part ("café" became "cafÃ©"), which the corpus then took."""
    byte = exc.object[exc.start]
    line = lines + exc.object.count(b"\n", 0, exc.start) + 1
    where = f"byte 0x{byte:02x} at offset {start + exc.start}, line {line:,}"
    if utf8:
        return (f"{path}: mixes encodings: UTF-8 text, then {where} that is not UTF-8; convert "
                "only the lines from there (converting the whole file from Latin-1 would garble "
                "its UTF-8 part), or leave the file out")
    return (f"{path}: not valid UTF-8 ({where}); if it is text, save it as UTF-8 (an editor's "
            "Save as, or iconv -f latin1 -t utf-8)")


def iter_bytes(path: Path, chunk: int | None = None, limit: int | None = None,
               what: str = "corpus file") -> Iterator[bytes]:
    """The file's bytes in chunks, a leading UTF-8 BOM dropped, validated as it goes: raises
    CorpusError for an empty/blank, binary or non-UTF-8 file (naming the offset), one over
    ``limit`` bytes (default ``FILE_LIMIT``), and one that grows while it is read
    (``grew_while_read``): at most its size when opened is read, so a file that a program keeps
    writing cannot hold the read for ever."""
    path = Path(path)
    chunk = chunk or CHUNK
    limit = FILE_LIMIT if limit is None else limit
    with _open_checked(path, limit, what) as f:
        try:
            left = os.fstat(f.fileno()).st_size  # (it may have grown since the check)
        except OSError as exc:
            raise CorpusError(f"{path}: cannot read ({exc.strerror or exc})") from None
        if left > limit:
            raise CorpusError(f"{path}: grew past the {limit:,} bytes allowed for a {what}")
        size = left
        dec = codecs.getincrementaldecoder("utf-8")()
        offset = 0
        content = False
        first = True
        lines = 0  # line breaks before this chunk, and whether a multi-byte character came
        utf8 = False  # before it (then the file mixes encodings: no one iconv converts it)
        while True:
            try:
                data = f.read(min(chunk, left)) if left > 0 else b""
                if left <= 0 and f.read(1):
                    raise CorpusError(grew_while_read(path, size))
            except OSError as exc:
                raise CorpusError(f"{path}: cannot read ({exc.strerror or exc})") from None
            left -= len(data)
            final = not data
            if first:
                why = _not_text(data)
                if why:
                    raise CorpusError(f"{path}: {why}")
                if b"\x00" in data[:SNIFF]:
                    raise CorpusError(f"{path}: looks binary (contains NUL bytes), not text; add "
                                     "text or code files only")
                while data.startswith(_BOM):
                    data = data[3:]
                    offset += 3
                first = False
            carried = len(dec.getstate()[0])  # bytes of an incomplete character from before
            try:
                dec.decode(data, final)
            except UnicodeDecodeError as exc:
                raise CorpusError(_not_utf8(path, exc, offset - carried, lines,
                                            utf8 or max(data[:exc.start], default=0) >= 0x80)
                                  ) from None
            nul = data.find(b"\x00")
            if nul >= 0:  # past the first block's sniff: a binary tail, or text with a NUL in it
                raise CorpusError(f"{path}: a NUL byte at offset {offset + nul}, which text does not "
                                  "hold; remove it, or add text or code files only")
            if final:
                break
            content = content or bool(data.strip(_WS))
            offset += len(data)
            lines += data.count(b"\n")
            done = len(data) - len(dec.getstate()[0])  # (not the start of a character the
            utf8 = utf8 or max(data[:done], default=0) >= 0x80  # next chunk completes, or not)
            yield data
        if not content:  # bytes, but only spaces and line breaks ("empty" was taken as 0 bytes)
            raise CorpusError(f"{path}: file is empty (only whitespace, {offset:,} bytes)")


# after a newline between two non-space characters: GPT-2's pre-tokeniser splits a run of
# whitespace before its last character when a word follows ("\n\n\nx" -> "\n\n", "\n", "x"),
# so a cut after a run of two or more (or after " \n") would not be one of its boundaries
_CUT = re.compile(r"(?<=\S)\n(?=\S)")
_CUT_SPACE = re.compile(r"(?<=\S)(?= \S)")  # before a single space between two words


def _last_cut(pattern: re.Pattern[str], text: str, start: int) -> int | None:
    cut = None
    for m in pattern.finditer(text, start):
        cut = m.end()
    return cut


def iter_text(path: Path, chunk: int | None = None, limit: int | None = None,
              what: str = "corpus file") -> Iterator[str]:
    """The file's text in pieces of about ``chunk`` bytes, each cut just after a newline between
    two non-space characters (or, in a line longer than a few chunks, just before a space
    between two words), so tokenising the pieces one by one gives the same ids as tokenising the
    whole text with a byte-level BPE (both cuts are pre-tokeniser boundaries)."""
    chunk = chunk or CHUNK
    dec = codecs.getincrementaldecoder("utf-8")()
    pending = ""
    for data in iter_bytes(path, chunk, limit, what):
        pending += dec.decode(data)
        if len(pending) < chunk:
            continue
        cut = _last_cut(_CUT, pending, max(0, len(pending) - chunk))
        if cut is None and len(pending) >= 4 * chunk:
            cut = _last_cut(_CUT_SPACE, pending, len(pending) - chunk)
        if cut is None:  # no boundary yet (a very long line): keep reading
            continue
        yield pending[:cut]
        pending = pending[cut:]
    pending += dec.decode(b"", True)
    if pending:
        yield pending


def read_text_file(path: Path) -> CorpusFile:
    """Validate one file as non-empty UTF-8 text (streamed, bounded memory) or raise CorpusError."""
    path = Path(path)
    n = 0
    digest = hashlib.blake2b(digest_size=16)
    try:
        for data in iter_bytes(path):
            n += len(data)
            digest.update(data)
    except MambaStudioError as exc:
        raise CorpusError(str(exc)) from None
    return CorpusFile(path, n, digest.digest())


def file_identity(path: str | Path) -> tuple[int, int] | None:
    """What makes two paths one file (a link and its target, two hard links): (device, inode);
    None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def first_of_each_file(paths: Sequence[str | Path], taken: Sequence[str | Path] = ()
                       ) -> tuple[list[int], dict[int, str]]:
    """Each file once: the indices of ``paths`` to read (the first name of each file, after
    those already ``taken``), and, by index, why another name of one is not (a link and its
    target, two hard links: a link to a corpus file was a second document, and the split held
    out that copy of a training one: a held-out loss of 0.07 where training was at 0.88). A
    path given twice is neither (once, unsaid)."""
    seen = {k: str(p) for p in taken if (k := file_identity(p)) is not None}
    keep: list[int] = []
    again: dict[int, str] = {}
    for i, p in enumerate(paths):
        key = file_identity(p)
        if key is None or key not in seen:
            keep.append(i)
            if key is not None:
                seen[key] = str(p)
        elif Path(seen[key]) != Path(p):
            again[i] = f"{SAME_FILE}{seen[key]}, under another name (a link); read once"
    return keep, again


def first_of_each_text(files: Sequence[CorpusFile]) -> tuple[list[int], dict[int, str]]:
    """Each text once: the indices of ``files`` to read, and, by index, why a byte-identical
    copy of one before it is not (a copy under another name was a second document, and the
    split held out that copy of a training text, with no word: its held-out loss measured
    memorisation)."""
    seen: dict[tuple[int, bytes], Path] = {}
    keep: list[int] = []
    again: dict[int, str] = {}
    for i, f in enumerate(files):
        key = (f.n_bytes, f.digest)
        if f.digest and key in seen:
            again[i] = f"{SAME_TEXT}{seen[key]} (a copy); read once"
        else:
            keep.append(i)
            seen.setdefault(key, f.path)
    return keep, again


def same_file_as(why: str) -> str | None:
    """The first name of the file a refusal (``load_corpus``'s rejected reason) says is read
    under it (a link to it, or a copy of its text), or None for any other refusal: the window
    tells these from a file it cannot read by this, not by the words (two places matched "the
    same file as " on their own)."""
    if why.startswith(SAME_FILE):
        return why[len(SAME_FILE):].rsplit(", under another name", 1)[0]
    if why.startswith(SAME_TEXT):
        return why[len(SAME_TEXT):].rsplit(" (a copy)", 1)[0]
    return None


def require_present(paths: Sequence[str | Path]) -> None:
    """Raise CorpusError naming the first of ``paths`` that does not exist (a name mistyped or a
    file moved): a run or an evaluation on the rest, with one "skipped" line, read as done on
    all of them. A link that leads nowhere is left to ``load_corpus``, which says why."""
    missing = [p for p in paths if _absent(p)]
    if missing:
        n = len(missing) - 1
        more = f" ({n:,} more named {'is' if n == 1 else 'are'} missing too)" if n else ""
        raise CorpusError(f"{missing[0]}: no such file or folder; check the name, or leave it "
                          f"out of the corpus{more}")


def _absent(path: str | Path) -> bool:
    """Whether nothing is at ``path`` (a folder this user may not enter is no proof of that:
    ``load_corpus`` says why it cannot be read)."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False


SAY_CHECKING_BYTES = 64 * MiB  # a corpus this big is announced before it is read (seconds)


def load_corpus(paths: Sequence[str | Path], strict: bool = False, allow_empty: bool = False,
                say: Callable[[str], None] | None = None) -> Corpus:
    """Read files and folders (recursively through ``corpuswalk.walk``: text-like suffixes are
    read, other entries are listed as rejected, hidden ones ignored), in path order whatever
    the order given, each file once (a link to one already read, or a copy of its text, is
    listed as rejected). FIFOs,
    devices, sockets,
    empty files and files over ``FILE_LIMIT`` are rejected before anything is read. Bad files
    are collected in ``rejected`` (or raise with ``strict``). Raises CorpusError when nothing
    usable remains, unless ``allow_empty`` (for a listing that shows each rejected file on its
    own line). ``say`` hears one line before the files are read when they hold at least
    ``SAY_CHECKING_BYTES`` (a 1.3 GB corpus was read for 20-30 s with nothing said)."""
    corpus = Corpus()
    found: list[tuple[list[Path], list[tuple[Path, str]]]] = []  # each path's files, refusals
    for raw in paths:
        p = Path(raw)
        candidates: list[Path] = []
        if p.is_dir():  # bounded, never blocking, on the folder's own filesystem
            candidates, rejected = walk(p)
            if not candidates and not rejected:
                rejected = [(p, "empty folder (no files; hidden ones are ignored)")]
        elif p.is_symlink() and not p.exists():  # a link given by name that leads nowhere (or
            rejected = [(p, link_reason(p))]  # loops: it said "cannot read", a permission
            # problem's words)
        elif p.exists():
            candidates, rejected = [p], []
        else:
            rejected = [(p, "no such file or folder")]
        found.append((candidates, rejected))
    if say is not None:
        files = {f for candidates, _ in found for f in candidates}
        total = sum(_size_or_0(f) for f in files)
        if total >= SAY_CHECKING_BYTES:
            say(f"checking {plural(len(files), 'file')} ({total / 1e6:,.2f} MB) as UTF-8 "
                "text…")
    for candidates, rejected in found:  # (path by path: a folder's refusals before the next's)
        corpus.rejected.extend(rejected)
        for f in candidates:
            try:
                corpus.files.append(read_text_file(f))
            except CorpusError as exc:
                if strict:
                    raise
                corpus.rejected.append((f, str(exc).split(": ", 1)[-1]))
    corpus.files.sort(key=lambda f: Path(f.path))  # by path, folder by folder (as the walk
    # goes): the same files given in another order (added to the window one way, then the
    # other) made another held-out split, so two runs' held-out losses did not compare
    for first in (lambda fs: first_of_each_file([f.path for f in fs]), first_of_each_text):
        keep, again = first(corpus.files)
        corpus.rejected.extend((corpus.files[i].path, why) for i, why in again.items())
        corpus.files = [corpus.files[i] for i in keep]
    if not corpus.files and not allow_empty:
        shown: dict[str, list[str]] = {}  # reason -> the first files with it (each said once)
        for path, reason in corpus.rejected[:3]:
            shown.setdefault(reason, []).append(str(path))
        why = "; ".join(f"{', '.join(ps)}: {r}" for r, ps in shown.items()) or "no files given"
        if len(corpus.rejected) > 3:  # a folder of 500 images: a line, not 500 reasons
            why += f"; and {len(corpus.rejected) - 3:,} more"
        raise CorpusError(f"no usable text in the corpus ({why})")
    return corpus


def _size_or_0(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:  # (its read says why)
        return 0


def encode_files(corpus: Corpus, tokenizer: Any, progress: Progress | None = None) -> np.ndarray:
    """Tokenise the corpus file by file into one compact array (T,) of ``id_dtype(vocab)``;
    documents are separated by the tokenizer's end-of-text id. ``progress(done, total)`` is called
    after each chunk with byte counts."""
    dtype = id_dtype(int(tokenizer.vocab_size))
    total = corpus.n_bytes
    cap = total + len(corpus.files)  # upper bound: byte-level tokenizers give <= 1 id per byte
    out = np.empty(cap, dtype=dtype)
    pos = 0
    done = 0
    for f in list(corpus.files):  # a file unreadable since the scan is skipped (Corpus.drop)
        mark = pos
        try:
            if pos:
                out, pos = _put(out, pos, np.array([tokenizer.eos_id], dtype=dtype))
            if tokenizer.kind == "bytes":
                for data in reread(f.path, iter_bytes(f.path)):
                    corpus.check_stop()
                    out, pos = _put(out, pos, np.frombuffer(data, dtype=np.uint8))
                    done += len(data)
                    if progress is not None:
                        progress(done, total)
            else:
                for text in reread(f.path, iter_text(f.path)):
                    corpus.check_stop()
                    ids = tokenizer.encode(text)
                    if len(ids) and int(ids.max()) >= np.iinfo(dtype).max + 1:
                        raise CorpusError(f"{f.path}: tokenizer produced an id outside its "
                                          "vocabulary")
                    out, pos = _put(out, pos, ids.astype(dtype, copy=False))
                    done += len(text.encode("utf-8"))
                    if progress is not None:
                        progress(min(done, total), total)
        except FileGone as exc:
            pos = mark  # what was read of it is dropped with it
            corpus.drop(f, exc.reason)
    out.resize(pos, refcheck=False)  # shrinks in place (realloc), no copy
    return out


def _put(out: np.ndarray, pos: int, ids: np.ndarray) -> tuple[np.ndarray, int]:
    end = pos + len(ids)
    if end > len(out):  # a tokenizer that emits more ids than bytes (rare): grow by half
        out.resize(max(end, len(out) + len(out) // 2 + 1), refcheck=False)
    out[pos:end] = ids
    return out, end


def encode_corpus(texts: Sequence[str] | Corpus, tokenizer: Any,
                  progress: Progress | None = None) -> np.ndarray:
    """Documents separated by the tokenizer's end-of-text id -> ids (T,), compact dtype. A
    ``Corpus`` (or its ``texts``) is streamed from disk with ``encode_files``."""
    if isinstance(texts, Corpus):
        return encode_files(texts, tokenizer, progress)
    if isinstance(texts, _Texts):
        return encode_files(texts.corpus, tokenizer, progress)
    dtype = id_dtype(int(tokenizer.vocab_size))
    parts: list[np.ndarray] = []
    for i, t in enumerate(texts):
        if i:
            parts.append(np.array([tokenizer.eos_id], dtype=dtype))
        parts.append(np.asarray(tokenizer.encode(t)).astype(dtype))
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def split_holdout(ids: np.ndarray, fraction: float, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Last ``fraction`` of the stream (at least one row of seq_len + 1 when possible) is held out."""
    if fraction <= 0:
        return ids, ids[:0]
    n_val = max(int(len(ids) * fraction), min(seq_len + 1, len(ids) // 5))
    if len(ids) - n_val < 2:
        return ids, ids[:0]
    return ids[: len(ids) - n_val], ids[len(ids) - n_val :]


class RowView(NDArrayOperatorsMixin):
    """A (rows, seq_len) int64 table that is never stored: row ``r`` is
    ``ids[starts[r] + shift : starts[r] + shift + lengths[r]]`` padded with ``fill``. Indexing with
    an int, slice or index array materialises only those rows; NumPy functions and operators see
    the full array (for tests and small corpora)."""

    def __init__(self, ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seq_len: int,
                 shift: int, fill: int) -> None:
        self.ids, self.starts, self.lengths = ids, starts, lengths
        self.seq_len, self.shift, self.fill = seq_len, shift, fill

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.starts), self.seq_len)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.int64)

    def __len__(self) -> int:
        return len(self.starts)

    def _rows(self, idx: np.ndarray) -> np.ndarray:
        col = np.arange(self.seq_len)
        pos = self.starts[idx, None] + self.shift + col
        valid = col < self.lengths[idx, None]
        out = self.ids[np.where(valid, pos, 0)].astype(np.int64)
        out[~valid] = self.fill
        return out

    def __getitem__(self, key):
        rest: tuple = ()
        if isinstance(key, np.ndarray) and key.ndim > 1:  # e.g. a boolean mask of the whole table
            return np.asarray(self)[key]
        if isinstance(key, tuple):
            key, rest = key[0], key[1:]
        if isinstance(key, (int, np.integer)):
            out = self._rows(np.array([range(len(self))[int(key)]]))[0]
        else:
            out = self._rows(np.atleast_1d(np.arange(len(self))[key]))
        return out[rest] if rest else out

    def __array__(self, dtype=None, copy=None):
        a = self._rows(np.arange(len(self)))
        return a if dtype is None else a.astype(dtype)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        args = [np.asarray(x) if isinstance(x, RowView) else x for x in inputs]
        return getattr(ufunc, method)(*args, **kwargs)


def make_rows(ids: np.ndarray, seq_len: int) -> tuple[RowView, RowView]:
    """ids (T,) -> inputs, targets (rows, width) as ``RowView``s over ``ids`` (no copy), with
    width = min(seq_len, T - 1) (a row is never wider than the text); padded targets are -1,
    padded inputs 0."""
    n = len(ids)
    if n < 2:
        raise CorpusError(f"corpus has {n} token(s); at least 2 are needed to train")
    seq_len = min(seq_len, n - 1)
    starts = np.arange(0, n - 1, seq_len, dtype=np.int64)
    lengths = np.minimum(seq_len, n - 1 - starts)
    return (RowView(ids, starts, lengths, seq_len, 0, 0),
            RowView(ids, starts, lengths, seq_len, 1, -1))
