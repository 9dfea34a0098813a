"""Kafka in and out (the ``kafka`` extra: confluent-kafka): ``KafkaSpout`` commits only what
is done, ``CheckpointedKafkaSpout`` keeps its offsets in checkpointed state, ``KafkaBolt``
acks a tuple when the broker has its record, ``TransactionalKafkaBolt`` writes exactly once
through Kafka transactions tied to checkpoints, and ``KafkaInput`` backfills a topic on
Spark through the same translator. confluent-kafka is imported when a component opens,
so topologies build (and nimbus validates them) without it."""
from squall.contrib.kafka.bolt import FieldMapper, FieldTopicSelector, KafkaBolt, TopicSelector
from squall.contrib.kafka.checkpointed import CheckpointedKafkaSpout
from squall.contrib.kafka.client import KafkaConfigError
from squall.contrib.kafka.settings import EARLIEST, LATEST, UNCOMMITTED_EARLIEST, UNCOMMITTED_LATEST
from squall.contrib.kafka.spout import KafkaSpout
from squall.contrib.kafka.transactional import TransactionalKafkaBolt
from squall.contrib.kafka.translator import (
    FAILED_FIELDS,
    FAILED_STREAM,
    FunctionTranslator,
    JsonTranslator,
    Record,
    RecordTranslator,
    StringTranslator,
)

__all__ = [
    "CheckpointedKafkaSpout", "EARLIEST", "FAILED_FIELDS", "FAILED_STREAM", "FieldMapper", "FieldTopicSelector",
    "FunctionTranslator", "JsonTranslator", "KafkaBolt", "KafkaConfigError", "KafkaSpout", "LATEST", "Record",
    "RecordTranslator", "StringTranslator", "TopicSelector", "TransactionalKafkaBolt", "UNCOMMITTED_EARLIEST",
    "UNCOMMITTED_LATEST",
]
