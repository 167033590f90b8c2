"""Bad input: a clear error before any work, and nothing written.

Spec: "Rank count not matching the config; a party without its file; label
column on zero or two parties; duplicate or no overlapping IDs; a feature
column that cannot be encoded; NaN/inf labels; one class only; an empty
partition; unknown config keys; a model directory from another job" must all
be refused with a clear error before any work, with nothing written.  String
categorical columns are ordinal-encoded per party.  Prediction refuses "a
mismatched party, model version or column set with a clear error".

Most cases run in-process through ``fedforest.jobs.run_vertical`` (the same
master/party code as under mpiexec): a master-side problem raises
``InputError``; a party-side one reaches the master as ``RemoteError`` with
the party's rank.  A few cases run under the real ``mpiexec``.
"""
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from fedforest.cli import main as cli_main
from fedforest.federation.config import resolve
from fedforest.data.split import split_columns
from fedforest.errors import InputError, RemoteError
from fedforest.jobs import run_vertical

from _util import find_mpiexec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.dirname(sys.executable)
PYTHON = sys.executable
MPI_TIMEOUT = 120

N_ROWS = 60


# ---------------------------------------------------------------------------
# Data and helpers
# ---------------------------------------------------------------------------
def _ids(n=N_ROWS, prefix="u"):
    return [f"{prefix}{i}" for i in range(n)]


def _features(seed=0):
    return np.random.default_rng(seed).normal(size=(N_ROWS, 4))


def party1(seed=0):
    """Label party: ID, two features and a binary label."""
    X = _features(seed)
    y = (X[:, 0] + X[:, 2] > 0).astype(int)
    return pd.DataFrame({"id": _ids(), "a": X[:, 0], "b": X[:, 1], "label": y})


def party2(seed=0):
    """Second party: ID and two features."""
    X = _features(seed)
    return pd.DataFrame({"id": _ids(), "c": X[:, 2], "d": X[:, 3]})


def regression_party1(seed=0):
    df = party1(seed)
    df["label"] = _features(seed)[:, 0] * 2.0 + 0.5
    return df


def train_opts(tmp_path, **kw):
    opts = dict(task="classification", label_column="label", id_column="id",
                model_dir=str(tmp_path / "model"), n_estimators=3, random_state=0,
                summary_json=str(tmp_path / "summary.json"))
    opts.update(kw)
    return opts


def predict_opts(tmp_path, model_dir, **kw):
    opts = dict(id_column="id", model_dir=str(model_dir), output=str(tmp_path / "predictions.csv"),
                summary_json=str(tmp_path / "predict-summary.json"))
    opts.update(kw)
    return opts


def files_under(folder):
    out = []
    for root, _dirs, files in os.walk(folder):
        out.extend(os.path.join(root, f) for f in files)
    return out


def assert_nothing_written(tmp_path, model_dir=None):
    model_dir = str(model_dir or tmp_path / "model")
    assert not files_under(model_dir), f"files written despite the error: {files_under(model_dir)}"
    assert not os.path.exists(tmp_path / "summary.json"), "run summary written despite the error"


def snapshot(folder):
    """Every file under ``folder`` with its bytes and mtime."""
    snap = {}
    for path in files_under(folder):
        with open(path, "rb") as fh:
            snap[os.path.relpath(path, folder)] = (fh.read(), os.stat(path).st_mtime_ns)
    return snap


def fail_train(data, tmp_path, **kw):
    """Train, expecting a bad-input error. Returns ``(rank, message)``: rank 0
    for an InputError raised on the master, else the failing party's rank."""
    with pytest.raises((InputError, RemoteError)) as info:
        run_vertical("train", data, **train_opts(tmp_path, **kw))
    return _describe(info.value)


def fail_predict(data, tmp_path, model_dir, **kw):
    with pytest.raises((InputError, RemoteError)) as info:
        run_vertical("predict", data, **predict_opts(tmp_path, model_dir, **kw))
    rank, msg = _describe(info.value)
    assert not os.path.exists(tmp_path / "predictions.csv"), "predictions written despite the error"
    assert not os.path.exists(tmp_path / "predict-summary.json")
    return rank, msg


def _describe(exc):
    if isinstance(exc, RemoteError):
        assert exc.exc_type == "InputError", \
            f"party {exc.rank} failed with {exc.exc_type}, not a clear InputError:\n{exc}"
        return exc.rank, exc.remote_message
    return 0, str(exc)


def write_csv(df, path):
    df.to_csv(path, index=False)
    return str(path)


@pytest.fixture
def trained(tmp_path):
    """A finished 2-party classification model (3 trees) in tmp_path/trained."""
    model_dir = tmp_path / "trained"
    run_vertical("train", [party1(), party2()],
                 **train_opts(tmp_path, model_dir=str(model_dir), summary_json=None))
    assert os.path.isfile(model_dir / "master" / "manifest.json")
    return model_dir


