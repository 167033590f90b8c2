"""The flat-array tree format: the walk (binary, multiway and mixed trees) against
reference walks, scikit-learn conversion, leaf rules, old model trees, validation
of trees from files, and the impurity functions."""
import math
import subprocess
import sys
import time

import numpy as np
import pytest
from scipy.stats import entropy as scipy_entropy
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from fedforest import ForestClassifier, ForestRegressor
from fedforest.errors import InputError
from fedforest.tree import format as F
from fedforest.tree import criterion, id3, impurity, rules
from fedforest.tree.predict import mean_leaf_values, prepare_X


# ---------------------------------------------------------------------------
# random trees and reference walks
# ---------------------------------------------------------------------------
def random_tree(rng, numeric, categorical, n_values, max_depth=6, p_split=0.8, width=3,
                multiway_share=0.5, reuse=False):
    """A random tree: binary splits on the ``numeric`` columns, multiway splits on
    the ``categorical`` columns (``n_values[f]`` codes; each split has children
    for a random subset of them, listed in random order; a categorical column
    is tested once per path unless ``reuse``).  The root always splits.  Nodes are numbered
    breadth first; the children of a multiway node sit in ``child_*`` in the
    order nodes are expanded (not the node order)."""
    feature, left, right, thr, ml, start, count = [], [], [], [], [], [], []
    cval, cnode = [], []

    def new():
        feature.append(F.LEAF)
        left.append(F.NO_CHILD)
        right.append(F.NO_CHILD)
        thr.append(-2.0)
        ml.append(0)
        start.append(0)
        count.append(0)
        return len(feature) - 1

    queue = [(new(), 0, frozenset())]
    while queue:
        node, depth, used = queue.pop(0)
        if depth >= max_depth or (depth > 0 and rng.random() > p_split):
            continue
        free = [f for f in categorical if reuse or f not in used]
        if free and (not numeric or rng.random() < multiway_share):
            f = int(rng.choice(free))
            used = used | {f}
            codes = rng.permutation(n_values[f])[: rng.integers(1, n_values[f] + 1)]
            kids = [new() for _ in codes]
            feature[node], start[node], count[node] = f, len(cval), len(kids)
            cval.extend(int(c) for c in codes)
            cnode.extend(kids)
        elif numeric:
            f = int(rng.choice(numeric))
            kids = [new(), new()]
            feature[node], left[node], right[node] = f, kids[0], kids[1]
            thr[node] = float(np.round(rng.normal(), 1))
            ml[node] = int(rng.integers(2))
        else:
            continue
        queue.extend((k, depth + 1, used) for k in kids)
    value = rng.random((len(feature), width))
    value /= value.sum(axis=1, keepdims=True)
    if not categorical:
        return F.binary(left, right, feature, thr, value, ml)
    if not numeric:
        return F.multiway(feature, start, count, cval, cnode, value)
    return F.multiway(feature, start, count, cval, cnode, value, children_left=left,
                      children_right=right, threshold=thr, missing_left=ml)


def random_rows(rng, n, numeric, categorical, n_values, tree=None, nan_share=0.1):
    """Rows with numeric values (some NaN, some equal to the tree's thresholds) and
    category codes (some -1, some never seen by any split)."""
    n_cols = max(numeric + categorical) + 1
    X = np.full((n, n_cols), np.nan)
    for f in numeric:
        col = np.round(rng.normal(size=n), 1)
        if tree is not None:
            used = tree["threshold"][tree["feature"] == f] if "threshold" in tree else []
            used = [t for t in np.asarray(used) if np.isfinite(t) and t != -2.0]
            if used:
                hit = rng.random(n) < 0.2
                col[hit] = rng.choice(used, hit.sum())
        col[rng.random(n) < nan_share] = np.nan
        X[:, f] = col
    for f in categorical:
        X[:, f] = rng.integers(-1, n_values[f] + 1, n)   # -1 unseen, n_values[f] never split on
    return X


