"""Horizontal mode ``efdt``: strategies and baselines over the in-process
transport, delta vs total merging, model files, local prediction and
explanation, the bad inputs of the mode, and a run under mpiexec."""
import json
import os

import numpy as np
import pandas as pd
import pytest

from _util import mpirun
from fedforest.cli import main
from fedforest.errors import InputError, RemoteError
from fedforest.horizontal.model_files import load_model
from fedforest.horizontal.efdt.roles import chunks, encode_rows, load_state
from fedforest.jobs import run_horizontal
from fedforest.tree import hoeffding as ht

CATS = ["a", "b", "c", None]


def _clients(folder, n_clients=4, n=2400, seed=0, numeric=True, drop_class_on=None, proxy=True):
    """Rows of a noisy rule over 3 categorical and (optionally) 2 numeric columns
    (with missing values), split across clients; returns (paths, tests, proxy path)."""
    rng = np.random.default_rng(seed)
    C = rng.integers(0, 4, size=(n, 3))
    df = pd.DataFrame({f"c{j}": [CATS[v] for v in C[:, j]] for j in range(3)})
    y = (C[:, 0] == 1) | (C[:, 1] == 3)
    if numeric:
        x = rng.normal(size=(n, 2))
        y = y ^ (x[:, 0] > 0.8)
        x[rng.random((n, 2)) < 0.02] = np.nan
        df["x0"], df["x1"] = x[:, 0], x[:, 1]
    flip = rng.random(n) < 0.05
    df["label"] = np.where(y ^ flip, "yes", "no")
    df.insert(0, "id", [f"r{i}" for i in range(n)])
    held = df.iloc[: n // 100]
    proxy_path = str(folder / "proxy.csv")
    held.to_csv(proxy_path, index=False)
    rest = df.iloc[n // 100:]
    paths, tests = [], []
    for k, rows in enumerate(np.array_split(np.arange(len(rest)), n_clients), start=1):
        part = rest.iloc[rows]
        if drop_class_on == k:
            part = part[part["label"] != "yes"]
        cut = int(len(part) * 0.8)
        paths.append(str(folder / f"c{k}.csv"))
        tests.append(str(folder / f"c{k}-test.csv"))
        part.iloc[:cut].to_csv(paths[-1], index=False)
        part.iloc[cut:].to_csv(tests[-1], index=False)
    return paths, tests, proxy_path


def _run(paths, folder, tests=None, **opts):
    base = dict(task="classification", label_column="label", rounds=20, grace_period=50,
                model_dir=str(folder / f"m-{opts.get('strategy', 'syn')}-{opts.get('merge', 'delta')}"),
                test_data=tests, proxy_data=str(folder / "proxy.csv"))
    base.update(opts)
    return run_horizontal(paths, mode="efdt", **base)


@pytest.mark.parametrize("strategy", ["syn", "sem", "ind", "local", "centralized"])
def test_strategies(tmp_path, strategy):
    paths, tests, _ = _clients(tmp_path)
    s = _run(paths, tmp_path, tests, strategy=strategy, binary_split=True)
    assert len(s["round_accuracy"]) == 20 and s["prequential_accuracy"] == s["round_accuracy"][-1]
    assert s["settings"]["new_leaf_seen"] == "zero"         # the default (river: "inherited")
    # the majority class is ~0.6; a client alone (~480 rows) learns less than the federation
    assert s["test_accuracy"] > (0.65 if strategy == "local" else 0.8), s["test_accuracy"]
    for r in range(1, 5):
        assert os.path.isfile(os.path.join(s["model_dirs"][r], "model.json"))
        assert os.path.isfile(os.path.join(s["model_dirs"][r], "efdt_state.npz"))
    assert (0 in s["model_dirs"]) == (strategy in ("syn", "sem", "centralized"))
    if strategy in ("syn", "sem"):
        assert len(s["base_client"]) == 20 and set(s["base_client"]) <= {1, 2, 3, 4}
        assert s["aggregation_seconds_per_round"] > 0
        # every client continues from, and keeps, the one merged tree
        trees = [load_model(s["model_dirs"][r])["tree"] for r in range(1, 5)]
        assert all(np.array_equal(t["feature"], trees[0]["feature"]) for t in trees)


def test_federation_beats_local_and_delta_root_equals_centralized(tmp_path):
    paths, tests, _ = _clients(tmp_path, n=3000, seed=1, numeric=False)
    runs = {(st, m): _run(paths, tmp_path, tests, strategy=st, merge=m, rounds=30)
            for st, m in [("syn", "delta"), ("syn", "total"), ("local", "delta"), ("centralized", "delta")]}
    early = {k: v["round_accuracy"][9] for k, v in runs.items()}
    assert early[("syn", "delta")] > early[("local", "delta")] + 0.02, early
    # the root is on every matched path: with deltas it holds the pooled stream's counts
    roots = {k: load_state(load_model(v["model_dirs"][1]))["nijk"][0] for k, v in runs.items()}
    n_rows = sum(v for v in runs[("syn", "delta")]["rows"].values())
    np.testing.assert_array_equal(roots[("syn", "delta")], roots[("centralized", "delta")])
    assert roots[("syn", "delta")][:4].sum() == n_rows
    assert roots[("syn", "total")][:4].sum() > 3 * n_rows      # totals count old rows again each round


def test_predict_and_explain_cli(tmp_path, capsys):
    paths, tests, _ = _clients(tmp_path, numeric=False)
    s = _run(paths, tmp_path, tests, strategy="syn", binary_split=True, leaf_prediction="nba")
    model_dir = str(tmp_path / "m-syn-delta")
    test = pd.read_csv(tests[0], keep_default_na=False, na_values=["NA", ""])
    test.loc[test.index[0], "c0"] = "zzz"          # a category never seen in training
    test.to_csv(tmp_path / "t.csv", index=False)
    out = str(tmp_path / "pred.csv")
    assert main(["predict", "--mode", "efdt", "--model-dir", model_dir, "--data", str(tmp_path / "t.csv"),
                 "--output", out]) == 0
    pred = pd.read_csv(out)
    assert list(pred.columns) == ["id", "prediction", "proba_no", "proba_yes"]
    acc = (pred["prediction"].to_numpy() == test["label"].to_numpy()).mean()
    assert acc == pytest.approx(s["test_metrics"][1]["accuracy"], abs=1.5 / len(test))
    capsys.readouterr()
    assert main(["explain", "--model-dir", model_dir, "--data", str(tmp_path / "t.csv"), "--row", "1"]) == 0
    text = capsys.readouterr().out
    assert "efdt model (" in text and "rule 1: IF" in text and "(no: " in text
    assert "row 1 is decided by rule" in text


def test_unseen_category_stops_at_the_inner_node(tmp_path):
    paths, tests, _ = _clients(tmp_path, numeric=False)
    s = _run(paths, tmp_path, strategy="syn", binary_split=False, leaf_prediction="mc")
    doc = load_model(s["model_dirs"][0])
    st = load_state(doc)
    assert st["kind"][0] == ht.MULTI
    enc = doc["encoding"]
    X = encode_rows(pd.DataFrame({c: ["zzz"] for c in enc.columns}), enc, "rows")
    assert (X == -1).all()
    proba = ht.state_proba(st, ht.Schema.from_dict(doc["schema"]), X.astype(np.int32), "mc")
    np.testing.assert_allclose(proba[0], st["counts"][0] / st["counts"][0].sum())


def test_tree_settings_reach_every_tree(tmp_path):
    """The settings beyond the paper's travel with the job: the centralized tree
    equals one tree learning the pooled stream with the same settings."""
    paths, tests, _ = _clients(tmp_path, numeric=False, n=1200)
    opts = dict(new_leaf_seen="inherited", merit_range="job", max_share_to_split=1.0, multiway_only=True,
                resplit_same_column=True)
    s = _run(paths, tmp_path, strategy="centralized", rounds=10, **opts)
    assert {k: s["settings"][k] for k in opts} == opts
    doc = load_model(s["model_dirs"][0])
    assert {k: doc["settings"][k] for k in opts} == opts
    st = load_state(doc)
    assert ht.EQ not in st["kind"]
    enc = doc["encoding"]
    schema = ht.Schema.from_dict(doc["schema"])
    parts = [pd.read_csv(p, keep_default_na=False, na_values=["NA", ""]) for p in paths]
    tree = ht.EFDT(schema, 2, **doc["settings"])
    for r in range(10):
        chunk = pd.concat([part.iloc[lo:hi] for part in parts for lo, hi in [chunks(len(part), 10)[r]]])
        X = encode_rows(chunk.drop(columns=["id", "label"]), enc, "rows").astype(np.int32)
        tree.learn(X, enc.labels(chunk["label"], "labels"))
    want = tree.state(deltas=False)
    for k in st:
        np.testing.assert_array_equal(st[k], want[k], err_msg=k)


def test_bin_edges_from_the_head_of_each_stream(tmp_path):
    paths, _, _ = _clients(tmp_path, n=2000)
    s = _run(paths, tmp_path, strategy="local", rounds=5, shuffle=True, random_state=5, edge_rows=100)
    assert s["edge_rows"] == 100
    doc = load_model(s["model_dirs"][1])
    for j, c in enumerate(doc["encoding"].columns):
        if c not in ("x0", "x1"):
            assert doc["edges"][j] is None
            continue
        sketches = []
        for rank, path in enumerate(paths, start=1):
            x = pd.read_csv(path)[c].to_numpy(dtype=np.float64)
            head = np.random.default_rng(5 + rank).permutation(x.size)[:100]   # the stream's first rows
            sketches.append(ht.quantile_sketch(x[head], 32))
        np.testing.assert_array_equal(doc["edges"][j], ht.agree_edges(sketches, 32))
    whole = _run(paths, tmp_path, strategy="local", rounds=5, model_dir=str(tmp_path / "w"))
    whole = load_model(whole["model_dirs"][1])
    j = doc["encoding"].columns.index("x0")
    assert not np.array_equal(doc["edges"][j], whole["edges"][j])


def test_chunks_and_short_streams():
    assert chunks(10, 4) == [(0, 2), (2, 5), (5, 8), (8, 10)]
    assert all(hi > lo for lo, hi in chunks(201, 200))


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------
def test_more_rounds_than_rows(tmp_path):
    paths, _, _ = _clients(tmp_path, n=400)
    with pytest.raises(InputError, match=r"rounds: must be at most the rows of every client \(client 1 has "
                                         r"\d+ rows\), got 200"):
        _run(paths, tmp_path, rounds=200)
    assert not (tmp_path / "m-syn-delta").exists()


def test_class_unseen_by_a_client_and_nan_in_numeric_columns(tmp_path):
    paths, tests, _ = _clients(tmp_path, drop_class_on=2)
    s = _run(paths, tmp_path, strategy="ind")
    doc = load_model(s["model_dirs"][2])
    assert doc["encoding"].classes == ["no", "yes"] and doc["tree"]["value"].shape[1] == 2
    assert s["n_bins"][3] is not None and s["n_bins"][0] is None   # x0 binned, c0 categorical


def test_different_columns_and_kinds(tmp_path):
    paths, _, _ = _clients(tmp_path)
    pd.read_csv(paths[1]).rename(columns={"c2": "c2b"}).to_csv(paths[1], index=False)
    with pytest.raises(InputError, match=r"client 2: has other columns than client 1: missing \['c2'\], "
                                         r"unexpected \['c2b'\]"):
        _run(paths, tmp_path)
    paths, _, _ = _clients(tmp_path)
    df = pd.read_csv(paths[2])
    df["x1"] = "text"
    df.to_csv(paths[2], index=False)
    with pytest.raises(InputError, match=r"column 'x1' is numeric on clients \[1, 2, 4\] and text on clients \[3\]"):
        _run(paths, tmp_path)


def test_client_with_zero_rows(tmp_path):
    paths, _, _ = _clients(tmp_path)
    pd.read_csv(paths[2]).iloc[:0].to_csv(paths[2], index=False)
    with pytest.raises(RemoteError, match="client 3: .* has no rows"):
        _run(paths, tmp_path)
    assert not (tmp_path / "m-syn-delta").exists()


def test_a_model_folder_is_not_replaced_without_overwrite(tmp_path):
    paths, _, _ = _clients(tmp_path, n=600)
    first = _run(paths, tmp_path, rounds=5)
    before = os.path.getmtime(os.path.join(first["model_dirs"][0], "model.json"))
    with pytest.raises((InputError, RemoteError), match="already holds a model"):
        _run(paths, tmp_path, rounds=5)
    assert os.path.getmtime(os.path.join(first["model_dirs"][0], "model.json")) == before
    _run(paths, tmp_path, rounds=5, overwrite=True)


@pytest.mark.parametrize("opts,match", [
    ({"strategy": "mean"}, "strategy: must be one of"),
    ({"merge": "sum"}, "merge: must be one of"),
    ({"rounds": 0}, "rounds: must be an int in \\[1, 100000\\], got 0"),
    ({"delta": 1.5}, "delta: must be"),
    ({"leaf_prediction": "knn"}, "leaf_prediction: must be one of"),
    ({"n_bins": 1}, "n_bins: must be an int in"),
    ({"edge_rows": 0}, "edge_rows: must be"),
    ({"max_share_to_split": 0}, "max_share_to_split: must be"),
    ({"new_leaf_seen": "half"}, "new_leaf_seen: must be one of"),
    ({"merit_range": "tree"}, "merit_range: must be one of"),
    ({"strategy": "sem", "proxy_data": None}, "proxy_data: must name the server's proxy rows file"),
    ({"strategy": "sem", "proxy_data": "/no/such.csv"}, "does not exist"),
    ({"task": "regression"}, "supports classification only"),
    ({"tree_type": "id3"}, "mode 'efdt' does not use it"),
])
def test_bad_settings(tmp_path, opts, match):
    paths, _, _ = _clients(tmp_path, n=400)
    with pytest.raises(InputError, match=match):
        _run(paths, tmp_path, **opts)
    assert not (tmp_path / "m-syn-delta").exists() and not (tmp_path / "m-sem-delta").exists()


# ---------------------------------------------------------------------------
# mpiexec
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("n_clients,strategy", [(3, "syn"), (4, "sem")])
def test_mpiexec(tmp_path, n_clients, strategy):
    paths, tests, proxy = _clients(tmp_path, n_clients=n_clients, n=2400)
    summary = str(tmp_path / "s.json")
    args = ["train", "--mode", "efdt", "--task", "classification", "--label-column", "label",
            "--data", *paths, "--test-data", *tests, "--model-dir", str(tmp_path / "m"), "--rounds", "10",
            "--grace-period", "50", "--strategy", strategy, "--proxy-data", proxy, "--summary-json", summary]
    proc = mpirun(n_clients + 1, args, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.load(open(summary))
    assert s["strategy"] == strategy and len(s["round_accuracy"]) == 10 and s["test_accuracy"] > 0.7
    assert s["exchanges"] == 11 and len(s["base_client"]) == 10
    assert os.path.isfile(tmp_path / "m" / "server" / "model.json")
    # the same job in one process learns the same trees
    same = _run(paths, tmp_path, tests, rounds=10, strategy=strategy, model_dir=str(tmp_path / "m2"))
    assert same["round_accuracy"] == s["round_accuracy"] and same["base_client"] == s["base_client"]
