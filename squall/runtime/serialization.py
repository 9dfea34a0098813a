"""Tuple batches to bytes and back (msgpack), by the rule of what a tuple may hold
(squall.values), with the types ``topology.serializers`` registers.

A payload holds one batch for one target task, column-wise: a list of
``[source_task, stream, [values, ...], ids]`` groups, one per run of tuples from the same
source task and stream (usually the whole batch), so a batch costs one C-level pack call
and no per-tuple wrapper lists. ``ids`` is None when no tuple of the group is anchored;
packed (root, edge id) pairs (squall.runtime.acker.PAIR_BYTES each, root 0 for an
unanchored tuple) when each is in one tree at most; else a list of {root: edge} maps, one
per tuple (None when unanchored), which the decoder also takes from any sender. An ack
message to an acker carries its {root: XOR} map as packed pairs too. A batch that does not encode is looked
at tuple by tuple (``unsendable``): each tuple that cannot cross gets a reason naming its
component, stream, field and the type at fault, and the others still go.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import msgpack

from squall.model import ACK_ACK
from squall.runtime import drops
from squall.runtime.admission import MAX_REASON_CHARS, ROOT_XORS, ROOTS, Admission, GroupRejected
from squall.runtime.root_table import PAIR_BYTES, pack_pairs, unpack_pairs
from squall.tuple import Fields, MultiTreeTuple, Source, TreeTuple, Tuple
from squall.values import SerializationError, ValueCodec, find_undecoded

try:
    import cython  # Cython's compile-time module; in plain Python its shadow module, if installed
except ImportError:
    from squall import compiled as cython  # cython.compiled is False

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING, PyBytes_FromStringAndSize
    from cython.cimports.squall.runtime.wire_ints import load_u64le, store_u64le
else:  # a constant in the compiled build, which cimports it (serialization.pxd)
    from squall.tuple import _new


__all__ = ["SerializationError", "TupleSerializer"]


def _is_id(v: Any) -> bool:
    """Is ``v`` a 64-bit unsigned int (a root, an edge id, an XOR)? Checked before the acker
    ledger's C integers meet it (msgpack decodes negative ints too)."""
    return type(v) is int and 0 <= v <= 0xFFFFFFFFFFFFFFFF


def _check_acker_values(shape: str, values: list) -> None:
    """Every tuple of an acker-stream group holds one batch of 64-bit unsigned ints of ``shape``
    (squall.runtime.admission; fails: a root may come with its reason, ``[root, text]``, the
    text of bounded length). Plain loops, which the compiled build turns into C: an ack
    message carries a root per tree of a whole batch, and every root is checked by the
    receive thread of the spout's worker, which shares that worker's CPU and GIL (as
    generator expressions in squall.runtime.admission they ran as Python, root by root)."""
    for v in values:
        batch: Any = v[0]
        ok = True
        if shape == ROOT_XORS:
            if type(batch) is bytes:  # packed pairs: any 64 bits are an id
                ok = len(batch) % PAIR_BYTES == 0
            elif type(batch) is not dict:
                ok = False
            else:
                for r, x in batch.items():
                    if not _is_id(r) or not _is_id(x):
                        ok = False
                        break
        elif type(batch) is not list:
            ok = False
        elif shape == ROOTS:
            for r in batch:
                if not _is_id(r):
                    ok = False
                    break
        else:
            for r in batch:
                if not _is_id(r) and not _reasoned(r):
                    ok = False
                    break
        if not ok:
            raise GroupRejected(drops.ACKER_STREAM,
                                f"acker batch is not {shape} of 64-bit unsigned ints: {batch!r:.60}")


