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
import numba
import numpy as np
from numba import njit, prange

from .threads import prange_only

from .binning import MISSING_BIN
from .criterion import accumulate, add_row, node_weights, proxy_score, split_gain, weight_of
from .impurity import GINI, NEWTON, SQUARED_ERROR, impurity

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


@njit(cache=True, inline="always")
def _pair_weights(l0, l1, r0, r1, cl, cr, newton, min_samples_leaf, min_weight_leaf):
    """The sides' weights of a candidate as in :func:`_pair_proxy`, or -1, -1
    where the candidate is not allowed (:func:`.criterion.split_gain`'s rules)."""
    if cl < min_samples_leaf or cr < min_samples_leaf:
        return -1.0, -1.0
    if newton:
        wl = l0
        wr = r0
    else:
        wl = l0 + l1
        wr = r0 + r1
    if wl <= 0.0 or wr <= 0.0 or wl < min_weight_leaf or wr < min_weight_leaf:
        return -1.0, -1.0
    return wl, wr


@njit(cache=True, inline="always")
def _pair_proxy(l0, l1, r0, r1, cl, cr, newton, lam, min_samples_leaf, min_weight_leaf):
    """:func:`.criterion.proxy_score` of a candidate whose sides have two
    statistics (``newton``: hessian and gradient sums; else two class
    weights under Gini), the same operations in the same order."""
    wl, wr = _pair_weights(l0, l1, r0, r1, cl, cr, newton, min_samples_leaf, min_weight_leaf)
    if wl < 0.0:
        return -np.inf
    if newton:
        return l1 * l1 / (wl + lam) + r1 * r1 / (wr + lam)
    return (l0 * l0 + l1 * l1) / wl + (r0 * r0 + r1 * r1) / wr


@njit(cache=True, inline="always")
def _pair_gain(l0, l1, r0, r1, cl, cr, newton, w_node, imp_node, w_total, lam, min_samples_leaf,
               min_weight_leaf):
    """:func:`.criterion.split_gain` of a candidate as in :func:`_pair_proxy`,
    the same operations in the same order."""
    wl, wr = _pair_weights(l0, l1, r0, r1, cl, cr, newton, min_samples_leaf, min_weight_leaf)
    if wl < 0.0:
        return -np.inf
    if newton:
        il = -(l1 * l1) / ((wl + lam) * wl)
        ir = -(r1 * r1) / ((wr + lam) * wr)
    else:
        pl = l0 / wl
        ql = l1 / wl
        il = 1.0 - (pl * pl + ql * ql)
        pr = r0 / wr
        qr = r1 / wr
        ir = 1.0 - (pr * pr + qr * qr)
    return (w_node / w_total) * (imp_node - (wl / w_node) * il - (wr / w_node) * ir)


@njit(cache=True)
def _scan_hist_pair(hist, cnt, nb, n_node, w_node, imp_node, w_total, newton, lam, min_samples_leaf,
                    min_weight_leaf, prox):
    """:func:`_scan_hist` of two statistics per bin (``newton``: Newton's
    ``(h, g, 0)``; else two classes under Gini), the sums held in scalars:
    the same candidates, operations and result, about six times faster
    than the loop over a statistics vector."""
    n_miss = cnt[MISSING_BIN]
    t0 = 0.0
    t1 = 0.0
    t2 = 0.0
    for b in range(nb):
        if cnt[b] > 0:
            t0 += hist[b, 0]
            t1 += hist[b, 1]
            if newton:
                t2 += hist[b, 2]
    m0 = hist[MISSING_BIN, 0]
    m1 = hist[MISSING_BIN, 1]
    n_nonmiss = n_node - n_miss
    prox[:2 * nb] = -np.inf
    top = -np.inf
    l0 = 0.0
    l1 = 0.0
    cl = 0
    for b in range(nb):
        if cnt[b] == 0:
            continue
        l0 += hist[b, 0]
        l1 += hist[b, 1]
        r0 = t0 - l0
        r1 = t1 - l1
        cl += cnt[b]
        cr = n_nonmiss - cl
        if n_miss == 0:
            if cr == 0:
                break
            p = _pair_proxy(l0, l1, r0, r1, cl, cr, newton, lam, min_samples_leaf, min_weight_leaf)
            prox[2 * b] = p
            top = max(top, p)
        else:
            p = _pair_proxy(l0, l1, r0 + m0, r1 + m1, cl, cr + n_miss, newton, lam, min_samples_leaf,
                            min_weight_leaf)
            prox[2 * b] = p
            top = max(top, p)
            if cr == 0:
                break
            p = _pair_proxy(l0 + m0, l1 + m1, r0, r1, cl + n_miss, cr, newton, lam, min_samples_leaf,
                            min_weight_leaf)
            prox[2 * b + 1] = p
            top = max(top, p)
    if top == -np.inf:
        return -np.inf, 0, 0
    scale = abs(top) + w_node
    if newton:
        scale += abs(t2) + abs(hist[MISSING_BIN, 2])
    floor = top - 1e-9 * scale
    best = -np.inf
    best_b = 0
    best_ml = 0
    l0 = 0.0
    l1 = 0.0
    cl = 0
    for b in range(nb):
        if cnt[b] == 0:
            continue
        l0 += hist[b, 0]
        l1 += hist[b, 1]
        cl += cnt[b]
        if prox[2 * b] < floor and prox[2 * b + 1] < floor:
            continue
        cr = n_nonmiss - cl
        r0 = t0 - l0
        r1 = t1 - l1
        if n_miss == 0:
            g = _pair_gain(l0, l1, r0, r1, cl, cr, newton, w_node, imp_node, w_total, lam, min_samples_leaf,
                           min_weight_leaf)
            if g > best:
                best = g
                best_b = b
                best_ml = 1 if cl > cr else 0
            continue
        if prox[2 * b] >= floor:
            g = _pair_gain(l0, l1, r0 + m0, r1 + m1, cl, cr + n_miss, newton, w_node, imp_node, w_total, lam,
                           min_samples_leaf, min_weight_leaf)
            if g > best:
                best = g
                best_b = b if cr > 0 else nb - 1
                best_ml = 0
        if prox[2 * b + 1] >= floor:
            g = _pair_gain(l0 + m0, l1 + m1, r0, r1, cl + n_miss, cr, newton, w_node, imp_node, w_total, lam,
                           min_samples_leaf, min_weight_leaf)
            if g > best:
                best = g
                best_b = b
                best_ml = 1
    return best, best_b, best_ml


