"""Numba kernels over flat arrays for level-wise tree growth and the one-round
federated prediction (complete trees are walked by :func:`fedforest.tree.format.apply`).

All functions are module-level ``njit(cache=True)``; loops over trees and levels
stay in Python.  Conventions shared by every kernel:

* ``rows``: int32 row indices grouped by node; node ``j`` of a level owns
  ``rows[starts[j]:ends[j]]`` in ascending row order.
* Label statistics: classification uses ``ycls`` (class code per row) and
  ``yw[:, 0]`` (row weight); regression uses ``yw`` with three columns
  ``(w, w*y, w*y*y)``.  ``S`` is the number of statistics per row
  (``n_classes`` or 3).
* ``crit``: 0 = gini, 1 = entropy, 2 = squared error (:func:`fedforest.tree.impurity.impurity`).
* Gains are the weighted impurity decrease of scikit-learn,
  ``w_node / w_total * (imp - w_l / w_node * imp_l - w_r / w_node * imp_r)``.
  When a node saw no missing values, missing values later follow the larger
  child (right on a tie), as in scikit-learn.
  Candidates are scanned in increasing feature then threshold order and only a
  strictly larger gain replaces the best one, so ties resolve to the lowest
  feature index and the lowest threshold.

The parallel kernels (``parallel=True``) split their work over (node, feature)
pairs or node segments and release the GIL, so a caller may also run several
of them at once, one per tree, on single-threaded kernels (tree blocks); no
result depends on the number of threads.

The histogram and exact split kernels evaluate candidates with the same rules
written out in each scan loop: a shared helper measured about 40% slower
training (numba does not keep it as tight), so the repetition is deliberate;
tests check both kernels against one brute-force reference.
"""

import numba
import numpy as np
from numba import njit, prange

from .impurity import ENTROPY, GINI, SQUARED_ERROR, impurity  # noqa: F401  (part of this module's names)

MISSING_BIN = 255          # histogram code of a missing (NaN) value
MAX_BINS = 255             # non-missing bins available per feature
FEATURE_THRESHOLD = 1e-7   # two values closer than this are not split apart (exact mode)



def set_threads(n):
    """Use ``n`` threads (at most numba's pool) in this thread's parallel kernels; returns it."""
    n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    return n


@njit(cache=True, parallel=True)
def _touch(n):
    out = np.zeros(n)
    for i in prange(n):
        out[i] = i
    return out


def concurrent_launches_ok():
    """Whether parallel kernels may run from several Python threads at once:
    numba's omp and tbb threading layers allow it, its workqueue fallback (no
    OpenMP runtime, no TBB) aborts the process.  Tree blocks on threads are
    used only when this holds."""
    try:
        layer = numba.threading_layer()
    except ValueError:      # no parallel kernel has run in this process yet
        _touch(2)
        layer = numba.threading_layer()
    return layer != "workqueue"


def threads():
    """The number of threads this thread's parallel kernels use."""
    return numba.get_num_threads()


@njit(cache=True)
def _weight(stats, is_clf):
    if is_clf:
        s = 0.0
        for k in range(stats.shape[0]):
            s += stats[k]
        return s
    return stats[0]


@njit(cache=True)
def _add_row(acc, r, ycls, yw, is_clf, sign):
    if is_clf:
        acc[ycls[r]] += sign * yw[r, 0]
    else:
        for k in range(acc.shape[0]):
            acc[k] += sign * yw[r, k]


@njit(cache=True)
def _accumulate(acc, rows, s, e, ycls, yw, is_clf):
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


@njit(cache=True, parallel=True, nogil=True)
def node_statistics(rows, starts, ends, ycls, yw, is_clf, S, crit):
    """Per-node label statistics, weight, impurity and distinct-row count."""
    n_nodes = starts.shape[0]
    stats = np.zeros((n_nodes, S))
    w = np.zeros(n_nodes)
    imp = np.zeros(n_nodes)
    count = np.zeros(n_nodes, dtype=np.int64)
    for j in prange(n_nodes):
        acc = np.zeros(S)
        _accumulate(acc, rows, starts[j], ends[j], ycls, yw, is_clf)
        for k in range(S):      # element loops: a slice assignment compiles a shape check
            stats[j, k] = acc[k]
        w[j] = _weight(acc, is_clf)
        imp[j] = impurity(acc, w[j], crit)
        count[j] = ends[j] - starts[j]
    return stats, w, imp, count


@njit(cache=True)
def stats_weight_impurity(stats, is_clf, crit):
    """Weight and impurity of nodes given their statistics (rows of ``stats``)."""
    n = stats.shape[0]
    w = np.zeros(n)
    imp = np.zeros(n)
    for j in range(n):
        w[j] = _weight(stats[j], is_clf)
        imp[j] = impurity(stats[j], w[j], crit)
    return w, imp


