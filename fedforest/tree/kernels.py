"""Numba kernels over flat arrays for level-wise tree growth and prediction.

All functions are module-level ``njit(cache=True)``; loops over trees and levels
stay in Python.  Conventions shared by every kernel:

* ``rows``: int32 row indices grouped by node; node ``j`` of a level owns
  ``rows[starts[j]:ends[j]]`` in ascending row order.
* Label statistics: classification uses ``ycls`` (class code per row) and
  ``yw[:, 0]`` (row weight); regression uses ``yw`` with three columns
  ``(w, w*y, w*y*y)``.  ``S`` is the number of statistics per row
  (``n_classes`` or 3).
* ``crit``: 0 = gini, 1 = entropy, 2 = squared error.
* Gains are the weighted impurity decrease of scikit-learn,
  ``w_node / w_total * (imp - w_l / w_node * imp_l - w_r / w_node * imp_r)``.
  When a node saw no missing values, missing values later follow the larger
  child (right on a tie), as in scikit-learn.
  Candidates are scanned in increasing feature then threshold order and only a
  strictly larger gain replaces the best one, so ties resolve to the lowest
  feature index and the lowest threshold.
"""
import numpy as np
from numba import njit

GINI = 0
ENTROPY = 1
SQUARED_ERROR = 2

MISSING_BIN = 255          # histogram code of a missing (NaN) value
MAX_BINS = 255             # non-missing bins available per feature
FEATURE_THRESHOLD = 1e-7   # two values closer than this are not split apart (exact mode)


@njit(cache=True)
def impurity(stats, w, crit):
    """Impurity of a node from its statistics vector and total weight."""
    if w <= 0.0:
        return 0.0
    if crit == GINI:
        s = 0.0
        for k in range(stats.shape[0]):
            p = stats[k] / w
            s += p * p
        return 1.0 - s
    if crit == ENTROPY:
        s = 0.0
        for k in range(stats.shape[0]):
            if stats[k] > 0.0:
                p = stats[k] / w
                s -= p * np.log2(p)
        return s
    mean = stats[1] / w
    return stats[2] / w - mean * mean


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


