"""The engine is headless and the app uses only the engine's public API."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_engine_never_imports_qt_or_app():
    for f in (ROOT / "engine").rglob("*.py"):
        bad = {n for n in _imports(f) if n.split(".")[0] in ("PySide6", "pyqtgraph", "app")}
        assert not bad, f"{f}: {bad}"
    out = subprocess.run([sys.executable, "-c", "import sys, engine, engine.gpu; "
                          "print(any(m.startswith('PySide6') for m in sys.modules))"],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


def test_app_uses_only_the_public_engine_api():
    """No app file imports an engine submodule, numba or wgpu, and every ``engine.X`` it reads
    is one of the names ``engine.__all__`` declares (a submodule loaded by another import is
    reachable as ``engine.runformat``, and a private name as ``engine._jit``: both passed when
    only the imports were checked)."""
    import engine

    public = set(engine.__all__)
    reached = []
    for f in (ROOT / "app").rglob("*.py"):
        for name in _imports(f):
            assert not name.startswith("engine."), f"{f} imports {name}; use `import engine`"
            assert name.split(".")[0] not in ("numba", "wgpu"), f"{f} imports {name}"
        reached += [f"{f.name}:{n.lineno} engine.{n.attr}" for n in ast.walk(ast.parse(f.read_text()))
                    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                    and n.value.id == "engine" and n.attr not in public]
    assert not reached, reached


def test_the_app_names_no_run_folder_file():
    """The run folder's layout is engine.runformat's (it says so: every file name lives there):
    the app had "run.json" and "snapshots" of its own, which would drift with the format."""
    from engine import runformat as rf

    layout = {rf.RUN_JSON, rf.SNAPSHOTS, rf.LATEST, rf.BEST, rf.STATUS, rf.METRICS, rf.DATA,
              "samples.jsonl", "tb", "run.lock", "trainer.json", "manifest.json"}
    found = []
    for f in (ROOT / "app").rglob("*.py"):
        tree = ast.parse(f.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
                and n.body and isinstance(n.body[0], ast.Expr)}
        found += [f"{f.name}:{n.lineno} {n.value!r}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str)
                  and id(n) not in docs and n.value in layout]
    assert not found, found
