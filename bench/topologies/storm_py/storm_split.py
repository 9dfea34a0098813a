"""The split bench's Storm bolt: Storm's own ``storm.py`` adapter, unmodified (next to this
file), run as a child (``python3 storm_py/storm_split.py``): sentence -> one tuple per word.
A ``BasicBolt``, as Storm's word-count example's splitsentence.py: each emit waits for its
task ids, and the tuple is acked after its words."""
import storm


class Split(storm.BasicBolt):
    def process(self, tup):
        for word in tup.values[0].split():
            storm.emit([word])


if __name__ == "__main__":
    Split().run()
