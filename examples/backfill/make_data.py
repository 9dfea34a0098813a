"""Write example inputs: ``python make_data.py DIR [--lines N] [--orders N] [--seed S]``.

words.jsonl: N lines of 8-12 words drawn from a fixed vocabulary with a skewed
(Zipf-like) distribution; users.jsonl and orders.jsonl: users in a few countries and
orders with integer amounts (cents), every order's user present. The same seed gives
the same files.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

VOCAB = ("the storm bolt spout tuple stream grouping field shuffle worker task executor nimbus "
         "supervisor zookeeper topology ack fail replay anchor batch spark backfill window tick "
         "partition hash count split join sink parquet file roll rename durable offset history "
         "month day hour minute second record row column schema type value key node port slot "
         "queue buffer flush latency throughput backpressure timeout message acker ledger edge "
         "root tree complete pending spill memory disk network socket frame version heartbeat").split()
COUNTRIES = ["de", "fr", "jp", "br", "us", "in"]


def words(path: Path, lines: int, rng: random.Random) -> int:
    weights = [1.0 / (i + 1) for i in range(len(VOCAB))]
    total = 0
    with open(path, "w", encoding="utf-8") as fh:
        for _ in range(lines):
            line = rng.choices(VOCAB, weights, k=rng.randint(8, 12))
            total += len(line)
            fh.write(json.dumps({"line": " ".join(line).capitalize() + "."}) + "\n")
    return total


def orders(folder: Path, n_orders: int, rng: random.Random, n_users: int = 60) -> None:
    users = [f"u{i:03d}" for i in range(n_users)]
    with open(folder / "users.jsonl", "w", encoding="utf-8") as fh:
        for u in users:
            fh.write(json.dumps({"user": u, "country": rng.choice(COUNTRIES)}) + "\n")
    with open(folder / "orders.jsonl", "w", encoding="utf-8") as fh:
        for i in range(n_orders):
            fh.write(json.dumps({"order_id": i, "user": rng.choice(users),
                                 "amount": rng.randint(100, 50_000)}) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--lines", type=int, default=400)
    ap.add_argument("--orders", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    args.dir.mkdir(parents=True, exist_ok=True)
    n = words(args.dir / "words.jsonl", args.lines, rng)
    orders(args.dir, args.orders, rng)
    print(f"wrote {args.lines} lines ({n} words) and {args.orders} orders to {args.dir}")


if __name__ == "__main__":
    main()
