#!/usr/bin/env bash
# A separate venv for benchmarks/bench_peers.py: PyTorch (the CPU build, pinned) next to the
# engine's own NumPy/Numba, so the PyTorch peers and our trainer run in one process, interleaved.
# The app's venv never gets torch. Usage: bash scripts/setup-bench-venv.sh [VENV] (default
# .venv-bench); PIP_FIND_LINKS may name a folder holding the torch wheel (e.g. an offline mirror).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-bench}"
PY="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# torch first and pinned: a later unpinned resolve must never swap it for another build.
# The CPU index is tried once with a short timeout and no retries (offline or firewalled machines
# would otherwise retry every dependency for minutes), then pip's configured index / find-links.
"$VENV/bin/pip" install -q --retries 0 --timeout 15 "torch==2.13.0" \
    --index-url https://download.pytorch.org/whl/cpu \
  || "$VENV/bin/pip" install -q "torch==2.13.0"
"$VENV/bin/pip" install -q "torch==2.13.0" "numpy>=2.0,<2.6" "numba>=0.68,<0.69" "threadpoolctl>=3.5"
"$VENV/bin/python" -c "import torch, numba; print('bench venv ready: torch', torch.__version__, 'numba', numba.__version__)"
