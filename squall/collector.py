"""What spouts and bolts may call on the collector they are given (Storm's
``SpoutOutputCollector`` and ``OutputCollector``). The runtime supplies its own classes;
these protocols name only the calls, so user code and its type hints need no runtime import."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from squall.tuple import Tuple


@runtime_checkable
class SpoutOutputCollector(Protocol):
    """Given to ``Spout.open``. A ``msg_id`` makes the tuple reliable (when ackers run):
    the spout's ``ack`` or ``fail`` is called with it once its tree completes or fails."""

    def emit(self, values: Sequence[Any], stream: str = "default", msg_id: Any = None) -> tuple[int, ...]:
        """Emit ``values`` on ``stream``; returns the ids of the tasks it was sent to."""
        ...

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default",
                    msg_id: Any = None) -> tuple[int, ...]:
        """Emit ``values`` to ``task`` on a stream declared direct."""
        ...

    def report_error(self, error: BaseException | str) -> None:
        """Record an error against this component (shown by ``squall status``)."""
        ...


@runtime_checkable
class OutputCollector(Protocol):
    """Given to ``Bolt.prepare``. Anchor emits to inputs; ack or fail every input."""

    def emit(self, values: Sequence[Any], stream: str = "default",
             anchors: Tuple | Sequence[Tuple] | None = None) -> tuple[int, ...]:
        """Emit ``values`` anchored to ``anchors``; returns the target task ids."""
        ...

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default",
                    anchors: Tuple | Sequence[Tuple] | None = None) -> tuple[int, ...]:
        """Emit ``values`` to ``task`` on a stream declared direct."""
        ...

    def ack(self, tup: Tuple) -> None:
        """This input is done."""
        ...

    def fail(self, tup: Tuple) -> None:
        """Fail the trees this input belongs to: their spouts' ``fail`` runs soon."""
        ...

    def report_error(self, error: BaseException | str) -> None:
        """Record an error against this component (shown by ``squall status``)."""
        ...