@njit(cache=True)
def _gain(left, right, cnt_left, cnt_right, w_node, imp_node, w_total, is_clf, crit,
          min_samples_leaf, min_weight_leaf):
    """Weighted impurity decrease of a candidate, or -inf if it is not allowed."""
    if cnt_left < min_samples_leaf or cnt_right < min_samples_leaf:
        return -np.inf
    wl = _weight(left, is_clf)
    wr = _weight(right, is_clf)
    if wl <= 0.0 or wr <= 0.0 or wl < min_weight_leaf or wr < min_weight_leaf:
        return -np.inf
    il = impurity(left, wl, crit)
    ir = impurity(right, wr, crit)
    return (w_node / w_total) * (imp_node - (wl / w_node) * il - (wr / w_node) * ir)


@njit(cache=True)
def _side(v, S, is_clf, crit):
    """Weight of one side of a candidate and its share of :func:`_proxy`."""
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
    return w, v[1] * v[1] / w


@njit(cache=True)
def _proxy(left, right, cnt_left, cnt_right, S, is_clf, crit, min_samples_leaf,
           min_weight_leaf):
    """A cheap score ordered as :func:`_gain` among the candidates of one node
    (``gain * w_total = constant + proxy`` in exact arithmetic), or -inf if
    the candidate is not allowed: ``sum l_k^2 / w_l + sum r_k^2 / w_r`` for
    Gini, ``-(w_l H_l + w_r H_r)`` (bits) for entropy and
    ``l_1^2 / w_l + r_1^2 / w_r`` for squared error."""
    if cnt_left < min_samples_leaf or cnt_right < min_samples_leaf:
        return -np.inf
    wl, pl = _side(left, S, is_clf, crit)
    wr, pr = _side(right, S, is_clf, crit)
    if wl <= 0.0 or wr <= 0.0 or wl < min_weight_leaf or wr < min_weight_leaf:
        return -np.inf
    return pl + pr


@njit(cache=True)
def _scan_hist(hist, cnt, nb, n_node, w_node, imp_node, w_total, is_clf, S, crit,
               min_samples_leaf, min_weight_leaf, tot, left, right, lm, rm):
    """Best candidate of one feature's histogram (``hist[b]`` statistics and
    ``cnt[b]`` rows of bin ``b``, the missing bin at ``MISSING_BIN``) in a node
    of ``n_node`` rows.  Returns ``gain, bin, missing_left`` (gain -inf if none).
    ``tot``, ``left``, ``right``, ``lm``, ``rm`` are scratch vectors of length S.

    Candidates, in scan order: each non-empty bin ``b`` as the last bin on the
    left, with missing values (if any) first on the right, then on the left.
    A first pass scores every candidate with the cheap :func:`_proxy`; the
    second computes the exact :func:`_gain` only of the candidates whose
    proxy is within rounding distance of the largest, in scan order, a
    strictly larger gain winning.  Every other candidate's gain is below the
    best by far more than rounding, so the result is the one exact gains
    everywhere give, at a fraction of the divisions."""
    n_miss = cnt[MISSING_BIN]
    tot[:] = 0.0
    for b in range(nb):
        if cnt[b] > 0:
            for k in range(S):
                tot[k] += hist[b, k]
    n_nonmiss = n_node - n_miss
    prox = np.full(2 * nb, -np.inf)
    top = -np.inf
    left[:] = 0.0
    cl = 0
    for b in range(nb):
        if cnt[b] == 0:
            continue
        for k in range(S):
            left[k] += hist[b, k]
            right[k] = tot[k] - left[k]
        cl += cnt[b]
        cr = n_nonmiss - cl
        if n_miss == 0:
            if cr == 0:
                break
            p = _proxy(left, right, cl, cr, S, is_clf, crit, min_samples_leaf, min_weight_leaf)
            prox[2 * b] = p
            top = max(top, p)
        else:
            for k in range(S):
                rm[k] = right[k] + hist[MISSING_BIN, k]
            p = _proxy(left, rm, cl, cr + n_miss, S, is_clf, crit, min_samples_leaf,
                       min_weight_leaf)
            prox[2 * b] = p
            top = max(top, p)
            if cr == 0:
                break
            for k in range(S):
                lm[k] = left[k] + hist[MISSING_BIN, k]
            p = _proxy(lm, right, cl + n_miss, cr, S, is_clf, crit, min_samples_leaf,
                       min_weight_leaf)
            prox[2 * b + 1] = p
            top = max(top, p)
    if top == -np.inf:
        return -np.inf, 0, 0
    # proxies and gains carry rounding errors far below 1e-9 of these magnitudes
    scale = abs(top) + w_node
    if not is_clf:
        scale += abs(tot[2]) + abs(hist[MISSING_BIN, 2])
    floor = top - 1e-9 * scale
    best = -np.inf
    best_b = 0
    best_ml = 0
    left[:] = 0.0
    cl = 0
    for b in range(nb):
        if cnt[b] == 0:
            continue
        for k in range(S):
            left[k] += hist[b, k]
        cl += cnt[b]
        if prox[2 * b] < floor and prox[2 * b + 1] < floor:
            continue
        cr = n_nonmiss - cl
        for k in range(S):
            right[k] = tot[k] - left[k]
        if n_miss == 0:
            g = _gain(left, right, cl, cr, w_node, imp_node, w_total, is_clf, crit,
                      min_samples_leaf, min_weight_leaf)
            if g > best:
                best = g
                best_b = b
                best_ml = 1 if cl > cr else 0
            continue
        if prox[2 * b] >= floor:
            # missing values go right
            for k in range(S):
                rm[k] = right[k] + hist[MISSING_BIN, k]
            g = _gain(left, rm, cl, cr + n_miss, w_node, imp_node, w_total, is_clf,
                      crit, min_samples_leaf, min_weight_leaf)
            if g > best:
                best = g
                best_b = b if cr > 0 else nb - 1
                best_ml = 0
        if prox[2 * b + 1] >= floor:
            # missing values go left
            for k in range(S):
                lm[k] = left[k] + hist[MISSING_BIN, k]
            g = _gain(lm, right, cl + n_miss, cr, w_node, imp_node, w_total, is_clf,
                      crit, min_samples_leaf, min_weight_leaf)
            if g > best:
                best = g
                best_b = b
                best_ml = 1
    return best, best_b, best_ml


