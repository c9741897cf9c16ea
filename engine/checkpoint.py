"""Checkpoints: safetensors weights with Hugging Face ``MambaForCausalLM`` key names, a
``config.json`` that HF ``MambaConfig`` accepts, the tokenizer, and (for training checkpoints)
optimizer moments + trainer state.

Folder layout (what ``transformers`` 4.x/5.x ``from_pretrained`` and ``AutoTokenizer`` read):
    config.json                 HF config: architectures, model_type, dtype/torch_dtype, exact
                                vocab_size, tie_word_embeddings, bos/eos/pad ids (+ "mamba_studio")
    generation_config.json      bos/eos/pad ids for ``generate``
    model.safetensors           backbone.* tensors (+ lm_head.weight when untied), float32,
                                safetensors metadata {"format": "pt"} (transformers 4.x requires it)
      or model-0000i-of-0000N.safetensors + model.safetensors.index.json above ``max_shard_bytes``
    tokenizer.json, tokenizer_config.json, special_tokens_map.json
    optimizer.safetensors       exp_avg.<name>, exp_avg_sq.<name>      (training checkpoints)
    trainer_state.json          step, epoch, cursor, configs, sha256 of every file above (written last)
Every file is written to a temp file in the same folder, fsync'ed, then renamed over the old one;
``trainer_state.json`` goes last and records the hash of each file, so a half-written checkpoint is
detected on load instead of being silently mixed with an older one.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import os
import secrets
import shlex
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .config import MambaConfig
from .errors import CheckpointError, MambaStudioError
from .params import EMBEDDINGS, LM_HEAD, Params, param_shapes

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
MAX_SHARD_BYTES = 2 << 30  # one file up to 2 GiB; HF writes 5 GB shards, any size loads
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def temp_name(name: str, token: str | None = None) -> str:
    """``create_temp``'s name for a file ``name``: ".<name>.<token>.tmp", the token 12 random
    hex digits unless given."""
    return f".{name}.{secrets.token_hex(6) if token is None else token}.tmp"


def create_temp(path: Path) -> tuple[int, str]:
    """Open a new ``temp_name`` beside ``path`` for writing; returns (fd, temp path).
    Created with mode 0666 so the kernel applies the process umask (mkstemp would make 0600),
    without ever changing the umask."""
    for _ in range(100):
        tmp = str(path.parent / temp_name(path.name))
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file beside {path}")


@contextmanager
def _atomic(path: Path, make_parents: bool = True) -> Iterator[tuple[int, str]]:
    """A new temporary file beside ``path`` (its fd and path) for the block to fill and fsync,
    renamed onto ``path`` when the block ends and removed on any failure, so the old file is
    untouched (a full disk...); an OSError is a CheckpointError naming ``path``.
    ``make_parents`` False: a missing folder is an error, not made (a run folder moved or
    deleted while training was made again, holding only a status.json)."""
    path = Path(path)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = create_temp(path)
    except OSError as exc:  # a disk out of files (inodes) fails here, naming the temp file
        raise CheckpointError(f"could not write {path}: {exc.strerror or exc}") from exc
    try:
        yield fd, tmp
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise CheckpointError(f"could not write {path}: {exc.strerror or exc}") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes, make_parents: bool = True) -> None:
    """Write ``data`` to ``path`` atomically (``_atomic``)."""
    with _atomic(path, make_parents) as (fd, _), os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_json(path: Path, obj: Any, make_parents: bool = True) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode(),
                       make_parents)


def sha256_file(path: Path, what: str = "checkpoint file") -> str:
    """The file's sha256 (hex); a FIFO or device in its place is refused, never waited on."""
    from .safeio import UnsafeFileError, open_regular

    h = hashlib.sha256()
    try:
        f = open_regular(path, what)
    except UnsafeFileError as exc:
        raise CheckpointError(str(exc)) from None
    with f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write_tensors(path: Path, tensors: dict[str, np.ndarray],
                         metadata: dict[str, str] | None = None) -> None:
    """``tensors`` as a safetensors file at ``path``, atomically as ``atomic_write_bytes``, with
    metadata ``{"format": "pt"}`` (transformers 4.x refuses any other format tag; the tag does
    not change how the tensors are stored) plus ``metadata``. safetensors streams the file from
    one copy of the tensors; made into bytes first (``safetensors.numpy.save``) it held two,
    its copies and the whole file: a 212 M-parameter model's step-0 save peaked at 9.3 GB for a
    run estimated at 3.5 GB."""
    from safetensors import SafetensorError
    from safetensors.numpy import save_file

    with _atomic(path, make_parents=False) as (fd, tmp):
        mode = os.fstat(fd).st_mode & 0o777  # 0666 less the umask, as every file we write
        os.close(fd)
        try:
            save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, tmp,
                      metadata={"format": "pt", **(metadata or {})})
            os.chmod(tmp, mode)  # safetensors replaces the file with its own, owner-only (0600):
            # another account or a service read an export's config but not its weights
        except SafetensorError as exc:  # its I/O errors (a full disk: "Error while serializing:
            why = str(exc).rsplit("I/O error: ", 1)[-1].split(" (os error")[0]  # I/O error: No
            raise CheckpointError(f"could not write {path}: {why}") from None  # space left...")
        except BaseException as exc:  # (an allocation failing inside safetensors is a Rust
            if type(exc).__name__ == "PanicException":  # panic: a BaseException, which printed
                raise MemoryError(f"writing {Path(path).name}: {exc}") from None  # a traceback)
            raise
        with open(tmp, "r+b") as f:  # (Windows fsyncs a handle opened for writing only)
            os.fsync(f.fileno())


