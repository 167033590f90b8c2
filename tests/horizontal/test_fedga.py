"""FedGA-Tree (mode ``fedga``) and its baselines: the structure kernel against
scikit-learn and a numpy reference, the string encoding, every GA operator,
the (mu+lambda) update, votes and helpers, runs over the in-process transport
(full and partial participation), model files, bad inputs, and an mpiexec run."""
import json
import os
import re

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification, make_regression
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from _util import client_files, mpirun
from fedforest.cli import main
from fedforest.errors import InputError, RemoteError
from fedforest.horizontal.fedga import ga
from fedforest.horizontal.fedga import n_active
from fedforest.horizontal.fedga.baselines import best_code_split, noisy_counts
from fedforest.jobs import run_horizontal
from fedforest.tree import format as tree_format
from fedforest.tree import structure as st
from fedforest.tree.edit_distance import levenshtein

NIL = st.NIL


# ---------------------------------------------------------------------------
# Fitting thresholds and leaf values
# ---------------------------------------------------------------------------
def _data(n=300, seed=0, classes=3):
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, 4)), 2)          # ties, and float32-exact enough
    X[:, 3] = rng.integers(0, 4, n)                   # a few distinct values
    y = ((X[:, 1] + 0.6 * rng.normal(size=n) > 0).astype(int) + (X[:, 0] > 1)) % classes
    return X, y


@pytest.mark.parametrize("depth", [1, 2, 4])
@pytest.mark.parametrize("f", [0, 1, 3])
def test_single_feature_structure_equals_sklearn(depth, f):
    """A structure that tests column f at every node is CART restricted to column f."""
    X, y = _data()
    s = np.full(st.string_length(depth), f, dtype=np.int32)
    tree = st.batch_tree(st.fit_batch(X, y, np.arange(len(y)), s[None], 3), 0)
    clf = DecisionTreeClassifier(max_depth=depth).fit(X[:, [f]], y)
    ref = tree_format.from_sklearn(clf, 3)
    assert np.array_equal(np.sort(tree["n_node_samples"]), np.sort(ref["n_node_samples"]))
    assert np.allclose(np.sort(tree["threshold"][tree["feature"] >= 0]),
                       np.sort(ref["threshold"][ref["feature"] >= 0]))
    assert np.allclose(tree_format.node_values(tree, X), clf.predict_proba(X[:, [f]]))
    assert st.decision_nodes(tree) == st.decision_nodes(ref)
    yr = X[:, 1] * 3 + X[:, 0] ** 2
    tree = st.batch_tree(st.fit_batch(X, yr, np.arange(len(y)), s[None], 0), 0)
    reg = DecisionTreeRegressor(max_depth=depth).fit(X[:, [f]], yr)
    assert np.allclose(tree_format.node_values(tree, X)[:, 0], reg.predict(X[:, [f]]))


def test_stump_threshold_is_sklearns():
    X, y = _data(seed=3)
    for f in range(4):
        tree = st.batch_tree(st.fit_batch(X, y, np.arange(len(y)), np.array([[f]], dtype=np.int32), 3), 0)
        clf = DecisionTreeClassifier(max_depth=1).fit(X[:, [f]], y)
        assert tree["threshold"][0] == pytest.approx(clf.tree_.threshold[0])
        assert tree["feature"][0] == f


def _reference_fit(X, y, rows, s, n_classes):
    """Plain numpy: greedy top-down over the string's slots, brute force over
    every threshold between distinct values; returns the prediction function."""
    d = st.depth_of(len(s))

    def value(r):
        if n_classes:
            return np.bincount(y[r].astype(int), minlength=n_classes) / len(r)
        return np.array([y[r].mean()])

    def impurity_sum(r):
        if n_classes:
            p = np.bincount(y[r].astype(int), minlength=n_classes) / len(r)
            return len(r) * (1 - (p ** 2).sum())
        return ((y[r] - y[r].mean()) ** 2).sum()

    def grow(r, slot, h):
        node = {"value": value(r)}
        if slot < 0 or s[slot] < 0 or len(r) < 2 or len(np.unique(y[r])) < 2:
            return node
        f = s[slot]
        v = np.unique(X[r, f])
        if len(v) < 2:
            return node
        best = None
        for a, b in zip(v[:-1], v[1:]):
            thr = a / 2 + b / 2
            left = r[X[r, f] <= thr]
            right = r[X[r, f] > thr]
            cost = impurity_sum(left) + impurity_sum(right)
            if best is None or cost < best[0] - 1e-9:
                best = (cost, thr, left, right)
        node["f"], node["thr"] = f, best[1]
        lslot = slot + 1 if h > 1 else -1
        rslot = slot + (1 << (h - 1)) if h > 1 else -1
        node["l"], node["r"] = grow(best[2], lslot, h - 1), grow(best[3], rslot, h - 1)
        return node

    root = grow(np.asarray(rows), 0, d)

    def predict(x):
        node = root
        while "f" in node:
            node = node["l"] if x[node["f"]] <= node["thr"] else node["r"]
        return node["value"]
    return predict


