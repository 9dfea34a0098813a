"""A process whose stdout and stderr are captured into its rotating log (as a worker's are): what
it prints, writes raw to fd 2 and its last words all land in the rotated files, nothing escapes."""
import subprocess
import sys

CAPTURE = """
import os, sys
from squall.rotating_log import RotatingLogFile
log = RotatingLogFile(sys.argv[1], max_bytes=2000, backups=3, capture_std=True)
for i in range(1000):
    print(f"printed {i:04d}")
os.write(2, b"raw stderr line\\n")
raise SystemExit("last words")
"""


def test_captured_stdout_and_stderr_rotate_with_the_log(tmp_path):
    path = tmp_path / "worker.log"
    res = subprocess.run([sys.executable, "-c", CAPTURE, str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and res.stdout == "" and res.stderr == ""  # nothing escaped the file
    files = sorted(tmp_path.iterdir())
    assert [p.name for p in files] == ["worker.log", "worker.log.1", "worker.log.2", "worker.log.3"]
    assert all(p.stat().st_size <= 2000 + 64 for p in files)
    text = "".join((tmp_path / n).read_text() for n in ("worker.log.3", "worker.log.2", "worker.log.1", "worker.log"))
    printed = [line for line in text.splitlines() if line.startswith("printed")]
    assert printed == [f"printed {i:04d}" for i in range(1000 - len(printed), 1000)]  # newest kept, in order
    assert text.endswith("raw stderr line\nlast words\n")
