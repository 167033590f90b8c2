"""Decision rules of trees and their aggregation by Cartesian product.

A rule is the path from a tree's root to one leaf: a conjunction of
conditions and the leaf's class distribution.  Two kinds of condition exist:

* numeric (binary CART trees): per feature an interval ``lo < x <= hi``
  (``-inf``/``inf`` when one side is open);
* categorical (multiway ID3 trees): per feature an equality ``x == value``.

The rules of a tree are read by :func:`leaf_rules`.

Merging two rules (ICDTA4FL) keeps the conjunction of their conditions and
sums their class distributions.  What a leaf adds to that sum is its *vote*
(:func:`leaf_votes`): the class counts of the training rows behind the leaf
(``"rows"``: its class fractions times its rows), so a leaf of 700 rows
outweighs one of 10, or its class fractions (``"fractions"``, the method's
text: every tree's leaf weighs 1, whatever rows it holds; a small client's
pure leaves then outvote a large client's).  Rules contradict each other when some
feature cannot satisfy both conditions: two different categories, or two
disjoint intervals.  For numeric conditions on the same feature and side,
the less restrictive threshold is kept (``x > 32.5`` and ``x > 35`` merge to
``x > 32.5``), as the method's text prescribes (``bounds="loose"``), or the
more restrictive one, so that the merged rule is the exact conjunction of the
two (``bounds="intersect"``, as the method's published code does).

Merging the rules of trees whose leaves partition the space with
``bounds="intersect"`` gives the cells of their common refinement; the rows
a cell holds are unknown to the server, and :attr:`Rule.mass` estimates its
share of the rows as the product, over the merged trees, of the share of the
tree's rows at the leaf the cell lies in (a product of independent shares).
"""
import heapq
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from . import format as tree_format
from .impurity import entropy
from .rule_kinds import (BOUNDS, CATEGORICAL, NUMERIC, OVER_MAX_RULES, SPLITS,  # noqa: F401  (this module's names)
                         VOTES)



@dataclass
class Rule:
    """``conditions`` maps a feature index to ``(lo, hi)`` (numeric) or to a
    category value (categorical); ``dist`` is the class distribution (a
    leaf's class fractions as :func:`leaf_rules` reads them; after
    :func:`leaf_votes` and merging, the sum of the merged leaves' votes);
    ``support`` the training rows behind it;
    ``mass`` the estimated share of the rows it covers (see :func:`aggregate`)."""
    conditions: dict
    dist: np.ndarray
    support: float = 0.0
    kind: str = NUMERIC
    mass: float = 1.0

    @property
    def predicted(self):
        return int(np.argmax(self.dist))

    def text(self, names=None, categories=None, joiner=" and ", empty="(always)", binned=None):
        """The conditions as text; ``names``: column names (default ``x<f>``),
        ``categories``: per column, the category value of each code (None for a
        numeric column).  A numeric condition on a column of categories (a text
        column a binary tree splits on its codes) is shown as the set of
        categories whose codes satisfy it: ``plan in {no, yes}``.  ``binned``
        (per column, true for a numeric column whose categories are the bins of
        :func:`fedforest.tree.id3.bin_labels`) shows a category condition on
        such a column as its range: ``minutes in (120, 180]``, ``minutes <= 120``."""
        def name(f):
            return names[f] if names is not None else f"x{f}"
        parts = []
        for f in sorted(self.conditions):
            c = self.conditions[f]
            if self.kind == CATEGORICAL:
                label = categories[f][c] if categories is not None else c
                if binned is not None and binned[f] and str(label)[:1] in "(<>":
                    parts.append(f"{name(f)} {'in ' if str(label)[0] == '(' else ''}{label}")
                else:
                    parts.append(f"{name(f)} == {label}")
                continue
            lo, hi = c
            if categories is not None and categories[f] is not None:
                inside = [str(v) for k, v in enumerate(categories[f]) if lo < k <= hi]
                parts.append(f"{name(f)} in {{{', '.join(inside)}}}")
                continue
            if lo > -math.inf:
                parts.append(f"{name(f)} > {lo:g}")
            if hi < math.inf:
                parts.append(f"{name(f)} <= {hi:g}")
        return joiner.join(parts) or empty


