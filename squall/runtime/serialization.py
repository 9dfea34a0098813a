"""Tuple batches to bytes and back (msgpack), with registered serializers for user types.

A payload holds one batch for one target task, column-wise: a list of
``[source_task, stream, [values, ...], [ids, ...] | None]`` groups, one per run of tuples
from the same source task and stream (usually the whole batch), so a batch costs one
C-level pack call and no per-tuple wrapper lists. Types msgpack does not know must be
registered in ``topology.serializers``; anything else is an error naming the type.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import msgpack

from squall.tuple import Fields, Source, Tuple, anchored_tuple


class SerializationError(ValueError):
    pass


def _load(path: str) -> Any:
    module, _, name = path.rpartition(".")
    if not module:
        raise SerializationError(f"{path!r} is not a dotted module.Name path")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise SerializationError(f"cannot load {path!r}: {exc}") from None


class TupleSerializer:
    """Packs and unpacks tuple batches; one per worker."""

    def __init__(self, serializers: Mapping[str, str], task_to_component: Mapping[int, str],
                 stream_fields: Callable[[str, str], Fields]) -> None:
        self._by_type: dict[type, tuple[int, Any]] = {}
        self._by_code: dict[int, Any] = {}
        for code, (cls_path, ser_path) in enumerate(sorted(serializers.items()), start=1):
            cls, ser = _load(cls_path), _load(ser_path)
            ser = ser() if isinstance(ser, type) else ser
            self._by_type[cls] = (code, ser)
            self._by_code[code] = ser
        self._task_to_component = task_to_component
        self._stream_fields = stream_fields
        self._sources: dict[tuple[int, str], Source] = {}
        self._packer = msgpack.Packer(use_bin_type=True, default=self._default)

    def _default(self, obj: Any) -> Any:
        if isinstance(obj, tuple):
            return list(obj)
        entry = self._by_type.get(type(obj))
        if entry is None:
            raise SerializationError(
                f"cannot serialize a value of type {type(obj).__module__}.{type(obj).__qualname__}; "
                "register it in topology.serializers")
        code, ser = entry
        return msgpack.ExtType(code, ser.serialize(obj))

    def _ext(self, code: int, data: bytes) -> Any:
        ser = self._by_code.get(code)
        if ser is None:
            raise SerializationError(f"no serializer registered for extension type {code}")
        return ser.deserialize(data)

    def dumps(self, tuples: list[Tuple]) -> bytes:
        groups: list[list] = []
        src = None
        for t in tuples:
            if t.source is not src:
                src = t.source
                values: list = []
                ids: list = []
                groups.append([src.task, src.stream, values, ids])
            values.append(t.values)
            ids.append(t.ids)
        for g in groups:
            if not any(g[3]):  # unanchored: no ids column at all
                g[3] = None
        return self._packer.pack(groups)

    def loads(self, payload: bytes) -> list[Tuple]:
        """Decode a payload; raises SerializationError on anything malformed."""
        try:
            groups = msgpack.unpackb(payload, raw=False, strict_map_key=False, ext_hook=self._ext)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(f"undecodable tuple payload: {exc}") from None
        if not isinstance(groups, list):
            raise SerializationError("tuple payload is not a list")
        out: list[Tuple] = []
        sources = self._sources
        for group in groups:
            try:
                task, stream, values, ids = group
                src = sources.get((task, stream))
                if src is None:
                    src = self._source(task, stream)
                n = len(src.fields)
                if ids is None:
                    ids = [None] * len(values)
                elif len(ids) != len(values):
                    raise ValueError("ids and values differ in length")
                for v, i in zip(values, ids):
                    if type(v) is not list or len(v) != n:
                        what = f"has {len(v)} values" if type(v) is list else f"is {v!r:.40}, not a list"
                        raise SerializationError(f"tuple from task {task} on {stream!r} {what}, expected {n} values")
                    out.append(anchored_tuple(v, src, i))
            except (TypeError, ValueError) as exc:
                if isinstance(exc, SerializationError):
                    raise
                raise SerializationError(f"malformed tuple entry {group!r:.80}: {exc}") from None
        return out

    def _source(self, task: int, stream: str) -> Source:
        component = self._task_to_component.get(task)
        if component is None:
            raise SerializationError(f"tuple from unknown task {task!r}")
        try:
            fields = self._stream_fields(component, stream)
        except KeyError:
            raise SerializationError(f"component {component!r} has no stream {stream!r}") from None
        src = self._sources[(task, stream)] = Source(component, task, stream, fields)
        return src
