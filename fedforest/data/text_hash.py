"""A 64-bit hash of every text of an :class:`~fedforest.crypto.ids.IdTexts`
(``data`` bytes laid end to end, ``offsets``), for finding repeated IDs by
sorting 8 bytes per row instead of the texts.  Not a keyed or cryptographic
hash: equal hashes are only candidates, which the caller compares as texts."""
import numpy as np
from numba import njit

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)


@njit(cache=True, nogil=True)
def text_hashes(data, offsets):
    """FNV-1a of each text's bytes, then its length mixed in and the bits
    spread by splitmix64's finaliser, as uint64."""
    n = offsets.size - 1
    out = np.empty(n, dtype=np.uint64)
    for i in range(n):
        h = FNV_OFFSET
        for j in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(data[j])) * FNV_PRIME
        h ^= np.uint64(offsets[i + 1] - offsets[i]) * np.uint64(0x9E3779B97F4A7C15)
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        out[i] = h ^ (h >> np.uint64(31))
    return out