def leaf_rules(tree, kind):
    """One :class:`Rule` per leaf, ``{leaf node: rule}`` in
    increasing node order: the conditions on the path from the root and the
    leaf's ``value`` row (class fractions in a classification tree).

    ``kind`` is ``rules.NUMERIC`` for a binary tree (per feature an interval
    ``lo < x <= hi``; a row with a missing value in a tested feature satisfies
    no rule) or ``rules.CATEGORICAL`` for a multiway tree (per feature a
    category code).  ``support`` is the leaf's ``support`` array, else its
    ``n_node_samples``, else 0.  A row of a multiway tree whose category has
    no branch stops at an inner node: no rule covers it.  A leaf below two
    different codes of one feature is never reached and gets no rule (ID3
    tests a feature once per path); a child listed under several codes of one
    node is visited once, under its first code."""
    if kind not in (NUMERIC, CATEGORICAL):
        raise ValueError(f"kind must be {NUMERIC!r} or {CATEGORICAL!r}, got {kind!r}")
    feature, left, right, threshold, _, start, count, cval, cnode = tree_format.walk_arrays(tree)
    value = np.asarray(tree["value"], dtype=np.float64)
    support = tree.get("support", tree.get("n_node_samples"))
    has_multi = count.shape[0] > 0
    out = {}
    stack = [(0, {})]
    while stack:
        node, cond = stack.pop()
        f = int(feature[node])
        is_multi = has_multi and count[node] > 0
        if f == tree_format.NOT_OWNED and (left[node] >= 0 or is_multi):
            raise ValueError(f"node {node} is a split held by another party: its rules are unknown")
        if is_multi:
            if kind != CATEGORICAL:
                raise ValueError(f"node {node} is a multiway split in a tree read as {kind}")
            s = int(start[node])
            branches, seen = [], set()
            for k in range(s, s + int(count[node])):
                code, child = int(cval[k]), int(cnode[k])
                if cond.get(f, code) != code or child in seen:   # never reached, or reached already
                    continue
                seen.add(child)          # a child under several codes (EFDT's "value vs the rest"): once
                branches.append((child, {**cond, f: code}))
            stack.extend(reversed(branches))
            continue
        if left[node] >= 0:
            if kind != NUMERIC:
                raise ValueError(f"node {node} is a binary split in a tree read as {kind}")
            t = float(threshold[node])
            lo, hi = cond.get(f, (-math.inf, math.inf))
            stack.append((int(right[node]), {**cond, f: (max(lo, t), hi)}))
            stack.append((int(left[node]), {**cond, f: (lo, min(hi, t))}))
            continue
        out[node] = Rule(cond, value[node].copy(), float(support[node]) if support is not None else 0.0, kind)
    return {n: out[n] for n in sorted(out)}


def leaf_votes(rules, votes="rows"):
    """The rules of one tree's leaves (``{leaf: Rule}`` or a list, as
    :func:`leaf_rules` gives them) with ``dist`` set to what each leaf adds to
    the merged rules it is part of: ``"rows"``, the class counts of its
    training rows (its class fractions times its ``support``; a leaf without
    rows adds nothing); ``"fractions"``, its class fractions as they are (the
    method's text: one vote per tree).  The class a merged rule predicts is
    then, with ``"rows"``, the class of most training rows over its leaves, a
    tree's leaf counting as many times as it has rows.  Returns the same kind
    of container; the rules given are not changed."""
    if votes not in VOTES:
        raise ValueError(f"votes must be one of {VOTES}, got {votes!r}")

    def one(r):
        if votes == "fractions":
            return r
        frac = np.asarray(r.dist, dtype=np.float64)
        total = frac.sum()
        dist = frac / total * max(float(r.support), 0.0) if total > 0 else np.zeros_like(frac)
        return Rule(r.conditions, dist, r.support, r.kind, r.mass)
    if isinstance(rules, dict):
        return {n: one(r) for n, r in rules.items()}
    return [one(r) for r in rules]


