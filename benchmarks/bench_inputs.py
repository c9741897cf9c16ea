"""Input pipeline cost: peak RAM per corpus byte while reading a corpus into packed rows, and
generation time per token early and late in a long generation.

    python benchmarks/bench_inputs.py [--mb 100] [--gen 40000] [--skip-generate]

Memory: a synthetic line-structured corpus of ``--mb`` MB (1 MB files) is written to a temporary
folder; each case runs in a fresh process that imports the engine, loads its tokenizer and resets
its peak-RSS counter (the baseline), then reads the corpus (load_corpus -> encode_documents ->
split_documents -> pack_spans). ``peak_bytes_per_byte`` is (peak RSS - baseline) / corpus bytes;
``process_bytes_per_byte`` includes the interpreter. The ``stream-main`` case is the previous
pipeline (encode_corpus -> split_holdout -> make_rows) as the peer of the same run. The ``mmap``
case loads the stored ids of the byte corpus (``load_documents``) and draws one epoch of batches:
private (anonymous) memory per byte, the ids living in page cache.

Generation: ``MambaLM.generate`` on the tiny preset (byte and BPE tokenizers, greedy, untrained
weights), ms per token over the first 1,000 tokens and the 1,000 tokens ending at ``--gen``; flat
means ``late_over_early`` is about 1.
Prints one JSON line per case.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's engine, not another installed copy


CASES = [("bytes/file", "bytes"), ("stream-main", "bytes"), ("bytes/line", "bytes"),
         ("mmap", "bytes"), ("bpe/file", "bpe"), ("stream-main", "bpe")]  # (case, tokenizer)


def _peak() -> int:
    hwm = _status("VmHWM")
    if hwm:
        return hwm
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb if sys.platform == "darwin" else kb * 1024


def _reset_peak() -> None:
    """Start the peak-RSS count from the current RSS (Linux >= 4.0); elsewhere a no-op."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def write_corpus(folder: Path, mb: int) -> int:
    """``mb`` files of ~1 MB: lines of 4-16 words drawn from 5,000 made-up words."""
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, int(n))) for n in rng.integers(2, 10, 5000)]
    total = 0
    for i in range(mb):
        lines, size = [], 0
        while size < 1 << 20:
            line = " ".join(words[j] for j in rng.integers(0, 5000, int(rng.integers(4, 17))))
            lines.append(line)
            size += len(line) + 1
        data = ("\n".join(lines) + "\n").encode()
        (folder / f"part{i:03d}.txt").write_bytes(data)
        total += len(data)
    return total


def child(case: str, corpus: Path, tok_dir: Path, store: Path) -> dict:
    import engine
    from engine.data import make_rows

    tok = engine.load_tokenizer(tok_dir)
    engine.pack_spans(np.array([tok.eos_id, 1, tok.eos_id], np.uint32), np.array([[0, 2]]), 4)
    engine.line_end_table(tok)  # warm-up: Numba's cached kernels are loaded once per process
    _reset_peak()
    base = _peak()
    t0 = time.perf_counter()
    out: dict = {"bench": "inputs", "case": case, "tokenizer": tok.kind}
    if case == "mmap":
        base_anon = _status("RssAnon")
        docs = engine.load_documents(store, vocab_size=tok.vocab_size, eos_id=tok.eos_id)
        train, _ = engine.split_documents(docs, 0.05, seed=0)
        rows = engine.pack_spans(docs.ids, train, 256, engine.line_end_table(tok))
        n = 0
        for batch in engine.iter_batches(rows, 8, seed=0, epoch=0):
            n += int((batch[1] >= 0).sum())
        nbytes = len(docs.ids)
        out.update(anon_bytes_per_byte=round((_status("RssAnon") - base_anon) / nbytes, 3),
                   file_rss_mb=round(_status("RssFile") / 2**20, 1), targets=n,
                   rows=len(rows), fill=round(rows.fill, 4))
    else:
        corpus_obj = engine.load_corpus([corpus])
        nbytes = corpus_obj.n_bytes
        if case == "stream-main":
            ids = engine.encode_corpus(corpus_obj, tok)
            train_ids, _ = engine.split_holdout(ids, 0.05, 256)
            make_rows(train_ids, 256)
            out["tokens"] = len(ids)
        else:
            records = case.split("/")[1]
            docs = engine.encode_documents(corpus_obj, tok, records)
            train, _ = engine.split_documents(docs, 0.05, seed=0)
            rows = engine.pack_spans(docs.ids, train, 256, engine.line_end_table(tok))
            if tok.kind == "bytes" and records == "file":
                engine.save_documents(store, docs)
            out.update(tokens=len(docs.ids), documents=len(docs), rows=len(rows),
                       fill=round(rows.fill, 4))
        peak = _peak()
        out.update(peak_bytes_per_byte=round((peak - base) / nbytes, 3),
                   process_bytes_per_byte=round(peak / nbytes, 3))
    out.update(corpus_mb=round(nbytes / 2**20, 1), seconds=round(time.perf_counter() - t0, 2))
    return out


def bench_generate(n_tokens: int, tok_dir: Path) -> dict:
    import engine

    tok = engine.load_tokenizer(tok_dir)
    lm = engine.MambaLM.create(engine.preset("tiny", tok.vocab_size), tok, seed=0)
    cfg = engine.SamplingConfig(temperature=0.0, max_new_tokens=n_tokens, stop_token=None)
    list(lm.generate("The ", engine.SamplingConfig(max_new_tokens=8)))  # warm-up
    stamps = []
    for _ in lm.generate("The ", cfg):
        stamps.append(time.perf_counter())
    t = np.asarray(stamps)
    w = min(1000, len(t) // 2)
    early = (t[w] - t[0]) / w * 1e3
    late = (t[-1] - t[-1 - w]) / w * 1e3
    return {"bench": "generate_long", "preset": "tiny", "tokenizer": tok.kind, "tokens": len(t),
            "ms_per_token_first_1k": round(early, 4), "ms_per_token_last_1k": round(late, 4),
            "late_over_early": round(late / early, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--gen", type=int, default=40000)
    ap.add_argument("--skip-generate", action="store_true")
    ap.add_argument("--cases", default="all",
                    help="comma-separated subset of: " + ",".join(f"{c}:{t}" for c, t in CASES))
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], *map(Path, a.child[1:]))), flush=True)
        return
    import engine

    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        (tmpd / "corpus").mkdir()
        write_corpus(tmpd / "corpus", a.mb)
        for name in ("bytes", "bpe"):
            (tmpd / name).mkdir()
        engine.ByteTokenizer().save(tmpd / "bytes")
        sample = [(tmpd / "corpus" / f"part{i:03d}.txt").read_text() for i in range(min(2, a.mb))]
        engine.BPETokenizer.train(sample, vocab_size=4096).save(tmpd / "bpe")
        wanted = set(a.cases.split(","))
        for case, tok in CASES:
            if a.cases != "all" and f"{case}:{tok}" not in wanted:
                continue
            args = [case, str(tmpd / "corpus"), str(tmpd / tok), str(tmpd / "store")]
            res = subprocess.run([sys.executable, __file__, "--child", *args], cwd=ROOT,
                                 capture_output=True, text=True, check=False)
            line = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else json.dumps(
                {"case": case, "error": res.stderr.strip().splitlines()[-1:]})
            print(line, flush=True)
        if not a.skip_generate:
            for tok in ("bytes", "bpe"):
                print(json.dumps(bench_generate(a.gen, tmpd / tok)), flush=True)


if __name__ == "__main__":
    main()
