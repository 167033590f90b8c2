"""How a job reads its tables: a numeric column with a few stray tokens is
refused before any work (and ``na_values`` / ``categorical_columns`` are the
two ways out), a CSV file with another separator is named as such, and a
training table needs at least two rows."""
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from fedforest.data.io import check_mistyped_columns, read_table
from fedforest.errors import InputError, RemoteError
from fedforest.federation.config import resolve
from fedforest.jobs import run_horizontal, run_vertical

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N = 60


def _ids(n=N):
    return [f"u{i}" for i in range(n)]


def party1(n=N):
    rng = np.random.default_rng(0)
    a = rng.normal(size=n)
    return pd.DataFrame({"id": _ids(n), "a": a, "label": (a > 0).astype(int)})


def party2_with_stray_token(n=N):
    """An integer column 'age' (5..64) with '?' in two cells."""
    age = pd.Series(np.arange(n) + 5, dtype=object)
    age[[3, 17]] = "?"
    return pd.DataFrame({"id": _ids(n), "age": age, "b": np.linspace(0, 1, n)})


def write_csv(df, path):
    df.to_csv(path, index=False)
    return str(path)


def files_under(folder):
    return [os.path.join(r, f) for r, _d, fs in os.walk(folder) for f in fs]


def vertical_opts(tmp_path, **kw):
    return dict(dict(task="classification", label_column="label", id_column="id",
                     model_dir=str(tmp_path / "model"), n_estimators=2, random_state=0), **kw)


def remote_message(exc):
    if isinstance(exc, RemoteError):
        assert exc.exc_type == "InputError", str(exc)
        return exc.remote_message
    return str(exc)


# ---------------------------------------------------------------------------
# The rule
# ---------------------------------------------------------------------------
def test_a_numeric_column_with_a_stray_token_is_refused_with_the_tokens_rows_and_ways_out(tmp_path):
    path = write_csv(party2_with_stray_token(), tmp_path / "p2.csv")
    with pytest.raises(InputError) as info:
        read_table(path, "id", "party 2")
    msg = str(info.value)
    assert msg.startswith("party 2: ")
    assert "p2.csv" in msg and "'age'" in msg and "'?'" in msg
    assert "data rows 4, 18; their IDs are printed where the file was read" in msg and "'u3'" not in msg
    assert 'na_values = ["?"]' in msg and 'categorical_columns = ["age"]' in msg


def test_na_values_make_the_column_numeric_and_categorical_columns_make_it_text(tmp_path):
    path = write_csv(party2_with_stray_token(), tmp_path / "p2.csv")
    df = read_table(path, "id", "party 2", na_values=["?"])
    assert df["age"].dtype.kind == "f" and df["age"].isna().sum() == 2
    df = read_table(path, "id", "party 2", categorical_columns=["age"])
    assert df["age"].dropna().map(type).eq(str).all()


def test_na_values_apply_to_parquet_text_columns_too(tmp_path):
    pytest.importorskip("pyarrow")
    df = party2_with_stray_token()
    df["age"] = df["age"].astype(str)
    path = str(tmp_path / "p2.parquet")
    df.to_parquet(path)
    with pytest.raises(InputError, match="'age'"):
        read_table(path, "id", "party 2")
    out = read_table(path, "id", "party 2", na_values=["?"])
    assert out["age"].dtype.kind == "f" and out["age"].isna().sum() == 2


@pytest.mark.parametrize("values", [
    ["red", "green", "blue", "7"],                       # text categories with one number: text
    ["1", "2", "x", "y", "y", "y"],                      # numbers: 2 of 6 cells, 2 of 4 values
    ["S", "M", "L", "XL", "10", "12", "S", "M"],         # numbers: 2 of 8 cells, 2 of 6 values
])
def test_text_columns_outside_the_rule_stay_text(values):
    check_mistyped_columns(pd.DataFrame({"c": values}, dtype=object), "t.csv", "party 1")


@pytest.mark.parametrize("values", [
    [str(i) for i in range(30)] + ["?"] * 40,            # 30 of 31 distinct values are numbers
    ["0", "1"] * 20 + ["-"],                             # 40 of 41 cells are numbers
    [str(i) for i in range(30)] + ["nan", "inf"],        # non-finite texts are tokens
    [str(i) for i in range(20)] + ["a", "b", "c", "d"],  # four distinct tokens: still mostly numbers
    ["1", "x"],                                          # half the cells are numbers
])
def test_columns_inside_the_rule_are_refused(values):
    with pytest.raises(InputError, match="column 'c' holds numbers"):
        check_mistyped_columns(pd.DataFrame({"c": values}, dtype=object), "t.csv", "party 1")


