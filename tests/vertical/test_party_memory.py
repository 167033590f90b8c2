"""A party's table read in blocks: the same values, IDs, labels, categories,
fingerprint and bins as the whole-table reader; no float64 matrix kept after
binning; a table that cannot fit the rank's memory refused with the estimate."""
import hashlib
import json

import numpy as np
import pandas as pd
import pytest

from fedforest.data import columns as C
from fedforest.data.io import check_ids, encode_features, read_table
from fedforest.errors import InputError
from fedforest.tree.binning import fit_bins, transform_bins
from fedforest.tree.growth import SplitSettings
from fedforest.tree.labels import PlainLabels
from fedforest.tree.params import ForestParams, validate
from fedforest.vertical.party_splitter import PartySplitter

N = 300


def _frame(n=N):
    rng = np.random.default_rng(1)
    a = rng.normal(size=n)                       # float64 values (not float32)
    b = np.round(rng.normal(size=n) * 8) / 4      # float32-exact values
    b[::7] = np.nan
    city = rng.choice(["Zürich", "Bern", "Aarau", "bern"], size=n).astype(object)
    city[5] = None
    # numbers in the first blocks, text from row 0.45 n on (a text column: fewer
    # than half its cells and of its distinct values are numbers)
    late_text = np.arange(n).astype(object)
    for i in range(int(0.45 * n), n):
        late_text[i] = f"t{i}"
    return pd.DataFrame({"id": [f"r{i:05d}" for i in rng.permutation(n)], "a": a, "b": b, "city": city,
                         "late": late_text, "flag": rng.random(n) > 0.5, "code": rng.integers(0, 5, n),
                         "label": (a > 0).astype(int)})


def _old(path, categorical=("code",)):
    """The whole-table reader and encoder (what a party held before)."""
    df = read_table(path, "id", "party 1", na_values=[], categorical_columns=list(categorical),
                    label_column="label")
    ids = check_ids(df["id"], "party 1")
    y = df["label"].to_numpy()
    cols = [c for c in df.columns if c not in ("id", "label")]
    X, cats, unseen = encode_features(df, cols, "party 1")
    h = hashlib.sha256()
    h.update(json.dumps(cols).encode())
    h.update(np.ascontiguousarray(X).tobytes())
    h.update("\x00".join(ids).encode())
    h.update(np.asarray(y).astype(str).tobytes())
    return ids, y, cols, X, cats, h.hexdigest()


@pytest.mark.parametrize("ext", [".csv", ".parquet"])
def test_block_reading_equals_the_whole_table_reader(tmp_path, ext):
    path = str(tmp_path / f"p{ext}")
    df = _frame()
    if ext == ".csv":
        df.to_csv(path, index=False)
    else:
        df["late"] = df["late"].astype(str)
        df.to_parquet(path, index=False)
    ids, y, cols, X, cats, fp = _old(path)
    # blocks of ~200 bytes of CSV (a few rows) or 64-row Parquet batches
    t = C.read_columns(path, "id", "party 1", label_column="label", categorical_columns=["code"],
                       block_bytes=200)
    if ext == ".parquet":
        C.PARQUET_BATCH_ROWS, old_rows = 64, C.PARQUET_BATCH_ROWS
        try:
            t = C.read_columns(path, "id", "party 1", label_column="label", categorical_columns=["code"])
        finally:
            C.PARQUET_BATCH_ROWS = old_rows
    assert t.columns == cols
    assert list(t.ids.to_numpy()) == list(ids)
    assert y.dtype == t.y.dtype and np.array_equal(y, t.y)
    assert t.categories == cats and "late" in cats and "city" in cats
    dense = t.dense()
    assert np.array_equal(dense, X, equal_nan=True)
    assert dense.tobytes() == X.tobytes()
    assert t.fingerprint() == fp
    # float32 kept only where it is exact
    dtypes = dict(zip(t.columns, t.dtypes()))
    assert dtypes["b"] == np.float32 and dtypes["a"] == np.float64


