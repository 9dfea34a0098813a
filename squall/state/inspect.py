"""Reading a topology's committed state from outside it: for tools, tests, and batch runs
that start from a live topology's last checkpoint. Reads never write to the store."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from squall.model import CHECKPOINT
from squall.state.checkpoint_spout import RECORD_KEY
from squall.state.kv import decode, decode_key
from squall.state.protocol import TxRecord
from squall.state.stores import NoStoredState, namespace, open_store
from squall.values import ValueCodec


def read_record(conf: Mapping[str, Any], topology: str) -> TxRecord | None:
    """The checkpoint spout's record of ``topology`` (None: it never ran)."""
    try:
        store = open_store(conf, namespace(topology, CHECKPOINT, 0), create=False)
    except NoStoredState:
        return None
    try:
        _, entries = store.read(-1)
    finally:
        store.close()
    raw = entries.get(RECORD_KEY)
    return None if raw is None else TxRecord.from_dict(decode(raw))


def committed_state(conf: Mapping[str, Any], topology: str, component: str, index: int,
                    txid: int) -> tuple[int | None, dict[Any, Any]]:
    """(txid held, the state) of task ``index`` of ``component`` as committed at ``txid``
    (the record's ``restore_point()``); (None, {}) if it has none. A store that exists but
    cannot be read raises ``StoreError``: empty state is not a safe guess for it."""
    try:
        store = open_store(conf, namespace(topology, component, index), create=False)
    except NoStoredState:
        return None, {}
    try:
        held, entries = store.read(txid)
    finally:
        store.close()
    codec = ValueCodec(conf.get("topology.serializers") or {})
    return held, {decode_key(k, codec): decode(v, codec) for k, v in entries.items()}
