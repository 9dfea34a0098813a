# Cython declarations for acker.py (pure-Python mode; see collectors.pxd).
cimport cython

cdef unsigned long long _MASK64, _GOLDEN, _MIX1, _MIX2, _state

@cython.locals(z=cython.ulonglong)
cpdef unsigned long long next_id()


cdef class AckerLedger:
    cdef public dict entries
    cdef public dict done
    cdef public dict failed
    cdef public dict reasons
    cdef public set _seen
    cdef public set _older

    cpdef bint xor(self, root, x)
    @cython.locals(d=list)
    cpdef complete(self, root)
    @cython.locals(entries=dict)
    cpdef apply(self, dict vals)
    cpdef fail(self, root, reason=*)


cdef class PendingTuples:
    cdef public dict entries
    cdef public Py_ssize_t held

    @cython.locals(entries=dict, out=list)
    cpdef list pop_done(self, roots)


cdef class SpoutBook:
    cdef public PendingTuples pending
    cdef public Py_ssize_t acked
    cdef public Py_ssize_t failed
    cdef public object latencies
