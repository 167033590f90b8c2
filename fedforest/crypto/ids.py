"""Keyed hashing of record IDs for private ID alignment.

Every ID's digest is AES-CMAC(key, the ID's text as UTF-8) (NIST SP 800-38B,
RFC 4493; AES-256 with the group's 32-byte secret): a pseudorandom function
of the ID, 16 bytes, which only holders of the secret can compute.  The IDs
are held as their UTF-8 bytes laid end to end (:class:`IdTexts`, no Python
object per ID) and hashed all at once: CMAC's chain of block encryptions
runs block by block over every ID of a slice together, each step one AES-ECB
call of the ``cryptography`` package over the whole slice, so 10^7 IDs take
seconds; IDs longer than :data:`VECTOR_BYTES` (rare) go through
``cryptography``'s own CMAC one by one.  The digests equal that CMAC of each
ID (checked by ``tests/crypto/test_ids.py``)."""
import numpy as np
from cryptography.hazmat.primitives import cmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

DIGEST_BYTES = 16
BLOCK = 16                    # AES block bytes
KEY_BYTES = 32                # AES-256
VECTOR_BYTES = 4 * BLOCK      # IDs up to this long are hashed together, block by block
SLICE_IDS = 1 << 16           # IDs per slice: its padded blocks and their cipher texts take at most ~20 MB (faster than larger slices, which leave cache)


def _span(chunk):
    """A string array's offsets (as stored) and the range of its data bytes."""
    import pyarrow as pa
    if not len(chunk):
        return np.zeros(1, dtype=np.int64), 0, 0
    width = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
    off = np.frombuffer(chunk.buffers()[1], dtype=width)[chunk.offset:chunk.offset + len(chunk) + 1]
    return off, int(off[0]), int(off[-1])


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
        return cls.from_arrow_blocks(list(arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]))

    @classmethod
    def from_arrow_blocks(cls, blocks):
        """From a list of pyarrow string arrays without nulls, which it
        empties: each block is dropped once copied, so that the blocks and
        their copy overlap by one block (where the caller holds no other
        reference to them)."""
        import pyarrow as pa
        for chunk in blocks:
            if chunk.null_count:
                raise ValueError("IDs must not be missing")
            if not (pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type)):
                raise TypeError(f"IDs must be strings, got {chunk.type}")
        spans = [_span(chunk) for chunk in blocks]
        data = np.empty(sum(hi - lo for _, lo, hi in spans), dtype=np.uint8)
        offsets = np.empty(sum(len(chunk) for chunk in blocks) + 1, dtype=np.int64)
        offsets[0] = 0
        row = pos = 0
        for off, lo, hi in spans:
            chunk = blocks.pop(0)
            m = off.size - 1
            if hi > lo:
                data[pos:pos + hi - lo] = np.frombuffer(chunk.buffers()[2], dtype=np.uint8)[lo:hi]
            offsets[row + 1:row + 1 + m] = off[1:]
            offsets[row + 1:row + 1 + m] += pos - lo
            row += m
            pos += hi - lo
            del chunk, off
        return cls(data, offsets)

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


def _subkeys(encrypt):
    """CMAC's subkeys K1 and K2 (NIST SP 800-38B, 6.1) from the block cipher."""
    def double(block):
        v = int.from_bytes(block, "big") << 1
        if v >> 128:
            v = (v ^ 0x87) & ((1 << 128) - 1)
        return v.to_bytes(BLOCK, "big")
    k1 = double(encrypt(bytes(BLOCK)))
    return (np.frombuffer(k1, dtype=np.uint8), np.frombuffer(double(k1), dtype=np.uint8))


def _cmac_slice(data, offsets, out, encrypt, k1, k2):
    """CMAC of the texts ``data[offsets[i] - offsets[0]:...]`` (all at most
    :data:`VECTOR_BYTES` long) into ``out`` ((n, 16) uint8), block by block:
    each step XORs the chain with every live ID's next block and encrypts
    them in one call."""
    n = offsets.size - 1
    lengths = np.diff(offsets)
    starts = offsets[:-1] - offsets[0]
    blocks = np.maximum(1, -(-lengths // BLOCK))
    width = int(blocks.max()) * BLOCK
    msg = np.zeros((n, width), dtype=np.uint8)
    for k in range(int(lengths.max()) if n else 0):      # byte k of every ID that long
        has = lengths > k
        if has.all():
            msg[:, k] = data[starts + k]
        else:
            rows = np.flatnonzero(has)
            msg[rows, k] = data[starts[rows] + k]
    # the last block: a complete one is XORed with K1, a short one padded 10...0 and XORed with K2
    complete = (lengths > 0) & (lengths % BLOCK == 0)
    short = np.flatnonzero(~complete)
    msg[short, lengths[short]] = 0x80
    subkey = np.where(complete[:, None], k1, k2)
    state = np.zeros((n, BLOCK), dtype=np.uint8)
    for j in range(width // BLOCK):
        live = blocks > j
        every = bool(live.all())
        rows = slice(None) if every else np.flatnonzero(live)
        x = state[rows] ^ msg[rows, j * BLOCK:(j + 1) * BLOCK]
        ends = blocks[rows] == j + 1
        if ends.all():
            x ^= subkey[rows]
        elif ends.any():
            x[ends] ^= subkey[rows][ends]
        state[rows] = np.frombuffer(encrypt(x.tobytes()), dtype=np.uint8).reshape(-1, BLOCK)
    out[:] = state


def hash_ids(ids, key):
    """AES-CMAC of each ID's text form (``str(v)`` as UTF-8) under the 32-byte
    ``key``, as an (n, 16) uint8 array.  ``ids``: an :class:`IdTexts` or a
    sequence of IDs."""
    if not isinstance(ids, IdTexts):
        ids = IdTexts.from_texts(ids)
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"the ID key must be bytes, got {type(key).__name__}")
    key = bytes(key)
    if len(key) != KEY_BYTES:
        raise ValueError(f"the ID key must be {KEY_BYTES} bytes, got {len(key)}")
    n = len(ids)
    out = np.empty((n, DIGEST_BYTES), dtype=np.uint8)
    encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    encrypt = encryptor.update
    k1, k2 = _subkeys(encrypt)
    lengths = np.diff(ids.offsets)
    long_rows = np.flatnonzero(lengths > VECTOR_BYTES)
    short_rows = np.flatnonzero(lengths <= VECTOR_BYTES) if long_rows.size else None
    if short_rows is None:
        for lo in range(0, n, SLICE_IDS):
            hi = min(n, lo + SLICE_IDS)
            a, b = int(ids.offsets[lo]), int(ids.offsets[hi])
            _cmac_slice(ids.data[a:b], ids.offsets[lo:hi + 1], out[lo:hi], encrypt, k1, k2)
        return out
    if short_rows.size:
        out[short_rows] = hash_ids(ids.take(short_rows), key)
    for r in long_rows.tolist():
        c = cmac.CMAC(algorithms.AES(key))
        c.update(ids.data[ids.offsets[r]:ids.offsets[r + 1]].tobytes())
        out[r] = np.frombuffer(c.finalize(), dtype=np.uint8)
    return out