@njit(cache=True)
def node_statistics(rows, starts, ends, ycls, yw, is_clf, S, crit):
    """Per-node label statistics, weight, impurity and distinct-row count."""
    n_nodes = starts.shape[0]
    stats = np.zeros((n_nodes, S))
    w = np.zeros(n_nodes)
    imp = np.zeros(n_nodes)
    count = np.zeros(n_nodes, dtype=np.int64)
    acc = np.zeros(S)
    for j in range(n_nodes):
        acc[:] = 0.0
        _accumulate(acc, rows, starts[j], ends[j], ycls, yw, is_clf)
        stats[j, :] = acc
        w[j] = _weight(acc, is_clf)
        imp[j] = impurity(acc, w[j], crit)
        count[j] = ends[j] - starts[j]
    return stats, w, imp, count


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
def best_splits_hist(Xb, n_bins, rows, starts, ends, fmask, ycls, yw, is_clf, S, crit,
                     w_total, min_samples_leaf, min_weight_leaf):
    """Best histogram split of every open node over the allowed local features.

    ``Xb`` is the (n_rows, n_features) uint8 bin code matrix (``MISSING_BIN`` for
    NaN), ``n_bins[f]`` the number of non-missing bins of feature ``f`` and
    ``fmask[j, f]`` whether node ``j`` may split on feature ``f``.

    Returns ``gain, feature, bin, missing_left`` per node; ``feature`` is -1 and
    ``gain`` -inf where no allowed split exists.  ``bin == n_bins[f] - 1`` with
    missing values present means "non-missing left, missing right".
    """
    n_nodes = starts.shape[0]
    n_feat = Xb.shape[1]
    best_gain = np.full(n_nodes, -np.inf)
    best_feat = np.full(n_nodes, -1, dtype=np.int32)
    best_bin = np.zeros(n_nodes, dtype=np.int32)
    best_ml = np.zeros(n_nodes, dtype=np.uint8)
    hist = np.zeros((MISSING_BIN + 1, S))
    cnt = np.zeros(MISSING_BIN + 1, dtype=np.int64)
    node = np.zeros(S)
    tot = np.zeros(S)
    left = np.zeros(S)
    right = np.zeros(S)
    lm = np.zeros(S)
    rm = np.zeros(S)
    for j in range(n_nodes):
        s = starts[j]
        e = ends[j]
        if e - s < 2 * min_samples_leaf or e - s < 2:
            continue
        node[:] = 0.0
        _accumulate(node, rows, s, e, ycls, yw, is_clf)
        w_node = _weight(node, is_clf)
        imp_node = impurity(node, w_node, crit)
        for f in range(n_feat):
            if fmask[j, f] == 0:
                continue
            nb = n_bins[f]
            col = Xb[:, f]
            if is_clf:
                for i in range(s, e):
                    r = rows[i]
                    b = col[r]
                    cnt[b] += 1
                    hist[b, ycls[r]] += yw[r, 0]
            else:
                for i in range(s, e):
                    r = rows[i]
                    b = col[r]
                    cnt[b] += 1
                    hist[b, 0] += yw[r, 0]
                    hist[b, 1] += yw[r, 1]
                    hist[b, 2] += yw[r, 2]
            n_miss = cnt[MISSING_BIN]
            tot[:] = 0.0
            for b in range(nb):
                if cnt[b] > 0:
                    for k in range(S):
                        tot[k] += hist[b, k]
            n_nonmiss = (e - s) - n_miss
            left[:] = 0.0
            cl = 0
            for b in range(nb):
                if cnt[b] == 0:
                    continue
                for k in range(S):
                    left[k] += hist[b, k]
                cl += cnt[b]
                cr = n_nonmiss - cl
                for k in range(S):
                    right[k] = tot[k] - left[k]
                if n_miss == 0:
                    if cr == 0:
                        break
                    g = _gain(left, right, cl, cr, w_node, imp_node, w_total, is_clf, crit,
                              min_samples_leaf, min_weight_leaf)
                    if g > best_gain[j]:
                        best_gain[j] = g
                        best_feat[j] = f
                        best_bin[j] = b
                        best_ml[j] = 1 if cl > cr else 0
                else:
                    # missing values go right
                    for k in range(S):
                        rm[k] = right[k] + hist[MISSING_BIN, k]
                    g = _gain(left, rm, cl, cr + n_miss, w_node, imp_node, w_total, is_clf,
                              crit, min_samples_leaf, min_weight_leaf)
                    if g > best_gain[j]:
                        best_gain[j] = g
                        best_feat[j] = f
                        best_bin[j] = b if cr > 0 else nb - 1
                        best_ml[j] = 0
                    if cr == 0:
                        break
                    # missing values go left
                    for k in range(S):
                        lm[k] = left[k] + hist[MISSING_BIN, k]
                    g = _gain(lm, right, cl + n_miss, cr, w_node, imp_node, w_total, is_clf,
                              crit, min_samples_leaf, min_weight_leaf)
                    if g > best_gain[j]:
                        best_gain[j] = g
                        best_feat[j] = f
                        best_bin[j] = b
                        best_ml[j] = 1
            # reset only the bins this node touched
            for i in range(s, e):
                b = col[rows[i]]
                if cnt[b] != 0:
                    cnt[b] = 0
                    for k in range(S):
                        hist[b, k] = 0.0
    return best_gain, best_feat, best_bin, best_ml


