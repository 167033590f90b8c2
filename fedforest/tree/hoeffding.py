"""The Hoeffding Anytime Tree (Extremely Fast Decision Tree, Manapragada et al., KDD 2018)
over integer-coded streams, its export to :mod:`fedforest.tree.format`, the
merge of two trees' statistics along matching paths, and the tree edit distance
between client trees (the Zhang-Shasha kernel is in :mod:`fedforest.tree.edit_distance`).

Rows are integer codes, one per feature: a categorical feature's category
code (``0..n_codes-1``), a numeric feature's bin over edges fixed once for
the whole stream (:func:`bin_codes`; a missing value has the last code of
its feature).  Every node, inner nodes included, keeps

* ``counts[node, k]``: the class counts behind its prediction (a new leaf
  starts with its share of its parent's counts);
* ``nijk[node, offsets[i] + j, k]``: the rows seen by the node since it was
  created with code ``j`` of feature ``i`` and class ``k``;
* ``dcounts``/``dnijk``: the same, gathered since the last :meth:`EFDT.reset_deltas`
  (what a federated client sends so that the server merges new rows only);
* ``seen``: the n of its Hoeffding bound, the rows it has learnt (with
  ``new_leaf_seen="inherited"``, river's rule, plus the weight it inherited;
  the default ``"zero"`` counts only the rows learnt).

A node splits in one of three ways: ``MULTI`` (one child per code of a
categorical feature), ``EQ`` (code == value left, any other code right) or
``LE`` (a numeric feature's bin <= value left, greater bins and missing right);
a categorical feature offers ``EQ`` splits (``binary_split``), ``MULTI``
(``multiway_only``) or both, the best winning (the default, as river).

Learning (:func:`learn_kernel`) walks each row from the root, adds it to
every node on its path, re-evaluates an inner node's split once
``min_samples_reevaluate`` rows have reached it since its last evaluation
(the clock is reset at each evaluation) and replaces it when another
feature's merit exceeds the current one by more than the Hoeffding bound, or
by more than ``tau / 2`` once the bound is below ``tau``; a leaf tries to
split once ``grace_period`` rows have reached it since its creation or last
attempt, unless one class holds more than ``max_share_to_split`` of its
counts, and splits when the best merit exceeds the bound (or the bound is
below ``tau``).  The range of information gain in the bound counts the classes
present at the node (``merit_range="node"``) or in the job (``"job"``).
"""
import math

import numpy as np
from numba import njit

from . import format as tree_format
from .edit_distance import postorder_arrays, zhang_shasha

# split kinds
LEAF_KIND, MULTI, EQ, LE = 0, 1, 2, 3
# criteria and leaf predictions
INFO_GAIN, GINI = 0, 1
MC, NB, NBA = 0, 1, 2
CRITERIA = {"info_gain": INFO_GAIN, "gini": GINI}
LEAF_PREDICTIONS = {"mc": MC, "nb": NB, "nba": NBA}
MIN_BRANCH_FRACTION = 0.01   # information gain: two branches must hold 1 % of the rows each (as river)
# the splits a categorical feature offers: one branch per code, code vs the rest, or both (the best wins)
CAT_MULTI, CAT_EQ, CAT_BOTH = 0, 1, 2
# the class count of the merit range R: the classes present at the node, or every class of the job
RANGE_NODE, RANGE_JOB = 0, 1
MERIT_RANGES = {"node": RANGE_NODE, "job": RANGE_JOB}
# where a new leaf's row count (the n of its Hoeffding bound) starts
SEEN_INHERITED, SEEN_ZERO = 0, 1
NEW_LEAF_SEEN = {"inherited": SEEN_INHERITED, "zero": SEEN_ZERO}

# layout of the float settings handed to the kernel
(P_GRACE, P_DELTA, P_TAU, P_REEVAL, P_CRIT, P_LEAF, P_BINARY, P_DEPTH, P_SEEN, P_RANGE, P_MAX_SHARE,
 P_RESPLIT) = range(12)

NODE_INT = ("feature", "kind", "value", "first", "n_children", "depth")
NODE_FLOAT = ("seen", "clock", "mc_ok", "nb_ok")
STAT_KEYS = ("counts", "nijk", "dcounts", "dnijk")
_LEAF = tree_format.LEAF


# ---------------------------------------------------------------------------
# Scalar kernels: bound, impurity, merit
# ---------------------------------------------------------------------------
@njit(cache=True)
def hoeffding_bound(value_range, delta, n):
    """epsilon = sqrt(R^2 ln(1/delta) / (2 n)) (infinite when n is 0)."""
    if n <= 0.0:
        return np.inf
    return math.sqrt(value_range * value_range * math.log(1.0 / delta) / (2.0 * n))


@njit(cache=True)
def merit_range(n_classes, crit):
    """R of the bound: log2(classes) for information gain, 1 for Gini."""
    if crit == GINI:
        return 1.0
    return math.log2(max(n_classes, 2))


@njit(cache=True)
def _impurity(c, crit):
    n = 0.0
    for k in range(c.shape[0]):
        n += c[k]
    if n <= 0.0:
        return 0.0
    s = 0.0
    if crit == GINI:
        for k in range(c.shape[0]):
            p = c[k] / n
            s += p * p
        return 1.0 - s
    for k in range(c.shape[0]):
        if c[k] > 0.0:
            p = c[k] / n
            s -= p * math.log2(p)
    return s