@pytest.mark.parametrize("n_classes", [2, 3, 0])
def test_kernel_matches_numpy_reference_on_random_structures(n_classes):
    rng = np.random.default_rng(n_classes)
    X = rng.normal(size=(120, 5))
    X[:, 4] = rng.integers(0, 3, 120)
    y = rng.integers(0, n_classes, 120).astype(float) if n_classes else X[:, 0] + rng.normal(size=120)
    rows = np.sort(rng.choice(120, 90, replace=False))
    pop = st.random_structures(rng, 12, 4, 5, 0.2)
    pop[3] = NIL                                                   # an all-nil string: one leaf
    batch = st.fit_batch(X, y, rows, pop, n_classes)
    for p in range(len(pop)):
        tree = st.batch_tree(batch, p)
        ref = _reference_fit(X, y, rows, pop[p], n_classes)
        expect = np.array([ref(x) for x in X])
        assert np.allclose(tree_format.node_values(tree, X), expect), p
        assert tree["n_node_samples"][0] == len(rows)
    assert batch[6][3] == 1


def test_constant_column_and_tiny_nodes_become_leaves():
    X = np.column_stack([np.ones(10), np.arange(10.0)])
    y = np.array([0, 1] * 5, dtype=float)
    tree = st.batch_tree(st.fit_batch(X, y, np.arange(10), np.array([[0]], dtype=np.int32), 2), 0)
    assert st.decision_nodes(tree) == 0                            # constant column
    tree = st.batch_tree(st.fit_batch(X, y, np.array([4]), np.array([[1, 1, 1]], dtype=np.int32), 2), 0)
    assert st.decision_nodes(tree) == 0                            # one row
    tree = st.batch_tree(st.fit_batch(X, np.zeros(10), np.arange(10), np.array([[1]], dtype=np.int32), 2), 0)
    assert st.decision_nodes(tree) == 0                            # pure


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------
def test_heights_and_children_positions():
    assert st.heights(3).tolist() == [3, 2, 1, 1, 2, 1, 1]
    assert st.depth_of(7) == 3 and st.depth_of(1) == 1
    with pytest.raises(ValueError):
        st.depth_of(6)


def test_decode_keeps_connected_part_and_canonicalize_clears_detached():
    s = np.array([0, 2, 1, 3, NIL, 1, 2], dtype=np.int32)    # right child nil: its subtree is detached
    tree = st.decode(s)
    assert tree["feature"].tolist() == [0, 2, 1, -2, -2, 3, -2, -2, -2]
    assert np.array_equal(st.canonicalize(s), [0, 2, 1, 3, NIL, NIL, NIL])
    assert np.array_equal(st.encode(tree, 3), st.canonicalize(s))
    root_nil = np.array([NIL, 1, 2, 3, 0, 1, 2], dtype=np.int32)
    assert np.all(st.canonicalize(root_nil) == NIL)
    assert st.decode(root_nil)["feature"].tolist() == [-2]


def test_canonicalize_kernel_matches_numpy_reference():
    rng = np.random.default_rng(1)
    pop = rng.integers(-1, 4, size=(50, 31)).astype(np.int32)
    hs = st.heights(5)

    def ref(s):
        out = s.copy()
        for i in range(len(s)):
            if s[i] < 0:
                out[i:i + (1 << hs[i]) - 1] = NIL
        # a slot is detached when any ancestor is nil: nil blocks cover their subtrees
        return out
    expect = np.array([ref(s) for s in pop])
    assert np.array_equal(st.canonicalize(pop), expect)


