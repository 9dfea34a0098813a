# Cython declarations for root_table.py (pure-Python mode; see collectors.pxd): the table's
# slots are C arrays of unsigned 64-bit ints, and its hot methods take and return C integers.
cimport cython

cdef unsigned long long _GOLDEN


@cython.final
cdef class RootTable:
    cdef public Py_ssize_t limit
    cdef dict _d
    cdef unsigned long long* _roots
    cdef unsigned long long* _vals
    cdef Py_ssize_t _n
    cdef int _bits
    cdef size_t _mask

    cdef _alloc(self, int bits)
    cdef inline size_t _home(self, unsigned long long root) noexcept
    @cython.locals(i=size_t)
    cdef inline size_t _slot(self, unsigned long long root) noexcept
    @cython.locals(old_roots="unsigned long long*", old_vals="unsigned long long*", size=size_t, i=size_t, j=size_t)
    cdef _grow(self)
    @cython.locals(j=size_t, home=size_t, mask=size_t)
    cdef void _remove_slot(self, size_t i) noexcept
    cdef int _insert(self, size_t i, unsigned long long root, unsigned long long v) except -2
    cdef inline int _store(self, size_t i, unsigned long long root, unsigned long long v) except -2
    cdef _dstore(self, root, v)

    @cython.locals(i=size_t)
    cpdef unsigned long long get(self, unsigned long long root)
    @cython.locals(i=size_t)
    cpdef int fold(self, unsigned long long root, unsigned long long x) except -2
    @cython.locals(i=size_t)
    cpdef int put(self, unsigned long long root, unsigned long long v) except -2
    @cython.locals(i=size_t)
    cpdef int insert(self, unsigned long long root, unsigned long long v) except -2
    @cython.locals(i=size_t, v="unsigned long long")
    cpdef unsigned long long pop(self, unsigned long long root)
    @cython.locals(i=size_t)
    cpdef bint discard(self, unsigned long long root) except -1
    @cython.locals(j=size_t, out=list)
    cpdef list roots(self)
    @cython.locals(j=size_t, out=list)
    cpdef list items(self)
    @cython.locals(j=size_t, n=Py_ssize_t, k=Py_ssize_t, w=Py_ssize_t, p="unsigned char*", out=bytes)
    cpdef bytes take_pairs(self)
