"""Numba kernels of fedforest.tree (criterion, splitter, partitioner, leaf sets, binning), checked against
brute-force numpy/Python references written independently below."""
import numba
import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from fedforest import ForestClassifier
from fedforest.tree import format as tree_format
from fedforest.tree import binning, criterion, impurity, leaf_sets, partitioner, splitter
from fedforest.tree import threads as numba_threads
from fedforest.tree.binning import fit_bins, transform_bins

MISSING = 255
TOL = dict(rtol=1e-9, atol=1e-12)
# name -> (crit code, n_classes); n_classes 0 means regression
TASKS = {"gini2": (0, 2), "gini4": (0, 4), "entropy2": (1, 2), "entropy4": (1, 4), "mse": (2, 0),
         "newton": (3, 0)}
LAM = {3: 1.0}        # the L2 penalty of the Newton criterion in these problems (0 for the others)


# --------------------------------------------------------------------------- references
class Problem:
    """Labels, bootstrap weights and the kernels' (ycls, yw) statistics for one task."""

    def __init__(self, rng, n, task, y=None, w=None):
        self.crit, self.C = TASKS[task]
        self.lam = LAM.get(self.crit, 0.0)
        self.is_clf = self.C > 0
        self.w = rng.integers(0, 4, n).astype(float) if w is None else np.asarray(w, float)
        if self.crit == impurity.NEWTON:
            # gradient boosting: per row hessian h and gradient g, times the row's count;
            # the weight of a node is its hessian sum
            counts = self.w
            self.w = counts * rng.uniform(0.05, 0.25, n)
            self.y = np.round(rng.normal(size=n), 2) if y is None else np.asarray(y, float)
            self.g = counts * self.y
            self.ycls = np.zeros(n, dtype=np.int32)
            self.yw = np.column_stack((self.w, self.g, np.zeros(n)))
            self.S = 3
        elif self.is_clf:
            self.y = rng.integers(0, self.C, n) if y is None else np.asarray(y)
            self.ycls = self.y.astype(np.int32)
            self.yw = np.ascontiguousarray(self.w.reshape(-1, 1))
            self.S = self.C
        else:
            self.y = np.round(rng.normal(size=n), 2) if y is None else np.asarray(y, float)
            self.ycls = np.zeros(n, dtype=np.int32)
            self.yw = np.column_stack((self.w, self.w * self.y, self.w * self.y ** 2))
            self.S = 3
        # what the kernels divide gains by: the total weight, or 2 for Newton (XGBoost's gain)
        self.w_total = 2.0 if self.crit == impurity.NEWTON else float(self.w.sum())

    def impurity(self, idx):
        """Impurity of the rows ``idx`` computed from raw labels and weights."""
        y, w = self.y[idx], self.w[idx]
        W = w.sum()
        if W <= 0:
            return 0.0
        if self.crit == impurity.NEWTON:
            G = self.g[idx].sum()
            return float(-G * G / ((W + self.lam) * W))
        if not self.is_clf:
            mean = np.dot(w, y) / W
            return float(np.dot(w, (y - mean) ** 2) / W)
        p = np.bincount(y, weights=w, minlength=self.C) / W
        if self.crit == 0:
            return float(1.0 - np.sum(p * p))
        p = p[p > 0]
        return float(-np.sum(p * np.log2(p)))

    def gain(self, idx, left, msl, mwl):
        """Weighted impurity decrease of splitting rows ``idx`` by boolean ``left``."""
        li, ri = idx[left], idx[~left]
        wl, wr, W = self.w[li].sum(), self.w[ri].sum(), self.w[idx].sum()
        if li.size < msl or ri.size < msl or wl <= 0 or wr <= 0 or wl < mwl or wr < mwl:
            return -np.inf
        return W / self.w_total * (self.impurity(idx) - wl / W * self.impurity(li)
                                   - wr / W * self.impurity(ri))

    def kernel_args(self):
        return self.ycls, self.yw, self.is_clf, self.S, self.crit, self.lam


