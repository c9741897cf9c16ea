#!/usr/bin/env bash
# Launch the real app under Xvfb (xcb platform), train briefly on the sample corpus, and save a
# screenshot of the window: bash scripts/screenshot.sh [out.png] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-assets/screenshot.png}"
steps="${2:-80}"
display=":$((90 + RANDOM % 9))"
Xvfb "$display" -screen 0 1400x900x24 -nolisten tcp >/dev/null 2>&1 &
xvfb=$!
trap 'kill $xvfb 2>/dev/null || true' EXIT
sleep 1
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
chmod 700 "$XDG_RUNTIME_DIR"
run_dir="$(mktemp -d)"
DISPLAY="$display" QT_QPA_PLATFORM=xcb .venv/bin/python -m app --preset small \
  --train-steps "$steps" --screenshot "$out" --run-dir "$run_dir"
echo "screenshot: $out (run saved in $run_dir)"
