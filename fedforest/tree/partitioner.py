"""Partitioning: which rows of a node go left, and the stable in-place
partition of every node segment of a level (conventions as in :mod:`.criterion`)."""
import numpy as np
from numba import njit, prange

from .threads import prange_only


@njit(cache=True)
def goes_left(x, rows, start, end, thr, missing_left):
    """1 for each row of a node segment that goes to the left child, else 0."""
    out = np.empty(end - start, dtype=np.uint8)
    for i in range(start, end):
        v = x[rows[i]]
        if np.isnan(v):
            out[i - start] = missing_left
        else:
            out[i - start] = 1 if v <= thr else 0
    return out


@njit(cache=True)
def _segment_offsets(starts, ends):
    off = np.empty(starts.shape[0] + 1, dtype=np.int64)
    off[0] = 0
    for j in range(starts.shape[0]):
        off[j + 1] = off[j] + ends[j] - starts[j]
    return off


@njit(cache=True, nogil=True, inline="always")
def _left_bit(v, thr, ml, missing_code):
    """1 when a value goes left: missing values (NaN or ``missing_code``) by
    ``ml``, others when at most ``thr``."""
    if np.isnan(v) or v == missing_code:
        return np.int64(ml)
    return np.int64(1) if v <= thr else np.int64(0)


@njit(cache=True, parallel=prange_only(), nogil=True)
def partition_bits(X, rows, starts, ends, features, thresholds, missing_left, missing_code):
    """Left (1) / right (0) bit of every row of several node segments, each
    split on its own column, concatenated in segment order.  A value is
    missing when it is NaN or equals ``missing_code``: on bin codes (``X``
    uint8, ``thresholds`` the split bins, ``missing_code = MISSING_BIN``) a row
    goes left when its bin is at most the split's bin, the same rows as
    ``x <= threshold`` of that bin's upper edge; on raw values pass NaN.  (No
    default: numba would key its cache on the omitted NaN, which never equals
    itself, so every process would compile the kernel again.)"""
    off = _segment_offsets(starts, ends)
    out = np.empty(off[-1], dtype=np.uint8)
    for j in prange(starts.shape[0]):
        f = features[j]
        thr = thresholds[j]
        ml = missing_left[j]
        o = off[j]
        for i in range(starts[j], ends[j]):
            out[o] = _left_bit(X[rows[i], f], thr, ml, missing_code)
            o += 1
    return out


@njit(cache=True, parallel=prange_only(), nogil=True)
def apply_partition(rows, starts, ends, bits):
    """Stable in-place partition of each node segment by its left/right bits.

    ``bits`` is the concatenation, over the listed segments, of one uint8 per
    row (1 = left).  Returns the number of left rows of each segment.
    """
    n_seg = starts.shape[0]
    n_left = np.zeros(n_seg, dtype=np.int64)
    off = _segment_offsets(starts, ends)
    for j in prange(n_seg):
        s = starts[j]
        e = ends[j]
        o = off[j] - s
        # branch-free: every row is written to both buffers, only one cursor moves
        right = np.empty(e - s + 1, dtype=rows.dtype)
        nl = 0
        nr = 0
        for i in range(s, e):
            r = rows[i]
            b = bits[o + i] == 1
            rows[s + nl] = r      # never ahead of the reading position i
            right[nr] = r
            nl += b
            nr += 1 - b
        for i in range(nr):
            rows[s + nl + i] = right[i]
        n_left[j] = nl
    return n_left


@njit(cache=True, parallel=prange_only(), nogil=True)
def partition_stats(X, rows, starts, ends, features, thresholds, missing_left, missing_code,
                    ycls, yw, is_clf, S):
    """:func:`partition_bits` and, in the same pass, the label statistics of
    the two children of every segment: row ``2j`` of the returned ``(2m, S)``
    array is segment ``j``'s left child, row ``2j + 1`` its right child.
    Each child's statistics are added in row order, so they equal what
    :func:`fedforest.tree.criterion.node_statistics` gives on the child's
    rows after :func:`apply_partition` (conventions of :mod:`.criterion`)."""
    off = _segment_offsets(starts, ends)
    out = np.empty(off[-1], dtype=np.uint8)
    stats = np.zeros((2 * starts.shape[0], S))
    for j in prange(starts.shape[0]):
        f = features[j]
        thr = thresholds[j]
        ml = missing_left[j]
        o = off[j]
        for i in range(starts[j], ends[j]):
            r = rows[i]
            b = _left_bit(X[r, f], thr, ml, missing_code)
            out[o] = b
            o += 1
            side = 2 * j + 1 - b
            if is_clf:
                stats[side, ycls[r]] += yw[r, 0]
            else:
                stats[side, 0] += yw[r, 0]
                stats[side, 1] += yw[r, 1]
                stats[side, 2] += yw[r, 2]
    return out, stats


@njit(cache=True, nogil=True, inline="always")
def _bit(a, i):
    return (a[i >> 3] >> (7 - (i & 7))) & 1


@njit(cache=True, nogil=True)
def place_bits(src, lengths, dest_starts, out):
    """Copy packed bit segments into a packed bitmap (``numpy.packbits`` order,
    most significant bit first): segment ``k`` is the next ``lengths[k]``
    bits of ``src`` and lands at bit ``dest_starts[k]`` of ``out``, whose
    bits there must be 0.  Whole destination bytes are copied a byte at a
    time.  Returns the number of 1 bits of each segment."""
    popcount = np.zeros(256, dtype=np.int64)
    for v in range(256):
        popcount[v] = popcount[v >> 1] + (v & 1)
    ones = np.zeros(lengths.shape[0], dtype=np.int64)
    n_src = src.shape[0]
    pos = 0
    for k in range(lengths.shape[0]):
        n = lengths[k]
        d = dest_starts[k]
        n1 = 0
        i = 0
        # single bits up to the destination's next byte boundary
        while i < n and (d + i) & 7:
            if _bit(src, pos + i):
                t = d + i
                out[t >> 3] |= np.uint8(0x80 >> (t & 7))
                n1 += 1
            i += 1
        # whole destination bytes: eight source bits from any bit offset
        while n - i >= 8:
            sp = pos + i
            b = sp >> 3
            sh = sp & 7
            hi = np.int64(src[b])
            lo = np.int64(src[b + 1]) if sh and b + 1 < n_src else np.int64(0)
            v = ((hi << sh) | (lo >> (8 - sh))) & 0xFF
            out[(d + i) >> 3] = np.uint8(v)
            n1 += popcount[v]
            i += 8
        # the last bits
        while i < n:
            if _bit(src, pos + i):
                t = d + i
                out[t >> 3] |= np.uint8(0x80 >> (t & 7))
                n1 += 1
            i += 1
        ones[k] = n1
        pos += n
    return ones