def numpy_walk(tree, X):
    """Reference: all rows advance one level per step, with numpy."""
    feature = np.asarray(tree["feature"])
    n_nodes = feature.size
    cl = np.asarray(tree.get("children_left", np.full(n_nodes, -1)))
    cr = np.asarray(tree.get("children_right", np.full(n_nodes, -1)))
    thr = np.asarray(tree.get("threshold", np.full(n_nodes, np.nan)), dtype=np.float64)
    ml = np.asarray(tree.get("missing_left", np.zeros(n_nodes)))
    count = np.asarray(tree.get("child_count", np.zeros(n_nodes, dtype=int)))
    n_codes = int(max(np.max(tree["child_value"], initial=0) + 1, 1)) if "child_value" in tree else 1
    table = np.full((n_nodes, n_codes), -1)   # (node, code) -> child
    for node in np.flatnonzero(count > 0):
        s = tree["child_start"][node]
        for k in range(s, s + count[node]):
            table[node, tree["child_value"][k]] = tree["child_node"][k]
    node = np.zeros(X.shape[0], dtype=np.int64)
    active = np.arange(X.shape[0])
    while active.size:
        nd = node[active]
        f = feature[nd]
        v = X[active, np.maximum(f, 0)]
        nxt = np.full(active.size, -1)
        is_multi = (f >= 0) & (count[nd] > 0)
        is_bin = (f >= 0) & (count[nd] == 0) & (cl[nd] >= 0)
        go_left = np.where(np.isnan(v), ml[nd] == 1, v <= thr[nd])
        nxt[is_bin] = np.where(go_left, cl[nd], cr[nd])[is_bin]
        code = np.where(np.isnan(v) | (v < 0) | (v >= n_codes), -1, v).astype(np.int64)
        found = table[nd, np.maximum(code, 0)]
        nxt[is_multi] = np.where(code >= 0, found, -1)[is_multi]
        moving = nxt >= 0
        node[active[moving]] = nxt[moving]
        active = active[moving]
    return node


def python_walk(tree, X):
    """Reference: one row at a time, in plain Python (binary trees)."""
    cl, cr = tree["children_left"].tolist(), tree["children_right"].tolist()
    feat, thr, ml = tree["feature"].tolist(), tree["threshold"].tolist(), tree["missing_left"].tolist()
    out = []
    for x in X.tolist():
        n = 0
        while cl[n] >= 0:
            v = x[feat[n]]
            n = (cl[n] if ml[n] else cr[n]) if v != v else (cl[n] if v <= thr[n] else cr[n])
        out.append(n)
    return np.array(out)


# ---------------------------------------------------------------------------
# the walk
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(8))
def test_apply_binary_trees(seed):
    rng = np.random.default_rng(seed)
    numeric = list(range(5))
    tree = random_tree(rng, numeric, [], {}, max_depth=7)
    assert "child_count" not in tree
    X = random_rows(rng, 3000, numeric, [], {}, tree)
    got = F.apply(tree, X)
    assert got.dtype == np.int64
    assert np.array_equal(got, numpy_walk(tree, X))
    assert np.array_equal(got, python_walk(tree, X))
    assert np.all(tree["children_left"][got] == F.NO_CHILD)
    assert np.array_equal(F.node_values(tree, X), tree["value"][got])


@pytest.mark.parametrize("seed", range(8))
def test_apply_multiway_trees(seed):
    rng = np.random.default_rng(100 + seed)
    n_values = {f: int(rng.integers(2, 6)) for f in range(4)}
    tree = random_tree(rng, [], list(n_values), n_values, max_depth=5)
    assert np.all(tree["children_left"] == F.NO_CHILD) and np.all(np.isnan(tree["threshold"]))
    X = random_rows(rng, 3000, [], list(n_values), n_values)
    X[rng.random(X.shape) < 0.05] = np.nan
    got = F.apply(tree, X)
    assert np.array_equal(got, numpy_walk(tree, X))
    # a row stops at a leaf, or at a multiway node without a child for its code
    inner = tree["child_count"][got] > 0
    for i in np.flatnonzero(inner):
        node = got[i]
        s, c = tree["child_start"][node], tree["child_count"][node]
        assert X[i, tree["feature"][node]] not in tree["child_value"][s:s + c]
    assert np.any(inner) and np.any(~inner)


def test_unseen_category_never_matches():
    # root on column 0 with children for codes 0 and 2; code -1, 1, 3, NaN stop at the root
    tree = F.multiway([0, F.LEAF, F.LEAF], [0, 0, 0], [2, 0, 0], [2, 0], [1, 2],
                      [[0.5, 0.5], [1, 0], [0, 1]])
    X = np.array([[0.0], [2.0], [-1.0], [1.0], [3.0], [np.nan], [0.5]])
    assert F.apply(tree, X).tolist() == [2, 1, 0, 0, 0, 0, 0]
    assert F.node_values(tree, X)[2].tolist() == [0.5, 0.5]


@pytest.mark.parametrize("seed", range(8))
def test_apply_mixed_trees(seed):
    rng = np.random.default_rng(200 + seed)
    numeric, categorical = [0, 2, 4], [1, 3, 5]
    n_values = {f: int(rng.integers(2, 5)) for f in categorical}
    tree = random_tree(rng, numeric, categorical, n_values, max_depth=6)
    multi = tree["child_count"] > 0
    binary = tree["children_left"] >= 0
    assert not np.any(multi & binary)
    X = random_rows(rng, 4000, numeric, categorical, n_values, tree)
    got = F.apply(tree, X)
    assert np.array_equal(got, numpy_walk(tree, X))


def test_apply_takes_int64_arrays_and_any_layout():
    rng = np.random.default_rng(5)
    tree = random_tree(rng, [0, 2], [1], {1: 3}, max_depth=5)
    X = random_rows(rng, 500, [0, 2], [1], {1: 3}, tree)
    as_loaded = {k: np.asarray(v).astype(np.float64 if k in ("value", "threshold") else np.int64)
                 for k, v in tree.items()}
    Xf = np.asfortranarray(X)
    assert np.array_equal(F.apply(as_loaded, Xf), F.apply(tree, X))
    assert np.array_equal(F.apply(tree, X[::2]), F.apply(tree, X)[::2])


def test_apply_rejects_too_few_columns():
    tree = F.binary([1, -1, -1], [2, -1, -1], [3, F.LEAF, F.LEAF], [0.0, -2, -2], np.eye(3)[:, :2])
    with pytest.raises(ValueError, match="column 3"):
        F.apply(tree, np.zeros((4, 3)))
    assert F.apply(tree, np.zeros((4, 4))).tolist() == [1] * 4


# ---------------------------------------------------------------------------
# vertical forests
# ---------------------------------------------------------------------------
def _forest_data(n, seed):
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, 6)), 2)
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int) + (X[:, 3] > 1)
    X[rng.random(X.shape) < 0.08] = np.nan
    return X, y


@pytest.mark.parametrize("split_method", ["hist", "exact"])
def test_apply_on_vertical_forest_trees(split_method):
    X, y = _forest_data(400, 1)
    forest = ForestClassifier(n_estimators=4, max_features=None, random_state=0,
                              split_method=split_method).fit(X, y)
    X_new, _ = _forest_data(300, 2)
    Xp = prepare_X(X_new, split_method)
    total = np.zeros((Xp.shape[0], forest.estimators_[0]["value"].shape[1]))
    for tree in forest.estimators_:
        got = F.apply(tree, Xp)
        assert np.array_equal(got, numpy_walk(tree, Xp))
        assert np.array_equal(got, python_walk(tree, Xp))
        total += tree["value"][got]
    assert np.allclose(mean_leaf_values(forest.estimators_, X_new, split_method), total / 4)
    assert np.allclose(forest.predict_proba(X_new), total / 4)


def test_apply_on_vertical_regression_trees():
    X, y = _forest_data(300, 3)
    forest = ForestRegressor(n_estimators=3, random_state=0).fit(X, y.astype(float))
    for tree in forest.estimators_:
        assert np.array_equal(F.apply(tree, X), numpy_walk(tree, X))


def test_partial_tree_stops_at_splits_held_elsewhere():
    X, y = _forest_data(300, 4)
    tree = ForestClassifier(n_estimators=1, max_features=None, random_state=0).fit(X, y).estimators_[0]
    cols = [0, 2, 4]
    internal = tree["children_left"] >= 0
    own = internal & np.isin(tree["feature"], cols)
    feature = np.where(internal, F.NOT_OWNED, F.LEAF).astype(np.int32)
    feature[own] = np.searchsorted(cols, tree["feature"][own])
    partial = dict(tree, feature=feature)
    got = F.apply(partial, X[:, cols])
    assert np.array_equal(got, numpy_walk(partial, X[:, cols]))
    assert set(partial["feature"][got].tolist()) <= {F.LEAF, F.NOT_OWNED}
    # the party's walk agrees with the complete tree until a split held elsewhere
    full = F.apply(tree, X)
    stops_early = partial["feature"][got] == F.NOT_OWNED
    assert np.array_equal(got[~stops_early], full[~stops_early])


# ---------------------------------------------------------------------------
# scikit-learn
# ---------------------------------------------------------------------------
def _sk_data(rng, n, n_classes):
    X = rng.normal(size=(n, 5)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    y = (np.nan_to_num(X[:, 0]) * 2 + np.nan_to_num(X[:, 1], nan=1.0) > 0).astype(int)
    y = (y + (np.nan_to_num(X[:, 2]) > 0.5) * 2) % n_classes
    return X, y


def test_from_sklearn_matches_apply_and_predict_proba():
    rng = np.random.default_rng(0)
    X, y = _sk_data(rng, 800, 3)
    clf = DecisionTreeClassifier(max_depth=7, random_state=0).fit(X, y)
    tree = F.from_sklearn(clf, 3)
    assert tree["children_left"].dtype == np.int32 and tree["feature"].dtype == np.int32
    assert tree["threshold"].dtype == np.float64 and tree["missing_left"].dtype == np.uint8
    assert tree["n_node_samples"].dtype == np.int64
    inner = clf.tree_.children_left >= 0
    assert np.array_equal(tree["threshold"][inner], F.float32_thresholds(clf.tree_.threshold[inner]))
    assert np.allclose(tree["threshold"], clf.tree_.threshold, rtol=1e-6)
    assert np.array_equal(tree["n_node_samples"], clf.tree_.n_node_samples)
    assert tree["missing_left"][tree["children_left"] >= 0].any()
    assert "child_count" not in tree
    X_new, _ = _sk_data(rng, 500, 3)
    for data in (X, X_new):
        assert np.array_equal(F.apply(tree, data.astype(np.float64)), clf.apply(data))
        assert np.allclose(F.node_values(tree, data.astype(np.float64)), clf.predict_proba(data))


def test_float64_rows_within_float32_rounding_of_a_threshold_go_where_sklearn_sends_them():
    X = np.array([[1.0], [1.0], [2.0], [2.0]])
    clf = DecisionTreeClassifier(random_state=0).fit(X, [0, 0, 1, 1])
    assert clf.tree_.threshold[0] == 1.5
    tree = F.from_sklearn(clf, 2)
    rows = np.array([[1.5], [1.5 + 1e-9], [1.5 - 1e-9], [1.5 + 1e-7], [1.5000001], [np.nextafter(1.5, 2)]])
    assert F.apply(tree, rows).tolist() == clf.apply(rows).tolist()
    assert F.apply(tree, rows)[1] == clf.tree_.children_left[0]      # 1.5 + 1e-9 is 1.5 in float32: left


def test_float32_thresholds_route_every_float64_as_its_float32_cast():
    rng = np.random.default_rng(5)
    t = np.concatenate([rng.normal(size=300), rng.normal(size=100) * 1e-30, [0.0, 1.5, 3e38, -3e38, np.inf]])
    t = np.where(rng.random(t.size) < 0.5, t.astype(np.float32).astype(np.float64), t)
    adjusted = F.float32_thresholds(t)
    for ti, ai in zip(t, adjusted):
        for x in (ai, np.nextafter(ai, np.inf), np.nextafter(ai, -np.inf), ti, ti + 1e-9, ti - 1e-9):
            with np.errstate(over="ignore"):
                cast = float(np.float32(x))
            assert (x <= ai) == (cast <= ti), (ti, x)


def test_from_sklearn_client_with_a_subset_of_the_classes():
    rng = np.random.default_rng(1)
    X, y = _sk_data(rng, 600, 2)
    codes = np.array([1, 3])[y]            # this client saw classes 1 and 3 of 5
    clf = DecisionTreeClassifier(max_depth=5, random_state=0).fit(X, codes)
    tree = F.from_sklearn(clf, 5)
    assert tree["value"].shape == (clf.tree_.node_count, 5)
    assert np.all(tree["value"][:, [0, 2, 4]] == 0)
    assert np.allclose(tree["value"].sum(axis=1), 1.0)
    proba = F.node_values(tree, X.astype(np.float64))
    assert np.allclose(proba[:, clf.classes_], clf.predict_proba(X))
    single = DecisionTreeClassifier().fit(X, np.full(X.shape[0], 2))  # one class only
    assert F.from_sklearn(single, 3)["value"].tolist() == [[0.0, 0.0, 1.0]]


def test_from_sklearn_rejects_what_it_cannot_convert():
    rng = np.random.default_rng(2)
    X, y = _sk_data(rng, 100, 2)
    with pytest.raises(ValueError, match="fitted"):
        F.from_sklearn(DecisionTreeClassifier(), 2)
    with pytest.raises(ValueError, match="fitted"):
        F.from_sklearn(DecisionTreeRegressor().fit(X, y), 2)
    with pytest.raises(ValueError, match="not codes"):
        F.from_sklearn(DecisionTreeClassifier().fit(X, y + 5), 2)


def test_format_module_does_not_import_sklearn():
    code = ("import sys; import fedforest.tree.format, fedforest.tree.id3, fedforest.tree.rules; "
            "print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------
# rules
# ---------------------------------------------------------------------------
def satisfied(rule, X):
    ok = np.ones(X.shape[0], dtype=bool)
    for f, c in rule.conditions.items():
        if rule.kind == rules.CATEGORICAL:
            ok &= X[:, f] == c
        else:
            lo, hi = c
            ok &= (lo < X[:, f]) & (X[:, f] <= hi)
    return ok


def leaves_of(tree):
    leaf = tree["children_left"] < 0
    if "child_count" in tree:
        leaf &= tree["child_count"] == 0
    return np.flatnonzero(leaf)


def check_rules_brute_force(tree, kind, X, every_leaf=True):
    """A row that reaches a leaf satisfies exactly that leaf's rule; a row that
    stops at an inner node satisfies none."""
    leaf_rules = rules.leaf_rules(tree, kind)
    leaves = np.array(list(leaf_rules), dtype=np.int64)
    assert leaves.tolist() == sorted(leaves.tolist())
    assert set(leaves.tolist()) <= set(leaves_of(tree).tolist())
    if every_leaf:
        assert leaves.tolist() == leaves_of(tree).tolist()
    hits = np.stack([satisfied(r, X) for r in leaf_rules.values()], axis=1)
    stop = F.apply(tree, X)
    at_leaf = np.isin(stop, leaves_of(tree))
    assert np.all(np.isin(stop[at_leaf], leaves))       # leaves without a rule are never reached
    assert np.all(hits[at_leaf].sum(axis=1) == 1)
    assert np.array_equal(leaves[hits[at_leaf].argmax(axis=1)], stop[at_leaf])
    assert not hits[~at_leaf].any()
    for n, r in leaf_rules.items():
        assert r.kind == kind and np.array_equal(r.dist, tree["value"][n])
    return leaf_rules


@pytest.mark.parametrize("seed", range(4))
def test_leaf_rules_of_random_binary_trees(seed):
    rng = np.random.default_rng(300 + seed)
    tree = random_tree(rng, list(range(4)), [], {}, max_depth=6)
    X = random_rows(rng, 2000, list(range(4)), [], {}, tree, nan_share=0.0)
    got = check_rules_brute_force(tree, rules.NUMERIC, X)
    assert all(r.support == 0.0 for r in got.values())


def test_leaf_rules_of_a_sklearn_tree():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(600, 4))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int)
    clf = DecisionTreeClassifier(max_depth=5, random_state=0).fit(X, y)
    tree = F.from_sklearn(clf, 2)
    X32 = X.astype(np.float32).astype(np.float64)
    got = check_rules_brute_force(tree, rules.NUMERIC, X32)
    assert sum(r.support for r in got.values()) == 600
    assert [r.support for r in got.values()] == tree["n_node_samples"][list(got)].tolist()
    assert [r.predicted for r in got.values()] == clf.tree_.value[list(got), 0].argmax(axis=1).tolist()
    old = rules.rules_from_tree(clf.tree_.children_left, clf.tree_.children_right, clf.tree_.feature,
                                clf.tree_.threshold, clf.tree_.value[:, 0, :], clf.tree_.n_node_samples)
    assert [r.conditions for r in old] == [r.conditions for r in got.values()]


def test_leaf_rules_of_id3_trees():
    rng = np.random.default_rng(8)
    n_values = [3, 4, 2, 3, 5]
    X = np.stack([rng.integers(0, v, 700) for v in n_values], axis=1)
    y = (X[:, 0] + X[:, 1] * X[:, 3] + (rng.random(700) < 0.1)) % 3
    tree = id3.fit_id3(X[:400], y[:400], n_values, 3, max_depth=3)
    Xt = X.astype(np.float64)
    Xt[rng.random(Xt.shape) < 0.05] = -1          # categories unseen in training
    got = check_rules_brute_force(tree, rules.CATEGORICAL, Xt)
    assert sum(r.support for r in got.values()) == 400
    assert [r.conditions for r in id3.rules_from_id3(tree)] == [r.conditions for r in got.values()]


@pytest.mark.parametrize("seed", range(4))
def test_leaf_rules_of_random_multiway_trees(seed):
    rng = np.random.default_rng(400 + seed)
    n_values = {f: 3 for f in range(3)}
    # random trees may test a feature twice on a path: leaves below two codes get no rule
    tree = random_tree(rng, [], list(n_values), n_values, max_depth=4, reuse=True)
    X = random_rows(rng, 2000, [], list(n_values), n_values)
    check_rules_brute_force(tree, rules.CATEGORICAL, X, every_leaf=False)
    tree = random_tree(rng, [], list(n_values), n_values, max_depth=4)
    check_rules_brute_force(tree, rules.CATEGORICAL, X)


def test_leaf_rules_skip_leaves_no_row_reaches():
    # x0 == 0, then x0 == 0 (reached) or x0 == 1 (never reached)
    tree = F.multiway([0, 0, F.LEAF, F.LEAF], [0, 1, 0, 0], [1, 2, 0, 0], [0, 0, 1], [1, 2, 3],
                      np.eye(4)[:, :2] + 0.5)
    got = rules.leaf_rules(tree, rules.CATEGORICAL)
    assert list(got) == [2] and got[2].conditions == {0: 0}


def test_leaf_rules_rejects_the_wrong_kind():
    rng = np.random.default_rng(10)
    binary = random_tree(rng, [0, 1], [], {}, max_depth=3, p_split=1.0)
    multi = random_tree(rng, [], [0], {0: 3}, max_depth=2, p_split=1.0)
    with pytest.raises(ValueError, match="binary split"):
        rules.leaf_rules(binary, rules.CATEGORICAL)
    with pytest.raises(ValueError, match="multiway split"):
        rules.leaf_rules(multi, rules.NUMERIC)
    partial = dict(binary, feature=np.where(binary["children_left"] >= 0, F.NOT_OWNED, F.LEAF))
    with pytest.raises(ValueError, match="another party"):
        rules.leaf_rules(partial, rules.NUMERIC)
    with pytest.raises(ValueError, match="kind"):
        rules.leaf_rules(binary, "other")


# ---------------------------------------------------------------------------
# trees of other origins: rules, ID3 builders, old model files
# ---------------------------------------------------------------------------
def test_trees_from_rules_and_id3_are_canonical():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(300, 3))
    y = (X[:, 0] > 0).astype(int)
    clf = DecisionTreeClassifier(max_depth=3, random_state=0).fit(X, y)
    rule_tree = rules.tree_from_rules(list(rules.leaf_rules(F.from_sklearn(clf, 2), rules.NUMERIC).values()), 2)
    assert rule_tree["n_rules"].dtype == np.int64 and rule_tree["missing_left"].dtype == np.uint8
    assert np.all(rule_tree["feature"][rule_tree["children_left"] < 0] == F.LEAF)
    Xc = rng.integers(0, 3, (200, 3))
    t = id3.fit_id3(Xc, Xc[:, 0] % 2, [3, 3, 3], 2)
    assert t["feature"][t["child_count"] == 0].tolist() == [F.LEAF] * int((t["child_count"] == 0).sum())
    for tree in (rule_tree, t):
        checked = F.check(tree, "tree")
        for k in tree:
            assert np.array_equal(checked[k], tree[k], equal_nan=True) and checked[k].dtype == tree[k].dtype
    assert id3._Builder is id3.Builder and id3._entropy is impurity.entropy


def _v1_id3(tree):
    """A tree as version-1 model files stored ID3 trees: leaves -1, no binary arrays, int64 lists."""
    out = {k: np.asarray(tree[k]).astype(np.float64 if k in ("value", "support") else np.int64)
           for k in ("feature", "child_start", "child_count", "child_value", "child_node", "value", "support")}
    out["feature"][out["feature"] == F.LEAF] = -1
    return out


def test_upgrade_v1_id3_trees():
    rng = np.random.default_rng(12)
    Xc = rng.integers(0, 3, (300, 4))
    y = (Xc[:, 0] + Xc[:, 2]) % 3
    tree = id3.fit_id3(Xc, y, [3, 3, 3, 3], 3, max_depth=2)
    old = _v1_id3(tree)
    new = F.check(F.upgrade_v1(old), "model")
    assert sorted(new) == sorted(tree)
    for k in tree:
        assert np.array_equal(new[k], tree[k], equal_nan=True), k
    assert np.array_equal(F.apply(new, Xc), F.apply(tree, Xc))
    with pytest.raises(InputError):          # an old tree is not a canonical tree
        F.check(old, "model")


