# Cython declarations for acker.py (pure-Python mode; see collectors.pxd).
cimport cython

from squall.runtime.pending cimport PendingTuples
from squall.runtime.root_table cimport RootTable

cdef unsigned long long _MASK64, _GOLDEN, _MIX1, _MIX2, _state

@cython.locals(z=cython.ulonglong)
cpdef unsigned long long next_id()


cdef int _TASK_SHIFT


@cython.final  # nothing subclasses it: the collectors' calls go straight to its C functions
cdef class AckerLedger:
    cdef public RootTable table
    cdef public dict done
    cdef public dict failed
    cdef public dict reasons
    cdef public Py_ssize_t refused
    cdef public set _seen
    cdef public set _older
    cdef long long _task
    cdef list _roots

    @cython.locals(r=int)
    cpdef bint xor(self, unsigned long long root, unsigned long long x) except -1
    @cython.locals(d=list, r="unsigned long long", task="long long")
    cpdef complete(self, root)
    cpdef refuse(self, root)
    @cython.locals(table=RootTable, r=int, x="unsigned long long")
    cpdef apply(self, dict vals)
    @cython.locals(table=RootTable, p="unsigned char*", i=Py_ssize_t, k=Py_ssize_t, w=Py_ssize_t, r=int, root="unsigned long long",
                   x="unsigned long long")
    cpdef apply_pairs(self, bytes pairs)
    cpdef fail(self, root, reason=*)


cdef class SpoutBook:
    cdef public PendingTuples pending
    cdef public Py_ssize_t acked
    cdef public Py_ssize_t failed
    cdef public object latencies
