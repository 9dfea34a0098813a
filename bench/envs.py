"""Which Python runs what in the comparison, and setting up the bench-only environment.

squall's side runs in the repository's ``.venv`` (what ``scripts/quickstart.sh`` and
``scripts/test.sh`` make, ``SQUALL_VENV`` elsewhere), so its figures are those of the
install users get. The peers (Bytewax, the plain loop) and py-spy live in
``bench/peers/.venv`` (``SQUALL_BENCH_VENV`` elsewhere), made from
``bench/peers/requirements.txt`` when missing or when that file changes: nothing of
theirs enters squall's environment, nothing of squall's enters theirs.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "bench" / "peers"
REQUIREMENTS = PEERS / "requirements.txt"
REPO_VENV = Path(os.environ.get("SQUALL_VENV", ROOT / ".venv"))
BENCH_VENV = Path(os.environ.get("SQUALL_BENCH_VENV", PEERS / ".venv"))
PIP_TIMEOUT = 900.0


class SetupError(RuntimeError):
    """Something the comparison needs is missing; the text says what to run."""


def use_repo_venv() -> None:
    """Re-run this script with the repository's .venv Python unless it already runs there."""
    if Path(sys.prefix).resolve() == REPO_VENV.resolve():
        return
    python = REPO_VENV / "bin" / "python"
    if python.exists():
        os.execv(str(python), [str(python), *sys.argv])
    raise SetupError(f"squall's environment {REPO_VENV} does not exist: run `bash scripts/quickstart.sh` "
                     f"(or `bash scripts/test.sh --collect-only -q`) in {ROOT} first, then "
                     f"`python {' '.join(sys.argv)}` again")


def check_squall() -> None:
    try:
        import zmq  # noqa: F401

        import squall  # noqa: F401
    except ImportError as exc:
        raise SetupError(f"{sys.executable} cannot import {exc.name}: run `bash scripts/quickstart.sh` in {ROOT} "
                         "to (re)install squall into .venv") from None


def peers_python(say=print) -> Path:
    """The bench environment's Python, set up first when missing or out of date."""
    python = BENCH_VENV / "bin" / "python"
    stamp = BENCH_VENV / ".requirements.sha256"
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text().strip() == want:
        return python
    log = BENCH_VENV / "install.log"
    say(f"setting up the bench environment {BENCH_VENV} from {REQUIREMENTS.relative_to(ROOT)} (log: {log}) ...")
    if not python.exists():
        made = subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], capture_output=True, text=True)
        if made.returncode != 0:
            raise SetupError(f"could not create {BENCH_VENV}: {made.stderr.strip() or made.stdout.strip()}")
    with open(log, "w") as out:
        try:
            pip = subprocess.run([str(python), "-m", "pip", "install", "-r", str(REQUIREMENTS)],
                                 stdout=out, stderr=subprocess.STDOUT, timeout=PIP_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise SetupError(f"pip did not finish installing {REQUIREMENTS} in {PIP_TIMEOUT:.0f} s; "
                             f"see {log}") from None
    if pip.returncode != 0:
        tail = "\n  ".join(log.read_text(errors="replace").strip().splitlines()[-5:])
        raise SetupError(f"pip could not install {REQUIREMENTS} (the bench needs PyPI):\n  {tail}\n"
                         f"full log: {log}; remove {BENCH_VENV} to start over")
    stamp.write_text(want + "\n")
    return python


def py_spy(say=print) -> Path:
    peers_python(say)
    return BENCH_VENV / "bin" / "py-spy"