@njit(cache=True)
def _two_way_from(left, total, imp_total, crit):
    """Merit of a split into ``left`` and ``total - left`` given the impurity of
    ``total``; -inf when a side is empty (or, for information gain, holds less
    than MIN_BRANCH_FRACTION).  No allocation: this runs once per candidate."""
    C = total.shape[0]
    nl = 0.0
    n = 0.0
    for k in range(C):
        nl += left[k]
        n += total[k]
    nr = n - nl
    floor = MIN_BRANCH_FRACTION * n if crit == INFO_GAIN else 0.0
    if nl <= floor or nr <= floor or nl <= 0.0 or nr <= 0.0:
        return -np.inf
    il = 0.0
    ir = 0.0
    for k in range(C):
        pl = left[k] / nl
        pr = (total[k] - left[k]) / nr
        if crit == GINI:
            il += pl * pl
            ir += pr * pr
        else:
            if pl > 0.0:
                il -= pl * math.log2(pl)
            if pr > 0.0:
                ir -= pr * math.log2(pr)
    if crit == GINI:
        il, ir = 1.0 - il, 1.0 - ir
    return imp_total - (nl / n) * il - (nr / n) * ir


@njit(cache=True)
def _two_way(left, total, crit):
    return _two_way_from(left, total, _impurity(total, crit), crit)


@njit(cache=True)
def split_merit(block, kind, value, real, crit):
    """Merit of one split of a feature from its counts ``block[code, class]``
    (``real``: the codes an LE split may send left, i.e. the feature's real bins)."""
    C = block.shape[1]
    total = np.zeros(C)
    for j in range(block.shape[0]):
        for k in range(C):
            total[k] += block[j, k]
    if kind == MULTI:
        n = 0.0
        for k in range(C):
            n += total[k]
        if n <= 0.0:
            return -np.inf
        floor = MIN_BRANCH_FRACTION * n if crit == INFO_GAIN else 0.0
        branches = 0
        after = 0.0
        for j in range(block.shape[0]):
            nj = 0.0
            for k in range(C):
                nj += block[j, k]
            if nj > floor and nj > 0.0:
                branches += 1
            if nj > 0.0:
                after += nj / n * _impurity(block[j], crit)
        if branches < 2:
            return -np.inf
        return _impurity(total, crit) - after
    left = np.zeros(C)
    if kind == EQ:
        for k in range(C):
            left[k] = block[value, k]
    else:
        for j in range(min(value + 1, real)):
            for k in range(C):
                left[k] += block[j, k]
    return _two_way(left, total, crit)


@njit(cache=True)
def best_feature_split(block, numeric, real, cat, crit):
    """The best split of one feature: (merit, kind, value); merit -inf when none.
    ``cat`` (categorical features): CAT_MULTI offers the one-branch-per-code
    split, CAT_EQ every code-vs-rest split, CAT_BOTH all of them (multiway on
    ties).  One pass over the codes: running left counts (LE) or each code
    against the rest (EQ), same merits as :func:`split_merit`."""
    if not numeric and cat != CAT_EQ:
        multi = split_merit(block, MULTI, -1, real, crit)
        if cat == CAT_MULTI:
            return multi, MULTI, -1
    else:
        multi = -np.inf
    C = block.shape[1]
    total = np.zeros(C)
    for j in range(block.shape[0]):
        for k in range(C):
            total[k] += block[j, k]
    left = np.zeros(C)
    imp = _impurity(total, crit)
    best, best_v = -np.inf, -1
    if numeric:
        for v in range(real - 1):
            for k in range(C):
                left[k] += block[v, k]
            m = _two_way_from(left, total, imp, crit)
            if m > best:
                best, best_v = m, v
        return best, LE, best_v
    for v in range(block.shape[0]):
        for k in range(C):
            left[k] = block[v, k]
        m = _two_way_from(left, total, imp, crit)
        if m > best:
            best, best_v = m, v
    if cat == CAT_BOTH and not best > multi:
        return multi, MULTI, -1
    return best, EQ, best_v


@njit(cache=True)
def best_split(stats, offsets, numeric, real, cat, crit):
    """The best split of a node from its ``stats[code, class]``: (feature, kind,
    value, merit, merit of every feature); feature -1 when no split has a
    positive merit.  ``cat``: the categorical splits offered (see
    :func:`best_feature_split`; False and True mean CAT_MULTI and CAT_EQ)."""
    F = offsets.shape[0] - 1
    merits = np.full(F, -np.inf)
    best_f, best_k, best_v, best_m = -1, LEAF_KIND, -1, 0.0
    for f in range(F):
        m, k, v = best_feature_split(stats[offsets[f]:offsets[f + 1]], numeric[f], real[f], cat, crit)
        merits[f] = m
        if m > best_m:
            best_f, best_k, best_v, best_m = f, k, v, m
    return best_f, best_k, best_v, best_m, merits


@njit(cache=True)
def classes_present(counts, node):
    """The number of classes with a positive count at ``node``."""
    n = 0
    for k in range(counts.shape[1]):
        if counts[node, k] > 0.0:
            n += 1
    return n


# ---------------------------------------------------------------------------
# The learning kernel
# ---------------------------------------------------------------------------
@njit(cache=True)
def nb_scores(nijk, counts, node, row, offsets, out):
    """log P(k) + sum_i log P(x_i | k) at ``node``.  The prior is the node's
    class fractions as they are: a class without a count at the node scores
    -inf, so naive Bayes never predicts a class the node has not seen (when
    no class has a count, every class scores 0).  The likelihoods are
    Laplace-smoothed over the rows the node has seen since it was created,
    ``(n_ijk + 1) / (n_k + codes of feature i)``; a code outside the feature,
    such as -1 for an unseen category, is skipped.  The factors are
    multiplied and their product logged whenever it gets small (one log per
    few dozen features instead of one per feature)."""
    C = counts.shape[1]
    F = offsets.shape[0] - 1
    n = 0.0
    for k in range(C):
        n += counts[node, k]
    if n <= 0.0:
        for k in range(C):
            out[k] = 0.0
        return
    for k in range(C):
        if counts[node, k] <= 0.0:
            out[k] = -np.inf
            continue
        nk = 0.0
        for j in range(offsets[0], offsets[1]):
            nk += nijk[node, j, k]
        acc = math.log(counts[node, k] / n)
        prod = 1.0
        for f in range(F):
            width = offsets[f + 1] - offsets[f]
            code = row[f]
            if code < 0 or code >= width:
                continue
            prod *= (nijk[node, offsets[f] + code, k] + 1.0) / (nk + width)
            if prod < 1e-150:
                acc += math.log(prod)
                prod = 1.0
        out[k] = acc + math.log(prod)


