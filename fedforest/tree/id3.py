"""ID3 trees on categorical features (multiway splits, information gain).

Features are integer category codes ``0..n_values[f]-1`` shared by every
client (a missing value is a category of its own, see
:mod:`fedforest.horizontal`).  Trees are multiway trees of
:mod:`fedforest.tree.format`: ``feature`` is the split feature (``LEAF`` at a
leaf), ``child_start``/``child_count``/``child_value``/``child_node`` the
children and the category codes leading to them, ``value`` the class
distribution (fractions) of the node's rows or rules and ``support`` the rows
(or rules, for a tree built from rules) at the node.

A row whose category has no child at a node is predicted from that node's
distribution (:func:`fedforest.tree.format.node_values`).
"""
from collections import deque

import numpy as np

from . import format as tree_format
from .impurity import entropy
from .rules import CATEGORICAL, RuleArrays, feature_count, leaf_rules


class Builder:
    """A multiway tree grown node by node: :meth:`node` adds a leaf with a class
    distribution (normalized here) and a support, :meth:`link` makes a node a
    split with ``(category code, child node)`` children; ``value`` and
    ``support`` stay editable lists until :meth:`arrays`."""

    def __init__(self, n_classes):
        self.n_classes = n_classes
        self.feature, self.start, self.count, self.value, self.support = [], [], [], [], []
        self.child_value, self.child_node = [], []

    def node(self, dist, support):
        self.feature.append(tree_format.LEAF)
        self.start.append(0)
        self.count.append(0)
        total = dist.sum()
        self.value.append(dist / total if total > 0 else dist)
        self.support.append(support)
        return len(self.feature) - 1

    def link(self, parent, f, children):
        self.feature[parent] = f
        self.start[parent] = len(self.child_value)
        self.count[parent] = len(children)
        for v, c in children:
            self.child_value.append(v)
            self.child_node.append(c)

    def arrays(self):
        """The tree in the canonical format."""
        value = np.array(self.value, dtype=np.float64).reshape(-1, self.n_classes)
        return tree_format.multiway(self.feature, self.start, self.count, self.child_value,
                                    self.child_node, value, support=self.support)


_Builder = Builder
_entropy = entropy


def fit_id3(X, y, n_values, n_classes, max_depth=None, min_samples_split=2):
    """ID3 on category codes ``X`` (n, F) and class codes ``y``: every node splits
    on the unused feature of highest information gain, one child per category
    present; a node is a leaf when pure, at ``max_depth``, with fewer than
    ``min_samples_split`` rows, when no feature is left or no gain is positive."""
    X = np.asarray(X, dtype=np.int64)
    y = np.asarray(y, dtype=np.int64)
    b = Builder(n_classes)
    max_depth = X.shape[1] if max_depth is None else max_depth

    def grow(rows, used, depth):
        counts = np.bincount(y[rows], minlength=n_classes).astype(np.float64)
        me = b.node(counts, float(rows.size))
        if depth >= max_depth or rows.size < min_samples_split or np.count_nonzero(counts) <= 1:
            return me
        h = entropy(counts)
        best, best_f = 1e-12, -1
        for f in range(X.shape[1]):
            if f in used:
                continue
            table = np.zeros((n_values[f], n_classes))
            np.add.at(table, (X[rows, f], y[rows]), 1.0)
            sizes = table.sum(axis=1)
            cond = sum(sizes[v] / rows.size * entropy(table[v]) for v in np.flatnonzero(sizes))
            if h - cond > best:
                best, best_f = h - cond, f
        if best_f < 0:
            return me
        codes = X[rows, best_f]
        children = [(int(v), grow(rows[codes == v], used | {best_f}, depth + 1))
                    for v in np.unique(codes)]
        b.link(me, best_f, children)
        return me

    grow(np.arange(X.shape[0]), frozenset(), 0)
    return b.arrays()


