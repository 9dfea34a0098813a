# Cython declarations for tuple.py (pure-Python mode; see squall/runtime/collectors.pxd):
# tuples as extension types, so that the compiled collectors and serialization make and
# read them through C fields. From Python they read as before (attributes, properties).


cdef class Tuple:
    cdef public object values
    cdef public object source


cdef class TreeTuple(Tuple):
    cdef public object root
    cdef public object edge
    cdef public object ack_val


cdef class MultiTreeTuple(Tuple):
    cdef public object roots
    cdef public object ack_val



cdef object _new(type cls)