def make_segments(rng, w, n_big=3):
    """Rows grouped by node: tiny nodes (1, 0 and 3 rows) then ``n_big`` nodes of
    at least 8 rows; the middle large node is left out of the listed (open) nodes."""
    inbag = rng.permutation(np.flatnonzero(w > 0))
    n = inbag.size
    big = 8 + rng.multinomial(n - 4 - 8 * n_big, np.ones(n_big) / n_big)
    sizes = [1, 0, 3] + big.tolist()
    bounds = np.r_[0, np.cumsum(sizes)]
    rows = np.concatenate([np.sort(inbag[bounds[k]:bounds[k + 1]]) for k in range(len(sizes))])
    listed = [k for k in range(len(sizes)) if k != 3 + n_big // 2]
    starts = bounds[listed].astype(np.int64)
    ends = bounds[np.array(listed) + 1].astype(np.int64)
    return rows.astype(np.int32), starts, ends


def hist_matrix(rng, n, n_bins, miss_rate):
    Xb = np.empty((n, len(n_bins)), dtype=np.uint8, order="F")
    for f, (nb, q) in enumerate(zip(n_bins, miss_rate)):
        Xb[:, f] = rng.integers(0, nb, n)
        Xb[rng.random(n) < q, f] = MISSING
    return Xb


def hist_search(Xb, n_bins, rows, starts, ends, fmask, *args):
    """:func:`splitter.best_splits_hist` with every histogram built from the node's rows."""
    S = args[3]
    return splitter.best_splits_hist(Xb, n_bins, rows, starts, ends, fmask, *args,
                              *splitter.no_subtraction(starts.shape[0], S), *splitter.NO_NODE_STATS)[:4]


def hist_left(xb, b, ml):
    """Rows going left for histogram split (bin b, missing_left ml)."""
    x = xb.astype(int)
    miss = x == MISSING
    return (~miss & (x <= b)) | (miss & (ml == 1))


def hist_candidates(xb, nb):
    """Every threshold bin (including 'none left') and both missing directions."""
    return [hist_left(xb, b, ml) for b in range(-1, nb) for ml in (0, 1)]


def exact_left(x, thr, ml):
    miss = np.isnan(x)
    return (~miss & (x <= thr)) | (miss & (ml == 1))


def exact_thresholds(x):
    """scikit-learn's thresholds: midpoints of consecutive distinct values more
    than 1e-7 apart (lower value if the midpoint rounds to the upper one), plus
    +inf when missing values are present."""
    v = np.unique(x[~np.isnan(x)])
    out = []
    for a, b in zip(v[:-1], v[1:]):
        if b <= a + 1e-7:
            continue
        t = a / 2.0 + b / 2.0
        out.append(a if (t == b or np.isinf(t)) else t)
    if np.isnan(x).any() and v.size:
        out.append(np.inf)
    return out


def exact_candidates(x):
    return [exact_left(x, t, ml) for t in exact_thresholds(x) for ml in (0, 1)]


def check_best_splits(out, prob, rows, starts, ends, fmask, column, candidates, left_of,
                      split_ok, msl, mwl):
    """Kernel's best gain equals the brute-force maximum and its chosen split
    achieves that gain; ``column(f, idx)`` gives the node's values of feature f."""
    gain, feat, split, ml = out
    assert gain.shape == feat.shape == split.shape == ml.shape == starts.shape
    n_checked = 0
    for j in range(starts.size):
        idx = rows[starts[j]:ends[j]]
        ref = max([prob.gain(idx, left, msl, mwl) for f in np.flatnonzero(fmask[j])
                   for left in candidates(column(f, idx), f)], default=-np.inf)
        if ref == -np.inf:
            assert feat[j] == -1 and gain[j] == -np.inf, j
            continue
        n_checked += 1
        f = feat[j]
        assert 0 <= f < fmask.shape[1] and fmask[j, f] == 1, j
        assert split_ok(column(f, idx), f, split[j]), (j, f, split[j])
        assert ml[j] in (0, 1)
        assert np.isclose(gain[j], ref, **TOL), (j, gain[j], ref)
        x = column(f, idx)
        left = left_of(x, split[j], ml[j])
        assert np.isclose(prob.gain(idx, left, msl, mwl), gain[j], **TOL), j
        no_missing = not np.any(x == MISSING) if x.dtype == np.uint8 else not np.isnan(x).any()
        n_left = int(left.sum())
        if no_missing and 2 * n_left != idx.size:
            # unseen missing values follow the larger child, as in scikit-learn
            assert ml[j] == (2 * n_left > idx.size), j
    return n_checked


SEARCH_SETTINGS = [(1, 0.0), (3, 0.0), (1, 5.0)]   # (min_samples_leaf, min_weight_leaf)


def leaf_weight(task, mwl):
    """The setting's least child weight on the task's scale (hessian sums are small)."""
    return mwl / 10.0 if TASKS[task][0] == impurity.NEWTON else mwl


# --------------------------------------------------------------------------- impurity / statistics
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("absent_class", [False, True])
def test_impurity(task, absent_class):
    rng = np.random.default_rng([list(TASKS).index(task), absent_class])
    prob = Problem(rng, 50, task)
    if absent_class and prob.is_clf:
        prob.y[prob.y == 1] = 0
        prob.ycls = prob.y.astype(np.int32)
    idx = np.arange(50)
    if prob.is_clf:
        stats = np.bincount(prob.y, weights=prob.w, minlength=prob.C).astype(float)
    else:
        stats = prob.yw.sum(axis=0)
    got = impurity.impurity(stats, float(prob.w.sum()), prob.crit, prob.lam)
    assert np.isfinite(got) and np.isclose(got, prob.impurity(idx), **TOL)
    assert impurity.impurity(np.zeros(prob.S), 0.0, prob.crit, prob.lam) == 0.0


def test_impurity_known_values():
    assert np.isclose(impurity.impurity(np.array([1.0, 1.0]), 2.0, impurity.GINI, 0.0), 0.5)
    assert np.isclose(impurity.impurity(np.array([1.0, 1.0, 1.0, 1.0]), 4.0, impurity.ENTROPY, 0.0), 2.0)
    assert impurity.impurity(np.array([3.0, 0.0]), 3.0, impurity.ENTROPY, 0.0) == 0.0
    # y = (1, 3) with weights (1, 1): variance 1
    assert np.isclose(impurity.impurity(np.array([2.0, 4.0, 10.0]), 2.0, impurity.SQUARED_ERROR, 0.0), 1.0)


@pytest.mark.parametrize("task", TASKS)
def test_node_statistics(task):
    rng = np.random.default_rng([1, list(TASKS).index(task)])
    prob = Problem(rng, 90, task)
    rows, starts, ends = make_segments(rng, prob.w)
    stats, w, imp, count = criterion.node_statistics(rows, starts, ends, *prob.kernel_args())
    assert stats.shape == (starts.size, prob.S)
    for j in range(starts.size):
        idx = rows[starts[j]:ends[j]]
        yi, wi = prob.y[idx], prob.w[idx]
        if prob.is_clf:
            ref = np.bincount(yi, weights=wi, minlength=prob.C)
        elif prob.crit == impurity.NEWTON:
            ref = np.array([wi.sum(), prob.g[idx].sum(), 0.0])
        else:
            ref = np.array([wi.sum(), (wi * yi).sum(), (wi * yi * yi).sum()])
        assert np.allclose(stats[j], ref, **TOL)
        assert np.isclose(w[j], wi.sum(), **TOL)
        assert np.isclose(imp[j], prob.impurity(idx), **TOL)
        assert count[j] == idx.size


# --------------------------------------------------------------------------- split search
HIST_BINS = np.array([4, 2, 6, 1, 3, 8], dtype=np.int32)
HIST_MISS = [0.0, 0.3, 0.1, 0.4, 0.0, 0.2]


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("msl,mwl", SEARCH_SETTINGS)
def test_best_splits_hist_brute_force(task, msl, mwl):
    rng = np.random.default_rng([2, list(TASKS).index(task), msl, int(mwl)])
    n = 100
    prob = Problem(rng, n, task)
    mwl = leaf_weight(task, mwl)
    Xb = hist_matrix(rng, n, HIST_BINS, HIST_MISS)
    rows, starts, ends = make_segments(rng, prob.w)
    fmask = (rng.random((starts.size, Xb.shape[1])) < 0.7).astype(np.uint8)
    fmask[3] = 1  # the first large node may use every feature
    out = hist_search(Xb, HIST_BINS, rows, starts, ends, fmask, *prob.kernel_args(),
                             prob.w_total, msl, mwl)
    n_checked = check_best_splits(
        out, prob, rows, starts, ends, fmask,
        column=lambda f, idx: Xb[idx, f],
        candidates=lambda x, f: hist_candidates(x, HIST_BINS[f]),
        left_of=hist_left,
        split_ok=lambda x, f, b: 0 <= b < HIST_BINS[f],
        msl=msl, mwl=mwl)
    assert n_checked >= 2


def scan_with_exact_gains(hist, cnt, nb, n_node, w_node, imp_node, w_total, is_clf, crit, lam, msl, mwl):
    """The histogram scan with the kernels' exact gain evaluated at every
    candidate, in scan order, a strictly larger gain winning (the rule
    ``_scan_hist`` must reproduce bit for bit while evaluating fewer gains)."""
    n_miss = int(cnt[MISSING])
    tot = np.zeros(hist.shape[1])
    for b in range(nb):
        if cnt[b] > 0:
            tot = tot + hist[b]
    best, best_b, best_ml = -np.inf, 0, 0
    left, cl = np.zeros(hist.shape[1]), 0
    args = (w_node, imp_node, w_total, is_clf, crit, lam, msl, mwl)
    for b in range(nb):
        if cnt[b] == 0:
            continue
        left = left + hist[b]
        cl += int(cnt[b])
        cr = n_node - n_miss - cl
        right = tot - left
        if n_miss == 0:
            if cr == 0:
                break
            g = criterion.split_gain(left, right, cl, cr, *args)
            if g > best:
                best, best_b, best_ml = g, b, int(cl > cr)
            continue
        g = criterion.split_gain(left, right + hist[MISSING], cl, cr + n_miss, *args)
        if g > best:
            best, best_b, best_ml = g, (b if cr > 0 else nb - 1), 0
        if cr == 0:
            break
        g = criterion.split_gain(left + hist[MISSING], right, cl + n_miss, cr, *args)
        if g > best:
            best, best_b, best_ml = g, b, 1
    return best, best_b, best_ml


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("msl,mwl", SEARCH_SETTINGS)
def test_scan_hist_equals_exact_gains_everywhere(task, msl, mwl):
    """The proxy pre-selection never changes the chosen candidate or its gain,
    also on integer histograms full of mathematically tied candidates."""
    crit, C = TASKS[task]
    is_clf = C > 0
    S = C if is_clf else 3
    rng = np.random.default_rng([7, list(TASKS).index(task), msl, int(mwl)])
    mwl = leaf_weight(task, mwl)
    scratch = [np.empty(S) for _ in range(5)]
    prox = np.full(2 * (MISSING + 1), np.nan)   # the scan must set what it reads
    n_diff = 0
    for trial in range(300):
        nb = int(rng.integers(1, 12))
        hist = np.zeros((MISSING + 1, S))
        cnt = np.zeros(MISSING + 1, dtype=np.int64)
        used = np.flatnonzero(rng.random(nb) < 0.8)
        if trial % 3:
            used = np.append(used, MISSING)     # missing values in two thirds of the trials
        for b in used:
            rows = int(rng.integers(1, 5))
            cnt[b] = rows
            if is_clf:
                hist[b] = np.bincount(rng.integers(0, C, rows), minlength=C) * float(rng.integers(1, 3))
            elif crit == impurity.NEWTON:
                h = rng.integers(1, 5, rows) / 8.0
                g = rng.integers(-4, 5, rows) / 4.0 * (1e3 if trial % 5 == 0 else 1.0)
                hist[b] = [h.sum(), g.sum(), 0.0]
            else:
                w = rng.integers(1, 3, rows).astype(float)
                y = rng.integers(-2, 3, rows).astype(float) * (1e3 if trial % 5 == 0 else 1.0)
                hist[b] = [w.sum(), (w * y).sum(), (w * y * y).sum()]
        n_node = int(cnt.sum())
        stats = hist[:nb].sum(axis=0) + hist[MISSING]
        w_node = float(stats.sum()) if is_clf else float(stats[0])
        lam = LAM.get(crit, 0.0)
        imp_node = impurity.impurity(stats, w_node, crit, lam)
        w_total = 2.0 if crit == impurity.NEWTON else w_node * 1.5
        ref = scan_with_exact_gains(hist, cnt, nb, n_node, w_node, imp_node, w_total, is_clf,
                                    crit, lam, msl, mwl)
        # the generic scan and the dispatching one (scalar scans for Newton and two-class Gini)
        for scan in (splitter._scan_hist, splitter._scan_hist_fast):
            prox[:] = np.nan
            got = scan(hist, cnt, nb, n_node, w_node, imp_node, w_total, is_clf, S, crit,
                       lam, msl, mwl, *scratch, prox)
            assert got[0] == ref[0] and tuple(got[1:]) == tuple(ref[1:]), (scan, trial, got, ref)
        n_diff += ref[0] > -np.inf
    assert n_diff > 100    # most trials had an allowed candidate


def exact_matrix(rng, n):
    X = np.column_stack([
        np.round(rng.normal(size=n), 1),                              # many ties
        np.where(rng.random(n) < 0.2, np.nan, rng.normal(size=n)),    # continuous + NaN
        np.where(rng.random(n) < 0.1, np.nan, rng.integers(0, 4, n)),  # 4 values + NaN
        np.where(rng.random(n) < 0.4, np.nan, 1.5),                   # constant + NaN
        rng.normal(size=n) * 1e3,                                     # continuous
        np.full(n, np.nan),                                           # all missing
    ])
    return np.asfortranarray(X.astype(np.float32).astype(np.float64))


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("msl,mwl", SEARCH_SETTINGS)
def test_best_splits_exact_brute_force(task, msl, mwl):
    rng = np.random.default_rng([3, list(TASKS).index(task), msl, int(mwl)])
    n = 100
    prob = Problem(rng, n, task)
    mwl = leaf_weight(task, mwl)
    X = exact_matrix(rng, n)
    rows, starts, ends = make_segments(rng, prob.w)
    fmask = (rng.random((starts.size, X.shape[1])) < 0.7).astype(np.uint8)
    fmask[3] = 1
    out = splitter.best_splits_exact(X, rows, starts, ends, fmask, *prob.kernel_args(),
                              prob.w_total, msl, mwl, *splitter.NO_NODE_STATS, splitter.MIDPOINT)
    n_checked = check_best_splits(
        out, prob, rows, starts, ends, fmask,
        column=lambda f, idx: X[idx, f],
        candidates=lambda x, f: exact_candidates(x),
        left_of=exact_left,
        split_ok=lambda x, f, t: t in exact_thresholds(x),
        msl=msl, mwl=mwl)
    assert n_checked >= 2


def _search(mode, x_cols, n_bins, prob, fmask):
    """Run one kernel over a single node holding every row."""
    rows = np.arange(len(prob.y), dtype=np.int32)
    starts, ends = np.array([0], dtype=np.int64), np.array([rows.size], dtype=np.int64)
    fmask = np.ascontiguousarray(np.atleast_2d(fmask), dtype=np.uint8)
    if mode == "hist":
        Xb = np.asfortranarray(np.column_stack(x_cols).astype(np.uint8))
        out = hist_search(Xb, np.asarray(n_bins, dtype=np.int32), rows, starts, ends,
                                 fmask, *prob.kernel_args(), prob.w_total, 1, 0.0)
    else:
        X = np.asfortranarray(np.column_stack(x_cols).astype(np.float64))
        out = splitter.best_splits_exact(X, rows, starts, ends, fmask, *prob.kernel_args(),
                                  prob.w_total, 1, 0.0, *splitter.NO_NODE_STATS, splitter.MIDPOINT)
    return [o[0] for o in out]


@pytest.mark.parametrize("mode", ["hist", "exact"])
@pytest.mark.parametrize("task", ["gini2", "entropy2", "mse"])
def test_ties_go_to_lowest_feature_then_lowest_threshold(mode, task):
    x = np.arange(6)
    y = np.array([1, 0, 0, 0, 0, 1])
    prob = Problem(None, 6, task, y=y, w=np.ones(6))
    idx = np.arange(6)
    # thresholds after 0 and after 4 are mirror images with the same (best) gain
    assert np.isclose(prob.gain(idx, x <= 0, 1, 0), prob.gain(idx, x <= 4, 1, 0), **TOL)
    assert all(prob.gain(idx, x <= b, 1, 0) < prob.gain(idx, x <= 0, 1, 0) for b in (1, 2, 3))
    low = 0 if mode == "hist" else 0.5
    for fmask, want_f in (([1, 1], 0), ([0, 1], 1), ([1, 0], 0)):
        g, f, split, ml = _search(mode, [x, x], [6, 6], prob, fmask)
        assert (f, split, ml) == (want_f, low, 0)
        assert np.isclose(g, prob.gain(idx, x <= 0, 1, 0), **TOL)
    g, f, _, _ = _search(mode, [x, x], [6, 6], prob, [0, 0])
    assert f == -1 and g == -np.inf


@pytest.mark.parametrize("mode", ["hist", "exact"])
@pytest.mark.parametrize("y,x0,want", [
    # missing rows resemble the right child
    ([0, 0, 1, 1, 1, 1], [0, 0, 1, 1, np.nan, np.nan], ("low", 0)),
    # missing rows resemble the left child
    ([0, 0, 1, 1, 0, 0], [0, 0, 1, 1, np.nan, np.nan], ("low", 1)),
    # only "non-missing left, missing right" separates the classes
    ([0, 0, 0, 0, 1, 1], [0, 0, 0, 0, np.nan, np.nan], ("all", 0)),
])
def test_missing_value_directions(mode, y, x0, want):
    prob = Problem(None, 6, "gini2", y=np.array(y), w=np.array([1, 2, 1, 3, 1, 2]))
    x = np.array(x0, dtype=float)
    col = np.where(np.isnan(x), MISSING, x).astype(np.uint8) if mode == "hist" else x
    g, f, split, ml = _search(mode, [col], [3], prob, [1])
    expected_split = {("hist", "low"): 0, ("hist", "all"): 2,     # n_bins - 1
                      ("exact", "low"): 0.5, ("exact", "all"): np.inf}[mode, want[0]]
    assert (f, split, ml) == (0, expected_split, want[1])
    # a perfect split removes all the node's impurity
    assert np.isclose(g, prob.impurity(np.arange(6)), **TOL)


def test_exact_threshold_is_float32_midpoint():
    x32 = np.array([0.1, 0.2, 0.7, 0.9], dtype=np.float32)
    prob = Problem(None, 4, "gini2", y=np.array([0, 0, 1, 1]), w=np.ones(4))
    _, f, thr, _ = _search("exact", [x32.astype(np.float64)], None, prob, [1])
    assert f == 0 and thr == float(x32[1]) / 2 + float(x32[2]) / 2
    assert thr != 0.45  # computed from the float32 values, not their decimal literals


def test_exact_values_closer_than_feature_threshold_are_not_split():
    prob = Problem(None, 4, "gini2", y=np.array([0, 1, 1, 0]), w=np.ones(4))
    close = np.array([0.0, 5e-8, 5e-8, 0.0])
    g, f, _, _ = _search("exact", [close], None, prob, [1])
    assert f == -1 and g == -np.inf
    apart = np.array([0.0, 2e-7, 2e-7, 0.0])
    _, f, thr, _ = _search("exact", [apart], None, prob, [1])
    assert f == 0 and thr == 1e-7


def test_exact_midpoint_falls_back_to_lower_value():
    v0 = np.nextafter(2.0 ** 31, np.inf)   # odd last mantissa bit
    v1 = np.nextafter(v0, np.inf)          # adjacent, even: the midpoint rounds up to v1
    assert v0 / 2 + v1 / 2 == v1 and v1 - v0 > 1e-7
    prob = Problem(None, 4, "gini2", y=np.array([0, 0, 1, 1]), w=np.ones(4))
    _, f, thr, _ = _search("exact", [np.array([v0, v0, v1, v1])], None, prob, [1])
    assert f == 0 and thr == v0


@pytest.mark.parametrize("criterion,n_classes,with_nan", [
    ("gini", 2, False), ("entropy", 4, False), ("gini", 3, True),
    ("squared_error", 0, False), ("squared_error", 0, True)])
def test_exact_root_split_matches_sklearn(criterion, n_classes, with_nan):
    rng = np.random.default_rng([4, n_classes, with_nan])
    n, d = 80, 4
    X32 = rng.normal(size=(n, d)).astype(np.float32)      # distinct values
    if with_nan:
        X32[rng.random((n, d)) < 0.15] = np.nan
    counts = rng.integers(0, 4, n)                        # bootstrap counts as weights
    w = counts.astype(float)
    if n_classes:
        y = rng.integers(0, n_classes, n)
        est = DecisionTreeClassifier(criterion=criterion, max_depth=1, random_state=0)
        ycls, yw, S = y.astype(np.int32), w.reshape(-1, 1), n_classes
    else:
        y = rng.normal(size=n)
        est = DecisionTreeRegressor(criterion=criterion, max_depth=1, random_state=0)
        ycls, yw, S = np.zeros(n, dtype=np.int32), np.column_stack((w, w * y, w * y * y)), 3
    t = est.fit(X32, y, sample_weight=w).tree_
    l, r = t.children_left[0], t.children_right[0]
    wn = t.weighted_n_node_samples
    sk_gain = t.impurity[0] - (wn[l] * t.impurity[l] + wn[r] * t.impurity[r]) / wn[0]

    rows = np.flatnonzero(counts).astype(np.int32)
    crit = {"gini": impurity.GINI, "entropy": impurity.ENTROPY, "squared_error": impurity.SQUARED_ERROR}[criterion]
    g, f, thr, ml = [o[0] for o in splitter.best_splits_exact(
        np.asfortranarray(X32.astype(np.float64)), rows, np.array([0]), np.array([rows.size]),
        np.ones((1, d), dtype=np.uint8), ycls, yw, bool(n_classes), S, crit, 0.0, w.sum(), 1, 0.0,
        *splitter.NO_NODE_STATS, splitter.MIDPOINT)]
    assert sk_gain > 0 and np.isclose(g, sk_gain, rtol=1e-7, atol=1e-12)
    assert f == t.feature[0] and thr == t.threshold[0]
    if with_nan:
        assert ml == t.missing_go_to_left[0]


@pytest.mark.parametrize("v0,v1", [(0.2, 0.3), (-0.1, 0.1), (1.0, 3.0), (1.0, 1.0 + 2 ** -20)])
def test_exact_threshold_rules(v0, v1):
    """MIDPOINT: scikit-learn's midpoint, a value on it goes left; BELOW_FLOAT32_MIDPOINT:
    the largest float32 below XGBoost's float32 midpoint m, so x <= threshold is x < m
    for every float32 x (a value on m goes right)."""
    v0, v1 = float(np.float32(v0)), float(np.float32(v1))
    X = np.asfortranarray([[v0], [v0], [v1], [v1]])
    rows = np.arange(4, dtype=np.int32)
    yw = np.column_stack((np.ones(4), [-1.0, -1.0, 1.0, 1.0], np.zeros(4)))
    out = {}
    for rule in (splitter.MIDPOINT, splitter.BELOW_FLOAT32_MIDPOINT):
        out[rule] = splitter.best_splits_exact(
            X, rows, np.array([0]), np.array([4]), np.ones((1, 1), dtype=np.uint8), np.zeros(4, dtype=np.int32),
            yw, False, 3, impurity.NEWTON, 1.0, 1.0, 1, 0.0, *splitter.NO_NODE_STATS, rule)[2][0]
    assert out[splitter.MIDPOINT] == v0 / 2 + v1 / 2
    m = np.float32((np.float32(v0) + np.float32(v1)) * np.float32(0.5))
    below = out[splitter.BELOW_FLOAT32_MIDPOINT]
    assert v0 <= below < v1
    grid = np.float32(v0) + (np.float32(v1) - np.float32(v0)) * np.linspace(0, 1, 41).astype(np.float32)
    for x in np.concatenate((grid, [m, np.nextafter(m, np.float32(-1e9)), np.nextafter(m, np.float32(1e9))])):
        assert (float(x) <= below) == (x < m)


def test_xgboosts_rule_splits_values_closer_than_scikit_learns_threshold():
    X = np.asfortranarray([[0.5], [0.5], [0.5 + 2 ** -24], [0.5 + 2 ** -24]])   # 6e-8 apart, float32 neighbours
    rows = np.arange(4, dtype=np.int32)
    yw = np.column_stack((np.ones(4), [-1.0, -1.0, 1.0, 1.0], np.zeros(4)))
    gains = [splitter.best_splits_exact(
        X, rows, np.array([0]), np.array([4]), np.ones((1, 1), dtype=np.uint8), np.zeros(4, dtype=np.int32),
        yw, False, 3, impurity.NEWTON, 1.0, 1.0, 1, 0.0, *splitter.NO_NODE_STATS, rule)[0][0]
        for rule in (splitter.MIDPOINT, splitter.BELOW_FLOAT32_MIDPOINT)]
    assert gains[0] == -np.inf and gains[1] > 0


# --------------------------------------------------------------------------- partition
@pytest.mark.parametrize("thr,ml", [(0.3, 0), (0.3, 1), (-np.inf, 1), (np.inf, 0)])
def test_goes_left(thr, ml):
    rng = np.random.default_rng(5)
    x = np.round(rng.normal(size=40), 1)
    x[rng.random(40) < 0.25] = np.nan
    x[:3] = 0.3                               # values equal to the threshold go left
    rows = rng.permutation(40).astype(np.int32)
    start, end = 7, 33
    got = partitioner.goes_left(x, rows, start, end, thr, ml)
    v = x[rows[start:end]]
    ref = [ml if np.isnan(a) else int(a <= thr) for a in v]
    assert got.dtype == np.uint8 and got.tolist() == ref


def test_apply_partition_is_stable_and_only_touches_listed_segments():
    rng = np.random.default_rng(6)
    sizes = [7, 0, 12, 1, 20, 9]
    bounds = np.r_[0, np.cumsum(sizes)]
    perm = rng.permutation(bounds[-1])
    rows = np.concatenate([np.sort(perm[bounds[k]:bounds[k + 1]])
                           for k in range(len(sizes))]).astype(np.int32)
    listed = [4, 0, 1, 2, 5]                  # out of position order; segment 3 stays closed
    seg_bits = [rng.integers(0, 2, sizes[k]).astype(np.uint8) for k in listed]
    seg_bits[0][:] = 1                        # a segment sending everything left
    expected = rows.copy()
    for k, b in zip(listed, seg_bits):
        seg = rows[bounds[k]:bounds[k + 1]]
        expected[bounds[k]:bounds[k + 1]] = np.concatenate((seg[b == 1], seg[b == 0]))
    got = rows.copy()
    n_left = partitioner.apply_partition(got, bounds[listed].astype(np.int64),
                               bounds[np.array(listed) + 1].astype(np.int64),
                               np.concatenate(seg_bits))
    assert got.tolist() == expected.tolist()
    assert n_left.tolist() == [int(b.sum()) for b in seg_bits]


# --------------------------------------------------------------------------- prediction
def ref_leaf(tree, x):
    """Leaf reached by one row, walking the tree in plain Python."""
    node = 0
    while tree["children_left"][node] >= 0:
        v = x[tree["feature"][node]]
        left = tree["missing_left"][node] == 1 if np.isnan(v) else v <= tree["threshold"][node]
        node = tree["children_left"][node] if left else tree["children_right"][node]
    return node


def forest_data(n, seed):
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, 6)), 2)
    X[rng.random(X.shape) < 0.1] = np.nan
    score = np.nan_to_num(X[:, 0] + X[:, 3] - X[:, 5]) + rng.normal(scale=0.7, size=n)
    return X, np.digitize(score, [-0.6, 0.6])