def test_text_encoding_equals_the_previous_loop():
    rng = np.random.default_rng(2)
    words = np.array(["b", "a", "Ä", "a b", "", "zz", "é"], dtype=object)
    col = pd.Series(rng.choice(words, size=500)).astype(object)
    col[::11] = None
    df = pd.DataFrame({"t": col})
    X, cats, unseen = encode_features(df, ["t"], "p")
    ref_cats = sorted(set(col.dropna()))
    lookup = {c: float(i) for i, c in enumerate(ref_cats)}
    ref = np.array([np.nan if v is None else lookup[v] for v in col])
    assert cats["t"] == ref_cats and unseen == 0
    assert np.array_equal(X[:, 0], ref, equal_nan=True)
    # prediction: unseen texts become missing and are counted
    X2, _, unseen2 = encode_features(pd.DataFrame({"t": ["a", "new", None, "zz"]}), ["t"], "p",
                                     {"t": ref_cats})
    assert unseen2 == 1 and np.array_equal(X2[:, 0], [lookup["a"], np.nan, np.nan, lookup["zz"]],
                                           equal_nan=True)


def _settings(method, n, d):
    params = validate(ForestParams(n_estimators=1, split_method=method, max_bins=32), "classification")
    return SplitSettings(params, n, True, 2, d)


@pytest.mark.parametrize("method", ["hist", "exact"])
def test_splitter_from_aligned_columns_keeps_no_float64_copy(tmp_path, method):
    path = str(tmp_path / "p.csv")
    _frame().to_csv(path, index=False)
    t = C.read_columns(path, "id", "party 1", label_column="label", categorical_columns=["code"],
                       block_bytes=200)
    positions = np.random.default_rng(0).permutation(t.n_rows)[: t.n_rows - 17]
    X = t.dense()[positions]
    labels = PlainLabels(np.zeros(positions.size, dtype=np.int32), True, 2)
    sp = PartySplitter(C.AlignedColumns(t, positions), _settings(method, positions.size, X.shape[1]), labels)
    assert all(d is None for d in t.dtypes())          # every stored column freed
    if method == "hist":
        assert sp.X is None and sp.Xb.dtype == np.uint8 and sp.Xb.nbytes == X.size
        edges, n_bins = fit_bins(X, 32)
        assert np.array_equal(sp.edges, edges) and np.array_equal(sp.n_bins, n_bins)
        assert np.array_equal(sp.Xb, transform_bins(X, edges, n_bins))
    else:
        assert sp.X.dtype == np.float32 and sp.X.flags.f_contiguous
        assert np.array_equal(sp.X, X.astype(np.float32), equal_nan=True)


def test_a_table_too_large_for_the_rank_is_refused_with_the_estimate(tmp_path):
    path = str(tmp_path / "p.csv")
    _frame(5000).to_csv(path, index=False)
    rows, cols, exact = C.estimate_shape(path)
    assert cols == 8 and abs(rows - 5000) <= 50
    with pytest.raises(InputError) as err:
        C.check_table_memory(path, "party 1", memory_mb=100)
    text = str(err.value)
    need = C.table_bytes(rows, cols) / 2 ** 20
    assert f"about {need:,.0f} MiB" in text and "8 columns" in text and "100 MiB (memory_mb)" in text
    C.check_table_memory(path, "party 1", memory_mb=need + 1)       # fits: no refusal


def test_chunked_columns_equal_the_concatenated_blocks(monkeypatch):
    """A column read block by block into chunks (blocks crossing chunk
    boundaries, float32 blocks, then a float64 one) is the concatenation of
    its blocks: values and dtype (float64 once any block needs it)."""
    monkeypatch.setattr(C, "CHUNK_ROWS", 7)
    rng = np.random.default_rng(5)
    for kinds in (["32", "32", "32"], ["32", "64", "32"], ["64"], ["32"] * 5):
        blocks = [C.narrow(rng.integers(0, 50, rng.integers(1, 20)).astype(np.float64) if k == "32"
                           else rng.normal(size=rng.integers(1, 20))) for k in kinds]
        assert [b.dtype.itemsize * 8 for b in blocks] == [int(k) for k in kinds]
        col = C._Chunks()
        for b in blocks:
            col.append(b)
        got, want = col.take(), np.concatenate(blocks)
        assert got.dtype == want.dtype and np.array_equal(got, want)
        assert col.chunks == []                    # every chunk freed


@pytest.mark.parametrize("y", [np.array([3, -2, 0, 3, 7] * 40000), np.array([2 ** 62, -5, 0]),
                               np.array([0, 1, 255], dtype=np.uint8), np.array([1.5, np.nan, -0.25]),
                               np.array(["No", "Yes", "Maybe"], dtype=object), np.array([], dtype=np.int64),
                               np.array([True, False])])
def test_label_fingerprint_bytes_are_the_labels_texts(y):
    assert b"".join(C.label_text_blocks(y)) == y.astype(str).tobytes()
