"""Word count in Redis, laid out as streamparse's redis example: its virtualenvs/ file pins
redis==2.10.1."""
from redis_words import RedisWordCountBolt, WordSpout
from streamparse import Topology


class WordCountRedis(Topology):
    word_spout = WordSpout.spec()
    count_bolt = RedisWordCountBolt.spec(inputs=[word_spout], par=2)
