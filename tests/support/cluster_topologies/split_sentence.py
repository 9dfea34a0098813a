"""A pystorm bolt, run by Storm's command line ``python3 split_sentence.py`` from the code
directory: (sid, sentence) -> (sid, position, word) for each word, auto-anchored and acked."""
from pystorm import Bolt


class SplitSentence(Bolt):
    def process(self, tup):
        sid, sentence = tup.values
        for i, word in enumerate(sentence.split()):
            self.emit([sid, i, word])


if __name__ == "__main__":
    SplitSentence().run()
