"""pystorm components the multilang tests run unmodified: through Storm's multilang protocol
(``streamparse_run pystorm_components.Name``, from this folder) and in-process."""
from pystorm import BatchingBolt, Bolt, ReliableSpout, Spout


class Upper(Bolt):
    """word -> (WORD, length); pystorm's auto-anchor and auto-ack."""

    def process(self, tup):
        word = tup.values[0]
        self.emit([word.upper(), len(word)])


class Logs(Bolt):
    """Logs each word it sees through ``self.logger`` and passes it on with its task id."""

    def process(self, tup):
        self.logger.info("saw %s", tup.values[0])
        self.emit([tup.values[0], self.task_id])


class Echo(Bolt):
    """Emits the values it read, as it read them (pystorm's own decoding and encoding)."""

    def process(self, tup):
        self.emit(list(tup.values))


class Splitter(Bolt):
    """sentence -> one tuple per word on "words", the sentence length on "lengths"; asks
    for task ids (need_task_ids) and records that it got a list back."""

    def process(self, tup):
        sentence = tup.values.sentence if hasattr(tup.values, "sentence") else tup.values[0]
        for word in sentence.split():
            tasks = self.emit([word], stream="words", need_task_ids=True)
            if not isinstance(tasks, list) or not tasks:
                raise RuntimeError(f"need_task_ids gave {tasks!r}")
        self.emit([len(sentence.split())], stream="lengths")
        self.log(f"split {len(sentence.split())} words", level="debug")


class Fails(Bolt):
    """Fails words starting with "x" (pystorm's explicit fail), emits the others."""

    auto_ack = False

    def process(self, tup):
        if tup.values[0].startswith("x"):
            self.fail(tup)
        else:
            self.emit([tup.values[0]])
            self.ack(tup)


class Raises(Bolt):
    """Raises on "boom": pystorm reports, fails the tuple and exits; its replacement must
    see every other word once more (its count restarts)."""

    def initialize(self, conf, ctx):
        self.seen = 0

    def process(self, tup):
        if tup.values[0] == "boom":
            raise ValueError("boom!")
        self.seen += 1
        self.emit([tup.values[0], self.seen])


class Batches(BatchingBolt):
    """Groups words by first letter between tick tuples (ticks_between_batches = 1)."""

    ticks_between_batches = 1

    def group_key(self, tup):
        return tup.values[0][0]

    def process_batch(self, key, tups):
        self.emit([key, len(tups)])


class Counter(Bolt):
    """word -> (word, running count) for its share of a fields grouping."""

    def initialize(self, conf, ctx):
        self.counts = {}

    def process(self, tup):
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.emit([word, self.counts[word]])


WORDS = ["dog", "cat", "zebra", "elephant", "ant", "bee"]


class FiniteWords(ReliableSpout):
    """Emits word i for i < topology conf "test.words" (default 300) with id str(i), once;
    ReliableSpout replays failed ids."""

    def initialize(self, conf, ctx):
        self.n = int(conf.get("test.words", 300))
        self.i = 0

    def next_tuple(self):
        if self.i < self.n:
            self.emit([WORDS[self.i % len(WORDS)]], tup_id=str(self.i))
            self.i += 1


class Activations(Spout):
    """Emits nothing; logs activate/deactivate so the worker log shows them."""

    def activate(self):
        self.log("activated")

    def deactivate(self):
        self.log("deactivated")

    def next_tuple(self):
        pass


class Metered(Bolt):
    """Counts words and their letters with Storm's ``metrics`` command (a shell metric per
    name); the first word also sends a count that is not an integer, which is refused."""

    def initialize(self, conf, ctx):
        self.first = True

    def process(self, tup):
        word = tup.values[0]
        if self.first:
            self.first = False
            self.send_message({"command": "metrics", "name": "words", "params": "one"})
        self.send_message({"command": "metrics", "name": "words", "params": 1})
        self.send_message({"command": "metrics", "name": "letters", "params": len(word)})
        self.emit([word])
