"""The layers hold (docs/internals.md, "Layers"): import-linter's contracts in pyproject.toml
pass, and no module imports squall inside a function, where such an import would hide a
cycle or an upward dependency from both Python and the contracts' reader."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Where each installed package's sources are in the repository ([tool.setuptools.package-dir]).
SOURCES = {"squall": REPO / "squall", "squall.daemons": REPO / "daemons", "squall.messaging": REPO / "messaging"}

# (module, imported module) -> why the import sits inside a function. Every entry is a debt
# or a deliberate lazy import; an entry whose import is gone fails the test, so the list
# never outlives its reasons. Imports of non-squall packages (pyspark, pyarrow) are not
# checked here: a heavy optional dependency may be imported where it is used.
ALLOWED: dict[tuple[str, str], str] = {
    # None today: the facade imports its names with importlib on first use, and `squall`'s
    # commands load their modules when they run (squall/cli/__init__.py).
}


def test_import_contracts_are_kept():
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "lint.py"), "imports"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"lint-imports failed:\n{result.stdout}\n{result.stderr}"


def _module_name(package: str, root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(parts[:len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
    if base == "squall" or node.module is None:  # `from squall import config`: the names are modules
        return [f"{base}.{alias.name}" for alias in node.names]
    return [base]


def function_level_imports(sources: dict[str, Path] = SOURCES, repo: Path = REPO) -> dict[tuple[str, str], list[str]]:
    """(module, imported squall module) -> where (file:line) for every import of squall that
    sits inside a function body (methods and nested functions included)."""
    found: dict[tuple[str, str], list[str]] = {}
    for package, root in sources.items():
        for path in sorted(root.rglob("*.py")):
            module = _module_name(package, root, path)
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for func in ast.walk(tree):
                if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    continue
                for node in ast.walk(func):
                    if not isinstance(node, (ast.Import, ast.ImportFrom)):
                        continue
                    for name in _imported(node, module, path.name == "__init__.py"):
                        if name == "squall" or name.startswith("squall."):
                            where = f"{path.relative_to(repo)}:{node.lineno}"
                            found.setdefault((module, name), [])
                            if where not in found[(module, name)]:  # nested functions walk twice
                                found[(module, name)].append(where)
    return found


def test_no_squall_import_inside_a_function_beyond_the_allowlist():
    found = function_level_imports()
    unexpected = {k: v for k, v in found.items() if k not in ALLOWED}
    assert not unexpected, (
        "imports of squall inside functions (hoist them to the module's top; a cycle means code "
        "sits in the wrong layer, see docs/internals.md):\n"
        + "\n".join(f"  {where}: {module} imports {name}" for (module, name), wheres in sorted(unexpected.items())
                    for where in wheres))
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"allowlisted imports that are gone, remove them from ALLOWED: {stale}"


def test_the_check_sees_an_import_inside_a_method(tmp_path):
    pkg = tmp_path / "squall"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("import os\n\nclass A:\n    def f(self):\n        from . import high\n"
                                "        import squall.top as t\n        return lambda: __import__('x')\n")
    assert function_level_imports({"squall": pkg}, tmp_path) == {("squall.low", "squall.high"): ["squall/low.py:5"],
                                        ("squall.low", "squall.top"): ["squall/low.py:6"]}