_TREES = {}


def forest_tree(n, split_method="hist", seed=0):
    """One complete tree grown by fedforest on n rows, and its data as the tree compares it."""
    key = (n, split_method, seed)
    if key not in _TREES:
        X, y = forest_data(n, seed)
        forest = ForestClassifier(n_estimators=1, max_features=None, random_state=seed,
                                  split_method=split_method).fit(X, y)
        if split_method == "exact":
            X = X.astype(np.float32).astype(np.float64)
        _TREES[key] = forest.estimators_[0], np.ascontiguousarray(X)
    return _TREES[key]


def apply(tree, X):
    return tree_format.apply(tree, X)


@pytest.mark.parametrize("split_method", ["hist", "exact"])
def test_apply_matches_python_walk(split_method):
    tree, X = forest_tree(150, split_method)
    assert (tree["children_left"] >= 0).sum() >= 5
    X_new, _ = forest_data(90, seed=7)         # unseen rows, with NaN
    X_new = np.ascontiguousarray(X_new.astype(np.float32).astype(np.float64))
    for data in (X, X_new):
        leaf = apply(tree, data)
        assert leaf.tolist() == [ref_leaf(tree, row) for row in data]
        assert np.all(tree["children_left"][leaf] < 0)


def test_apply_matches_sklearn_apply():
    rng = np.random.default_rng(8)
    X32 = rng.normal(size=(200, 4)).astype(np.float32)
    X32[rng.random(X32.shape) < 0.15] = np.nan
    y = (np.nan_to_num(X32[:, 0]) + np.nan_to_num(X32[:, 1], nan=1.0) > 0).astype(int)
    y[rng.random(200) < 0.1] ^= 1
    t = DecisionTreeClassifier(max_depth=6, random_state=0).fit(X32, y).tree_
    assert t.missing_go_to_left[t.children_left >= 0].any()
    tree = tree_format.binary(t.children_left, t.children_right, t.feature, t.threshold, t.value,
                              missing_left=t.missing_go_to_left)
    leaf = tree_format.apply(tree, X32.astype(np.float64))
    assert leaf.tolist() == t.apply(X32).tolist()


