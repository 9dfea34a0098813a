"""A pipeline's functions on their way to workers and Spark executors.

Lambdas and closures cannot be pickled by reference, which is how squall ships
components; cloudpickle ships them by value (functions of importable modules still go by
reference). ``Functions`` holds a bolt's functions as one cloudpickle blob, plus, in the
component's own pickle, the module globals that blob refers to: so whoever reads the
component's pickle for the modules it needs (``squall.spark.ship``) sees them, and a
worker imports them before the blob is loaded.
"""
from __future__ import annotations

import importlib
import io
import pickle
from typing import Any

import cloudpickle

from squall.streams.steps import PipelineError, Step

# Modules every worker has: never anchors.
_PROVIDED = ("squall", "cloudpickle", "builtins", "copyreg", "collections", "functools", "operator", "_operator",
             "types", "typing", "re", "math", "json", "__main__")


def check_function(step: Step, fn: Any) -> None:
    """Raise PipelineError naming ``step`` if ``fn`` cannot travel to the workers."""
    try:
        cloudpickle.dumps(fn, protocol=5)
    except Exception as exc:
        what = "function" if callable(fn) else type(fn).__name__
        raise PipelineError(step, f"its {what} cannot be pickled to run in workers ({type(exc).__name__}: "
                                  f"{exc}): it, or a value it uses, cannot be copied to another process. "
                                  "Make such values inside the function (or in a module the workers "
                                  "import), not around it") from None


class _Globals(pickle.Unpickler):
    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.found: list[tuple[str, str]] = []

    def find_class(self, module: str, name: str) -> Any:
        self.found.append((module, name))
        return super().find_class(module, name)


def _anchors(blob: bytes) -> list[Any]:
    """Module globals (functions, classes) of the user's modules that ``blob`` refers to,
    each plain-picklable by reference."""
    reader = _Globals(blob)
    reader.load()
    out = []
    for module, name in dict.fromkeys(reader.found):
        if module.split(".")[0] in _PROVIDED:
            continue
        try:
            obj: Any = importlib.import_module(module)
            for part in name.split("."):
                obj = getattr(obj, part)
            pickle.dumps(obj, protocol=5)
        except Exception:
            continue
        out.append(obj)
    return out


class Functions:
    """Functions by key (a step's id), pickled by value where they must be."""

    def __init__(self, fns: dict[Any, Any]) -> None:
        self.fns = fns

    def __getstate__(self) -> dict[str, Any]:
        blob = cloudpickle.dumps(self.fns, protocol=5)
        return {"blob": blob, "anchors": _anchors(blob)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.fns = pickle.loads(state["blob"])

    def __getitem__(self, key: Any) -> Any:
        return self.fns[key]
