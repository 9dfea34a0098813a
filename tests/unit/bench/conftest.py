"""The bench tools' plain-code parts are importable here as bench/ and bench/topologies/ put them."""
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench"
for folder in (BENCH, BENCH / "topologies"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