@njit(cache=True)
def _argmax(a):
    best = 0
    for k in range(1, a.shape[0]):
        if a[k] > a[best]:
            best = k
    return best


@njit(cache=True)
def _make_children(node, kind, f, v, feature, kindarr, value, first, nch, depth, child,
                   counts, nijk, seen, clock, mc_ok, nb_ok, dcounts, dnijk, meta, offsets, real, inherit):
    """Turn ``node`` into a split; its new leaves start with the class counts
    the split sends them (from the node's own statistics) and, with
    ``inherit``, with those counts' sum as their row count ``seen`` (else 0);
    their clocks start at ``seen``."""
    C = counts.shape[1]
    lo, hi = offsets[f], offsets[f + 1]
    m = hi - lo if kind == MULTI else 2
    start = meta[1]
    for c in range(m):
        nd = meta[0]
        meta[0] += 1
        child[start + c] = nd
        feature[nd] = _LEAF
        kindarr[nd] = LEAF_KIND
        value[nd] = -1
        first[nd] = -1
        nch[nd] = 0
        depth[nd] = depth[node] + 1
        mc_ok[nd] = 0.0
        nb_ok[nd] = 0.0
        for k in range(C):
            counts[nd, k] = 0.0
            dcounts[nd, k] = 0.0
        for j in range(nijk.shape[1]):
            for k in range(C):
                nijk[nd, j, k] = 0.0
                dnijk[nd, j, k] = 0.0
        for j in range(lo, hi):
            code = j - lo
            if kind == MULTI:
                take = code == c
            elif kind == EQ:
                take = (code == v) == (c == 0)
            else:
                take = (code <= v and code < real[f]) == (c == 0)
            if take:
                for k in range(C):
                    counts[nd, k] += nijk[node, j, k]
        w = 0.0
        if inherit:
            for k in range(C):
                w += counts[nd, k]
        seen[nd] = w
        clock[nd] = w
    meta[1] += m
    meta[2] += 1
    feature[node] = f
    kindarr[node] = kind
    value[node] = v
    first[node] = start
    nch[node] = m


@njit(cache=True)
def _route(node, row, feature, kind, value, first, child, real):
    f = feature[node]
    code = row[f]
    k = kind[node]
    if k == MULTI:
        return child[first[node] + code]
    if k == EQ:
        return child[first[node] + (0 if code == value[node] else 1)]
    return child[first[node] + (0 if (code <= value[node] and code < real[f]) else 1)]


@njit(cache=True)
def _range_of(counts, node, C, crit, range_mode):
    """R of the bound at ``node``: over the classes present at the node
    (RANGE_NODE) or over every class of the job (RANGE_JOB)."""
    if range_mode == RANGE_JOB:
        return merit_range(C, crit)
    return merit_range(classes_present(counts, node), crit)


@njit(cache=True)
def learn_kernel(codes, y, start, feature, kind, value, first, nch, depth, child,
                 counts, nijk, dcounts, dnijk, seen, clock, mc_ok, nb_ok, meta,
                 offsets, numeric, real, params):
    """Learn rows ``start..`` of ``codes``/``y`` in order; returns the next row
    to learn (before the end when the node or child arrays might overflow at
    the next split: the caller grows them and calls again)."""
    n = codes.shape[0]
    C = counts.shape[1]
    cap_nodes = feature.shape[0]
    cap_child = child.shape[0]
    widest = 2
    for f in range(offsets.shape[0] - 1):
        widest = max(widest, offsets[f + 1] - offsets[f])
    grace, delta, tau = params[P_GRACE], params[P_DELTA], params[P_TAU]
    reeval = params[P_REEVAL]
    crit, leaf_pred = int(params[P_CRIT]), int(params[P_LEAF])
    cat, max_depth = int(params[P_BINARY]), int(params[P_DEPTH])
    inherit = int(params[P_SEEN]) == SEEN_INHERITED
    range_mode, max_share = int(params[P_RANGE]), params[P_MAX_SHARE]
    resplit = params[P_RESPLIT] > 0
    scores = np.empty(C)
    for i in range(start, n):
        if meta[0] + 2 * widest > cap_nodes or meta[1] + 2 * widest > cap_child:
            return i
        row = codes[i]
        yi = y[i]
        node = 0
        while True:
            is_leaf = kind[node] == LEAF_KIND
            if is_leaf and leaf_pred == NBA:
                if _argmax(counts[node]) == yi:
                    mc_ok[node] += 1.0
                nb_scores(nijk, counts, node, row, offsets, scores)
                if _argmax(scores) == yi:
                    nb_ok[node] += 1.0
            counts[node, yi] += 1.0
            dcounts[node, yi] += 1.0
            for f in range(offsets.shape[0] - 1):
                j = offsets[f] + row[f]
                nijk[node, j, yi] += 1.0
                dnijk[node, j, yi] += 1.0
            seen[node] += 1.0
            if is_leaf:
                if seen[node] - clock[node] >= grace and (max_depth < 0 or depth[node] < max_depth):
                    clock[node] = seen[node]
                    total = 0.0
                    for k in range(C):
                        total += counts[node, k]
                    if counts[node, _argmax(counts[node])] > max_share * total:
                        break                   # one class dominates: no split attempt
                    f, k, v, m, _ = best_split(nijk[node], offsets, numeric, real, cat, crit)
                    eps = hoeffding_bound(_range_of(counts, node, C, crit, range_mode), delta, seen[node])
                    if f >= 0 and (m > eps or eps < tau):
                        _make_children(node, k, f, v, feature, kind, value, first, nch, depth, child,
                                       counts, nijk, seen, clock, mc_ok, nb_ok, dcounts, dnijk, meta,
                                       offsets, real, inherit)
                break
            if seen[node] - clock[node] >= reeval:
                clock[node] = seen[node]
                f, k, v, m, merits = best_split(nijk[node], offsets, numeric, real, cat, crit)
                cf = feature[node]
                current = split_merit(nijk[node, offsets[cf]:offsets[cf + 1]], kind[node], value[node],
                                      real[cf], crit)
                if current == -np.inf:
                    current = 0.0
                best_m = m if f >= 0 else 0.0   # no split at all has merit 0
                gain = best_m - current
                eps = hoeffding_bound(_range_of(counts, node, C, crit, range_mode), delta, seen[node])
                if gain > eps or (eps < tau and gain > tau / 2.0):
                    if f < 0:                   # the split no longer pays: the node becomes a leaf
                        kind[node] = LEAF_KIND
                        meta[2] += 1
                        feature[node] = _LEAF
                        value[node] = -1
                        first[node] = -1
                        nch[node] = 0
                        break
                    # another feature wins (or, with ``resplit``, another test of the same
                    # feature): new split, new leaves
                    if f != cf or (resplit and (k != kind[node] or v != value[node])):
                        _make_children(node, k, f, v, feature, kind, value, first, nch, depth, child,
                                       counts, nijk, seen, clock, mc_ok, nb_ok, dcounts, dnijk, meta,
                                       offsets, real, inherit)
                        break
            node = _route(node, row, feature, kind, value, first, child, real)
    return n


