#!/usr/bin/env bash
# Interop suite: load what Mamba Studio writes in the real peer tools, each in its own virtualenv
# (never in .venv: the main test command stays free of torch). Two environments:
#   .venv-interop/t5   torch 2.13.0 (CPU build), transformers 5.x, peft, llama-cpp-python, gguf
#   .venv-interop/t4   torch 2.13.0 (CPU build), transformers 4.x, peft
# Usage: bash scripts/test-interop.sh [pytest args]   (first run installs; later runs reuse)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
# torch's CPU build: from a wheel pip already finds offline (a wheelhouse in pip's config), else
# from the PyTorch CPU index (PyPI's Linux wheel is the CUDA build, several GB).
TORCH_INDEX="${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
ENGINE_DEPS=(numpy numba safetensors tokenizers tiktoken threadpoolctl gguf pytest)

make_env() {  # make_env NAME PIP-SPEC...
  local dir=".venv-interop/$1"; shift
  local stamp="$dir/.installed"
  local want; want="$(printf '%s\n' "$@" "${ENGINE_DEPS[@]}" | sha256sum | cut -c1-16)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ "$stamp" -nt pyproject.toml ]; then
    return
  fi
  echo "test-interop: preparing $dir" >&2
  [ -x "$dir/bin/python" ] || "$PY" -m venv "$dir"
  "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-index --no-deps \
    "torch==2.13.0" 2>/dev/null || "$dir/bin/python" -m pip install -q --disable-pip-version-check \
    --no-deps --index-url "$TORCH_INDEX" "torch==2.13.0"
  "$dir/bin/python" -m pip install -q --disable-pip-version-check "torch==2.13.0" "$@" \
    "${ENGINE_DEPS[@]}"
  "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
  echo "$want" > "$stamp"
}

# llama-cpp-python builds llama.cpp from source when no wheel is cached (~40 min on 2 cores):
# build the CPU backend only, without BLAS/OpenMP extras.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DLLAMA_BUILD_TESTS=OFF}"
make_env t5 "transformers>=5,<6" "peft>=0.21" "llama-cpp-python==0.3.36"
make_env t4 "transformers>=4.57,<5" "peft>=0.21"

export MAMBA_STUDIO_INTEROP=1
status=0
for env in t5 t4; do
  echo "test-interop: $env ($(".venv-interop/$env/bin/python" -c 'import transformers as t; print("transformers", t.__version__)'))" >&2
  ".venv-interop/$env/bin/python" -m pytest -q -p no:cacheprovider \
    -W ignore::pytest.PytestConfigWarning tests/interop "$@" || status=1
done
exit $status