def rules_from_id3(tree):
    """One categorical rule per leaf, in node order (see
    :func:`fedforest.tree.format.leaf_rules`)."""
    return list(leaf_rules(tree, CATEGORICAL).values())


def id3_from_rules(rules, n_classes, max_depth=None, max_nodes=None, info=None, splits="whole_first",
                   prune=True, weights=None):
    """A multiway tree grown from categorical rules (ICDTA4FL-ID3): a node splits
    on the unused feature of highest information gain of its rules' predicted
    classes, one child per value the rules name (rules without a condition on
    the feature go to every child), provided some child holds fewer rules than
    the node; it is a leaf when its rules agree on the class, at ``max_depth``
    or when no split qualifies.  With ``splits = "whole_first"`` the feature is
    taken among those every rule of the node names, whenever there is one:
    every rule then goes to one child, so the tree has at most one leaf per
    rule (the merged rules of ID3 trees name the features of every tree's
    path, so such a feature exists until they are separated); ``"any"`` takes
    the best feature whatever rules it copies (the method's text).  Values are
    normalized sums of the rules' distributions; ``support`` counts rules.
    ``weights`` (one per rule, e.g. the rules' :attr:`Rule.mass`) weigh each
    rule in the class counts of the gain and in the values; by default every
    rule counts once, as the method's entropy of rules prescribes.
    Nodes are expanded breadth first; a split that would pass ``max_nodes``
    nodes is not made (``info["truncated"]`` is then set when ``info`` is a
    dict).  With ``prune``, children that are all leaves predicting their
    parent's class are merged into it afterwards (no row changes class)."""
    from .rules import SPLITS, collapse_same_class, depth_of, reachable
    if splits not in SPLITS:
        raise ValueError(f"splits must be one of {SPLITS}, got {splits!r}")
    rules = list(rules)
    info = {} if info is None else info
    info.setdefault("cut_splits", 0)
    b = Builder(n_classes)
    n_feat = max(feature_count([rules]), 1)
    ra = RuleArrays.from_rules(rules, n_feat)
    val = ra.cond if len(ra) else np.zeros((0, n_feat), dtype=np.int64)
    cls = ra.dist.argmax(axis=1) if len(ra) else np.zeros(0, dtype=np.int64)
    w_all = np.ones(len(ra)) if weights is None else np.asarray(weights, dtype=np.float64).reshape(len(ra))
    if weights is None:
        weighted = ra.dist
    else:
        weighted = ra.dist / np.maximum(ra.dist.sum(axis=1, keepdims=True), 1e-300) * w_all[:, None]

    def dist(members):
        return weighted[members].sum(axis=0) if members.size else np.zeros(n_classes)

    # breadth first, so a node budget cuts every branch at about the same depth
    queue = deque([(b.node(dist(np.arange(len(ra))), float(len(ra))), np.arange(len(ra)), frozenset(), 0)])
    while queue:
        me, members, used, depth = queue.popleft()
        c = cls[members]
        if np.unique(c).size <= 1 or (max_depth is not None and depth >= max_depth):
            continue
        R = members.size
        w = w_all[members]
        h = float(entropy(np.bincount(c, weights=w, minlength=n_classes)))
        best = {True: None, False: None}          # whole: every rule names the feature
        for f in range(n_feat):
            if f in used:
                continue
            col = val[members, f]
            named = col >= 0
            values = np.unique(col[named])
            if not values.size:
                continue
            at = np.searchsorted(values, col[named])
            if (np.bincount(at, minlength=values.size) + (R - at.size) >= R).all():
                continue                   # no child would hold fewer rules than the node
            table = np.zeros((values.size, n_classes))
            np.add.at(table, (at, c[named]), w[named])
            table += np.bincount(c[~named], weights=w[~named], minlength=n_classes)
            sizes = table.sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                gain = h - float((sizes * entropy(table)).sum() / sizes.sum())
            if not np.isfinite(gain):
                continue
            for whole in ((True, False) if named.all() else (False,)):
                if best[whole] is None or gain > best[whole][0]:
                    best[whole] = (gain, f, values)
        pick = best[True] if splits == "whole_first" and best[True] is not None else best[False]
        if pick is None:
            continue
        _, f, values = pick
        if max_nodes is not None and len(b.feature) + values.size > max_nodes:
            info["truncated"] = True
            continue
        col = val[members, f]
        info["cut_splits"] += int((col < 0).any())
        children = []
        for v in values:
            sub = members[(col == v) | (col < 0)]
            child = b.node(dist(sub), float(sub.size))
            children.append((int(v), child))
            queue.append((child, sub, used | {f}, depth + 1))
        b.link(me, f, children)
    return _pruned(b, prune, info, collapse_same_class, reachable, depth_of)


