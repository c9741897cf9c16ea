#!/usr/bin/env bash
# Install everything Mamba Studio needs on Debian/Ubuntu: system libraries (Qt's xcb/EGL libs,
# Xvfb, Mesa's lavapipe Vulkan driver for wgpu, libgomp for Numba) and a .venv with the package.
# Distributed training (MPI) is optional: scripts/setup-mpi.sh installs Open MPI and mpi4py.
# Idempotent: skips apt when every package is present and pip when the venv is up to date.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  mesa-vulkan-drivers libvulkan1 libegl1 libegl-mesa0 libgl1 libgl1-mesa-dri libgomp1
  libxkbcommon0 libfontconfig1 libfreetype6 libdbus-1-3 libglib2.0-0 fonts-dejavu-core
  xvfb xauth x11-utils imagemagick
  libxkbcommon-x11-0 libx11-xcb1 libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0
  libxcb-render-util0 libxcb-shape0 libxcb-randr0 libxcb-xfixes0 libxcb-xkb1 libxcb-sync1 libxcb-shm0
)

if command -v apt-get >/dev/null 2>&1; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "setup: installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.mamba-studio-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[dev,bench]"
  touch "$stamp"
fi
