"""Markdown tables for docs/performance.md from the JSON lines the benchmarks print.

    python benchmarks/report.py train.jsonl peers.jsonl scan.jsonl threads.jsonl [large.jsonl]
"""

import argparse
import json
import os


def rows(paths: list[str]) -> list[dict]:
    out = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    out.append(json.loads(line))
    return out


def table(head: list[str], body: list[list[object]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in body]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="Markdown tables from the JSON lines the "
                                     "benchmarks print (other lines are skipped).")
    parser.add_argument("jsonl", nargs="+", help="files of JSON lines: python -m engine bench "
                        "--json, benchmarks/bench_peers.py, bench_scan.py, bench_threads.py")
    paths = parser.parse_args().jsonl
    if missing := [p for p in paths if not os.path.isfile(p)]:
        parser.error(f"no such file: {', '.join(missing)}")
    rs = rows(paths)
    train = [r for r in rs if r.get("bench") == "train_step"]
    if train:
        print(table(
            ["config", "mode", "tok/s", "median ms", "x vs full", "GEMM GFLOP", "GEMM-only ms",
             "sgemm GFLOP/s (alone)", "step / GEMM-only", "in-step GEMM GFLOP/s (>=)",
             "NumPy peak MB"],
            [[r["config"], r["mode"], f"{r['tokens_per_s']:,.0f}", r["median_ms"],
              r["speedup_vs_full"], r["gemm_gflop"], r["gemm_only_ms"],
              r["sgemm_standalone_gflops"], r["step_over_gemm_only"],
              r["in_step_gemm_gflops_lower_bound"], r["numpy_peak_mb_one_step"]] for r in train]))
        print()
        for r in train:
            if r["mode"] != "full":
                continue
            ops = sorted(r["ops_ms"].items(), key=lambda kv: -kv[1])
            total = r["profiled_step_ms"]
            body = [[k, v, f"{100 * v / total:.0f} %"] for k, v in ops]
            body.append(["GEMMs + glue (rest)", r["gemm_and_glue_ms"],
                         f"{100 * r['gemm_and_glue_ms'] / total:.0f} %"])
            print(f"Per-op profile, {r['config']} full (profiled step {total} ms):\n")
            print(table(["op", "ms / step", "share"], body))
            print()
    peers = [r for r in rs if r.get("bench") == "peers"]
    if peers:
        print(table(["config", "impl", "tok/s", "median ms", "min ms", "ours is x faster"],
                    [[r["config"], r["impl"], f"{r['tokens_per_s']:,.0f}", r["median_ms"],
                      r["min_ms"], r["ours_speedup"]] for r in peers]))
        print()
    scan = [r for r in rs if r.get("bench") in ("scan", "roofline")]
    if scan:
        for r in scan:
            if r["bench"] == "roofline":
                dec = f", scan_decay {r['decay_ns']} ns" if "decay_ns" in r else ""
                print(f"Roofline: FMA peak {r['fma_peak_gflops']} GFLOP/s, fast_exp "
                      f"{r['exp_ns']} ns{dec} ({r['threads']} threads)\n")
        print(table(["impl", "config", "kernel", "median ms", "best ms", "ideal ms",
                     "roofline fraction"],
                    [[r["impl"], r["config"], r["kernel"], r["median_ms"], r["best_ms"],
                      r["ideal_ms"], r["roofline_fraction"]] for r in scan
                     if r["bench"] == "scan"]))
        print()
    th = [r for r in rs if r.get("bench") == "threads"]
    if th:
        print(table(["busy core", "variant", "median ms", "min ms", "speed vs 1 thread",
                     "tuner's BLAS threads"],
                    [[r["busy_core"], r["variant"], r["median_ms"], r["min_ms"],
                      r["speed_vs_1_thread"], r["tuner_blas_threads"] or ""] for r in th]))


if __name__ == "__main__":
    main()