@njit(cache=True)
def walk_kernel(codes, feature, kind, value, first, child, real, offsets):
    """The node where each coded row stops, walking the learner's own arrays
    (the same routes as the export walked by :func:`tree_format.apply`): a
    leaf, or a multiway or ``EQ`` node testing a feature whose code the row
    does not have (-1: a category unseen in the job)."""
    n = codes.shape[0]
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        node = 0
        while kind[node] != LEAF_KIND:
            f = feature[node]
            code = codes[i, f]
            if kind[node] != LE and (code < 0 or code >= offsets[f + 1] - offsets[f]):
                break
            node = _route(node, codes[i], feature, kind, value, first, child, real)
        out[i] = node
    return out


@njit(cache=True)
def leaf_proba_kernel(codes, node_of_row, counts, nijk, mc_ok, nb_ok, is_leaf, offsets, leaf_pred):
    """Class probabilities of rows that stop at ``node_of_row``: the node's class
    fractions (mc), naive Bayes on its statistics (nb) or the better of the two
    on the rows the leaf has seen (nba; ties go to naive Bayes).  Rows that stop
    at an inner node (a category unseen at that node) take its class fractions."""
    n = codes.shape[0]
    C = counts.shape[1]
    out = np.zeros((n, C))
    scores = np.empty(C)
    for i in range(n):
        node = node_of_row[i]
        use_nb = is_leaf[node] and (leaf_pred == NB or (leaf_pred == NBA and nb_ok[node] >= mc_ok[node]))
        if use_nb:
            nb_scores(nijk, counts, node, codes[i], offsets, scores)
            top = scores[_argmax(scores)]
            s = 0.0
            for k in range(C):
                out[i, k] = math.exp(scores[k] - top)
                s += out[i, k]
            for k in range(C):
                out[i, k] /= s
        else:
            s = 0.0
            for k in range(C):
                s += counts[node, k]
            for k in range(C):
                out[i, k] = counts[node, k] / s if s > 0 else 1.0 / C
    return out


@njit(cache=True)
def proba_kernel(codes, feature, kind, value, first, child, real, counts, nijk, mc_ok, nb_ok, offsets, leaf_pred):
    """Class probabilities of coded rows in the learner's arrays: :func:`walk_kernel`
    then :func:`leaf_proba_kernel`."""
    node = walk_kernel(codes, feature, kind, value, first, child, real, offsets)
    return leaf_proba_kernel(codes, node, counts, nijk, mc_ok, nb_ok, kind == LEAF_KIND, offsets, leaf_pred)


# ---------------------------------------------------------------------------
# Codes of a stream
# ---------------------------------------------------------------------------
def bin_codes(x, edges):
    """Bin of each value of a numeric column: ``searchsorted(edges, x, 'left')``
    (so code <= b  <=>  x <= edges[b]); NaN gets the missing code len(edges) + 1."""
    x = np.asarray(x, dtype=np.float64)
    out = np.searchsorted(np.asarray(edges, dtype=np.float64), x, side="left").astype(np.int32)
    out[np.isnan(x)] = len(edges) + 1
    return out


def quantile_sketch(x, n_bins):
    """A client's summary of a numeric column: its quantiles at ``n_bins + 1``
    evenly spaced levels (NaN ignored) and the number of values behind them."""
    x = np.asarray(x, dtype=np.float64)
    x = x[~np.isnan(x)]
    if x.size == 0:
        return {"q": np.zeros(0), "n": 0}
    return {"q": np.quantile(x, np.linspace(0.0, 1.0, n_bins + 1)), "n": int(x.size)}


def agree_edges(sketches, n_bins):
    """Job-wide bin edges of a numeric column from the clients' sketches: the
    inner quantiles of the pooled sketch points, each client weighted by its
    number of values; duplicates dropped (a column with few values gets fewer
    bins)."""
    pts, w = [], []
    for s in sketches:
        if s["n"] > 0:
            q = np.asarray(s["q"], dtype=np.float64)
            pts.append(q)
            w.append(np.full(q.size, s["n"] / q.size))
    if not pts:
        return np.zeros(0)
    pts, w = np.concatenate(pts), np.concatenate(w)
    order = np.argsort(pts, kind="stable")
    pts, w = pts[order], w[order]
    cum = (np.cumsum(w) - 0.5 * w) / w.sum()
    levels = np.arange(1, n_bins) / n_bins
    inner = np.interp(levels, cum, pts)
    return np.unique(np.concatenate([[pts[0]], inner]))


