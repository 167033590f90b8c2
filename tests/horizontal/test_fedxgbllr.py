"""FedXGBllr over the in-process transport: the three tasks, aggregation order,
rounds and bytes, model files, and the bad inputs of the issue."""
import os

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification, make_regression

from _util import client_files
from fedforest.horizontal.fedxgbllr import roles as fedxgbllr
from fedforest.cli import main
from fedforest.errors import InputError, RemoteError
from fedforest.horizontal.encoding import Encoding
from fedforest.jobs import run_horizontal

FAST = dict(xgb_trees=24, local_epochs=3, rounds=2, max_depth=3, random_state=0)


def _clients(folder, task="binary", n=600, n_clients=3, seed=0, drop_class_on=None):
    if task == "regression":
        X, y = make_regression(n, 6, n_informative=4, noise=1.0, random_state=seed)
    else:
        X, y = make_classification(n, 6, n_informative=4, n_classes=2 if task == "binary" else 3,
                                   random_state=seed)
        y = np.array(["a", "b", "c"])[y]
    df = pd.DataFrame(X, columns=[f"x{j}" for j in range(6)])
    df["y"] = y
    return client_files(df, folder, n_clients, test_name="c{k}-test.csv",
                        keep=lambda k, part: part[part["y"] != "c"] if drop_class_on == k else part)


