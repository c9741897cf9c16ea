import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import engine  # noqa: E402,F401  (sets thread/cache defaults before NumPy loads)

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(ROOT))

# tests/interop needs torch, transformers, peft and llama-cpp-python: it runs only from
# scripts/test-interop.sh, in its own virtualenvs, so the main suite never imports torch.
collect_ignore_glob = [] if os.environ.get("MAMBA_STUDIO_INTEROP") else ["interop/*"]
