# Cython declarations for tuple.py (pure-Python mode; see squall/runtime/collectors.pxd):
# tuples as extension types, so that the compiled collectors and serialization make and
# read them through C fields. From Python they read as before (attributes, properties).
# A one-tree tuple's ids are C integers (64-bit unsigned, as on the wire): the emit and ack
# paths make, XOR and read them with no int object; Python reads box them, and a store
# from Python refuses anything outside 0..2**64-1 (OverflowError, TypeError).


cdef class Tuple:
    cdef public object values
    cdef public object source


cdef class TreeTuple(Tuple):
    cdef public unsigned long long root
    cdef public unsigned long long edge
    cdef public unsigned long long ack_val


cdef class MultiTreeTuple(Tuple):
    cdef public object roots
    cdef public object ack_val



cdef object _new(type cls)
