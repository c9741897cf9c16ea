import os

from engine.runtime import configure

configure()  # before any test imports NumPy or the kernels (cache folder, threading layer, BLAS)

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

# tests/interop needs torch, transformers, peft and llama-cpp-python: it runs only from
# scripts/test-interop.sh, in its own virtualenvs, so the main suite never imports torch.
collect_ignore_glob = [] if os.environ.get("MAMBA_STUDIO_INTEROP") else ["interop/*"]
