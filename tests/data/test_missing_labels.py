"""A label cell that is missing in any spelling (empty, ``NA``, ``nan``,
``NaN``, ``null``, ... or one of the job's ``na_values``) is a missing label,
never a class: training refuses it before any work, counting every spelling
together and naming the first rows (their IDs printed by the party that read
the file, not put in the error, which goes to the master); ``evaluate``
drops such truth rows; prediction reads such a file."""
import json
import os

import numpy as np
import pandas as pd
import pytest

from fedforest.data.io import LABEL_NA_TEXTS, check_labels, label_missing, read_table
from fedforest.data.validation import encode_labels
from fedforest.errors import InputError, RemoteError
from fedforest.jobs import run_horizontal, run_job

N = 60
# rows 3, 17, 25, 31, 40, 52: one spelling each (the last one a job's na_values text)
GAPS = {3: "NaN", 17: "nan", 25: "", 31: "NA", 40: "null", 52: "?"}


def _ids(n=N, prefix="u"):
    return [f"{prefix}{i}" for i in range(n)]


def _labels(kind, n=N):
    a = np.random.default_rng(0).normal(size=n)
    if kind == "text":
        return a, np.where(a > 0, "malignant", "benign").astype(object)
    return a, (a > 0).astype(int).astype(object)


def label_party(kind="text", gaps=GAPS, n=N):
    a, y = _labels(kind, n)
    for row, text in gaps.items():
        y[row] = text
    return pd.DataFrame({"id": _ids(n), "a": a, "label": y})


def feature_party(n=N):
    return pd.DataFrame({"id": _ids(n), "b": np.random.default_rng(1).normal(size=n)})


def write(df, path):
    path = str(path)
    if path.endswith(".parquet"):
        df.astype({"label": str}).to_parquet(path)
    else:
        df.to_csv(path, index=False)
    return path


def train(tmp_path, data, mode="vertical", **kw):
    opts = dict(mode=mode, task="classification", label_column="label", id_column="id",
                model_dir=str(tmp_path / "model"), n_estimators=2, random_state=0)
    return run_job("train", data, **dict(opts, **kw))


def failure(info):
    exc = info.value
    if isinstance(exc, RemoteError):
        assert exc.exc_type == "InputError", str(exc)
        return exc.remote_message
    return str(exc)


def files_under(folder):
    return [os.path.join(r, f) for r, _d, fs in os.walk(folder) for f in fs]


# ---------------------------------------------------------------------------
# Vertical training: refused before any work, every spelling counted
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["vertical", "vertical_boost"])
@pytest.mark.parametrize("kind", ["text", "integer"])
def test_labels_missing_in_any_spelling_are_refused_together_naming_rows_and_ids(tmp_path, capsys, mode,
                                                                                 kind):
    path = write(label_party(kind), tmp_path / "p1.csv")
    with pytest.raises((InputError, RemoteError)) as info:
        train(tmp_path, [path, feature_party()], mode=mode, na_values=["?"])
    msg = failure(info)
    assert msg.startswith("party 1: label column 'label': 6 rows have no label (first at data rows 4, 18, 26, "
                          "32, 41, ...; their IDs are printed where the file was read)"), msg
    assert "never a class" in msg
    assert "'u3'" not in msg                               # the error goes to the master: no ID in it
    assert "party 1: IDs of data rows 4, 18, 26, 32, 41 (label column 'label', no label): 'u3', 'u17', " \
           "'u25', 'u31', 'u40'" in capsys.readouterr().err
    assert not files_under(tmp_path / "model")


@pytest.mark.parametrize("mode", ["vertical", "vertical_boost"])
def test_two_nan_spellings_are_not_classes(tmp_path, capsys, mode):
    """Two rows labelled NaN/nan trained a 4-class forest (boosting: 3-class softmax)."""
    path = write(label_party(gaps={3: "NaN", 17: "nan"}), tmp_path / "p1.csv")
    with pytest.raises((InputError, RemoteError)) as info:
        train(tmp_path, [path, feature_party()], mode=mode)
    assert "2 rows have no label (at data rows 4, 18; their IDs are printed " in failure(info)
    assert ": 'u3', 'u17' (printed only here" in capsys.readouterr().err
    assert not files_under(tmp_path / "model")


@pytest.mark.parametrize("source", ["parquet", "frame"])
def test_other_sources_count_the_spellings_too(tmp_path, capsys, source):
    pytest.importorskip("pyarrow")
    df = label_party(gaps={5: "nan", 9: "None"})
    data = df if source == "frame" else write(df, tmp_path / "p1.parquet")
    with pytest.raises((InputError, RemoteError)) as info:
        train(tmp_path, [data, feature_party()])
    assert "2 rows have no label (at data rows 6, 10; " in failure(info)
    assert ": 'u5', 'u9' (printed only here" in capsys.readouterr().err