@njit(cache=True)
def _scan_hist_fast(hist, cnt, nb, n_node, w_node, imp_node, w_total, is_clf, S, crit,
                    min_samples_leaf, min_weight_leaf, tot, left, right, lm, rm):
    """:func:`_scan_hist` with the common (task, statistics, criterion)
    combinations passed as constants, so the compiler specialises the scan
    for them (about three times faster than the generic loop); same results."""
    if is_clf and S == 2 and crit == GINI:
        return _scan_hist(hist, cnt, nb, n_node, w_node, imp_node, w_total, True, 2, GINI,
                          min_samples_leaf, min_weight_leaf, tot, left, right, lm, rm)
    if is_clf and S == 2 and crit == ENTROPY:
        return _scan_hist(hist, cnt, nb, n_node, w_node, imp_node, w_total, True, 2, ENTROPY,
                          min_samples_leaf, min_weight_leaf, tot, left, right, lm, rm)
    if not is_clf and S == 3:
        return _scan_hist(hist, cnt, nb, n_node, w_node, imp_node, w_total, False, 3, SQUARED_ERROR,
                          min_samples_leaf, min_weight_leaf, tot, left, right, lm, rm)
    return _scan_hist(hist, cnt, nb, n_node, w_node, imp_node, w_total, is_clf, S, crit,
                      min_samples_leaf, min_weight_leaf, tot, left, right, lm, rm)


@njit(cache=True, parallel=True, nogil=True)
def _node_weights(rows, starts, ends, ycls, yw, is_clf, S, crit):
    """Weight and impurity of every node segment (one node per thread)."""
    n_nodes = starts.shape[0]
    w = np.zeros(n_nodes)
    imp = np.zeros(n_nodes)
    for j in prange(n_nodes):
        acc = np.zeros(S)
        _accumulate(acc, rows, starts[j], ends[j], ycls, yw, is_clf)
        w[j] = _weight(acc, is_clf)
        imp[j] = impurity(acc, w[j], crit)
    return w, imp


@njit(cache=True)
def _open_pairs(starts, ends, fmask, min_samples_leaf):
    """The (node, feature) pairs a split search scans, node by node then by feature."""
    n_nodes, n_feat = fmask.shape
    pair_node = np.empty(n_nodes * n_feat, dtype=np.int64)
    pair_feat = np.empty(n_nodes * n_feat, dtype=np.int64)
    n = 0
    for j in range(n_nodes):
        m = ends[j] - starts[j]
        if m < 2 * min_samples_leaf or m < 2:
            continue
        for f in range(n_feat):
            if fmask[j, f] != 0:
                pair_node[n] = j
                pair_feat[n] = f
                n += 1
    return pair_node[:n], pair_feat[:n]


@njit(cache=True)
def _best_per_node(n_nodes, pair_node, pair_feat, gain, where, ml):
    """Reduce per-pair results to per-node winners in pair order (strictly larger
    gain wins), exactly as one sequential scan over features would."""
    best_gain = np.full(n_nodes, -np.inf)
    best_feat = np.full(n_nodes, -1, dtype=np.int32)
    best_where = np.zeros(n_nodes, dtype=where.dtype)
    best_ml = np.zeros(n_nodes, dtype=np.uint8)
    for i in range(pair_node.shape[0]):
        j = pair_node[i]
        if gain[i] > best_gain[j]:
            best_gain[j] = gain[i]
            best_feat[j] = pair_feat[i]
            best_where[j] = where[i]
            best_ml[j] = ml[i]
    return best_gain, best_feat, best_where, best_ml


