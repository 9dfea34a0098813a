"""The multilang bench's bolt: a pystorm Bolt, unmodified, run in-process or as a child
(``python3 pystorm_upper.py``): word -> (WORD, length), auto-anchored and auto-acked."""
from pystorm import Bolt


class Upper(Bolt):
    def process(self, tup):
        word = tup.values[0]
        self.emit([word.upper(), len(word)])


if __name__ == "__main__":
    Upper().run()
