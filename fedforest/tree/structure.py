"""Tree *structures*: decision features without thresholds or leaf values, as
fixed-length integer strings, and the kernel that fits thresholds and leaf
values to many structures at once (FedGA-Tree, :mod:`fedforest.horizontal.fedga`).

Encoding.  A structure of depth ``d`` is an int32 string of length
``2**d - 1``: the decision slots of a full binary tree of depth ``d`` in
pre-order (root, left subtree, right subtree).  A slot holds a column index or
:data:`NIL` (-1: the node is a leaf, or does not exist).  The slot at position
``i`` with *height* ``h`` (``h = d`` at the root) owns the block
``i .. i + 2**h - 2``; its left child is at ``i + 1``, its right child at
``i + 2**(h - 1)`` (none when ``h == 1``: the children are leaves).  Slots
below a NIL are *detached* and ignored; :func:`canonicalize` sets them to NIL
so that equal trees have equal strings.

Fitting (:func:`fit_structures`).  For every structure of a batch, greedy
top-down on the given rows: a decision node with column ``f`` takes the
best CART threshold *for column f* on the rows that reach it (Gini index for
classification, squared error for regression: scikit-learn's proxy
improvement, candidate positions scanned in increasing value order, a strictly
larger improvement replaces the best, two values closer than
:data:`FEATURE_THRESHOLD` are not split apart, the threshold is the midpoint of
the two values, or the lower one when the midpoint rounds up to the upper).
A node becomes a leaf when its slot is NIL, when fewer than 2 rows reach it,
when it is pure (one class, or one target value), or when column ``f`` is
constant on its rows.  The result is a batch of trees in the flat format of
:mod:`fedforest.tree.format` (children after parents, leaves ``LEAF``),
extracted one by one with :func:`batch_tree`.
"""
import numpy as np
from numba import njit

from .edit_distance import levenshtein

from . import format as tree_format

NIL = -1
FEATURE_THRESHOLD = 1e-7   # as scikit-learn: closer values are never split apart
MAX_DEPTH = 20             # strings of 2**20 - 1 slots at most


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------
def string_length(depth):
    """Slots of a depth-``depth`` string; ValueError beyond :data:`MAX_DEPTH`."""
    if not 1 <= int(depth) <= MAX_DEPTH:
        raise ValueError(f"a structure is 1..{MAX_DEPTH} deep, got {depth}")
    return (1 << int(depth)) - 1


def heights(depth):
    """The height of every slot of a depth-``depth`` string (root: ``depth``)."""
    L = string_length(depth)
    out = np.empty(L, dtype=np.int32)
    stack = [(0, int(depth))]
    while stack:
        i, h = stack.pop()
        out[i] = h
        if h > 1:
            stack.append((i + (1 << (h - 1)), h - 1))
            stack.append((i + 1, h - 1))
    return out


def depth_of(length):
    """The depth of a string of ``length`` slots (``2**d - 1``, ``d`` at most
    :data:`MAX_DEPTH`); ValueError otherwise."""
    d = int(length + 1).bit_length() - 1
    if d > MAX_DEPTH:
        raise ValueError(f"a structure string is at most {MAX_DEPTH} deep, got {length} slots")
    if d < 1 or string_length(d) != length:
        raise ValueError(f"a structure string has 2**d - 1 slots, got {length}")
    return d


@njit(cache=True)
def canonicalize_kernel(pop, heights):
    """In place: every slot below a NIL slot becomes NIL (``pop``: (P, L) int32)."""
    P, L = pop.shape
    for p in range(P):
        i = 0
        while i < L:
            if pop[p, i] < 0:
                size = (1 << heights[i]) - 1
                for k in range(i, i + size):
                    pop[p, k] = -1
                i += size
            else:
                i += 1


def canonicalize(pop):
    """Canonical copies of structure strings (one string or a (P, L) batch):
    detached slots set to :data:`NIL`."""
    a = np.array(pop, dtype=np.int32, ndmin=2, copy=True)
    a[a < 0] = NIL
    canonicalize_kernel(a, heights(depth_of(a.shape[1])))
    return a if np.ndim(pop) == 2 else a[0]


def encode(tree, depth):
    """The string of depth ``depth`` of a binary tree in the flat format (its
    ``feature``/``children_left``/``children_right``); decision nodes deeper
    than ``depth`` are cut off (their subtrees become leaves)."""
    feature = np.asarray(tree["feature"])
    left, right = np.asarray(tree["children_left"]), np.asarray(tree["children_right"])
    out = np.full(string_length(depth), NIL, dtype=np.int32)
    stack = [(0, 0, int(depth))]
    while stack:
        node, i, h = stack.pop()
        if left[node] < 0 or feature[node] < 0:
            continue
        out[i] = feature[node]
        if h > 1:
            stack.append((int(right[node]), i + (1 << (h - 1)), h - 1))
            stack.append((int(left[node]), i + 1, h - 1))
    return out


