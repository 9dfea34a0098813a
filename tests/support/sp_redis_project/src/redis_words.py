"""streamparse components counting words in Redis with redis-py 2.x's API, as streamparse's
redis example does: ``zincrby(name, value, amount)``, whose arguments redis-py 3 swapped
(with a newer redis-py every call fails). The spout emits ``test.words`` words once."""
import os

import redis
from streamparse import Bolt, Spout

WORDS = ["dog", "cat", "zebra", "elephant"]


class WordSpout(Spout):
    outputs = ["word"]

    def initialize(self, conf, ctx):
        self.left = int(conf["test.words"])
        self.i = 0

    def next_tuple(self):
        if self.i < self.left:
            self.emit([WORDS[self.i % len(WORDS)]])
            self.i += 1


class RedisWordCountBolt(Bolt):
    outputs = []

    def initialize(self, conf, ctx):
        self.key = conf["test.key"]
        self.redis = redis.StrictRedis(host="127.0.0.1", port=int(os.environ["REDIS_PORT"]))  # topology.environment
        self.redis.hset(self.key + ":clients", str(ctx["taskid"]), redis.__version__)

    def process(self, tup):
        word = tup.values[0]
        self.redis.zincrby(self.key, word, 10 if word == "dog" else 1)
