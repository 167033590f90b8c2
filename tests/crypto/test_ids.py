"""Keyed ID hashes: AES-CMAC of each ID's text, one row per ID, equal to the
``cryptography`` package's CMAC of each ID."""
import numpy as np
import pytest
from cryptography.hazmat.primitives import cmac
from cryptography.hazmat.primitives.ciphers import algorithms

from fedforest.crypto import ids as ids_module
from fedforest.crypto.ids import DIGEST_BYTES, hash_ids


def _reference(ids, key):
    """One ``cryptography`` CMAC per ID."""
    out = []
    for v in ids:
        c = cmac.CMAC(algorithms.AES(bytes(key)))
        c.update(str(v).encode("utf-8"))
        out.append(c.finalize())
    return np.frombuffer(b"".join(out), dtype=np.uint8).reshape(len(ids), DIGEST_BYTES)


def test_id_hashes_are_aes_cmac_of_the_ids_text():
    key = bytes(range(32))
    ids = [0, 17, "A-113", 3.5, "é", -2]
    got = hash_ids(ids, key)
    assert got.shape == (len(ids), DIGEST_BYTES) and got.dtype == np.uint8
    assert np.array_equal(got, _reference(ids, key))
    # another key gives other hashes; no IDs give an empty table of the right width
    assert not np.array_equal(hash_ids(ids, bytes(32)), got)
    assert hash_ids([], key).shape == (0, DIGEST_BYTES)


def test_hashes_equal_cmac_on_every_length():
    """Texts of 0..200 bytes (the block edges at 15/16/17, 31/32/33 ... bytes; the
    IDs longer than the vectorised width go one by one), non-ASCII texts, slices
    of mixed lengths, and the same lengths in one slice (every ID ends on the same block)."""
    rng = np.random.default_rng(3)
    ids = ["x" * n for n in range(201)] + ["é" * n for n in range(0, 60, 7)] + \
        ["".join(map(chr, rng.integers(32, 0x2FF, size=int(rng.integers(1, 90))))) for _ in range(300)] + \
        [str(v) for v in rng.integers(0, 10 ** 12, size=500)]
    for key in (bytes(range(32)), rng.bytes(32)):
        assert np.array_equal(hash_ids(ids, key), _reference(ids, key))
    for n in (0, 1, 15, 16, 17, 32, 64):
        same = [chr(97 + i % 26) * n for i in range(40)]
        assert np.array_equal(hash_ids(same, key), _reference(same, key)), n


def test_slices_give_the_same_hashes(monkeypatch):
    texts = [f"user-{i}" + "y" * (i % 70) for i in range(1000)]
    key = bytes(range(32))
    whole = hash_ids(texts, key)
    monkeypatch.setattr(ids_module, "SLICE_IDS", 37)
    assert np.array_equal(hash_ids(texts, key), whole)
    assert np.array_equal(whole, _reference(texts, key))


def test_id_texts_from_arrow_take_and_join():
    import pyarrow as pa
    from fedforest.crypto.ids import IdTexts
    texts = ["a", "", "bcd", "é", "007"]
    arr = pa.chunked_array([pa.array(texts[:2]), pa.array(texts[2:])]).slice(1)
    ids = IdTexts.from_arrow(arr)
    assert list(ids.to_numpy()) == texts[1:]
    assert list(ids.take(np.array([3, 0, 2])).to_numpy()) == ["007", "", "é"]
    assert ids.joined(0, 4) == "\x00".join(texts[1:]).encode()
    assert np.array_equal(hash_ids(ids, bytes(32)), _reference(texts[1:], bytes(32)))


def test_bad_keys_are_refused():
    with pytest.raises(TypeError, match="must be bytes"):
        hash_ids(["a"], "text key")
    for bad in (b"", b"k" * 16, b"k" * 33):
        with pytest.raises(ValueError, match="32 bytes"):
            hash_ids(["a"], bad)