def decode(string):
    """The tree of a string in the flat format (nodes in pre-order, leaves
    ``LEAF``, thresholds NaN, values 0): the connected part from the root;
    detached slots are ignored."""
    s = np.asarray(string, dtype=np.int64)
    d = depth_of(s.shape[0])
    feature, left, right = [], [], []
    stack = [(0, d, -1, 0)]          # slot (or -1: below the last level), height, parent, side
    while stack:
        i, h, parent, side = stack.pop()
        node = len(feature)
        if parent >= 0:
            (left if side == 0 else right)[parent] = node
        f = int(s[i]) if i >= 0 else NIL
        feature.append(f if f >= 0 else tree_format.LEAF)
        left.append(tree_format.NO_CHILD)
        right.append(tree_format.NO_CHILD)
        if f >= 0:
            if h > 1:
                stack.append((i + (1 << (h - 1)), h - 1, node, 1))
                stack.append((i + 1, h - 1, node, 0))
            else:
                stack.append((-1, 0, node, 1))
                stack.append((-1, 0, node, 0))
    n = len(feature)
    return tree_format.binary(left, right, feature, np.full(n, np.nan), np.zeros(n))


def preorder_features(string):
    """The decoded tree as its pre-order list of node features (``LEAF`` at leaves)."""
    return decode(string)["feature"].astype(np.int64)


def decision_nodes(tree):
    """Number of decision (binary split) nodes of a flat tree."""
    return int(np.count_nonzero(np.asarray(tree["children_left"]) >= 0))


def random_structures(rng, n, depth, n_features, leaf_ratio):
    """``n`` canonical random strings: every slot a uniform column, then NIL
    with probability ``leaf_ratio``."""
    L = string_length(depth)
    pop = rng.integers(0, n_features, size=(n, L)).astype(np.int32)
    pop[rng.random((n, L)) < leaf_ratio] = NIL
    return canonicalize(pop)


def preorder_distance(s1, s2):
    """Normalized distance of two structures: the Levenshtein distance of their
    pre-order feature lists (leaves included) over the longer list's length
    (not a tree edit distance: see :mod:`fedforest.tree.edit_distance`)."""
    a, b = preorder_features(s1), preorder_features(s2)
    return float(levenshtein(a, b)) / max(a.shape[0], b.shape[0])


# ---------------------------------------------------------------------------
# Fitting thresholds and leaf values
# ---------------------------------------------------------------------------
def max_nodes(depth, n_rows):
    """Node slots a fitted tree of a depth-``depth`` string can use on ``n_rows`` rows."""
    return int(max(1, min((1 << (int(depth) + 1)) - 1, 2 * int(n_rows) - 1)))


