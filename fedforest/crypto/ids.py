"""Keyed hashing of record IDs for private ID alignment.

Every ID's digest is HMAC-SHA256(key, the ID's text as UTF-8).  The IDs of a
table are hashed together by one compiled kernel (:func:`hmac_sha256_rows`)
over the IDs' UTF-8 bytes laid end to end (:class:`IdTexts`): no Python
object per ID; the digests equal :func:`hmac.digest` of each ID (checked by
``tests/crypto/test_ids.py``)."""
import hashlib

import numba
import numpy as np
from numba import njit, prange

DIGEST_BYTES = 32
BLOCK = 64                    # SHA-256 block bytes

_K = np.array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
], dtype=np.uint32)
_H0 = np.array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19], dtype=np.uint32)


class IdTexts:
    """Texts (IDs) as their UTF-8 bytes laid end to end: ``data`` (uint8) and
    ``offsets`` (int64, ``n + 1``; text ``i`` is ``data[offsets[i]:offsets[i+1]]``).
    About 8 bytes per ID plus its text, where a Python string costs ~50 more."""

    def __init__(self, data, offsets):
        self.data = np.ascontiguousarray(data, dtype=np.uint8)
        self.offsets = np.ascontiguousarray(offsets, dtype=np.int64)

    @classmethod
    def from_texts(cls, texts):
        encoded = [str(v).encode("utf-8") for v in texts]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        return cls(np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets)

    @classmethod
    def from_arrow(cls, arr):
        """From a pyarrow string array (or chunked array) without nulls."""
        import pyarrow as pa
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
        arr = arr.cast(pa.large_string())
        _validity, off, data = arr.buffers()
        offsets = np.frombuffer(off, dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]
        raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
        start, end = int(offsets[0]), int(offsets[-1])
        return cls(raw[start:end].copy(), offsets - start)

    def __len__(self):
        return self.offsets.size - 1

    @property
    def nbytes(self):
        return self.data.nbytes + self.offsets.nbytes

    def take(self, rows):
        """The texts of ``rows`` (int array), in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.offsets[rows + 1] - self.offsets[rows]
        offsets = np.zeros(rows.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = np.empty(int(offsets[-1]), dtype=np.uint8)
        _gather_texts(self.data, self.offsets, rows, offsets, data)
        return IdTexts(data, offsets)

    def joined(self, start, stop, sep=0):
        """Bytes of texts ``start..stop-1`` joined by the byte ``sep``."""
        lo, hi = int(self.offsets[start]), int(self.offsets[stop])
        if stop - start <= 1:
            return self.data[lo:hi].tobytes()
        return np.insert(self.data[lo:hi], self.offsets[start + 1:stop] - lo, sep).tobytes()

    def to_arrow(self):
        """The texts as a pyarrow large_string array (no copy)."""
        import pyarrow as pa
        return pa.LargeStringArray.from_buffers(len(self), pa.py_buffer(self.offsets), pa.py_buffer(self.data))

    def find(self, text):
        """Row numbers holding ``text``."""
        import pyarrow.compute as pc
        return np.flatnonzero(pc.equal(self.to_arrow(), str(text)).to_numpy(zero_copy_only=False))

    def to_numpy(self):
        """The texts as a numpy object array of Python strings."""
        out = np.empty(len(self), dtype=object)
        raw, off = self.data.tobytes(), self.offsets.tolist()
        for i in range(len(self)):
            out[i] = raw[off[i]:off[i + 1]].decode("utf-8")
        return out


@njit(cache=True, nogil=True)
def _gather_texts(data, offsets, rows, out_offsets, out):
    for k in range(rows.size):
        src = offsets[rows[k]]
        dst = out_offsets[k]
        for b in range(out_offsets[k + 1] - dst):
            out[dst + b] = data[src + b]


def hash_ids(ids, key):
    """HMAC-SHA256 of each ID's text form (``str(v)`` as UTF-8), as an (n, 32)
    uint8 array.  ``ids``: an :class:`IdTexts` or a sequence of IDs."""
    if not isinstance(ids, IdTexts):
        ids = IdTexts.from_texts(ids)
    key = bytes(key)
    if len(key) > BLOCK:
        key = hashlib.sha256(key).digest()
    key = np.frombuffer(key.ljust(BLOCK, b"\x00"), dtype=np.uint8)
    out = np.empty((len(ids), DIGEST_BYTES), dtype=np.uint8)
    if len(ids):
        n_chunks = min(len(ids), 8 * numba.get_num_threads())
        hmac_sha256_rows(ids.data, ids.offsets, key, _K, _H0, n_chunks, out)
    return out


@njit(cache=True, nogil=True)
def _compress(state, block, w, k):
    """One SHA-256 compression of the 64 bytes ``block`` into ``state``
    (8 words held in uint64, each below 2**32); ``w``: scratch of 64 words."""
    m = np.uint64(0xFFFFFFFF)
    for t in range(16):
        w[t] = (np.uint64(block[4 * t]) << np.uint64(24)) | (np.uint64(block[4 * t + 1]) << np.uint64(16)) \
            | (np.uint64(block[4 * t + 2]) << np.uint64(8)) | np.uint64(block[4 * t + 3])
    for t in range(16, 64):
        x = w[t - 15]
        s0 = (((x >> np.uint64(7)) | (x << np.uint64(25))) ^ ((x >> np.uint64(18)) | (x << np.uint64(14)))
              ^ (x >> np.uint64(3))) & m
        x = w[t - 2]
        s1 = (((x >> np.uint64(17)) | (x << np.uint64(15))) ^ ((x >> np.uint64(19)) | (x << np.uint64(13)))
              ^ (x >> np.uint64(10))) & m
        w[t] = (w[t - 16] + s0 + w[t - 7] + s1) & m
    a, b, c, d, e, f, g, h = state[0], state[1], state[2], state[3], state[4], state[5], state[6], state[7]
    for t in range(64):
        s1 = (((e >> np.uint64(6)) | (e << np.uint64(26))) ^ ((e >> np.uint64(11)) | (e << np.uint64(21)))
              ^ ((e >> np.uint64(25)) | (e << np.uint64(7)))) & m
        ch = (e & f) ^ ((~e & m) & g)
        t1 = (h + s1 + ch + np.uint64(k[t]) + w[t]) & m
        s0 = (((a >> np.uint64(2)) | (a << np.uint64(30))) ^ ((a >> np.uint64(13)) | (a << np.uint64(19)))
              ^ ((a >> np.uint64(22)) | (a << np.uint64(10)))) & m
        maj = (a & b) ^ (a & c) ^ (b & c)
        t2 = (s0 + maj) & m
        h = g
        g = f
        f = e
        e = (d + t1) & m
        d = c
        c = b
        b = a
        a = (t1 + t2) & m
    state[0] = (state[0] + a) & m
    state[1] = (state[1] + b) & m
    state[2] = (state[2] + c) & m
    state[3] = (state[3] + d) & m
    state[4] = (state[4] + e) & m
    state[5] = (state[5] + f) & m
    state[6] = (state[6] + g) & m
    state[7] = (state[7] + h) & m


@njit(cache=True, nogil=True)
def _finish(state, tail, n_tail, total, block, w, k):
    """Pad and compress the last ``n_tail`` bytes of ``tail`` of a message of
    ``total`` bytes (the earlier blocks already in ``state``)."""
    for i in range(BLOCK):
        block[i] = 0
    for i in range(n_tail):
        block[i] = tail[i]
    block[n_tail] = 0x80
    if n_tail >= 56:
        _compress(state, block, w, k)
        for i in range(BLOCK):
            block[i] = 0
    bits = np.uint64(total) * np.uint64(8)
    for i in range(8):
        block[63 - i] = (bits >> np.uint64(8 * i)) & np.uint64(0xFF)
    _compress(state, block, w, k)


LANES = 16                    # short IDs hashed side by side (the compiler's vector lanes)
_U = {n: np.uint32(n) for n in (2, 3, 6, 7, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 25, 26, 30)}
U2, U3, U6, U7, U10, U11, U13, U14, U15, U17, U18, U19, U21, U22, U25, U26, U30 = _U.values()


@njit(cache=True, nogil=True, inline="always")
def _round_lanes(a, b, c, d, e, f, g, h, w, kt):
    """One SHA-256 round on every lane; the roles rotate by argument order
    (``d`` and ``h`` are written).  Sums may carry above bit 31 in
    registers: the uint32 stores drop it, and shifts right only read stored words."""
    for l in range(a.size):
        E = e[l]
        A = a[l]
        s1 = ((E >> U6) | (E << U26)) ^ ((E >> U11) | (E << U21)) ^ ((E >> U25) | (E << U7))
        ch = (E & f[l]) ^ (~E & g[l])
        t1 = h[l] + s1 + ch + kt + w[l]
        s0 = ((A >> U2) | (A << U30)) ^ ((A >> U13) | (A << U19)) ^ ((A >> U22) | (A << U10))
        maj = (A & b[l]) ^ (A & c[l]) ^ (b[l] & c[l])
        d[l] = d[l] + t1
        h[l] = t1 + s0 + maj


@njit(cache=True, nogil=True)
def _compress_lanes(S, W, k):
    """SHA-256 compression of one block per lane: ``S`` (8, lanes) uint32
    states, ``W`` (64, lanes) uint32 whose first 16 rows hold the blocks' words."""
    for t in range(16, 64):
        for l in range(W.shape[1]):
            x = W[t - 15, l]
            s0 = ((x >> U7) | (x << U25)) ^ ((x >> U18) | (x << U14)) ^ (x >> U3)
            y = W[t - 2, l]
            s1 = ((y >> U17) | (y << U15)) ^ ((y >> U19) | (y << U13)) ^ (y >> U10)
            W[t, l] = W[t - 16, l] + s0 + W[t - 7, l] + s1
    a = S[0].copy()
    b = S[1].copy()
    c = S[2].copy()
    d = S[3].copy()
    e = S[4].copy()
    f = S[5].copy()
    g = S[6].copy()
    h = S[7].copy()
    for t in range(0, 64, 8):
        _round_lanes(a, b, c, d, e, f, g, h, W[t], k[t])
        _round_lanes(h, a, b, c, d, e, f, g, W[t + 1], k[t + 1])
        _round_lanes(g, h, a, b, c, d, e, f, W[t + 2], k[t + 2])
        _round_lanes(f, g, h, a, b, c, d, e, W[t + 3], k[t + 3])
        _round_lanes(e, f, g, h, a, b, c, d, W[t + 4], k[t + 4])
        _round_lanes(d, e, f, g, h, a, b, c, W[t + 5], k[t + 5])
        _round_lanes(c, d, e, f, g, h, a, b, W[t + 6], k[t + 6])
        _round_lanes(b, c, d, e, f, g, h, a, W[t + 7], k[t + 7])
    for l in range(S.shape[1]):
        S[0, l] += a[l]
        S[1, l] += b[l]
        S[2, l] += c[l]
        S[3, l] += d[l]
        S[4, l] += e[l]
        S[5, l] += f[l]
        S[6, l] += g[l]
        S[7, l] += h[l]


