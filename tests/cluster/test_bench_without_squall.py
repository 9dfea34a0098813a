"""``python bench/run.py`` from a Python without squall: every scenario listed, a clear line
instead of a traceback. (A child process: the tier for those.)"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parents[2] / "bench" / "run.py"
BARE = [sys.executable, "-S", "-E"]  # no site-packages: squall and its dependencies are not importable


def names(listing: str) -> list[str]:
    return [line.split()[0] for line in listing.splitlines() if line and not line.startswith(("note:", " "))]


def test_list_shows_every_scenario_and_says_what_is_missing(tmp_path: Path) -> None:
    full = subprocess.run([sys.executable, str(RUN), "--list"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    bare = subprocess.run([*BARE, str(RUN), "--list"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert full.returncode == bare.returncode == 0, bare.stderr
    assert len(names(full.stdout)) >= 12 and names(bare.stdout) == names(full.stdout)
    assert "note: this Python" in bare.stdout and "cannot import squall" in bare.stdout
    assert "note:" not in full.stdout


def test_running_a_scenario_without_squall_says_so(tmp_path: Path) -> None:
    out = subprocess.run([*BARE, str(RUN), "local-wordcount"], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert out.returncode == 2
    assert "cannot import squall" in out.stderr and ".venv/bin/python bench/run.py" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout
