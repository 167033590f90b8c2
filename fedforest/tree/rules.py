"""Decision rules of trees and their aggregation by Cartesian product.

A rule is the path from a tree's root to one leaf: a conjunction of
conditions and the leaf's class distribution.  Two kinds of condition exist:

* numeric (binary CART trees): per feature an interval ``lo < x <= hi``
  (``-inf``/``inf`` when one side is open);
* categorical (multiway ID3 trees): per feature an equality ``x == value``.

Merging two rules (ICDTA4FL) keeps the conjunction of their conditions and
sums their class distributions.  Rules contradict each other when some
feature cannot satisfy both conditions: two different categories, or two
disjoint intervals.  For numeric conditions on the same feature and side,
the less restrictive threshold is kept (``x > 32.5`` and ``x > 35`` merge to
``x > 32.5``), as the method prescribes.
"""
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

NUMERIC = "numeric"
CATEGORICAL = "categorical"


@dataclass
class Rule:
    """``conditions`` maps a feature index to ``(lo, hi)`` (numeric) or to a
    category value (categorical); ``dist`` is the class distribution (sums of
    leaf probabilities after merging); ``support`` the training rows behind it."""
    conditions: dict
    dist: np.ndarray
    support: float = 0.0
    kind: str = NUMERIC

    @property
    def predicted(self):
        return int(np.argmax(self.dist))

    def text(self, names=None):
        def name(f):
            return names[f] if names is not None else f"x{f}"
        parts = []
        for f in sorted(self.conditions):
            c = self.conditions[f]
            if self.kind == CATEGORICAL:
                parts.append(f"{name(f)} == {c}")
                continue
            lo, hi = c
            if lo > -math.inf:
                parts.append(f"{name(f)} > {lo:g}")
            if hi < math.inf:
                parts.append(f"{name(f)} <= {hi:g}")
        return " and ".join(parts) or "(always)"


def rules_from_tree(children_left, children_right, feature, threshold, value, n_node_samples):
    """Rules of a binary tree in flat-array form (scikit-learn's ``tree_`` layout:
    left child ``x <= threshold``); ``value`` rows are class counts or fractions."""
    rules = []
    stack = [(0, {})]
    while stack:
        node, cond = stack.pop()
        left, right = int(children_left[node]), int(children_right[node])
        if left < 0:
            dist = np.asarray(value[node], dtype=np.float64).ravel()
            total = dist.sum()
            rules.append(Rule(cond, dist / total if total > 0 else dist,
                              float(n_node_samples[node]), NUMERIC))
            continue
        f, t = int(feature[node]), float(threshold[node])
        lo, hi = cond.get(f, (-math.inf, math.inf))
        stack.append((right, {**cond, f: (max(lo, t), hi)}))
        stack.append((left, {**cond, f: (lo, min(hi, t))}))
    return rules


def compatible(a, b):
    """Whether two rules can hold together (no feature with contradicting conditions)."""
    small, large = (a, b) if len(a.conditions) <= len(b.conditions) else (b, a)
    for f, ca in small.conditions.items():
        cb = large.conditions.get(f)
        if cb is None:
            continue
        if a.kind == CATEGORICAL:
            if ca != cb:
                return False
        elif max(ca[0], cb[0]) >= min(ca[1], cb[1]):
            return False
    return True


def merge(a, b):
    """The merged rule of two compatible rules (see the module docstring)."""
    cond = dict(a.conditions)
    for f, cb in b.conditions.items():
        ca = cond.get(f)
        if ca is None or a.kind == CATEGORICAL:
            cond[f] = cb
            continue
        # the less restrictive bound on each side both rules constrain
        lo = min(ca[0], cb[0]) if ca[0] > -math.inf and cb[0] > -math.inf else max(ca[0], cb[0])
        hi = max(ca[1], cb[1]) if ca[1] < math.inf and cb[1] < math.inf else min(ca[1], cb[1])
        cond[f] = (lo, hi)
    return Rule(cond, a.dist + b.dist, a.support + b.support, a.kind)


@dataclass
class MergeStats:
    """Rules and time of every pairwise merge step of :func:`aggregate`."""
    steps: list = field(default_factory=list)
    capped: bool = False

    def add(self, left, right, pairs, kept, seconds):
        self.steps.append({"left_rules": left, "right_rules": right, "pairs": pairs,
                           "kept_rules": kept, "seconds": seconds})