@njit(cache=True, nogil=True)
def _hash_short(data, offsets, rows, n_rows, inner0, outer0, k, S, W, out):
    """HMAC of up to LANES texts of at most 55 bytes (one inner block each)."""
    for l in range(LANES):
        for t in range(16):
            W[t, l] = 0
        for j in range(8):
            S[j, l] = inner0[j]
    for l in range(n_rows):
        start = offsets[rows[l]]
        length = offsets[rows[l] + 1] - start
        for i in range(length):
            W[i >> 2, l] |= np.uint32(data[start + i]) << np.uint32(24 - 8 * (i & 3))
        W[length >> 2, l] |= np.uint32(0x80) << np.uint32(24 - 8 * (length & 3))
        W[15, l] = np.uint32((BLOCK + length) * 8)
    _compress_lanes(S, W, k)
    for l in range(LANES):
        for j in range(8):
            W[j, l] = S[j, l]
            S[j, l] = outer0[j]
        W[8, l] = np.uint32(0x80000000)
        for t in range(9, 15):
            W[t, l] = 0
        W[15, l] = np.uint32((BLOCK + DIGEST_BYTES) * 8)
    _compress_lanes(S, W, k)
    for l in range(n_rows):
        for j in range(8):
            v = S[j, l]
            for b in range(4):
                out[rows[l], 4 * j + b] = (v >> np.uint32(24 - 8 * b)) & np.uint32(0xFF)


