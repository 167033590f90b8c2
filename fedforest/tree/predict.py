"""Forest prediction: complete trees, and the one-round federated scheme
(paper Algorithms 3 and 4: parties send per-leaf row sets, the master intersects)."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import format as tree_format
from . import leaf_sets, partitioner
from . import threads as kernel_threads
from ..errors import InputError


def prepare_X(X, split_method):
    """Feature values as the trees compare them (float32 precision in exact mode)."""
    X = np.asarray(X, dtype=np.float64)
    if split_method == "exact":
        X = X.astype(np.float32).astype(np.float64)
    return np.ascontiguousarray(X)


_WARM = []


def warm_up():
    """Load (or compile) the prediction kernels for this process on a tiny tree
    (once per process)."""
    if _WARM:
        return
    tree = {"children_left": np.array([1, -1, -1], dtype=np.int32),
            "children_right": np.array([2, -1, -1], dtype=np.int32),
            "feature": np.array([0, -2, -2], dtype=np.int32),
            "threshold": np.array([0.5, np.nan, np.nan]),
            "missing_left": np.array([1, 0, 0], dtype=np.uint8)}
    X = np.array([[0.0], [1.0], [np.nan]])
    for n in (3, 70000):
        Xn = np.resize(X, (n, 1))
        msg = pack_leaf_sets(party_leaf_sets(Xn, [tree], "hist"))
        leaf_positions(n, [unpack_leaf_sets(msg, [tree], n)], 0, 2)
    tree_format.apply(tree, prepare_X(X, "hist"))
    partitioner.goes_left(X[:, 0].copy(), np.arange(3, dtype=np.int32), 0, 3, 0.5, 1)
    _WARM.append(True)


def leaves_of(tree):
    return np.flatnonzero(tree["children_left"] < 0).astype(np.int32)


def mean_leaf_values(trees, X, split_method):
    """Average over complete trees of the leaf value each row lands in."""
    X = prepare_X(X, split_method)
    out = np.zeros((X.shape[0], trees[0]["value"].shape[1]))
    for t in trees:
        out += tree_format.node_values(t, X)
    return out / len(trees)


def party_leaf_sets(X_local, partial_trees, split_method):
    """One party's Algorithm 3 over every tree, in the compact form of
    :func:`fedforest.tree.leaf_sets.partial_leaf_sets` (row indices take 2 bytes
    when there are at most 65,536 rows, else 4)."""
    X = prepare_X(X_local, split_method)
    index_bytes = 2 if X.shape[0] <= 65536 else 4

    def one(t):
        return leaf_sets.partial_leaf_sets(X, t["children_left"], t["children_right"], t["feature"],
                                         t["threshold"], t["missing_left"], leaves_of(t), index_bytes)
    return in_threads(one, partial_trees)


def in_threads(fn, items):
    """``[fn(x) for x in items]`` on the kernels' thread count (``fn`` runs
    nogil kernels); results in item order."""
    workers = min(len(items), kernel_threads.threads())
    if workers <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, items))


def pack_leaf_sets(sets):
    """All trees' compact leaf sets as one message."""
    rows = np.concatenate([r for *_, r, _ in sets]) if sets else np.empty(0, np.uint32)
    small = rows.size == 0 or int(rows.max()) < 65536
    return {"set_of_leaf": np.concatenate([s[0] for s in sets]),
            "n_sets": np.array([s[1].size for s in sets], dtype=np.int64),
            "is_dense": np.concatenate([s[1] for s in sets]),
            "counts": np.concatenate([s[2] for s in sets]),
            "rows": rows.astype(np.uint16 if small else np.uint32),
            "dense": np.concatenate([s[4] for s in sets]).reshape(-1) if sets else np.empty(0, np.uint64)}


def unpack_leaf_sets(msg, trees, n_rows):
    """Per tree, the compact sets ``(set_of_leaf, is_dense, counts, rows, dense)``
    of a party's :func:`pack_leaf_sets` message (views, no copies)."""
    nw = (n_rows + 63) // 64
    n_leaves = [int(np.count_nonzero(t["children_left"] < 0)) for t in trees]
    n_sets = msg["n_sets"]
    if msg["set_of_leaf"].size != sum(n_leaves) or n_sets.size != len(trees):
        raise PartialTreeMismatch("prediction", "a party sent leaf sets of another forest")
    is_dense, counts, rows = msg["is_dense"], msg["counts"], msg["rows"]
    dense = msg["dense"].reshape(-1, nw)
    out, lo, so, ro, do = [], 0, 0, 0, 0
    for nl, ns in zip(n_leaves, n_sets):
        d, c = is_dense[so: so + ns], counts[so: so + ns]
        n_idx = int(c[d == 0].sum())
        n_dense = int(d.sum())
        out.append((msg["set_of_leaf"][lo: lo + nl], d, c, rows[ro: ro + n_idx],
                    dense[do: do + n_dense]))
        lo, so, ro, do = lo + nl, so + ns, ro + n_idx, do + n_dense
    return out


class PartialTreeMismatch(InputError):
    """The parties' partial trees do not belong to one model (Proposition 1 fails)."""


def leaf_positions(n_rows, leaf_sets_by_party, tree_index, n_leaves):
    """Master's Algorithm 4 for one tree: the leaf (position in the leaf list) of each
    row, from every party's compact sets of that tree."""
    nw = (n_rows + 63) // 64
    n_parties = len(leaf_sets_by_party)
    set_id = np.full((n_parties, n_leaves), -1, dtype=np.int64)
    parts = [sets[tree_index] for sets in leaf_sets_by_party]
    base = 0
    for p, (set_of_leaf, d, *_rest) in enumerate(parts):
        set_id[p] = np.where(set_of_leaf >= 0, set_of_leaf.astype(np.int64) + base, -1)
        base += d.size
    is_dense = np.concatenate([q[1] for q in parts]) if parts else np.empty(0, np.uint8)
    counts = np.concatenate([q[2] for q in parts]) if parts else np.empty(0, np.int64)
    sparse_counts = np.where(is_dense == 0, counts, 0)
    row_start = np.concatenate(([0], np.cumsum(sparse_counts)[:-1])).astype(np.int64)
    dense_row = (np.cumsum(is_dense, dtype=np.int64) - 1)
    rows = np.concatenate([q[3] for q in parts]) if parts else np.empty(0, np.uint32)
    dense = np.concatenate([q[4] for q in parts]) if parts else np.empty((0, nw), np.uint64)
    pos = leaf_sets.intersect_leaf_sets(n_rows, set_id, is_dense, counts, row_start, rows, dense_row,
                                dense.reshape(-1, nw), n_leaves)
    if n_rows and pos.min() < 0:
        bad = int(np.count_nonzero(pos < 0))
        raise PartialTreeMismatch(
            "prediction", f"tree {tree_index}: {bad} rows did not land in exactly one leaf; "
            "the parties' partial trees do not belong to the same model")
    return pos
