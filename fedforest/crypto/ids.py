"""Keyed hashing of record IDs for private ID alignment.

Every ID's digest is HMAC-SHA256(key, the ID's text as UTF-8) (RFC 2104):
the SHA-256 states of the padded inner and outer keys are made once and
copied for each ID, as Python's :mod:`hmac` does; the digests equal
:func:`hmac.digest` of each ID (checked by ``tests/crypto/test_ids.py``).
The IDs are held as their UTF-8 bytes laid end to end (:class:`IdTexts`,
no Python object per ID); a large table is hashed in worker processes, one
slice of IDs each."""
import hashlib

import numpy as np

DIGEST_BYTES = 32
BLOCK = 64                    # SHA-256 block bytes
CHUNK_IDS = 1 << 16           # IDs hashed per slice (the Python offsets of one slice at a time)
MIN_IDS_PER_WORKER = 1 << 18  # fewer IDs than this per worker: hashed in this process
WORKER_TASK_IDS = 1 << 20     # IDs per task of a worker process


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
        """From a pyarrow string array (or chunked array) without nulls: the
        chunks' bytes copied once, end to end."""
        import pyarrow as pa
        chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
        datas, offsets, base = [], [np.zeros(1, dtype=np.int64)], 0
        for chunk in chunks:
            if not len(chunk):
                continue
            if chunk.null_count:
                raise ValueError("IDs must not be missing")
            if not (pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type)):
                raise TypeError(f"IDs must be strings, got {chunk.type}")
            _validity, off, data = chunk.buffers()
            width = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
            off = np.frombuffer(off, dtype=width)[chunk.offset:chunk.offset + len(chunk) + 1]
            lo, hi = int(off[0]), int(off[-1])
            if hi > lo:
                datas.append(np.frombuffer(data, dtype=np.uint8)[lo:hi])
            offsets.append(off[1:].astype(np.int64) + (base - lo))
            base += hi - lo
        data = np.concatenate(datas) if datas else np.zeros(0, dtype=np.uint8)
        return cls(data, np.concatenate(offsets))

    def __len__(self):
        return self.offsets.size - 1

    @property
    def nbytes(self):
        return self.data.nbytes + self.offsets.nbytes

    def take(self, rows):
        """The texts of ``rows`` (int array), in that order."""
        import pyarrow as pa
        return IdTexts.from_arrow(self.to_arrow().take(pa.array(np.asarray(rows, dtype=np.int64))))

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


def _keyed_states(key):
    """SHA-256 states of the inner and outer padded keys of HMAC (RFC 2104)."""
    key = bytes(key)
    if len(key) > BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(BLOCK, b"\x00")
    return (hashlib.sha256(bytes(b ^ 0x36 for b in key)),
            hashlib.sha256(bytes(b ^ 0x5C for b in key)))


def _hash_slice(key, data, offsets, out=None):
    """Digests of the texts ``data[offsets[i]:offsets[i+1]]`` (``offsets``
    relative to ``data``), written to ``out`` ((n, 32) uint8) or returned as bytes."""
    inner, outer = _keyed_states(key)
    n = len(offsets) - 1
    whole = [] if out is None else None
    for lo in range(0, n, CHUNK_IDS):
        off = offsets[lo:lo + CHUNK_IDS + 1].tolist()
        lead = off[0]
        block = bytes(data[lead:off[-1]])
        parts = []
        new_inner, new_outer, add = inner.copy, outer.copy, parts.append
        for a, b in zip(off, off[1:]):
            h = new_inner()
            h.update(block[a - lead:b - lead])
            g = new_outer()
            g.update(h.digest())
            add(g.digest())
        if out is None:
            whole.append(b"".join(parts))
        else:
            out[lo:lo + len(parts)].reshape(-1)[:] = np.frombuffer(b"".join(parts), dtype=np.uint8)
    return b"".join(whole) if out is None else None


def hash_ids(ids, key, workers=1):
    """HMAC-SHA256 of each ID's text form (``str(v)`` as UTF-8), as an (n, 32)
    uint8 array.  ``ids``: an :class:`IdTexts` or a sequence of IDs;
    ``workers``: processes to share the IDs between (a table of fewer than
    :data:`MIN_IDS_PER_WORKER` IDs per worker uses fewer)."""
    if not isinstance(ids, IdTexts):
        ids = IdTexts.from_texts(ids)
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"the ID key must be bytes, got {type(key).__name__}")
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    key = bytes(key)
    n = len(ids)
    workers = int(max(1, min(workers, n // MIN_IDS_PER_WORKER)))
    out = np.empty((n, DIGEST_BYTES), dtype=np.uint8)
    if workers == 1:
        _hash_slice(key, ids.data, ids.offsets, out)
        return out
    from .paillier import worker_pool
    # tasks of a bounded size: the results waiting to be copied stay small
    step = max(CHUNK_IDS, min(WORKER_TASK_IDS, -(-n // workers)))
    bounds = list(range(0, n, step)) + [n]
    with worker_pool(workers) as pool:
        futures = []
        for lo, hi in zip(bounds, bounds[1:]):
            a, b = int(ids.offsets[lo]), int(ids.offsets[hi])
            futures.append(pool.submit(_hash_slice, key, ids.data[a:b], ids.offsets[lo:hi + 1] - a))
        for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            out[lo:hi].reshape(-1)[:] = np.frombuffer(futures[i].result(), dtype=np.uint8)
            futures[i] = None
    return out
