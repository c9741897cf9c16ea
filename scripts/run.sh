#!/usr/bin/env bash
# The README's main command: set up, then open Mamba Studio on the bundled sample corpus.
# Without a display it runs the CLI equivalent: train on the sample corpus and print samples.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && [ "${MAMBA_STUDIO_HEADLESS:-0}" != 1 ]; then
  exec .venv/bin/python -m app "$@"
fi
echo "no display: running the headless equivalent (python -m engine train on assets/sample_corpus)"
exec .venv/bin/python -m engine train --preset small "$@"  # a new runs/<date>-small-<n> each time