def test_the_label_and_id_columns_are_not_checked(tmp_path):
    df = pd.DataFrame({"id": [str(i) for i in range(20)] + ["x"], "y": [str(i) for i in range(20)] + ["?"]})
    path = write_csv(df, tmp_path / "t.csv")
    assert read_table(path, "id", "party 1", label_column="y").shape == (21, 2)


def test_job_settings_are_lists_of_texts():
    data = {"data": ["a.csv"]}
    cfg = resolve(None, dict(data, na_values=["?", ""], categorical_columns=["zip"]))
    assert cfg.na_values == ["?", ""] and cfg.categorical_columns == ["zip"]
    with pytest.raises(InputError, match="na_values: must be None or a list of texts"):
        resolve(None, dict(data, na_values="?"))
    with pytest.raises(InputError, match="categorical_columns"):
        resolve(None, dict(data, categorical_columns=[3]))


def test_the_flags_take_several_texts():
    from fedforest.cli import build_parser
    args = build_parser().parse_args(["train", "--data", "a.csv", "--na-values", "?", "-", "7",
                                      "--categorical-columns", "zip"])
    flags = vars(args)
    assert flags["na_values"] == ["?", "-", "7"] and flags["categorical_columns"] == ["zip"]


# ---------------------------------------------------------------------------
# Through jobs: vertical, horizontal, split
# ---------------------------------------------------------------------------
def test_vertical_training_refuses_the_column_before_writing_anything(tmp_path):
    p2 = write_csv(party2_with_stray_token(), tmp_path / "p2.csv")
    with pytest.raises((InputError, RemoteError)) as info:
        run_vertical("train", [party1(), p2], **vertical_opts(tmp_path))
    assert getattr(info.value, "rank", 2) == 2
    msg = remote_message(info.value)
    assert "'age'" in msg and "'?'" in msg and "na_values" in msg
    assert not files_under(tmp_path / "model")


def test_vertical_na_values_train_a_numeric_column(tmp_path):
    p2 = write_csv(party2_with_stray_token(), tmp_path / "p2.csv")
    run_vertical("train", [party1(), p2], **vertical_opts(tmp_path, na_values=["?"]))
    manifest = json.loads((tmp_path / "model" / "party-2" / "manifest.json").read_text())
    assert manifest["columns"] == ["age", "b"]
    assert "age" not in (manifest.get("categories") or {})          # numeric: thresholds, not codes
    # predict reads with the same setting
    out = run_vertical("predict", [party1(), p2], id_column="id", model_dir=str(tmp_path / "model"),
                       output=str(tmp_path / "pred.csv"), na_values=["?"])
    assert len(out["prediction"]) == N


def test_vertical_categorical_columns_train_a_text_column(tmp_path):
    p2 = write_csv(party2_with_stray_token(), tmp_path / "p2.csv")
    run_vertical("train", [party1(), p2], **vertical_opts(tmp_path, categorical_columns=["age"]))
    manifest = json.loads((tmp_path / "model" / "party-2" / "manifest.json").read_text())
    cats = manifest["categories"]["age"]
    assert "?" in cats and cats == sorted(cats) and "10" in cats


def _clients(tmp_path, n_clients=2):
    rng = np.random.default_rng(1)
    paths = []
    for k in range(n_clients):
        x = rng.integers(0, 50, N)
        df = pd.DataFrame({"id": [f"c{k}-{i}" for i in range(N)], "x": x.astype(object),
                           "z": rng.normal(size=N), "label": np.where(x > 25, "yes", "no")})
        df.loc[[5, 9], "x"] = "?"
        paths.append(write_csv(df, tmp_path / f"client{k + 1}.csv"))
    return paths


def horizontal_opts(tmp_path, **kw):
    return dict(dict(mode="fedxgbllr", task="classification", label_column="label",
                     model_dir=str(tmp_path / "hmodel"), xgb_trees=4, rounds=1, local_epochs=1,
                     random_state=0), **kw)