@njit(cache=True)
def fit_structures(X, y, rows, pop, heights, n_classes, max_nodes):
    """Fit every string of ``pop`` ((P, L) int32, canonical or not) on the rows
    ``rows`` of ``X`` (float64, (n, F)) with labels ``y`` (float64: class codes
    when ``n_classes > 0``, targets when ``n_classes == 0``).

    Returns ``(feature, children_left, children_right, threshold, value,
    n_node_samples, n_nodes)``: per string, node arrays of ``max_nodes`` slots
    (``value``: (P, max_nodes, width) class fractions or means) of which the
    first ``n_nodes[p]`` are used."""
    P = pop.shape[0]
    W = n_classes if n_classes > 0 else 1
    feature = np.full((P, max_nodes), -2, dtype=np.int32)
    left = np.full((P, max_nodes), -1, dtype=np.int32)
    right = np.full((P, max_nodes), -1, dtype=np.int32)
    threshold = np.full((P, max_nodes), -2.0)
    value = np.zeros((P, max_nodes, W))
    samples = np.zeros((P, max_nodes), dtype=np.int64)
    n_nodes = np.zeros(P, dtype=np.int64)
    n = rows.shape[0]
    idx = np.empty(n, dtype=np.int64)
    tmp_rows = np.empty(n, dtype=np.int64)
    vals = np.empty(n)
    svals = np.empty(n)
    tot = np.zeros(W)
    lc = np.zeros(W)
    st_node = np.empty(max_nodes, dtype=np.int64)
    st_slot = np.empty(max_nodes, dtype=np.int64)
    st_start = np.empty(max_nodes, dtype=np.int64)
    st_end = np.empty(max_nodes, dtype=np.int64)
    L = pop.shape[1]
    for p in range(P):
        for k in range(n):
            idx[k] = rows[k]
        count = 1
        top = 0
        st_node[0] = 0
        st_slot[0] = 0 if L > 0 else -1
        st_start[0] = 0
        st_end[0] = n
        top = 1
        while top > 0:
            top -= 1
            node = st_node[top]
            slot = st_slot[top]
            s = st_start[top]
            e = st_end[top]
            m = e - s
            samples[p, node] = m
            # leaf value and purity
            pure = True
            acc = 0.0
            if n_classes > 0:
                for c in range(W):
                    tot[c] = 0.0
                for k in range(s, e):
                    tot[int(y[idx[k]])] += 1.0
                nz = 0
                for c in range(W):
                    if tot[c] > 0:
                        nz += 1
                    value[p, node, c] = tot[c] / m if m > 0 else 0.0
                pure = nz <= 1
            else:
                for k in range(s, e):
                    acc += y[idx[k]]
                value[p, node, 0] = acc / m if m > 0 else 0.0
                for k in range(s + 1, e):
                    if y[idx[k]] != y[idx[s]]:
                        pure = False
                        break
            if slot < 0 or m < 2 or pure:
                continue
            f = pop[p, slot]
            if f < 0:
                continue
            for k in range(m):
                vals[k] = X[idx[s + k], f]
            order = np.argsort(vals[:m])
            for k in range(m):
                tmp_rows[k] = idx[s + order[k]]
                svals[k] = vals[order[k]]
            for k in range(m):
                idx[s + k] = tmp_rows[k]
            if svals[m - 1] <= svals[0] + FEATURE_THRESHOLD:
                continue                      # constant column on these rows
            best = -np.inf
            best_pos = -1
            if n_classes > 0:
                for c in range(W):
                    lc[c] = 0.0
                sq_l = 0.0
                sq_r = 0.0
                for c in range(W):
                    sq_r += tot[c] * tot[c]
                for k in range(m - 1):
                    c = int(y[idx[s + k]])
                    sq_l += 2.0 * lc[c] + 1.0
                    rc = tot[c] - lc[c]
                    sq_r -= 2.0 * rc - 1.0
                    lc[c] += 1.0
                    if svals[k + 1] <= svals[k] + FEATURE_THRESHOLD:
                        continue
                    nl = k + 1.0
                    nr = m - nl
                    proxy = sq_l / nl + sq_r / nr
                    if proxy > best:
                        best = proxy
                        best_pos = k + 1
            else:
                sum_l = 0.0
                for k in range(m - 1):
                    sum_l += y[idx[s + k]]
                    if svals[k + 1] <= svals[k] + FEATURE_THRESHOLD:
                        continue
                    nl = k + 1.0
                    nr = m - nl
                    sum_r = acc - sum_l
                    proxy = sum_l * sum_l / nl + sum_r * sum_r / nr
                    if proxy > best:
                        best = proxy
                        best_pos = k + 1
            if best_pos < 0:
                continue
            a = svals[best_pos - 1]
            b = svals[best_pos]
            thr = a / 2.0 + b / 2.0
            if thr == b or thr == np.inf or thr == -np.inf:
                thr = a
            feature[p, node] = f
            threshold[p, node] = thr
            lnode = count
            rnode = count + 1
            count += 2
            left[p, node] = lnode
            right[p, node] = rnode
            h = heights[slot]
            lslot = slot + 1 if h > 1 else -1
            rslot = slot + (1 << (h - 1)) if h > 1 else -1
            st_node[top] = rnode
            st_slot[top] = rslot
            st_start[top] = s + best_pos
            st_end[top] = e
            top += 1
            st_node[top] = lnode
            st_slot[top] = lslot
            st_start[top] = s
            st_end[top] = s + best_pos
            top += 1
        n_nodes[p] = count
    return feature, left, right, threshold, value, samples, n_nodes


def fit_batch(X, y, rows, pop, n_classes):
    """:func:`fit_structures` with the slot heights and node budget worked out;
    ``pop``: (P, L) strings."""
    pop = np.ascontiguousarray(pop, dtype=np.int32)
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    X = np.asarray(X)
    if pop.ndim != 2 or (pop.size and int(pop.max()) >= X.shape[1]):
        raise ValueError(f"structures must be a (P, L) array of columns below {X.shape[1]} (or NIL)")
    if rows.size and (rows.min() < 0 or rows.max() >= X.shape[0]):
        raise ValueError(f"rows must be row indices below {X.shape[0]}")
    hs = heights(depth_of(pop.shape[1]))
    return fit_structures(np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(y, dtype=np.float64),
                          rows, pop, hs, int(n_classes), max_nodes(depth_of(pop.shape[1]), rows.shape[0]))


def batch_tree(batch, p):
    """Tree ``p`` of a :func:`fit_structures` result in the flat format."""
    feature, left, right, threshold, value, samples, n_nodes = batch
    k = int(n_nodes[p])
    return tree_format.binary(left[p, :k], right[p, :k], feature[p, :k], threshold[p, :k], value[p, :k],
                              n_node_samples=samples[p, :k])
