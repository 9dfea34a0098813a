"""Storm's Stream API in Python: a pipeline of steps (map, filter, keys, windows, joins,
state) that builds an ordinary topology.

    from squall.streams import StreamBuilder

    builder = StreamBuilder()
    (builder.new_stream(SentenceSpout(), name="sentences")
        .flat_map(str.split)
        .map_to_pair(lambda word: (word, 1))
        .count_by_key()
        .print())
    topology = builder.build()

See docs/guide/streams.md.
"""
from squall.streams.aggregators import Aggregator, Fold
from squall.streams.builder import StreamBuilder
from squall.streams.steps import PipelineError
from squall.streams.stream import PairStream, Stream, StreamState
from squall.streams.windows import Count, Duration, SlidingWindows, TumblingWindows, Window

__all__ = [
    "Aggregator", "Count", "Duration", "Fold", "PairStream", "PipelineError", "SlidingWindows", "Stream",
    "StreamBuilder", "StreamState", "TumblingWindows", "Window",
]
