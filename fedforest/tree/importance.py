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

from ..errors import InputError
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


# --------------------------------------------------------------------------- boosting: XGBoost's definitions
# XGBoost's ``importance_type`` (``Booster.get_score``): per feature, over every
# split on it in the whole ensemble, the number of splits (``weight``), the
# summed or mean loss reduction (``total_gain``, ``gain``) and the summed or
# mean cover, the hessian sum of the split node (``total_cover``, ``cover``).
IMPORTANCE_TYPES = ("gain", "weight", "cover", "total_gain", "total_cover")
IMPORTANCE_MEANING = {
    "gain": "mean loss reduction of the feature's splits",
    "total_gain": "summed loss reduction of the feature's splits",
    "weight": "number of splits on the feature",
    "cover": "mean cover (hessian sum of the split node) of the feature's splits",
    "total_cover": "summed cover (hessian sum of the split node) of the feature's splits",
}


def split_gain_cover(tree):
    """Every node's loss reduction and cover (0 at leaves) of a boosting tree
    from its node statistics: under the Newton criterion the weighted impurity
    decrease :func:`node_decreases` is XGBoost's split gain
    ``G_l^2/(H_l+lambda) + G_r^2/(H_r+lambda) - G^2/(H+lambda)`` (``impurity``
    is ``-G^2/((H+lambda) H)`` and ``weighted_n_node_samples`` is ``H``), and
    the cover is ``H``."""
    left = np.asarray(tree["children_left"])
    cover = np.where(left != NO_CHILD, np.asarray(tree["weighted_n_node_samples"], dtype=np.float64), 0.0)
    return node_decreases(tree), cover


def split_scores(feature, gain, cover, width, importance_type):
    """XGBoost's ``get_score`` per feature ``0 .. width - 1`` from the splits'
    ``feature`` ids (negative: not a split counted here), loss reductions and
    covers (flat arrays, one entry per split node of any tree); a feature
    without a split scores 0."""
    if importance_type not in IMPORTANCE_TYPES:
        raise InputError("importance_type", f"must be one of {', '.join(map(repr, IMPORTANCE_TYPES))}, "
                                            f"got {importance_type!r}")
    feature = np.asarray(feature, dtype=np.int64)
    own = feature >= 0
    f = feature[own]
    count = np.bincount(f, minlength=width).astype(np.float64)
    if importance_type == "weight":
        return count
    w = np.asarray(gain if importance_type.endswith("gain") else cover, dtype=np.float64)[own]
    total = np.bincount(f, weights=w, minlength=width)
    if importance_type.startswith("total_"):
        return total
    return np.divide(total, count, out=np.zeros(width), where=count > 0)


def normalised(scores):
    """Scores divided by their sum (zeros stay zeros), as XGBoost's scikit-learn
    ``feature_importances_``."""
    scores = np.asarray(scores, dtype=np.float64)
    total = scores.sum()
    return scores / total if total > 0 else scores


def boost_split_table(trees):
    """``(feature, gain, cover)`` of every split node of complete boosting
    trees (``feature``: global ids), concatenated over the trees."""
    parts = [], [], []
    for t in trees:
        split = np.flatnonzero(np.asarray(t["children_left"]) != NO_CHILD)
        gain, cover = split_gain_cover(t)
        for acc, a in zip(parts, (np.asarray(t["feature"])[split], gain[split], cover[split])):
            acc.append(a)
    if not parts[0]:
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)
    return tuple(np.concatenate(a) for a in parts)


def boost_feature_importances(trees, n_features, importance_type="gain"):
    """XGBoost's scikit-learn ``feature_importances_`` of complete boosting
    trees: ``get_score(importance_type)`` per feature divided by its sum."""
    return normalised(split_scores(*boost_split_table(trees), n_features, importance_type))