@njit(cache=True, nogil=True, inline="always")
def _add_hist(hist, cnt, col, rows, s, e, ycls, yw, is_clf):
    """Add rows ``rows[s:e]`` to one feature's histogram (in row order)."""
    if is_clf:
        for k in range(s, e):
            r = rows[k]
            b = col[r]
            cnt[b] += 1
            hist[b, ycls[r]] += yw[r, 0]
    else:
        for k in range(s, e):
            r = rows[k]
            b = col[r]
            cnt[b] += 1
            hist[b, 0] += yw[r, 0]
            hist[b, 1] += yw[r, 1]
            hist[b, 2] += yw[r, 2]


@njit(cache=True, parallel=True, nogil=True)
def best_splits_hist(Xb, n_bins, rows, starts, ends, fmask, ycls, yw, is_clf, S, crit,
                     w_total, min_samples_leaf, min_weight_leaf, sib_starts, sib_ends,
                     parent_slot, cache_index, cache_hist, cache_cnt, keep):
    """Best histogram split of every open node over the allowed local features.

    ``Xb`` is the (n_rows, n_features) uint8 bin code matrix (``MISSING_BIN`` for
    NaN), ``n_bins[f]`` the number of non-missing bins of feature ``f`` and
    ``fmask[j, f]`` whether node ``j`` may split on feature ``f``.

    Histogram subtraction: where ``parent_slot[j] >= 0`` and
    ``cache_index[parent_slot[j], f] >= 0``, the histogram of (node ``j``,
    feature ``f``) is its parent's (``cache_hist``/``cache_cnt`` at that row)
    minus the one of the sibling rows ``rows[sib_starts[j]:sib_ends[j]]``,
    built instead of its own (the caller points only larger children at a
    smaller sibling).  Every other histogram is built from the node's rows.

    Returns ``gain, feature, bin, missing_left`` per node (``feature`` -1 and
    ``gain`` -inf where no allowed split exists; ``bin == n_bins[f] - 1``
    with missing values present means "non-missing left, missing right"),
    then the histograms of the nodes with ``keep[j]``, for the next level's
    subtraction: ``index`` (n_nodes, n_features; row in ``hist``/``cnt`` or -1),
    ``hist``, ``cnt``.

    The (node, feature) pairs are scanned in parallel and reduced in feature
    order, so the result does not depend on the number of threads.
    """
    n_nodes = starts.shape[0]
    n_feat = fmask.shape[1]
    w_node, imp_node = _node_weights(rows, starts, ends, ycls, yw, is_clf, S, crit)
    pair_node, pair_feat = _open_pairs(starts, ends, fmask, min_samples_leaf)
    n_pairs = pair_node.shape[0]
    gain = np.full(n_pairs, -np.inf)
    where = np.zeros(n_pairs, dtype=np.int32)
    mls = np.zeros(n_pairs, dtype=np.uint8)
    index = np.full((n_nodes, n_feat), -1, dtype=np.int64)
    n_kept = 0
    for i in range(n_pairs):
        if keep[pair_node[i]]:
            index[pair_node[i], pair_feat[i]] = n_kept
            n_kept += 1
    kept_hist = np.zeros((n_kept, MISSING_BIN + 1, S))
    kept_cnt = np.zeros((n_kept, MISSING_BIN + 1), dtype=np.int32)
    for i in prange(n_pairs):
        j = pair_node[i]
        f = pair_feat[i]
        hist = np.zeros((MISSING_BIN + 1, S))
        cnt = np.zeros(MISSING_BIN + 1, dtype=np.int64)
        tot = np.empty(S)
        left = np.empty(S)
        right = np.empty(S)
        lm = np.empty(S)
        rm = np.empty(S)
        col = Xb[:, f]
        src = -1
        if parent_slot[j] >= 0:
            src = cache_index[parent_slot[j], f]
        if src >= 0:
            _add_hist(hist, cnt, col, rows, sib_starts[j], sib_ends[j], ycls, yw, is_clf)
            for b in range(MISSING_BIN + 1):
                cnt[b] = cache_cnt[src, b] - cnt[b]
                for k in range(S):
                    hist[b, k] = cache_hist[src, b, k] - hist[b, k]
        else:
            _add_hist(hist, cnt, col, rows, starts[j], ends[j], ycls, yw, is_clf)
        slot = index[j, f]
        if slot >= 0:
            for b in range(MISSING_BIN + 1):
                kept_cnt[slot, b] = cnt[b]
                for k in range(S):
                    kept_hist[slot, b, k] = hist[b, k]
        g, b, ml = _scan_hist_fast(hist, cnt, n_bins[f], ends[j] - starts[j], w_node[j], imp_node[j],
                                   w_total, is_clf, S, crit, min_samples_leaf, min_weight_leaf,
                                   tot, left, right, lm, rm)
        gain[i] = g
        where[i] = b
        mls[i] = ml
    best_gain, best_feat, best_where, best_ml = _best_per_node(n_nodes, pair_node, pair_feat,
                                                                gain, where, mls)
    return best_gain, best_feat, best_where, best_ml, index, kept_hist, kept_cnt