def test_upgrade_v1_binary_trees_and_idempotence():
    rng = np.random.default_rng(13)
    X = rng.normal(size=(300, 3))
    X[rng.random(X.shape) < 0.1] = np.nan
    clf = DecisionTreeClassifier(max_depth=4, random_state=0).fit(np.nan_to_num(X), X[:, 0] > 0)
    tree = F.from_sklearn(clf, 2)
    old = {k: v for k, v in tree.items() if k != "missing_left"}   # version 1: NaN went right
    new = F.upgrade_v1(old)
    assert np.all(new["missing_left"] == 0)
    # the old walk: a NaN compares false with every threshold and goes right
    cl, cr, feat, thr = tree["children_left"], tree["children_right"], tree["feature"], tree["threshold"]
    ref = []
    for x in X:
        n = 0
        while cl[n] >= 0:
            n = cl[n] if x[feat[n]] <= thr[n] else cr[n]
        ref.append(n)
    assert F.apply(new, X).tolist() == ref
    # canonical trees come back unchanged, partial trees and mixed trees included
    partial = dict(tree, feature=np.where(cl >= 0, F.NOT_OWNED, F.LEAF).astype(np.int32))
    mixed = random_tree(rng, [0, 2], [1], {1: 3}, max_depth=4)
    for t in (tree, partial, mixed, id3.fit_id3(rng.integers(0, 2, (50, 2)), rng.integers(0, 2, 50), [2, 2], 2)):
        up = F.upgrade_v1(t)
        assert up is not t and sorted(up) == sorted(t)
        for k in t:
            assert np.array_equal(up[k], t[k], equal_nan=True)
        again = F.upgrade_v1(up)
        assert all(np.array_equal(again[k], up[k], equal_nan=True) for k in up)


# ---------------------------------------------------------------------------
# trees from files
# ---------------------------------------------------------------------------
def _as_json(tree):
    """What a JSON model file gives back: lists, read as int64 / float64."""
    return {k: np.asarray(np.asarray(v).tolist()).astype(
        np.float64 if k in ("value", "threshold", "support") else np.int64) for k, v in tree.items()}


def test_check_accepts_and_casts_trees_read_back():
    rng = np.random.default_rng(14)
    X = rng.normal(size=(200, 3))
    trees = [F.from_sklearn(DecisionTreeClassifier(max_depth=4).fit(X, X[:, 0] > 0), 2),
             id3.fit_id3(rng.integers(0, 3, (200, 3)), rng.integers(0, 2, 200), [3, 3, 3], 2),
             random_tree(rng, [0, 2], [1], {1: 3}, max_depth=4)]
    for tree in trees:
        back = F.check(_as_json(tree), "model m")
        assert sorted(back) == sorted(tree)
        for k in tree:
            assert back[k].dtype == tree[k].dtype and np.array_equal(back[k], tree[k], equal_nan=True), k


def _good():
    return F.multiway([0, F.LEAF, 1, F.LEAF, F.LEAF], [0, 0, 2, 0, 0], [2, 0, 0, 0, 0], [0, 1],
                      [1, 2], np.full((5, 2), 0.5), children_left=[-1, -1, 3, -1, -1],
                      children_right=[-1, -1, 4, -1, -1], threshold=[np.nan, np.nan, 0.5, np.nan, np.nan],
                      support=[4, 2, 2, 1, 1])


def _broken(**changes):
    tree = _as_json(_good())
    for k, v in changes.items():
        if v is None:
            del tree[k]
        else:
            tree[k] = v
    return tree


BROKEN = [
    ("no feature", _broken(feature=None), "no 'feature'"),
    ("no value", _broken(value=None), "no 'value'"),
    ("no threshold", _broken(threshold=None), "no 'threshold'"),
    ("half the child arrays", _broken(child_node=None), "no child_node"),
    ("text", _broken(feature=np.array(["a"] * 5)), "not numbers"),
    ("ragged", _broken(value=[[1.0, 0.0], [1.0]] * 2 + [[0.0, 1.0]]), "not an array"),
    ("fractional feature", _broken(feature=np.array([0.5, -2, 1, -2, -2])), "non-integer"),
    ("huge index", _broken(child_node=np.array([1, 2 ** 40])), "range"),
    ("short array", _broken(missing_left=np.zeros(4)), "shape"),
    ("value rows", _broken(value=np.zeros((4, 2))), "'value' has shape"),
    ("value not finite", _broken(value=np.full((5, 2), np.nan)), "non-finite"),
    ("no nodes", {k: np.zeros(0) for k in _good()} | {"value": np.zeros((0, 2))}, "not a list of nodes"),
    ("feature below LEAF", _broken(feature=np.array([0, -3, 1, -2, -2])), "below"),
    ("missing_left 2", _broken(missing_left=np.array([0, 0, 2, 0, 0])), "missing_left"),
    ("child out of range", _broken(children_left=np.array([-1, -1, 7, -1, -1])), "children_left 7"),
    ("cycle", _broken(children_right=np.array([-1, -1, 2, -1, -1])), "children_right 2"),
    ("one child", _broken(children_right=np.array([-1, -1, -1, -1, -1])), "one child"),
    ("children past the end", _broken(child_start=np.array([1, 0, 0, 0, 0])), "point outside"),
    ("negative count", _broken(child_count=np.array([2, -1, 0, 0, 0])), "point outside"),
    ("multiway and binary", _broken(children_left=np.array([3, -1, -1, -1, -1]),
                                    children_right=np.array([4, -1, -1, -1, -1])), "both"),
    ("negative code", _broken(child_value=np.array([0, -1])), "negative category"),
    ("multiway child back to root", _broken(child_node=np.array([1, 0])), "child 0"),
    ("child arrays differ", _broken(child_node=np.array([1, 2, 3])), "differ in length"),
]


