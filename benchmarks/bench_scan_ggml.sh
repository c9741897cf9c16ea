#!/usr/bin/env bash
# ggml's CPU ssm_scan (the kernel llama.cpp runs for Mamba-1) beside our scan forward, 1 thread,
# on the bench shapes, alternating the two for ROUNDS rounds; JSON lines on stdout.
#
#   bash benchmarks/bench_scan_ggml.sh GGML_CHECKOUT [ROUNDS]
#
# GGML_CHECKOUT: a clone of github.com/ggml-org/ggml (or llama.cpp's ggml/ folder). It is built
# once (CPU backend, -march=native) under GGML_CHECKOUT/build-bench; our harness
# (benchmarks/peers_ggml/ssm_scan_bench.c) calls its public API. Nothing of ggml is copied here.
set -euo pipefail
ggml=$(cd "${1:?usage: bench_scan_ggml.sh GGML_CHECKOUT [ROUNDS]}" && pwd)
rounds=${2:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
build=$ggml/build-bench
if [ ! -f "$build/src/libggml-cpu.so" ] && [ ! -f "$build/src/ggml-cpu/libggml-cpu.so" ]; then
    cmake -S "$ggml" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_OPENMP=ON \
        -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >&2
    cmake --build "$build" --target ggml -j "$(nproc)" >&2
fi
libdirs=$(find "$build/" -name 'libggml*.so' -printf '%h\n' | sort -u | tr '\n' ':')
bin=$build/ssm_scan_bench
cc -O2 -o "$bin" "$here/benchmarks/peers_ggml/ssm_scan_bench.c" -I"$ggml/include" \
    $(find "$build/" -name 'libggml*.so' -printf '-L%h\n' | sort -u) -lggml -lggml-base -lggml-cpu -lm
for _ in $(seq "$rounds"); do
    LD_LIBRARY_PATH=$libdirs "$bin" 4 256 256 16 1 30
    LD_LIBRARY_PATH=$libdirs "$bin" 8 256 512 16 1 30
    (cd "$here" && "$py" benchmarks/bench_scan.py --threads 1 --repeats 30)
done