class Schema:
    """The features of a stream: per feature its number of codes, whether it is
    numeric and (numeric) its real bins, i.e. the codes an LE split may send left."""

    def __init__(self, n_codes, numeric):
        self.n_codes = np.asarray(n_codes, dtype=np.int64)
        self.numeric = np.asarray(numeric, dtype=np.bool_)
        self.offsets = np.concatenate([[0], np.cumsum(self.n_codes)]).astype(np.int64)
        self.real = np.where(self.numeric, self.n_codes - 1, self.n_codes).astype(np.int64)

    @classmethod
    def from_edges(cls, edges, categories):
        """Numeric features (``edges[f]`` given) get ``len(edges) + 2`` codes (the
        bins and the missing code); categorical ones their number of categories."""
        n_codes = [len(e) + 2 if e is not None else len(c) for e, c in zip(edges, categories)]
        return cls(n_codes, [e is not None for e in edges])

    def to_dict(self):
        return {"n_codes": self.n_codes.tolist(), "numeric": self.numeric.tolist()}

    @classmethod
    def from_dict(cls, d):
        return cls(d["n_codes"], d["numeric"])


# ---------------------------------------------------------------------------
# The tree
# ---------------------------------------------------------------------------
class EFDT:
    """A Hoeffding Anytime Tree over a :class:`Schema` with ``n_classes`` classes.

    ``learn(codes, y)`` learns rows in order, ``learn_one(row, y)`` one row;
    ``predict_proba(codes)`` and ``predict_one(row)`` predict (the same
    numbers whichever is used); ``state()``/``load_state`` give and take the
    tree as a dict of compact arrays (nodes in breadth-first order);
    ``export()`` gives the :mod:`~fedforest.tree.format` tree.

    The settings beyond the paper's (defaults: river's semantics, except
    ``new_leaf_seen``):

    * ``multiway_only``: with ``binary_split`` False, a categorical feature
      offers only its one-branch-per-code split (default: that split and every
      code-vs-rest split, the best wins);
    * ``new_leaf_seen``: a new leaf's row count ``seen`` (the n of its bound)
      starts at 0 ("zero", the default: the bound rests on the rows the leaf
      has learnt, from which its merits are computed) or at the weight it
      inherits from its parent ("inherited", river and MOA: a leaf created
      late inherits an n that makes its bound fall below ``tau`` within a
      grace period or two, so it splits on the best of its noise columns);
    * ``merit_range``: R of the bound counts the classes present at the node
      ("node") or every class of the job ("job");
    * ``max_share_to_split``: a leaf where one class holds more than this
      share of the counts makes no split attempt (1: always attempt);
    * ``resplit_same_column``: re-evaluation may replace a split by a better
      test of the same column (fresh leaves), not only by another column.
    """

    def __init__(self, schema, n_classes, grace_period=200, delta=1e-7, tau=0.05,
                 min_samples_reevaluate=20, criterion="info_gain", leaf_prediction="nba",
                 binary_split=False, max_depth=None, multiway_only=False, new_leaf_seen="zero",
                 merit_range="node", max_share_to_split=0.99, resplit_same_column=False, capacity=64):
        self.schema, self.n_classes = schema, int(n_classes)
        if not 0.0 < float(max_share_to_split) <= 1.0:
            raise ValueError(f"max_share_to_split must be in (0, 1], got {max_share_to_split!r}")
        self.settings = dict(grace_period=grace_period, delta=delta, tau=tau,
                             min_samples_reevaluate=min_samples_reevaluate, criterion=criterion,
                             leaf_prediction=leaf_prediction, binary_split=binary_split, max_depth=max_depth,
                             multiway_only=multiway_only, new_leaf_seen=new_leaf_seen, merit_range=merit_range,
                             max_share_to_split=max_share_to_split, resplit_same_column=resplit_same_column)
        cat = CAT_EQ if binary_split else CAT_MULTI if multiway_only else CAT_BOTH
        self.params = np.array([grace_period, delta, tau, min_samples_reevaluate, CRITERIA[criterion],
                                LEAF_PREDICTIONS[leaf_prediction], cat, -1 if max_depth is None else max_depth,
                                NEW_LEAF_SEEN[new_leaf_seen], MERIT_RANGES[merit_range],
                                float(max_share_to_split), float(bool(resplit_same_column))], dtype=np.float64)
        self._leaf_pred = LEAF_PREDICTIONS[leaf_prediction]
        self.meta = np.array([1, 0, 0], dtype=np.int64)   # nodes, children, structure version
        self._alloc(max(capacity, 1), max(capacity, 2))
        self.a["feature"][0] = tree_format.LEAF
        self._clean = 0          # structure version of the last compaction

    def _alloc(self, nodes, pool):
        S, C = int(self.schema.offsets[-1]), self.n_classes
        a = {k: np.zeros(nodes, dtype=np.int32) for k in NODE_INT}
        a.update({k: np.zeros(nodes) for k in NODE_FLOAT})
        a["child"] = np.zeros(pool, dtype=np.int32)
        a["counts"], a["dcounts"] = np.zeros((nodes, C)), np.zeros((nodes, C))
        a["nijk"], a["dnijk"] = np.zeros((nodes, S, C)), np.zeros((nodes, S, C))
        self.a = a
        self._bind()

    def _bind(self):
        """The kernels' argument tuples over the current arrays (rebuilt when
        the arrays are reallocated, so that a call per row costs no lookups)."""
        a, s = self.a, self.schema
        self._learn_args = (a["feature"], a["kind"], a["value"], a["first"], a["n_children"], a["depth"],
                            a["child"], a["counts"], a["nijk"], a["dcounts"], a["dnijk"], a["seen"], a["clock"],
                            a["mc_ok"], a["nb_ok"], self.meta, s.offsets, s.numeric, s.real,
                            self.params)
        self._proba_args = (a["feature"], a["kind"], a["value"], a["first"], a["child"], s.real, a["counts"],
                            a["nijk"], a["mc_ok"], a["nb_ok"], s.offsets, self._leaf_pred)

    def _grow(self):
        old, n, p = self.a, int(self.meta[0]), int(self.meta[1])
        widest = int(max(2, self.schema.n_codes.max()))
        self._alloc(2 * old["feature"].shape[0] + 4 * widest, 2 * old["child"].shape[0] + 4 * widest)
        for k, v in old.items():
            m = p if k == "child" else n
            self.a[k][:m] = v[:m]

    @property
    def n_nodes(self):
        """Nodes of the tree (after dropping the subtrees re-evaluation replaced)."""
        self._compact()
        return int(self.meta[0])

    def _make_room(self):
        """Compact, and grow the arrays when the next split might not fit."""
        self._compact()
        room = 2 * int(max(2, self.schema.n_codes.max()))
        cap_n, cap_c = self.a["feature"].shape[0], self.a["child"].shape[0]
        if (self.meta[0] + room > cap_n or self.meta[1] + room > cap_c
                or self.meta[0] * 2 > cap_n or self.meta[1] * 2 > cap_c):
            self._grow()

    def learn(self, codes, y):
        """Learn the rows ``codes`` (int, ``(n, n_features)``) with classes ``y`` in order."""
        codes = np.ascontiguousarray(codes, dtype=np.int32)
        y = np.ascontiguousarray(y, dtype=np.int64)
        i = 0
        while i < codes.shape[0]:
            i = learn_kernel(codes, y, i, *self._learn_args)
            if i < codes.shape[0]:
                self._make_room()
        self._compact()
        return self

    def learn_one(self, row, y):
        """Learn one coded row (``n_features`` ints) of class ``y``: the same tree
        as learning it within a chunk, without the per-chunk bookkeeping (the
        node order is tidied when the state is next read)."""
        codes = np.asarray(row, dtype=np.int32).reshape(1, -1)
        yy = np.array([y], dtype=np.int64)
        while learn_kernel(codes, yy, 0, *self._learn_args) == 0:
            self._make_room()
        return self

    def predict_proba(self, codes):
        """Class probabilities of coded rows (``-1``: a category unseen in the
        job): the learner's own arrays walked as :func:`state_proba` walks the
        export, then the leaf prediction."""
        codes = np.ascontiguousarray(codes, dtype=np.int32)
        return proba_kernel(codes, *self._proba_args)

    def predict_one(self, row):
        """Class probabilities of one coded row (``n_features`` ints)."""
        return proba_kernel(np.asarray(row, dtype=np.int32).reshape(1, -1), *self._proba_args)[0]

    def reset_deltas(self):
        """Start gathering new statistics (after a broadcast)."""
        self.a["dcounts"][:] = 0.0
        self.a["dnijk"][:] = 0.0

    # --- compact state ---------------------------------------------------
    def _order(self):
        """Reachable nodes in breadth-first order."""
        a = self.a
        order, head = [0], 0
        while head < len(order):
            nd = order[head]
            head += 1
            f, c = int(a["first"][nd]), int(a["n_children"][nd])
            order.extend(int(x) for x in a["child"][f:f + c])
        return np.array(order, dtype=np.int64)

    def _compact(self):
        if self.meta[2] == self._clean:
            return
        self._clean = int(self.meta[2])
        order = self._order()
        a = self.a
        if order.size == self.meta[0] and np.array_equal(order, np.arange(order.size)):
            return
        st = state_of(a, order)
        n, p = st["feature"].shape[0], st["child"].shape[0]
        for k in NODE_INT + NODE_FLOAT + STAT_KEYS:
            a[k][:n] = st[k]
        a["child"][:p] = st["child"]
        self.meta[:2] = (n, p)

    def state(self, deltas=True):
        """The tree as compact arrays (breadth-first node order); without the
        delta arrays when ``deltas`` is False."""
        self._compact()
        st = state_of(self.a, np.arange(int(self.meta[0])))
        if not deltas:
            st.pop("dcounts")
            st.pop("dnijk")
        return st

    def load_state(self, st):
        """Continue from ``st`` (a :meth:`state`, e.g. an aggregated tree); the deltas start at zero."""
        n, p = len(st["feature"]), len(st["child"])
        cap = max(2 * n, 64)
        self._alloc(cap, max(2 * p, 2 * cap))
        for k in NODE_INT + NODE_FLOAT + ("counts", "nijk"):
            self.a[k][:n] = st[k]
        self.a["child"][:p] = st["child"]
        self.meta[0], self.meta[1] = n, p
        self.meta[2] += 1
        self._clean = int(self.meta[2])
        return self

    def export(self):
        return export(self.state(deltas=False), self.schema)