def test_horizontal_training_refuses_the_column_and_na_values_make_it_numeric(tmp_path):
    from fedforest.horizontal.model_files import load_model
    data = _clients(tmp_path)
    with pytest.raises((InputError, RemoteError)) as info:
        run_horizontal(data, **horizontal_opts(tmp_path))
    msg = remote_message(info.value)
    # both clients hold the stray '?': whichever reports first names its own file
    assert ("client1.csv" in msg or "client2.csv" in msg) and "'x'" in msg and "'?'" in msg \
        and "data rows 6, 10" in msg
    assert not files_under(tmp_path / "hmodel")
    run_horizontal(data, **horizontal_opts(tmp_path, na_values=["?"]))
    enc = load_model(str(tmp_path / "hmodel"))["encoding"]
    assert dict(zip(enc.columns, enc.categories))["x"] is None        # numeric


def test_horizontal_categorical_columns_make_it_text(tmp_path):
    from fedforest.horizontal.model_files import load_model
    data = _clients(tmp_path)
    run_horizontal(data, **horizontal_opts(tmp_path, categorical_columns=["x"]))
    enc = load_model(str(tmp_path / "hmodel"))["encoding"]
    cats = dict(zip(enc.columns, enc.categories))["x"]
    assert "?" in cats and "10" in cats


def cli(*args):
    return subprocess.run([sys.executable, "-m", "fedforest", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_split_refuses_the_column_and_takes_na_values(tmp_path):
    df = party2_with_stray_token()
    df["label"] = party1()["label"]
    table = write_csv(df, tmp_path / "table.csv")
    out = tmp_path / "out"
    proc = cli("split", "--input", table, "--parties", "2", "--label-column", "label", "--out", str(out))
    assert proc.returncode == 2
    assert "'age'" in proc.stderr and "'?'" in proc.stderr and "--na-values" in proc.stderr
    assert not out.exists()
    proc = cli("split", "--input", table, "--parties", "2", "--label-column", "label", "--out", str(out),
               "--na-values", "?")
    assert proc.returncode == 0, proc.stderr
    proc = cli("split", "--input", table, "--by", "rows", "--parties", "2", "--label-column", "label",
               "--out", str(tmp_path / "rows"), "--categorical-columns", "age")
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------------------
# Other separators; one-row tables
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("sep, name", [(";", "semicolon"), ("\t", "tab"), ("|", "pipe")])
def test_a_csv_with_another_separator_is_named(tmp_path, sep, name):
    path = tmp_path / "p1.csv"
    path.write_text(sep.join(["id", "a", "label"]) + "\n" + sep.join(["u1", "0.5", "1"]) + "\n")
    with pytest.raises(InputError) as info:
        read_table(str(path), "id", "party 1")
    msg = str(info.value)
    assert "single column" in msg and name in msg and "has no ID column" not in msg


def test_a_semicolon_file_in_a_job_is_named(tmp_path):
    p1 = party1()
    path = tmp_path / "p1.csv"
    p1.to_csv(path, index=False, sep=";")
    with pytest.raises((InputError, RemoteError)) as info:
        run_vertical("train", [str(path), party2_with_stray_token().drop(columns="age")],
                     **vertical_opts(tmp_path))
    assert "semicolon" in remote_message(info.value)


def test_a_one_row_vertical_table_is_a_row_count_error(tmp_path):
    p1, p2 = party1(1), pd.DataFrame({"id": _ids(1), "b": [0.5]})
    with pytest.raises((InputError, RemoteError)) as info:
        run_vertical("train", [write_csv(p1, tmp_path / "p1.csv"), p2], **vertical_opts(tmp_path))
    msg = remote_message(info.value)
    assert "1 row" in msg and "at least 2 rows" in msg and "one class" not in msg
    assert not files_under(tmp_path / "model")


def test_a_one_row_horizontal_job_is_a_row_count_error(tmp_path):
    path = write_csv(pd.DataFrame({"id": ["a"], "x": [1.0], "label": ["yes"]}), tmp_path / "c1.csv")
    with pytest.raises((InputError, RemoteError)) as info:
        run_horizontal([path], **horizontal_opts(tmp_path))
    msg = remote_message(info.value)
    assert "1 row" in msg and "at least 2 rows" in msg and "one class" not in msg