def test_encode_sklearn_tree_roundtrip_and_cut():
    X, y = _data()
    clf = DecisionTreeClassifier(max_depth=4, random_state=0).fit(X, y)
    tree = tree_format.from_sklearn(clf, 3)
    s = st.encode(tree, 4)
    assert len(s) == 15 and np.array_equal(st.canonicalize(s), s)
    assert st.decision_nodes(st.decode(s)) == st.decision_nodes(tree)
    cut = st.encode(tree, 2)
    assert np.array_equal(cut, s[[0, 1, 8]])                  # root and its two children


def test_edit_distance_matches_python_dp():
    rng = np.random.default_rng(2)

    def lev(a, b):
        d = list(range(len(b) + 1))
        for i, x in enumerate(a, 1):
            prev, d[0] = d[0], i
            for j, z in enumerate(b, 1):
                prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (x != z))
        return d[-1]
    for _ in range(20):
        a, b = rng.integers(0, 3, rng.integers(0, 9)), rng.integers(0, 3, rng.integers(1, 9))
        assert levenshtein(a, b) == lev(list(a), list(b))
    s = np.array([0, 1, 2], dtype=np.int32)
    assert st.preorder_distance(s, s) == 0.0
    assert 0 < st.preorder_distance(s, np.array([0, NIL, NIL], dtype=np.int32)) <= 1


# ---------------------------------------------------------------------------
# GA operators
# ---------------------------------------------------------------------------
def test_crossover_swaps_tails_and_depth_one_copies():
    rng = np.random.default_rng(0)
    a, b = np.arange(7, dtype=np.int32), np.arange(10, 17, dtype=np.int32)
    c1, c2 = ga.crossover(rng, a, b)
    cut = int(np.argmax(c1 >= 10))
    assert 1 <= cut <= 6
    assert np.array_equal(c1, np.r_[a[:cut], b[cut:]]) and np.array_equal(c2, np.r_[b[:cut], a[cut:]])
    d1, d2 = ga.crossover(rng, np.array([3]), np.array([NIL]))
    assert d1.tolist() == [3] and d2.tolist() == [NIL]


def test_node_flip_changes_m_slots_to_other_valid_values():
    rng = np.random.default_rng(1)
    for s in (np.full(15, NIL, dtype=np.int32), np.arange(15, dtype=np.int32) % 4, np.array([2], dtype=np.int32)):
        for _ in range(30):
            m = ga.n_mutations(0.2, len(s))
            out = ga.node_flip(rng, s, m, 4)
            assert out.shape == s.shape and ((out >= NIL) & (out < 4)).all()
            assert np.count_nonzero(out != s) == min(m, len(s))
    assert ga.n_mutations(0.05, 1) == 1 and ga.n_mutations(0.05, 1023) == 51


def test_node_swap_and_substring_swap_permute_values():
    rng = np.random.default_rng(2)
    s = np.arange(15, dtype=np.int32)
    for _ in range(20):
        out = ga.node_swap(rng, s, 2)
        assert sorted(out) == sorted(s) and 2 <= np.count_nonzero(out != s) <= 4
        out = ga.substring_swap(rng, s)
        assert sorted(out) == sorted(s) and not np.array_equal(out, s)
    nil = np.full(7, NIL, dtype=np.int32)
    assert np.array_equal(ga.node_swap(rng, nil, 3), nil)
    assert np.array_equal(ga.substring_swap(rng, nil), nil)
    one = np.array([1], dtype=np.int32)
    assert ga.node_swap(rng, one, 3).tolist() == [1] and ga.substring_swap(rng, one).tolist() == [1]
    three = np.array([0, 1, 2], dtype=np.int32)
    assert sorted(ga.substring_swap(rng, three)) == [0, 1, 2]


