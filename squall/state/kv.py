"""KeyValueState: what ``init_state(state)`` hands a stateful component.

The state lives in memory; changes since the last checkpoint are tracked, and a PREPARE
writes only those to the store (``prepare``), a COMMIT makes them the committed state
(``commit``), a ROLLBACK/INIT reloads the committed state (``restore``). Keys and values
may be anything a tuple may hold (squall.values), and come back as the same types; the
topology's registered serializers apply here too. A value changed in place must be
``put`` again to be saved.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from squall.errors import SquallError
from squall.state.stores import Store
from squall.values import PLAIN, ValueCodec

_DELETED = object()


class StateError(SquallError, RuntimeError):
    """State that cannot be saved or loaded; the message names the key or the store."""


def encode(value: Any, codec: ValueCodec = PLAIN) -> bytes:
    return codec.pack(value)


def decode(data: bytes, codec: ValueCodec = PLAIN) -> Any:
    return codec.unpack(data)


def decode_key(data: bytes, codec: ValueCodec = PLAIN) -> Any:
    # use_list=False: a key stored as a msgpack array (before tuples had a type of their
    # own) still comes back hashable, as the tuple it was
    return codec.unpack(data, use_list=False)


class KeyValueState:
    """A dict-like state saved at checkpoints. ``get``, ``put``, ``delete``, ``in``,
    ``len``, ``keys``, ``items``; the runtime calls ``prepare``, ``commit`` and ``restore``."""

    def __init__(self, store: Store, name: str = "", codec: ValueCodec = PLAIN) -> None:
        self._store = store
        self.name = name
        self._codec = codec
        self._packer = codec.packer()  # one per state: a Packer is not thread-safe
        self._dirty: dict[Any, Any] = {}
        self._set_data({})
        self.txid = 0   # the committed txid the state was last restored to or committed

    def _set_data(self, data: dict[Any, Any]) -> None:
        self._data = data
        # The dict's own method: no Python frame on the hot path.
        self.get = data.get  # type: ignore[method-assign,assignment]

    # -- the user's side -------------------------------------------------------------------
    def get(self, key: Any, default: Any = None) -> Any:
        return self._data.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        self._data[key] = value
        self._dirty[key] = value

    def delete(self, key: Any) -> None:
        if self._data.pop(key, _DELETED) is not _DELETED:
            self._dirty[key] = _DELETED

    def __contains__(self, key: Any) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def keys(self) -> Iterator[Any]:
        return iter(self._data.keys())

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(self._data.items())

    # -- the runtime's side ----------------------------------------------------------------
    def prepare(self, txid: int) -> None:
        """Save the changes since the last prepare as txid ``txid`` (not yet committed)."""
        changes: dict[bytes, bytes | None] = {}
        pack = self._packer.pack
        for key, value in self._dirty.items():
            try:
                k = pack(key)
                changes[k] = None if value is _DELETED else pack(value)
            except Exception as exc:  # a value of no known type, or a user serializer's error
                self._packer.reset()
                raise StateError(f"state {self.name}: key {key!r:.60} or its value of type "
                                 f"{type(value).__name__} cannot be stored: {exc}") from None
        self._store.prepare(txid, changes)
        self._dirty = {}

    def commit(self, txid: int) -> None:
        self._store.commit(txid)
        self.txid = txid

    def restore(self, txid: int) -> int | None:
        """Reload the state committed at ``txid``; returns the txid the store held (None:
        nothing stored yet). Unsaved changes are dropped."""
        held, items = self._store.load(txid)
        data: dict[Any, Any] = {}
        for k, v in items.items():
            try:
                data[decode_key(k, self._codec)] = decode(v, self._codec)
            except Exception as exc:  # a store another process wrote: check it
                raise StateError(f"state {self.name}: undecodable entry in the store: {exc}") from None
        self._set_data(data)
        self._dirty = {}
        self.txid = txid
        return held

    def close(self) -> None:
        self._store.close()
