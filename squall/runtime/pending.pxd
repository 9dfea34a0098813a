# Cython declarations for pending.py (pure-Python mode; see collectors.pxd): a spout task's
# entries in slots of C arrays and a list, found through a RootTable of root -> slot + 1.
cimport cython

from squall.runtime.root_table cimport RootTable


@cython.final
cdef class PendingTuples:
    cdef public Py_ssize_t held
    cdef readonly Py_ssize_t limit
    cdef dict _d
    cdef RootTable _index
    cdef list _msgs
    cdef double* _starts
    cdef unsigned long long* _roots
    cdef Py_ssize_t* _free
    cdef Py_ssize_t _nfree
    cdef Py_ssize_t _top
    cdef Py_ssize_t _cap
    cdef double _oldest

    @cython.locals(cap=Py_ssize_t)
    cdef _grow(self)
    cdef _release(self, Py_ssize_t s)
    @cython.locals(s=Py_ssize_t, out=list, msgs=list)
    cdef list _used(self)

    @cython.locals(s=Py_ssize_t)
    cpdef int add(self, unsigned long long root, msg_id, double now) except -2
    @cython.locals(s=Py_ssize_t, v="unsigned long long")
    cpdef pop(self, root)
    @cython.locals(out=list)
    cpdef list pop_entries(self, roots)
    @cython.locals(n=Py_ssize_t, s=Py_ssize_t, v="unsigned long long", index=RootTable, msgs=list)
    cpdef Py_ssize_t complete(self, roots, double now, list lats, Py_ssize_t sample, list msg_ids) except -1
    @cython.locals(limit=double, oldest=double, s=Py_ssize_t, out=list)
    cpdef list expire(self, double now, double timeout)
    @cython.locals(s=Py_ssize_t, out=list)
    cpdef list drain(self)