def test_tournament_prefers_fitter_and_offspring_are_canonical():
    rng = np.random.default_rng(3)
    fitness = np.arange(10.0)
    wins = [ga.tournament(rng, fitness, 3) for _ in range(300)]
    assert np.mean(wins) > 6 and ga.tournament(rng, fitness, 10) == 9
    pop = st.random_structures(rng, 10, 4, 5, 0.3)
    kids, op = ga.offspring(rng, pop, fitness, 7, 3, 1, 1, 5)
    assert kids.shape == (7, 15) and op in ga.OPERATORS
    assert np.array_equal(st.canonicalize(kids), kids)
    kids, _ = ga.offspring(rng, np.full((4, 1), NIL, dtype=np.int32), np.zeros(4), 4, 3, 1, 1, 5)
    assert kids.shape == (4, 1)


# ---------------------------------------------------------------------------
# Update rule, aggregation, participation, votes, helpers
# ---------------------------------------------------------------------------
def test_update_keeps_best_distinct_and_client_elites():
    cands = np.array([[0], [1], [2], [1], [3], [NIL]], dtype=np.int32)
    fit = np.array([0.5, 0.9, 0.1, 0.9, 0.7, 0.2])
    pop, f = ga.update(cands, fit, 3)
    assert pop[:, 0].tolist() == [1, 3, 0] and f.tolist() == [0.9, 0.7, 0.5]
    pop, f = ga.update(cands, fit, 3, elites={ga.key(np.array([2])), ga.key(np.array([NIL]))})
    assert pop[:, 0].tolist() == [1, NIL, 2]                     # the two client structures stay
    pop, f = ga.update(np.array([[1], [1], [2]], dtype=np.int32), np.array([0.3, 0.3, 0.6]), 4)
    assert pop[:, 0].tolist() == [2, 1, 2, 1]                   # two distinct: repeated


def test_weighted_fitness_and_active_subsets():
    f = ga.weighted_fitness({1: [1.0, 0.0], 3: [0.0, 1.0]}, {1: 30.0, 2: 999.0, 3: 10.0})
    assert np.allclose(f, [0.75, 0.25])
    assert n_active(1.0, 5) == 5 and n_active(0.25, 10) == 3 and n_active(0.1, 20) == 2 and n_active(0.1, 4) == 0
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(30):
        a = ga.choose_active(rng, [1, 2, 3, 4], 2)
        assert len(a) == 2 and a == sorted(a)
        seen.add(tuple(a))
    assert len(seen) > 3


def test_votes_and_noisy_size():
    scores = np.array([[0.5, 0.6, 0.7], [0.52, 0.62, 0.72], [0.49, 0.61, 0.69]])
    assert ga.vote_all_rows(scores, 1, 0.25, 0.02)[0] == 1
    assert ga.vote_all_rows(scores, 1, 0.25, 0.5)[0] == 0        # depths differ too little
    noisy = np.array([[0.1, 0.6], [0.9, 0.2], [-0.3, 0.4]])
    assert ga.vote_all_rows(noisy, 0, 0.25, 0.02)[0] == 0
    assert ga.vote_elitism(np.arange(10.0), 0.8)[0] == 1 and ga.vote_elitism(np.arange(10) % 3, 0.8)[0] == 0
    rng = np.random.default_rng(0)
    sizes = np.array([ga.noisy_size(rng, 100, 1.0) for _ in range(4000)])
    assert abs(sizes.mean() - 100) < 0.15 and abs(sizes.std() - np.sqrt(2)) < 0.15
    assert ga.noisy_size(rng, 0, 0.01) >= 1.0


def test_split_binning_and_f1():
    rng = np.random.default_rng(0)
    y = np.array([0] * 50 + [1] * 10)
    fit, val = ga.split_rows(rng, y, 0.8, True)
    assert len(fit) == 48 and np.count_nonzero(y[val] == 1) == 2 and not set(fit) & set(val)
    fit, val = ga.split_rows(rng, y, 1.0, True)
    assert np.array_equal(fit, val)
    col = np.arange(100.0)
    assert np.allclose(ga.fit_bins(col, 5), np.quantile(col, [0.2, 0.4, 0.6, 0.8]))
    skewed = np.r_[np.zeros(95), np.ones(5) * 4]
    assert ga.fit_bins(skewed, 5).tolist() == [2.0]               # one quantile bin: 2 uniform bins
    X = ga.apply_bins(np.column_stack([col, col]), [ga.fit_bins(col, 5).tolist(), None])
    assert X[:, 0].max() == 4 and np.array_equal(X[:, 1], col)
    from sklearn.metrics import f1_score
    a, b = rng.integers(0, 3, 50), rng.integers(0, 3, 50)
    assert ga.f1_score(a, b, 3) == pytest.approx(f1_score(a, b, average="macro"))
    assert ga.f1_score(a % 2, b % 2, 2) == pytest.approx(f1_score(a % 2, b % 2))


