"""Keyed ID hashes: HMAC-SHA256 of each ID's text, one row per ID."""
import hashlib
import hmac

import numpy as np

from fedforest.crypto.ids import DIGEST_BYTES, hash_ids


def test_id_hashes_are_hmac_sha256_of_the_ids_text():
    key = bytes(range(32))
    ids = [0, 17, "A-113", 3.5, "é", -2]
    got = hash_ids(ids, key)
    assert got.shape == (len(ids), DIGEST_BYTES) and got.dtype == np.uint8
    for row, v in zip(got, ids):
        assert row.tobytes() == hmac.new(key, str(v).encode("utf-8"), hashlib.sha256).digest()
    # another key gives other hashes; no IDs give an empty table of the right width
    assert not np.array_equal(hash_ids(ids, bytes(32)), got)
    assert hash_ids([], key).shape == (0, DIGEST_BYTES)