def _pruned(b, prune, info, collapse_same_class, reachable, depth_of):
    """The tree of builder ``b`` (after :func:`collapse_same_class` when ``prune``),
    renumbered in depth-first order; ``info`` gets ``pruned`` and ``depth``."""
    n = len(b.feature)
    children = [[b.child_node[k] for k in range(b.start[i], b.start[i] + b.count[i])] for i in range(n)]
    codes = [[b.child_value[k] for k in range(b.start[i], b.start[i] + b.count[i])] for i in range(n)]
    info["pruned"] = collapse_same_class(children, b.value) if prune else 0
    info["depth"] = depth_of(children)
    keep = reachable(children)
    new = {old: i for i, old in enumerate(keep)}
    out = Builder(b.n_classes)
    for old in keep:
        out.feature.append(b.feature[old] if children[old] else tree_format.LEAF)
        out.start.append(0)
        out.count.append(0)
        out.value.append(b.value[old])
        out.support.append(b.support[old])
    for old in keep:
        if children[old]:
            out.link(new[old], b.feature[old], [(v, new[k]) for v, k in zip(codes[old], children[old])])
    return out.arrays()


# ---------------------------------------------------------------------------
# Numeric columns as categories: equal-frequency bins
# ---------------------------------------------------------------------------
def numeric_sketch(x, n_bins):
    """A client's summary of a numeric column for the bins of an ID3 job: its
    quantiles at ``n_bins + 1`` levels and how many values are behind them
    (:func:`fedforest.tree.hoeffding.quantile_sketch`; NaN ignored)."""
    from .hoeffding import quantile_sketch
    return quantile_sketch(x, n_bins)


def agree_bins(sketches, n_bins):
    """Job-wide edges of a numeric column from the clients' sketches (the
    quantiles of the pooled sketches, each client weighted by its values:
    :func:`fedforest.tree.hoeffding.agree_edges`).  A value ``x`` falls in bin
    ``b`` when ``edges[b-1] < x <= edges[b]`` (bin 0: ``x <= edges[0]``, bin
    ``len(edges)``: ``x > edges[-1]``)."""
    from .hoeffding import agree_edges
    return agree_edges(sketches, n_bins)


def bin_codes(x, edges, missing_code=-1):
    """The bin of each value of a numeric column over ``edges`` (int64; NaN gets
    ``missing_code``)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.searchsorted(np.asarray(edges, dtype=np.float64), x, side="left").astype(np.int64)
    out[np.isnan(x)] = missing_code
    return out


def _number(v, digits):
    return f"{v:.{digits}g}"


def bin_labels(edges):
    """One text per bin over ``edges`` (``"<= 1.5"``, ``"(1.5, 4]"``, ``"> 4"``),
    with as many significant digits as keep them distinct (at least 6)."""
    edges = [float(e) for e in edges]
    for digits in range(6, 18):
        shown = [_number(e, digits) for e in edges]
        if len(set(shown)) == len(shown):
            break
    if not shown:
        return ["any value"]
    inner = ["(" + a + ", " + b + "]" for a, b in zip(shown[:-1], shown[1:])]
    return ["<= " + shown[0]] + inner + ["> " + shown[-1]]
