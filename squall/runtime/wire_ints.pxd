# Little-endian 64-bit unsigned ints in byte buffers: the compiled build's reads and writes
# of packed id pairs (squall.runtime.acker.PAIR_BYTES), a memcpy each (and a byte swap on a
# big-endian host). C functions only, with no module behind them: the compiled modules
# cimport them (``from cython.cimports.squall.runtime.wire_ints import ...``); plain Python
# packs and unpacks the pairs with struct instead.
cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    static inline unsigned long long squall_load_u64le(const unsigned char *p) {
        uint64_t v;
        memcpy(&v, p, 8);
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap64(v);
    #endif
        return (unsigned long long)v;
    }
    static inline void squall_store_u64le(unsigned char *p, unsigned long long v) {
        uint64_t w = (uint64_t)v;
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
    #endif
        memcpy(p, &w, 8);
    }
    """
    unsigned long long load_u64le "squall_load_u64le"(const unsigned char* p) noexcept nogil
    void store_u64le "squall_store_u64le"(unsigned char* p, unsigned long long v) noexcept nogil
