"""Property-based checks of what reads user files: table loaders, the job-file
parser, model readers.  Whatever the bytes, the answer is a table/config/model
or an InputError naming the file; never another exception, never a file
half-written."""
import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedforest.data.io import read_table
from fedforest.errors import InputError
from fedforest.federation.config import resolve

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _write(folder, name, data):
    path = os.path.join(folder, name)
    with open(path, "wb") as fh:
        fh.write(data)
    return path


@pytest.mark.parametrize("ext", [".csv", ".parquet", ".npy", ".npz", ".tsv"])
@SETTINGS
@given(data=st.binary(max_size=400))
def test_any_bytes_read_as_a_table_or_refused_clearly(tmp_path, ext, data):
    path = _write(tmp_path, "t" + ext, data)
    try:
        df = read_table(path, None, "party 1")
    except InputError as exc:
        assert str(exc).startswith("party 1: ")
    else:
        assert df.shape[0] > 0


@SETTINGS
@given(n=st.integers(0, 2000))
def test_a_truncated_parquet_file_is_refused_clearly(tmp_path, n):
    import pandas as pd
    full = tmp_path / "full.parquet"
    if not full.exists():
        pd.DataFrame({"id": ["a", "b", "c"], "x": [1.0, 2.0, np.nan]}).to_parquet(full)
    data = full.read_bytes()
    path = _write(tmp_path, "cut.parquet", data[: n % len(data)])
    with pytest.raises(InputError, match="cut.parquet"):
        read_table(path, "id", "party 1")


toml_values = st.recursive(
    st.none().map(lambda _: "none") | st.booleans() | st.integers(-10**6, 10**6)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3), max_leaves=5)
keys = st.sampled_from(["mode", "task", "data", "max_depth", "n_estimators", "random_state", "label_column",
                        "tree_type", "rounds", "xgb_eta", "progress", "model_dir", "nonsense", "criterion"])


def _toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(v)


@SETTINGS
@given(tables=st.dictionaries(st.sampled_from(["job", "forest", "icdta4fl", "fedxgbllr", "other"]),
                              st.dictionaries(keys, toml_values, max_size=4), max_size=3))
def test_any_job_file_resolves_or_is_refused_clearly(tmp_path, tables):
    text = "\n".join(f"[{t}]\n" + "\n".join(f"{k} = {_toml_value(v)}" for k, v in kv.items())
                     for t, kv in tables.items())
    path = _write(tmp_path, "job.toml", text.encode())
    try:
        cfg = resolve(path, {})
    except InputError:
        return
    assert cfg.mode in ("vertical", "icdta4fl", "fedxgbllr") or cfg.spec.name == cfg.mode


@SETTINGS
@given(data=st.binary(max_size=300))
def test_any_bytes_as_a_job_file_are_refused_clearly_or_read(tmp_path, data):
    path = _write(tmp_path, "job.toml", data)
    try:
        resolve(path, {})
    except InputError as exc:
        assert str(exc)


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """One horizontal and one vertical model, trained once."""
    import pandas as pd
    from sklearn.datasets import make_classification
    from fedforest.jobs import run_horizontal, run_vertical
    folder = tmp_path_factory.mktemp("models")
    X, y = make_classification(120, 4, random_state=0)
    df = pd.DataFrame(np.round(X, 3), columns=list("abcd"))
    df["y"] = y
    paths = []
    for k, part in enumerate(np.array_split(np.arange(120), 2), start=1):
        paths.append(str(folder / f"c{k}.csv"))
        df.iloc[part].to_csv(paths[-1], index=False)
    run_horizontal(paths, mode="icdta4fl", task="classification", label_column="y",
                   model_dir=str(folder / "h"), random_state=0)
    df.insert(0, "id", [f"r{i}" for i in range(120)])
    run_vertical("train", [df[["id", "a", "b", "y"]], df[["id", "c", "d"]]], task="classification",
                 label_column="y", model_dir=str(folder / "v"), n_estimators=2, random_state=0)
    return folder


@SETTINGS
@given(cut=st.integers(0, 10**6), flip=st.integers(0, 10**6))
def test_damaged_horizontal_model_files_are_refused_clearly(tmp_path, saved_models, cut, flip):
    from fedforest.horizontal.model_files import load_model
    data = (saved_models / "h" / "server" / "model.json").read_bytes()
    damaged = bytearray(data[: cut % len(data)])
    if damaged:
        damaged[flip % len(damaged)] ^= 0x20
    folder = tmp_path / "m"
    folder.mkdir(exist_ok=True)
    _write(folder, "model.json", bytes(damaged))
    try:
        doc = load_model(str(folder))
    except InputError as exc:
        assert str(exc).startswith("model_dir: ")
    else:
        assert doc["tree"]["feature"].size > 0


@SETTINGS
@given(data=st.binary(max_size=300), which=st.sampled_from(["manifest.json", "trees/tree-00000.npz"]))
def test_damaged_vertical_model_files_are_refused_clearly(tmp_path, saved_models, data, which):
    import shutil
    from fedforest.vertical import model_files
    folder = tmp_path / "master"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(saved_models / "v" / "master", folder)
    _write(folder, which, data)
    try:
        m = model_files.read_manifest(str(folder))
        model_files.read_trees(str(folder), m["n_trees"])
    except InputError as exc:
        assert str(exc).startswith("model: ")


@SETTINGS
@given(numbers=st.lists(st.integers(-10**6, 10**6), min_size=30, max_size=40, unique=True),
       token=st.sampled_from(["?", "-", "n/a", "missing", "x"]), where=st.data())
def test_numbers_with_a_stray_token_are_refused_or_numeric_never_text(tmp_path, numbers, token, where):
    """A column of at least 30 numbers with one stray token in up to 3 cells
    of a CSV file (so >= 90% of the cells are numbers) is refused naming the
    token and its first row; with the token in na_values it reads as numbers."""
    rows = where.draw(st.sets(st.integers(0, len(numbers) - 1), min_size=1, max_size=3))
    cells = [token if i in rows else str(v) for i, v in enumerate(numbers)]
    path = _write(tmp_path, "t.csv", ("c\n" + "\n".join(cells) + "\n").encode())
    with pytest.raises(InputError) as info:
        read_table(path, None, "party 1")
    assert repr(token) in str(info.value) and f"data row {min(rows) + 1}" in str(info.value).replace(
        "data rows", "data row")
    df = read_table(path, None, "party 1", na_values=[token])
    assert df["c"].dtype.kind in "if" and int(df["c"].isna().sum()) == len(rows)