# ---------------------------------------------------------------------------
# A party without its file / unreadable data
# ---------------------------------------------------------------------------
def test_missing_file_for_one_party_is_refused_by_that_party(tmp_path):
    p1 = write_csv(party1(), tmp_path / "p1.csv")
    missing = str(tmp_path / "does-not-exist.csv")
    rank, msg = fail_train([p1, missing], tmp_path)
    assert rank == 2
    assert "party 2" in msg
    assert "does-not-exist.csv" in msg and "not exist" in msg
    assert_nothing_written(tmp_path)


def test_empty_data_path_for_a_party_is_refused(tmp_path):
    rank, msg = fail_train([party1(), ""], tmp_path)
    assert rank == 0                      # refused by the configuration, before any rank reads data
    assert msg == "data: no data file given for party 2 (entry 2 is empty)"
    assert_nothing_written(tmp_path)


def test_unsupported_file_type_is_refused(tmp_path):
    path = tmp_path / "p2.xlsx"
    path.write_bytes(b"not really a spreadsheet")
    rank, msg = fail_train([party1(), str(path)], tmp_path)
    assert rank == 2
    assert "unsupported file type" in msg and ".xlsx" in msg
    assert_nothing_written(tmp_path)


def test_missing_id_column_is_refused(tmp_path):
    p2 = party2().rename(columns={"id": "key"})
    rank, msg = fail_train([party1(), p2], tmp_path)
    assert rank == 2
    assert "ID column" in msg and "'id'" in msg
    assert_nothing_written(tmp_path)


# ---------------------------------------------------------------------------
# Label column on zero or two parties
# ---------------------------------------------------------------------------
def test_label_column_on_no_party_is_refused(tmp_path):
    rank, msg = fail_train([party1().drop(columns="label"), party2()], tmp_path)
    assert rank == 0
    assert "'label'" in msg and "exactly one party" in msg and "no party" in msg
    assert_nothing_written(tmp_path)


def test_label_column_on_two_parties_is_refused(tmp_path):
    p2 = party2()
    p2["label"] = party1()["label"]
    rank, msg = fail_train([party1(), p2], tmp_path)
    assert rank == 0
    assert "'label'" in msg and "exactly one party" in msg
    assert re.search(r"\b1\b.*\b2\b", msg), msg  # names both holders
    assert_nothing_written(tmp_path)


# ---------------------------------------------------------------------------
# Duplicate or no overlapping IDs
# ---------------------------------------------------------------------------
def test_duplicate_ids_in_one_party_are_refused(tmp_path):
    p2 = party2()
    p2.loc[5, "id"] = p2.loc[3, "id"]
    rank, msg = fail_train([party1(), p2], tmp_path)
    assert rank == 2
    assert "party 2" in msg and "duplicate" in msg.lower()
    assert_nothing_written(tmp_path)


def test_duplicate_ids_in_a_csv_file_are_refused(tmp_path):
    p1 = party1()
    p1.loc[10, "id"] = p1.loc[0, "id"]
    rank, msg = fail_train([write_csv(p1, tmp_path / "p1.csv"), party2()], tmp_path)
    assert rank == 1
    assert "duplicate" in msg.lower()
    assert_nothing_written(tmp_path)


def test_missing_ids_are_refused(tmp_path):
    p2 = party2()
    p2.loc[7, "id"] = None
    rank, msg = fail_train([party1(), p2], tmp_path)
    assert rank == 2
    assert "no ID" in msg
    assert_nothing_written(tmp_path)


def test_no_overlapping_ids_is_refused(tmp_path):
    p2 = party2()
    p2["id"] = _ids(prefix="other-")
    rank, msg = fail_train([party1(), p2], tmp_path)
    assert rank == 0
    assert "no ID is shared" in msg
    assert_nothing_written(tmp_path)


def test_no_id_shared_by_all_three_parties_is_refused(tmp_path):
    # pairwise overlaps exist, but no ID is held by all three parties
    p1, p2 = party1(), party2()
    p3 = pd.DataFrame({"id": _ids(), "e": _features()[:, 1]})
    p1 = p1.iloc[:20]
    p2 = p2.iloc[20:40]
    p3 = pd.concat([p3.iloc[:10], p3.iloc[30:40]])
    rank, msg = fail_train([p1, p2, p3], tmp_path)
    assert rank == 0
    assert "no ID is shared" in msg
    assert_nothing_written(tmp_path)