def test_a_label_column_without_gaps_trains_its_two_classes(tmp_path):
    path = write(label_party(gaps={}), tmp_path / "p1.csv")
    train(tmp_path, [path, feature_party()])
    manifest = json.loads((tmp_path / "model" / "master" / "manifest.json").read_text())
    assert manifest["classes"] == ["benign", "malignant"]


def test_prediction_reads_a_label_column_with_gaps(tmp_path):
    train(tmp_path, [write(label_party(gaps={}), tmp_path / "train.csv"), feature_party()])
    test = write(label_party(gaps={1: "", 2: "nan"}), tmp_path / "test.csv")
    out = run_job("predict", [test, feature_party()], mode="vertical", id_column="id",
                  model_dir=str(tmp_path / "model"), output=str(tmp_path / "pred.csv"))
    assert len(out["prediction"]) == N
    assert set(out["prediction"]) <= {"benign", "malignant"}


# ---------------------------------------------------------------------------
# Horizontal training, evaluate, the estimators' labels
# ---------------------------------------------------------------------------
def test_horizontal_training_refuses_every_spelling_naming_rows_and_ids(tmp_path, capsys):
    clients = []
    for k in (1, 2):
        df = label_party(gaps={7: "nan", 11: ""} if k == 2 else {})
        df["id"] = _ids(prefix=f"c{k}-")
        clients.append(write(df, tmp_path / f"client{k}.csv"))
    with pytest.raises((InputError, RemoteError)) as info:
        run_horizontal(clients, mode="local", task="classification", label_column="label",
                       model_dir=str(tmp_path / "hmodel"), random_state=0)
    msg = failure(info)
    assert msg.startswith("client 2: label column 'label': 2 rows have no label (at data rows 8, 12; "), msg
    assert "'c2-7'" not in msg
    assert "client 2: IDs of data rows 8, 12 (label column 'label', no label): 'c2-7', 'c2-11'" \
        in capsys.readouterr().err
    assert not files_under(tmp_path / "hmodel")


def test_evaluate_drops_truth_rows_missing_in_any_spelling(tmp_path):
    from fedforest.federation.metrics import evaluate_files
    truth = pd.DataFrame({"id": _ids(8), "label": ["yes", "no", "nan", "yes", "NaN", "no", "", "?"]})
    truth.to_csv(tmp_path / "truth.csv", index=False)
    pred = pd.DataFrame({"id": _ids(8), "prediction": ["yes", "no", "no", "yes", "no", "no", "no", "no"]})
    pred.to_csv(tmp_path / "pred.csv", index=False)
    m = evaluate_files(str(tmp_path / "pred.csv"), str(tmp_path / "truth.csv"), "id", "label",
                       task="classification", na_values=["?"])
    assert m["rows"] == 4 and m["rows_without_truth"] == 4 and m["accuracy"] == 1.0


@pytest.mark.parametrize("y", [np.array(["a", "b", "nan", "a"]), np.array(["a", "b", "null", "NaN"], dtype=object)])
def test_encode_labels_counts_missing_spellings(y):
    with pytest.raises(InputError, match="missing labels"):
        encode_labels(y, "classification")


# ---------------------------------------------------------------------------
# The reader and the check
# ---------------------------------------------------------------------------
def test_the_spellings_are_pandas_default_missing_texts():
    parsers = pytest.importorskip("pandas._libs.parsers")
    assert set(LABEL_NA_TEXTS) == set(parsers.STR_NA_VALUES)


def test_the_reader_makes_the_spellings_missing_and_keeps_numbers_numeric(tmp_path):
    path = write(label_party("integer", gaps={2: "nan", 4: "NULL"}), tmp_path / "t.csv")
    df = read_table(path, "id", "party 1", label_column="label")
    assert df["label"].dtype.kind == "f" and df["label"].isna().sum() == 2
    assert label_missing(np.array(["x", "", "n/a", "#N/A", "<NA>", "?"], dtype=object), ["?"]).tolist() == \
        [False, True, True, True, True, True]


def test_the_check_counts_one_row_in_the_singular_and_names_ids_only_on_its_own_output(capsys):
    with pytest.raises(InputError) as info:
        check_labels(np.array(["a", "nan", "b"], dtype=object), "client 1", "y", ids=["r0", "r1", "r2"])
    assert str(info.value).startswith("client 1: label column 'y': 1 row has no label (at data row 2; its ID "
                                      "is printed where the file was read)")
    assert capsys.readouterr().err.startswith("client 1: IDs of data row 2 (label column 'y', no label): 'r1'")
    with pytest.raises(InputError, match=r"1 row has no label \(at data row 1\); a label cell"):
        check_labels(np.array([None, "b"], dtype=object), "client 1", "y")      # no IDs: rows only
    check_labels(np.array(["a", "b"], dtype=object), "client 1", "y")       # nothing missing: no error
