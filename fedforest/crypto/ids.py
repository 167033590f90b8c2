"""Keyed hashing of record IDs for private ID alignment."""
import hmac

import numpy as np

DIGEST_BYTES = 32


def hash_ids(ids, key):
    """HMAC-SHA256 of each ID's text form, as an (n, 32) uint8 array (one-shot
    digests, joined once: no per-ID hash object)."""
    key = bytes(key)
    joined = b"".join([hmac.digest(key, str(v).encode("utf-8"), "sha256") for v in ids])
    return np.frombuffer(joined, dtype=np.uint8).reshape(len(ids), DIGEST_BYTES).copy()