@njit(cache=True)
def _scan_hist_fast(hist, cnt, nb, n_node, w_node, imp_node, w_total, is_clf, S, crit, lam,
                    min_samples_leaf, min_weight_leaf, tot, left, right, lm, rm, prox):
    """:func:`_scan_hist`, the common (task, statistics, criterion)
    combinations by a scan that holds its sums in scalars (Newton, two-class
    Gini: :func:`_scan_hist_pair`) or passed as constants so the compiler specialises the scan
    (squared error, three times as fast); same results.  Each specialisation is
    compiled into every kernel that scans, so only these common ones are
    (two-class entropy scans ~1.7 times slower than it would specialised)."""
    if not is_clf and S == 3 and crit == NEWTON:
        return _scan_hist_pair(hist, cnt, nb, n_node, w_node, imp_node, w_total, True, lam, min_samples_leaf,
                               min_weight_leaf, prox)
    if is_clf and S == 2 and crit == GINI:
        return _scan_hist_pair(hist, cnt, nb, n_node, w_node, imp_node, w_total, False, lam, min_samples_leaf,
                               min_weight_leaf, prox)
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
def _add_one(H, C, col, rows, s, e, o, lim, ycls, yw, is_clf):
    """Add rows ``rows[s:e]`` to one feature's compact histogram (bins from
    ``H[o]`` on, the missing bin at ``o + lim``), in row order."""
    if is_clf:
        for k in range(s, e):
            r = rows[k]
            i = o + min(np.int64(col[r]), lim)
            C[i] += 1
            H[i, ycls[r]] += yw[r, 0]
    else:
        for k in range(s, e):
            r = rows[k]
            i = o + min(np.int64(col[r]), lim)
            C[i] += 1
            H[i, 0] += yw[r, 0]
            H[i, 1] += yw[r, 1]
            H[i, 2] += yw[r, 2]


@njit(cache=True, nogil=True)
def _add_rows(H, C, Xb, rows, s, e, feat, base, lim, ycls, yw, is_clf):
    """Add rows ``rows[s:e]`` to the compact histograms of features ``feat``
    (feature ``feat[t]``'s bins from ``H[base[t]]`` on, its missing bin at
    ``base[t] + lim[t]``, ``lim[t]`` its number of bins).  Four features
    share each pass over the rows (one load of a row's statistics, four
    independent sums), and each bin's sums are still added in row order."""
    n_sel = feat.shape[0]
    t = 0
    while t + 4 <= n_sel:
        c0 = Xb[:, feat[t]]
        c1 = Xb[:, feat[t + 1]]
        c2 = Xb[:, feat[t + 2]]
        c3 = Xb[:, feat[t + 3]]
        o0, o1, o2, o3 = base[t], base[t + 1], base[t + 2], base[t + 3]
        l0, l1, l2, l3 = lim[t], lim[t + 1], lim[t + 2], lim[t + 3]
        if is_clf:
            for k in range(s, e):
                r = rows[k]
                c = ycls[r]
                w = yw[r, 0]
                i0 = o0 + min(np.int64(c0[r]), l0)
                i1 = o1 + min(np.int64(c1[r]), l1)
                i2 = o2 + min(np.int64(c2[r]), l2)
                i3 = o3 + min(np.int64(c3[r]), l3)
                C[i0] += 1
                H[i0, c] += w
                C[i1] += 1
                H[i1, c] += w
                C[i2] += 1
                H[i2, c] += w
                C[i3] += 1
                H[i3, c] += w
        else:
            for k in range(s, e):
                r = rows[k]
                g0 = yw[r, 0]
                g1 = yw[r, 1]
                g2 = yw[r, 2]
                i0 = o0 + min(np.int64(c0[r]), l0)
                i1 = o1 + min(np.int64(c1[r]), l1)
                i2 = o2 + min(np.int64(c2[r]), l2)
                i3 = o3 + min(np.int64(c3[r]), l3)
                C[i0] += 1
                H[i0, 0] += g0
                H[i0, 1] += g1
                H[i0, 2] += g2
                C[i1] += 1
                H[i1, 0] += g0
                H[i1, 1] += g1
                H[i1, 2] += g2
                C[i2] += 1
                H[i2, 0] += g0
                H[i2, 1] += g1
                H[i2, 2] += g2
                C[i3] += 1
                H[i3, 0] += g0
                H[i3, 1] += g1
                H[i3, 2] += g2
        t += 4
    while t < n_sel:
        _add_one(H, C, Xb[:, feat[t]], rows, s, e, base[t], lim[t], ycls, yw, is_clf)
        t += 1


@njit(cache=True, nogil=True)
def _add_rows_skipping(H, C, Xb, rows, s, e, feat, base, lim, dflt, ycls, yw, is_clf, S):
    """:func:`_add_rows` for features that each have a default bin
    (``dflt[t]``, a bin code, ``MISSING_BIN`` for the missing bin) holding
    most rows: only the other rows are added, and the default bin is the
    rows' totals less every other bin.  Only for exact sums (integer
    weights, gradients on a grid: :mod:`fedforest.vertical.boost.boosting`),
    where that difference equals the bin's own sum in any order, so the
    histograms are those of :func:`_add_rows` at a fraction of the adds
    (one-hot and mostly-zero columns)."""
    tot = _row_totals(rows, s, e, ycls, yw, is_clf, S)
    for t in range(feat.shape[0]):
        col = Xb[:, feat[t]]
        o = base[t]
        lm = lim[t]
        d = dflt[t]
        if is_clf:
            for k in range(s, e):
                r = rows[k]
                b = col[r]
                if b != d:
                    i = o + min(np.int64(b), lm)
                    C[i] += 1
                    H[i, ycls[r]] += yw[r, 0]
        else:
            for k in range(s, e):
                r = rows[k]
                b = col[r]
                if b != d:
                    i = o + min(np.int64(b), lm)
                    C[i] += 1
                    H[i, 0] += yw[r, 0]
                    H[i, 1] += yw[r, 1]
                    H[i, 2] += yw[r, 2]
    _fill_default_bins(H, C, feat, base, lim, dflt, tot, e - s, S)


