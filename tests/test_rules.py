"""Rule extraction, compatibility and Cartesian merging (ICDTA4FL), on hand-made
trees and the worked examples of the method's Figures 1 and 2."""
import math

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

from fedforest.tree.rules import (
    CATEGORICAL,
    NUMERIC,
    Rule,
    aggregate,
    compatible,
    leaf_rules,
    merge,
    rules_from_tree,
)

INF = math.inf


def num(cond, cls, n, k=3):
    dist = np.zeros(k)
    dist[cls] = 1.0
    return Rule({f: tuple(v) for f, v in cond.items()}, dist, n, NUMERIC)


def cat(cond, cls, n, k=5):
    dist = np.zeros(k)
    dist[cls] = 1.0
    return Rule(dict(cond), dist, n, CATEGORICAL)


def test_cart_figure_2():
    a1 = num({0: (-INF, 32.5)}, 1, 2)
    a2 = num({0: (32.5, INF)}, 2, 4)
    b3 = num({0: (39, INF), 74: (0.5, INF), 3: (22, INF), 71: (-INF, 10.5)}, 2, 31)
    b4 = num({0: (35, INF), 74: (0.5, INF), 3: (22, INF), 71: (10.5, INF), 51: (-INF, 0.5)}, 2, 29)
    # x0 <= 32.5 contradicts x0 > 35
    assert not compatible(a1, b3) and not compatible(a1, b4)
    m = merge(a2, b3)
    # the less restrictive of x0 > 32.5 and x0 > 39 is kept
    assert m.conditions == {0: (32.5, INF), 74: (0.5, INF), 3: (22, INF), 71: (-INF, 10.5)}
    assert m.predicted == 2 and m.support == 35 and np.array_equal(m.dist, [0, 0, 2])
    assert merge(a2, b4).conditions[0] == (32.5, INF)
    assert m.text() == "x0 > 32.5 and x3 > 22 and x71 <= 10.5 and x74 > 0.5"


def test_cart_opposite_sides_overlap_and_touch():
    le40 = num({0: (-INF, 40.0)}, 0, 5)
    gt35 = num({0: (35.0, INF)}, 1, 5)
    gt40 = num({0: (40.0, INF)}, 1, 5)
    assert compatible(le40, gt35)
    assert merge(le40, gt35).conditions[0] == (35.0, 40.0)
    assert not compatible(le40, gt40)  # x <= 40 and x > 40 share no value


def test_id3_figure_1():
    a1 = cat({7: "recommend"}, 4, 5)
    a2 = cat({7: "not_recom"}, 0, 55)
    b1 = cat({3: "3", 4: "less_conv", 7: "recommend"}, 1, 13)
    b3 = cat({7: "not_recom"}, 0, 287)
    b4 = cat({0: "usual", 1: "less_proper", 7: "recommend"}, 1, 1)
    m = merge(a1, b1)
    assert compatible(a1, b1)
    assert m.conditions == {7: "recommend", 3: "3", 4: "less_conv"}
    assert merge(a2, b3).conditions == {7: "not_recom"}
    assert not compatible(a2, b4) and not compatible(a2, b1)
    rules, stats = aggregate([[a1, a2], [b1, b3, b4]])
    # 1A-1B, 1A-4B, 2A-3B
    assert sorted(r.text() for r in rules) == sorted([
        "x3 == 3 and x4 == less_conv and x7 == recommend",
        "x0 == usual and x1 == less_proper and x7 == recommend",
        "x7 == not_recom"])
    assert stats.steps[0]["pairs"] == 6 and stats.steps[0]["kept_rules"] == 3