@njit(cache=True)
def best_splits_exact(X, rows, starts, ends, fmask, ycls, yw, is_clf, S, crit,
                      w_total, min_samples_leaf, min_weight_leaf):
    """Best exact split of every open node, thresholds as scikit-learn computes them.

    ``X`` holds float32 feature values (NaN = missing).  A threshold is the
    midpoint of two consecutive distinct values (falling back to the lower value
    when the midpoint rounds up to the upper one); ``+inf`` separates all
    non-missing values (left) from missing ones (right).
    Returns ``gain, feature, threshold, missing_left`` per node.
    """
    n_nodes = starts.shape[0]
    n_feat = X.shape[1]
    best_gain = np.full(n_nodes, -np.inf)
    best_feat = np.full(n_nodes, -1, dtype=np.int32)
    best_thr = np.zeros(n_nodes)
    best_ml = np.zeros(n_nodes, dtype=np.uint8)
    node = np.zeros(S)
    tot = np.zeros(S)
    miss = np.zeros(S)
    left = np.zeros(S)
    right = np.zeros(S)
    lm = np.zeros(S)
    rm = np.zeros(S)
    for j in range(n_nodes):
        s = starts[j]
        e = ends[j]
        n = e - s
        if n < 2 * min_samples_leaf or n < 2:
            continue
        node[:] = 0.0
        _accumulate(node, rows, s, e, ycls, yw, is_clf)
        w_node = _weight(node, is_clf)
        imp_node = impurity(node, w_node, crit)
        vals = np.empty(n, dtype=np.float64)
        nm_rows = np.empty(n, dtype=np.int32)
        for f in range(n_feat):
            if fmask[j, f] == 0:
                continue
            n_nonmiss = 0
            miss[:] = 0.0
            tot[:] = 0.0
            for i in range(s, e):
                r = rows[i]
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
            left[:] = 0.0
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
                    if g > best_gain[j]:
                        best_gain[j] = g
                        best_feat[j] = f
                        best_thr[j] = thr
                        best_ml[j] = 1 if cl > cr else 0
                    continue
                for k in range(S):
                    rm[k] = right[k] + miss[k]
                g = _gain(left, rm, cl, cr + n_miss, w_node, imp_node, w_total, is_clf, crit,
                          min_samples_leaf, min_weight_leaf)
                if g > best_gain[j]:
                    best_gain[j] = g
                    best_feat[j] = f
                    best_thr[j] = thr
                    best_ml[j] = 0
                if last:
                    break
                for k in range(S):
                    lm[k] = left[k] + miss[k]
                g = _gain(lm, right, cl + n_miss, cr, w_node, imp_node, w_total, is_clf, crit,
                          min_samples_leaf, min_weight_leaf)
                if g > best_gain[j]:
                    best_gain[j] = g
                    best_feat[j] = f
                    best_thr[j] = thr
                    best_ml[j] = 1
    return best_gain, best_feat, best_thr, best_ml


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
def apply_partition(rows, starts, ends, bits):
    """Stable in-place partition of each node segment by its left/right bits.

    ``bits`` is the concatenation, over the listed segments, of one uint8 per
    row (1 = left).  Returns the number of left rows of each segment.
    """
    n_left = np.zeros(starts.shape[0], dtype=np.int64)
    tmp = np.empty(rows.shape[0], dtype=rows.dtype)
    off = 0
    for j in range(starts.shape[0]):
        s = starts[j]
        e = ends[j]
        nl = 0
        for i in range(s, e):
            if bits[off + i - s] == 1:
                nl += 1
        li = s
        ri = s + nl
        for i in range(s, e):
            if bits[off + i - s] == 1:
                tmp[li] = rows[i]
                li += 1
            else:
                tmp[ri] = rows[i]
                ri += 1
        for i in range(s, e):
            rows[i] = tmp[i]
        n_left[j] = nl
        off += e - s
    return n_left


@njit(cache=True)
def apply_tree(X, children_left, children_right, feature, threshold, missing_left):
    """Leaf index of every row of ``X`` in one complete tree."""
    n = X.shape[0]
    out = np.empty(n, dtype=np.int32)
    for i in range(n):
        node = 0
        while children_left[node] >= 0:
            v = X[i, feature[node]]
            if np.isnan(v):
                go_left = missing_left[node] == 1
            else:
                go_left = v <= threshold[node]
            node = children_left[node] if go_left else children_right[node]
        out[i] = node
    return out