def read_tensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    if not Path(path).exists():
        raise CheckpointError(f"{path}: file not found")
    from .safeio import UnsafeFileError, check_regular

    try:
        check_regular(path, "safetensors file")  # a FIFO or device is refused before opening
    except UnsafeFileError as exc:
        raise CheckpointError(str(exc)) from None
    try:
        return load_file(str(path))
    except TypeError as exc:  # "data type 'bfloat16' not understood": NumPy has no bf16
        if "bfloat16" in str(exc):
            return _read_with_bfloat16(Path(path))
        raise CheckpointError(
            f"{path}: unsupported tensor dtype ({exc}); convert the weights to float32 or float16"
        ) from exc
    except Exception as exc:  # SafetensorError is a plain Exception subclass
        raise CheckpointError(f"{path}: corrupt or truncated safetensors file ({exc})") from exc


_ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
              "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


_HEADER_LIMIT = 100_000_000  # a safetensors header's JSON (names, dtypes, shapes, offsets)


def read_header(path: Path) -> tuple[dict[str, Any], int]:
    """A safetensors file's header ({name: {"dtype", "shape", "data_offsets"}}, "__metadata__"
    left out) and the offset its data starts at; read alone (at most 100 MB, never blocking on
    a FIFO), so a file's names and shapes are checked before its tensors are read."""
    from .safeio import UnsafeFileError, open_regular

    bad = f"{path}: corrupt or truncated safetensors file"
    try:
        with open_regular(path, "safetensors file") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if not 2 <= n <= min(size - 8, _HEADER_LIMIT):
                raise CheckpointError(f"{bad} (header length {n})")
            raw = f.read(n)
    except UnsafeFileError as exc:
        raise CheckpointError(str(exc)) from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        header = json.loads(raw)
    except ValueError:
        raise CheckpointError(f"{bad} (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{bad} (its header is not a table of tensors)")
    header.pop("__metadata__", None)
    return header, 8 + n


def _layout(header: dict[str, Any], path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, dtype name) of a header's tensors."""
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for name, t in header.items():
        try:
            dtype = str(t["dtype"])
            known = "bfloat16" if dtype == "BF16" else np.dtype(_ST_DTYPES[dtype]).name if \
                dtype in _ST_DTYPES else dtype  # (another, e.g. F8_E4M3: its read says so)
            out[name] = (tuple(int(d) for d in t["shape"]), known)
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: corrupt or truncated safetensors file (tensor "
                                  f"{name!r:.60}: {str(t)[:80]})") from None
    return out