def test_ibm_noise_shares_sum_to_one_laplace_and_split_choice():
    rng = np.random.default_rng(0)
    X = np.zeros((1, 1))
    tree = tree_format.binary([-1], [-1], [-2], [-2.0], [[0.5, 0.5]])
    total = sum(noisy_counts(rng, X, np.array([0]), tree, [0], 2, 2, 2.0, 4) for _ in range(4))
    many = np.concatenate([sum(noisy_counts(rng, X, np.array([0]), tree, [0], 2, 2, 2.0, 4)
                               for _ in range(4)).ravel() for _ in range(1500)])
    assert total.shape == (1, 1, 2, 2)
    assert abs(np.var(many - np.tile([4, 0, 0, 0], 1500)) - 2 * 2.0 ** 2) < 0.8   # Laplace(2): var 8
    hist = np.zeros((2, 3, 2))
    hist[0] = [[10, 10], [10, 10], [10, 10]]                       # column 0 says nothing
    hist[1] = [[20, 0], [0, 5], [0, 15]]                           # column 1 splits at code 0
    assert best_code_split(hist) == (1, 0)


# ---------------------------------------------------------------------------
# Runs over the in-process transport
# ---------------------------------------------------------------------------
FAST = dict(generations=4, random_state=0, min_depth=2, max_depth=5, cv_folds=3)


def _clients(folder, task="classification", n=600, n_clients=3, seed=0):
    if task == "regression":
        X, y = make_regression(n, 5, n_informative=3, noise=5.0, random_state=seed)
    else:
        X, y = make_classification(n, 5, n_informative=3, n_classes=3, random_state=seed)
        y = np.array(["a", "b", "c"])[y]
    df = pd.DataFrame(X, columns=[f"x{j}" for j in range(5)])
    df["colour"] = np.where(X[:, 0] > 0.3, "red", np.where(X[:, 0] > -0.3, "green", "blue"))
    df["y"] = y
    return client_files(df, folder, n_clients)


def _run(paths, tests, folder, mode="fedga", task="classification", **opts):
    base = FAST if mode == "fedga" else {k: v for k, v in FAST.items() if k != "generations"}
    if mode == "ibm_tree":
        base = {"random_state": 0}
    return run_horizontal(paths, mode=mode, task=task, label_column="y", test_data=tests,
                          model_dir=str(folder / mode), **dict(base, **opts))


def test_fedga_classification_run_models_predict_explain(tmp_path, capsys):
    paths, tests = _clients(tmp_path)
    s = _run(paths, tests, tmp_path, binning=True)
    assert s["rounds"] == FAST["generations"] + 3
    assert 2 <= s["depth"] <= 5 and len(s["population"]) == 20
    assert len(s["history"]) == 4 and all(h["active"] == 3 for h in s["history"])
    assert [h["best"] for h in s["history"]] == sorted(h["best"] for h in s["history"])  # elitist: never worse
    assert s["test_f1"] > 0.5
    for r in (1, 2, 3):
        doc = json.load(open(os.path.join(s["model_dirs"][r], "model.json")))
        assert doc["mode"] == "fedga" and len(doc["bin_edges"]) == 6 and doc["bin_edges"][5] is None
        assert doc["metrics"]["structure"] == s["population"][s["chosen_structure"][r]]
        assert 0.0 <= s["edit_distance"][r] <= 1.0
    out = str(tmp_path / "p.csv")
    assert main(["predict", "--mode", "fedga", "--model-dir", s["model_dirs"][2], "--data", tests[1],
                 "--output", out]) == 0
    pred = pd.read_csv(out)
    assert list(pred.columns) == ["id", "prediction", "proba_a", "proba_b", "proba_c"]
    truth = pd.read_csv(tests[1])["y"]
    assert np.mean(pred["prediction"].to_numpy() == truth.to_numpy()) == pytest.approx(
        s["test_metrics"][2]["accuracy"])
    capsys.readouterr()
    assert main(["explain", "--model-dir", s["model_dirs"][2]]) == 0
    text = capsys.readouterr().out
    assert "fedga model" in text and "bin edge in the column's units" in text and "bin codes" not in text