def rules_from_tree(children_left, children_right, feature, threshold, value, n_node_samples):
    """Rules of a binary tree given as scikit-learn's ``tree_`` arrays (left child
    ``x <= threshold``), in node order; ``value`` rows are class counts or fractions,
    normalized here (see :func:`leaf_rules`)."""
    value = np.array(value, dtype=np.float64).reshape(len(feature), -1)
    total = value.sum(axis=1, keepdims=True)
    value = np.divide(value, total, out=value.copy(), where=total > 0)
    threshold = np.where(np.asarray(children_left) >= 0, tree_format.float32_thresholds(threshold), threshold)
    tree = tree_format.binary(children_left, children_right, feature, threshold, value,
                              n_node_samples=n_node_samples)
    return list(leaf_rules(tree, NUMERIC).values())


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


def merge(a, b, bounds="loose"):
    """The merged rule of two compatible rules (see the module docstring)."""
    cond = dict(a.conditions)
    for f, cb in b.conditions.items():
        ca = cond.get(f)
        if ca is None or a.kind == CATEGORICAL:
            cond[f] = cb
            continue
        if bounds == "intersect":
            cond[f] = (max(ca[0], cb[0]), min(ca[1], cb[1]))
            continue
        # the less restrictive bound on each side both rules constrain
        lo = min(ca[0], cb[0]) if ca[0] > -math.inf and cb[0] > -math.inf else max(ca[0], cb[0])
        hi = max(ca[1], cb[1]) if ca[1] < math.inf and cb[1] < math.inf else min(ca[1], cb[1])
        cond[f] = (lo, hi)
    return Rule(cond, a.dist + b.dist, a.support + b.support, a.kind, a.mass * b.mass)


@dataclass
class MergeStats:
    """Rules and time of every pairwise merge step of :func:`aggregate`
    (``compatible``: the pairs that did not contradict, before ``max_rules``)."""
    steps: list = field(default_factory=list)
    capped: bool = False
    merged_sets: int = 0        # rule sets merged (the first ones; the rest were left out)

    def add(self, left, right, pairs, kept, seconds, compatible=None):
        self.steps.append({"left_rules": left, "right_rules": right, "pairs": pairs,
                           "compatible": kept if compatible is None else compatible,
                           "kept_rules": kept, "seconds": seconds})


class RuleArrays:
    """Rules as arrays: numeric ``lo``/``hi`` (R, F) bounds, or categorical
    ``val`` (R, F) codes with -1 for "no condition"; ``dist`` (R, C), ``support`` (R,),
    ``mass`` (R,)."""

    def __init__(self, kind, cond, dist, support, mass=None):
        self.kind = kind
        self.cond = cond            # (lo, hi) or val
        self.dist = dist
        self.support = support
        self.mass = np.ones(len(support)) if mass is None else mass

    @classmethod
    def from_rules(cls, rules, n_features, codebook=None):
        """``codebook`` maps category values to codes (default: the values are codes)."""
        kind = rules[0].kind if rules else NUMERIC
        R = len(rules)
        dist = np.array([r.dist for r in rules], dtype=np.float64).reshape(R, -1)
        support = np.array([r.support for r in rules], dtype=np.float64)
        mass = np.array([r.mass for r in rules], dtype=np.float64)
        if kind == CATEGORICAL:
            val = np.full((R, n_features), -1, dtype=np.int64)
            for i, r in enumerate(rules):
                for f, v in r.conditions.items():
                    val[i, f] = codebook[v] if codebook is not None else v
            return cls(kind, val, dist, support, mass)
        lo = np.full((R, n_features), -np.inf)
        hi = np.full((R, n_features), np.inf)
        for i, r in enumerate(rules):
            for f, (a, b) in r.conditions.items():
                lo[i, f], hi[i, f] = a, b
        return cls(kind, (lo, hi), dist, support, mass)

    def __len__(self):
        return self.dist.shape[0]

    def take(self, idx):
        cond = self.cond[idx] if self.kind == CATEGORICAL else (self.cond[0][idx], self.cond[1][idx])
        return RuleArrays(self.kind, cond, self.dist[idx], self.support[idx], self.mass[idx])

    @classmethod
    def concat(cls, parts):
        """One rule array of the rules of ``parts`` (same kind and width), in order."""
        kind = parts[0].kind
        if kind == CATEGORICAL:
            cond = np.concatenate([p.cond for p in parts])
        else:
            cond = (np.concatenate([p.cond[0] for p in parts]), np.concatenate([p.cond[1] for p in parts]))
        return cls(kind, cond, np.concatenate([p.dist for p in parts]),
                   np.concatenate([p.support for p in parts]), np.concatenate([p.mass for p in parts]))

    def rules(self, values=None):
        """Back to :class:`Rule` objects (``values``: code -> category value)."""
        out = []
        for i in range(len(self)):
            if self.kind == CATEGORICAL:
                cond = {int(f): (values[c] if values is not None else int(c))
                        for f in np.flatnonzero(self.cond[i] >= 0) for c in [self.cond[i, f]]}
            else:
                lo, hi = self.cond[0][i], self.cond[1][i]
                cond = {int(f): (float(lo[f]), float(hi[f]))
                        for f in np.flatnonzero(np.isfinite(lo) | np.isfinite(hi))}
            out.append(Rule(cond, self.dist[i].copy(), float(self.support[i]), self.kind, float(self.mass[i])))
        return out