def _read_with_bfloat16(path: Path) -> dict[str, np.ndarray]:
    """A safetensors file holding bfloat16 tensors (many Hugging Face checkpoints; NumPy has no
    bf16, so safetensors.numpy refused the file): bf16 tensors become float32 exactly (a bf16
    value is the upper 16 bits of its float32), the others as stored. The header's offsets and
    shapes are checked against the file (memory-mapped, not read whole)."""
    header, start = read_header(path)
    size = path.stat().st_size
    bad = f"{path}: corrupt or truncated safetensors file"
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=start) if size > start else \
        np.zeros(0, np.uint8)
    out: dict[str, np.ndarray] = {}
    for name, t in header.items():
        try:
            dtype, shape, (begin, end) = t["dtype"], [int(d) for d in t["shape"]], t["data_offsets"]
            count = int(np.prod(shape, dtype=np.int64))
            width = 2 if dtype == "BF16" else np.dtype(_ST_DTYPES[dtype]).itemsize
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{bad} (tensor {name!r:.60}: {str(t)[:80]})") from None
        if not (0 <= begin <= end <= len(data) and end - begin == count * width):
            raise CheckpointError(f"{bad} (tensor {name!r:.60} lies outside the file)")
        raw = data[begin:end]
        if dtype == "BF16":
            bits = raw.view("<u2").astype(np.uint32) << 16
            out[name] = bits.view(np.float32).reshape(shape)
        else:
            out[name] = np.array(raw.view(_ST_DTYPES[dtype]).reshape(shape))
    return out


def check_layout(layout: dict[str, tuple[tuple[int, ...], str]], cfg: MambaConfig,
                 source: str) -> None:
    """Names, shapes and dtypes (name -> (shape, dtype name)) against ``cfg``: each tensor it
    needs is there, of its shape and a float type, and there is no other. Run on the files'
    headers before their tensors are read (a 630 MB file of other tensors took 1.33 GB of
    memory to be refused), and again on the tensors read."""
    shapes = param_shapes(cfg)
    for name, shape in shapes.items():
        alt = name.replace("backbone.embeddings.", "backbone.embedding.")
        got = layout.get(name, layout.get(alt))
        if got is None:
            why = " (the config says tie_word_embeddings false)" if name == LM_HEAD else ""
            raise CheckpointError(f"{source}: tensor {name} is missing (expected shape {shape}){why}")
        if got[0] != shape:
            raise CheckpointError(
                f"{source}: tensor {name} has shape {got[0]}, the config needs {shape}"
            )
        if got[1].startswith(("int", "uint", "bool", "complex")):  # (a safetensors dtype NumPy
            # has no name for stays its own, e.g. F8_E4M3: reading the file refuses it)
            raise CheckpointError(f"{source}: tensor {name} has dtype {got[1]}, expected float")
    extra = sorted(set(layout) - set(shapes) - {LM_HEAD, "backbone.embedding.weight"})
    if extra:
        raise CheckpointError(f"{source}: unexpected tensors {extra[:5]} (not a Mamba-1 checkpoint?)")


def check_params(tensors: dict[str, np.ndarray], cfg: MambaConfig, source: str) -> Params:
    """Validate names/shapes against ``cfg`` (``check_layout``). A tied config tolerates an
    ``lm_head.weight`` equal to the embeddings (HF writes one) and refuses one that differs (set
    tie_word_embeddings false); an untied config requires it."""
    check_layout({k: (tuple(a.shape), a.dtype.name) for k, a in tensors.items()}, cfg, source)
    shapes = param_shapes(cfg)
    out: Params = {}
    for name in shapes:
        a = tensors.get(name, tensors.get(name.replace("backbone.embeddings.",
                                                       "backbone.embedding.")))
        assert a is not None  # (check_layout: every name is there)
        out[name] = np.ascontiguousarray(a, dtype=np.float32)
    if cfg.tie_embeddings and LM_HEAD in tensors:
        head = tensors[LM_HEAD]
        if head.shape != shapes[EMBEDDINGS] or not np.array_equal(
                np.asarray(head, np.float32), out[EMBEDDINGS]):
            raise CheckpointError(
                f"{source}: {LM_HEAD} differs from the embeddings but config.json says "
                "tie_word_embeddings true; set it to false to use the separate head"
            )
    return out