# ---------------------------------------------------------------------------
# A feature column that cannot be encoded
# ---------------------------------------------------------------------------
def test_object_column_mixing_str_and_int_is_refused(tmp_path):
    p2 = party2()
    p2["c"] = pd.Series(["x", 1] * (N_ROWS // 2), dtype=object)
    rank, msg = fail_train([party1(), p2], tmp_path)
    assert rank == 2
    assert "'c'" in msg and "cannot be encoded" in msg
    assert_nothing_written(tmp_path)


def test_datetime_column_is_refused(tmp_path):
    p2 = party2()
    p2["d"] = pd.date_range("2020-01-01", periods=N_ROWS, freq="D")
    rank, msg = fail_train([party1(), p2], tmp_path)
    assert rank == 2
    assert "'d'" in msg and "cannot be encoded" in msg
    assert_nothing_written(tmp_path)


@pytest.mark.parametrize("source", ["frame", "csv"])
def test_feature_column_with_inf_is_refused(tmp_path, source):
    p2 = party2()
    p2.loc[4, "d"] = -np.inf
    data = p2 if source == "frame" else write_csv(p2, tmp_path / "p2.csv")
    rank, msg = fail_train([party1(), data], tmp_path)
    assert rank == 2
    assert "'d'" in msg and "infinite" in msg
    assert_nothing_written(tmp_path)


# ---------------------------------------------------------------------------
# NaN / inf labels
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["frame", "csv"])
def test_nan_labels_classification_are_refused(tmp_path, source):
    p1 = party1()
    p1["label"] = p1["label"].astype(float)
    p1.loc[[3, 17], "label"] = np.nan
    data = p1 if source == "frame" else write_csv(p1, tmp_path / "p1.csv")
    _rank, msg = fail_train([data, party2()], tmp_path)
    assert "'label'" in msg
    assert "2" in msg and ("NaN" in msg or "no label" in msg or "missing" in msg)
    assert_nothing_written(tmp_path)


def test_missing_text_labels_are_refused(tmp_path):
    p1 = party1()
    p1["label"] = np.where(p1["label"] == 1, "yes", "no").astype(object)
    p1.loc[[2, 9, 11], "label"] = None
    _rank, msg = fail_train([write_csv(p1, tmp_path / "p1.csv"), party2()], tmp_path)
    assert "'label'" in msg
    assert "3" in msg and ("no label" in msg or "missing" in msg or "NaN" in msg)
    assert_nothing_written(tmp_path)


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("source", ["frame", "csv"])
def test_non_finite_regression_labels_are_refused(tmp_path, bad, source):
    p1 = regression_party1()
    p1.loc[6, "label"] = bad
    data = p1 if source == "frame" else write_csv(p1, tmp_path / "p1.csv")
    _rank, msg = fail_train([data, party2()], tmp_path, task="regression")
    assert "'label'" in msg
    assert "NaN" in msg or "infinite" in msg
    assert_nothing_written(tmp_path)


def test_text_regression_labels_are_refused(tmp_path):
    p1 = regression_party1().astype({"label": object})
    p1.loc[1, "label"] = "high"
    _rank, msg = fail_train([p1, party2()], tmp_path, task="regression")
    assert "'label'" in msg and "numeric" in msg
    assert_nothing_written(tmp_path)


# ---------------------------------------------------------------------------
# One class only
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("value", [1, "yes"])
def test_one_class_only_is_refused(tmp_path, value):
    p1 = party1()
    p1["label"] = value
    _rank, msg = fail_train([p1, party2()], tmp_path)
    assert "'label'" in msg and "one class" in msg
    assert_nothing_written(tmp_path)


def test_one_class_after_id_alignment_is_refused(tmp_path):
    # both classes exist in the label party's file, but the shared rows all have one class
    p1 = party1()
    p2 = party2()
    p2 = p2[p1["label"].to_numpy() == 1]
    rank, msg = fail_train([p1, p2], tmp_path)
    assert rank == 0
    assert "one class" in msg
    assert_nothing_written(tmp_path)


@pytest.mark.parametrize("value, shown", [(1, "1"), ("yes", "'yes'")])
def test_one_class_message_shows_the_class_plainly(tmp_path, value, shown):
    """The message is for users: the class appears as written, not as a numpy repr."""
    p1 = party1()
    p1["label"] = value
    _rank, msg = fail_train([p1, party2()], tmp_path)
    assert shown in msg
    assert "np." not in msg, f"numpy repr leaks into the message: {msg!r}"


# ---------------------------------------------------------------------------
# An empty partition
# ---------------------------------------------------------------------------
def test_party_file_with_zero_rows_is_refused(tmp_path):
    empty = write_csv(party2().iloc[:0], tmp_path / "p2.csv")
    rank, msg = fail_train([party1(), empty], tmp_path)
    assert rank == 2
    assert "no rows" in msg
    assert_nothing_written(tmp_path)


def test_party_frame_with_zero_rows_is_refused(tmp_path):
    rank, msg = fail_train([party1(), party2().iloc[:0]], tmp_path)
    assert rank == 2
    assert "no rows" in msg
    assert_nothing_written(tmp_path)


def test_party_without_features_or_label_is_refused(tmp_path):
    rank, msg = fail_train([party1(), party2()[["id"]]], tmp_path)
    assert rank == 2
    assert "party 2" in msg and "neither feature columns nor the label" in msg
    assert_nothing_written(tmp_path)


def test_job_without_any_feature_column_is_refused(tmp_path):
    rank, msg = fail_train([party1()[["id", "label"]]], tmp_path)
    assert rank == 0
    assert "no party holds any feature column" in msg
    assert_nothing_written(tmp_path)


def test_split_columns_refuses_more_parties_than_features():
    with pytest.raises(InputError) as info:
        split_columns(["a", "b", "c", "d"], 5, np.random.default_rng(0))
    assert "5 parties" in str(info.value) and "4 feature columns" in str(info.value)
    assert "empty partition" in str(info.value)


def test_split_command_refuses_more_parties_than_features(tmp_path, capsys):
    src = pd.concat([party1(), party2().drop(columns="id")], axis=1)
    table = write_csv(src, tmp_path / "table.csv")
    out = tmp_path / "split-out"
    code = cli_main(["split", "--input", table, "--parties", "5", "--label-column", "label",
                     "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert "5 parties" in err and "4 feature columns" in err
    assert not out.exists(), "split wrote files despite the error"


# ---------------------------------------------------------------------------
# Unknown config keys
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("toml, key, suggestion", [
    ("[forest]\nn_estimator = 3\n", "n_estimator", "n_estimators"),
    ("[job]\nlabel_colum = \"label\"\n", "label_colum", "label_column"),
    ("n_estimatorss = 3\n", "n_estimatorss", "n_estimators"),
])
def test_unknown_toml_key_is_refused_with_a_suggestion(tmp_path, toml, key, suggestion):
    path = tmp_path / "job.toml"
    path.write_text(toml)
    with pytest.raises(InputError) as info:
        resolve(str(path), {})
    msg = str(info.value)
    assert f"unknown key {key!r}" in msg
    assert f"did you mean {suggestion!r}" in msg


def test_unknown_toml_table_is_refused_with_a_suggestion(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text("[forests]\nmax_depth = 3\n")
    with pytest.raises(InputError, match=r"unknown table \[forests\]; did you mean \[forest\]"):
        resolve(str(path), {})


def test_toml_key_in_the_wrong_table_names_the_right_table(tmp_path):
    """``max_depth`` under [job] is refused; the message must say it belongs in
    [forest], not suggest the very key that was written."""
    path = tmp_path / "job.toml"
    path.write_text("[job]\nmax_depth = 3\n")
    with pytest.raises(InputError) as info:
        resolve(str(path), {})
    msg = str(info.value)
    assert "'max_depth'" in msg
    assert "did you mean 'max_depth'" not in msg, f"suggests the key itself: {msg!r}"
    assert "forest" in msg, f"does not point to the [forest] table: {msg!r}"


def test_unknown_option_to_run_vertical_is_refused(tmp_path):
    rank, msg = fail_train([party1(), party2()], tmp_path, n_estimator=3)
    assert rank == 0
    assert "unknown key 'n_estimator'" in msg and "n_estimators" in msg
    assert_nothing_written(tmp_path)


def test_unknown_cli_flag_exits_with_code_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        cli_main(["train", "--model-dir", str(tmp_path / "model"), "--n-trees", "3"])
    assert info.value.code == 2
    assert "unrecognized arguments: --n-trees" in capsys.readouterr().err
    assert not (tmp_path / "model").exists()


# ---------------------------------------------------------------------------
# Bad forest parameters and job settings
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("opts, name", [
    ({"n_estimators": 0}, "n_estimators"),
    ({"max_depth": -1}, "max_depth"),
    ({"criterion": "bogus"}, "criterion"),
    ({"criterion": "squared_error"}, "criterion"),
    ({"max_bins": 1}, "max_bins"),
    ({"min_samples_leaf": 0}, "min_samples_leaf"),
    ({"max_features": "all"}, "max_features"),
])
def test_bad_forest_params_are_refused(tmp_path, opts, name):
    rank, msg = fail_train([party1(), party2()], tmp_path, **opts)
    assert rank == 0
    assert msg.startswith(name + ":"), msg
    assert repr(next(iter(opts.values()))) in msg
    assert_nothing_written(tmp_path)


@pytest.mark.parametrize("opts, name", [
    ({"task": None}, "task"),
    ({"task": "clustering"}, "task"),
    ({"label_column": None}, "label_column"),
    ({"n_parties": 3}, "data"),
    ({"result_party": 3}, "result_party"),
    ({"predict_method": "magic"}, "predict_method"),
])
def test_bad_job_settings_are_refused(tmp_path, opts, name):
    rank, msg = fail_train([party1(), party2()], tmp_path, **opts)
    assert rank == 0
    assert msg.startswith(name + ":"), msg
    assert_nothing_written(tmp_path)


# ---------------------------------------------------------------------------
# A model directory from another job
# ---------------------------------------------------------------------------
def test_model_dir_of_another_job_with_other_params_is_refused(tmp_path, trained):
    before = snapshot(trained)
    _rank, msg = fail_train([party1(), party2()], tmp_path, model_dir=str(trained), n_estimators=4)
    assert "another job" in msg and "--overwrite" in msg
    assert snapshot(trained) == before
    assert not os.path.exists(tmp_path / "summary.json")


def test_model_dir_of_another_job_with_other_data_is_refused(tmp_path, trained):
    before = snapshot(trained)
    p2 = party2()
    p2["d"] = p2["d"] + 1.0
    _rank, msg = fail_train([party1(), p2], tmp_path, model_dir=str(trained))
    assert "another job" in msg
    assert snapshot(trained) == before


def test_resume_on_a_model_of_another_job_is_refused(tmp_path, trained):
    before = snapshot(trained)
    _rank, msg = fail_train([party1(), party2()], tmp_path, model_dir=str(trained),
                            max_depth=2, resume=True)
    assert "another job" in msg
    assert snapshot(trained) == before
    assert not os.path.exists(tmp_path / "summary.json")


def test_same_job_into_a_finished_model_without_resume_or_overwrite_is_refused(tmp_path, trained):
    before = snapshot(trained)
    _rank, msg = fail_train([party1(), party2()], tmp_path, model_dir=str(trained))
    assert "already holds a model of this job" in msg
    assert "--resume" in msg and "--overwrite" in msg
    assert snapshot(trained) == before


def test_master_dir_of_another_job_is_refused_by_the_master(tmp_path, trained):
    # only the master's folder remains from the other job; the parties' folders are gone
    for name in ("party-1", "party-2"):
        for path in files_under(trained / name):
            os.unlink(path)
    before = snapshot(trained)
    rank, msg = fail_train([party1(), party2()], tmp_path, model_dir=str(trained), n_estimators=5)
    assert rank == 0
    assert "master model_dir" in msg and "another job" in msg
    assert snapshot(trained) == before


def test_resume_without_a_checkpoint_is_refused(tmp_path):
    _rank, msg = fail_train([party1(), party2()], tmp_path, resume=True)
    assert "--resume" in msg and "no checkpoint" in msg
    assert_nothing_written(tmp_path)


def test_bad_data_with_overwrite_leaves_the_existing_model_alone(tmp_path, trained):
    """--overwrite may replace a model only once the new job is valid."""
    before = snapshot(trained)
    p1 = party1()
    p1["label"] = p1["label"].astype(float)
    p1.loc[0, "label"] = np.nan
    fail_train([p1, party2()], tmp_path, model_dir=str(trained), overwrite=True)
    assert snapshot(trained) == before
    p2 = party2()
    p2.loc[1, "id"] = p2.loc[0, "id"]
    fail_train([party1(), p2], tmp_path, model_dir=str(trained), overwrite=True)
    assert snapshot(trained) == before


# ---------------------------------------------------------------------------
# String categorical columns: ordinal-encoded per party
# ---------------------------------------------------------------------------
COLORS = np.array(["red", "green", "blue"])


def categorical_parties(seed=0):
    rng = np.random.default_rng(seed)
    X = _features(seed)
    color = COLORS[rng.integers(0, 3, N_ROWS)]
    y = ((color == "red") ^ (X[:, 0] > 0.5)).astype(int)
    p1 = pd.DataFrame({"id": _ids(), "a": X[:, 0], "label": y})
    p2 = pd.DataFrame({"id": _ids(), "color": color, "d": X[:, 3]})
    return p1, p2


def categorical_model(tmp_path):
    """Train on CSV files where party 2 holds a text column (inside each test,
    so that a failure to train shows as that test's failure)."""
    p1, p2 = categorical_parties()
    paths = [write_csv(p1, tmp_path / "p1.csv"), write_csv(p2, tmp_path / "p2.csv")]
    model_dir = tmp_path / "cat-model"
    run_vertical("train", paths, **train_opts(tmp_path, model_dir=str(model_dir), summary_json=None,
                                              n_estimators=5, max_features=None))
    return model_dir, p1, p2


def test_text_column_is_ordinal_encoded_by_its_party(tmp_path):
    model_dir, _p1, _p2 = categorical_model(tmp_path)
    manifests = {name: json.loads((model_dir / name / "manifest.json").read_text())
                 for name in ("master", "party-1", "party-2")}
    assert manifests["party-2"]["columns"] == ["color", "d"]
    assert manifests["party-2"]["categories"] == {"color": sorted(COLORS.tolist())}
    # the mapping stays with its party: no other rank's model holds it
    assert "color" not in json.dumps(manifests["master"])
    assert "color" not in json.dumps(manifests["party-1"])


def test_unseen_category_at_predict_is_treated_as_missing(tmp_path):
    model_dir, p1, p2 = categorical_model(tmp_path)
    unseen = p2.copy()
    unseen.loc[:9, "color"] = "purple"
    missing = p2.copy().astype({"color": object})
    missing.loc[:9, "color"] = None
    out_unseen = run_vertical("predict", [p1, unseen],
                              **predict_opts(tmp_path, model_dir, output=str(tmp_path / "u.csv")))
    out_missing = run_vertical("predict", [p1, missing],
                               **predict_opts(tmp_path, model_dir, output=str(tmp_path / "m.csv")))
    assert len(out_unseen["prediction"]) == N_ROWS
    np.testing.assert_array_equal(out_unseen["prediction"], out_missing["prediction"])
    np.testing.assert_array_equal(out_unseen["values"], out_missing["values"])


def test_all_missing_text_column_at_predict_is_accepted(tmp_path):
    """A prediction file whose text column is entirely empty (pandas reads it
    as float NaN) means 'all missing', not 'the column became numeric'."""
    model_dir, p1, p2 = categorical_model(tmp_path)
    empty = p2.copy()
    empty["color"] = ""
    path = write_csv(empty, tmp_path / "p2-empty-color.csv")
    out = run_vertical("predict", [p1, path], **predict_opts(tmp_path, model_dir))
    assert len(out["prediction"]) == N_ROWS


def test_number_like_values_in_a_text_column_are_matched_as_text(tmp_path):
    """A text column whose training values include "1" and "2": a prediction file
    holding only those reads as numbers, and still maps to the trained categories."""
    from fedforest.data.io import encode_features
    cats = {"code": ["1", "2", "A"]}
    X, _, unseen = encode_features(pd.DataFrame({"code": [2, 1, 7, None]}), ["code"], "party 1",
                                   categories=cats)
    assert X[:2, 0].tolist() == [1.0, 0.0] and np.isnan(X[2:, 0]).all() and unseen == 1
    X, _, _ = encode_features(pd.DataFrame({"code": [2.0, 1.0]}), ["code"], "party 1",
                              categories=cats)
    assert X[:, 0].tolist() == [1.0, 0.0]
    # through a whole prediction: numbers that are not categories count as unseen (missing)
    model_dir, p1, p2 = categorical_model(tmp_path)
    numeric = p2.copy()
    numeric["color"] = np.arange(N_ROWS, dtype=float)
    out = run_vertical("predict", [p1, numeric], model_dir=str(model_dir),
                       output=str(tmp_path / "num.csv"))
    assert len(out["prediction"]) == N_ROWS


# ---------------------------------------------------------------------------
# Prediction refuses a mismatched party, model version or column set
# ---------------------------------------------------------------------------
def _edit_manifest(path, **changes):
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


def test_predict_refuses_a_party_model_of_another_job(tmp_path, trained):
    _edit_manifest(trained / "party-2" / "manifest.json", job_id="0" * 32)
    _rank, msg = fail_predict([party1(), party2()], tmp_path, trained)
    assert "party 2" in msg
    assert "job" in msg and "0" * 32 in msg


@pytest.mark.parametrize("folder, rank", [("master", 0), ("party-2", 2)])
def test_predict_refuses_another_model_format_version(tmp_path, trained, folder, rank):
    _edit_manifest(trained / folder / "manifest.json", format_version=999)
    got_rank, msg = fail_predict([party1(), party2()], tmp_path, trained)
    assert got_rank == rank
    assert "version" in msg and "999" in msg
    assert ("party 2" in msg) if rank else ("master" in msg)


def test_predict_refuses_a_missing_column(tmp_path, trained):
    rank, msg = fail_predict([party1(), party2().drop(columns="d")], tmp_path, trained)
    assert rank == 2
    assert "column" in msg and "'d'" in msg and "missing" in msg


def test_predict_refuses_an_extra_column(tmp_path, trained):
    p2 = party2()
    p2["e"] = 1.0
    rank, msg = fail_predict([party1(), p2], tmp_path, trained)
    assert rank == 2
    assert "column" in msg and "'e'" in msg


def test_predict_refuses_party_data_given_in_the_wrong_order(tmp_path, trained):
    rank, msg = fail_predict([party2(), party1()], tmp_path, trained)
    assert rank in (1, 2)
    assert "column set differs" in msg


def test_predict_refuses_swapped_party_model_folders(tmp_path, trained):
    os.rename(trained / "party-1", trained / "tmp")
    os.rename(trained / "party-2", trained / "party-1")
    os.rename(trained / "tmp", trained / "party-2")
    rank, msg = fail_predict([party1(), party2()], tmp_path, trained)
    assert rank in (1, 2)
    assert "rank 2" in msg and "rank 1" in msg


def test_predict_refuses_more_parties_than_the_model_has(tmp_path, trained):
    rank, msg = fail_predict([party1(), party2(), party2()], tmp_path, trained)
    assert rank == 0
    assert "2 parties" in msg and "3" in msg


def test_predict_refuses_a_directory_without_a_model(tmp_path):
    rank, msg = fail_predict([party1(), party2()], tmp_path, tmp_path / "nothing-here")
    assert rank == 0
    assert "holds no model" in msg


# ---------------------------------------------------------------------------
# Under the real mpiexec
# ---------------------------------------------------------------------------
def _mpi_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDFOREST_")}
    env["PATH"] = VENV_BIN + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_mpi(n, *args):
    """Run ``mpiexec -n n python -m fedforest ...``; a hang fails the test."""
    cmd = [find_mpiexec(), "-n", str(n), PYTHON, "-m", "fedforest", *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_mpi_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=MPI_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} hung for {MPI_TIMEOUT}s\nstdout:\n{out}\nstderr:\n{err}")
    return proc.returncode, out + err


def write_job(tmp_path, data, extra=""):
    job = tmp_path / "job.toml"
    files = ", ".join(json.dumps(d) for d in data)
    job.write_text(
        "[job]\n"
        'task = "classification"\n'
        f"data = [{files}]\n"
        'label_column = "label"\n'
        'model_dir = "model"\n'
        "progress = false\n"
        'output = "predictions.csv"\n'
        "[forest]\n"
        "n_estimators = 3\n"
        "random_state = 0\n" + extra)
    return str(job)


@pytest.mark.parametrize("ranks", [4, 2])
def test_mpi_rank_count_not_matching_the_config_is_refused(tmp_path, ranks):
    write_csv(party1(), tmp_path / "p1.csv")
    write_csv(party2(), tmp_path / "p2.csv")
    job = write_job(tmp_path, ["p1.csv", "p2.csv"])
    code, output = run_mpi(ranks, "train", "--config", job)
    assert code != 0, output
    assert "n_parties" in output, output
    assert "2 parties" in output and f"{ranks} ranks" in output, output
    assert "mpiexec -n 3" in output, output
    assert not (tmp_path / "model").exists(), "model dir created despite the error"


def test_mpi_data_list_shorter_than_the_launch_never_advises_dropping_a_party(tmp_path):
    """One data file, three ranks: was "start it with mpiexec -n 2" only."""
    write_csv(party1(), tmp_path / "p1.csv")
    job = write_job(tmp_path, ["p1.csv"])
    code, output = run_mpi(3, "train", "--config", job)
    assert code == 2, output
    assert output.strip().splitlines() == [
        "error: n_parties: the data list has 1 file, but the job was started with 3 ranks, that is 2 parties: "
        "add a data file for each of the 2 parties (in rank order), or, if only 1 party is meant, start it "
        "with mpiexec -n 2"], output
    assert not (tmp_path / "model").exists(), "model dir created despite the error"


def test_mpi_a_module_missing_on_one_rank_is_one_line_naming_the_rank(tmp_path):
    """Rank 2 cannot import pyarrow (a site hook hides it there): one line that names
    the rank and what to install, not the chained tracebacks."""
    write_csv(party1(), tmp_path / "p1.csv")
    write_csv(party2(), tmp_path / "p2.csv")
    job = write_job(tmp_path, ["p1.csv", "p2.csv"])
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, sys\n"
        "class _Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pyarrow':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "if os.environ.get('PMI_RANK') == '2':\n"
        "    sys.meta_path.insert(0, _Hide())\n")
    env = _mpi_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook), env.get("PYTHONPATH")) if p)
    proc = subprocess.run([find_mpiexec(), "-n", "3", PYTHON, "-m", "fedforest", "train", "--config", job],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=MPI_TIMEOUT)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "rank 2" in lines[0] and "'pyarrow'" in lines[0] and "pip install" in lines[0], \
        proc.stderr
    assert not (tmp_path / "model").exists(), "model dir created despite the error"