def partial_tree(tree, cols):
    """A party's view of a complete tree: local feature index and threshold at the
    splits on its columns ``cols``, -1 at other splits, -2 at leaves."""
    internal = tree["children_left"] >= 0
    own = internal & np.isin(tree["feature"], cols)
    local = {g: i for i, g in enumerate(cols)}
    feature = np.where(internal, -1, -2).astype(np.int32)
    feature[own] = [local[g] for g in tree["feature"][own]]
    return {"children_left": tree["children_left"], "children_right": tree["children_right"],
            "feature": feature, "threshold": np.where(own, tree["threshold"], np.nan),
            "missing_left": np.where(own, tree["missing_left"], 0).astype(np.uint8), "own": own}


def ref_party_leaf_rows(tree, X, own, leaf):
    """Rows that can reach ``leaf`` when splits not in ``own`` send rows both ways;
    also whether any ancestor split is owned."""
    parent = {}
    for node in np.flatnonzero(tree["children_left"] >= 0):
        parent[tree["children_left"][node]] = (node, True)
        parent[tree["children_right"][node]] = (node, False)
    ok = np.ones(X.shape[0], dtype=bool)
    explicit, node = False, leaf
    while node in parent:
        p, is_left = parent[node]
        if own[p]:
            explicit = True
            x = X[:, tree["feature"][p]]
            went_left = np.where(np.isnan(x), tree["missing_left"][p] == 1, x <= tree["threshold"][p])
            ok &= went_left == is_left
        node = p
    return explicit, ok


