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


def id3_from_rules(rules, n_classes, max_depth=None, max_nodes=None, info=None):
    """A multiway tree grown from categorical rules (ICDTA4FL-ID3): a node splits
    on the unused feature of highest information gain of its rules' predicted
    classes, one child per value the rules name (rules without a condition on
    the feature go to every child), provided some child holds fewer rules than
    the node; it is a leaf when its rules agree on the class, at ``max_depth``
    or when no split qualifies.  Values are normalized sums of the rules'
    distributions; ``support`` counts rules.  Nodes are expanded breadth first;
    a split that would pass ``max_nodes`` nodes is not made (``info["truncated"]``
    is then set when ``info`` is a dict)."""
    rules = list(rules)
    b = Builder(n_classes)
    n_feat = max(feature_count([rules]), 1)
    ra = RuleArrays.from_rules(rules, n_feat)
    val = ra.cond if len(ra) else np.zeros((0, n_feat), dtype=np.int64)
    cls = ra.dist.argmax(axis=1) if len(ra) else np.zeros(0, dtype=np.int64)

    def dist(members):
        return ra.dist[members].sum(axis=0) if members.size else np.zeros(n_classes)

    # breadth first, so a node budget cuts every branch at about the same depth
    queue = deque([(b.node(dist(np.arange(len(ra))), float(len(ra))), np.arange(len(ra)), frozenset(), 0)])
    while queue:
        me, members, used, depth = queue.popleft()
        c = cls[members]
        if np.unique(c).size <= 1 or (max_depth is not None and depth >= max_depth):
            continue
        R = members.size
        h = float(entropy(np.bincount(c, minlength=n_classes)))
        best = None
        for f in range(n_feat):
            if f in used:
                continue
            col = val[members, f]
            values = np.unique(col[col >= 0])
            if not values.size:
                continue
            free = np.bincount(c[col < 0], minlength=n_classes)
            table = np.zeros((values.size, n_classes))
            np.add.at(table, (np.searchsorted(values, col[col >= 0]), c[col >= 0]), 1.0)
            table += free
            sizes = table.sum(axis=1)
            if (sizes >= R).all():
                continue
            gain = h - float((sizes * entropy(table)).sum() / sizes.sum())
            if best is None or gain > best[0]:
                best = (gain, f, values)
        if best is None:
            continue
        _, f, values = best
        if max_nodes is not None and len(b.feature) + values.size > max_nodes:
            if info is not None:
                info["truncated"] = True
            continue
        col = val[members, f]
        children = []
        for v in values:
            sub = members[(col == v) | (col < 0)]
            child = b.node(dist(sub), float(sub.size))
            children.append((int(v), child))
            queue.append((child, sub, used | {f}, depth + 1))
        b.link(me, f, children)
    return b.arrays()
