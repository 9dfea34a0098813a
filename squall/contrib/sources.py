"""What a backfill reads a spout's input from, when Spark's Python workers read it themselves:
the ``BackfillSource`` protocol and the registry of ``spark-run --input SPOUT=SCHEME:...``
schemes.

A source is prepared once on the driver (``prepare_source``: list files, ask a broker for
offset ranges, check the spout's fields) into a ``PreparedSource``, which is shipped to the
workers: it cuts itself into parts (at most ``max_width``, None: any number) and each
worker reads its part into the spout stream's value lists, passing what it cannot use to
``malformed`` (counted and listed in the run's result, as a live spout reports it).

``squall.spark`` runs any source; a module that defines one registers its scheme here
(``SOURCES.register``) and is named in ``SOURCES.providers``. Files (``FileInput``) need no
scheme: a path or a URI with ``//`` is read as files.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from squall.errors import SquallError
from squall.registry import Registry


class BackfillError(SquallError, ValueError):
    """A backfill that cannot run as asked (its plan, an input, a sink), naming the problem."""


Malformed = Callable[[str], None]


class PreparedSource(Protocol):
    """A source as the workers get it (pickled with the plan)."""

    @property
    def max_width(self) -> int | None:
        """The most parts it can be cut into; None: any number."""

    def cut(self, width: int) -> list[Any]:
        """``width`` parts, each what ``read`` is given in one partition."""

    def read(self, part: Any, malformed: Malformed) -> Iterator[list]:
        """The value lists of one part, in the spout stream's fields."""


@runtime_checkable
class BackfillSource(Protocol):
    """A spout stream's input as ``squall.spark.run`` takes it (``inputs={key: source}``)."""

    def prepare_source(self, key: str, fields: list[str], spout: Any, conf: Mapping[str, Any]) -> PreparedSource:
        """On the driver: what the workers read, for the input ``key`` of a spout stream with
        these ``fields`` (``spout``: the live spout, whose settings it may follow; ``conf``:
        the run's configuration). ValueError (BackfillError) naming the problem."""


@dataclass(frozen=True)
class SourceScheme:
    """``spark-run --input SPOUT=<scheme>:...``: ``parse`` makes the source of the whole
    text (BackfillError naming what is wrong with it); ``example`` is one it takes."""

    scheme: str
    parse: Callable[[str], BackfillSource]
    doc: str
    example: str


SOURCES: Registry[SourceScheme] = Registry("backfill input scheme", providers=("squall.contrib.kafka.spark",))


def scheme_of(text: str) -> SourceScheme | None:
    """The registered scheme ``text`` is written in (``kafka:orders?from=earliest``), or
    None: a path, or a URI (``s3://...``) read as files."""
    head, sep, rest = text.partition(":")
    if not sep or not head or rest.startswith("//"):
        return None
    return SOURCES.find(head)
