# Cython declarations for serialization.py (pure-Python mode; see collectors.pxd): decoded
# tuples are made by the tuple types' allocators, directly.
from squall.tuple cimport _new


cdef bint _is_id(object v) except -1