def aggregate(rule_sets, max_rules=10_000):
    """Cartesian product of the rule sets, merged pairwise and incrementally:
    incompatible pairs and rules without support are dropped after every step;
    when more than ``max_rules`` remain, the best supported are kept and a
    warning names how many were dropped.  Returns ``(rules, MergeStats)``."""
    stats = MergeStats()
    sets = [list(rs) for rs in rule_sets if rs]
    if not sets:
        return [], stats
    current = [r for r in sets[0] if r.support > 0]
    for nxt in sets[1:]:
        t0 = time.perf_counter()
        out = [merge(a, b) for a in current for b in nxt if b.support > 0 and compatible(a, b)]
        if len(out) > max_rules:
            out.sort(key=lambda r: -r.support)
            dropped = len(out) - max_rules
            out = out[:max_rules]
            stats.capped = True
            warnings.warn(f"rule aggregation: {dropped} merged rules beyond max_rules={max_rules} "
                          "were dropped (the least supported)", RuntimeWarning, stacklevel=2)
        stats.add(len(current), len(nxt), len(current) * len(nxt), len(out), time.perf_counter() - t0)
        current = out
    return current, stats


# ---------------------------------------------------------------------------
# A global binary tree from numeric rules
# ---------------------------------------------------------------------------
def _class_entropy(rules, n_classes):
    """Entropy (bits) of the rules' predicted classes."""
    if not rules:
        return 0.0
    p = np.bincount([r.predicted for r in rules], minlength=n_classes) / len(rules)
    p = p[p > 0]
    return float(-(p * np.log2(p)).sum())


def _side(rules, f, t, left):
    """Rules that can hold on one side of ``x_f <= t``, clipped to that side."""
    out = []
    for r in rules:
        lo, hi = r.conditions.get(f, (-math.inf, math.inf))
        if left and lo < t:
            out.append(Rule({**r.conditions, f: (lo, min(hi, t))}, r.dist, r.support, r.kind))
        elif not left and hi > t:
            out.append(Rule({**r.conditions, f: (max(lo, t), hi)}, r.dist, r.support, r.kind))
    return out


def tree_from_rules(rules, n_classes, max_depth=None):
    """A binary tree (flat arrays as :func:`rules_from_tree` reads them) grown
    from numeric rules: each node holds the rules that can reach it; the split
    ``x_f <= t`` (``t`` among the rules' thresholds) with the largest
    information gain of the rules' predicted classes is taken, provided at
    least one child holds fewer rules than the node (rules spanning ``t`` go to
    both children, clipped to each side, so a threshold is never reused).  A node is a leaf when its rules
    agree on the class, at ``max_depth``, or when no split qualifies; its
    value is the normalized sum of its rules' distributions."""
    nodes = []   # [left, right, feature, threshold, value, n_rules]

    def leaf_value(rs):
        total = np.sum([r.dist for r in rs], axis=0) if rs else np.zeros(n_classes)
        s = total.sum()
        return total / s if s > 0 else total

    def grow(rs, depth):
        me = len(nodes)
        nodes.append([-1, -1, -2, -2.0, leaf_value(rs), len(rs)])
        if len({r.predicted for r in rs}) <= 1 or (max_depth is not None and depth >= max_depth):
            return me
        parent_h = _class_entropy(rs, n_classes)
        best = None
        features = sorted({f for r in rs for f in r.conditions})
        for f in features:
            cuts = sorted({b for r in rs for b in r.conditions.get(f, ()) if math.isfinite(b)})
            for t in cuts:
                left, right = _side(rs, f, t, True), _side(rs, f, t, False)
                if not left or not right or (len(left) >= len(rs) and len(right) >= len(rs)):
                    continue
                n = len(left) + len(right)
                gain = parent_h - (len(left) * _class_entropy(left, n_classes)
                                   + len(right) * _class_entropy(right, n_classes)) / n
                if best is None or gain > best[0]:
                    best = (gain, f, t, left, right)
        if best is None:
            return me
        _, f, t, left, right = best
        nodes[me][2], nodes[me][3] = f, t
        nodes[me][0] = grow(left, depth + 1)
        nodes[me][1] = grow(right, depth + 1)
        return me

    grow(list(rules), 0)
    return {
        "children_left": np.array([n[0] for n in nodes], dtype=np.int32),
        "children_right": np.array([n[1] for n in nodes], dtype=np.int32),
        "feature": np.array([n[2] for n in nodes], dtype=np.int32),
        "threshold": np.array([n[3] for n in nodes], dtype=np.float64),
        "value": np.array([n[4] for n in nodes], dtype=np.float64).reshape(len(nodes), n_classes),
        "n_rules": np.array([n[5] for n in nodes], dtype=np.int64),
    }


def predict_tree(tree, X):
    """Class distributions of rows of ``X`` in a tree from :func:`tree_from_rules`."""
    X = np.asarray(X, dtype=np.float64)
    out = np.empty((X.shape[0], tree["value"].shape[1]))
    cl, cr, feat, thr = tree["children_left"], tree["children_right"], tree["feature"], tree["threshold"]
    for i, x in enumerate(X):
        n = 0
        while cl[n] >= 0:
            n = cl[n] if x[feat[n]] <= thr[n] else cr[n]
        out[i] = tree["value"][n]
    return out
