"""Keyed hashing of record IDs for private ID alignment."""
import hashlib
import hmac

import numpy as np

DIGEST_BYTES = 32


def hash_ids(ids, key):
    """HMAC-SHA256 of each ID's text form, as an (n, 32) uint8 array."""
    out = np.empty((len(ids), DIGEST_BYTES), dtype=np.uint8)
    base = hmac.new(key, digestmod=hashlib.sha256)
    for i, v in enumerate(ids):
        h = base.copy()
        h.update(str(v).encode("utf-8"))
        out[i] = np.frombuffer(h.digest(), dtype=np.uint8)
    return out