STATE_KEYS = NODE_INT + NODE_FLOAT + ("child", "counts", "nijk")
KINDS = (LEAF_KIND, MULTI, EQ, LE)


def check_state(st, schema, n_classes, what, binary_split=None, max_depth=None, multiway_only=None):
    """Validate a compact state (without deltas) from a message or a file; returns
    it as arrays in the dtypes :class:`EFDT` keeps (a new dict).  Raises
    :class:`fedforest.errors.InputError` ``(what, ...)`` unless the arrays are
    exactly those of :meth:`EFDT.state` with ``deltas=False``, of the shapes of
    ``n`` nodes over ``schema`` and ``n_classes`` classes, with finite
    non-negative statistics, and the nodes form a tree in breadth-first order:
    every node but the root is the child of exactly one split, after it and one
    level deeper; a split tests a feature of the schema the way learning does
    (numeric: ``LE`` on a real bin; categorical: ``EQ`` on a code when
    ``binary_split``, ``MULTI`` with one child per code when ``binary_split``
    is False and ``multiway_only``, else either) and has the children of its
    kind; a leaf has none.  ``max_depth``: no node deeper."""
    from ..errors import InputError

    if not isinstance(st, dict) or set(st) != set(STATE_KEYS):
        got = sorted(map(str, st)) if isinstance(st, dict) else type(st).__name__
        raise InputError(what, f"a tree state has the arrays {', '.join(STATE_KEYS)}, got {str(got)[:200]}")
    out = {}
    for k in STATE_KEYS:
        a = st[k]
        if not isinstance(a, np.ndarray) or a.dtype.kind not in "biuf":
            raise InputError(what, f"tree state array {k!r} is not an array of numbers")
        if k in NODE_INT or k == "child":
            if a.dtype.kind == "f" or (a.size and (a.min() < np.iinfo(np.int32).min
                                                   or a.max() > np.iinfo(np.int32).max)):
                raise InputError(what, f"tree state array {k!r} must hold 32-bit whole numbers")
            out[k] = np.ascontiguousarray(a, dtype=np.int32)
        else:
            out[k] = np.ascontiguousarray(a, dtype=np.float64)
            if out[k].size and (not np.isfinite(out[k]).all() or out[k].min() < 0):
                raise InputError(what, f"tree state array {k!r} must hold finite non-negative numbers")
    n = out["feature"].shape[0]
    S, C, F = int(schema.offsets[-1]), int(n_classes), int(schema.n_codes.shape[0])
    shapes = dict({k: (n,) for k in NODE_INT + NODE_FLOAT}, counts=(n, C), nijk=(n, S, C))
    if out["child"].ndim != 1:
        raise InputError(what, f"tree state array 'child' has shape {out['child'].shape}, expected one dimension")
    for k, shape in shapes.items():
        if out[k].shape != shape:
            raise InputError(what, f"tree state array {k!r} has shape {out[k].shape}, expected {shape}")
    if n == 0:
        raise InputError(what, "the tree state has no nodes")
    feature, kind, value = out["feature"].astype(np.int64), out["kind"], out["value"].astype(np.int64)
    first, nch, depth = out["first"].astype(np.int64), out["n_children"].astype(np.int64), out["depth"]
    node = np.arange(n)
    if not np.isin(kind, KINDS).all():
        raise InputError(what, "tree state array 'kind' holds unknown split kinds")
    leaf = kind == LEAF_KIND
    if np.any(leaf & ((nch != 0) | (feature != _LEAF))):
        raise InputError(what, "a leaf of the tree state has children or a split feature")
    split = ~leaf
    if np.any(split & ((feature < 0) | (feature >= F))):
        raise InputError(what, f"a split of the tree state tests no feature of the {F}")
    f = np.where(split, feature, 0)
    numeric, n_codes, real = schema.numeric[f], schema.n_codes[f], schema.real[f]
    cat_kind = EQ if binary_split else MULTI if (binary_split is False and multiway_only) else kind
    want = np.where(numeric, LE, cat_kind)
    if np.any(split & ((kind == LE) != numeric)) or np.any(split & (kind != want)):
        raise InputError(what, "a split of the tree state has a kind its feature does not take")
    if np.any(split & (nch != np.where(kind == MULTI, n_codes, 2))):
        raise InputError(what, "a split of the tree state has the wrong number of children")
    if np.any(split & (kind == EQ) & ((value < 0) | (value >= n_codes))) or np.any(
            split & (kind == LE) & ((value < 0) | (value >= real))):
        raise InputError(what, "a split of the tree state tests a code its feature does not have")
    p = out["child"].shape[0]
    if nch.sum() != n - 1 or p != n - 1 or np.any(split & ((first < 0) | (first + nch > p))):
        raise InputError(what, "the children of the tree state do not fit its child array")
    parent = np.repeat(node, nch)
    pos = np.repeat(first, nch) + np.arange(parent.size) - np.repeat(np.cumsum(nch) - nch, nch)
    kids = out["child"][pos].astype(np.int64)
    if np.any((kids <= parent) | (kids >= n)) or np.unique(kids).size != kids.size:
        raise InputError(what, "the nodes of the tree state are not a tree (each child after its only parent)")
    if depth[0] != 0 or np.any(depth[kids] != depth[parent] + 1):
        raise InputError(what, "tree state array 'depth' does not count the levels")
    if max_depth is not None and depth.max() > max_depth:
        raise InputError(what, f"the tree state is deeper than max_depth {max_depth}")
    return out


