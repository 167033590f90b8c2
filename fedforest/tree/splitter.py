"""Split search: the best split of every open node of a level, from
histograms of bin codes (:func:`best_splits_hist`, or from ready-made
histograms, :func:`best_splits_from_hists`) or from sorted raw values
(:func:`best_splits_exact`).  Conventions as in :mod:`.criterion`.

* When a node saw no missing values, missing values later follow the larger
  child (right on a tie), as in scikit-learn.
* Candidates are scanned in increasing feature then threshold order and only a
  strictly larger gain replaces the best one, so ties resolve to the lowest
  feature index and the lowest threshold.
* The parallel kernels (``parallel=True``) split their work over (node,
  feature) pairs and release the GIL, so a caller may also run several of them
  at once, one per tree, on single-threaded kernels (tree blocks); no result
  depends on the number of threads.
* The histogram and exact kernels evaluate candidates with the same rules
  written out in each scan loop: a shared helper measured about 40% slower
  training (numba does not keep it as tight), so the repetition is deliberate;
  tests check both kernels against one brute-force reference.
"""
import numpy as np
from numba import njit, prange

from .binning import MISSING_BIN
from .criterion import add_row, node_weights, proxy_score, split_gain, weight_of
from .impurity import ENTROPY, GINI, NEWTON, SQUARED_ERROR, impurity

FEATURE_THRESHOLD = 1e-7   # two values closer than this are not split apart (exact mode)
# where an exact split puts a value lying on the midpoint of two training values
# (best_splits_exact's threshold_rule)
MIDPOINT = 0                 # left: x <= midpoint (scikit-learn)
BELOW_FLOAT32_MIDPOINT = 1   # right: x < float32(midpoint) goes left (XGBoost's exact method)


@njit(cache=True)
def _scan_hist(hist, cnt, nb, n_node, w_node, imp_node, w_total, is_clf, S, crit, lam,
               min_samples_leaf, min_weight_leaf, tot, left, right, lm, rm, prox):
    """Best candidate of one feature's histogram (``hist[b]`` statistics and
    ``cnt[b]`` rows of bin ``b``, the missing bin at ``MISSING_BIN``) in a node
    of ``n_node`` rows.  Returns ``gain, bin, missing_left`` (gain -inf if none).
    ``tot``, ``left``, ``right``, ``lm``, ``rm`` are scratch vectors of length
    S, ``prox`` one of length at least ``2 * nb``.

    Candidates, in scan order: each non-empty bin ``b`` as the last bin on the
    left, with missing values (if any) first on the right, then on the left.
    A first pass scores every candidate with the cheap :func:`proxy_score`; the
    second computes the exact :func:`split_gain` only of the candidates whose
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
    prox[:2 * nb] = -np.inf
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
            p = proxy_score(left, right, cl, cr, S, is_clf, crit, lam, min_samples_leaf, min_weight_leaf)
            prox[2 * b] = p
            top = max(top, p)
        else:
            for k in range(S):
                rm[k] = right[k] + hist[MISSING_BIN, k]
            p = proxy_score(left, rm, cl, cr + n_miss, S, is_clf, crit, lam, min_samples_leaf,
                       min_weight_leaf)
            prox[2 * b] = p
            top = max(top, p)
            if cr == 0:
                break
            for k in range(S):
                lm[k] = left[k] + hist[MISSING_BIN, k]
            p = proxy_score(lm, right, cl + n_miss, cr, S, is_clf, crit, lam, min_samples_leaf,
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
            g = split_gain(left, right, cl, cr, w_node, imp_node, w_total, is_clf, crit, lam,
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
            g = split_gain(left, rm, cl, cr + n_miss, w_node, imp_node, w_total, is_clf,
                      crit, lam, min_samples_leaf, min_weight_leaf)
            if g > best:
                best = g
                best_b = b if cr > 0 else nb - 1
                best_ml = 0
        if prox[2 * b + 1] >= floor:
            # missing values go left
            for k in range(S):
                lm[k] = left[k] + hist[MISSING_BIN, k]
            g = split_gain(lm, right, cl + n_miss, cr, w_node, imp_node, w_total, is_clf,
                      crit, lam, min_samples_leaf, min_weight_leaf)
            if g > best:
                best = g
                best_b = b
                best_ml = 1
    return best, best_b, best_ml


@njit(cache=True)
def _scan_hist_fast(hist, cnt, nb, n_node, w_node, imp_node, w_total, is_clf, S, crit, lam,
                    min_samples_leaf, min_weight_leaf, tot, left, right, lm, rm, prox):
    """:func:`_scan_hist` with the common (task, statistics, criterion)
    combinations passed as constants, so the compiler specialises the scan
    for them (about three times faster than the generic loop); same results."""
    if is_clf and S == 2 and crit == GINI:
        return _scan_hist(hist, cnt, nb, n_node, w_node, imp_node, w_total, True, 2, GINI, lam,
                          min_samples_leaf, min_weight_leaf, tot, left, right, lm, rm, prox)
    if is_clf and S == 2 and crit == ENTROPY:
        return _scan_hist(hist, cnt, nb, n_node, w_node, imp_node, w_total, True, 2, ENTROPY, lam,
                          min_samples_leaf, min_weight_leaf, tot, left, right, lm, rm, prox)
    if not is_clf and S == 3 and crit == NEWTON:
        return _scan_hist(hist, cnt, nb, n_node, w_node, imp_node, w_total, False, 3, NEWTON, lam,
                          min_samples_leaf, min_weight_leaf, tot, left, right, lm, rm, prox)
    if not is_clf and S == 3:
        return _scan_hist(hist, cnt, nb, n_node, w_node, imp_node, w_total, False, 3, SQUARED_ERROR, lam,
                          min_samples_leaf, min_weight_leaf, tot, left, right, lm, rm, prox)
    return _scan_hist(hist, cnt, nb, n_node, w_node, imp_node, w_total, is_clf, S, crit, lam,
                      min_samples_leaf, min_weight_leaf, tot, left, right, lm, rm, prox)


@njit(cache=True)
def _node_weights_of(rows, starts, ends, ycls, yw, is_clf, S, crit, lam, node_w, node_imp):
    """The nodes' weights and impurities: the given ones, or computed from the rows when empty."""
    if node_w.shape[0] == starts.shape[0] and node_imp.shape[0] == starts.shape[0]:
        return node_w, node_imp
    return node_weights(rows, starts, ends, ycls, yw, is_clf, S, crit, lam)


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