def feature_count(rule_sets):
    """The number of features the rules of ``rule_sets`` name (highest index + 1)."""
    return 1 + max((f for rs in rule_sets for r in rs for f in r.conditions), default=-1)


#: elements of the (block, rules, features) arrays one merge block may build (about 16 MiB of float64 each)
BLOCK_ELEMENTS = 1 << 21


def _pairs(blk, b):
    """``(i, j)``: the compatible pairs of the rules of ``blk`` and ``b``."""
    if blk.kind == CATEGORICAL:
        va, vb = blk.cond[:, None, :], b.cond[None, :, :]
        return np.nonzero(((va < 0) | (vb < 0) | (va == vb)).all(axis=2))
    (la, ha), (lb, hb) = blk.cond, b.cond
    return np.nonzero((np.maximum(la[:, None, :], lb[None]) < np.minimum(ha[:, None, :], hb[None])).all(axis=2))


def _merged(blk, b, i, j, bounds):
    """The merged rules of the pairs ``(i, j)`` of ``blk`` x ``b``."""
    if blk.kind == CATEGORICAL:
        cond = np.where(blk.cond[i] < 0, b.cond[j], blk.cond[i])
    else:
        (la, ha), (lb, hb) = blk.cond, b.cond
        la, lb, ha, hb = la[i], lb[j], ha[i], hb[j]
        if bounds == "intersect":
            lo, hi = np.maximum(la, lb), np.minimum(ha, hb)
        else:  # the less restrictive bound where both rules bound a side, else the one bound
            lo = np.where(np.isfinite(la) & np.isfinite(lb), np.minimum(la, lb), np.maximum(la, lb))
            hi = np.where(np.isfinite(ha) & np.isfinite(hb), np.maximum(ha, hb), np.minimum(ha, hb))
        cond = (lo, hi)
    return RuleArrays(blk.kind, cond, blk.dist[i] + b.dist[j], blk.support[i] + b.support[j],
                      blk.mass[i] * b.mass[j])


