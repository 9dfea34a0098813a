"""The split bench's pystorm bolt, unmodified pystorm, run as a child
(``python3 pystorm_split.py``): sentence -> one tuple per word, auto-anchored and auto-acked;
pystorm's emits do not wait for task ids."""
from pystorm import Bolt


class Split(Bolt):
    def process(self, tup):
        for word in tup.values[0].split():
            self.emit([word])


if __name__ == "__main__":
    Split().run()
