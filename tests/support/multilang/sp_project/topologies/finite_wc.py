"""A finite word count written with streamparse's DSL, as `sparse quickstart` lays it out."""
from sp_components import Count, Words
from streamparse import Grouping, Topology


class FiniteWordCount(Topology):
    config = {"test.words": 600, "topology.worker.childopts": "-Xmx1g"}
    words = Words.spec()
    count = Count.spec(inputs={words: Grouping.fields("word")}, par=2)
