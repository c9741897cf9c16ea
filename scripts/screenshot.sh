#!/usr/bin/env bash
# Launch the real app under Xvfb (xcb platform, 1280x800), train briefly on the sample corpus, and
# save screenshots of every tab into a folder: bash scripts/screenshot.sh [out_dir] [steps]
# Never touches the user's settings or runs: both live in temporary folders removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-assets}"
steps="${2:-120}"
tmp="$(mktemp -d)"
# a display no other X server holds (two servers on one number make the app talk to the wrong one)
n=90
while [ -e "/tmp/.X11-unix/X$n" ] || [ -e "/tmp/.X$n-lock" ]; do n=$((n + 1)); done
display=":$n"
Xvfb "$display" -screen 0 1280x800x24 -nolisten tcp >/dev/null 2>&1 &
xvfb=$!
trap 'kill $xvfb 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do [ -e "/tmp/.X11-unix/X$n" ] && break; sleep 0.1; done
kill -0 "$xvfb" 2>/dev/null || { echo "error: Xvfb did not start on $display" >&2; exit 2; }
mkdir -p "$tmp/runtime" && chmod 700 "$tmp/runtime"
export XDG_RUNTIME_DIR="$tmp/runtime" XDG_CONFIG_HOME="$tmp/config"
DISPLAY="$display" QT_QPA_PLATFORM=xcb "${PYTHON:-.venv/bin/python}" -m app --preset small \
  --train-steps "$steps" --shots "$out" --runs-root "$tmp/runs" --settings-dir "$tmp/config"
echo "screenshots in $out"