def _shards(params: Params, max_bytes: int) -> list[dict[str, np.ndarray]]:
    """Split ``params`` (in order) into groups of at most ``max_bytes`` (a bigger tensor alone)."""
    groups: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name, a in params.items():
        if groups[-1] and size + a.nbytes > max_bytes:
            groups.append({})
            size = 0
        groups[-1][name] = a
        size += a.nbytes
    return groups


def write_weights(folder: Path, params: Params, max_shard_bytes: int = MAX_SHARD_BYTES) -> list[str]:
    """Write ``model.safetensors``, or above ``max_shard_bytes`` HF-style shards and their
    ``model.safetensors.index.json``; remove the other layout's stale files. Returns the names."""
    params = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in params.items()}
    groups = _shards(params, max_shard_bytes)
    if len(groups) == 1:
        atomic_write_tensors(folder / SINGLE, params)
        names = [SINGLE]
    else:
        names = [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
        for name, group in zip(names, groups, strict=True):
            atomic_write_tensors(folder / name, group)
        index = {"metadata": {"total_size": int(sum(a.nbytes for a in params.values()))},
                 "weight_map": {k: name for name, g in zip(names, groups, strict=True) for k in g}}
        atomic_write_json(folder / INDEX, index)
        names.append(INDEX)
    for stale in folder.glob("model*.safetensors*"):
        if stale.name not in names:
            stale.unlink(missing_ok=True)
    return names


def _hf_ids(tokenizer) -> dict[str, int]:
    """bos/eos/pad ids: our tokenizers have one special token, <|endoftext|>, used for all three."""
    eos = int(tokenizer.eos_id)
    return {"bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos}


def save_model_files(
    folder: Path, cfg: MambaConfig, params: Params, tokenizer,
    *, max_shard_bytes: int = MAX_SHARD_BYTES,
) -> dict[str, str]:
    """Write config.json, generation_config.json, the weights (one file or shards) and the
    tokenizer files atomically; return {file name: sha256} of every file written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ids = _hf_ids(tokenizer)
    hf = {**cfg.to_hf_dict(), **ids}
    hf["mamba_studio"] = {"tokenizer": tokenizer.kind}
    atomic_write_json(folder / "config.json", hf)
    atomic_write_json(folder / "generation_config.json", {**ids, "_from_model_config": False})
    names = ["config.json", "generation_config.json", *write_weights(folder, params, max_shard_bytes)]
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        tokenizer.save(Path(tmp))
        for name in TOKENIZER_FILES:
            if (Path(tmp) / name).exists():
                atomic_write_bytes(folder / name, (Path(tmp) / name).read_bytes())
                names.append(name)
    return {n: sha256_file(folder / n) for n in names}


def is_model_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a model (config.json beside weights or an adapter): an export,
    a snapshot, a downloaded model."""
    return (folder / "config.json").is_file() and any(
        (folder / n).exists() for n in ("model.safetensors", INDEX, "adapter_config.json",
                                         "pytorch_model.bin"))


def not_a_folder(path: Path) -> CheckpointError | None:
    """The error for a model path that is no folder (missing, a file: a GGUF file named), else
    None. One wording for generate, eval, export, --init and the window's Open."""
    fix = "pass a run folder (runs/...) or a model folder"
    if not path.exists() and not path.is_symlink():
        return CheckpointError(f"{path}: no such file or folder; {fix}")
    if path.is_dir():
        return None
    if path.is_symlink() and not path.exists():  # (a loop was called "a file")
        try:
            os.stat(path)
        except OSError as exc:
            why = "loops back to itself" if exc.errno == errno.ELOOP else "points to nothing"
            return CheckpointError(f"{path}: a link that {why} ({exc.strerror}); {fix}")
    from .safeio import UnsafeFileError, read_head

    try:
        gguf = read_head(path, 4) == b"GGUF"  # (a FIFO is never waited on)
    except UnsafeFileError:
        gguf = False
    if gguf or path.suffix.lower() == ".gguf":  # (it was "a file, not a folder")
        return CheckpointError(f"{path}: a GGUF file, for llama.cpp, Ollama or LM Studio; here "
                               "pass the run it was exported from, or a merged export folder")
    return CheckpointError(f"{path}: a file, not a folder; {fix}")


def _a_run_inside(folder: Path, limit: int = 1000) -> Path | None:
    """The newest of the first ``limit`` entries of ``folder`` that holds a model (a run or an
    exported model: its config.json or run.json), or None; the listing is bounded."""
    from .runformat import is_run  # (runformat imports this module)

    found: list[tuple[float, str, Path]] = []
    try:
        with os.scandir(folder) as it:
            for entry in itertools.islice(it, limit):
                p = Path(entry.path)
                try:
                    if entry.is_dir() and (is_run(p) or (p / "config.json").is_file()):
                        found.append((p.stat().st_mtime, p.name, p))
                except OSError:
                    continue
    except OSError:
        return None
    return max(found)[2] if found else None


def read_config(folder: Path) -> MambaConfig:
    path = Path(folder) / "config.json"
    if not path.exists() and not path.is_symlink():
        folder = Path(folder)
        if (bad := not_a_folder(folder)) is not None:
            raise bad
        from .runformat import is_run, prepared_only, snapshots  # (runformat imports this)
        from .runformat.out_folder import prepared_only_note

        usable = [p for _, p in snapshots(folder) if (p / "config.json").is_file()]
        if usable:  # a run folder whose run.json is gone: it said "not a model folder" only
            raise CheckpointError(f"{folder}: no run.json and no config.json; its snapshots "
                                  f"still load: use {usable[-1]}")
        inner = [p for _, p in snapshots(folder.parent) if (p / "config.json").is_file()
                 ] if folder.name == "snapshots" else []  # (RUN/snapshots: "not a model folder")
        if inner:
            raise CheckpointError(f"{folder}: the snapshots folder of a run; pass the run "
                                  f"({folder.parent}: its latest snapshot) or one snapshot, "
                                  f"e.g. {inner[-1]}")
        if prepared_only(folder):  # (killed while prepared: "not a model folder" alone)
            raise CheckpointError(prepared_only_note(folder, "there is no model in it"))
        if folder.is_dir() and not any(folder.iterdir()):
            raise CheckpointError(f"{folder}: an empty folder, not a model folder; pass a run "
                                  "folder, a snapshot or an exported model")
        if (run := _a_run_inside(folder)) is not None:  # (the runs root: "not a model folder")
            kind = "runs, not a run" if is_run(run) else "models, not a model"
            raise CheckpointError(f"{folder}: a folder of {kind}; pass one of them, "
                                  f"e.g. {shlex.quote(str(run))}")  # (a folder of exports
            # was called "a folder of runs")
        raise CheckpointError(f"{folder}: no config.json (not a model folder)")
    from .limits import check_hf_config
    from .safeio import read_json

    try:
        d = read_json(path, what="config.json")  # bounded; a FIFO/device is refused
        check_hf_config(d, str(path))  # types and ranges before any shape is built
        return MambaConfig.from_hf_dict(d)
    except MambaStudioError as exc:
        raise CheckpointError(str(exc)) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: unusable config ({exc})") from exc


def find_weights(folder: Path) -> list[Path]:
    """The weight files of a model folder: model.safetensors, else the shards listed by
    model.safetensors.index.json (HF's order of preference), else an adapter's weights."""
    folder = Path(folder)
    if (folder / SINGLE).exists():
        return [folder / SINGLE]
    if (folder / SINGLE).is_symlink():  # a link to nothing, or a loop: it said "no
        try:  # model.safetensors" of the file there
            os.stat(folder / SINGLE)
        except OSError as exc:
            why = "loops back to itself" if exc.errno == errno.ELOOP else "points to nothing"
            raise CheckpointError(f"{folder / SINGLE}: a link that {why} ({exc.strerror}); "
                                  "point it at the weights file, or replace it with the file"
                                  ) from None
    if (folder / INDEX).exists():
        from .safeio import inside, read_json

        try:
            index = read_json(folder / INDEX, what=INDEX)
            weight_map = index["weight_map"] if isinstance(index, dict) else None
            if not isinstance(weight_map, dict) or not all(
                    isinstance(v, str) for v in weight_map.values()):
                raise CheckpointError(f"{folder / INDEX}: no weight_map of file names")
            return [inside(folder, name) for name in sorted(set(weight_map.values()))]
        except (MambaStudioError, KeyError) as exc:
            raise CheckpointError(f"{folder / INDEX}: unusable shard index ({exc})") from None
    if (folder / "adapter_model.safetensors").exists():
        return [folder / "adapter_model.safetensors"]
    if (folder / "pytorch_model.bin").exists():
        raise CheckpointError(f"{folder}: only pytorch_model.bin found; convert it to safetensors")
    raise CheckpointError(f"{folder}: no model.safetensors (nor {INDEX})")


def load_model_files(folder: Path) -> tuple[MambaConfig, Params]:
    """Read a model folder (ours or HF's ``save_pretrained``: one file or shards, float32/16)."""
    folder = Path(folder)
    cfg = read_config(folder)
    tensors: dict[str, np.ndarray] = {}
    paths = find_weights(folder)
    source = str(paths[0] if len(paths) == 1 else folder / INDEX)
    layout: dict[str, tuple[tuple[int, ...], str]] = {}
    for path in paths:  # names and shapes first: nothing read of a file that cannot be this model
        if not path.exists():
            raise CheckpointError(f"{path}: file not found")
        layout.update(_layout(read_header(path)[0], path))
    check_layout(layout, cfg, source)
    for path in paths:
        tensors.update(read_tensors(path))
    return cfg, check_params(tensors, cfg, source)


def verify_files(folder: Path, digests: dict[str, Any], manifest: str, fix: str,
                 unhashed: frozenset[str] = frozenset()) -> None:
    """Every file named in ``digests`` (a manifest's ``{name: sha256}``) exists inside
    ``folder``, is regular, and has its sha256; else CheckpointError naming the file and
    ending with ``fix``. The one check of a run's snapshots and data and of old checkpoints.
    ``unhashed``: names only checked to be there, as files (a cheap look before a load)."""
    from .safeio import UnsafeFileError, inside

    if not digests:
        raise CheckpointError(f"{folder}: {manifest} lists no files; cannot verify them; {fix}")
    for name, digest in digests.items():
        try:
            p = inside(folder, str(name))  # a name from the folder's own state never leads out
            if not p.exists() or name in unhashed and not p.is_file():
                raise CheckpointError(f"{p}: missing (the files are incomplete); {fix}")
        except UnsafeFileError as exc:
            raise CheckpointError(str(exc)) from None
        if name in unhashed:
            continue
        try:
            got = sha256_file(p, "file")  # (it refuses a FIFO or device, never waits on one)
        except CheckpointError as exc:  # (a FIFO as data/ids.npy said "give a regular
            raise CheckpointError(f"{exc}; {fix}") from None  # checkpoint file")
        if got != digest:
            raise CheckpointError(f"{p}: contents do not match {manifest} (corrupt or modified); "
                                  f"{fix}")


def verify_hashes(folder: Path, hashes: dict[str, str]) -> None:
    """An old single-folder checkpoint's files against its trainer_state.json."""
    verify_files(folder, hashes, "trainer_state.json", "the checkpoint is damaged: use another one")
