"""The flat-array tree format of fedforest, and the walk that applies a tree to rows.

A tree is a dict of numpy arrays indexed by node; node 0 is the root and every
child has a larger index than its parent.

Arrays every tree has:

* ``feature`` (int32): the column a node splits on; :data:`LEAF` (-2, also
  scikit-learn's value) at a leaf; :data:`NOT_OWNED` (-1) in a party's
  *partial* tree (vertical federation) at a split held by another party;
* ``value`` (float64, shape ``(n_nodes, width)``): class fractions (width =
  number of classes) or a regression value (width 1);
* ``children_left``, ``children_right`` (int32): the children of a binary
  split, :data:`NO_CHILD` (-1) at a leaf and at a multiway node;
* ``threshold`` (float64): a binary split sends ``x <= threshold`` left
  (comparisons in float64); unused (scikit-learn's -2 or NaN) elsewhere;
* ``missing_left`` (uint8): a binary split sends a missing value (NaN) left
  when 1, right when 0.

Arrays of trees with multiway (categorical) splits, such as ID3 trees:

* ``child_start``, ``child_count`` (int32, per node): the children of node
  ``n`` are ``child_node[child_start[n]:child_start[n] + child_count[n]]``;
  a node with ``child_count > 0`` is a multiway split;
* ``child_value`` (int32, per child): the category code that leads to the
  child at the same position; codes are ``>= 0``.  A row whose code has no
  child at a multiway node (including the code -1 of a category unseen in
  training, and NaN) stops at that node and takes its value;
* ``child_node`` (int32, per child): the child's node index.

Binary trees carry no ``child_*`` arrays; a tree holding them may mix
multiway nodes and binary nodes (``child_count == 0`` with children).

Trees may carry further per-node arrays that the walk ignores, such as
``n_node_samples`` (training rows, int64), ``support`` (rows or rules behind
a node, float64), ``n_rules`` (int64), ``owner``, ``impurity`` or
``weighted_n_node_samples``.

Category codes are read from the same float64 matrix ``X`` as numeric
values, so a model may mix both kinds of column.
"""

import numpy as np
from numba import njit

from ..errors import InputError

LEAF = -2        # feature of a leaf
NOT_OWNED = -1   # feature, in a party's partial tree, of a split held by another party
NO_CHILD = -1    # children_left/right of a leaf or of a multiway node

BINARY_KEYS = ("children_left", "children_right", "threshold", "missing_left")
MULTIWAY_KEYS = ("child_start", "child_count", "child_value", "child_node")
NODE_DTYPES = {"feature": np.int32, "children_left": np.int32, "children_right": np.int32,
               "threshold": np.float64, "missing_left": np.uint8,
               "child_start": np.int32, "child_count": np.int32}
CHILD_DTYPES = {"child_value": np.int32, "child_node": np.int32}
EXTRA_DTYPES = {"n_node_samples": np.int64, "support": np.float64, "n_rules": np.int64,
                "weighted_n_node_samples": np.float64, "impurity": np.float64,
                "owner": np.int32}
_EMPTY = np.empty(0, dtype=np.int32)


# ---------------------------------------------------------------------------
# The walk
# ---------------------------------------------------------------------------
@njit(cache=True)
def _walk(X, feature, children_left, children_right, threshold, missing_left,
          child_start, child_count, child_value, child_node):
    """The node where each row of ``X`` stops; the child arrays are empty for
    a binary tree."""
    n = X.shape[0]
    out = np.empty(n, dtype=np.int64)
    multi = child_count.shape[0] > 0
    for i in range(n):
        node = 0
        while True:
            f = feature[node]
            if f < 0:                      # a leaf, or a split held by another party
                break
            v = X[i, f]
            if multi and child_count[node] > 0:
                nxt = -1
                if v >= 0.0:               # -1 (unseen category) and NaN match no child
                    s = child_start[node]
                    for k in range(s, s + child_count[node]):
                        if child_value[k] == v:
                            nxt = child_node[k]
                            break
                if nxt < 0:
                    break
                node = nxt
            else:
                left = children_left[node]
                if left < 0:
                    break
                if np.isnan(v):
                    go_left = missing_left[node] == 1
                else:
                    go_left = v <= threshold[node]
                node = left if go_left else children_right[node]
        out[i] = node
    return out