#: the (node, feature) pairs of a histogram search run in at most this many
#: blocks, each with one set of scratch arrays (enough blocks to share out
#: among many threads)
PAIR_BLOCKS = 256


@njit(cache=True, parallel=True, nogil=True)
def best_splits_hist(Xb, n_bins, rows, starts, ends, fmask, ycls, yw, is_clf, S, crit, lam,
                     w_total, min_samples_leaf, min_weight_leaf, sib_starts, sib_ends,
                     parent_slot, cache_index, cache_hist, cache_cnt, keep, node_w, node_imp):
    """Best histogram split of every open node over the allowed local features.

    ``Xb`` is the (n_rows, n_features) uint8 bin code matrix (``MISSING_BIN`` for
    NaN), ``n_bins[f]`` the number of non-missing bins of feature ``f`` and
    ``fmask[j, f]`` whether node ``j`` may split on feature ``f``.

    Histogram subtraction: where ``parent_slot[j] >= 0`` and
    ``cache_index[parent_slot[j], f] >= 0``, the histogram of (node ``j``,
    feature ``f``) is its parent's (``cache_hist``/``cache_cnt``, the
    ``n_bins[f] + 1`` rows from that index on: its bins, then its missing bin)
    minus the one of the sibling rows ``rows[sib_starts[j]:sib_ends[j]]``,
    built instead of its own (the caller points only larger children at a
    smaller sibling).  Every other histogram is built from the node's rows.

    Returns ``gain, feature, bin, missing_left`` per node (``feature`` -1 and
    ``gain`` -inf where no allowed split exists; ``bin == n_bins[f] - 1``
    with missing values present means "non-missing left, missing right"),
    then the histograms of the nodes with ``keep[j]``, for the next level's
    subtraction: ``index`` (n_nodes, n_features; the first of the pair's
    ``n_bins[f] + 1`` rows in ``hist``/``cnt``, or -1), ``hist``, ``cnt``.

    Every bin's statistics are added in row order and only the bins a
    feature has (and its missing bin) are touched, so a pair costs its rows
    plus its bins.  Blocks of pairs run in parallel and the pairs are
    reduced in feature order, so the result does not depend on the number
    of threads.

    ``node_w``, ``node_imp``: the nodes' weights and impurities when the caller
    knows them (as :func:`.criterion.node_weights` gives them), or empty
    arrays to compute them here (one more pass over the rows).
    """
    n_nodes = starts.shape[0]
    n_feat = fmask.shape[1]
    w_node, imp_node = _node_weights_of(rows, starts, ends, ycls, yw, is_clf, S, crit, lam, node_w, node_imp)
    pair_node, pair_feat = _open_pairs(starts, ends, fmask, min_samples_leaf)
    n_pairs = pair_node.shape[0]
    gain = np.full(n_pairs, -np.inf)
    where = np.zeros(n_pairs, dtype=np.int32)
    mls = np.zeros(n_pairs, dtype=np.uint8)
    # kept histograms, compact: a pair of feature f owns n_bins[f] + 1 rows from
    # index[j, f] on, its bins then its missing bin
    index = np.full((n_nodes, n_feat), -1, dtype=np.int64)
    n_kept = 0
    for i in range(n_pairs):
        if keep[pair_node[i]]:
            index[pair_node[i], pair_feat[i]] = n_kept
            n_kept += n_bins[pair_feat[i]] + 1
    kept_hist = np.empty((n_kept, S))
    kept_cnt = np.empty(n_kept, dtype=np.int32)
    n_blocks = min(n_pairs, PAIR_BLOCKS)
    for blk in prange(n_blocks):
        hist = np.empty((MISSING_BIN + 1, S))
        cnt = np.empty(MISSING_BIN + 1, dtype=np.int64)
        tot = np.empty(S)
        left = np.empty(S)
        right = np.empty(S)
        lm = np.empty(S)
        rm = np.empty(S)
        prox = np.empty(2 * (MISSING_BIN + 1))
        for i in range(blk * n_pairs // n_blocks, (blk + 1) * n_pairs // n_blocks):
            j = pair_node[i]
            f = pair_feat[i]
            nb = n_bins[f]
            # only the feature's bins and the missing bin are used
            hist[:nb] = 0.0
            cnt[:nb] = 0
            hist[MISSING_BIN] = 0.0
            cnt[MISSING_BIN] = 0
            col = Xb[:, f]
            src = -1
            if parent_slot[j] >= 0:
                src = cache_index[parent_slot[j], f]
            if src >= 0:
                _add_hist(hist, cnt, col, rows, sib_starts[j], sib_ends[j], ycls, yw, is_clf)
                for b in range(nb):
                    cnt[b] = cache_cnt[src + b] - cnt[b]
                    for k in range(S):
                        hist[b, k] = cache_hist[src + b, k] - hist[b, k]
                cnt[MISSING_BIN] = cache_cnt[src + nb] - cnt[MISSING_BIN]
                for k in range(S):
                    hist[MISSING_BIN, k] = cache_hist[src + nb, k] - hist[MISSING_BIN, k]
            else:
                _add_hist(hist, cnt, col, rows, starts[j], ends[j], ycls, yw, is_clf)
            slot = index[j, f]
            if slot >= 0:
                for b in range(nb):
                    kept_cnt[slot + b] = cnt[b]
                    for k in range(S):
                        kept_hist[slot + b, k] = hist[b, k]
                kept_cnt[slot + nb] = cnt[MISSING_BIN]
                for k in range(S):
                    kept_hist[slot + nb, k] = hist[MISSING_BIN, k]
            g, b, ml = _scan_hist_fast(hist, cnt, nb, ends[j] - starts[j], w_node[j], imp_node[j],
                                       w_total, is_clf, S, crit, lam, min_samples_leaf, min_weight_leaf,
                                       tot, left, right, lm, rm, prox)
            gain[i] = g
            where[i] = b
            mls[i] = ml
    best_gain, best_feat, best_where, best_ml = _best_per_node(n_nodes, pair_node, pair_feat,
                                                                gain, where, mls)
    return best_gain, best_feat, best_where, best_ml, index, kept_hist, kept_cnt


#: the trailing ``node_w, node_imp`` arguments of the split kernels that have them computed
NO_NODE_STATS = (np.empty(0), np.empty(0))


def no_subtraction(n_nodes, S):
    """The subtraction arguments of :func:`best_splits_hist` that build every
    histogram from the node's own rows and keep none."""
    none = np.full(n_nodes, -1, dtype=np.int64)
    return (none, none, none, np.full((0, 1), -1, dtype=np.int64),
            np.zeros((0, S)), np.zeros(0, dtype=np.int32),
            np.zeros(n_nodes, dtype=np.uint8))


@njit(cache=True)
def best_splits_from_hists(hists, cnts, pair_node, pair_feat, pair_nb, node_stats, node_count,
                           is_clf, S, crit, lam, w_total, min_samples_leaf, min_weight_leaf):
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
    prox = np.empty(2 * (MISSING_BIN + 1))
    for i in range(pair_node.shape[0]):
        j = pair_node[i]
        n_node = node_count[j]
        if n_node < 2 * min_samples_leaf or n_node < 2:
            continue
        w_node = weight_of(node_stats[j], is_clf)
        imp_node = impurity(node_stats[j], w_node, crit, lam)
        g, b, ml = _scan_hist_fast(hists[i], cnts[i], pair_nb[i], n_node, w_node, imp_node, w_total,
                                   is_clf, S, crit, lam, min_samples_leaf, min_weight_leaf, tot, left, right,
                                   lm, rm, prox)
        if g > best_gain[j]:
            best_gain[j] = g
            best_feat[j] = pair_feat[i]
            best_bin[j] = b
            best_ml[j] = ml
    return best_gain, best_feat, best_bin, best_ml


@njit(cache=True, parallel=True, nogil=True)
def best_splits_exact(X, rows, starts, ends, fmask, ycls, yw, is_clf, S, crit, lam,
                      w_total, min_samples_leaf, min_weight_leaf, node_w, node_imp, threshold_rule):
    """Best exact split of every open node.

    ``X`` holds float32 feature values (NaN = missing); a value goes left when
    it is at most the threshold.  Between two consecutive distinct values
    ``v0 < v1`` the threshold is, by ``threshold_rule``: :data:`MIDPOINT`
    (scikit-learn's) their midpoint (the lower value when the midpoint rounds
    up to the upper one), so a value on the midpoint goes left;
    :data:`BELOW_FLOAT32_MIDPOINT` (XGBoost's ``x < float32 midpoint``) the
    largest float32 below the float32 midpoint, at least ``v0``, so a float32
    value on the midpoint goes right (and any two distinct values may be split
    apart, where scikit-learn's rule keeps values closer than
    ``FEATURE_THRESHOLD`` together).  ``+inf`` separates all non-missing
    values (left) from missing ones (right).
    Returns ``gain, feature, threshold, missing_left`` per node.  Like
    :func:`best_splits_hist`, (node, feature) pairs run in parallel and are
    reduced in feature order.  ``node_w``, ``node_imp`` as in :func:`best_splits_hist`.
    """
    n_nodes = starts.shape[0]
    w_nodes, imp_nodes = _node_weights_of(rows, starts, ends, ycls, yw, is_clf, S, crit, lam, node_w, node_imp)
    pair_node, pair_feat = _open_pairs(starts, ends, fmask, min_samples_leaf)
    n_pairs = pair_node.shape[0]
    # scikit-learn never splits values closer than FEATURE_THRESHOLD apart; XGBoost splits any two
    min_gap = FEATURE_THRESHOLD if threshold_rule == MIDPOINT else 0.0
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
                add_row(miss, r, ycls, yw, is_clf, 1.0)
            else:
                nm_rows[n_nonmiss] = r
                vals[n_nonmiss] = v
                n_nonmiss += 1
                add_row(tot, r, ycls, yw, is_clf, 1.0)
        n_miss = n - n_nonmiss
        order = np.argsort(vals[:n_nonmiss], kind="mergesort")
        for p in range(n_nonmiss):
            r = nm_rows[order[p]]
            add_row(left, r, ycls, yw, is_clf, 1.0)
            cl = p + 1
            cr = n_nonmiss - cl
            last = cr == 0
            if not last:
                v0 = vals[order[p]]
                v1 = vals[order[p + 1]]
                if v1 <= v0 + min_gap:
                    continue
                thr = v0 / 2.0 + v1 / 2.0
                if threshold_rule == BELOW_FLOAT32_MIDPOINT:
                    below = np.float64(np.nextafter(np.float32(thr), np.float32(-np.inf)))
                    thr = below if below > v0 else v0
                elif thr == v1 or thr == np.inf or thr == -np.inf:
                    thr = v0
            else:
                if n_miss == 0:
                    break
                thr = np.inf
            for k in range(S):
                right[k] = tot[k] - left[k]
            if n_miss == 0:
                g = split_gain(left, right, cl, cr, w_node, imp_node, w_total, is_clf, crit, lam,
                          min_samples_leaf, min_weight_leaf)
                if g > best:
                    best = g
                    best_thr = thr
                    best_ml = 1 if cl > cr else 0
                continue
            for k in range(S):
                rm[k] = right[k] + miss[k]
            g = split_gain(left, rm, cl, cr + n_miss, w_node, imp_node, w_total, is_clf, crit, lam,
                      min_samples_leaf, min_weight_leaf)
            if g > best:
                best = g
                best_thr = thr
                best_ml = 0
            if last:
                break
            for k in range(S):
                lm[k] = left[k] + miss[k]
            g = split_gain(lm, right, cl + n_miss, cr, w_node, imp_node, w_total, is_clf, crit, lam,
                      min_samples_leaf, min_weight_leaf)
            if g > best:
                best = g
                best_thr = thr
                best_ml = 1
        gains[i] = best
        thrs[i] = best_thr
        mls[i] = best_ml
    return _best_per_node(n_nodes, pair_node, pair_feat, gains, thrs, mls)