def test_rules_of_a_hand_made_tree():
    #              x1 <= 2
    #             /       \
    #         x0 <= 1     leaf (class 1, 4 rows)
    #         /      \
    #    x1 <= 0.5   leaf (class 0, 3 rows)
    #     /     \
    #  leaf 1   leaf 0 (3 rows)
    cl = np.array([1, 3, -1, 5, -1, -1, -1])
    cr = np.array([2, 4, -1, 6, -1, -1, -1])
    feat = np.array([1, 0, -2, 1, -2, -2, -2])
    thr = np.array([2.0, 1.0, -2, 0.5, -2, -2, -2])
    value = np.array([[6, 5], [6, 1], [0, 4], [3, 1], [2, 1], [0, 1], [3, 0]], dtype=float)
    n = value.sum(axis=1)
    rules = rules_from_tree(cl, cr, feat, thr, value, n)
    got = {r.text(): (r.predicted, r.support) for r in rules}
    assert got == {
        "x0 <= 1 and x1 <= 0.5": (1, 1),
        "x0 <= 1 and x1 > 0.5 and x1 <= 2": (0, 3),
        "x0 > 1 and x1 <= 2": (0, 3),
        "x1 > 2": (1, 4),
    }


def test_rules_partition_the_space_of_a_fitted_tree():
    """Every row satisfies exactly one rule of its tree, and that rule's class is the tree's."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int)
    t = DecisionTreeClassifier(max_depth=4, random_state=0).fit(X, y).tree_
    rules = rules_from_tree(t.children_left, t.children_right, t.feature, t.threshold,
                            t.value[:, 0, :], t.n_node_samples)
    pred = DecisionTreeClassifier(max_depth=4, random_state=0).fit(X, y).predict(X)
    for x, p in zip(X, pred):
        hits = [r for r in rules if all(lo < x[f] <= hi for f, (lo, hi) in r.conditions.items())]
        assert len(hits) == 1 and hits[0].predicted == p


def test_aggregate_drops_unsupported_and_caps_with_warning():
    a = [num({0: (-INF, 0.0)}, 0, 3), num({0: (0.0, INF)}, 1, 0)]  # second has no support
    b = [num({1: (-INF, v)}, 0, i + 1) for i, v in enumerate(np.linspace(0, 1, 6))]
    rules, stats = aggregate([a, b])
    assert len(rules) == 6 and all(0 in r.conditions for r in rules)
    with pytest.warns(RuntimeWarning, match="1 rules of least estimated mass were not refined by rule set 2"):
        capped, stats = aggregate([a, b], max_rules=2)
    # refining the one rule would give 6 > 2 rules: it is kept whole, with its first distribution
    assert stats.capped and len(capped) == 1 and capped[0].conditions == {0: (-INF, 0.0)}
    assert stats.steps[0]["compatible"] == 6 and np.array_equal(capped[0].dist, [1, 0, 0])


def test_aggregate_drop_sets_leaves_out_the_set_that_would_exceed_the_cap():
    a = [num({0: (-INF, 0.0)}, 0, 3), num({0: (0.0, INF)}, 1, 2)]
    b = [num({1: (-INF, 0.0)}, 0, 2), num({1: (0.0, INF)}, 1, 2)]
    c = [num({2: (-INF, v)}, i % 2, 1) for i, v in enumerate(np.linspace(0, 1, 5))]
    two, _ = aggregate([a, b], max_rules=8, over_max_rules="drop_sets")
    with pytest.warns(RuntimeWarning, match="rule set 3 would give more than max_rules=8 rules; it and the 0"):
        got, stats = aggregate([a, b, c], max_rules=8, over_max_rules="drop_sets")
    assert stats.capped and stats.merged_sets == 2 and len(stats.steps) == 1
    assert [r.conditions for r in got] == [r.conditions for r in two] and len(got) == 4
    # coarsening instead merges c into some rules and leaves the others unrefined
    with pytest.warns(RuntimeWarning, match="not refined by rule set 3"):
        coarse, stats = aggregate([a, b, c], max_rules=8, over_max_rules="coarsen")
    assert stats.merged_sets == 3 and any(2 in r.conditions for r in coarse)


def test_aggregate_many_rule_sets_stays_bounded():
    rng = np.random.default_rng(1)
    sets = []
    for _ in range(20):  # 20 trees of 8 interval rules over 3 features
        sets.append([num({int(f): (lo, lo + 1.5)}, int(rng.integers(3)), int(rng.integers(1, 9)))
                     for f, lo in zip(rng.integers(0, 3, 8), rng.normal(size=8))])
    with pytest.warns(RuntimeWarning):
        rules, stats = aggregate(sets, max_rules=500)
    assert len(stats.steps) == 19 and all(s["kept_rules"] <= 500 for s in stats.steps)
    assert all(compatible(r, r) for r in rules)


def test_global_tree_from_rules_hand_made():
    from fedforest.tree.format import node_values
    from fedforest.tree.rules import tree_from_rules
    # two clients agree that x0 <= 0 is class 0 and x0 > 0 class 1; one also splits on x1
    rules = [num({0: (-INF, 0.0)}, 0, 10, k=2), num({0: (0.0, INF), 1: (-INF, 5.0)}, 1, 6, k=2),
             num({0: (0.0, INF), 1: (5.0, INF)}, 1, 4, k=2)]
    tree = tree_from_rules(rules, 2)
    # the root splits x0 at 0 (gain 0.918 bits: both children pure); every child is then a leaf
    assert tree["feature"][0] == 0 and tree["threshold"][0] == 0.0
    assert list(tree["children_left"]) == [1, -1, -1]
    assert list(tree["n_rules"]) == [3, 1, 2]
    proba = node_values(tree, np.array([[-1.0, 0.0], [1.0, 9.0]]))
    assert np.array_equal(proba.argmax(axis=1), [0, 1])


def test_global_tree_stops_when_no_split_reduces_a_child():
    from fedforest.tree.rules import tree_from_rules
    # the rules disagree but share the same condition: no split separates them
    rules = [num({0: (-INF, 1.0)}, 0, 3, k=2), num({0: (-INF, 1.0)}, 1, 5, k=2)]
    tree = tree_from_rules(rules, 2)
    assert tree["children_left"].tolist() == [-1]
    assert np.allclose(tree["value"][0], [0.5, 0.5])


def test_global_tree_from_fitted_client_trees_is_accurate():
    from fedforest.tree.format import node_values
    from fedforest.tree.rules import tree_from_rules
    rng = np.random.default_rng(3)
    X = rng.normal(size=(600, 3))
    y = ((X[:, 0] > 0.2) ^ (X[:, 1] > -0.5)).astype(int)
    sets = []
    for part in np.array_split(rng.permutation(600), 3):
        t = DecisionTreeClassifier(max_depth=3, random_state=0).fit(X[part], y[part]).tree_
        sets.append(rules_from_tree(t.children_left, t.children_right, t.feature, t.threshold,
                                    t.value[:, 0, :], t.n_node_samples))
    merged, _ = aggregate(sets)
    tree = tree_from_rules(merged, 2, max_depth=5)
    acc = (node_values(tree, X).argmax(axis=1) == y).mean()
    assert acc > 0.9, acc


# ---------------------------------------------------------------------------
# Exact conjunctions, rule mass, bounded merging
# ---------------------------------------------------------------------------
def _xor_boxes(seed, n):
    """Two small boxes of class 1 in a unit cube of class 0 (5 % noise): the
    minority class is cut into many small leaves by every client tree."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 5))
    y = (((X[:, 0] > 0.6) & (X[:, 1] > 0.5)) | ((X[:, 2] > 0.7) & (X[:, 3] < 0.4))).astype(int)
    return X, np.where(rng.random(n) < 0.05, 1 - y, y)


def _client_rule_sets(seed, n_clients=3, n=1800):
    from fedforest.tree import format as F
    X, y = _xor_boxes(seed, n)
    trees = [F.from_sklearn(DecisionTreeClassifier(max_depth=5, random_state=k).fit(X[p], y[p]), 2)
             for k, p in enumerate(np.array_split(np.arange(n), n_clients))]
    return trees, [list(leaf_rules(t, NUMERIC).values()) for t in trees]


def test_intersect_keeps_the_more_restrictive_bound_figure_2():
    a2 = num({0: (32.5, INF)}, 2, 4)
    b3 = num({0: (39, INF), 74: (0.5, INF), 3: (22, INF), 71: (-INF, 10.5)}, 2, 31)
    assert merge(a2, b3, bounds="intersect").conditions[0] == (39, INF)
    assert merge(a2, b3).conditions[0] == (32.5, INF)  # the method's text: the less restrictive
    le40, gt35 = num({0: (-INF, 40.0)}, 0, 5), num({0: (35.0, INF)}, 1, 5)
    assert merge(le40, gt35, bounds="intersect").conditions[0] == (35.0, 40.0)


def test_intersected_rules_of_client_trees_partition_the_space_and_carry_the_mass():
    trees, sets = _client_rule_sets(0)
    merged, _ = aggregate(sets, bounds="intersect")
    X, _ = _xor_boxes(7, 500)
    hits = np.array([[all(lo < x[f] <= hi for f, (lo, hi) in r.conditions.items()) for r in merged] for x in X])
    assert (hits.sum(axis=1) == 1).all()  # the cells of the trees' common refinement
    # a cell's mass is the product of its leaves' row shares; the masses add up to 1 over the cells
    # only when the trees are independent, so check the product itself on one row
    from fedforest.tree import format as F
    r = merged[int(np.argmax(hits[0]))]
    shares = [t["n_node_samples"][F.apply(t, X[:1])[0]] / t["n_node_samples"][0] for t in trees]
    assert r.mass == pytest.approx(np.prod(shares))