def _run(paths, tests, folder, task="classification", **opts):
    return run_horizontal(paths, mode="fedxgbllr", task=task, label_column="y", test_data=tests,
                          model_dir=str(folder / "m"), **dict(FAST, **opts))


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_tasks(tmp_path, task):
    paths, tests = _clients(tmp_path, task)
    s = _run(paths, tests, tmp_path, "regression" if task == "regression" else "classification",
             local_epochs=20, rounds=3, xgb_trees=60)
    assert s["rounds"] == 3 + 1
    if task == "regression":
        y = pd.concat(pd.read_csv(t) for t in tests)["y"]
        assert s["test_mse"] < 0.5 * y.var(), (s["test_mse"], y.var())
    else:
        assert s["test_accuracy"] > (0.8 if task == "binary" else 0.6), s["test_accuracy"]
    trees = 60 // 3
    assert s["trees_per_client"] == ((trees // 3) * 3 if task == "multiclass" else trees)
    for r in (1, 2, 3):
        folder = s["model_dirs"][r]
        assert {"model.json", "cnn.npz", "ensemble-1.ubj", "ensemble-3.ubj"} <= set(os.listdir(folder))


def test_saved_ensembles_are_in_client_order(tmp_path):
    paths, tests = _clients(tmp_path)
    s = _run(paths, tests, tmp_path)
    folder = s["model_dirs"][2]
    for k in (1, 2, 3):
        ours = fedxgbllr.load_booster(np.fromfile(os.path.join(folder, f"ensemble-{k}.ubj"), dtype=np.uint8))
        # each ensemble was trained on client k's rows with seed + k
        df = pd.read_csv(paths[k - 1])
        enc = Encoding("xgboost", [f"x{j}" for j in range(6)], ["a", "b"])
        ref = fedxgbllr.load_booster(fedxgbllr.train_ensemble(
            df.drop(columns="y").to_numpy(), enc.labels(df["y"], "t"), enc, 8, 3, 0.1, 0 + k))
        X = df.drop(columns="y").to_numpy()
        assert np.allclose(fedxgbllr.tree_outputs([ours], X), fedxgbllr.tree_outputs([ref], X))


def test_tree_outputs_sum_to_xgboost_margin():
    X, y = make_classification(200, 5, random_state=1)
    enc = Encoding("xgboost", [f"x{j}" for j in range(5)], ["0", "1"])
    booster = fedxgbllr.load_booster(fedxgbllr.train_ensemble(X, y, enc, 10, 3, 0.1, 0))
    import xgboost as xgb
    margin = booster.predict(xgb.DMatrix(X), output_margin=True)
    S = fedxgbllr.tree_outputs([booster], X)
    assert S.shape == (200, 10)
    assert np.ptp(margin - S.sum(axis=1)) < 1e-6  # the difference is the constant base score


def test_bytes_do_not_grow_with_rows(tmp_path):
    small = tmp_path / "small"
    large = tmp_path / "large"
    small.mkdir()
    large.mkdir()
    a = _run(*_clients(small, n=300), small, xgb_trees=12, max_depth=2)
    b = _run(*_clients(large, n=1200), large, xgb_trees=12, max_depth=2)
    # depth-2 trees are full in both cases: the same bytes whatever the rows
    assert abs(b["bytes_per_client"] - a["bytes_per_client"]) < 0.05 * a["bytes_per_client"]
    assert a["rounds"] == b["rounds"] == FAST["rounds"] + 1


def test_predict_and_explain_cli(tmp_path, capsys):
    paths, tests = _clients(tmp_path)
    _run(paths, tests, tmp_path)
    out = str(tmp_path / "p.csv")
    assert main(["predict", "--mode", "fedxgbllr", "--model-dir", str(tmp_path / "m"), "--data", tests[0],
                 "--output", out]) == 0
    pred = pd.read_csv(out)
    assert list(pred.columns) == ["id", "prediction", "proba_a", "proba_b"]
    assert np.allclose(pred[["proba_a", "proba_b"]].sum(axis=1), 1.0)
    capsys.readouterr()
    assert main(["explain", "--model-dir", str(tmp_path / "m")]) == 0
    text = capsys.readouterr().out
    assert "3 client ensembles of 8 trees, 64 learning-rate channels" in text
    assert "client 3:" in text and "per-tree learning rates" in text


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------
def test_different_feature_sets(tmp_path):
    paths, tests = _clients(tmp_path)
    pd.read_csv(paths[2]).drop(columns="x5").to_csv(paths[2], index=False)
    with pytest.raises(InputError, match=r"client 3: has other columns than client 1: missing \['x5'\]"):
        _run(paths, None, tmp_path)


def test_different_label_sets_use_the_union(tmp_path):
    paths, tests = _clients(tmp_path, "multiclass", drop_class_on=2)
    s = _run(paths, tests, tmp_path, xgb_trees=30)
    truth = pd.concat([pd.read_csv(t) for t in tests])["y"]
    assert s["test_accuracy"] >= truth.value_counts(normalize=True).max() + 0.1   # beats a constant
    with np.load(os.path.join(s["model_dirs"][2], "cnn.npz")) as z:
        assert z["V"].shape[0] == 3  # every class of the job has an output


def test_client_with_fewer_rows_than_batch(tmp_path):
    paths, tests = _clients(tmp_path, n=120)
    s = _run(paths, tests, tmp_path, batch_size=64)   # 30 training rows per client
    assert s["rows"] == {1: 30, 2: 30, 3: 30} and s["rounds"] == 3


def test_non_finite_tree_outputs(tmp_path, monkeypatch):
    paths, tests = _clients(tmp_path)
    real = fedxgbllr.tree_outputs

    def broken(boosters, X):
        S = real(boosters, X)
        S[0, 1] = np.inf
        return S

    monkeypatch.setattr(fedxgbllr, "tree_outputs", broken)
    with pytest.raises(RemoteError, match="1 trees give non-finite outputs"):
        _run(paths, None, tmp_path)


@pytest.mark.parametrize("opts,match", [({"rounds": 0}, "rounds: must be an int in \\[1, 10000\\]"),
                                        ({"xgb_trees": 2}, "cannot give each of 3 clients"),
                                        ({"cnn_lr": 0}, "cnn_lr: must be a number > 0")])
def test_bad_settings(tmp_path, opts, match):
    paths, _ = _clients(tmp_path)
    with pytest.raises(InputError, match=match):
        _run(paths, None, tmp_path, **opts)


@pytest.mark.parametrize("task", ["binary", "multiclass"])
def test_leaf_values_from_the_model_json_equal_xgboosts_tree_table(tmp_path, task):
    paths, _ = _clients(tmp_path, task)
    df = pd.read_csv(paths[0])
    enc = Encoding("xgboost", [f"x{j}" for j in range(6)], sorted(df["y"].unique()), task="classification")
    X, y = enc.features(df.drop(columns="y"), "c"), enc.labels(df["y"], "c")
    booster = fedxgbllr.load_booster(fedxgbllr.train_ensemble(X, y, enc, 12, 4, 0.3, 0))
    table = booster.trees_to_dataframe()
    leaves = table[table["Feature"] == "Leaf"]
    values = fedxgbllr.leaf_values(booster)
    assert values.shape[0] == table["Tree"].nunique()
    # the table is a decimal dump; the JSON holds the float32 values themselves
    assert np.allclose(values[leaves["Tree"], leaves["Node"]], leaves["Gain"].to_numpy(), rtol=1e-6, atol=1e-7)
    inner = table[table["Feature"] != "Leaf"]
    assert not values[inner["Tree"], inner["Node"]].any()
