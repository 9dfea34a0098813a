"""Worker hooks (Storm's IWorkerHook): code that runs once per worker, at its start and at
its shutdown, around the tasks it runs.

A hook is declared on the builder and travels with the topology (pickled, like the
components)::

    class Pool(WorkerHook):
        def start(self, conf, context):
            context.set_resource("db", connect(conf["my.db.url"]))

        def shutdown(self):
            ...

    builder.add_worker_hook(Pool())

Every worker unpickles its own copy. ``start`` runs before the worker's executors are
made, so tasks find what it set with ``context.get_resource`` in ``prepare``/``open``;
``shutdown`` runs after they have stopped. A hook that raises is reported (log and
``squall errors``, under the ``__system`` component) and the worker goes on; one that
takes longer than ``topology.worker.hook.start.timeout.secs`` (30 s) or
``topology.worker.hook.shutdown.timeout.secs`` (1 s) is reported and left behind.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from squall.context import WorkerContext


class WorkerHook:
    """Storm's BaseWorkerHook: override ``start``, ``shutdown`` or both."""

    def start(self, conf: Mapping[str, Any], context: WorkerContext) -> None:
        """The worker is starting: ``conf`` is the topology's configuration, ``context``
        the worker's (its port, tasks and shared resources)."""

    def shutdown(self) -> None:
        """The worker's executors have stopped (not called when the process is killed)."""