def _ids_column(tuples: list) -> Any:
    """The ids column of one group (see the module's docstring): None, packed pairs, or
    (a tuple in several trees among them) a list of maps."""
    trees = 0
    for t in tuples:
        cls = type(t)
        if cls is TreeTuple:
            trees += 1
        elif cls is not Tuple:
            return [u.ids for u in tuples]
    if not trees:
        return None
    n = len(tuples)
    if cython.compiled:
        out = PyBytes_FromStringAndSize(cython.NULL, n * PAIR_BYTES)
        p = cython.cast(cython.p_uchar, PyBytes_AS_STRING(out))
        w = PAIR_BYTES  # a C integer from here on
        for k in range(n):
            t = tuples[k]
            root = edge = 0
            if type(t) is TreeTuple:
                tree = cython.cast(TreeTuple, t)
                root = tree.root
                if root:  # a one-tree tuple without a root (forged old-form input) goes unanchored
                    edge = tree.edge
            store_u64le(p + k * w, root)
            store_u64le(p + k * w + 8, edge)
        return out
    flat: list[int] = []
    for t in tuples:
        if type(t) is TreeTuple and t.root:
            flat += (t.root, t.edge)
        else:
            flat += (0, 0)
    return pack_pairs(flat)


def _xor_pairs(xors: dict) -> bytes:
    """An ack message's {root: XOR} as packed pairs."""
    if cython.compiled:
        out = PyBytes_FromStringAndSize(cython.NULL, len(xors) * PAIR_BYTES)
        p = cython.cast(cython.p_uchar, PyBytes_AS_STRING(out))
        k = 0
        w = PAIR_BYTES
        for root, x in xors.items():
            store_u64le(p + k, root)
            store_u64le(p + k + 8, x)
            k += w
        return out
    flat: list[int] = []
    for root, x in xors.items():
        flat += (root, x)
    return pack_pairs(flat)


def _reasoned(entry: Any) -> bool:
    return (type(entry) is list and len(entry) == 2 and _is_id(entry[0]) and type(entry[1]) is str
            and len(entry[1]) <= MAX_REASON_CHARS)


def _paired(values: list, ids: bytes, src: Source, n: int, task: int, stream: str, out: list) -> None:
    """Decode a group whose ids are packed (root, edge) pairs into ``out``: one tree per
    tuple, root 0 (with edge 0) for an unanchored one."""
    m = len(values)
    if len(ids) != m * PAIR_BYTES:
        raise GroupRejected(drops.BAD_IDS, f"malformed tuple entry: ids of task {task} are {len(ids)} bytes "
                            f"for {m} tuples, not {PAIR_BYTES} a tuple")
    w = PAIR_BYTES
    if cython.compiled:
        p = cython.cast(cython.p_uchar, PyBytes_AS_STRING(ids))
    else:
        flat = unpack_pairs(ids)
    append = out.append
    for k in range(m):
        v = values[k]
        if type(v) is not list or len(v) != n:
            _bad_arity(task, stream, v, n)
        if cython.compiled:
            root = load_u64le(p + k * w)
            edge = load_u64le(p + k * w + 8)
        else:
            root, edge = flat[2 * k], flat[2 * k + 1]
        if root:
            tree = _new(TreeTuple)
            tree.values = v
            tree.source = src
            tree.root = root
            tree.edge = edge
            tree.ack_val = 0
            append(tree)
        elif edge:
            raise GroupRejected(drops.BAD_IDS, f"message id of a tuple from task {task}: edge {edge} without a root")
        else:
            t = _new(Tuple)
            t.values = v
            t.source = src
            append(t)


def _bad_arity(task: int, stream: str, v: Any, n: int) -> None:
    what = f"has {len(v)} values" if type(v) is list else f"is {v!r:.40}, not a list"
    raise GroupRejected(drops.BAD_GROUP, f"tuple from task {task} on {stream!r} {what}, expected {n} values")


