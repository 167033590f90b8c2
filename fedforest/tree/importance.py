"""Mean decrease in impurity (MDI), scikit-learn's ``feature_importances_``.

A split node ``n`` with children ``l`` and ``r`` decreases the impurity by
``w_n * i_n - w_l * i_l - w_r * i_r`` (``w`` the weighted in-bag rows, ``i``
the impurity).  A tree's importances are its decreases summed per feature and
divided by their total; a forest's are the mean over its trees with at
least one split, divided by their total again.

In the vertical forest the decreases need the labels (the master) and the
features need the columns (the parties): :func:`node_shares` gives each split
node its share of its tree's total decrease, which the master computes and
sends each party for the nodes the party owns; :func:`party_importances`
turns those shares into the party's own feature importances, and
:func:`owner_totals` gives the master each party's total.
"""
import numpy as np

from .format import NO_CHILD


def node_decreases(tree):
    """Weighted impurity decrease of every node (0 at leaves)."""
    left = np.asarray(tree["children_left"])
    right = np.asarray(tree["children_right"])
    w = np.asarray(tree["weighted_n_node_samples"], dtype=np.float64)
    imp = np.asarray(tree["impurity"], dtype=np.float64)
    out = np.zeros(left.shape[0])
    split = np.flatnonzero(left != NO_CHILD)
    if split.size:
        li, ri = left[split], right[split]
        out[split] = w[split] * imp[split] - w[li] * imp[li] - w[ri] * imp[ri]
    return out


def node_shares(tree):
    """Each node's share of its tree's total impurity decrease (all zeros for
    a tree without splits)."""
    d = node_decreases(tree)
    total = d.sum()
    return d / total if total > 0 else np.zeros_like(d)


def _with_splits(trees):
    return [t for t in trees if np.asarray(t["children_left"]).shape[0] > 1]


def _forest_mean(per_tree, width):
    """The forest's importances from per-tree importance vectors (scikit-learn's
    rule: mean over trees, then normalised to sum 1)."""
    if not per_tree:
        return np.zeros(width)
    mean = np.mean(np.vstack(per_tree), axis=0)
    total = mean.sum()
    return mean / total if total > 0 else mean


def _shares_by(trees, key, width):
    """Per tree with a split: its node shares summed by ``tree[key]`` at split nodes."""
    per_tree = []
    for t in _with_splits(trees):
        shares = node_shares(t)
        split = np.flatnonzero(np.asarray(t["children_left"]) != NO_CHILD)
        per_tree.append(np.bincount(np.asarray(t[key])[split], weights=shares[split], minlength=width))
    return per_tree


def feature_importances(trees, n_features):
    """MDI importances of complete trees (``feature`` holds global feature
    ids at split nodes), as scikit-learn's random forests compute them."""
    return _forest_mean(_shares_by(trees, "feature", n_features), n_features)


def party_importances(partial_trees, n_features):
    """A party's importances of its own ``n_features`` columns from its partial
    trees, each holding ``importance`` (the shares of the nodes it owns).
    They are the forest's importances restricted to this party's columns:
    the party's values sum to the party's share of the forest, not to 1
    (exactly so unless a tree's splits all had zero decrease)."""
    per_tree = []
    for t in _with_splits(partial_trees):
        feature = np.asarray(t["feature"])
        own = feature >= 0
        per_tree.append(np.bincount(feature[own], weights=np.asarray(t["importance"])[own],
                                    minlength=n_features))
    if not per_tree:
        return np.zeros(n_features)
    return np.mean(np.vstack(per_tree), axis=0)


def owner_totals(master_trees, n_parties):
    """Each party's share of the forest's impurity decrease (the master's view:
    the ``owner`` of every split, no features)."""
    return _forest_mean(_shares_by(master_trees, "owner", n_parties), n_parties)