@pytest.mark.parametrize("name,tree,message", BROKEN, ids=[b[0] for b in BROKEN])
def test_check_rejects_broken_trees(name, tree, message):
    assert F.check(_as_json(_good()), "model m")["support"].dtype == np.float64
    with pytest.raises(InputError, match=message) as info:
        F.check(tree, "model m")
    assert str(info.value).startswith("model m: ")


def test_check_rejects_what_is_not_a_dict():
    with pytest.raises(InputError, match="not a dict"):
        F.check([1, 2], "model m")


# ---------------------------------------------------------------------------
# impurity
# ---------------------------------------------------------------------------
def _counts(rng, shape):
    c = rng.integers(0, 6, shape).astype(np.float64)
    c[rng.random(shape) < 0.3] = 0
    c[0] = 0                                   # an all-zero distribution
    return c


@pytest.mark.parametrize("n_classes", [1, 2, 3, 9, 12])
def test_entropy_and_gini_against_references(n_classes):
    rng = np.random.default_rng(n_classes)
    counts = _counts(rng, (50, n_classes))
    e = impurity.entropy(counts)
    g = impurity.gini(counts)
    total = counts.sum(axis=1)
    for i, c in enumerate(counts):
        ref_e = scipy_entropy(c, base=2) if total[i] > 0 else 0.0
        p = c / total[i] if total[i] > 0 else c
        ref_g = 1.0 - (p * p).sum() if total[i] > 0 else 0.0
        assert math.isclose(e[i], ref_e, abs_tol=1e-12) and math.isclose(g[i], ref_g, abs_tol=1e-12)
        # a row alone gives exactly its value in the matrix, as a scalar
        assert impurity.entropy(c) == e[i] and np.ndim(impurity.entropy(c)) == 0
        assert impurity.gini(c) == g[i] and np.ndim(impurity.gini(c)) == 0
        # the numba kernel's impurity of the same class weights
        w = float(total[i])
        assert math.isclose(impurity.impurity(c, w, impurity.ENTROPY, 0.0), e[i], abs_tol=1e-12)
        assert math.isclose(impurity.impurity(c, w, impurity.GINI, 0.0), g[i], abs_tol=1e-12)
    assert e[0] == 0.0 and g[0] == 0.0 and not np.signbit(e[0])
    assert np.array_equal(impurity.entropy(counts.T, axis=0), e)
    assert np.array_equal(impurity.gini(counts.T, axis=0), g)
    cube = counts.reshape(5, 10, n_classes)
    assert np.array_equal(impurity.entropy(cube), e.reshape(5, 10))


def test_impurity_known_values_and_names():
    assert impurity.entropy([1, 1, 1, 1]) == 2.0 and impurity.entropy([3, 0]) == 0.0
    assert impurity.entropy([0, 0]) == 0.0 and impurity.gini([0, 0, 0]) == 0.0
    assert impurity.gini([1, 1]) == 0.5
    assert criterion.impurity is impurity.impurity
    assert (impurity.GINI, impurity.ENTROPY, impurity.SQUARED_ERROR) == (0, 1, 2)


# ---------------------------------------------------------------------------
# speed
# ---------------------------------------------------------------------------
def test_apply_is_much_faster_than_a_python_walk():
    rng = np.random.default_rng(15)
    tree = random_tree(rng, list(range(10)), [], {}, max_depth=14, p_split=0.9)
    X = random_rows(rng, 200_000, list(range(10)), [], {}, tree)
    F.apply(tree, X[:10])                       # compiled or loaded from the cache
    t0 = time.perf_counter()
    got = F.apply(tree, X)
    fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = python_walk(tree, X)
    slow = time.perf_counter() - t0
    assert np.array_equal(got, ref)
    print(f"\n200k rows, {len(tree['feature'])} nodes: format.apply {fast * 1e3:.1f} ms, "
          f"Python walk {slow * 1e3:.0f} ms, {slow / fast:.0f}x faster")
    assert slow / fast > 5
