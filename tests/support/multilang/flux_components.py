"""Python components that the Flux tests name by import path."""
from squall import Bolt, CustomStreamGrouping, Spout, TopologyBuilder


class Words(Spout):
    """Emits ``words`` once each, reliably (message id = index); prefix set by a property."""

    def __init__(self, words, field="word"):
        self.words, self.field, self.prefix = list(words), field, ""

    def set_prefix(self, prefix):
        self.prefix = prefix

    def open(self, conf, context, collector):
        self.collector, self.i = collector, 0

    def next_tuple(self):
        if self.i < len(self.words):
            self.collector.emit([self.prefix + self.words[self.i]], msg_id=self.i)
            self.i += 1

    def declare_output_fields(self, declarer):
        declarer.declare([self.field])


class Tagger:
    """A plain object made in ``components`` and passed by reference."""

    def __init__(self, tag):
        self.tag = tag


class Tag(Bolt):
    def __init__(self, tagger=None):
        self.taggers = [tagger] if tagger else []
        self.suffix = ""

    def withTaggers(self, taggers):  # a Java-style config method name
        self.taggers = list(taggers)

    def execute(self, tup):
        tags = "+".join(t.tag for t in self.taggers)
        self.collector.emit([tup.values[0], tags + self.suffix], anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(["word", "tags"])


class FirstTask(CustomStreamGrouping):
    def prepare(self, context, stream, target_tasks):
        self.target = [min(target_tasks)]

    def choose_tasks(self, task_id, values):
        return self.target


class Source:
    """A topologySource: builds the topology itself."""

    def __init__(self, n):
        self.n = n

    def getTopology(self, config):
        b = TopologyBuilder()
        b.set_spout("w", Words([str(i) for i in range(self.n)]))
        b.set_bolt("t", Tag()).shuffle("w")
        return b
