"""Node statistics and the gain of a candidate split, the numba building
blocks of the split search (:mod:`.splitter`).

Conventions shared by the growth kernels (:mod:`.criterion`, :mod:`.splitter`,
:mod:`.partitioner`; loops over trees and levels stay in Python, every kernel
is a module-level ``njit(cache=True)`` function over flat arrays):

* ``rows``: int32 row indices grouped by node; node ``j`` of a level owns
  ``rows[starts[j]:ends[j]]`` in ascending row order.
* Label statistics: classification uses ``ycls`` (class code per row) and
  ``yw[:, 0]`` (row weight); regression uses ``yw`` with three columns
  ``(w, w*y, w*y*y)``.  ``S`` is the number of statistics per row
  (``n_classes`` or 3).
* ``crit``: 0 = gini, 1 = entropy, 2 = squared error, 3 = Newton (gradient
  boosting: ``yw`` holds ``(h, g, 0)`` per row, the weight is the hessian
  sum; :func:`fedforest.tree.impurity.impurity`); ``lam``: the L2 penalty
  on leaf values (Newton only, 0 otherwise).
* Gains are the weighted impurity decrease of scikit-learn,
  ``w_node / w_total * (imp - w_l / w_node * imp_l - w_r / w_node * imp_r)``.
"""
import numpy as np
from numba import njit, prange

from .threads import prange_only

from .impurity import GINI, NEWTON, impurity


@njit(cache=True)
def weight_of(stats, is_clf):
    if is_clf:
        s = 0.0
        for k in range(stats.shape[0]):
            s += stats[k]
        return s
    return stats[0]


@njit(cache=True)
def add_row(acc, r, ycls, yw, is_clf, sign):
    if is_clf:
        acc[ycls[r]] += sign * yw[r, 0]
    else:
        for k in range(acc.shape[0]):
            acc[k] += sign * yw[r, k]


@njit(cache=True)
def accumulate(acc, rows, s, e, ycls, yw, is_clf):
    """Add the statistics of ``rows[s:e]`` to ``acc`` (in row order)."""
    if is_clf:
        for i in range(s, e):
            r = rows[i]
            acc[ycls[r]] += yw[r, 0]
    else:
        for i in range(s, e):
            r = rows[i]
            acc[0] += yw[r, 0]
            acc[1] += yw[r, 1]
            acc[2] += yw[r, 2]


@njit(cache=True, parallel=prange_only(), nogil=True)
def node_statistics(rows, starts, ends, ycls, yw, is_clf, S, crit, lam):
    """Per-node label statistics, weight, impurity and distinct-row count."""
    n_nodes = starts.shape[0]
    stats = np.zeros((n_nodes, S))
    w = np.zeros(n_nodes)
    imp = np.zeros(n_nodes)
    count = np.zeros(n_nodes, dtype=np.int64)
    for j in prange(n_nodes):
        acc = np.zeros(S)
        accumulate(acc, rows, starts[j], ends[j], ycls, yw, is_clf)
        for k in range(S):      # element loops: a slice assignment compiles a shape check
            stats[j, k] = acc[k]
        w[j] = weight_of(acc, is_clf)
        imp[j] = impurity(acc, w[j], crit, lam)
        count[j] = ends[j] - starts[j]
    return stats, w, imp, count


@njit(cache=True)
def stats_weight_impurity(stats, is_clf, crit, lam):
    """Weight and impurity of nodes given their statistics (rows of ``stats``)."""
    n = stats.shape[0]
    w = np.zeros(n)
    imp = np.zeros(n)
    for j in range(n):
        w[j] = weight_of(stats[j], is_clf)
        imp[j] = impurity(stats[j], w[j], crit, lam)
    return w, imp


@njit(cache=True)
def split_gain(left, right, cnt_left, cnt_right, w_node, imp_node, w_total, is_clf, crit, lam,
          min_samples_leaf, min_weight_leaf):
    """Weighted impurity decrease of a candidate, or -inf if it is not allowed."""
    if cnt_left < min_samples_leaf or cnt_right < min_samples_leaf:
        return -np.inf
    wl = weight_of(left, is_clf)
    wr = weight_of(right, is_clf)
    if wl <= 0.0 or wr <= 0.0 or wl < min_weight_leaf or wr < min_weight_leaf:
        return -np.inf
    il = impurity(left, wl, crit, lam)
    ir = impurity(right, wr, crit, lam)
    return (w_node / w_total) * (imp_node - (wl / w_node) * il - (wr / w_node) * ir)


@njit(cache=True)
def _side(v, S, is_clf, crit, lam):
    """Weight of one side of a candidate and its share of :func:`proxy_score`."""
    if is_clf:
        w = 0.0
        for k in range(S):
            w += v[k]
        if w <= 0.0:
            return w, 0.0
        if crit == GINI:
            s = 0.0
            for k in range(S):
                s += v[k] * v[k]
            return w, s / w
        s = -w * np.log2(w)
        for k in range(S):
            if v[k] > 0.0:
                s += v[k] * np.log2(v[k])
        return w, s
    w = v[0]
    if w <= 0.0:
        return w, 0.0
    if crit == NEWTON:
        return w, v[1] * v[1] / (w + lam)
    return w, v[1] * v[1] / w


@njit(cache=True)
def proxy_score(left, right, cnt_left, cnt_right, S, is_clf, crit, lam, min_samples_leaf,
           min_weight_leaf):
    """A cheap score ordered as :func:`split_gain` among the candidates of one node
    (``gain * w_total = constant + proxy`` in exact arithmetic), or -inf if
    the candidate is not allowed: ``sum l_k^2 / w_l + sum r_k^2 / w_r`` for
    Gini, ``-(w_l H_l + w_r H_r)`` (bits) for entropy,
    ``l_1^2 / w_l + r_1^2 / w_r`` for squared error and
    ``l_1^2 / (w_l + lam) + r_1^2 / (w_r + lam)`` for Newton."""
    if cnt_left < min_samples_leaf or cnt_right < min_samples_leaf:
        return -np.inf
    wl, pl = _side(left, S, is_clf, crit, lam)
    wr, pr = _side(right, S, is_clf, crit, lam)
    if wl <= 0.0 or wr <= 0.0 or wl < min_weight_leaf or wr < min_weight_leaf:
        return -np.inf
    return pl + pr


@njit(cache=True, parallel=prange_only(), nogil=True)
def node_weights(rows, starts, ends, ycls, yw, is_clf, S, crit, lam):
    """Weight and impurity of every node segment (one node per thread)."""
    n_nodes = starts.shape[0]
    w = np.zeros(n_nodes)
    imp = np.zeros(n_nodes)
    for j in prange(n_nodes):
        acc = np.zeros(S)
        accumulate(acc, rows, starts[j], ends[j], ycls, yw, is_clf)
        w[j] = weight_of(acc, is_clf)
        imp[j] = impurity(acc, w[j], crit, lam)
    return w, imp