def test_global_tree_counting_rules_once_mislabels_a_leaf_and_mass_fixes_it():
    """The cause of the collapse on numeric data: in a depth-limited global tree,
    a leaf's class and the split gains count every merged rule once, however few
    rows it covers, so a class cut into many small cells outvotes a large cell."""
    from fedforest.tree.format import node_values
    from fedforest.tree.rules import tree_from_rules
    big = Rule({0: (-INF, 0.0)}, np.array([1.0, 0.0]), 100, NUMERIC, mass=0.5)
    wide = Rule({0: (0.0, INF), 1: (-INF, 0.0)}, np.array([1.0, 0.0]), 80, NUMERIC, mass=0.4)
    # class 1 in four tiny cells x1 in (0, 1], (1, 2], (2, 3], (3, inf)
    small = [Rule({0: (0.0, INF), 1: (lo, hi)}, np.array([0.0, 1.0]), 2, NUMERIC, mass=0.025)
             for lo, hi in ((0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, INF))]
    rules = [big, wide] + small
    # splits as the method's text makes them (x1 <= 0 cuts `big`), leaves kept as grown
    counted = tree_from_rules(rules, 2, max_depth=1, splits="any", prune=False)
    weighted = tree_from_rules(rules, 2, max_depth=1, weights=[r.mass for r in rules], splits="any",
                               prune=False)
    # both split x1 <= 0; the right leaf holds `big` (it spans the cut) and the four small cells
    assert counted["feature"][0] == weighted["feature"][0] == 1 and counted["threshold"][0] == 0.0
    assert np.allclose(counted["value"][2], [0.2, 0.8])           # 1 rule of class 0 against 4
    assert np.allclose(weighted["value"][2], [0.5 / 0.6, 0.1 / 0.6])
    row = np.array([[-1.0, 0.5]])  # inside `big`: half the rows, all of class 0
    assert node_values(counted, row).argmax() == 1 and node_values(weighted, row).argmax() == 0
    # unlimited depth separates every cell: both label every cell right
    cells = np.array([[-1.0, 0.5], [1.0, -1.0], [1.0, 0.5], [1.0, 1.5], [1.0, 2.5], [1.0, 9.0]])
    for w in (None, [r.mass for r in rules]):
        assert node_values(tree_from_rules(rules, 2, weights=w), cells).argmax(axis=1).tolist() == [0, 0, 1, 1, 1, 1]