def test_fedga_regression_votes_predict_explain(tmp_path, capsys):
    paths, tests = _clients(tmp_path, "regression")
    s = _run(paths, tests, tmp_path, task="regression", population_size=12)
    assert s["task"] == "regression" and len(s["population"]) == 12
    assert s["elitism"] is True                                    # continuous targets: all distinct
    y = pd.concat(pd.read_csv(t) for t in tests)["y"]
    assert s["test_mse"] < 0.6 * y.var()
    out = str(tmp_path / "p.csv")
    assert main(["predict", "--mode", "fedga", "--model-dir", s["model_dirs"][1], "--data", tests[0],
                 "--output", out]) == 0
    pred = pd.read_csv(out)["prediction"].to_numpy()
    assert np.mean((pred - pd.read_csv(tests[0])["y"]) ** 2) == pytest.approx(s["test_metrics"][1]["mse"])
    capsys.readouterr()
    assert main(["explain", "--model-dir", s["model_dirs"][1], "--data", tests[0], "--row", "3"]) == 0
    text = capsys.readouterr().out
    rules = [line for line in text.splitlines() if line.strip().startswith("rule ")]
    assert "(regression, " in text and len(rules) == s["decision_nodes"][1] + 1
    assert "row 3 is decided by rule" in text


def test_partial_participation_and_late_joiners(tmp_path):
    paths, tests = _clients(tmp_path, n=800, n_clients=4)
    s = _run(paths, tests, tmp_path, participation=0.5, generations=8)
    assert s["active_per_generation"] == 2 and len(s["proposed_depths"]) == 2
    assert all(h["active"] == 2 for h in s["history"])
    assert set(s["model_dirs"]) >= {1, 2, 3, 4} and set(s["edit_distance"]) == {1, 2, 3, 4}
    # the population's fitness is the weighted mean over the last generation's active clients
    # of their own scores: parents were re-evaluated on that subset
    last = s["history"][-1]["active_clients"]
    assert len(set(tuple(h["active_clients"]) for h in s["history"])) > 1
    w = np.array([s["noisy_sizes"][r] for r in last])
    for p in range(20):
        f = np.array([s["population_fitness"][r][p] for r in last])
        assert s["history"][-1]["best"] >= (f * w).sum() / w.sum() - 1e-12
        if p == 0:
            assert s["history"][-1]["best"] == pytest.approx((f * w).sum() / w.sum())
    full = _run(paths, tests, tmp_path, participation=1.0, generations=8, overwrite=True)
    # with every client active, parents are never refitted: each generation fits only new strings
    assert all(h["fitted"] <= 4 * 20 for h in full["history"][1:])


def test_same_seed_same_models(tmp_path):
    paths, tests = _clients(tmp_path)
    a = _run(paths, tests, tmp_path)
    b = _run(paths, tests, tmp_path, overwrite=True)
    assert a["population"] == b["population"] and a["test_metrics"] == b["test_metrics"]


def test_baselines(tmp_path):
    paths, tests = _clients(tmp_path)
    loc = _run(paths, tests, tmp_path, mode="fedga_local")
    assert loc["rounds"] == 1 and set(loc["depths"]) == {1, 2, 3}
    cen = _run(paths, tests, tmp_path, mode="fedga_central")
    assert cen["rounds"] == 2 and 2 <= cen["depth"] <= 5
    assert len(set(cen["decision_nodes"].values())) == 1          # one tree for everyone
    ibm = _run(paths, tests, tmp_path, mode="ibm_tree", epsilon=1e6)
    assert ibm["rounds"] == 6 + 1 + 1 and ibm["test_f1"] > 0.5
    noisy = _run(paths, tests, tmp_path, mode="ibm_tree", epsilon=0.001, overwrite=True)
    assert noisy["test_f1"] < ibm["test_f1"]


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("opts, match", [
    (dict(max_depth=21), r"max_depth: must be an int in \[1, 20\], got 21"),
    (dict(min_depth=0), r"min_depth: must be an int in \[1, 20\], got 0"),
    (dict(min_depth=6, max_depth=4), r"min_depth: must be at most max_depth \(4\), got 6"),
    (dict(participation=0.1), r"participation: must leave at least one active client of 3, got 0.1"),
    (dict(population_size=2), r"population_size: must be at least the number of clients \(3\), got 2"),
])
def test_bad_settings(tmp_path, opts, match):
    paths, tests = _clients(tmp_path, n=120)
    with pytest.raises(InputError, match=match):
        _run(paths, tests, tmp_path, **opts)
    assert not os.path.exists(tmp_path / "fedga")


