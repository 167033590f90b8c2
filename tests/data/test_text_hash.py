"""The ID hash kernel against a Python reference, and the repeat check
built on it (equal hashes are only candidates)."""
import numpy as np
import pyarrow as pa
import pytest

from fedforest.crypto.ids import IdTexts
from fedforest.data import columns as C
from fedforest.data import text_hash

M = (1 << 64) - 1


def reference(b):
    h = 0xCBF29CE484222325
    for byte in b:
        h = ((h ^ byte) * 0x100000001B3) & M
    h ^= (len(b) * 0x9E3779B97F4A7C15) & M
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & M
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & M
    return h ^ (h >> 31)


def test_text_hashes_equal_the_python_reference():
    texts = ["", "a", "ab", "ba", "é", "user-0000000001", "x" * 300, "a\x00", "a"]
    ids = IdTexts.from_texts(texts)
    got = text_hash.text_hashes(ids.data, ids.offsets)
    assert got.dtype == np.uint64
    assert got.tolist() == [reference(t.encode("utf-8")) for t in texts]
    assert got[1] == got[-1] and len(set(got[:-1].tolist())) == len(texts) - 1


@pytest.mark.parametrize("collide", [False, True])
def test_repeats_are_found_and_equal_hashes_of_different_ids_are_not_repeats(monkeypatch, collide):
    if collide:      # every ID hashes alike: only the text comparison can tell them apart
        monkeypatch.setattr(text_hash, "text_hashes", lambda data, offsets: np.zeros(offsets.size - 1, np.uint64))
    distinct = IdTexts.from_arrow(pa.array([f"id-{i}" for i in np.random.default_rng(1).permutation(5000)]))
    assert not C._repeats(distinct)
    repeated = IdTexts.from_arrow(pa.array([f"id-{i}" for i in [*range(4000), 3999 - 17, *range(4000, 4100)]]))
    assert C._repeats(repeated)
    assert not C._repeats(IdTexts.from_texts(["only"]))