def test_global_tree_of_intersected_rules_reproduces_the_client_trees_vote():
    from fedforest.tree.format import node_values
    from fedforest.tree.rules import tree_from_rules
    trees, sets = _client_rule_sets(1)
    merged, _ = aggregate(sets, bounds="intersect")
    tree = tree_from_rules(merged, 2, weights=[r.mass for r in merged])
    X, y = _xor_boxes(101, 2000)
    vote = np.mean([node_values(t, X) for t in trees], axis=0)
    glob = node_values(tree, X)
    # a leaf is one cell, or cells whose votes agree on the class: the tree predicts the vote's class
    assert (glob.argmax(axis=1) == vote.argmax(axis=1)).all()
    local = np.mean([(node_values(t, X).argmax(axis=1) == y).mean() for t in trees])
    assert (glob.argmax(axis=1) == y).mean() > local


def test_capped_merge_keeps_coverage_and_matches_one_block(monkeypatch):
    from fedforest.tree import rules as R
    _, sets = _client_rule_sets(2, n_clients=4)
    with pytest.warns(RuntimeWarning, match="not refined by rule set"):
        capped, stats = aggregate(sets, max_rules=150, bounds="intersect")
    assert stats.capped and all(s["kept_rules"] <= 150 for s in stats.steps)
    assert any(s["compatible"] > 150 for s in stats.steps)
    X, _ = _xor_boxes(9, 300)
    hits = np.array([[all(lo < x[f] <= hi for f, (lo, hi) in r.conditions.items()) for r in capped] for x in X])
    assert (hits.sum(axis=1) == 1).all()  # still a partition: unrefined rules keep their cells
    # merging block by block (one rule of the running set at a time) gives the same rules
    monkeypatch.setattr(R, "BLOCK_ELEMENTS", 1)
    with pytest.warns(RuntimeWarning):
        again, _ = aggregate(sets, max_rules=150, bounds="intersect")
    assert [(r.conditions, r.mass) for r in again] == [(r.conditions, r.mass) for r in capped]
    assert all(np.array_equal(a.dist, b.dist) for a, b in zip(again, capped))


def test_leaf_votes_weigh_a_leaf_by_its_rows():
    """A leaf's vote is the class counts of its rows ('rows', the default of
    ICDTA4FL) or its class fractions ('fractions', the method's text); merged
    rules add votes up, so with 'rows' a 10-row pure leaf does not outvote a
    700-row leaf of 91 % the other class, as it does with fractions."""
    from fedforest.tree.rules import leaf_votes
    big = Rule({0: (-INF, 5.0)}, np.array([640 / 703, 63 / 703]), 703, NUMERIC)
    small = Rule({1: (-INF, 2.0)}, np.array([0.0, 1.0]), 10, NUMERIC)
    rows = leaf_votes([big, small])
    assert np.allclose(rows[0].dist, [640, 63]) and np.allclose(rows[1].dist, [0, 10])
    assert rows[0].support == 703 and rows[0].conditions == big.conditions
    assert np.allclose(big.dist, [640 / 703, 63 / 703])              # the rules given are not changed
    assert merge(*rows).predicted == 0 and np.allclose(merge(*rows).dist, [640, 73])
    fractions = leaf_votes([big, small], "fractions")
    assert merge(*fractions).predicted == 1                            # 0.91 + 0 against 0.09 + 1
    keyed = leaf_votes({3: big, 7: small})
    assert list(keyed) == [3, 7] and np.allclose(keyed[7].dist, [0, 10])
    assert np.allclose(leaf_votes([Rule({}, np.array([0.5, 0.5]), 0, NUMERIC)])[0].dist, [0, 0])
    with pytest.raises(ValueError, match="votes must be one of"):
        leaf_votes([big], "mass")
    # aggregated (min_coverage = 0): each merged rule holds the class counts of its leaves' rows
    merged, _ = aggregate([leaf_votes([big]), leaf_votes([small])], bounds="intersect")
    assert len(merged) == 1 and merged[0].predicted == 0 and merged[0].support == 713