def test_default_population_smaller_than_clients(tmp_path):
    paths = [str(tmp_path / f"c{k}.csv") for k in range(21)]
    with pytest.raises(InputError, match=r"population_size: must be at least the number of clients \(21\), "
                                         r"got 20"):
        run_horizontal(paths, mode="fedga", task="classification", label_column="y",
                       model_dir=str(tmp_path / "m"))
    assert not os.path.exists(tmp_path / "m")


def test_bad_data(tmp_path):
    paths, tests = _clients(tmp_path, n=120)
    pd.read_csv(paths[0]).iloc[:2].to_csv(paths[0], index=False)
    with pytest.raises(InputError, match=r"client 1: has 2 rows, fewer than the 3 cross-validation folds"):
        _run(paths, tests, tmp_path)
    paths, tests = _clients(tmp_path, n=120)
    pd.read_csv(paths[2]).drop(columns="x4").to_csv(paths[2], index=False)
    with pytest.raises(InputError, match=r"client 3: has other columns than client 1: missing \['x4'\]"):
        _run(paths, tests, tmp_path)
    paths, tests = _clients(tmp_path, n=120)
    df = pd.read_csv(paths[1])
    df["y"] = "not a number"
    df.to_csv(paths[1], index=False)
    with pytest.raises(RemoteError, match="regression labels must be numeric"):
        _run(paths, tests, tmp_path, task="regression")
    assert not os.path.exists(tmp_path / "fedga")


# ---------------------------------------------------------------------------
# mpiexec
# ---------------------------------------------------------------------------
def test_mpiexec_fedga(tmp_path):
    paths, tests = _clients(tmp_path, n=450)
    out = mpirun(4, ["train", "--mode", "fedga", "--task", "classification", "--data", *paths,
                     "--test-data", *tests, "--label-column", "y", "--model-dir", str(tmp_path / "m"),
                     "--generations", "3", "--max-depth", "4", "--cv-folds", "3", "--random-state", "1",
                     "--summary-json", str(tmp_path / "s.json")])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "fedga: 3 clients (3 active per generation)" in out.stdout
    summary = json.load(open(tmp_path / "s.json"))
    assert summary["rounds"] == 3 + 3 and summary["test_f1"] > 0.4
    for r in (1, 2, 3):
        assert os.path.isfile(tmp_path / "m" / f"client-{r}" / "model.json")


def test_missing_values_are_refused_without_a_hint_fedga_cannot_follow(tmp_path):
    """FedGA-Tree has no tree_type setting: its refusal of a missing value does
    not send the user to ``tree_type 'id3'``, which fedga refuses."""
    paths, tests = _clients(tmp_path)
    df = pd.read_csv(paths[0])
    df.loc[3, "x2"] = np.nan
    df.to_csv(paths[0], index=False)
    with pytest.raises((InputError, RemoteError), match="column 'x2' has missing values") as err:
        _run(paths, tests, tmp_path)
    message = getattr(err.value, "remote_message", str(err.value))
    assert message.endswith("this mode's trees need complete numeric columns (impute them first)"), message


def _loans(folder, n=900, n_clients=3, seed=0):
    """A lending-like table: rates and incomes in their own units (2 decimals),
    a text column; default is likelier at high rates and low incomes."""
    rng = np.random.default_rng(seed)
    rate = np.round(rng.uniform(5, 30, n), 2)
    income = np.round(rng.lognormal(11, 0.5, n) / 1000, 2)
    purpose = rng.choice(["car", "debt", "home"], n)
    p = 1 / (1 + np.exp(-(0.25 * (rate - 20) - 0.02 * (income - 60) + 0.5 * (purpose == "debt"))))
    df = pd.DataFrame({"int_rate": rate, "annual_inc": income, "purpose": purpose,
                       "y": np.where(rng.random(n) < p, "default", "paid")})
    return client_files(df, folder, n_clients)