def unpack_words(words, n):
    """Bit i % 64 of word i // 64 -> row i; keeps the padding bits after row n-1."""
    shifts = np.arange(64, dtype=np.uint64)
    bits = (words[:, :, None] >> shifts) & np.uint64(1)
    return bits.reshape(words.shape[0], words.shape[1] * 64).astype(bool)


def compact_to_words(is_dense, counts, rows, dense, nw):
    """Reference expansion of compact row sets into (n_sets, nw) bitmap words."""
    bits = np.zeros((is_dense.size, nw * 64), dtype=bool)
    starts = np.cumsum(np.where(is_dense == 0, counts, 0)) - np.where(is_dense == 0, counts, 0)
    d = 0
    for k in range(is_dense.size):
        if is_dense[k]:
            bits[k] = unpack_words(dense[d:d + 1], nw * 64)[0]
            d += 1
        else:
            bits[k, rows[starts[k]:starts[k] + counts[k]].astype(np.int64)] = True
    return pack_rows(bits)


def leaf_bitmaps(X, pt, leaves, index_bytes=4):
    """``(set_of_leaf, words)`` of one partial tree via the compact kernel."""
    set_of_leaf, is_dense, counts, rows, dense = leaf_sets.partial_leaf_sets(
        X, pt["children_left"], pt["children_right"], pt["feature"], pt["threshold"],
        pt["missing_left"], leaves, index_bytes)
    return set_of_leaf, compact_to_words(is_dense, counts, rows, dense, (X.shape[0] + 63) // 64)


def run_parties(tree, X, party_cols):
    leaves = np.flatnonzero(tree["children_left"] < 0).astype(np.int32)
    partials, results = [], []
    for cols in party_cols:
        pt = partial_tree(tree, cols)
        partials.append(pt)
        results.append(leaf_bitmaps(np.ascontiguousarray(X[:, cols]), pt, leaves))
    return leaves, partials, results


def check_party_bitmaps(tree, X, leaves, partials, results):
    n = X.shape[0]
    nw = (n + 63) // 64
    for pt, (set_of_leaf, words) in zip(partials, results):
        explicit = set_of_leaf >= 0
        assert set_of_leaf.shape == leaves.shape and words.shape[1] == nw
        # each stored set is used by some leaf
        used = set_of_leaf[explicit]
        assert sorted(set(used.tolist())) == list(range(words.shape[0]))
        unpacked = unpack_words(words, n)
        for k, leaf in enumerate(leaves):
            ref_explicit, ref_rows = ref_party_leaf_rows(tree, X, pt["own"], leaf)
            assert explicit[k] == ref_explicit, (k, leaf)
            if ref_explicit:
                e = set_of_leaf[k]
                assert np.array_equal(unpacked[e, :n], ref_rows), (k, leaf)
                assert not unpacked[e, n:].any()      # no row beyond the last one


def word_rows(set_of_leaf_per_party, words):
    """(n_parties, n_leaves) rows into the stacked words, -1 for "all rows"."""
    offsets = np.cumsum([0] + [w.shape[0] for w in words[:-1]])
    return np.stack([np.where(s >= 0, s.astype(np.int64) + o, -1)
                     for s, o in zip(set_of_leaf_per_party, offsets)]).astype(np.int64)


def intersect_words(n, set_id, words, n_leaves):
    """The intersection kernel on bitmap words only (every set a dense container)."""
    n_sets = words.shape[0]
    return leaf_sets.intersect_leaf_sets(n, set_id, np.ones(n_sets, dtype=np.uint8),
                                 np.zeros(n_sets, dtype=np.int64), np.zeros(n_sets, dtype=np.int64),
                                 np.empty(0, dtype=np.uint32), np.arange(n_sets, dtype=np.int64),
                                 words, n_leaves)


def intersect(n, leaves, results):
    words = [r[1] for r in results]
    return intersect_words(n, word_rows([r[0] for r in results], words), np.concatenate(words),
                           leaves.size)


PARTY_SPLITS = {2: [[0, 1, 2], [3, 4, 5]], 3: [[0, 3], [4, 1], [2, 5]]}


@pytest.mark.parametrize("n_rows", [37, 128, 131])
@pytest.mark.parametrize("n_parties", [2, 3])
def test_partial_leaf_sets_and_intersection_recover_apply(n_rows, n_parties):
    tree, X = forest_tree(160)
    X_pred = np.ascontiguousarray(forest_data(n_rows, seed=n_rows)[0])
    leaves, partials, results = run_parties(tree, X_pred, PARTY_SPLITS[n_parties])
    assert all(pt["own"].any() for pt in partials)
    check_party_bitmaps(tree, X_pred, leaves, partials, results)
    pos = intersect(n_rows, leaves, results)
    assert pos.min() >= 0
    assert leaves[pos].tolist() == apply(tree, X_pred).tolist()


def small_tree():
    """node 0 on f0 -> (1, 2); 1 on f1 -> (3, 4); 2 leaf; 3 on f0 -> (5, 6); 4 on f2 -> (7, 8)."""
    return {"children_left": np.array([1, 3, -1, 5, 7, -1, -1, -1, -1], dtype=np.int32),
            "children_right": np.array([2, 4, -1, 6, 8, -1, -1, -1, -1], dtype=np.int32),
            "feature": np.array([0, 1, -2, 0, 2, -2, -2, -2, -2], dtype=np.int32),
            "threshold": np.array([0.0, 0.5, np.nan, -1.0, 0.0, np.nan, np.nan, np.nan, np.nan]),
            "missing_left": np.array([1, 0, 0, 0, 1, 0, 0, 0, 0], dtype=np.uint8)}


@pytest.mark.parametrize("n_rows", [1, 64, 70])
def test_partial_leaf_sets_small_tree(n_rows):
    tree = small_tree()
    X = np.round(np.random.default_rng(n_rows).normal(size=(n_rows, 4)), 1)
    X[::5, 0] = np.nan
    X[1::4, 2] = np.nan
    # party 0 owns the splits on f0, party 1 on f1 and f2, party 2 (f3) none
    leaves, partials, results = run_parties(tree, X, [[0], [2, 1], [3]])
    # leaves are 2, 5, 6, 7, 8.  Party 0 owns splits 0 and 3: leaves 5 and 6 get their
    # own sets; 7 and 8 hang below node 1 (split 0's left child) through node 4, owned
    # elsewhere, so they share node 1's set.
    # (sets are numbered in the order of a depth-first walk, left child first)
    assert results[0][0].tolist() == [3, 1, 2, 0, 0]
    assert results[1][0].tolist() == [-1, 0, 0, 1, 2]   # leaf 2 has no f1/f2 ancestor
    assert results[2][0].tolist() == [-1] * 5 and results[2][1].shape[0] == 0
    check_party_bitmaps(tree, X, leaves, partials, results)
    pos = intersect(n_rows, leaves, results)
    assert leaves[pos].tolist() == apply(tree, X).tolist()


def pack_rows(bits):
    """(k, nw * 64) booleans -> (k, nw) uint64 words, row i in bit i % 64 of word i // 64."""
    k, m = bits.shape
    shifted = bits.reshape(k, m // 64, 64).astype(np.uint64) << np.arange(64, dtype=np.uint64)
    return np.bitwise_or.reduce(shifted, axis=2)


@pytest.mark.parametrize("n_rows", [50, 64, 200])
@pytest.mark.parametrize("free_leaf", [False, True])
def test_intersect_dense_leaf_sets_brute_force(n_rows, free_leaf):
    rng = np.random.default_rng([n_rows, free_leaf])
    n_parties, n_leaves = 3, 5
    nw = (n_rows + 63) // 64
    explicit = (rng.random((n_parties, n_leaves)) < 0.6).astype(np.uint8)
    explicit[:, 1] = 1
    explicit[:, 0] = 0 if free_leaf else 1   # a leaf no party constrains holds every row
    member = np.ones((n_leaves, nw * 64), dtype=bool)
    words = []
    for p in range(n_parties):
        bits = rng.random((int(explicit[p].sum()), nw * 64)) < 0.6   # padding bits random too
        member[explicit[p] == 1] &= bits
        words.append(pack_rows(bits))
    sets = [np.where(e == 1, np.cumsum(e, dtype=np.int64) - 1, -1) for e in explicit]
    got = intersect_words(n_rows, word_rows(sets, words), np.concatenate(words), n_leaves)
    member = member[:, :n_rows]
    ref = np.where(member.sum(axis=0) == 1, member.argmax(axis=0), -1)
    assert got.tolist() == ref.tolist()
    assert (ref >= 0).any() and (ref < 0).any()


# --------------------------------------------------------------------------- binning
def binning_matrix(n, seed):
    rng = np.random.default_rng(seed)
    X = np.column_stack([
        rng.integers(0, 10, n).astype(float),      # 10 distinct values
        rng.normal(size=n),                        # n distinct values
        np.full(n, np.nan),                        # all missing
        np.full(n, 3.25),                          # constant
        rng.choice([-1.0, 4.0], n),                # two values
    ])
    X[rng.random(X.shape) < 0.1] = np.nan
    return X


@pytest.mark.parametrize("max_bins", [2, 7, 10, 255])
def test_bins_hold_values_between_consecutive_edges(max_bins):
    X = binning_matrix(300, max_bins)
    edges, n_bins = fit_bins(X, max_bins)
    codes = transform_bins(X, edges, n_bins)
    assert edges.shape == (5, binning.MAX_BINS) and codes.dtype == np.uint8 and codes.shape == X.shape
    for f in range(X.shape[1]):
        col = X[:, f]
        distinct = np.unique(col[~np.isnan(col)])
        e = edges[f, : n_bins[f] - 1]
        assert 1 <= n_bins[f] <= min(max_bins, max(distinct.size, 1))
        assert np.all(np.isfinite(e)) and np.all(np.diff(e) > 0)
        assert np.all(edges[f, n_bins[f] - 1:] == np.inf)
        ref = [MISSING if np.isnan(v) else int(np.sum(e < v)) for v in col]   # e[b-1] < v <= e[b]
        assert codes[:, f].tolist() == ref
        # a value equal to an edge belongs to the bin that edge closes
        at_edges = transform_bins(np.tile(e[:, None], (1, 5)), edges, n_bins)[:, f]
        assert at_edges.tolist() == list(range(e.size))
        if distinct.size <= max_bins:
            # every distinct value gets its own bin, separated at midpoints
            assert np.array_equal(e, (distinct[:-1] + distinct[1:]) / 2)
            own = transform_bins(np.tile(distinct[:, None], (1, 5)), edges, n_bins)[:, f]
            assert own.tolist() == list(range(distinct.size))
    assert np.all(codes[np.isnan(X)] == MISSING) and np.all(codes[~np.isnan(X)] < MISSING)


def test_bin_codes_of_narrow_or_unpadded_edges_match_searchsorted():
    # edges given narrower than MAX_BINS, or with finite values past a
    # feature's last edge, are read only up to that feature's edges
    rng = np.random.default_rng(4)
    X = rng.normal(size=(500, 3))
    X[::7, 1] = np.nan
    edges = np.sort(rng.normal(size=(3, 9)), axis=1)
    n_bins = np.array([10, 4, 1], dtype=np.int32)
    codes = transform_bins(X, edges, n_bins)
    for f in range(3):
        e = edges[f, : n_bins[f] - 1]
        ref = np.where(np.isnan(X[:, f]), MISSING, np.searchsorted(e, X[:, f], side="left"))
        assert codes[:, f].tolist() == ref.tolist()
    with pytest.raises(ValueError):
        transform_bins(X, edges, np.array([10, 4, 256], dtype=np.int32))


@pytest.mark.parametrize("max_bins", [7, 255])
def test_quantile_bins_are_balanced(max_bins):
    n = 40 * max_bins
    X = np.random.default_rng(9).normal(size=(n, 1)) * 100
    edges, n_bins = fit_bins(X, max_bins)
    counts = np.bincount(transform_bins(X, edges, n_bins)[:, 0], minlength=n_bins[0])
    assert n_bins[0] == max_bins and counts.size == max_bins    # codes never reach 255
    assert counts.min() >= 0.9 * n / max_bins and counts.max() <= 1.1 * n / max_bins


@pytest.mark.parametrize("max_bins", [0, 1, 256])
def test_fit_bins_rejects_max_bins_out_of_range(max_bins):
    with pytest.raises(ValueError):
        fit_bins(np.zeros((3, 1)), max_bins)


@pytest.mark.parametrize("pair", [(np.nextafter(1.0, 0.0), 1.0), (1e308, 1.5e308), (-1.5e308, -1e308)])
def test_adjacent_or_huge_distinct_values_get_their_own_bins(pair):
    X = np.array([[pair[0]], [pair[1]]])
    edges, n_bins = fit_bins(X, 255)
    assert n_bins[0] == 2 and np.isfinite(edges[0, 0])
    assert transform_bins(X, edges, n_bins)[:, 0].tolist() == [0, 1]


def test_missing_values_follow_the_right_child_on_a_size_tie_like_sklearn():
    from sklearn.tree import DecisionTreeClassifier
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    y = np.array([0, 0, 1, 1])
    ref = DecisionTreeClassifier(max_depth=1).fit(X, y).tree_
    est = ForestClassifier(n_estimators=1, bootstrap=False, max_features=None, max_depth=1,
                           split_method="exact").fit(X, y).estimators_[0]
    assert est["threshold"][0] == ref.threshold[0]
    assert est["missing_left"][0] == ref.missing_go_to_left[0] == 0


@pytest.mark.parametrize("index_bytes", [2, 4])
@pytest.mark.parametrize("n_rows", [37, 131, 700])
def test_compact_leaf_sets_hold_the_same_rows_in_the_smaller_container(index_bytes, n_rows):
    tree, _ = forest_tree(160)
    X = np.ascontiguousarray(forest_data(n_rows, seed=n_rows)[0])
    leaves = np.flatnonzero(tree["children_left"] < 0).astype(np.int32)
    nw = (n_rows + 63) // 64
    kinds = set()
    for cols in PARTY_SPLITS[3]:
        pt = partial_tree(tree, cols)
        args = (X[:, cols].copy(), pt["children_left"], pt["children_right"], pt["feature"],
                pt["threshold"], pt["missing_left"], leaves)
        ref_sets, ref_words = leaf_bitmaps(args[0], pt, leaves, index_bytes=64)  # all dense
        set_of_leaf, is_dense, counts, rows, dense = leaf_sets.partial_leaf_sets(*args, index_bytes)
        assert np.array_equal(set_of_leaf, ref_sets)
        ref_bits = unpack_words(ref_words, n_rows)
        assert counts.tolist() == ref_bits.sum(axis=1).tolist()
        # a set travels as row indices unless its bitmap is no larger
        assert is_dense.tolist() == (counts * index_bytes >= nw * 8).astype(int).tolist()
        assert rows.size == counts[is_dense == 0].sum() and dense.shape == (is_dense.sum(), nw)
        starts = np.concatenate(([0], np.cumsum(counts[is_dense == 0])))
        for j, k in enumerate(np.flatnonzero(is_dense == 0)):
            assert sorted(rows[starts[j]:starts[j + 1]].tolist()) == np.flatnonzero(ref_bits[k]).tolist()
        assert np.array_equal(compact_to_words(is_dense, counts, rows, dense, nw), ref_words)
        kinds.update(is_dense.tolist())
    if n_rows == 700:
        assert kinds == {0, 1}  # both container kinds occur


@pytest.mark.parametrize("index_bytes", [2, 4, 64])
@pytest.mark.parametrize("n_rows", [37, 700])
def test_intersection_of_compact_sets_recovers_apply(index_bytes, n_rows):
    """Sparse, dense and mixed containers (index_bytes=64 makes every set dense)."""
    from fedforest.tree.predict import leaf_positions
    tree, _ = forest_tree(160)
    X = np.ascontiguousarray(forest_data(n_rows, seed=n_rows + 1)[0])
    leaves = np.flatnonzero(tree["children_left"] < 0).astype(np.int32)
    per_party = []
    for cols in PARTY_SPLITS[3]:
        pt = partial_tree(tree, cols)
        per_party.append([leaf_sets.partial_leaf_sets(
            X[:, cols].copy(), pt["children_left"], pt["children_right"], pt["feature"],
            pt["threshold"], pt["missing_left"], leaves, index_bytes)])
    pos = leaf_positions(n_rows, per_party, 0, leaves.size)
    assert leaves[pos].tolist() == apply(tree, X).tolist()


# --------------------------------------------------------------------------- threads and compact inputs
def _split_search_inputs(task, seed, n=3000, n_feat=7):
    rng = np.random.default_rng(seed)
    prob = Problem(rng, n, task)
    n_bins = rng.integers(2, 255, n_feat).astype(np.int32)
    Xb = hist_matrix(rng, n, n_bins, [0.1] * n_feat)
    rows, starts, ends = make_segments(rng, prob.w, n_big=6)
    fmask = (rng.random((starts.size, n_feat)) < 0.6).astype(np.uint8)
    return rng, prob, n_bins, Xb, rows, starts, ends, fmask


@pytest.mark.parametrize("task", ["gini4", "mse"])
def test_split_search_is_independent_of_the_thread_count(task):
    rng, prob, n_bins, Xb, rows, starts, ends, fmask = _split_search_inputs(task, 21)
    X = np.where(Xb == MISSING, np.nan, Xb + rng.random(Xb.shape)).astype(np.float32)
    out = {}
    try:
        for threads in (1, 2):
            numba_threads.set_threads(threads)
            out[threads] = (
                hist_search(Xb, n_bins, rows, starts, ends, fmask, *prob.kernel_args(),
                                   prob.w_total, 1, 0.0),
                splitter.best_splits_exact(X, rows, starts, ends, fmask, *prob.kernel_args(),
                                    prob.w_total, 1, 0.0, *splitter.NO_NODE_STATS, splitter.MIDPOINT))
    finally:
        numba_threads.set_threads(1)
    for a, b in zip(out[1], out[2]):
        for x, y in zip(a, b):
            assert np.array_equal(x, y, equal_nan=True)
    assert np.isfinite(out[1][0][0]).sum() >= 3


def test_integer_bootstrap_counts_give_the_same_splits_as_float_weights():
    rng, prob, n_bins, Xb, rows, starts, ends, fmask = _split_search_inputs("gini2", 22)
    counts = prob.w.astype(np.uint8).reshape(-1, 1)
    as_float = hist_search(Xb, n_bins, rows, starts, ends, fmask, prob.ycls, prob.yw, True,
                                  prob.S, prob.crit, 0.0, prob.w_total, 1, 0.0)
    as_count = hist_search(Xb, n_bins, rows, starts, ends, fmask, prob.ycls, counts, True,
                                  prob.S, prob.crit, 0.0, float(counts.sum()), 1, 0.0)
    for x, y in zip(as_float, as_count):
        assert np.array_equal(x, y)
    stats_f = criterion.node_statistics(rows, starts, ends, prob.ycls, prob.yw, True, prob.S, prob.crit, 0.0)
    stats_c = criterion.node_statistics(rows, starts, ends, prob.ycls, counts, True, prob.S, prob.crit, 0.0)
    for x, y in zip(stats_f, stats_c):
        assert np.array_equal(x, y)


def test_partition_on_bin_codes_matches_thresholds():
    """Bins as thresholds on bin codes send the same rows left as the bins' edges on values."""
    X = binning_matrix(400, 3)
    edges, n_bins = fit_bins(X, 9)
    Xb = transform_bins(X, edges, n_bins)
    rng = np.random.default_rng(4)
    rows = rng.permutation(400).astype(np.int32)
    starts = np.array([0, 120, 250], dtype=np.int64)
    ends = np.array([100, 250, 400], dtype=np.int64)
    feats = np.array([0, 1, 4], dtype=np.int64)
    bins = np.array([rng.integers(0, n_bins[f]) for f in feats], dtype=np.int32)
    bins[2] = n_bins[4] - 1                      # the last bin: every non-missing value left
    ml = np.array([1, 0, 0], dtype=np.uint8)
    got = partitioner.partition_bits(Xb, rows, starts, ends, feats, bins, ml, binning.MISSING_BIN)
    ref = []
    for j in range(3):
        f, b = feats[j], bins[j]
        thr = np.inf if b == n_bins[f] - 1 else edges[f, b]
        for r in rows[starts[j]:ends[j]]:
            v = X[r, f]
            ref.append(int(ml[j]) if np.isnan(v) else int(v <= thr))
    assert got.tolist() == ref


# --------------------------------------------------------------------------- histogram subtraction
def _ref_hist(prob, Xb, idx, f):
    """Per-bin statistics and row counts of rows ``idx`` for feature ``f`` (numpy)."""
    hist = np.zeros((MISSING + 1, prob.S))
    b = Xb[idx, f].astype(int)
    if prob.is_clf:
        np.add.at(hist, (b, prob.ycls[idx]), prob.yw[idx, 0])
    else:
        np.add.at(hist, b, prob.yw[idx])
    return hist, np.bincount(b, minlength=MISSING + 1)


def _split_children(rows0, starts0, ends0, go_left_of):
    """Each parent node split in two, left then right (rows in their order
    within a child); ``go_left_of(j, rows)``: which rows of parent ``j`` go left."""
    rows1, starts1, ends1 = [], [], []
    for j in range(starts0.size):
        seg = rows0[starts0[j]:ends0[j]]
        go_left = go_left_of(j, seg)
        for part in (seg[go_left], seg[~go_left]):
            starts1.append(sum(r.size for r in rows1))
            rows1.append(part)
            ends1.append(starts1[-1] + part.size)
    return np.concatenate(rows1).astype(np.int32), np.array(starts1), np.array(ends1)


@pytest.mark.parametrize("task", ["gini2", "entropy4", "mse"])
def test_histogram_subtraction_equals_building_every_histogram(task):
    rng = np.random.default_rng([7, list(TASKS).index(task)])
    n, n_feat = 3000, 6
    prob = Problem(rng, n, task)
    n_bins = rng.integers(2, 255, n_feat).astype(np.int32)
    Xb = hist_matrix(rng, n, n_bins, [0.1] * n_feat)
    args = (*prob.kernel_args(), prob.w_total, 1, 0.0)
    # level 0: two parents holding every in-bag row; both keep their histograms
    inbag = np.flatnonzero(prob.w > 0).astype(np.int32)
    cut = inbag.size // 3
    rows0 = inbag.copy()
    starts0, ends0 = np.array([0, cut]), np.array([cut, inbag.size])
    none = splitter.no_subtraction(2, prob.S)
    out0 = splitter.best_splits_hist(Xb, n_bins, rows0, starts0, ends0, np.ones((2, n_feat), np.uint8),
                              *args, *none[:-1], np.ones(2, np.uint8), *splitter.NO_NODE_STATS)
    index, hist, cnt = out0[4:]
    # compact: each pair keeps its bins, then its missing bin
    assert hist.shape[0] == 2 * int((n_bins + 1).sum()) and (index >= 0).all()
    for j in range(2):
        for f in range(n_feat):
            ref_h, ref_c = _ref_hist(prob, Xb, rows0[starts0[j]:ends0[j]], f)
            nb = n_bins[f]
            at = slice(index[j, f], index[j, f] + nb + 1)
            np.testing.assert_allclose(hist[at], np.vstack([ref_h[:nb], ref_h[MISSING]]), **TOL)
            assert np.array_equal(cnt[at], np.append(ref_c[:nb], ref_c[MISSING]))
    # level 1: each parent splits in two (rows in ascending order within a child)
    rows1, starts1, ends1 = _split_children(rows0, starts0, ends0,
                                            lambda j, seg: rng.random(seg.size) < (0.3 if j == 0 else 0.6))
    sibling = np.array([1, 0, 3, 2])
    size = ends1 - starts1
    larger = size > size[sibling]
    parent_slot = np.where(larger, [0, 0, 1, 1], -1)
    fmask1 = (rng.random((4, n_feat)) < 0.7).astype(np.uint8)
    fmask1[:, 0] = 1
    sub = (starts1[sibling], ends1[sibling], parent_slot, index, hist, cnt, np.zeros(4, np.uint8))
    got = splitter.best_splits_hist(Xb, n_bins, rows1, starts1, ends1, fmask1, *args, *sub, *splitter.NO_NODE_STATS)[:4]
    want = hist_search(Xb, n_bins, rows1, starts1, ends1, fmask1, *args)
    for g, w in zip(got[1:], want[1:]):
        assert np.array_equal(g, w)
    if prob.is_clf:   # integer weights: parent minus sibling is exact
        assert np.array_equal(got[0], want[0])
    else:
        np.testing.assert_allclose(got[0], want[0], **TOL)
    assert np.isfinite(got[0][larger]).all()
    # the larger children alone (their siblings not in the call): built from the siblings' rows
    only = np.flatnonzero(larger)
    alone = splitter.best_splits_hist(Xb, n_bins, rows1, starts1[only], ends1[only], fmask1[only], *args,
                                      starts1[sibling][only], ends1[sibling][only], parent_slot[only],
                                      *sub[3:6], np.zeros(only.size, np.uint8), *splitter.NO_NODE_STATS)[:4]
    for g, w in zip(alone, got):
        assert np.array_equal(g, w[only])
    # the larger children's histograms do come from the parents': spoiled parents change them
    spoiled = splitter.best_splits_hist(Xb, n_bins, rows1, starts1, ends1, fmask1, *args,
                                 *sub[:4], hist * 0.5, cnt, sub[6], *splitter.NO_NODE_STATS)[0]
    assert not np.array_equal(spoiled[larger], want[0][larger])
    assert np.array_equal(spoiled[~larger], want[0][~larger])


@pytest.mark.parametrize("task", ["gini2", "entropy4", "newton"])
@pytest.mark.parametrize("threads", [1, 3])
def test_default_bins_give_the_histograms_and_splits_of_every_row_added(task, threads):
    """Where sums are exact (integer weights; Newton statistics on a grid, as
    boosting's are), a default bin taken as the rows' totals less the other
    bins gives the very histograms, kept histograms and splits of adding
    every row, whether the other rows are found by scanning the column or
    in the rows' lists, and whether a large node is built in blocks of its
    rows: built from a node's rows and by subtraction, default bins that are
    common, rare, missing or absent from a node, any thread count."""
    rng = np.random.default_rng([8, list(TASKS).index(task), threads])
    n, n_feat = 30000, 7     # nodes of several BLOCK_ROWS: built in row blocks on 3 threads
    prob = Problem(rng, n, task)
    if not prob.is_clf:     # on a power-of-two grid: every partial sum exact
        prob.yw = np.round(prob.yw * 256) / 256
    n_bins = np.array([2, 2, 9, 40, 3, 255, 5], dtype=np.int32)
    Xb = hist_matrix(rng, n, n_bins, [0.0, 0.05, 0.1, 0.0, 0.8, 0.02, 0.0])
    Xb[rng.random(n) < 0.9, 0] = 0          # one-hot-like columns
    Xb[rng.random(n) < 0.7, 1] = 1
    Xb[rng.random(n) < 0.95, 6] = 4
    dflt = np.array([0, 1, 3, 7, MISSING, 200, 4], dtype=np.int64)   # several that few rows hold
    listed = splitter.row_entries(Xb, dflt, np.array([1, 0, 1, 1, 1, 0, 1], bool))
    ways = [{}, {"default_bin": dflt}, {"default_bin": dflt, "row_entries": listed},
            {"exact_sums": True}, {"default_bin": dflt, "row_entries": listed, "exact_sums": True}]
    args = (*prob.kernel_args(), prob.w_total, 1, 0.0)
    inbag = np.flatnonzero(prob.w > 0).astype(np.int32)
    cut = inbag.size // 3
    rows0, starts0, ends0 = inbag.copy(), np.array([0, cut]), np.array([cut, inbag.size])
    none = splitter.no_subtraction(2, prob.S)
    old = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        level0 = [splitter.best_splits_hist(Xb, n_bins, rows0, starts0, ends0, np.ones((2, n_feat), np.uint8),
                                            *args, *none[:-1], np.ones(2, np.uint8), *splitter.NO_NODE_STATS,
                                            **way) for way in ways]
        for other in level0[1:]:
            for a, b in zip(level0[0], other):
                assert np.array_equal(a, b)
        index, hist, cnt = level0[0][4:]
        rows1, starts1, ends1 = _split_children(
            rows0, starts0, ends0, lambda j, seg: Xb[seg, 6] == 4 if j == 0 else rng.random(seg.size) < 0.4)
        sibling = np.array([1, 0, 3, 2])
        larger = (ends1 - starts1) > (ends1 - starts1)[sibling]
        sub = (starts1[sibling], ends1[sibling], np.where(larger, [0, 0, 1, 1], -1), index, hist, cnt,
               np.ones(4, np.uint8))
        level1 = [splitter.best_splits_hist(Xb, n_bins, rows1, starts1, ends1, np.ones((4, n_feat), np.uint8),
                                            *args, *sub, *splitter.NO_NODE_STATS, **way)
                  for way in ways]
        for other in level1[1:]:
            for a, b in zip(level1[0], other):
                assert np.array_equal(a, b)
        assert np.isfinite(level1[0][0]).any()
    finally:
        numba.set_num_threads(old)


def test_row_entries_list_each_rows_values_outside_the_default_bins():
    rng = np.random.default_rng(12)
    Xb = hist_matrix(rng, 300, [3, 2, 5, 4], [0.1, 0.0, 0.3, 0.0])
    dflt = np.array([1, -1, MISSING, 0])
    listed, ptr, feats, codes = splitter.row_entries(Xb, dflt, [True, True, True, False], block_rows=64)
    assert listed.tolist() == [1, 0, 1, 0]       # a feature without a default bin is never listed
    assert feats.dtype == np.uint16 and ptr[0] == 0 and ptr[-1] == feats.size == codes.size
    for r in range(Xb.shape[0]):
        want = [(f, Xb[r, f]) for f in (0, 2) if Xb[r, f] != dflt[f]]
        assert list(zip(feats[ptr[r]:ptr[r + 1]].tolist(), codes[ptr[r]:ptr[r + 1]].tolist())) == want


def test_listed_features_take_the_largest_shares_within_the_byte_budget():
    share = np.array([0.95, 0.0, 0.6, 0.99, 0.9])
    # 0.3 bytes per cell of 5 columns: 1.5 bytes per row, 3 bytes per listed value: the
    # shares 0.99, 0.95, 0.9 take 0.03 + 0.15 + 0.3 bytes per row, 0.6 would take 1.2 more
    got = binning.listed_features(share, 1000, 0.3)
    assert got.tolist() == [True, False, False, True, True]
    assert binning.listed_features(share, 1000, 0.35).tolist() == [True, False, True, True, True]
    assert not binning.listed_features(share, 1000, 0.0).any()
    assert binning.listed_features(share, 1000, 10.0).tolist() == [True, False, True, True, True]


def test_newton_gain_is_xgboosts_loss_reduction():
    """Under the Newton criterion the kernels' gain, with the gain scale 2, is
    XGBoost's ``(G_l^2/(H_l+lam) + G_r^2/(H_r+lam) - G^2/(H+lam)) / 2``, and
    min_weight_leaf bounds the children's hessian sums (min_child_weight)."""
    lam = 1.5
    left = np.array([0.75, -2.0, 0.0])      # (H, G, 0)
    right = np.array([1.25, 3.5, 0.0])
    node = left + right
    imp_node = impurity.impurity(node, node[0], impurity.NEWTON, lam)
    want = 0.5 * (2.0 ** 2 / (0.75 + lam) + 3.5 ** 2 / (1.25 + lam) - 1.5 ** 2 / (2.0 + lam))
    args = (node[0], imp_node, 2.0, False, impurity.NEWTON, lam, 1)
    assert np.isclose(criterion.split_gain(left, right, 3, 4, *args, 0.0), want, rtol=1e-12)
    assert criterion.split_gain(left, right, 3, 4, *args, 0.8) == -np.inf    # H_l = 0.75 < 0.8
    assert np.isclose(criterion.split_gain(left, right, 3, 4, *args, 0.7), want, rtol=1e-12)


@pytest.mark.parametrize("task", TASKS)
def test_partition_stats_bits_and_children_statistics(task):
    """The fused kernel gives partition_bits' bits and, per child, the statistics
    node_statistics gives on that child's rows after apply_partition, bit for bit."""
    rng = np.random.default_rng([7, list(TASKS).index(task)])
    prob = Problem(rng, 300, task)
    Xb = rng.integers(0, 6, (300, 3)).astype(np.uint8)
    Xb[rng.random((300, 3)) < 0.1] = binning.MISSING_BIN
    rows, starts, ends = make_segments(rng, prob.w)
    feats = rng.integers(0, 3, starts.size).astype(np.int64)
    bins = rng.integers(0, 6, starts.size).astype(np.int32)
    ml = rng.integers(0, 2, starts.size).astype(np.uint8)
    bits, stats = partitioner.partition_stats(Xb, rows, starts, ends, feats, bins, ml, binning.MISSING_BIN,
                                              prob.ycls, prob.yw, prob.is_clf, prob.S)
    assert bits.tolist() == partitioner.partition_bits(Xb, rows, starts, ends, feats, bins, ml,
                                                       binning.MISSING_BIN).tolist()
    assert stats.shape == (2 * starts.size, prob.S)
    # numpy reference: every child's statistics summed over its rows
    at = 0
    for j in range(starts.size):
        idx = rows[starts[j]:ends[j]]
        left = bits[at:at + idx.size] == 1
        at += idx.size
        for side, part in ((0, idx[left]), (1, idx[~left])):
            if prob.is_clf:
                ref = np.bincount(prob.y[part], weights=prob.w[part], minlength=prob.C)
            else:
                ref = prob.yw[part].sum(axis=0)
            assert np.allclose(stats[2 * j + side], ref, **TOL)
    # and exactly what the master computed before from the partitioned rows
    moved = rows.copy()
    n_left = partitioner.apply_partition(moved, starts, ends, bits)
    kids_s = np.ravel(np.column_stack((starts, starts + n_left)))
    kids_e = np.ravel(np.column_stack((starts + n_left, ends)))
    ref_stats = criterion.node_statistics(moved, kids_s, kids_e, *prob.kernel_args())[0]
    assert np.array_equal(stats, ref_stats)


def test_place_bits_puts_each_segment_at_its_place_and_counts_its_ones():
    """Packed segments of several lengths (none, short, across bytes) land where
    numpy's unpack / scatter / pack would put them; their 1 bits are counted."""
    rng = np.random.default_rng(11)
    for lengths in [np.array([13, 0, 1, 8, 29, 7, 64, 3])] + [rng.integers(0, 90, rng.integers(1, 12))
                                                              for _ in range(30)]:
        _check_place_bits(rng, lengths.astype(np.int64))


def _check_place_bits(rng, lengths):
    order = rng.permutation(lengths.size)                 # segments in another order in the bitmap
    starts = np.zeros(lengths.size, dtype=np.int64)
    starts[order] = np.cumsum(lengths[order]) - lengths[order]
    bits = rng.integers(0, 2, int(lengths.sum())).astype(np.uint8)
    out = np.zeros((int(lengths.sum()) + 7) // 8, dtype=np.uint8)
    ones = partitioner.place_bits(np.packbits(bits), lengths, starts, out)
    want = np.zeros(int(lengths.sum()), dtype=np.uint8)
    at = np.concatenate(([0], np.cumsum(lengths)))
    for k in range(lengths.size):
        want[starts[k]:starts[k] + lengths[k]] = bits[at[k]:at[k + 1]]
        assert ones[k] == bits[at[k]:at[k + 1]].sum()
    assert np.array_equal(out, np.packbits(want))
