"""ID3 on categorical codes, its rules, and the ICDTA4FL-ID3 global tree from rules."""
import numpy as np

from fedforest.tree.format import LEAF, apply, node_values
from fedforest.tree.id3 import fit_id3, id3_from_rules, rules_from_id3
from fedforest.tree.rules import CATEGORICAL, Rule, aggregate

# Quinlan's "play tennis" table: outlook, temperature, humidity, wind -> play
OUTLOOK = {"sunny": 0, "overcast": 1, "rain": 2}
TEMP = {"hot": 0, "mild": 1, "cool": 2}
HUMID = {"high": 0, "normal": 1}
WIND = {"weak": 0, "strong": 1}
ROWS = [("sunny", "hot", "high", "weak", 0), ("sunny", "hot", "high", "strong", 0),
        ("overcast", "hot", "high", "weak", 1), ("rain", "mild", "high", "weak", 1),
        ("rain", "cool", "normal", "weak", 1), ("rain", "cool", "normal", "strong", 0),
        ("overcast", "cool", "normal", "strong", 1), ("sunny", "mild", "high", "weak", 0),
        ("sunny", "cool", "normal", "weak", 1), ("rain", "mild", "normal", "weak", 1),
        ("sunny", "mild", "normal", "strong", 1), ("overcast", "mild", "high", "strong", 1),
        ("overcast", "hot", "normal", "weak", 1), ("rain", "mild", "high", "strong", 0)]
X = np.array([[OUTLOOK[a], TEMP[b], HUMID[c], WIND[d]] for a, b, c, d, _ in ROWS])
Y = np.array([r[-1] for r in ROWS])
N_VALUES = [3, 3, 2, 2]


def _children(tree, n):
    s, c = tree["child_start"][n], tree["child_count"][n]
    return dict(zip(tree["child_value"][s:s + c].tolist(), tree["child_node"][s:s + c].tolist()))


def test_play_tennis_tree():
    tree = fit_id3(X, Y, N_VALUES, 2)
    assert tree["feature"][0] == 0                     # outlook at the root (gain 0.246)
    kids = _children(tree, 0)
    assert tree["feature"][kids[0]] == 2               # sunny -> humidity
    assert tree["feature"][kids[1]] == LEAF              # overcast -> yes
    assert tree["feature"][kids[2]] == 3               # rain -> wind
    assert tree["value"][kids[1]].tolist() == [0.0, 1.0]
    assert len(rules_from_id3(tree)) == 5
    assert np.array_equal(node_values(tree, X).argmax(axis=1), Y)


def test_max_depth_and_unseen_category():
    tree = fit_id3(X, Y, N_VALUES, 2, max_depth=1)
    assert (tree["feature"][1:] == LEAF).all()
    sunny = _children(tree, 0)[0]
    assert np.allclose(tree["value"][sunny], [3 / 5, 2 / 5])
    full = fit_id3(X[Y == 1], Y[Y == 1], N_VALUES, 2)  # a pure table: a single leaf
    assert full["feature"].tolist() == [LEAF]
    # a client that never saw "overcast": humidity at the root, then outlook
    # (sunny / rain only) under "high"; an overcast row stops at that node
    sub = fit_id3(X[X[:, 0] != 1], Y[X[:, 0] != 1], N_VALUES, 2)
    high = _children(sub, 0)[0]
    assert sub["feature"][0] == 2 and sub["feature"][high] == 0 and 1 not in _children(sub, high)
    row = np.array([[1, 0, 0, 0]])
    assert apply(sub, row)[0] == high
    assert np.allclose(node_values(sub, row)[0], sub["value"][high])


def test_rules_cover_every_row_once():
    tree = fit_id3(X, Y, N_VALUES, 2)
    rules = rules_from_id3(tree)
    for x, y in zip(X, Y):
        hits = [r for r in rules if all(x[f] == v for f, v in r.conditions.items())]
        assert len(hits) == 1 and hits[0].predicted == y
    assert sum(r.support for r in rules) == len(Y)


def _cat(cond, cls, n, k=2):
    d = np.zeros(k)
    d[cls] = 1.0
    return Rule(dict(cond), d, n, CATEGORICAL)


def test_global_id3_from_rules():
    # merged rules of two clients: x7 decides, x3 refines the "recommend" branch
    rules = [_cat({7: 0}, 0, 50), _cat({7: 1, 3: 0}, 1, 10), _cat({7: 1, 3: 1}, 0, 4), _cat({7: 1}, 1, 3)]
    tree = id3_from_rules(rules, 2)
    assert tree["feature"][0] == 7
    kids = _children(tree, 0)
    assert tree["feature"][kids[0]] == LEAF and tree["value"][kids[0]].argmax() == 0
    assert tree["feature"][kids[1]] == 3
    below = _children(tree, kids[1])
    # the unconditioned rule {x7: 1} goes to both x3 children
    assert tree["support"][below[0]] == 2 and tree["support"][below[1]] == 2


def test_icdta4fl_id3_on_client_trees():
    rng = np.random.default_rng(0)
    Xb = np.vstack([X] * 8)
    Yb = np.concatenate([Y] * 8)
    sets = []
    for part in np.array_split(rng.permutation(len(Yb)), 3):
        sets.append(rules_from_id3(fit_id3(Xb[part], Yb[part], N_VALUES, 2, max_depth=2)))
    merged, _ = aggregate(sets)
    tree = id3_from_rules(merged, 2, max_depth=2)
    acc = (node_values(tree, X).argmax(axis=1) == Y).mean()
    assert acc == 1.0


def test_numeric_bins_from_client_sketches():
    from fedforest.tree.id3 import agree_bins, bin_codes, bin_labels, numeric_sketch
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1, 3000), rng.normal(0.5, 1, 1000)
    edges = agree_bins([numeric_sketch(a, 4), numeric_sketch(np.append(b, np.nan), 4)], 4)
    assert np.all(np.diff(edges) > 0) and edges.size <= 4
    codes = bin_codes(np.concatenate([a, b]), edges)
    inner = np.bincount(codes, minlength=edges.size + 1)[1:]
    assert inner.min() > 0.2 * inner.sum() / inner.size          # about equal frequencies
    assert bin_codes([np.nan, edges[0], edges[0] + 1e-9], edges, missing_code=9).tolist() == [9, 0, 1]
    labels = bin_labels([1.0, 2.5, 30.0])
    assert labels == ["<= 1", "(1, 2.5]", "(2.5, 30]", "> 30"]
    close = bin_labels([1.0000001, 1.0000002])
    assert len(set(close)) == 3                                   # digits enough to tell them apart
