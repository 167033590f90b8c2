"""Forest prediction: complete trees, and the one-round federated scheme
(paper Algorithms 3 and 4: parties send per-leaf row sets, the master intersects)."""
import numpy as np

from . import kernels as K
from ..errors import InputError


def prepare_X(X, split_method):
    """Feature values as the trees compare them (float32 precision in exact mode)."""
    X = np.asarray(X, dtype=np.float64)
    if split_method == "exact":
        X = X.astype(np.float32).astype(np.float64)
    return np.ascontiguousarray(X)


def leaves_of(tree):
    return np.flatnonzero(tree["children_left"] < 0).astype(np.int32)


def mean_leaf_values(trees, X, split_method):
    """Average over complete trees of the leaf value each row lands in."""
    X = prepare_X(X, split_method)
    out = np.zeros((X.shape[0], trees[0]["value"].shape[1]))
    for t in trees:
        leaf = K.apply_tree(X, t["children_left"], t["children_right"], t["feature"],
                            t["threshold"], t["missing_left"])
        out += t["value"][leaf]
    return out / len(trees)


def party_leaf_sets(X_local, partial_trees, split_method):
    """One party's Algorithm 3 over every tree: ``(explicit, words)`` per tree."""
    X = prepare_X(X_local, split_method)
    out = []
    for t in partial_trees:
        out.append(K.partial_leaf_bitmaps(X, t["children_left"], t["children_right"],
                                          t["feature"], t["threshold"], t["missing_left"],
                                          leaves_of(t)))
    return out


class PartialTreeMismatch(InputError):
    """The parties' partial trees do not belong to one model (Proposition 1 fails)."""


def leaf_positions(n_rows, leaf_sets_by_party, tree_index, n_leaves):
    """Master's Algorithm 4 for one tree: the leaf (position in the leaf list) of each row."""
    explicit = np.stack([ls[tree_index][0] for ls in leaf_sets_by_party]) if leaf_sets_by_party \
        else np.zeros((0, n_leaves), dtype=np.uint8)
    words = [ls[tree_index][1] for ls in leaf_sets_by_party]
    offsets = np.concatenate(([0], np.cumsum([w.shape[0] for w in words])))[:-1].astype(np.int64)
    nw = (n_rows + 63) // 64
    flat = np.concatenate(words) if words else np.empty((0, nw), dtype=np.uint64)
    pos = K.intersect_leaf_bitmaps(n_rows, explicit, flat.reshape(-1, nw), offsets,
                                   len(leaf_sets_by_party), n_leaves)
    if n_rows and pos.min() < 0:
        bad = int(np.count_nonzero(pos < 0))
        raise PartialTreeMismatch(
            "prediction", f"tree {tree_index}: {bad} rows did not land in exactly one leaf; "
            "the parties' partial trees do not belong to the same model")
    return pos
