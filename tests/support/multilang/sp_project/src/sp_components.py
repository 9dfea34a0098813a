"""streamparse components of the test project: a finite reliable word spout and a counter."""
from streamparse import Bolt, ReliableSpout

WORDS = ["dog", "cat", "zebra", "elephant", "ant", "bee", "cow"]


class Words(ReliableSpout):
    outputs = ["word"]

    def initialize(self, conf, ctx):
        self.n = int(conf.get("test.words", 600))
        self.i = 0

    def next_tuple(self):
        if self.i < self.n:
            self.emit([WORDS[(self.i * 3) % len(WORDS)]], tup_id=str(self.i))
            self.i += 1


class Count(Bolt):
    outputs = ["word", "count"]

    def initialize(self, conf, ctx):
        self.counts = {}

    def process(self, tup):
        word = tup.values.word
        self.counts[word] = self.counts.get(word, 0) + 1
        self.emit([word, self.counts[word]])
