"""The workers' runtime is named by what is installed: byte code written beside the sources
(by any import) leaves the name alone; a changed source gives a new one."""
from __future__ import annotations

import os

from squall.daemons.supervisor.worker_runtime import install_key


def test_byte_code_written_beside_the_sources_keeps_the_runtime_and_a_changed_source_does_not(tmp_path):
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "mod.py").write_text("X = 1\n")
    before = install_key(True, [site])

    for folder in (site / "__pycache__", site / "pkg" / "__pycache__"):
        folder.mkdir()
        (folder / "mod.cpython-311.pyc").write_bytes(b"\0" * 64)
    assert install_key(True, [site]) == before

    (site / "pkg" / "mod.py").write_text("X = 22\n")
    changed = install_key(True, [site])
    assert changed != before
    os.utime(site / "pkg" / "mod.py", ns=(1, 1))
    assert install_key(True, [site]) != changed  # a new modification time alone is a new runtime
    assert install_key(False, [site]) != install_key(True, [site])