def state_of(a, order):
    """Compact arrays of the nodes ``order`` (parents before children) of the arrays ``a``."""
    order = np.asarray(order, dtype=np.int64)
    new = np.full(a["feature"].shape[0], -1, dtype=np.int64)
    new[order] = np.arange(order.size)
    st = {k: a[k][order].copy() for k in NODE_INT + NODE_FLOAT + STAT_KEYS if k in a}
    kids, first = [], np.full(order.size, -1, dtype=np.int32)
    for i, nd in enumerate(order):
        c = int(a["n_children"][nd])
        if c:
            f = int(a["first"][nd])
            first[i] = len(kids)
            kids.extend(int(new[x]) for x in a["child"][f:f + c])
    st["first"] = first
    st["child"] = np.array(kids, dtype=np.int32)
    return st


def export(st, schema):
    """A compact state as a :mod:`~fedforest.tree.format` tree over codes:
    ``MULTI`` and ``EQ`` nodes are multiway nodes (an ``EQ`` node maps its code
    to the first child and every other code of the feature to the second), ``LE``
    nodes binary nodes with ``threshold`` = the last bin sent left (missing
    values, the highest code, go right).  ``value`` holds the class fractions
    (uniform at a node without counts), ``support`` the class counts' sum."""
    n = len(st["feature"])
    counts = np.asarray(st["counts"], dtype=np.float64)
    tot = counts.sum(axis=1, keepdims=True)
    C = counts.shape[1]
    value = np.where(tot > 0, counts / np.where(tot > 0, tot, 1.0), 1.0 / C)
    left = np.full(n, tree_format.NO_CHILD, dtype=np.int32)
    right = left.copy()
    threshold = np.full(n, np.nan)
    cstart = np.zeros(n, dtype=np.int32)
    ccount = np.zeros(n, dtype=np.int32)
    cval, cnode = [], []
    kind, feature = st["kind"], st["feature"]
    for i in range(n):
        f, k = int(feature[i]), int(kind[i])
        if k == LEAF_KIND:
            continue
        kids = st["child"][st["first"][i]:st["first"][i] + st["n_children"][i]]
        if k == LE:
            left[i], right[i] = kids[0], kids[1]
            threshold[i] = float(st["value"][i])
            continue
        width = int(schema.n_codes[f])
        cstart[i] = len(cval)
        ccount[i] = width
        for code in range(width):
            cval.append(code)
            if k == MULTI:
                cnode.append(int(kids[code]))
            else:
                cnode.append(int(kids[0] if code == st["value"][i] else kids[1]))
    return tree_format.multiway(
        feature, cstart, ccount, np.array(cval, dtype=np.int32), np.array(cnode, dtype=np.int32), value,
        children_left=left, children_right=right, threshold=threshold, missing_left=np.zeros(n),
        support=tot[:, 0])