def no_subtraction(n_nodes, S):
    """The subtraction arguments of :func:`best_splits_hist` that build every
    histogram from the node's own rows and keep none."""
    none = np.full(n_nodes, -1, dtype=np.int64)
    return (none, none, none, np.full((0, 1), -1, dtype=np.int64),
            np.zeros((0, MISSING_BIN + 1, S)), np.zeros((0, MISSING_BIN + 1), dtype=np.int32),
            np.zeros(n_nodes, dtype=np.uint8))


@njit(cache=True)
def best_splits_from_hists(hists, cnts, pair_node, pair_feat, pair_nb, node_stats, node_count,
                           is_clf, S, crit, w_total, min_samples_leaf, min_weight_leaf):
    """Best split per node from ready-made histograms (the key holder's side of
    the encrypted-label mode), with the same candidate rules and arithmetic as
    :func:`best_splits_hist`.

    Pair ``i`` is the histogram ``hists[i]`` (``MISSING_BIN + 1`` bins by S
    statistics) with row counts ``cnts[i]`` of feature ``pair_feat[i]`` (with
    ``pair_nb[i]`` non-missing bins) in node ``pair_node[i]``; pairs are sorted
    by node, then feature.  ``node_stats``/``node_count`` are the nodes'
    statistics and in-bag row counts.  Returns ``gain, feature, bin, missing_left``.
    """
    n_nodes = node_stats.shape[0]
    best_gain = np.full(n_nodes, -np.inf)
    best_feat = np.full(n_nodes, -1, dtype=np.int32)
    best_bin = np.zeros(n_nodes, dtype=np.int32)
    best_ml = np.zeros(n_nodes, dtype=np.uint8)
    tot = np.zeros(S)
    left = np.zeros(S)
    right = np.zeros(S)
    lm = np.zeros(S)
    rm = np.zeros(S)
    for i in range(pair_node.shape[0]):
        j = pair_node[i]
        n_node = node_count[j]
        if n_node < 2 * min_samples_leaf or n_node < 2:
            continue
        w_node = _weight(node_stats[j], is_clf)
        imp_node = impurity(node_stats[j], w_node, crit)
        g, b, ml = _scan_hist_fast(hists[i], cnts[i], pair_nb[i], n_node, w_node, imp_node, w_total,
                              is_clf, S, crit, min_samples_leaf, min_weight_leaf, tot, left, right,
                              lm, rm)
        if g > best_gain[j]:
            best_gain[j] = g
            best_feat[j] = pair_feat[i]
            best_bin[j] = b
            best_ml[j] = ml
    return best_gain, best_feat, best_bin, best_ml


@njit(cache=True, parallel=True, nogil=True)
def best_splits_exact(X, rows, starts, ends, fmask, ycls, yw, is_clf, S, crit,
                      w_total, min_samples_leaf, min_weight_leaf):
    """Best exact split of every open node, thresholds as scikit-learn computes them.

    ``X`` holds float32 feature values (NaN = missing).  A threshold is the
    midpoint of two consecutive distinct values (falling back to the lower value
    when the midpoint rounds up to the upper one); ``+inf`` separates all
    non-missing values (left) from missing ones (right).
    Returns ``gain, feature, threshold, missing_left`` per node.  Like
    :func:`best_splits_hist`, (node, feature) pairs run in parallel and are
    reduced in feature order.
    """
    n_nodes = starts.shape[0]
    w_nodes, imp_nodes = _node_weights(rows, starts, ends, ycls, yw, is_clf, S, crit)
    pair_node, pair_feat = _open_pairs(starts, ends, fmask, min_samples_leaf)
    n_pairs = pair_node.shape[0]
    gains = np.full(n_pairs, -np.inf)
    thrs = np.zeros(n_pairs)
    mls = np.zeros(n_pairs, dtype=np.uint8)
    for i in prange(n_pairs):
        j = pair_node[i]
        f = pair_feat[i]
        s = starts[j]
        e = ends[j]
        n = e - s
        w_node = w_nodes[j]
        imp_node = imp_nodes[j]
        miss = np.zeros(S)
        tot = np.zeros(S)
        left = np.zeros(S)
        right = np.zeros(S)
        lm = np.zeros(S)
        rm = np.zeros(S)
        vals = np.empty(n, dtype=np.float64)
        nm_rows = np.empty(n, dtype=np.int32)
        best = -np.inf
        best_thr = 0.0
        best_ml = 0
        n_nonmiss = 0
        for k in range(s, e):
            r = rows[k]
            v = X[r, f]
            if np.isnan(v):
                _add_row(miss, r, ycls, yw, is_clf, 1.0)
            else:
                nm_rows[n_nonmiss] = r
                vals[n_nonmiss] = v
                n_nonmiss += 1
                _add_row(tot, r, ycls, yw, is_clf, 1.0)
        n_miss = n - n_nonmiss
        order = np.argsort(vals[:n_nonmiss], kind="mergesort")
        for p in range(n_nonmiss):
            r = nm_rows[order[p]]
            _add_row(left, r, ycls, yw, is_clf, 1.0)
            cl = p + 1
            cr = n_nonmiss - cl
            last = cr == 0
            if not last:
                v0 = vals[order[p]]
                v1 = vals[order[p + 1]]
                if v1 <= v0 + FEATURE_THRESHOLD:
                    continue
                thr = v0 / 2.0 + v1 / 2.0
                if thr == v1 or thr == np.inf or thr == -np.inf:
                    thr = v0
            else:
                if n_miss == 0:
                    break
                thr = np.inf
            for k in range(S):
                right[k] = tot[k] - left[k]
            if n_miss == 0:
                g = _gain(left, right, cl, cr, w_node, imp_node, w_total, is_clf, crit,
                          min_samples_leaf, min_weight_leaf)
                if g > best:
                    best = g
                    best_thr = thr
                    best_ml = 1 if cl > cr else 0
                continue
            for k in range(S):
                rm[k] = right[k] + miss[k]
            g = _gain(left, rm, cl, cr + n_miss, w_node, imp_node, w_total, is_clf, crit,
                      min_samples_leaf, min_weight_leaf)
            if g > best:
                best = g
                best_thr = thr
                best_ml = 0
            if last:
                break
            for k in range(S):
                lm[k] = left[k] + miss[k]
            g = _gain(lm, right, cl + n_miss, cr, w_node, imp_node, w_total, is_clf, crit,
                      min_samples_leaf, min_weight_leaf)
            if g > best:
                best = g
                best_thr = thr
                best_ml = 1
        gains[i] = best
        thrs[i] = best_thr
        mls[i] = best_ml
    return _best_per_node(n_nodes, pair_node, pair_feat, gains, thrs, mls)


