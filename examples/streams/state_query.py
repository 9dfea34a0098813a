"""storm-starter's StateQueryExample: word counts kept in checkpointed state
(``update_state_by_key``, exactly once), and a second stream of words that looks their
counts up (``state_query``).

    squall run examples/streams/state_query.py --local --duration 5
"""
from sources import RandomSentenceSpout, WordSpout

from squall.streams import StreamBuilder

CONFIG = {"topology.max.spout.pending": 500, "topology.state.checkpoint.interval.ms": 500}


def topology():
    builder = StreamBuilder()
    counts = (builder.new_stream(RandomSentenceSpout(), name="sentences")
              .flat_map(str.split)
              .map_to_pair(lambda word: (word, 1))
              .update_state_by_key(0, lambda count, one: count + one, name="word-counts"))
    (builder.new_stream(WordSpout(rate=2), name="queries")
        .state_query(counts)
        .print(name="answers"))
    return builder.build()
