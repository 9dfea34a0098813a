# Cython declarations for serialization.py (pure-Python mode; see collectors.pxd): decoded
# tuples are made by the tuple types' allocators, directly.
cimport cython

from squall.tuple cimport TreeTuple, Tuple, _new


cdef bint _is_id(object v) except -1

@cython.locals(trees=Py_ssize_t, n=Py_ssize_t, k=Py_ssize_t, w=Py_ssize_t, p="unsigned char*", tree=TreeTuple,
               root="unsigned long long", edge="unsigned long long")
cdef object _ids_column(list tuples)
@cython.locals(k=Py_ssize_t, w=Py_ssize_t, p="unsigned char*")
cdef bytes _xor_pairs(dict xors)
@cython.locals(m=Py_ssize_t, k=Py_ssize_t, w=Py_ssize_t, p="unsigned char*", root="unsigned long long",
               edge="unsigned long long", tree=TreeTuple, t=Tuple)
cdef _paired(list values, bytes ids, src, Py_ssize_t n, task, stream, list out)
