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