def _node_array(tree, key, n, fill):
    a = tree.get(key)
    if a is None:
        return np.full(n, fill, dtype=NODE_DTYPES[key])
    return np.ascontiguousarray(a, dtype=NODE_DTYPES[key])


def walk_arrays(tree):
    """The arrays :func:`apply` walks, in their canonical dtypes (absent binary
    arrays are filled as for a tree without binary splits; absent child arrays
    are empty)."""
    feature = np.ascontiguousarray(tree["feature"], dtype=np.int32)
    n = feature.shape[0]
    binary_part = (_node_array(tree, "children_left", n, NO_CHILD),
                   _node_array(tree, "children_right", n, NO_CHILD),
                   _node_array(tree, "threshold", n, np.nan),
                   _node_array(tree, "missing_left", n, 0))
    if "child_count" in tree:
        multi = tuple(np.ascontiguousarray(tree[k], dtype=np.int32) for k in MULTIWAY_KEYS)
    else:
        multi = (_EMPTY,) * 4
    return (feature,) + binary_part + multi


def apply(tree, X):
    """The node where each row of ``X`` (float64, ``(n_rows, n_features)``) stops
    (int64): a leaf; a multiway node without a child for the row's category;
    or, in a partial tree, a split held by another party.  The tree's structure
    is trusted (trees come from this module's constructors or :func:`check`)."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-d array, got shape {X.shape}")
    arrays = walk_arrays(tree)
    feature = arrays[0]
    if feature.shape[0] == 0:
        raise ValueError("the tree has no nodes")
    if int(feature.max()) >= X.shape[1]:
        raise ValueError(f"the tree splits on column {int(feature.max())}, X has {X.shape[1]} columns")
    return _walk(X, *arrays)


def node_values(tree, X):
    """``tree["value"]`` at the node where each row of ``X`` stops (see :func:`apply`)."""
    return np.asarray(tree["value"])[apply(tree, X)]


# ---------------------------------------------------------------------------
# Constructors
# ---------------------------------------------------------------------------
def _extras(extra):
    return {k: np.array(v, dtype=EXTRA_DTYPES.get(k)) for k, v in extra.items()}


def _values(value, n):
    value = np.array(value, dtype=np.float64)
    return np.ascontiguousarray(value.reshape(n, -1))


def binary(children_left, children_right, feature, threshold, value, missing_left=None, **extra):
    """A binary tree in the canonical dtypes (copies of the inputs).  ``missing_left``
    defaults to all zeros (missing values go right); ``value`` is reshaped to
    ``(n_nodes, width)``; further per-node arrays (``n_node_samples``...) are
    kept as ``extra``.  Binary trees carry no ``child_*`` arrays."""
    feature = np.array(feature, dtype=np.int32)
    n = feature.shape[0]
    tree = {"children_left": np.array(children_left, dtype=np.int32),
            "children_right": np.array(children_right, dtype=np.int32),
            "feature": feature,
            "threshold": np.array(threshold, dtype=np.float64),
            "missing_left": (np.zeros(n, dtype=np.uint8) if missing_left is None
                             else np.array(missing_left, dtype=np.uint8)),
            "value": _values(value, n)}
    tree.update(_extras(extra))
    return tree


def multiway(feature, child_start, child_count, child_value, child_node, value, **extra):
    """A tree with multiway splits in the canonical dtypes (copies of the inputs);
    ``children_left``/``children_right`` are :data:`NO_CHILD`, ``threshold`` NaN
    and ``missing_left`` 0 unless given in ``extra`` (a tree mixing multiway and
    binary splits passes its binary arrays there)."""
    feature = np.array(feature, dtype=np.int32)
    n = feature.shape[0]
    tree = {"feature": feature,
            "child_start": np.array(child_start, dtype=np.int32),
            "child_count": np.array(child_count, dtype=np.int32),
            "child_value": np.array(child_value, dtype=np.int32),
            "child_node": np.array(child_node, dtype=np.int32),
            "value": _values(value, n)}
    defaults = {"children_left": NO_CHILD, "children_right": NO_CHILD, "threshold": np.nan,
                "missing_left": 0}
    for k, fill in defaults.items():
        v = extra.pop(k, None)
        tree[k] = (np.full(n, fill, dtype=NODE_DTYPES[k]) if v is None
                   else np.array(v, dtype=NODE_DTYPES[k]))
    tree.update(_extras(extra))
    return tree


def float32_thresholds(threshold):
    """Float64 thresholds ``t'`` with ``x <= t'`` exactly when
    ``float(np.float32(x)) <= t``, for every float64 ``x``: the test of a tree
    learnt on float32 features (scikit-learn, XGBoost) applied to float64 rows.

    ``np.float32(x)`` is at most ``f``, the largest float32 not above ``t``,
    exactly when ``x`` lies below the midpoint of ``f`` and the next float32
    (round to nearest), or on it when the tie rounds to ``f`` (``f`` even)."""
    t = np.asarray(threshold, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = t.astype(np.float32)
        f = np.where(f.astype(np.float64) > t, np.nextafter(f, np.float32(-np.inf)), f)
        up = np.nextafter(f, np.float32(np.inf))
        mid = (f.astype(np.float64) + up.astype(np.float64)) / 2.0
        even = (f.view(np.uint32) & 1) == 0
        out = np.where(even, mid, np.nextafter(mid, -np.inf))
    # beyond the float32 range, and NaN, the threshold stays as it is
    keep = ~np.isfinite(t) | ~np.isfinite(up) | ~np.isfinite(f)
    return np.where(keep, t, out)


def from_sklearn(estimator, n_classes):
    """A fitted scikit-learn ``DecisionTreeClassifier`` as a canonical binary tree.

    The estimator's ``classes_`` must be class codes among ``0..n_classes-1``
    (possibly a subset); ``value`` holds class fractions with one column per
    code, ``n_node_samples`` the training rows per node, and ``missing_left``
    scikit-learn's direction of missing values.  Thresholds are scikit-learn's
    float64 thresholds learnt on float32 features; they are moved to the
    float64 value that routes float64 rows exactly as ``estimator.apply`` routes
    them after its cast to float32 (:func:`float32_thresholds`)."""
    from sklearn.tree import DecisionTreeClassifier  # costs a second: only here

    if not isinstance(estimator, DecisionTreeClassifier) or not hasattr(estimator, "tree_"):
        raise ValueError("from_sklearn needs a fitted DecisionTreeClassifier")
    if estimator.n_outputs_ != 1:
        raise ValueError("from_sklearn needs a single-output classifier")
    classes = np.asarray(estimator.classes_)
    codes = classes.astype(np.int64)
    if not np.array_equal(codes, classes) or codes.min() < 0 or codes.max() >= n_classes:
        raise ValueError(f"the estimator's classes {classes.tolist()} are not codes 0..{n_classes - 1}")
    t = estimator.tree_
    value = np.zeros((t.node_count, n_classes))
    value[:, codes] = t.value[:, 0, :]
    total = value.sum(axis=1, keepdims=True)
    value = np.divide(value, total, out=np.zeros_like(value), where=total > 0)
    missing = getattr(t, "missing_go_to_left", None)
    threshold = np.where(t.children_left >= 0, float32_thresholds(t.threshold), t.threshold)
    return binary(t.children_left, t.children_right, t.feature, threshold, value,
                  missing_left=missing, n_node_samples=t.n_node_samples)


# ---------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# Trees from model files
# ---------------------------------------------------------------------------
def upgrade_v1(tree):
    """A tree of a version-1 model file in the canonical format: ID3 leaves
    (feature -1, no children) get :data:`LEAF`; absent binary arrays are added
    (``missing_left`` 0 keeps the old routing of missing values, to the right).
    Canonical trees come back unchanged (as a new dict).  Arrays are not
    validated here: :func:`check` does that."""
    out = dict(tree)
    try:
        feature = np.array(tree["feature"])
        n = feature.shape[0]
        count = np.asarray(tree.get("child_count", np.zeros(n)))
        left = np.asarray(tree.get("children_left", np.full(n, NO_CHILD)))
        numeric = all(a.dtype.kind in "iuf" and a.shape == (n,) for a in (feature, count, left))
    except (KeyError, TypeError, ValueError, IndexError):
        return out
    if not numeric:
        return out
    if "child_count" in tree:
        out["feature"] = np.where((feature == NOT_OWNED) & (count <= 0) & (left < 0),
                                  LEAF, feature).astype(feature.dtype)
    for key, fill in (("children_left", NO_CHILD), ("children_right", NO_CHILD),
                      ("threshold", np.nan), ("missing_left", 0)):
        if key not in tree:
            out[key] = np.full(n, fill, dtype=NODE_DTYPES[key])
    return out


def _castable(tree, key, dtype, what):
    try:
        a = np.asarray(tree[key])
    except (TypeError, ValueError) as exc:  # ragged lists and the like
        raise InputError(what, f"tree array {key!r} is not an array ({exc})") from None
    if a.dtype.kind not in "biuf":
        raise InputError(what, f"tree array {key!r} holds {a.dtype} values, not numbers")
    if np.dtype(dtype).kind in "iu" and a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
            raise InputError(what, f"tree array {key!r} holds non-integer values")
    if np.dtype(dtype).kind in "iu" and a.size:
        info = np.iinfo(dtype)
        if a.min() < info.min or a.max() > info.max:
            raise InputError(what, f"tree array {key!r} holds values out of the {np.dtype(dtype)} range")
    return np.ascontiguousarray(a, dtype=dtype)


@njit(cache=True)
def _depths(parent):
    """Depth of every node from its parent (-1: none); parents come before their children."""
    out = np.zeros(parent.shape[0], dtype=np.int64)
    for i in range(parent.shape[0]):
        if parent[i] >= 0:
            out[i] = out[parent[i]] + 1
    return out


def _fail_at(what, bad, text):
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise InputError(what, text.format(k=k))


def check(tree, what, n_features=None, width=None, max_nodes=None, max_depth=None, strict=False):
    """Validate a tree read from a file or a message; returns it in the canonical
    dtypes (a new dict).  Raises :class:`fedforest.errors.InputError` ``(what, ...)``
    when an array is absent, not castable to its dtype, of the wrong length, or when
    the structure is not a tree: children out of range or not after their parent,
    a node with two parents (or one child on both sides), half-linked binary nodes,
    multiway nodes that are also binary, child ranges longer than the child arrays.

    Optional limits: ``n_features`` (split columns below it), ``width`` (of
    ``value``), ``max_nodes``, ``max_depth``; ``strict`` also asks that every
    node hang from the root and that exactly the splits have a column (leaves
    :data:`LEAF`), as in every tree fedforest grows."""
    if not isinstance(tree, dict):
        raise InputError(what, f"the tree is a {type(tree).__name__}, not a dict of arrays")
    multi = [k for k in MULTIWAY_KEYS if k in tree]
    if multi and len(multi) < len(MULTIWAY_KEYS):
        absent = [k for k in MULTIWAY_KEYS if k not in tree]
        raise InputError(what, f"the tree has {', '.join(multi)} but no {', '.join(absent)}")
    required = ("feature", "value") + BINARY_KEYS + tuple(multi)
    absent = [k for k in required if k not in tree]
    if absent:
        raise InputError(what, f"the tree has no {', '.join(repr(k) for k in absent)} array")
    out = dict(tree)
    for key in NODE_DTYPES:
        if key in tree:
            out[key] = _castable(tree, key, NODE_DTYPES[key], what)
    for key in CHILD_DTYPES:
        if key in tree:
            out[key] = _castable(tree, key, CHILD_DTYPES[key], what)
    out["value"] = _castable(tree, "value", np.float64, what)
    for key, dtype in EXTRA_DTYPES.items():
        if key in tree:
            out[key] = _castable(tree, key, dtype, what)
    feature = out["feature"]
    if feature.ndim != 1 or feature.shape[0] == 0:
        raise InputError(what, f"tree array 'feature' has shape {feature.shape}: not a list of nodes")
    n = feature.shape[0]
    if max_nodes is not None and n > max_nodes:
        raise InputError(what, f"the tree has {n} nodes, more than the {max_nodes} this job allows")
    for key in [k for k in NODE_DTYPES if k in out] + [k for k in EXTRA_DTYPES if k in out]:
        if out[key].shape != (n,):
            raise InputError(what, f"tree array {key!r} has shape {out[key].shape}, expected ({n},)")
    value = out["value"]
    if value.ndim == 1:
        value = value.reshape(n, 1) if value.shape[0] == n else value
    if value.ndim != 2 or value.shape[0] != n or value.shape[1] == 0:
        raise InputError(what, f"tree array 'value' has shape {value.shape}, expected ({n}, width)")
    if width is not None and value.shape[1] != width:
        raise InputError(what, f"tree array 'value' has {value.shape[1]} columns, expected {width}")
    if not np.all(np.isfinite(value)):
        raise InputError(what, "tree array 'value' holds non-finite numbers")
    out["value"] = value
    if feature.min() < LEAF:
        raise InputError(what, f"tree array 'feature' holds {int(feature.min())} (below {LEAF})")
    if n_features is not None and feature.max() >= n_features:
        raise InputError(what, f"tree array 'feature' holds column {int(feature.max())}; the data has "
                               f"{n_features} columns")
    if not np.isin(out["missing_left"], (0, 1)).all():
        raise InputError(what, "tree array 'missing_left' holds values other than 0 and 1")
    node = np.arange(n)
    left, right = out["children_left"], out["children_right"]
    for key, child in (("children_left", left), ("children_right", right)):
        bad = (child != NO_CHILD) & ((child <= node) | (child >= n))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise InputError(what, f"node {k}: {key} {int(child[k])} is not a later node of the tree")
    _fail_at(what, (left < 0) != (right < 0), "node {k} has one child only")
    _fail_at(what, (left >= 0) & (left == right), "node {k} has the same child on both sides")
    binary = left >= 0
    parents, children = [node[binary], node[binary]], [left[binary], right[binary]]
    is_split = binary
    if multi:
        start, count = out["child_start"], out["child_count"]
        cval, cnode = out["child_value"], out["child_node"]
        m = cval.shape[0]
        if cval.ndim != 1 or cnode.shape != (m,):
            raise InputError(what, "tree arrays 'child_value' and 'child_node' differ in length")
        if np.any(count < 0) or np.any((count > 0) & ((start < 0) | (start + count > m))):
            raise InputError(what, "tree arrays 'child_start'/'child_count' point outside the children")
        count = count.astype(np.int64)
        if count.sum() > m:   # disjoint ranges fit in the child arrays (and np.repeat below stays small)
            raise InputError(what, "tree array 'child_count' lists more children than the child arrays hold")
        if np.any((count > 0) & (left != NO_CHILD)):
            raise InputError(what, "a node is both a multiway and a binary split")
        if np.any(cval < 0):
            raise InputError(what, "tree array 'child_value' holds negative category codes")
        parent = np.repeat(node, count)
        first = np.repeat(np.cumsum(count) - count, count)
        pos = np.repeat(start.astype(np.int64), count) + np.arange(parent.size) - first
        kids = cnode[pos]
        bad = (kids <= parent) | (kids >= n)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise InputError(what, f"node {int(parent[k])}: child {int(kids[k])} is not a later node "
                                   "of the tree")
        parents.append(parent)
        children.append(kids.astype(np.int64))
        is_split = binary | (count > 0)
    # one parent per node (a child may be listed under several codes of that parent):
    # no shared subtrees, so a walk or the rules of the leaves stay linear in the nodes
    p = np.concatenate(parents).astype(np.int64)
    c = np.concatenate(children).astype(np.int64)
    pairs = np.unique(c * n + p)
    c, p = pairs // n, pairs % n
    indegree = np.bincount(c, minlength=n)
    _fail_at(what, indegree > 1, "node {k} has more than one parent")
    if strict:
        _fail_at(what, (indegree == 0) & (node > 0), "node {k} does not hang from the root")
        _fail_at(what, is_split & (feature < 0), "node {k} has children but no split column")
        _fail_at(what, ~is_split & (feature != LEAF), "node {k} has a split column but no children")
    if max_depth is not None:
        parent_of = np.full(n, -1, dtype=np.int64)
        parent_of[c] = p
        depth = int(_depths(parent_of).max())
        if depth > max_depth:
            raise InputError(what, f"the tree is {depth} deep, deeper than the {max_depth} of this job")
    return out