_CONDITION = re.compile(r"(\w+) (>=|<|>|<=|in) (\{[^}]*\}|[-+0-9.e]+)")


def _holds(condition, row):
    name, op, value = condition
    if op == "in":
        return str(row[name]) in [v.strip() for v in value.strip("{}").split(",")]
    x, v = float(row[name]), float(value)
    return {">=": x >= v, "<": x < v, ">": x > v, "<=": x <= v}[op]


@pytest.mark.parametrize("mode", ["fedga", "ibm_tree"])
def test_explain_of_a_binned_model_gives_thresholds_in_the_columns_units(tmp_path, capsys, mode):
    paths, tests = _loans(tmp_path)
    opts = dict(binning=True, n_bins=8) if mode == "fedga" else dict(n_bins=8, max_depth=3)
    s = _run(paths, tests, tmp_path, mode=mode, **opts)
    folder = s["model_dirs"][2]
    doc = json.load(open(os.path.join(folder, "model.json")))
    edges = {c: e for c, e in zip(doc["encoding"]["columns"], doc["bin_edges"]) if e is not None}
    assert set(edges) == {"int_rate", "annual_inc"}
    capsys.readouterr()
    assert main(["explain", "--model-dir", folder]) == 0
    text = capsys.readouterr().out
    rules = [line.split(": ", 1)[1] for line in text.splitlines() if line.strip().startswith("rule ")]
    assert len(rules) == s["decision_nodes"][2] + 1 and "bin codes" not in text
    parsed = []
    for rule in rules:
        conds = _CONDITION.findall(rule.split(" THEN ")[0])
        for name, op, value in conds:
            if name in edges:      # a bin edge of this client, in the column's units (never a code)
                assert op in (">=", "<") and min(abs(float(value) - e) for e in edges[name]) < 1e-3, rule
            else:
                assert name == "purpose" and op == "in", rule
        parsed.append((conds, rule.split(" THEN ")[1]))
    # read in the columns' units, the rules decide every test row as predict does: one rule holds, its class
    out = str(tmp_path / "p.csv")
    assert main(["predict", "--mode", mode, "--model-dir", folder, "--data", tests[1], "--output", out]) == 0
    pred = pd.read_csv(out)["prediction"].astype(str).to_numpy()
    rows = pd.read_csv(tests[1])
    assert rows["int_rate"].between(5, 30).all()
    for i, row in rows.iterrows():
        holding = [then for conds, then in parsed if all(_holds(c, row) for c in conds)]
        assert holding == [pred[i]], (i, dict(row), holding)
    # the deciding rule of one row, with the row's own values
    capsys.readouterr()
    assert main(["explain", "--model-dir", folder, "--data", tests[1], "--row", "4"]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("row 4 ")][0]
    conds = _CONDITION.findall(line.split(" is decided by ")[1].split(" THEN ")[0])
    assert all(_holds(c, rows.iloc[4]) for c in conds) and line.endswith(f"THEN {pred[4]}")


def test_binned_condition_reads_codes_as_edges():
    from fedforest.horizontal.fedga.roles import binned_condition
    e = [10.0, 12.5, 16.29, 20.0]               # codes 0..4: x < 10, [10, 12.5), ..., x >= 20
    assert binned_condition("r", -np.inf, 2.5, e) == ["r < 16.29"]             # code <= 2
    assert binned_condition("r", 2.5, np.inf, e) == ["r >= 16.29"]             # code >= 3
    assert binned_condition("r", 0.5, 3.5, e) == ["r >= 10", "r < 20"]         # codes 1..3
    assert binned_condition("r", 1.0, 2.0, e) == ["r >= 12.5", "r < 16.29"]    # integer thresholds (ibm_tree)
    assert binned_condition("r", -np.inf, np.inf, e) == []
    got = ga.apply_bins(np.array([[9.99], [10.0], [16.28], [16.29], [20.0]]), [e])[:, 0]
    np.testing.assert_array_equal(got, [0, 1, 2, 3, 4])                        # an edge value: the bin above
