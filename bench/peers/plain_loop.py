"""The ceiling for Python user code: split and count the word-count sentences in a plain loop.

    python bench/peers/plain_loop.py [--duration S] [--warmup S]
"""
from __future__ import annotations

from workload import Window, drawn, parse_args


def main() -> None:
    args = parse_args(__doc__).parse_args()
    lines = drawn()
    window = Window(args.warmup, args.duration)
    counts: dict[str, int] = {}
    get = counts.get
    running = True
    while running:
        words = 0
        for sentence in lines:  # one block, then a look at the clock
            parts = sentence.split()
            words += len(parts)
            for word in parts:
                counts[word] = get(word, 0) + 1
        running = window.add(words)
    window.report("plain-loop", distinct_words=len(counts))


if __name__ == "__main__":
    main()