@njit(cache=True, nogil=True)
def _row_totals(rows, s, e, ycls, yw, is_clf, S):
    """The statistics of rows ``rows[s:e]`` summed (per class, or per statistic)."""
    tot = np.zeros(S)
    accumulate(tot, rows, s, e, ycls, yw, is_clf)
    return tot


@njit(cache=True, nogil=True)
def _fill_default_bins(H, C, feat, base, lim, dflt, tot, n_rows, S):
    """Each feature's default bin: the rows' totals (``tot``, ``n_rows``)
    less the feature's other bins."""
    rest = np.empty(S)
    for t in range(feat.shape[0]):
        o = base[t]
        lm = lim[t]
        i_d = o + min(np.int64(dflt[t]), lm)
        n_rest = 0
        rest[:] = 0.0
        for i in range(o, o + lm + 1):
            if i != i_d:
                n_rest += C[i]
                for q in range(S):
                    rest[q] += H[i, q]
        C[i_d] = n_rows - n_rest
        for q in range(S):
            H[i_d, q] = tot[q] - rest[q]


@njit(cache=True, nogil=True)
def _add_row_entries(H, C, rows, s, e, feat, base, lim, dflt, n_feat, sp_ptr, sp_feat, sp_code,
                     ycls, yw, is_clf, S):
    """:func:`_add_rows_skipping` from the rows' lists of their values
    outside the default bins (``sp_ptr``, ``sp_feat``, ``sp_code``: row
    ``r``'s features and codes at ``sp_ptr[r]:sp_ptr[r + 1]``): a row
    costs its few listed values, not a visit per feature.  Entries of
    features outside ``feat`` are passed over."""
    slot = np.full(n_feat, -1, dtype=np.int64)
    width = np.zeros(n_feat, dtype=np.int64)
    for t in range(feat.shape[0]):
        slot[feat[t]] = base[t]
        width[feat[t]] = lim[t]
    if is_clf:
        for k in range(s, e):
            r = rows[k]
            c = ycls[r]
            w = yw[r, 0]
            for p in range(sp_ptr[r], sp_ptr[r + 1]):
                f = sp_feat[p]
                o = slot[f]
                if o >= 0:
                    i = o + min(np.int64(sp_code[p]), width[f])
                    C[i] += 1
                    H[i, c] += w
    else:
        for k in range(s, e):
            r = rows[k]
            g0 = yw[r, 0]
            g1 = yw[r, 1]
            g2 = yw[r, 2]
            for p in range(sp_ptr[r], sp_ptr[r + 1]):
                f = sp_feat[p]
                o = slot[f]
                if o >= 0:
                    i = o + min(np.int64(sp_code[p]), width[f])
                    C[i] += 1
                    H[i, 0] += g0
                    H[i, 1] += g1
                    H[i, 2] += g2
    _fill_default_bins(H, C, feat, base, lim, dflt, _row_totals(rows, s, e, ycls, yw, is_clf, S), e - s, S)


@njit(cache=True, nogil=True, inline="always")
def _add_kind(default_bin, listed, f):
    """How feature ``f``'s histograms are built: 0 every row added, 1 rows
    in its default bin skipped, 2 from the rows' lists."""
    if default_bin[f] < 0:
        return 0
    if listed.shape[0] > 0 and listed[f] != 0:
        return 2
    return 1


