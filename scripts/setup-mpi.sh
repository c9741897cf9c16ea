#!/usr/bin/env bash
# Install what distributed training (`python -m engine train --distributed`) needs: an MPI runtime
# (Debian's Open MPI) and mpi4py in .venv. Idempotent; run after scripts/setup.sh.
# MPICH works too: install `mpich` instead of `openmpi-bin` (then `mpiexec -n N` needs no flags).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v mpirun >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup-mpi: installing Debian package openmpi-bin"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends openmpi-bin >/dev/null
fi
if ! .venv/bin/python -c "import mpi4py" >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[mpi]"
fi
.venv/bin/python -c "from mpi4py import MPI; print('setup-mpi:', MPI.Get_library_version().splitlines()[0])"
