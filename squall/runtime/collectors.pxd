# Cython declarations for collectors.py (pure-Python mode: the .py stays the source and runs
# as is under SQUALL_PURE=1). Extension types with typed attributes make the emit and ack
# paths read and write C struct fields instead of going through Python attribute lookups;
# see bench/README.md, "The compiled build". Attributes stay readable from Python (public).
cimport cython

from squall.runtime.acker cimport AckerLedger, next_id
from squall.runtime.pending cimport PendingTuples
from squall.runtime.root_table cimport RootTable
from squall.tuple cimport TreeTuple, Tuple, _new


cdef inline unsigned long long _rand(int bits)


@cython.final  # nothing subclasses it: the collectors' calls go straight to its C functions
cdef class Outbox:
    cdef public dict bufs
    cdef public list tables
    cdef public dict fails
    cdef public Py_ssize_t batch
    cdef public object deliver
    cdef public tuple ackers
    cdef public dict sources
    cdef public AckerLedger ledger
    cdef public dict near
    cdef public object transferred
    cdef public double interval
    cdef public double held_since
    cdef public object queued
    cdef public AckerLedger home
    cdef public Py_ssize_t home_slot

    cpdef list buffer(self, task)
    @cython.locals(b=list)
    cpdef full(self, task)
    cdef inline AckerLedger home_of(self, unsigned long long root)
    @cython.locals(ledger=AckerLedger)
    cpdef fold(self, unsigned long long root, unsigned long long x)
    @cython.locals(table=RootTable)
    cpdef fold_for(self, Py_ssize_t slot, unsigned long long root, unsigned long long x)
    @cython.locals(table=RootTable, pairs=bytes, ledger=AckerLedger)
    cpdef send_acks(self, Py_ssize_t slot)
    @cython.locals(table=RootTable)
    cpdef bint folding(self)
    cpdef fail(self, root)
    @cython.locals(b=list)
    cpdef bint consumer_idle(self)
    @cython.locals(b=list)
    cpdef bint holding(self)
    @cython.locals(b=list, slot=Py_ssize_t)
    cpdef flush(self)


cdef class Route:
    cdef public object source
    cdef public Py_ssize_t arity
    cdef public object choose
    cdef public bint direct
    cdef public object direct_tasks
    cdef public Py_ssize_t emitted
    cdef public object fixed
    cdef public object target
    cdef public list buf


cdef class RoutedCollector:
    cdef public object _component
    cdef public object _task
    cdef public dict _routes
    cdef public object _report


cdef class _Collector(RoutedCollector):
    cdef public Outbox _outbox
    cdef public dict _bufs
    cdef public Py_ssize_t _batch
    cdef public bint _acking

    @cython.locals(b=list)
    cpdef _put(self, task, tup)


cdef class SpoutCollector(_Collector):
    cdef public PendingTuples _pending
    cdef public tuple _layout
    cdef public unsigned long long _root_base
    cdef public unsigned long long _root_stride
    cdef public int _root_bits
    cdef public AckerLedger _home
    cdef public object now  # set once per turn and stored in each pending entry as is (a C double would box a float per tuple)
    cdef public list immediate_acks
    cdef public list immediate_fails

    @cython.locals(route=Route, buf=list, tup=Tuple, tree=TreeTuple, ledger=AckerLedger, added=int,
                   root="unsigned long long")
    cpdef emit(self, values, stream=*, msg_id=*)
    @cython.locals(added=int)
    cpdef _record(self, msg_id, int added=*)
    @cython.locals(route=Route)
    cpdef _send(self, Route route, values, targets, msg_id)


cdef class BoltCollector(_Collector):
    cdef public object _auto
    cdef public bint _failed
    cdef public Py_ssize_t acked
    cdef public Py_ssize_t failed

    @cython.locals(route=Route, buf=list, tup=Tuple, tree=TreeTuple, anchor=TreeTuple, edge="unsigned long long")
    cpdef emit(self, values, stream=*, anchors=*)
    @cython.locals(ids=dict)
    cpdef _anchored(self, Route route, values, targets, anchors)
    @cython.locals(outbox=Outbox, tree=TreeTuple, extra="unsigned long long", root=object)
    cpdef ack(self, tup)
    cpdef fail(self, tup)
