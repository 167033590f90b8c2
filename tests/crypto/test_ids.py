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


def _old_hash_ids(ids, key):
    """One hmac.digest per ID."""
    joined = b"".join([hmac.digest(bytes(key), str(v).encode("utf-8"), "sha256") for v in ids])
    return np.frombuffer(joined, dtype=np.uint8).reshape(len(ids), DIGEST_BYTES)


def test_hashes_equal_hmac_digest_on_every_length():
    """Texts of 0..200 bytes (one, two and four blocks, the padding edges at
    55/56 and 63/64 bytes), non-ASCII texts and keys of 16, 32 and 100 bytes
    (a key longer than a block is hashed first)."""
    rng = np.random.default_rng(3)
    ids = ["x" * n for n in range(201)] + ["é" * n for n in range(0, 60, 7)] + \
        ["".join(map(chr, rng.integers(32, 0x2FF, size=int(rng.integers(1, 90))))) for _ in range(300)] + \
        [str(v) for v in rng.integers(0, 10 ** 12, size=500)]
    for key in (bytes(range(16)), rng.bytes(32), rng.bytes(100)):
        assert np.array_equal(hash_ids(ids, key), _old_hash_ids(ids, key))


def test_id_texts_from_arrow_take_and_join():
    import pyarrow as pa
    from fedforest.crypto.ids import IdTexts
    texts = ["a", "", "bcd", "é", "007"]
    arr = pa.chunked_array([pa.array(texts[:2]), pa.array(texts[2:])]).slice(1)
    ids = IdTexts.from_arrow(arr)
    assert list(ids.to_numpy()) == texts[1:]
    assert list(ids.take(np.array([3, 0, 2])).to_numpy()) == ["007", "", "é"]
    assert ids.joined(0, 4) == "\x00".join(texts[1:]).encode()
    assert np.array_equal(hash_ids(ids, b"k"), _old_hash_ids(texts[1:], b"k"))


def test_worker_processes_give_the_same_hashes(monkeypatch):
    from fedforest.crypto import ids as ids_module
    monkeypatch.setattr(ids_module, "MIN_IDS_PER_WORKER", 100)
    monkeypatch.setattr(ids_module, "CHUNK_IDS", 37)
    texts = [f"user-{i}" + "y" * (i % 70) for i in range(1000)]
    key = bytes(range(40))
    assert np.array_equal(hash_ids(texts, key, workers=3), _old_hash_ids(texts, key))


def test_bad_key_or_workers_are_refused():
    import pytest
    with pytest.raises(TypeError, match="must be bytes"):
        hash_ids(["a"], "text key")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="workers"):
            hash_ids(["a"], b"k", workers=bad)
