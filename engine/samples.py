"""The sample gallery of a run: every generated preview appended to ``samples.jsonl`` in the run
folder, one JSON object per line (prompt, sampling settings, seed, step, epoch, text, backend)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from .safeio import UnsafeFileError, open_append, open_regular

# Unicode's bidirectional embeddings, overrides and isolates: in a sample they reorder the text
# after them (a prompt holding U+202E was drawn reversed); shown by their code wherever a
# sample is shown (the window, a terminal), the exact text kept in files and pipes
BIDI_SHOWN = {c: f"[U+{c:04X}]" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def show_bidi(text: str) -> str:
    """``text`` with each bidirectional control shown as "[U+202E]", not obeyed."""
    return text.translate(BIDI_SHOWN)

SAMPLES = "samples.jsonl"
SAMPLE_EVERY = 200  # steps between samples inside an epoch, by default (0: epoch ends only)
MAX_BYTES = 64 * 1024 * 1024  # reads are bounded: a gallery larger than this is read from its end


def append_sample(folder: str | Path, record: dict[str, Any]) -> None:
    """Append one sample record (a ``time`` field is added) and flush it to disk. A torn last
    line (a crash mid-write) is ended first: the next record was glued to it and lost too."""
    row = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **record}
    path = Path(folder) / SAMPLES
    torn = False
    try:
        with open_regular(path, SAMPLES) as old:  # (a plain open() of a FIFO there hung the run)
            old.seek(0, os.SEEK_END)
            if old.tell() > 0:
                old.seek(-1, os.SEEK_END)
                torn = old.read(1) != b"\n"
    except (OSError, UnsafeFileError):
        pass  # none yet (open_append says what else is wrong)
    with open_append(path, SAMPLES) as f:
        f.write(("\n" if torn else "") + json.dumps(row, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_samples(folder: str | Path, tail: int | None = None) -> list[dict[str, Any]]:
    """All readable records, oldest first (of the file's last ``tail`` bytes, by default
    ``MAX_BYTES``); a torn last line (crash) or a foreign line (no text, a step or epoch that is
    no integer) is skipped."""
    tail = MAX_BYTES if tail is None else tail
    try:  # none yet, or not a plain file (a FIFO: none, never waited on)
        f = open_regular(Path(folder) / SAMPLES, SAMPLES)
    except UnsafeFileError:
        return []
    with f:
        size = os.fstat(f.fileno()).st_size
        if size > tail:
            f.seek(size - tail)
            f.readline()  # drop the partial first line
        raw = f.read(tail)
    out = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):  # (a line nested 100,000 deep)
            continue
        if isinstance(row, dict) and isinstance(row.get("text"), str) and all(
                isinstance(row.get(k, 0), int) and not isinstance(row.get(k, 0), bool)
                for k in ("step", "epoch")) and isinstance(row.get("prompt", ""), str):
            out.append(row)  # ("epoch": "two" left the window half-switched; a list as the
            # prompt stopped it from opening)
    return out


def last_sampled_step(folder: str | Path) -> int | None:
    """The step of the run's newest recorded sample (records are appended in step order, and a
    rollback drops those after its step), read from the file's end: the CLI read the whole
    gallery, up to 64 MiB, at every sample to ask whether its step was recorded."""
    tail = 256 * 1024
    rows = read_samples(folder, tail=tail)
    if not rows:  # a newest record over the tail (--sample-tokens up to 1,000,000): the
        try:      # bounded whole file
            longer = (Path(folder) / SAMPLES).stat().st_size > tail
        except OSError:
            longer = False
        rows = read_samples(folder) if longer else rows
    return int(rows[-1]["step"]) if rows else None


def samples_cut(folder: str | Path) -> bool:
    """Whether ``read_samples`` leaves the oldest records out (the file is over MAX_BYTES)."""
    try:
        return (Path(folder) / SAMPLES).stat().st_size > MAX_BYTES
    except OSError:
        return False


def sample_seed(base: int | None, index: int) -> int | None:
    """The seed of the ``index``-th prompt of a preview: each prompt gets its own stream."""
    return None if base is None else base + 1009 * index


def sample_tag(step: int, epoch: int | None = None) -> str:
    """A recorded sample's tag, one wording for the CLI and the window (a CLI run continued in
    the window mixed "after epoch 1" with "epoch 1"): "epoch N" after the N-th epoch's end,
    else "step S" ("step 0, untrained" before any step)."""
    if epoch is not None:
        return f"epoch {epoch}"
    return f"step {step}" if step else "step 0, untrained"


def sample_record(tag: str, step: int, epoch: int, prompt: str, text: str, sampling: Any,
                  backend: str) -> dict[str, Any]:
    """The record of one preview (``append_sample``): what the Gallery shows of it. ``epoch``:
    epochs completed when it was sampled; ``text`` includes the prompt; ``sampling`` a
    ``SamplingConfig`` (its seed the prompt's own, ``sample_seed``)."""
    return {"tag": tag, "step": step, "epoch": epoch, "prompt": prompt, "text": text,
            "seed": sampling.seed, "temperature": sampling.temperature, "top_k": sampling.top_k,
            "top_p": sampling.top_p, "repetition_penalty": sampling.repetition_penalty,
            "max_new_tokens": sampling.max_new_tokens, "stop_at_eos": sampling.stop_at_eos,
            "backend": backend}


class SampleSchedule:
    """When a training run shows a sample of its model: before it trains (or where it resumes),
    at each epoch's end, at its end, and inside an epoch once ``every`` steps have gone by
    since the last one (0: never inside an epoch). An epoch's end restarts the count, so a
    corpus of short epochs gets no samples but the epochs' (a 1.7 MB corpus's first sample
    after step 0 came 741 steps later, at its first epoch's end)."""

    def __init__(self, every: int, step: int) -> None:
        if every < 0:
            raise ValueError(f"samples every {every} steps: expected 0 (epoch ends only) or more")
        self.every = every
        self.last = step  # the last sample's step (``step``: where the run starts, sampled
        # there or not; a step the run has sampled is never past ``last``)

    def due(self, step: int, ends_epoch: bool) -> bool:
        """Whether the step just done (``step``) is one to sample inside its epoch; an epoch's
        last step (``ends_epoch``) is sampled by the epoch's end instead."""
        return self.every > 0 and not ends_epoch and step - self.last >= self.every

    def shown(self, step: int) -> None:
        """A sample was shown (or queued) at ``step``."""
        self.last = max(self.last, step)