def state_proba(st, schema, codes, leaf_prediction):
    """Class probabilities of coded rows (``-1``: a category unseen in the job)
    in a compact state: the export walked by :func:`tree_format.apply`, then
    the leaf prediction."""
    codes = np.ascontiguousarray(codes, dtype=np.int32)
    node = tree_format.apply(export(st, schema), codes.astype(np.float64))
    return leaf_proba_kernel(codes, node, np.asarray(st["counts"], dtype=np.float64),
                             np.asarray(st["nijk"], dtype=np.float64), np.asarray(st["mc_ok"], dtype=np.float64),
                             np.asarray(st["nb_ok"], dtype=np.float64),
                             np.asarray(st["kind"]) == LEAF_KIND, schema.offsets,
                             LEAF_PREDICTIONS[leaf_prediction])


# ---------------------------------------------------------------------------
# Aggregation of compact states (pure functions)
# ---------------------------------------------------------------------------
def same_split(a, i, b, j):
    """Whether node ``i`` of ``a`` and node ``j`` of ``b`` split the same way (same
    kind, feature and value); leaves never match."""
    return (int(a["kind"][i]) != LEAF_KIND and int(a["kind"][i]) == int(b["kind"][j])
            and int(a["feature"][i]) == int(b["feature"][j]) and int(a["value"][i]) == int(b["value"][j]))


def matched_pairs(a, b):
    """The node pairs of ``a`` and ``b`` on matching paths from the roots: the
    roots, then the children (in order) of every matched pair that splits the
    same way."""
    out, stack = [], [(0, 0)]
    while stack:
        i, j = stack.pop()
        out.append((i, j))
        if same_split(a, i, b, j):
            ci, cj = int(a["first"][i]), int(b["first"][j])
            for c in range(int(a["n_children"][i]) - 1, -1, -1):
                stack.append((int(a["child"][ci + c]), int(b["child"][cj + c])))
    return out


def merge(base, others, merge_mode="delta"):
    """``base`` (a compact state, copied) with the statistics of each of
    ``others`` added along matching paths: their deltas (gathered since the
    last broadcast) with ``merge_mode`` "delta", their totals with "total"."""
    if merge_mode not in ("delta", "total"):
        raise ValueError(f"merge_mode must be 'delta' or 'total', got {merge_mode!r}")
    out = {k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for k, v in base.items()}
    counts_key, nijk_key = ("dcounts", "dnijk") if merge_mode == "delta" else ("counts", "nijk")
    for other in others:
        pairs = np.array(matched_pairs(out, other), dtype=np.int64)
        i, j = pairs[:, 0], pairs[:, 1]
        out["counts"][i] += np.asarray(other[counts_key])[j]
        out["nijk"][i] += np.asarray(other[nijk_key])[j]
        # rows behind the statistics: one count per row in dcounts; "seen" for totals
        out["seen"][i] += (np.asarray(other["dcounts"])[j].sum(axis=1) if merge_mode == "delta"
                           else np.asarray(other["seen"])[j])
    return out


# ---------------------------------------------------------------------------
# Tree edit distance between client trees (Zhang-Shasha, :mod:`.edit_distance`)
# ---------------------------------------------------------------------------
def node_labels(st):
    """One text label per node: "leaf", or the split (kind, feature, value)."""
    names = {MULTI: "in", EQ: "eq", LE: "le"}
    return ["leaf" if int(k) == LEAF_KIND else f"f{int(f)}{names[int(k)]}{int(v)}"
            for k, f, v in zip(st["kind"], st["feature"], st["value"])]


def bracket(st):
    """The tree in bracket notation, ``{label{child}...}``."""
    labels = node_labels(st)

    def rec(i):
        f, c = int(st["first"][i]), int(st["n_children"][i])
        return "{" + labels[i] + "".join(rec(int(x)) for x in st["child"][f:f + c]) + "}"
    return rec(0)


def postorder(st, label_ids):
    """Postorder arrays of a compact state for :func:`~fedforest.tree.edit_distance.zhang_shasha`."""
    def children(i):
        f, c = int(st["first"][i]), int(st["n_children"][i])
        return st["child"][f:f + c]
    return postorder_arrays(node_labels(st), children, label_ids)


def tree_edit_distances(states):
    """The symmetric matrix of tree edit distances between compact states."""
    ids = {}
    post = [postorder(s, ids) for s in states]
    k = len(states)
    d = np.zeros((k, k))
    for i in range(k):
        for j in range(i + 1, k):
            d[i, j] = d[j, i] = zhang_shasha(*post[i], *post[j])
    return d