class TupleSerializer:
    """Packs and unpacks tuple batches; one per worker, used by its executor threads and its
    receive thread (a msgpack Packer serves one thread: each thread gets its own)."""

    def __init__(self, serializers: Mapping[str, str], task_to_component: Mapping[int, str],
                 stream_fields: Callable[[str, str], Fields], admission: Admission | None = None) -> None:
        self.codec = codec = ValueCodec(serializers)
        self._ext = codec.ext_hook
        self._local = threading.local()
        self._task_to_component = task_to_component
        self._stream_fields = stream_fields
        self._sources: dict[tuple[int, str], Source] = {}
        self._admission = admission
        self._admitted: dict[tuple[int | None, int, str], tuple[Source, str | None]] = {}

    def dumps(self, tuples: list[Tuple]) -> bytes:
        groups: list[list] = []
        src = None
        for t in tuples:
            if t.source is not src:
                src = t.source
                values: list = []
                members: list = []
                groups.append([src.task, src.stream, values, members])
            values.append(t.values)
            members.append(t)
        try:
            packer = self._local.packer
        except AttributeError:
            packer = self._local.packer = self.codec.packer()
        try:
            for g in groups:
                g[3] = _ids_column(g[3])
                if g[1] == ACK_ACK:  # ack messages: a {root: XOR} map to an acker goes as packed pairs
                    g[2] = [[_xor_pairs(v[0])] if type(v[0]) is dict else v for v in g[2]]
            return packer.pack(groups)
        except Exception as exc:  # a value of no known type, a user serializer's bug, a cycle
            packer.reset()
            raise SerializationError(f"cannot serialize tuple batch: {exc}") from None

    def unsendable(self, tuples: list[Tuple]) -> list[tuple[int, str, tuple[str, str, str, str]]]:
        """The tuples of ``tuples`` that cannot be encoded: (index, reason, cause), where
        the reason names the component, stream, field, where in it and the type at fault,
        and the cause is (component, stream, field, type). The slow path, after ``dumps``
        refused a batch."""
        out = []
        pack = self.codec.pack
        for i, t in enumerate(tuples):
            try:
                pack(t.values)
            except Exception:  # noqa: BLE001 - explained below
                reason, cause = self._explain(t)
                out.append((i, reason, cause))
        return out

    def _explain(self, t: Tuple) -> tuple[str, tuple[str, str, str, str]]:
        src = t.source
        return self.codec.refusal(t.values, src.fields.names, src.component, src.stream)

    def loads(self, payload: bytes, target: int | None = None,
              drop: Callable[[str, int, str], None] | None = None,
              refused: dict[int, str] | None = None) -> list[Tuple]:
        """Decode a payload for task ``target``.

        A payload that does not decode at all raises SerializationError. A group that
        fails a check (shape, source, ``target``'s subscriptions, ids, acker traffic) is
        left out and reported to ``drop(cause, tuples, detail)``; the other groups are
        returned. Without ``drop`` the first bad group raises SerializationError. With
        ``refused``, a value that does not decode (a registered type's deserializer
        raised) fails only its tuple: that tuple is returned too, its index in ``refused``
        with the reason, for the caller to fail and leave out."""
        try:
            groups = msgpack.unpackb(payload, raw=False, strict_map_key=False, ext_hook=self._ext)
        except Exception as exc:  # msgpack's own errors, or a user deserializer's
            if refused is None:
                raise SerializationError(f"undecodable tuple payload: {exc}") from None
            groups = self._lenient(payload, exc)
            lenient = True
        else:
            lenient = False
        if type(groups) is not list:
            raise SerializationError("tuple payload is not a list")
        out: list[Tuple] = []
        for group in groups:
            start = len(out)
            try:
                self._group(group, target, out)
            except GroupRejected as exc:
                del out[start:]
                if drop is None:
                    raise SerializationError(str(exc)) from None
                values = group[2] if type(group) is list and len(group) == 4 else None
                drop(exc.cause, max(1, len(values)) if type(values) is list else 1, str(exc))
        if lenient and refused is not None:
            self._undecoded(out, refused)
        return out

    def _lenient(self, payload: bytes, exc: Exception) -> Any:
        """The payload decoded with what does not decode left in place (squall.values.Undecoded)."""
        try:
            return msgpack.unpackb(payload, raw=False, strict_map_key=False, ext_hook=self.codec.lenient_ext_hook)
        except Exception:  # not a value's failure: the payload itself
            raise SerializationError(f"undecodable tuple payload: {exc}") from None

    def _undecoded(self, out: list[Tuple], refused: dict[int, str]) -> None:
        for i, t in enumerate(out):
            for name, v in zip(t.source.fields.names, t.values):
                bad = find_undecoded(v)
                if bad is not None:
                    src = t.source
                    refused[i] = (f"component {src.component!r} stream {src.stream!r} field {name!r}: a value "
                                  f"(extension type {bad.code}) could not be deserialized: {bad.error}")
                    break

    def _group(self, group: Any, target: int | None, out: list[Tuple]) -> None:
        if type(group) is not list or len(group) != 4:
            raise GroupRejected(drops.BAD_GROUP,
                                f"malformed tuple entry {group!r:.80}: not [task, stream, values, ids]")
        task, stream, values, ids = group
        if type(task) is not int or type(stream) is not str:  # before they key a dict
            raise GroupRejected(drops.BAD_GROUP, f"malformed tuple entry: source {task!r:.20}/{stream!r:.40}")
        admitted = self._admitted.get((target, task, stream))
        if admitted is None:
            admitted = self._admit(target, task, stream)
        src, shape = admitted
        if type(values) is not list:
            raise GroupRejected(drops.BAD_GROUP, f"malformed tuple entry: values of task {task} are not a list")
        n = len(src.fields)
        append = out.append
        if ids is None:
            for v in values:
                if type(v) is not list or len(v) != n:
                    _bad_arity(task, stream, v, n)
                t = _new(Tuple)
                t.values = v
                t.source = src
                append(t)
        elif type(ids) is bytes:
            _paired(values, ids, src, n, task, stream, out)
        else:
            if type(ids) is not list or len(ids) != len(values):
                raise GroupRejected(drops.BAD_IDS, f"malformed tuple entry: ids of task {task} do not match its values")
            for v, i in zip(values, ids):
                if type(v) is not list or len(v) != n:
                    _bad_arity(task, stream, v, n)
                if type(i) is dict and len(i) == 1:  # one tree: the common case first
                    root, = i
                    edge = i[root]
                    if not _is_id(root) or not _is_id(edge):
                        raise GroupRejected(drops.BAD_IDS, f"message id {i!r:.60} is not a map of 64-bit unsigned ints")
                    t = _new(TreeTuple)
                    t.root = root
                    t.edge = edge
                    t.ack_val = 0
                elif not i:
                    if i is not None and type(i) is not dict:
                        raise GroupRejected(drops.BAD_IDS, f"message id {i!r:.40} is not a map")
                    t = _new(Tuple)
                else:
                    if type(i) is not dict or not all(_is_id(r) and _is_id(e) for r, e in i.items()):
                        raise GroupRejected(drops.BAD_IDS, f"message id {i!r:.60} is not a map of 64-bit unsigned ints")
                    t = _new(MultiTreeTuple)
                    t.roots = i
                    t.ack_val = 0
                t.values = v
                t.source = src
                append(t)
        if shape is not None:
            _check_acker_values(shape, values)

    def _admit(self, target: int | None, task: int, stream: str) -> tuple[Source, str | None]:
        """The Source of a (task, stream) group and the acker-value shape it needs, if
        ``target`` may receive it; cached (the key space is bounded by the topology)."""
        src = self._sources.get((task, stream))
        if src is None:
            src = self._source(task, stream)
        shape = None
        if target is not None and self._admission is not None:
            shape = self._admission.check(target, src.component, stream)
        self._admitted[(target, task, stream)] = (src, shape)
        return src, shape

    def _source(self, task: int, stream: str) -> Source:
        component = self._task_to_component.get(task)
        if component is None:
            raise GroupRejected(drops.UNKNOWN_SOURCE, f"tuple from unknown task {task!r}")
        try:
            fields = self._stream_fields(component, stream)
        except KeyError:
            raise GroupRejected(drops.UNKNOWN_SOURCE, f"component {component!r} has no stream {stream!r}") from None
        src = self._sources[(task, stream)] = Source(component, task, stream, fields)
        return src