def test_a_missing_module_is_one_line_naming_the_extra_that_installs_it():
    from fedforest.transport.runner import describe_failure, missing_module_line
    trace = "Traceback (most recent call last):\n  ...\nModuleNotFoundError: No module named 'xgboost'\n"
    exc = RemoteError(2, "ModuleNotFoundError", "No module named 'xgboost'", trace)
    assert describe_failure(exc) == \
        "error: rank 2: the module 'xgboost' is missing: pip install 'fedforest[xgboost]'"
    assert trace in describe_failure(exc, verbose=True)         # --verbose keeps the traceback
    assert missing_module_line(1, "sklearn.tree") == "rank 1: the module 'sklearn.tree' is missing: pip install " \
                                                    "scikit-learn"
    assert missing_module_line(None, "nosuchthing") == "the module 'nosuchthing' is missing: pip install nosuchthing"
    # the master's own: one line too
    try:
        import nosuchthing  # noqa: F401
    except ModuleNotFoundError as own:
        assert describe_failure(own) == "error: rank 0: the module 'nosuchthing' is missing: pip install nosuchthing"
    # a message that is not Python's is shown as it came, with the traceback
    odd = RemoteError(2, "ModuleNotFoundError", "No module named 'x'\nerror: forged", trace)
    assert "--- traceback from rank 2 ---" in describe_failure(odd)