@njit(cache=True, parallel=True, nogil=True)
def hmac_sha256_rows(data, offsets, key, k, h0, n_chunks, out):
    """HMAC-SHA256 under the 64-byte (zero-padded) ``key`` of every text
    ``data[offsets[i]:offsets[i+1]]`` into ``out[i]`` (32 bytes), texts in
    ``n_chunks`` parallel chunks.  The keyed inner and outer states are
    computed once; texts of at most 55 bytes are hashed LANES at a time,
    longer ones one by one."""
    n = offsets.size - 1
    inner0 = np.empty(8, dtype=np.uint64)
    outer0 = np.empty(8, dtype=np.uint64)
    pad = np.empty(BLOCK, dtype=np.uint8)
    w0 = np.empty(64, dtype=np.uint64)
    for i in range(8):
        inner0[i] = h0[i]
        outer0[i] = h0[i]
    for i in range(BLOCK):
        pad[i] = key[i] ^ 0x36
    _compress(inner0, pad, w0, k)
    for i in range(BLOCK):
        pad[i] = key[i] ^ 0x5C
    _compress(outer0, pad, w0, k)
    k32 = k.astype(np.uint32)
    for c in prange(n_chunks):
        lo = c * n // n_chunks
        hi = (c + 1) * n // n_chunks
        state = np.empty(8, dtype=np.uint64)
        block = np.empty(BLOCK, dtype=np.uint8)
        digest = np.empty(BLOCK, dtype=np.uint8)
        w = np.empty(64, dtype=np.uint64)
        S = np.empty((8, LANES), dtype=np.uint32)
        W = np.empty((64, LANES), dtype=np.uint32)
        rows = np.empty(LANES, dtype=np.int64)
        n_short = 0
        for r in range(lo, hi):
            start = offsets[r]
            length = offsets[r + 1] - start
            if length <= 55:
                rows[n_short] = r
                n_short += 1
                if n_short == LANES:
                    _hash_short(data, offsets, rows, n_short, inner0, outer0, k32, S, W, out)
                    n_short = 0
                continue
            for i in range(8):
                state[i] = inner0[i]
            pos = 0
            while length - pos >= BLOCK:
                _compress(state, data[start + pos:start + pos + BLOCK], w, k)
                pos += BLOCK
            _finish(state, data[start + pos:start + length], length - pos, BLOCK + length, block, w, k)
            for i in range(8):
                for b in range(4):
                    digest[4 * i + b] = (state[i] >> np.uint64(24 - 8 * b)) & np.uint64(0xFF)
                state[i] = outer0[i]
            _finish(state, digest, DIGEST_BYTES, BLOCK + DIGEST_BYTES, block, w, k)
            for i in range(8):
                for b in range(4):
                    out[r, 4 * i + b] = (state[i] >> np.uint64(24 - 8 * b)) & np.uint64(0xFF)
        if n_short:
            _hash_short(data, offsets, rows, n_short, inner0, outer0, k32, S, W, out)