@njit(cache=True)
def _pair_units(pair_node, starts, ends, n_threads):
    """Cut the (node, feature) pairs, node by node, into runs that each build
    their histograms together (:func:`_add_rows`): one run per node on
    one thread; on more, a node's pairs are cut into as many runs as its
    share of the rows x features work takes of about ``4 * n_threads``
    equal parts, each of at least :data:`ROW_PASS_FEATURES` pairs.  Returns the runs' first and end pair.  The results do not
    depend on the cut: each (node, feature) histogram is built by one run,
    rows in order."""
    n_pairs = pair_node.shape[0]
    total = 0
    for i in range(n_pairs):
        total += ends[pair_node[i]] - starts[pair_node[i]]
    part = max(1, total // (BLOCKS_PER_THREAD * n_threads)) if n_threads > 1 else total + 1
    lo = np.empty(n_pairs + 1, dtype=np.int64)
    hi = np.empty(n_pairs + 1, dtype=np.int64)
    n_units = 0
    i = 0
    while i < n_pairs:
        j = pair_node[i]
        e = i
        while e < n_pairs and pair_node[e] == j:
            e += 1
        m = e - i
        work = (ends[j] - starts[j]) * m
        c = min(max(1, m // ROW_PASS_FEATURES), max(1, -(-work // part)))
        for q in range(c):
            lo[n_units] = i + m * q // c
            hi[n_units] = i + m * (q + 1) // c
            n_units += 1
        i = e
    return lo[:n_units], hi[:n_units]


#: runs of pairs per thread of a histogram search (a few, so uneven nodes share out)
BLOCKS_PER_THREAD = 4
#: rows per block where a node's histograms are built in blocks of its rows (the
#: rows' lists; large nodes where sums are exact), blocks built in parallel
BLOCK_ROWS = 4096
#: features sharing a pass over the rows in :func:`_add_rows`; a run has at least
#: as many (where the node has them), since a run of fewer passes over the rows once
#: per feature
ROW_PASS_FEATURES = 4


def best_splits_hist(Xb, n_bins, rows, starts, ends, fmask, ycls, yw, is_clf, S, crit, lam,
                     w_total, min_samples_leaf, min_weight_leaf, sib_starts, sib_ends,
                     parent_slot, cache_index, cache_hist, cache_cnt, keep, node_w, node_imp,
                     default_bin=None, row_entries=None, exact_sums=False):
    """Best histogram split of every open node over the allowed local features.

    ``Xb`` is the (n_rows, n_features) uint8 bin code matrix (``MISSING_BIN`` for
    NaN; column-major),
    ``n_bins[f]`` the number of non-missing bins of feature ``f`` and
    ``fmask[j, f]`` whether node ``j`` may split on feature ``f``.

    Histogram subtraction: where ``parent_slot[j] >= 0`` and
    ``cache_index[parent_slot[j], f] >= 0``, the histogram of (node ``j``,
    feature ``f``) is its parent's (``cache_hist``/``cache_cnt``, the
    ``n_bins[f] + 1`` rows from that index on: its bins, then its missing bin)
    minus the one of the sibling rows ``rows[sib_starts[j]:sib_ends[j]]``
    (the caller points only larger children at a smaller sibling): where the
    sibling is in this call and builds its own histogram of ``f``, that one;
    else built from the sibling's rows.  Every other histogram is built from
    the node's rows.

    Returns ``gain, feature, bin, missing_left`` per node (``feature`` -1 and
    ``gain`` -inf where no allowed split exists; ``bin == n_bins[f] - 1``
    with missing values present means "non-missing left, missing right"),
    then the histograms of the nodes with ``keep[j]``, for the next level's
    subtraction: ``index`` (n_nodes, n_features; the first of the pair's
    ``n_bins[f] + 1`` rows in ``hist``/``cnt``, or -1), ``hist``, ``cnt``.

    Every bin's statistics are added in row order and only the bins a
    feature has (and its missing bin) are touched, so a pair costs its rows
    plus its bins; four features share a pass over the rows.  Runs of a
    node's pairs (:func:`_pair_units`, sized to this thread's kernel
    threads) run in parallel, and the pairs are reduced in feature order, so
    the result does not depend on the number of threads.

    ``node_w``, ``node_imp``: the nodes' weights and impurities when the caller
    knows them (as :func:`.criterion.node_weights` gives them), or empty
    arrays to compute them here (one more pass over the rows).

    ``default_bin``: per feature, a bin code whose histogram entry is the
    rows' totals less the feature's other bins (:func:`_add_rows_skipping`),
    or -1; only where every sum is exact (the caller's guarantee), so the
    result is the same as without it.  None: -1 for every feature.
    ``row_entries``: None, or :func:`row_entries` of ``Xb``: the features it
    lists (a subset of those with a default bin) are added from the rows'
    lists of their values outside the default bins.
    ``exact_sums``: the caller's guarantee that every sum of the rows'
    statistics is exact in any order (as for ``default_bin``): then a large
    node may be built in blocks of its rows on several threads and summed.
    """
    if default_bin is None:
        default_bin = np.full(Xb.shape[1], -1, dtype=np.int64)
    if row_entries is None:
        row_entries = NO_ROW_ENTRIES
    return _hist_search(Xb, n_bins, rows, starts, ends, fmask, ycls, yw, is_clf, S, crit, lam,
                        w_total, min_samples_leaf, min_weight_leaf, sib_starts, sib_ends,
                        parent_slot, cache_index, cache_hist, cache_cnt, keep, node_w, node_imp,
                        numba.get_num_threads(), bool(exact_sums), np.asarray(default_bin, dtype=np.int64),
                        *row_entries)


#: no row lists (:func:`row_entries`): (listed features, row pointers, features, codes)
NO_ROW_ENTRIES = (np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32),
                  np.zeros(0, dtype=np.uint8))


def row_entries(Xb, default_bin, listed, block_rows=1 << 16):
    """Per row, its codes outside the default bins of the features
    ``listed`` (bool per feature, each with ``default_bin >= 0``), as
    ``(listed (uint8), row pointers (int64, n + 1), features (uint16, or
    int32 beyond 65,536 features), codes (uint8))``, rows in order and each row's features in order;
    built a block of rows at a time."""
    listed = np.asarray(listed, dtype=bool) & (np.asarray(default_bin) >= 0)
    feats = np.flatnonzero(listed)
    ftype = np.uint16 if Xb.shape[1] <= np.iinfo(np.uint16).max + 1 else np.int32
    n = Xb.shape[0]
    ptr = np.zeros(n + 1, dtype=np.int64)
    fparts, cparts = [], []
    for lo in range(0, n, block_rows):
        hi = min(n, lo + block_rows)
        block = Xb[lo:hi][:, feats]
        off = block != np.asarray(default_bin)[feats][None, :].astype(np.uint8)
        ptr[lo + 1:hi + 1] = np.count_nonzero(off, axis=1)
        r, c = np.nonzero(off)
        fparts.append(feats[c].astype(ftype))
        cparts.append(block[r, c])
    np.cumsum(ptr, out=ptr)
    cat = (lambda parts, dt: np.concatenate(parts) if parts else np.zeros(0, dtype=dt))
    return listed.astype(np.uint8), ptr, cat(fparts, ftype), cat(cparts, np.uint8)


@njit(cache=True)
def _sibling_in_call(starts, ends, sib_starts, sib_ends, parent_slot):
    """Per node that derives its histograms from its parent's
    (``parent_slot >= 0``): the position in this call of its sibling (the
    node holding rows ``sib_starts:sib_ends``, non-empty), or -1."""
    n_nodes = starts.shape[0]
    out = np.full(n_nodes, -1, dtype=np.int64)
    order = np.argsort(starts)
    for j in range(n_nodes):
        if parent_slot[j] < 0 or sib_ends[j] <= sib_starts[j]:
            continue
        lo = 0
        hi = n_nodes
        while lo < hi:          # first node starting at or after the sibling's start
            mid = (lo + hi) // 2
            if starts[order[mid]] < sib_starts[j]:
                lo = mid + 1
            else:
                hi = mid
        while lo < n_nodes and starts[order[lo]] == sib_starts[j]:
            k = order[lo]
            if ends[k] == sib_ends[j] and k != j:
                out[j] = k
                break
            lo += 1
    return out


@njit(cache=True, nogil=True)
def _build_run(H, C, Xb, rows, rs, re, feat_of, base_of, n_bins, default_bin, listed, n_feat,
               sp_ptr, sp_feat, sp_code, ycls, yw, is_clf, S):
    """Add rows ``rows[rs:re]`` to the histograms of features ``feat_of``
    (each from row ``base_of`` of ``H``/``C``, zeros), the features grouped
    by how they are added (:func:`_add_kind`)."""
    m = feat_of.shape[0]
    for kind in range(3):
        n_sel = 0
        for q in range(m):
            if _add_kind(default_bin, listed, feat_of[q]) == kind:
                n_sel += 1
        if n_sel == 0:
            continue
        feat = np.empty(n_sel, dtype=np.int64)
        fbase = np.empty(n_sel, dtype=np.int64)
        lim = np.empty(n_sel, dtype=np.int64)
        dflt = np.empty(n_sel, dtype=np.int64)
        t = 0
        for q in range(m):
            f = feat_of[q]
            if _add_kind(default_bin, listed, f) == kind:
                feat[t] = f
                fbase[t] = base_of[q]
                lim[t] = n_bins[f]
                dflt[t] = default_bin[f]
                t += 1
        if kind == 0:
            _add_rows(H, C, Xb, rows, rs, re, feat, fbase, lim, ycls, yw, is_clf)
        elif kind == 1:
            _add_rows_skipping(H, C, Xb, rows, rs, re, feat, fbase, lim, dflt, ycls, yw, is_clf, S)
        else:
            _add_row_entries(H, C, rows, rs, re, feat, fbase, lim, dflt, n_feat, sp_ptr, sp_feat, sp_code,
                             ycls, yw, is_clf, S)


@njit(cache=True, nogil=True)
def _hist_plan(n_bins, starts, ends, fmask, sib_starts, sib_ends, parent_slot, cache_index, keep,
               n_threads, exact_sums, default_bin, listed, min_samples_leaf):
    """The work of :func:`_hist_search`, planned before its parallel loops (in a
    function of its own: the sequential code of a parallel kernel is compiled
    with the parallel machinery, at several times the cost)."""
    n_nodes = starts.shape[0]
    n_feat = fmask.shape[1]
    pair_node, pair_feat = _open_pairs(starts, ends, fmask, min_samples_leaf)
    n_pairs = pair_node.shape[0]
    # kept histograms, compact: a pair of feature f owns n_bins[f] + 1 rows from
    # index[j, f] on, its bins then its missing bin
    index = np.full((n_nodes, n_feat), -1, dtype=np.int64)
    n_kept = 0
    for i in range(n_pairs):
        if keep[pair_node[i]]:
            index[pair_node[i], pair_feat[i]] = n_kept
            n_kept += n_bins[pair_feat[i]] + 1
    # where each pair's histogram comes from: src, the parent's kept histogram (or -1:
    # built from the node's own rows); derive, the pair of the sibling's own histogram
    # it is the parent's less (or -1: built here); shared, a built pair's slot for
    # phase 2 (or -1)
    sib_of = _sibling_in_call(starts, ends, sib_starts, sib_ends, parent_slot)
    src = np.full(n_pairs, -1, dtype=np.int64)
    own = np.full((n_nodes, n_feat), -1, dtype=np.int64)
    for i in range(n_pairs):
        j = pair_node[i]
        if parent_slot[j] >= 0:
            src[i] = cache_index[parent_slot[j], pair_feat[i]]
        if src[i] < 0:
            own[j, pair_feat[i]] = i
    derive = np.full(n_pairs, -1, dtype=np.int64)
    shared = np.full(n_pairs, -1, dtype=np.int64)
    n_shared = 0
    for i in range(n_pairs):
        j = pair_node[i]
        if src[i] >= 0 and sib_of[j] >= 0 and own[sib_of[j], pair_feat[i]] >= 0:
            d = own[sib_of[j], pair_feat[i]]
            derive[i] = d
            shared[d] = n_shared
            n_shared += n_bins[pair_feat[i]] + 1
    # phase 1: the building pairs, in groups of one node and row source (its own rows or
    # its sibling's; runs in pair order).  A group is built in runs of its features
    # (:func:`_pair_units`), or in blocks of its rows, each block all the group's
    # features, the blocks summed after: the pairs added from the rows' lists (a row's
    # list is walked once for all of them), and, where every sum is exact, a group too
    # large for its feature runs to share out over the threads.  Blocks are used only
    # where sums are exact (lists are), so the sums do not depend on the cut.
    bp = np.flatnonzero(derive < 0)
    n_bp = bp.shape[0]
    g_first = np.empty(n_bp + 1, dtype=np.int64)
    grp = np.empty(n_bp, dtype=np.int64)
    n_grp = 0
    for t in range(n_bp):
        i = bp[t]
        if t == 0 or pair_node[i] != pair_node[bp[t - 1]] or (src[i] >= 0) != (src[bp[t - 1]] >= 0):
            g_first[n_grp] = t
            n_grp += 1
        grp[t] = n_grp - 1
    g_first[n_grp] = n_bp
    g_rows = np.empty(n_grp, dtype=np.int64)
    g_dense = np.zeros(n_grp, dtype=np.int64)      # pairs not added from the lists
    g_listed = np.zeros(n_grp, dtype=np.int64)
    total = 0
    for g in range(n_grp):
        j = pair_node[bp[g_first[g]]]
        g_rows[g] = sib_ends[j] - sib_starts[j] if src[bp[g_first[g]]] >= 0 else ends[j] - starts[j]
        for t in range(g_first[g], g_first[g + 1]):
            if _add_kind(default_bin, listed, pair_feat[bp[t]]) == 2:
                g_listed[g] += 1
            else:
                g_dense[g] += 1
        total += g_rows[g] * g_dense[g]
    part = max(1, total // (BLOCKS_PER_THREAD * n_threads))
    g_blocks = np.zeros(n_grp, dtype=np.int64)     # 0: feature runs (and the lists, if any, apart)
    g_whole = np.zeros(n_grp, dtype=np.uint8)      # the whole group in row blocks
    for g in range(n_grp):
        if exact_sums and n_threads > 1 and g_dense[g] > 0:
            wanted = -(-(g_rows[g] * g_dense[g]) // part)
            runs = max(1, g_dense[g] // ROW_PASS_FEATURES)
            nb = min(n_threads, g_rows[g] // BLOCK_ROWS, -(-wanted // runs))
            if nb >= 2:
                g_blocks[g] = nb
                g_whole[g] = 1
        if g_whole[g] == 0 and g_listed[g] > 0:
            g_blocks[g] = max(1, min(n_threads, g_rows[g] // BLOCK_ROWS))
    in_blocks = np.zeros(n_bp, dtype=np.uint8)
    for t in range(n_bp):
        g = grp[t]
        if g_whole[g] or (g_blocks[g] > 0 and _add_kind(default_bin, listed, pair_feat[bp[t]]) == 2):
            in_blocks[t] = 1
    # feature runs ...
    b_pair = bp[in_blocks == 0]
    b_node = pair_node[b_pair]
    unit_lo, unit_hi = _pair_units(b_node, starts, ends, n_threads)
    n_runs = unit_lo.shape[0]
    # ... and row blocks: the groups' pairs in row blocks, a region per (group, block)
    l_pair = bp[in_blocks == 1]
    l_grp = grp[in_blocks == 1]
    n_l = l_pair.shape[0]
    lg_first = np.empty(n_l + 1, dtype=np.int64)
    lg_of = np.empty(n_l + 1, dtype=np.int64)        # the group of each block group
    n_g = 0
    for t in range(n_l):
        if t == 0 or l_grp[t] != l_grp[t - 1]:
            lg_first[n_g] = t
            lg_of[n_g] = l_grp[t]
            n_g += 1
    lg_first[n_g] = n_l
    l_base = np.empty(n_l, dtype=np.int64)
    lg_size = np.empty(n_g, dtype=np.int64)
    lg_off = np.empty(n_g, dtype=np.int64)
    total = 0
    n_units = 0
    for h in range(n_g):
        size = 0
        for t in range(lg_first[h], lg_first[h + 1]):
            l_base[t] = size
            size += n_bins[pair_feat[l_pair[t]]] + 1
        lg_size[h] = size
        lg_off[h] = total
        total += g_blocks[lg_of[h]] * size
        n_units += g_blocks[lg_of[h]]
    u_group = np.empty(n_units, dtype=np.int64)
    u_block = np.empty(n_units, dtype=np.int64)
    u = 0
    for h in range(n_g):
        for blk in range(g_blocks[lg_of[h]]):
            u_group[u] = h
            u_block[u] = blk
            u += 1
    return (pair_node, pair_feat, index, n_kept, src, derive, shared, n_shared, b_pair, b_node, unit_lo, unit_hi,
            l_pair, l_base, lg_first, lg_of, lg_size, lg_off, n_g, g_blocks, u_group, u_block, total)


@njit(cache=True, nogil=True)
def _sum_blocks(PH, PC, n_g, lg_off, lg_size, g_blocks, lg_of, l_pair, lg_first, l_base, shared, LH, LC,
                pair_feat, n_bins, S):
    """The row blocks of each group of :func:`_hist_search` summed (into its
    first region), the histograms a sibling derives from copied out."""
    for h in range(n_g):
        o = lg_off[h]
        size = lg_size[h]
        for blk in range(1, g_blocks[lg_of[h]]):
            ob = o + blk * size
            for r in range(size):
                PC[o + r] += PC[ob + r]
                for k in range(S):
                    PH[o + r, k] += PH[ob + r, k]
        _copy_shared(l_pair[lg_first[h]:lg_first[h + 1]], _plus(l_base[lg_first[h]:lg_first[h + 1]], o), PH, PC, shared,
                     LH, LC, pair_feat, n_bins, S)


@njit(cache=True, nogil=True)
def _derived_pairs(n_nodes, pair_node, derive, shared):
    """Per node, the pairs of :func:`_hist_search` that derive their
    histograms from a sibling's (``d_pair[d_lo[j]:d_lo[j + 1]]``) and where
    the sibling's histogram lies (``d_off``)."""
    n_pairs = pair_node.shape[0]
    d_lo = np.zeros(n_nodes + 1, dtype=np.int64)
    for i in range(n_pairs):
        if derive[i] >= 0:
            d_lo[pair_node[i] + 1] += 1
    for j in range(n_nodes):
        d_lo[j + 1] += d_lo[j]
    d_pair = np.empty(d_lo[n_nodes], dtype=np.int64)
    d_off = np.empty(d_lo[n_nodes], dtype=np.int64)
    fill = d_lo[:n_nodes].copy()
    for i in range(n_pairs):
        if derive[i] >= 0:
            d_pair[fill[pair_node[i]]] = i
            d_off[fill[pair_node[i]]] = shared[derive[i]]
            fill[pair_node[i]] += 1
    return d_lo, d_pair, d_off


def _hist_search(Xb, n_bins, rows, starts, ends, fmask, ycls, yw, is_clf, S, crit, lam,
                 w_total, min_samples_leaf, min_weight_leaf, sib_starts, sib_ends,
                 parent_slot, cache_index, cache_hist, cache_cnt, keep, node_w, node_imp, n_threads,
                 exact_sums, default_bin, listed, sp_ptr, sp_feat, sp_code):
    """:func:`best_splits_hist` on ``n_threads`` threads, in two phases.

    1. The pairs that add rows, in runs (:func:`_pair_units`) in parallel
       (:func:`_hist_tasks`): a node's own rows, or, for a node deriving its
       histograms whose sibling is not in this call (or does not scan the
       feature), the sibling's rows.  A histogram that a sibling derives its
       own from is kept for phase 2 (at most the kept histograms' memory: only
       nodes whose parent kept its histograms derive).
    2. The pairs of nodes deriving their histograms from a sibling's built
       in phase 1 (parent's kept histogram minus the sibling's), node by
       node in parallel (:func:`_hist_tasks` again): those rows are added
       once for both children.
    Every pair is then scanned; the sums of each histogram are the ones of
    adding its rows in order, whichever phase builds it.

    The steps are separate kernels called from here, not one kernel: numba
    compiles a kernel together with every kernel it calls, again for each
    caller and for each parallel loop, and a parallel kernel's own code with
    the parallel machinery, so one kernel holding the whole search took
    several times as long to compile (the calls cost microseconds)."""
    n_nodes = starts.shape[0]
    w_node, imp_node = _node_weights_of(rows, starts, ends, ycls, yw, is_clf, S, crit, lam, node_w, node_imp)
    (pair_node, pair_feat, index, n_kept, src, derive, shared, n_shared, b_pair, b_node, unit_lo, unit_hi,
     l_pair, l_base, lg_first, lg_of, lg_size, lg_off, n_g, g_blocks, u_group, u_block,
     total) = _hist_plan(n_bins, starts, ends, fmask, sib_starts, sib_ends, parent_slot, cache_index, keep,
                         n_threads, exact_sums, default_bin, listed, min_samples_leaf)
    n_pairs = pair_node.shape[0]
    gain = np.full(n_pairs, -np.inf)
    where = np.zeros(n_pairs, dtype=np.int32)
    mls = np.zeros(n_pairs, dtype=np.uint8)
    kept_hist = np.empty((n_kept, S))
    kept_cnt = np.empty(n_kept, dtype=np.int32)
    LH = np.empty((n_shared, S))
    LC = np.empty(n_shared, dtype=np.int64)
    PH = np.zeros((total, S))
    PC = np.zeros(total, dtype=np.int64)
    d_lo, d_pair, d_off = _derived_pairs(n_nodes, pair_node, derive, shared)
    args = (Xb, n_bins, rows, starts, ends, ycls, yw, is_clf, S, crit, lam, w_total, min_samples_leaf,
            min_weight_leaf, sib_starts, sib_ends, cache_hist, cache_cnt, default_bin, listed, sp_ptr, sp_feat,
            sp_code, w_node, imp_node, pair_node, pair_feat, index, src, shared, b_pair, b_node, unit_lo, unit_hi,
            l_pair, l_base, lg_first, lg_of, lg_size, lg_off, g_blocks, u_group, u_block, d_lo, d_pair, d_off,
            kept_hist, kept_cnt, LH, LC, PH, PC, gain, where, mls)
    _hist_tasks(1, *args)
    _sum_blocks(PH, PC, n_g, lg_off, lg_size, g_blocks, lg_of, l_pair, lg_first, l_base, shared, LH, LC,
                pair_feat, n_bins, S)
    _hist_tasks(2, *args)
    best_gain, best_feat, best_where, best_ml = _best_per_node(n_nodes, pair_node, pair_feat, gain, where, mls)
    return best_gain, best_feat, best_where, best_ml, index, kept_hist, kept_cnt


@njit(cache=True, parallel=prange_only(), nogil=True)
def _hist_tasks(phase, Xb, n_bins, rows, starts, ends, ycls, yw, is_clf, S, crit, lam, w_total, min_samples_leaf,
                min_weight_leaf, sib_starts, sib_ends, cache_hist, cache_cnt, default_bin, listed, sp_ptr, sp_feat,
                sp_code, w_node, imp_node, pair_node, pair_feat, index, src, shared, b_pair, b_node, unit_lo,
                unit_hi, l_pair, l_base, lg_first, lg_of, lg_size, lg_off, g_blocks, u_group, u_block, d_lo,
                d_pair, d_off, kept_hist, kept_cnt, LH, LC, PH, PC, gain, where, mls):
    """The parallel loop of :func:`_hist_search`'s ``phase``: 1, the feature
    runs (built, kept where a sibling derives its own from them, scanned) and
    the row blocks; 2, the scans of the groups built in row blocks and of the
    nodes deriving their histograms.  Both phases are one kernel so that the
    kernels they call are compiled into one parallel loop, not two."""
    n_feat = default_bin.shape[0]
    n_nodes = starts.shape[0]
    n_runs = unit_lo.shape[0]
    n_units = u_group.shape[0]
    n_g = lg_size.shape[0]
    n_tasks = n_runs + n_units if phase == 1 else n_g + n_nodes
    for task in prange(n_tasks):
        if phase == 1:
            if task < n_runs:
                # a feature run: built, kept where a sibling derives its own from it, and scanned
                lo = unit_lo[task]
                m = unit_hi[task] - lo
                j = b_node[lo]
                pairs = b_pair[lo:lo + m]
                feats = pair_feat[pairs]
                base = np.empty(m, dtype=np.int64)
                size = 0
                for q in range(m):
                    base[q] = size
                    size += n_bins[feats[q]] + 1
                H = np.zeros((size, S))
                C = np.zeros(size, dtype=np.int64)
                # a run's pairs add the node's own rows or the sibling's, runs of each in pair order
                q = 0
                while q < m:
                    from_sibling = src[pairs[q]] >= 0
                    e = q
                    while e < m and (src[pairs[e]] >= 0) == from_sibling:
                        e += 1
                    rs = sib_starts[j] if from_sibling else starts[j]
                    re = sib_ends[j] if from_sibling else ends[j]
                    _build_run(H, C, Xb, rows, rs, re, feats[q:e], base[q:e], n_bins, default_bin, listed, n_feat,
                               sp_ptr, sp_feat, sp_code, ycls, yw, is_clf, S)
                    q = e
                _copy_shared(pairs, base, H, C, shared, LH, LC, pair_feat, n_bins, S)
                _scan_pairs(pairs, base, H, C, pair_node, pair_feat, n_bins, src, cache_hist, cache_cnt, index,
                            kept_hist, kept_cnt, starts, ends, w_node, imp_node, w_total, is_clf, S, crit, lam,
                            min_samples_leaf, min_weight_leaf, gain, where, mls)
            else:
                # a row block of a group: built into its region
                h = u_group[task - n_runs]
                blk = u_block[task - n_runs]
                nblk = g_blocks[lg_of[h]]
                pairs = l_pair[lg_first[h]:lg_first[h + 1]]
                j = pair_node[pairs[0]]
                from_sibling = src[pairs[0]] >= 0
                rs = sib_starts[j] if from_sibling else starts[j]
                n_r = (sib_ends[j] if from_sibling else ends[j]) - rs
                _build_run(PH, PC, Xb, rows, rs + n_r * blk // nblk, rs + n_r * (blk + 1) // nblk, pair_feat[pairs],
                           _plus(l_base[lg_first[h]:lg_first[h + 1]], lg_off[h] + blk * lg_size[h]), n_bins, default_bin,
                           listed, n_feat, sp_ptr, sp_feat, sp_code, ycls, yw, is_clf, S)
        else:
            if task < n_g:
                pairs = l_pair[lg_first[task]:lg_first[task + 1]]
                offs = _plus(l_base[lg_first[task]:lg_first[task + 1]], lg_off[task])
                H = PH
                C = PC
            else:
                j = task - n_g
                pairs = d_pair[d_lo[j]:d_lo[j + 1]]
                offs = d_off[d_lo[j]:d_lo[j + 1]]
                H = LH
                C = LC
            if pairs.shape[0] > 0:
                _scan_pairs(pairs, offs, H, C, pair_node, pair_feat, n_bins, src, cache_hist, cache_cnt, index,
                            kept_hist, kept_cnt, starts, ends, w_node, imp_node, w_total, is_clf, S, crit, lam,
                            min_samples_leaf, min_weight_leaf, gain, where, mls)


@njit(cache=True, nogil=True)
def _plus(a, c):
    """``a + c`` as a new array (an array expression inside a ``prange`` body
    needs numba's array-expression parfors, which :func:`.threads.prange_only`
    leaves out)."""
    out = np.empty_like(a)
    for i in range(a.shape[0]):
        out[i] = a[i] + c
    return out


@njit(cache=True, nogil=True)
def _copy_shared(pairs, offs, H, C, shared, LH, LC, pair_feat, n_bins, S):
    """Copy the built histograms of ``pairs`` (``H``/``C`` from row
    ``offs``) that a sibling derives its own from into ``LH``/``LC`` (at
    ``shared``)."""
    for q in range(pairs.shape[0]):
        d = shared[pairs[q]]
        if d >= 0:
            for b in range(n_bins[pair_feat[pairs[q]]] + 1):
                LC[d + b] = C[offs[q] + b]
                for k in range(S):
                    LH[d + b, k] = H[offs[q] + b, k]


@njit(cache=True, nogil=True)
def _scan_pairs(pairs, offs, H, C, pair_node, pair_feat, n_bins, src, cache_hist, cache_cnt, index,
                kept_hist, kept_cnt, starts, ends, w_node, imp_node, w_total, is_clf, S, crit, lam,
                min_samples_leaf, min_weight_leaf, gain, where, mls):
    """Assemble, keep (where the node keeps its histograms) and scan the
    histograms of ``pairs``, given the histogram of rows each added
    (``H``/``C`` from row ``offs``): a pair's own (``src`` -1), or its
    sibling's, which the parent's kept histogram (from ``src``) less gives."""
    hist = np.empty((MISSING_BIN + 1, S))
    cnt = np.empty(MISSING_BIN + 1, dtype=np.int64)
    tot = np.empty(S)
    left = np.empty(S)
    right = np.empty(S)
    lm = np.empty(S)
    rm = np.empty(S)
    prox = np.empty(2 * (MISSING_BIN + 1))
    for q in range(pairs.shape[0]):
        i = pairs[q]
        j = pair_node[i]
        f = pair_feat[i]
        nb = n_bins[f]
        sr = src[i]
        o = offs[q]
        # bins 0..nb-1, then the missing bin (compact row nb, histogram row MISSING_BIN)
        for b in range(nb + 1):
            hb = b if b < nb else MISSING_BIN
            if sr >= 0:
                cnt[hb] = cache_cnt[sr + b] - C[o + b]
                for k in range(S):
                    hist[hb, k] = cache_hist[sr + b, k] - H[o + b, k]
            else:
                cnt[hb] = C[o + b]
                for k in range(S):
                    hist[hb, k] = H[o + b, k]
        slot = index[j, f]
        if slot >= 0:
            for b in range(nb + 1):
                hb = b if b < nb else MISSING_BIN
                kept_cnt[slot + b] = cnt[hb]
                for k in range(S):
                    kept_hist[slot + b, k] = hist[hb, k]
        g, b, ml = _scan_hist_fast(hist, cnt, nb, ends[j] - starts[j], w_node[j], imp_node[j],
                                   w_total, is_clf, S, crit, lam, min_samples_leaf, min_weight_leaf,
                                   tot, left, right, lm, rm, prox)
        gain[i] = g
        where[i] = b
        mls[i] = ml


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


@njit(cache=True, nogil=True)
def _exact_pair(X, rows, s, e, f, ycls, yw, is_clf, S, crit, lam, w_total, min_samples_leaf,
                min_weight_leaf, w_node, imp_node, min_gap, threshold_rule):
    """The best exact split of one (node, feature) pair of :func:`best_splits_exact`:
    ``(gain, threshold, missing_left)`` (a function of its own: the parallel
    loop's body compiles with the parallel machinery, at several times the cost)."""
    n = e - s
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
    return best, best_thr, best_ml


@njit(cache=True, parallel=prange_only(), nogil=True)
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
        gains[i], thrs[i], mls[i] = _exact_pair(X, rows, starts[j], ends[j], pair_feat[i], ycls, yw, is_clf, S,
                                                crit, lam, w_total, min_samples_leaf, min_weight_leaf,
                                                w_nodes[j], imp_nodes[j], min_gap, threshold_rule)
    return _best_per_node(n_nodes, pair_node, pair_feat, gains, thrs, mls)
