"""A column that is mostly numbers (at least half of its non-missing cells,
or 90% of its distinct values) is never read as text silently, whatever the
number of its non-numeric values: it is refused with each value and the rows
holding it (the first rows' IDs printed where the file is read, not put in
the error), unless ``na_values`` lists them (the column is then numeric) or
``categorical_columns`` lists the column."""
import json
import os

import numpy as np
import pandas as pd
import pytest

from fedforest.data.io import SHOWN_TOKENS, check_mistyped_columns, read_table
from fedforest.errors import InputError, RemoteError
from fedforest.jobs import run_vertical

N = 426
MARKERS = {3: "?", 40: "-", 77: "n/a", 91: "unknown", 200: "?"}     # 4 spellings in 5 of 426 rows
WORDS = ["low", "mid", "high", "none", "few", "many"]


def _ids(n=N):
    return [f"r{i}" for i in range(n)]


def with_markers(n=N):
    """A numeric column 'x' (two decimals, ~330 distinct values) with 4 missing-value spellings."""
    x = pd.Series(np.round(np.random.default_rng(0).normal(50, 20, n), 2), dtype=object)
    for row, text in MARKERS.items():
        x[row] = text
    return pd.DataFrame({"id": _ids(n), "x": x})


def every_third_a_word(n=300):
    """Numbers 0..n-1 with every third cell one of 6 words."""
    x = pd.Series(np.arange(n), dtype=object)
    x[::3] = [WORDS[i % len(WORDS)] for i in range(len(x[::3]))]
    return pd.DataFrame({"id": _ids(n), "x": x})


def write(df, path):
    """``df`` as CSV, or as Parquet (every cell of 'x' a text) where ``path`` ends so."""
    if str(path).endswith(".parquet"):
        pytest.importorskip("pyarrow")
        df.astype({"x": str}).to_parquet(path)
    else:
        df.to_csv(path, index=False)
    return str(path)


def refusal(path, **kw):
    with pytest.raises(InputError) as info:
        read_table(path, "id", "party 2", **kw)
    return str(info.value)


@pytest.mark.parametrize("name", ["p2.csv", "p2.parquet"])
def test_four_missing_value_spellings_are_refused_with_each_and_its_rows(tmp_path, capsys, name):
    msg = refusal(write(with_markers(), tmp_path / name))
    assert "column 'x' holds numbers (421 of its 426 non-missing cells) and 4 non-numeric values: " \
           "'?' in 2 rows, '-' in 1 row, 'n/a' in 1 row, 'unknown' in 1 row" in msg, msg
    assert "(at data rows 4, 41, 78, 92, 201; their IDs are printed where the file was read)" in msg
    assert "'r3'" not in msg
    assert f"party 2: IDs of data rows 4, 41, 78, 92, 201 ({str(tmp_path / name)!r}, column 'x', " \
           "non-numeric values): 'r3', 'r40', 'r77', 'r91', 'r200'" in capsys.readouterr().err
    assert 'na_values = ["?", "-", "n/a", "unknown"]' in msg and 'categorical_columns = ["x"]' in msg


def test_the_four_spellings_in_na_values_make_the_column_numeric(tmp_path):
    df = read_table(write(with_markers(), tmp_path / "p2.csv"), "id", "party 2",
                    na_values=["?", "-", "n/a", "unknown"])
    assert df["x"].dtype.kind == "f" and df["x"].isna().sum() == 5
    # three of the four still leave one: refused, naming only that one
    msg = refusal(str(tmp_path / "p2.csv"), na_values=["?", "-", "n/a"])
    assert "1 non-numeric value: 'unknown' in 1 row (at data row 92; its ID is printed " in msg


def test_every_third_cell_a_word_is_refused_with_the_words_and_both_ways_out(tmp_path):
    msg = refusal(write(every_third_a_word(), tmp_path / "p2.csv"))
    assert "holds numbers (200 of its 300 non-missing cells) and 6 non-numeric values: " in msg, msg
    for word in WORDS:
        assert f"{word!r} in " in msg
    assert "first at data rows 1, 4, 7, 10, 13, ...; their IDs are printed where the file was read" in msg
    assert "na_values = [" in msg and 'categorical_columns = ["x"]' in msg
    # declared categorical: a text column
    df = read_table(str(tmp_path / "p2.csv"), "id", "party 2", categorical_columns=["x"])
    assert df["x"].map(type).eq(str).all()


def test_many_non_numeric_values_are_listed_most_frequent_first_and_counted(tmp_path):
    n = 200
    x = pd.Series(np.arange(n), dtype=object)
    tokens = [f"t{i:02d}" for i in range(25)]
    for i, t in enumerate(tokens):
        x[4 * i] = t
    x[[1, 2]] = "t24"                                     # the most frequent: 3 rows
    msg = refusal(write(pd.DataFrame({"id": _ids(n), "x": x}), tmp_path / "p2.csv"))
    assert "25 non-numeric values: 't24' in 3 rows, 't00' in 1 row, " in msg, msg
    assert f"and {25 - SHOWN_TOKENS} more in {25 - SHOWN_TOKENS} rows" in msg
    assert "list all 25 of them in na_values" in msg


@pytest.mark.parametrize("values", [
    WORDS * 10 + ["1", "2", "3"],                         # a text column with a few numbers
    ["S", "M", "L", "XL", "10", "12", "S", "M", "L"],     # sizes: 2 numbers in 9 cells, 2 of 6 values
])
def test_text_columns_with_a_minority_of_numbers_stay_text(values):
    check_mistyped_columns(pd.DataFrame({"c": values}, dtype=object), "t.csv", "party 1")


def test_a_vertical_job_refuses_the_column_before_writing_anything(tmp_path):
    p2 = write(with_markers(), tmp_path / "p2.csv")
    a = np.random.default_rng(3).normal(size=N)
    p1 = pd.DataFrame({"id": _ids(), "a": a, "label": (a > 0).astype(int)})
    opts = dict(task="classification", label_column="label", id_column="id",
                model_dir=str(tmp_path / "model"), n_estimators=2, random_state=0)
    with pytest.raises((InputError, RemoteError)) as info:
        run_vertical("train", [p1, p2], **opts)
    msg = getattr(info.value, "remote_message", str(info.value))
    assert "'x'" in msg and "4 non-numeric values" in msg and "na_values" in msg
    assert not [f for _r, _d, fs in os.walk(tmp_path / "model") for f in fs]
    run_vertical("train", [p1, p2], **dict(opts, na_values=["?", "-", "n/a", "unknown"]))
    manifest = json.loads((tmp_path / "model" / "party-2" / "manifest.json").read_text())
    assert manifest["columns"] == ["x"] and "x" not in (manifest.get("categories") or {})
