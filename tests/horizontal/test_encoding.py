"""The job-wide encoding of horizontal rows: vectorised category codes equal a
row-by-row reference on awkward values."""
import numpy as np
import pandas as pd

from fedforest.horizontal.encoding import MISSING, Encoding, category_codes, distinct_texts, text_of


def _reference(col, index, unseen):
    return np.array([index.get(MISSING if pd.isna(v) else text_of(v), unseen) for v in col], dtype=float)


def test_category_codes_equal_the_row_by_row_reference():
    rng = np.random.default_rng(0)
    cols = [pd.Series(rng.choice(["a", "b", None, "z"], 500)),
            pd.Series(rng.integers(0, 5, 500)),
            pd.Series(np.where(rng.random(500) < 0.2, np.nan, rng.integers(0, 4, 500).astype(float))),
            pd.Series([1, "1", 1.0, 2.5, None, "x"] * 10, dtype=object)]
    for col in cols:
        cats = sorted(distinct_texts(col))[:-1] + [MISSING]      # one value unseen on purpose
        index = {v: i for i, v in enumerate(cats)}
        for unseen in (-1, np.nan):
            got = category_codes(col, index, unseen).astype(float)
            assert np.array_equal(got, _reference(col, index, unseen), equal_nan=True)


def test_integer_valued_floats_and_integers_share_a_category():
    assert distinct_texts(pd.Series([1.0, 2.0, np.nan])) == distinct_texts(pd.Series([1, 2])) == {"1", "2"}


def test_cart_encoding_codes_text_and_keeps_numbers():
    enc = Encoding("cart", ["n", "t"], ["no", "yes"], [None, ["blue", "red", MISSING]])
    X = enc.features(pd.DataFrame({"n": [0.5, 2.0, 3.25], "t": ["red", None, "green"]}), "client 1")
    assert np.array_equal(X, [[0.5, 1.0], [2.0, 2.0], [3.25, np.nan]], equal_nan=True)   # green: unseen