@njit(cache=True)
def goes_left(x, rows, start, end, thr, missing_left):
    """1 for each row of a node segment that goes to the left child, else 0."""
    out = np.empty(end - start, dtype=np.uint8)
    for i in range(start, end):
        v = x[rows[i]]
        if np.isnan(v):
            out[i - start] = missing_left
        else:
            out[i - start] = 1 if v <= thr else 0
    return out


@njit(cache=True)
def _segment_offsets(starts, ends):
    off = np.empty(starts.shape[0] + 1, dtype=np.int64)
    off[0] = 0
    for j in range(starts.shape[0]):
        off[j + 1] = off[j] + ends[j] - starts[j]
    return off


@njit(cache=True, parallel=True, nogil=True)
def partition_bits(X, rows, starts, ends, features, thresholds, missing_left, missing_code):
    """Left (1) / right (0) bit of every row of several node segments, each
    split on its own column, concatenated in segment order.  A value is
    missing when it is NaN or equals ``missing_code``: on bin codes (``X``
    uint8, ``thresholds`` the split bins, ``missing_code = MISSING_BIN``) a row
    goes left when its bin is at most the split's bin, the same rows as
    ``x <= threshold`` of that bin's upper edge; on raw values pass NaN.  (No
    default: numba would key its cache on the omitted NaN, which never equals
    itself, so every process would compile the kernel again.)"""
    off = _segment_offsets(starts, ends)
    out = np.empty(off[-1], dtype=np.uint8)
    for j in prange(starts.shape[0]):
        f = features[j]
        thr = thresholds[j]
        ml = missing_left[j]
        o = off[j]
        for i in range(starts[j], ends[j]):
            v = X[rows[i], f]
            if np.isnan(v) or v == missing_code:
                out[o] = ml
            else:
                out[o] = 1 if v <= thr else 0
            o += 1
    return out


@njit(cache=True, parallel=True, nogil=True)
def apply_partition(rows, starts, ends, bits):
    """Stable in-place partition of each node segment by its left/right bits.

    ``bits`` is the concatenation, over the listed segments, of one uint8 per
    row (1 = left).  Returns the number of left rows of each segment.
    """
    n_seg = starts.shape[0]
    n_left = np.zeros(n_seg, dtype=np.int64)
    off = _segment_offsets(starts, ends)
    for j in prange(n_seg):
        s = starts[j]
        e = ends[j]
        o = off[j] - s
        # branch-free: every row is written to both buffers, only one cursor moves
        right = np.empty(e - s + 1, dtype=rows.dtype)
        nl = 0
        nr = 0
        for i in range(s, e):
            r = rows[i]
            b = bits[o + i] == 1
            rows[s + nl] = r      # never ahead of the reading position i
            right[nr] = r
            nl += b
            nr += 1 - b
        for i in range(nr):
            rows[s + nl + i] = right[i]
        n_left[j] = nl
    return n_left


@njit(cache=True, parallel=True, nogil=True)
def bin_codes(X, edges, n_bins, out):
    """Bin code of every value into ``out`` (uint8): the number of the
    feature's edges below the value (``MISSING_BIN`` for NaN), rows in parallel."""
    n, n_feat = X.shape
    for i in prange(n):
        for f in range(n_feat):
            v = X[i, f]
            if np.isnan(v):
                out[i, f] = MISSING_BIN
                continue
            lo = 0
            hi = n_bins[f] - 1
            while lo < hi:
                mid = (lo + hi) >> 1
                if edges[f, mid] < v:
                    lo = mid + 1
                else:
                    hi = mid
            out[i, f] = lo