@njit(cache=True)
def partial_leaf_bitmaps(X, children_left, children_right, feature, threshold, missing_left,
                         leaves):
    """Per-leaf row sets of one partial tree (paper Algorithm 3), as uint64 bit words.

    ``feature[node] >= 0`` marks a split this party owns (local column index);
    ``-1`` a split owned elsewhere, where rows follow both branches; ``-2`` a
    leaf.  Returns ``(explicit, words)``: ``explicit[k]`` is 0 when no ancestor
    of ``leaves[k]`` is owned here (its row set is "all rows", nothing is
    stored) and otherwise ``words[k]`` holds its row bitmap, bit ``i % 64`` of
    word ``i // 64`` for row ``i``.
    """
    n = X.shape[0]
    n_nodes = children_left.shape[0]
    nw = (n + 63) // 64
    # a node is constrained when some ancestor split is owned by this party
    constrained = np.zeros(n_nodes, dtype=np.uint8)
    slot = np.full(n_nodes, -1, dtype=np.int64)
    n_slots = 0
    # nodes are numbered so that parents come before children
    for node in range(n_nodes):
        l = children_left[node]
        if l < 0:
            continue
        r = children_right[node]
        c = 1 if (constrained[node] == 1 or feature[node] >= 0) else 0
        constrained[l] = c
        constrained[r] = c
        if c == 1:
            slot[l] = n_slots
            slot[r] = n_slots + 1
            n_slots += 2
    bits = np.zeros((n_slots, nw), dtype=np.uint64)
    one = np.uint64(1)
    for node in range(n_nodes):
        l = children_left[node]
        if l < 0 or constrained[l] == 0:
            continue
        r = children_right[node]
        sl = slot[l]
        sr = slot[r]
        ps = slot[node]
        if feature[node] < 0:
            # not ours: both children inherit the parent's rows
            for w in range(nw):
                bits[sl, w] = bits[ps, w]
                bits[sr, w] = bits[ps, w]
            continue
        f = feature[node]
        thr = threshold[node]
        ml = missing_left[node] == 1
        for w in range(nw):
            if ps >= 0:
                parent = bits[ps, w]
                if parent == 0:
                    continue
            else:
                parent = ~np.uint64(0)
            lw = np.uint64(0)
            base = w * 64
            top = min(64, n - base)
            for b in range(top):
                v = X[base + b, f]
                if np.isnan(v):
                    gl = ml
                else:
                    gl = v <= thr
                if gl:
                    lw |= one << np.uint64(b)
            if top < 64:
                parent &= (one << np.uint64(top)) - one
            bits[sl, w] = parent & lw
            bits[sr, w] = parent & ~lw
    n_leaves = leaves.shape[0]
    explicit = np.zeros(n_leaves, dtype=np.uint8)
    n_exp = 0
    for k in range(n_leaves):
        if constrained[leaves[k]] == 1:
            explicit[k] = 1
            n_exp += 1
    words = np.empty((n_exp, nw), dtype=np.uint64)
    e = 0
    for k in range(n_leaves):
        if explicit[k] == 1:
            words[e, :] = bits[slot[leaves[k]], :]
            e += 1
    return explicit, words


@njit(cache=True)
def intersect_leaf_bitmaps(n_rows, explicit_list_flat, words_flat, word_offsets, n_parties,
                           n_leaves):
    """Master side of Algorithm 4: intersect the parties' leaf row sets.

    ``explicit_list_flat`` is (n_parties, n_leaves) uint8; ``words_flat`` stacks
    every party's explicit bitmaps in leaf order, party ``p`` starting at row
    ``word_offsets[p]``.  Returns the leaf position (index into the leaf list)
    of every row, or -1 where a row did not land in exactly one leaf.
    """
    nw = (n_rows + 63) // 64
    out = np.full(n_rows, -1, dtype=np.int32)
    hits = np.zeros(n_rows, dtype=np.int32)
    acc = np.empty(nw, dtype=np.uint64)
    cursor = word_offsets.copy()
    for k in range(n_leaves):
        acc[:] = ~np.uint64(0)
        for p in range(n_parties):
            if explicit_list_flat[p, k] == 1:
                c = cursor[p]
                for w in range(nw):
                    acc[w] &= words_flat[c, w]
                cursor[p] += 1
        for w in range(nw):
            a = acc[w]
            if a == 0:
                continue
            base = w * 64
            top = min(64, n_rows - base)
            for b in range(top):
                if (a >> np.uint64(b)) & np.uint64(1):
                    out[base + b] = k
                    hits[base + b] += 1
    for i in range(n_rows):
        if hits[i] != 1:
            out[i] = -1
    return out