def test_mpi_missing_file_for_party_2_is_reported_with_its_rank(tmp_path):
    write_csv(party1(), tmp_path / "p1.csv")
    job = write_job(tmp_path, ["p1.csv", "missing-party2.csv"])
    code, output = run_mpi(3, "train", "--config", job)
    assert code != 0, output
    assert "rank 2" in output, output
    assert "missing-party2.csv" in output and "not exist" in output, output
    assert "Traceback" not in output, "a bad input should not print a traceback:\n" + output
    assert not (tmp_path / "model").exists(), "model dir created despite the error"


def test_mpi_unknown_toml_key_is_refused(tmp_path):
    write_csv(party1(), tmp_path / "p1.csv")
    write_csv(party2(), tmp_path / "p2.csv")
    job = write_job(tmp_path, ["p1.csv", "p2.csv"], extra="max_dept = 3\n")
    code, output = run_mpi(3, "train", "--config", job)
    assert code != 0, output
    assert "unknown key 'max_dept'" in output and "max_depth" in output, output
    assert not (tmp_path / "model").exists(), "model dir created despite the error"


def test_predict_refuses_party_models_from_another_run(tmp_path):
    """Two runs of the same job (no fixed seed): mixing their party folders is refused,
    whatever the prediction method."""
    import shutil
    from fedforest.jobs import run_vertical as _run
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 4))
    y = (X[:, 0] + X[:, 2] > 0).astype(int)
    frames = []
    for p, cols in enumerate([[0, 1], [2, 3]]):
        d = pd.DataFrame({f"f{c}": X[:, c] for c in cols})
        d.insert(0, "id", [f"r{i}" for i in range(80)])
        if p == 0:
            d["y"] = y
        frames.append(d)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    for md in (a, b):
        _run("train", frames, task="classification", label_column="y", model_dir=md, n_estimators=3)
    shutil.rmtree(os.path.join(a, "party-2"))
    shutil.copytree(os.path.join(b, "party-2"), os.path.join(a, "party-2"))
    for method in ("oneshot", "classical"):
        out = tmp_path / f"p-{method}.csv"
        with pytest.raises(InputError, match="party 2 model: comes from another training run"):
            _run("predict", frames, model_dir=a, predict_method=method, output=str(out))
        assert not out.exists()


