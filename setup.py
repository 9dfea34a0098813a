"""Finds squall's packages and compiles the runtime's hot modules with Cython, when it can.

The packages: every package under the folders that pyproject.toml's package-dir maps
(squall/, daemons/ as squall.daemons, messaging/ as squall.messaging, conf/ as squall.conf),
found rather than listed, so that a new package cannot be left out of the wheel (pyproject
cannot say "find under this folder, install under that name"). Everything else about the
package is in pyproject.toml. Cython is a build requirement only
(pyproject.toml's [build-system]); the extension modules are optional: where the machine has
no C compiler, or SQUALL_PURE=1 is set for the install, squall installs as plain Python.
The generated C goes to a temporary directory, so neither an install nor an editable
install leaves build files in the working tree. SQUALL_BUILD_OPT (default -O2) is the C
compiler's optimisation level: the suite builds its wheel and image at -O0, a seventh of the
compile's CPU, to test what the build makes, not how fast it runs.
"""
from __future__ import annotations

import os
import runpy
import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Extension, find_namespace_packages, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
compiled = runpy.run_path(str(HERE / "squall" / "compiled.py"))

# Python semantics throughout (no C division, no bounds-check shortcuts); annotations stay
# hints, as in the .py files, instead of becoming C types that refuse other values.
DIRECTIVES = {"language_level": 3, "annotation_typing": False, "binding": True, "embedsignature": False}
OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os")


def opt_level() -> str:
    """SQUALL_BUILD_OPT, checked: a typo must not pass to the compiler as a flag."""
    level = os.environ.get("SQUALL_BUILD_OPT", "-O2")
    if level not in OPT_LEVELS:
        raise SystemExit(f"SQUALL_BUILD_OPT={level!r} is not an optimisation level: "
                         f"give one of {', '.join(OPT_LEVELS)}")
    return level


class OptionalCythonBuildExt(build_ext):
    """Cythonizes and compiles each module if it can; one that fails stays plain Python.
    The C files and objects go to a temporary directory, removed after the build."""

    def run(self) -> None:
        with tempfile.TemporaryDirectory(prefix="squall-build-") as tmp:
            self._tmp = tmp
            self.build_temp = tmp  # an editable install's objects would land in ./build
            super().run()

    def build_extensions(self) -> None:
        self.check_extensions_list(self.extensions)
        # One compiler process per core, as build_ext's own --parallel does.
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            built = list(pool.map(self._built, self.extensions))
        for ext, ok in zip(list(self.extensions), built):
            if not ok:
                self.extensions.remove(ext)  # nothing to copy beside its source

    def _built(self, ext: Extension) -> bool:
        sources = ext.sources
        try:
            from Cython.Build import cythonize

            ext.sources = cythonize([Extension(ext.name, sources)], build_dir=self._tmp, quiet=True,
                                    compiler_directives=DIRECTIVES)[0].sources
            self.build_extension(ext)
            return True
        except Exception as exc:  # no Cython, no compiler, a compiler error: pure Python
            print(f"squall: {ext.name} not compiled ({exc}); it runs as plain Python", file=sys.stderr)
            return False
        finally:
            ext.sources = sources  # setup() lists sources relative to this directory


def packages() -> list[str]:
    """Each package-dir entry and every package found under its folder, named as installed."""
    with open(HERE / "pyproject.toml", "rb") as fh:
        folders = tomllib.load(fh)["tool"]["setuptools"]["package-dir"]
    found = set(folders)
    for name, folder in folders.items():
        # Every directory, as setuptools counts them: the web UI's folder too, whose files
        # ship as package data.
        found.update(f"{name}.{sub}" for sub in find_namespace_packages(str(HERE / folder), exclude=["*__pycache__*"]))
    return sorted(found)


def extensions() -> list[Extension]:
    if compiled["pure_requested"]():
        return []
    # -g0: no debug information (a quarter of the compile time, most of the module's size).
    return [Extension(name, [source], extra_compile_args=[opt_level(), "-w", "-g0"])
            for name, source in compiled["MODULES"].items()]


os.chdir(HERE)
setup(packages=packages(), ext_modules=extensions(), cmdclass={"build_ext": OptionalCythonBuildExt})
