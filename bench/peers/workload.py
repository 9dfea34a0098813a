"""What every side of the comparison processes, and how each side measures itself.

The sentences are read from ``examples/wordcount.py`` (its ``SENTENCES`` literal, parsed,
not imported: this environment has no squall), and drawn the way its spout draws them: a
block of random choices, cycled. Each side counts the words it actually processed, in a
window that opens after a warm-up, and prints one JSON object.
"""
from __future__ import annotations

import ast
import json
import random
import sys
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "wordcount.py"
DRAWN = 4099  # block size of the spout's draw (RandomSentenceSpout.open)


def sentences(path: Path = EXAMPLE) -> list[str]:
    """The ``SENTENCES`` list literal of the word-count example."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SENTENCES" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise SystemExit(f"{path} defines no SENTENCES list")


def drawn(seed: int | None = None) -> list[str]:
    return random.Random(seed).choices(sentences(), k=DRAWN)


class Window:
    """Counts words from the end of the warm-up to the end of the measured duration."""

    def __init__(self, warmup: float, duration: float) -> None:
        now = time.monotonic()
        self.open_at, self.close_at = now + warmup, now + warmup + duration
        self.words = 0
        self.start: tuple[float, int, float] | None = None  # (time, words, process CPU time)
        self.stop: tuple[float, int, float] | None = None

    def add(self, words: int) -> bool:
        """Count ``words`` just processed; False once the window has closed."""
        self.words += words
        now = time.monotonic()
        if self.start is None:
            if now >= self.open_at:
                self.start = (now, self.words, time.process_time())
        elif now >= self.close_at:
            self.stop = (now, self.words, time.process_time())
            return False
        return True

    def report(self, side: str, **extra: object) -> None:
        if self.start is None or self.stop is None:
            raise SystemExit(f"{side}: the measured window never closed")
        seconds, words = self.stop[0] - self.start[0], self.stop[1] - self.start[1]
        cpu = self.stop[2] - self.start[2]  # this process's CPU time in the window, all threads
        json.dump({"side": side, "words_per_sec": words / seconds, "words": words, "seconds": seconds,
                   "process_cpu": round(cpu / seconds, 3), "python": sys.version.split()[0], **extra}, sys.stdout)
        print()


def parse_args(doc: str):
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds (default 10)")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring (default 3)")
    return parser