def _blocks(a, b):
    """Row ranges of ``a`` whose pairs with ``b`` fit in :data:`BLOCK_ELEMENTS`."""
    width = (b.cond if a.kind == CATEGORICAL else b.cond[0]).shape[1]
    step = max(1, BLOCK_ELEMENTS // max(1, len(b) * max(width, 1)))
    return [np.arange(s, min(s + step, len(a))) for s in range(0, len(a), step)]


def _merge_step(a, b, bounds="loose", max_rules=None, coarsen=True):
    """The compatible pairs of ``a`` x ``b`` merged (row-major order).  When
    there are more than ``max_rules``, the rules of ``a`` of least mass are not
    refined: they are kept as they are, so the rules still cover what ``a``
    covered, and only the refinements of the others are built (memory stays
    within ``max_rules`` rules plus one block).  Returns ``(rules, number of
    compatible pairs, number of rules of a kept unrefined)``; with ``coarsen``
    false, a step over ``max_rules`` builds nothing and returns ``(None,
    compatible pairs, len(a))``."""
    if bounds not in BOUNDS:
        raise ValueError(f"bounds must be one of {BOUNDS}, got {bounds!r}")
    blocks = _blocks(a, b)
    children = np.zeros(len(a), dtype=np.int64)
    for rows in blocks:
        i, _ = _pairs(a.take(rows), b)
        children[rows] = np.bincount(i, minlength=rows.size)
    refine = np.ones(len(a), dtype=bool)
    if max_rules is not None and children.sum() > max_rules and not coarsen:
        return None, int(children.sum()), len(a)
    if max_rules is not None and children.sum() > max_rules:
        # refine the rules of largest mass while the total stays within max_rules
        order = np.argsort(-a.mass, kind="stable")
        extra = np.cumsum(np.maximum(children[order], 1) - 1)
        refine[:] = False
        refine[order[len(a) + extra <= max_rules]] = True
    parts = []
    for rows in blocks:
        blk = a.take(rows)
        i, j = _pairs(blk, b)
        sel = refine[rows][i]
        whole = rows[~refine[rows]]
        # in a's order: each rule of a, then its refinements (or itself, unrefined)
        merged = _merged(blk, b, i[sel], j[sel], bounds)
        pos = np.concatenate([rows[i[sel]], whole])
        both = RuleArrays.concat([merged, a.take(whole)])
        parts.append(both.take(np.argsort(pos, kind="stable")))
    return RuleArrays.concat(parts), int(children.sum()), int((~refine).sum())



def aggregate(rule_sets, max_rules=10_000, bounds="loose", over_max_rules="coarsen"):
    """Cartesian product of the rule sets, merged pairwise and incrementally
    (``bounds``: see the module docstring).  Each rule's mass starts as its
    share of its tree's rows (its support over the rule set's total support)
    and merged masses multiply.  Incompatible pairs and rules without support
    are dropped at every step.  When a step would give more than ``max_rules``
    rules: with ``over_max_rules = "coarsen"``, the running rules of least
    mass are not refined by that tree (they keep their conditions and the
    class distributions so far), so the rules still cover what they covered;
    with ``"drop_sets"``, that rule set and all after it are left out (pass
    the sets best first).  A warning says what happened.
    Returns ``(rules, MergeStats)``."""
    stats = MergeStats()
    sets = [list(rs) for rs in rule_sets if rs]
    if not sets:
        return [], stats
    n_feat = max(feature_count(sets), 1)
    values = None
    if sets[0][0].kind == CATEGORICAL:
        values = sorted({v for rs in sets for r in rs for v in r.conditions.values()}, key=repr)
    codebook = {v: i for i, v in enumerate(values)} if values is not None else None
    arrays = []
    for rs in sets:
        ra = RuleArrays.from_rules(rs, n_feat, codebook)
        ra = ra.take(np.flatnonzero(ra.support > 0))
        ra.mass = ra.support / ra.support.sum() if len(ra) else ra.support
        arrays.append(ra)
    current = arrays[0]
    stats.merged_sets = 1
    for step, nxt in enumerate(arrays[1:], start=2):
        t0 = time.perf_counter()
        if len(current) and len(nxt):
            out, compatible, whole = _merge_step(current, nxt, bounds, max_rules,
                                                 coarsen=over_max_rules == "coarsen")
        else:
            out, compatible, whole = current.take(np.arange(0)), 0, 0
        if whole and over_max_rules == "drop_sets":
            stats.capped = True
            warnings.warn(f"rule aggregation: merging rule set {step} would give more than max_rules="
                          f"{max_rules} rules; it and the {len(arrays) - step} after it were left out",
                          RuntimeWarning, stacklevel=2)
            break
        stats.merged_sets = step
        if whole:
            stats.capped = True
            warnings.warn(f"rule aggregation: {whole} rules of least estimated mass were not refined by rule "
                          f"set {step} (max_rules={max_rules})", RuntimeWarning, stacklevel=2)
        stats.add(len(current), len(nxt), len(current) * len(nxt), len(out), time.perf_counter() - t0,
                  compatible)
        current = out
    return current.rules(values), stats


# ---------------------------------------------------------------------------
# A global binary tree from numeric rules
# ---------------------------------------------------------------------------
def _leaf_value(dist, n_classes):
    total = dist.sum(axis=0) if dist.shape[0] else np.zeros(n_classes)
    s = total.sum()
    return total / s if s > 0 else total


def _side_sums(values, onehot, cuts, left):
    """Per cut ``t``: the rules with ``values < t`` (``left``) or ``values > t``,
    counted and summed over ``onehot`` (rules x classes)."""
    order = np.argsort(values, kind="stable")
    cum = np.concatenate((np.zeros((1, onehot.shape[1])), np.cumsum(onehot[order], axis=0)))
    if left:
        at = np.searchsorted(values[order], cuts, side="left")
        return at, cum[at]
    at = np.searchsorted(values[order], cuts, side="right")
    return values.size - at, cum[-1] - cum[at]


def collapse_same_class(children, value):
    """Leaves of one parent that all predict the parent's class (argmax of
    ``value``) merged back into it, bottom up: ``children[n]`` lists node ``n``'s
    children (empty at a leaf) and is emptied where the split is undone.  No
    row changes class: it reached a leaf of that class and now stops at the
    parent, which has it too.  Returns the number of splits undone."""
    undone = 0
    order, stack = [], [0]
    while stack:                  # parents before children; reversed: children first
        n = stack.pop()
        order.append(n)
        stack.extend(children[n])
    for n in reversed(order):
        kids = children[n]
        if kids and all(not children[k] for k in kids):
            c = int(np.argmax(value[n]))
            if all(int(np.argmax(value[k])) == c for k in kids):
                children[n] = []
                undone += 1
    return undone


def reachable(children):
    """The nodes reachable from the root, in depth-first (pre-)order."""
    out, stack = [], [0]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(reversed(children[n]))
    return out


def depth_of(children):
    """The depth of a tree given as child lists (0: a lone root)."""
    deepest, stack = 0, [(0, 0)]
    while stack:
        n, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((k, d + 1) for k in children[n])
    return deepest


def tree_from_rules(rules, n_classes, max_depth=None, max_nodes=None, info=None, weights=None,
                    splits="whole_first", prune=True):
    """A binary tree (:mod:`fedforest.tree.format`, with the rules per node in
    ``n_rules``) grown from numeric rules: each node holds the rules that can reach it; the split
    ``x_f <= t`` (``t`` among the rules' thresholds) with the largest
    information gain of the rules' predicted classes is taken, provided at
    least one child holds fewer rules than the node (rules spanning ``t`` go to
    both children, clipped to each side, so a threshold is never reused).

    ``splits = "whole_first"`` takes the best split among those no rule of the
    node spans, whenever there is one: every rule then goes to one child, so
    the tree has at most one leaf per rule (2 x rules - 1 nodes).  The merged
    rules of trees merged with exact conjunctions are the cells of the trees'
    common refinement, and such a split always exists until the cells are
    separated.  ``"any"`` takes the best split whatever it cuts (the method's
    text): rules cut by a split are copied into both children, and the copies
    are cut again further down, so the tree can have many more leaves than
    rules.

    A node is a leaf when its rules agree on the class, at ``max_depth``, or when
    no split qualifies; its value is the normalized sum of its rules' class distributions.
    ``weights`` (one per rule, e.g. the rules' :attr:`Rule.mass`) weigh each rule
    in the class counts of the gain and in the leaf values; by default every rule
    counts once, as the method's entropy of rules prescribes.
    Nodes are expanded best first (largest gain times the weight of the node's
    rules); when a split would pass ``max_nodes`` nodes, growth stops
    (``info["truncated"]`` is then set when ``info`` is a dict).  With
    ``prune``, sibling leaves that predict their parent's class are merged into
    it afterwards (:func:`collapse_same_class`; no row changes class).  ``info``
    also receives ``cut_splits``, the splits that cut some rule, and ``pruned``."""
    if splits not in SPLITS:
        raise ValueError(f"splits must be one of {SPLITS}, got {splits!r}")
    nodes = []   # [left, right, feature, threshold, value, n_rules]
    rules = list(rules)
    n_feat = max(feature_count([rules]), 1)
    ra = RuleArrays.from_rules(rules, n_feat)
    cls = ra.dist.argmax(axis=1) if len(ra) else np.zeros(0, dtype=np.int64)

    w_all = np.ones(len(ra)) if weights is None else np.asarray(weights, dtype=np.float64).reshape(len(ra))
    prob = ra.dist / np.maximum(ra.dist.sum(axis=1, keepdims=True), 1e-300)
    info = {} if info is None else info
    info.setdefault("cut_splits", 0)

    def best_split(lo, hi, members):
        """``(gain, feature, threshold, cuts a rule)`` of the node's best split, or None."""
        R = members.size
        onehot = np.zeros((R, n_classes))
        onehot[np.arange(R), cls[members]] = w_all[members]
        total = onehot.sum(axis=0)
        parent_h = float(entropy(total))
        best = {True: None, False: None}          # whole: the best split cutting no rule
        for f in range(n_feat):
            lf, hf = lo[:, f], hi[:, f]
            cuts = np.unique(np.concatenate([lf[np.isfinite(lf)], hf[np.isfinite(hf)]]))
            if not cuts.size:
                continue
            # rules reaching each side of every cut (left: lo < t, right: hi > t), per class
            nl, left = _side_sums(lf, onehot, cuts, True)
            nr, right = _side_sums(hf, onehot, cuts, False)
            ok = (nl > 0) & (nr > 0) & ((nl < R) | (nr < R))
            if not ok.any():
                continue
            wl, wr = left.sum(axis=1), right.sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                gain = parent_h - (wl * entropy(left) + wr * entropy(right)) / (wl + wr)
            ok &= np.isfinite(gain)
            for whole, sel in ((True, ok & (nl + nr == R)), (False, ok)):
                if not sel.any():
                    continue
                k = int(np.argmax(np.where(sel, gain, -np.inf)))
                if best[whole] is None or gain[k] > best[whole][0]:
                    best[whole] = (float(gain[k]), f, float(cuts[k]), not whole)
        if splits == "whole_first" and best[True] is not None:
            return best[True]
        return best[False]

    def new_node(members):
        value = _leaf_value(prob[members] * w_all[members, None], n_classes)
        nodes.append([tree_format.NO_CHILD, tree_format.NO_CHILD, tree_format.LEAF, -2.0, value,
                      int(members.size)])
        return len(nodes) - 1

    lo, hi = ra.cond if len(ra) else (np.zeros((0, n_feat)), np.zeros((0, n_feat)))
    members = np.arange(len(ra))
    # best first: the split of largest gain times the weight of the node's rules is made first,
    # so a node budget is spent where the rules (and, weighted by mass, the rows) are
    heap, count = [], 0

    def push(me, lo, hi, members, depth):
        nonlocal count
        if np.unique(cls[members]).size <= 1 or (max_depth is not None and depth >= max_depth):
            return
        best = best_split(lo, hi, members)
        if best is not None:
            count += 1
            heapq.heappush(heap, (-best[0] * float(w_all[members].sum()), count, me, lo, hi, members, depth, best))

    push(new_node(members), lo, hi, members, 0)
    while heap:
        _, _, me, lo, hi, members, depth, (_, f, t, cut) = heapq.heappop(heap)
        if max_nodes is not None and len(nodes) + 2 > max_nodes:
            info["truncated"] = True
            break
        info["cut_splits"] += int(cut)
        go_left, go_right = lo[:, f] < t, hi[:, f] > t
        llo, lhi = lo[go_left], hi[go_left].copy()
        lhi[:, f] = np.minimum(lhi[:, f], t)
        rlo, rhi = lo[go_right].copy(), hi[go_right]
        rlo[:, f] = np.maximum(rlo[:, f], t)
        nodes[me][2], nodes[me][3] = f, t
        nodes[me][0] = new_node(members[go_left])
        nodes[me][1] = new_node(members[go_right])
        push(nodes[me][0], llo, lhi, members[go_left], depth + 1)
        push(nodes[me][1], rlo, rhi, members[go_right], depth + 1)
    children = [[n[0], n[1]] if n[0] >= 0 else [] for n in nodes]
    info["pruned"] = collapse_same_class(children, [n[4] for n in nodes]) if prune else 0
    keep = reachable(children)
    new = {old: i for i, old in enumerate(keep)}
    kids = [[new[k] for k in children[old]] or [tree_format.NO_CHILD] * 2 for old in keep]
    info["depth"] = depth_of(children)
    return tree_format.binary([k[0] for k in kids], [k[1] for k in kids],
                              [nodes[o][2] if children[o] else tree_format.LEAF for o in keep],
                              [nodes[o][3] if children[o] else -2.0 for o in keep],
                              np.array([nodes[o][4] for o in keep], dtype=np.float64).reshape(len(keep), n_classes),
                              n_rules=[nodes[o][5] for o in keep])