@njit(cache=True, nogil=True)
def partial_leaf_sets(X, children_left, children_right, feature, threshold, missing_left,
                      leaves, index_bytes):
    """Per-leaf row sets of one partial tree (paper Algorithm 3), in compact form.

    ``feature[node] >= 0`` marks a split this party owns (local column index);
    ``-1`` a split owned elsewhere, where rows follow both branches; ``-2`` a
    leaf.  ``set_of_leaf[k]`` is -1 when no ancestor of ``leaves[k]`` is owned
    here (its row set is "all rows") and otherwise the number of its row set
    (sets are numbered in the order the walk below meets them).
    Leaves below the same child of an owned split, with no owned split in
    between, share one row set, stored once.

    Each set is stored like a Roaring bitmap container, whichever is smaller:
    as its row indices (``index_bytes`` each on the wire) or as bitmap words
    (bit ``i % 64`` of word ``i // 64`` for row ``i``).  Returns
    ``(set_of_leaf, is_dense, counts, rows, dense)``: per set the container
    kind and row count, the index lists concatenated (in no particular order
    within a set) and the dense sets' words stacked.

    The tree is walked depth first with the list of rows that can reach each
    node: an owned split partitions its list, another party's split hands the
    same list on; the walk stops where no owned split lies below.
    """
    n = X.shape[0]
    n_nodes = children_left.shape[0]
    nw = (n + 63) // 64
    # anchor[node]: the child of an owned split that the node hangs below with
    # no owned split in between (-1: no owned ancestor).  Parents come first.
    anchor = np.full(n_nodes, -1, dtype=np.int64)
    depth = np.zeros(n_nodes, dtype=np.int64)
    for node in range(n_nodes):
        l = children_left[node]
        if l < 0:
            continue
        r = children_right[node]
        if feature[node] >= 0:
            anchor[l] = l
            anchor[r] = r
        else:
            anchor[l] = anchor[node]
            anchor[r] = anchor[node]
        depth[l] = depth[node] + 1
        depth[r] = depth[node] + 1
    n_leaves = leaves.shape[0]
    set_of_leaf = np.full(n_leaves, -1, dtype=np.int32)
    # anchors holding some leaf's set; sets are numbered in the order the walk meets them
    slot = np.full(n_nodes, -1, dtype=np.int64)
    n_sets = 0
    for k in range(n_leaves):
        a = anchor[leaves[k]]
        if a >= 0 and slot[a] == -1:
            slot[a] = -2
            n_sets += 1
    is_dense = np.zeros(n_sets, dtype=np.uint8)
    counts = np.zeros(n_sets, dtype=np.int64)
    rows = np.empty(0, dtype=np.uint32)
    words = np.zeros((0, nw), dtype=np.uint64)
    if n_sets == 0:
        return set_of_leaf, is_dense, counts, rows, words
    rows = np.empty(max(4 * n, 16), dtype=np.uint32)
    n_rows_out = 0
    n_dense = 0
    next_set = 0
    words = np.zeros((max(1, n_sets // 4), nw), dtype=np.uint64)
    # the walk is needed only where an owned split lies in the subtree
    owned_below = np.zeros(n_nodes, dtype=np.uint8)
    max_depth = 0
    for node in range(n_nodes - 1, -1, -1):
        l = children_left[node]
        if l >= 0 and (feature[node] >= 0 or owned_below[l] == 1
                       or owned_below[children_right[node]] == 1):
            owned_below[node] = 1
        if depth[node] > max_depth:
            max_depth = depth[node]
    # row lists live in one buffer used as a stack: each owned split on the
    # current path adds at most n entries
    buf = np.empty(n * (max_depth + 2), dtype=np.int32)
    for i in range(n):
        buf[i] = i
    cap = 2 * max_depth + 4
    st_node = np.empty(cap, dtype=np.int64)
    st_s = np.empty(cap, dtype=np.int64)
    st_e = np.empty(cap, dtype=np.int64)
    st_top = np.empty(cap, dtype=np.int64)
    st_node[0] = 0
    st_s[0] = 0
    st_e[0] = n
    st_top[0] = n
    sp = 1
    one = np.uint64(1)
    while sp > 0:
        sp -= 1
        node = st_node[sp]
        s = st_s[sp]
        e = st_e[sp]
        top = st_top[sp]
        if slot[node] == -2:
            k = next_set
            slot[node] = k
            next_set += 1
            c = e - s
            counts[k] = c
            if c * index_bytes >= nw * 8:
                is_dense[k] = 1
                if n_dense == words.shape[0]:
                    grown = np.zeros((2 * n_dense, nw), dtype=np.uint64)
                    for d in range(n_dense):
                        for w in range(nw):
                            grown[d, w] = words[d, w]
                    words = grown
                for i in range(s, e):
                    r = buf[i]
                    words[n_dense, r >> 6] |= one << np.uint64(r & 63)
                n_dense += 1
            else:
                if n_rows_out + c > rows.shape[0]:
                    grown_rows = np.empty(2 * (n_rows_out + c), dtype=np.uint32)
                    for i in range(n_rows_out):
                        grown_rows[i] = rows[i]
                    rows = grown_rows
                for i in range(s, e):
                    rows[n_rows_out] = buf[i]
                    n_rows_out += 1
        l = children_left[node]
        if l < 0 or owned_below[node] == 0:
            continue
        r_child = children_right[node]
        f = feature[node]
        if f < 0:
            # not ours: both children see the same rows
            for c in (r_child, l):
                if owned_below[c] == 1:
                    st_node[sp] = c
                    st_s[sp] = s
                    st_e[sp] = e
                    st_top[sp] = top
                    sp += 1
            continue
        thr = threshold[node]
        ml = missing_left[node] == 1
        # one pass: left rows fill the new area from its start, right rows from its end
        new_top = top + (e - s)
        li = top
        ri = new_top - 1
        for i in range(s, e):
            row = buf[i]
            v = X[row, f]
            if (ml if np.isnan(v) else v <= thr):
                buf[li] = row
                li += 1
            else:
                buf[ri] = row
                ri -= 1
        nl = li - top
        st_node[sp] = r_child
        st_s[sp] = top + nl
        st_e[sp] = new_top
        st_top[sp] = new_top
        sp += 1
        st_node[sp] = l
        st_s[sp] = top
        st_e[sp] = top + nl
        st_top[sp] = new_top
        sp += 1
    for k in range(n_leaves):
        a = anchor[leaves[k]]
        if a >= 0:
            set_of_leaf[k] = slot[a]
    out_rows = rows[:n_rows_out].copy()
    out_dense = words[:n_dense].copy()
    return set_of_leaf, is_dense, counts, out_rows, out_dense


@njit(cache=True, nogil=True)
def intersect_leaf_sets(n_rows, set_id, is_dense, counts, row_start, rows, dense_row, dense,
                        n_leaves):
    """Master side of Algorithm 4 on compact row sets (see :func:`partial_leaf_sets`).

    ``set_id[p, k]`` is the global number of party ``p``'s row set of leaf
    ``k`` (-1: all rows); for each global set, ``is_dense``/``counts`` give its
    container, ``rows[row_start[s]: row_start[s] + counts[s]]`` its row
    indices (sparse sets) and ``dense[dense_row[s]]`` its bitmap words (dense
    sets).  Returns the leaf position of every row, or -1 where a row did not
    land in exactly one leaf.
    """
    n_parties = set_id.shape[0]
    nw = (n_rows + 63) // 64
    out = np.full(n_rows, -1, dtype=np.int32)
    hits = np.zeros(n_rows, dtype=np.int32)
    seen = np.zeros(n_rows, dtype=np.int32)
    stamp = np.zeros(n_rows, dtype=np.int64)
    acc = np.empty(nw, dtype=np.uint64)
    one = np.uint64(1)
    for k in range(n_leaves):
        # the smallest sparse set drives the scan; the others are counted or bit-tested
        best = -1
        n_sparse = 0
        for p in range(n_parties):
            s = set_id[p, k]
            if s >= 0 and is_dense[s] == 0:
                n_sparse += 1
                if best < 0 or counts[s] < counts[best]:
                    best = s
        if best < 0:
            acc[:] = ~np.uint64(0)
            for p in range(n_parties):
                s = set_id[p, k]
                if s >= 0:
                    for w in range(nw):
                        acc[w] &= dense[dense_row[s], w]
            for w in range(nw):
                a = acc[w]
                if a == 0:
                    continue
                base = w * 64
                top = min(64, n_rows - base)
                for b in range(top):
                    if (a >> np.uint64(b)) & one:
                        out[base + b] = k
                        hits[base + b] += 1
            continue
        tag = k + 1
        for p in range(n_parties):
            s = set_id[p, k]
            if s >= 0 and is_dense[s] == 0:
                for i in range(row_start[s], row_start[s] + counts[s]):
                    r = np.int64(rows[i])
                    if stamp[r] != tag:
                        stamp[r] = tag
                        seen[r] = 0
                    seen[r] += 1
        for i in range(row_start[best], row_start[best] + counts[best]):
            r = np.int64(rows[i])
            if seen[r] != n_sparse:
                continue
            ok = True
            for p in range(n_parties):
                s = set_id[p, k]
                if s >= 0 and is_dense[s] == 1:
                    if not (dense[dense_row[s], r >> 6] >> np.uint64(r & 63)) & one:
                        ok = False
                        break
            if ok:
                out[r] = k
                hits[r] += 1
    for i in range(n_rows):
        if hits[i] != 1:
            out[i] = -1
    return out