def test_boolean_column_with_gaps_is_numeric():
    from fedforest.data.io import encode_features
    X, cats, _ = encode_features(pd.DataFrame({"b": [True, None, False, True]}, dtype=object),
                                 ["b"], "party 1")
    assert cats == {} and X[[0, 2, 3], 0].tolist() == [1.0, 0.0, 1.0] and np.isnan(X[1, 0])


def test_class_weight_key_matching_no_class_is_refused_before_anything_is_written(tmp_path):
    frames = [party1(), party2()]
    model_dir = tmp_path / "m"
    with pytest.raises(InputError, match="class_weight: key 'yes' matches no class"):
        run_vertical("train", frames, **train_opts(tmp_path, model_dir=str(model_dir),
                                                   class_weight={"yes": 2.0}))
    assert not model_dir.exists() or not any(model_dir.rglob("*.*"))


def test_too_many_max_features_leaves_an_existing_model_untouched(tmp_path):
    model_dir = tmp_path / "m"
    opts = train_opts(tmp_path, model_dir=str(model_dir))
    run_vertical("train", [party1(), party2()], **opts)
    before = {p: p.read_bytes() for p in model_dir.rglob("*") if p.is_file()}
    with pytest.raises(InputError, match="max_features"):
        run_vertical("train", [party1(), party2()], **dict(opts, overwrite=True, max_features=50))
    assert {p: p.read_bytes() for p in model_dir.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("value", ["no", "false", 0])
def test_true_false_keys_need_real_booleans(tmp_path, value):
    with pytest.raises(InputError, match="master_full_model: must be true or false"):
        run_vertical("train", [party1(), party2()],
                     **train_opts(tmp_path, model_dir=str(tmp_path / "m"), master_full_model=value))


def test_a_party_refuses_to_reveal_its_splits_unless_its_own_config_allows_it(tmp_path):
    from fedforest.federation.config import resolve
    from fedforest.transport.inprocess import run_inprocess
    from fedforest.vertical.forest.roles import client_train as party_train
    from fedforest.vertical.forest.roles import server_train as master_train
    opts = dict(train_opts(tmp_path, model_dir=str(tmp_path / "m")), data=[party1(), party2()],
                progress=False, quiet=True)
    with pytest.raises(RemoteError) as err:
        run_inprocess(2, lambda c: master_train(c, resolve(None, dict(opts, master_full_model=True))),
                      lambda c: party_train(c, resolve(None, opts)))
    assert err.value.exc_type == "InputError" and "does not allow" in err.value.remote_message
    assert not (tmp_path / "m").exists() or not any((tmp_path / "m").rglob("*.*"))


def test_label_only_party_predicts_from_an_id_only_file(tmp_path):
    p1, p2 = party1(), party2()
    label_only = p1[["id", "label"]]
    model_dir = str(tmp_path / "m")
    run_vertical("train", [label_only, p2], **dict(train_opts(tmp_path, model_dir=model_dir)))
    out = run_vertical("predict", [label_only[["id"]], p2], model_dir=model_dir,
                       output=str(tmp_path / "p.csv"))
    assert len(out["prediction"]) == len(p2)
