"""engine.runtime: importing engine changes nothing; configure() applies the documented settings."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import engine
from engine import runtime

ROOT = Path(__file__).resolve().parents[1]

# Import engine and every public name in a fresh interpreter; report what the process looks like.
PROBE = """
import json, os, sys
before_env, before_umask = dict(os.environ), os.umask(0o027)
os.umask(before_umask)
import engine
for name in engine.__all__:
    getattr(engine, name)
import engine.checkpoint, engine.runtime
after_umask = os.umask(0o027)
os.umask(after_umask)
changed = sorted(k for k in set(before_env) | set(os.environ) if before_env.get(k) != os.environ.get(k))
print(json.dumps({"changed": changed, "umask": [before_umask, after_umask]}))
"""


def _probe(code: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "OMP_", "OPENBLAS_"))}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_importing_engine_leaves_environment_and_umask_untouched():
    seen = _probe(PROBE)
    assert seen["changed"] == []
    assert seen["umask"][0] == seen["umask"][1]


def test_importing_engine_does_not_load_numpy():
    seen = _probe("import json, sys, engine; print(json.dumps({'numpy': 'numpy' in sys.modules}))")
    assert seen == {"numpy": False}


def test_configure_sets_documented_environment_and_pins_omp():
    code = (
        "import json, os, engine.runtime as r\n"
        "rep = r.configure()\n"
        "import numba, numpy as np\n"
        "from engine.ops.rmsnorm import rmsnorm_forward\n"
        "rmsnorm_forward(np.ones((64, 8), np.float32), np.ones(8, np.float32), 1e-5)\n"
        "print(json.dumps({k: os.environ.get(k) for k in ('OMP_WAIT_POLICY', 'OPENBLAS_THREAD_TIMEOUT',"
        " 'NUMBA_THREADING_LAYER', 'NUMBA_CACHE_DIR')} | {'layer': numba.threading_layer(),"
        " 'blas_env': rep.openblas_env_applied, 'tuned': rep.allocator_tuned}))"
    )
    seen = _probe(code)
    assert seen["layer"] == "omp" and seen["NUMBA_THREADING_LAYER"] == "omp"
    assert seen["OMP_WAIT_POLICY"] == "PASSIVE" and seen["OPENBLAS_THREAD_TIMEOUT"] == "4"
    assert seen["NUMBA_CACHE_DIR"] == str(runtime.default_cache_dir())
    assert seen["blas_env"] is True and seen["tuned"] is False


def test_configure_refuses_workqueue():
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    out = subprocess.run([sys.executable, "-c", "import engine.runtime as r; r.configure()"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "not thread-safe" in out.stderr


def test_missing_libgomp_is_one_clear_error(monkeypatch):
    real = runtime.importlib.import_module

    def no_omp(name, *a):
        if name.endswith("omppool"):
            raise ImportError("libgomp.so.1: cannot open shared object file")
        return real(name, *a)

    monkeypatch.setattr(runtime.importlib, "import_module", no_omp)
    with pytest.raises(runtime.RuntimeConfigError, match="apt install libgomp1"):
        runtime._pin_numba("omp", None)


def test_lazy_exports_match_type_checking_imports():
    tree = ast.parse(Path(engine.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If))  # the `if TYPE_CHECKING:` imports
    typed = {a.name: n.module for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert typed == engine._EXPORTS
    assert sorted(engine.__all__) == sorted(engine._EXPORTS)


def test_configure_thread_counts():
    code = (
        "import json, engine.runtime as r\n"
        "r.configure(threads=1, blas_threads=1)\n"
        "import numba\n"
        "from threadpoolctl import threadpool_info\n"
        "blas = [i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas']\n"
        "print(json.dumps({'numba': numba.get_num_threads(), 'blas': blas}))"
    )
    seen = _probe(code)
    assert seen["numba"] == 1 and seen["blas"] and set(seen["blas"]) == {1}


def test_a_kernel_that_cannot_be_cached_is_used_and_said_once(tmp_path):
    """With a file-size limit (or a full disk) where Numba caches its kernels, a first run ended
    with "error: File too large", naming no file: the kernels are used uncached, said once."""
    (tmp_path / "kern.py").write_text(
        "from numba import njit\n\n@njit(cache=True)\ndef f(x):\n    return x + 1\n\n"
        "@njit(cache=True)\ndef g(x):\n    return x * 2\n")
    code = ("import resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))\n"
            "import engine\nengine.configure()\n"
            f"sys.path.insert(0, {str(tmp_path)!r})\n"
            "import kern\nprint(kern.f(3), kern.g(3))\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": str(Path(engine.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.split() == ["4", "6"], done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if "could not save compiled kernels" in line]
    assert len(said) == 1 and str(tmp_path / "cache") in said[0], done.stderr[-2000:]
