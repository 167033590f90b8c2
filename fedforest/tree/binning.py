"""Quantile binning of feature columns for histogram split search."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit, prange

from . import threads as kernel_threads

MISSING_BIN = 255          # histogram code of a missing (NaN) value
MAX_BINS = 255             # non-missing bins available per feature


def column_thresholds(col, max_bins):
    """Upper bin edges of one column: midpoints between distinct values, or
    between quantiles when the column has more than ``max_bins`` distinct values.
    NaN values are ignored (they get the missing bin)."""
    col = np.sort(col[~np.isnan(col)])     # one sort serves the distinct values and the quantiles
    if col.size == 0:
        return np.empty(0)
    distinct = col[np.concatenate(([True], col[1:] != col[:-1]))]
    if distinct.size <= max_bins:
        return _midpoints(distinct)
    q = np.percentile(col, np.linspace(0, 100, max_bins + 1)[1:-1], method="midpoint")
    return np.unique(q)


def _midpoints(values):
    """Edges between consecutive sorted distinct values, each strictly below the
    upper value (as the exact splitter does: the lower value when the midpoint
    rounds up to the upper one or overflows)."""
    lo, hi = values[:-1], values[1:]
    mid = lo / 2.0 + hi / 2.0
    bad = (mid >= hi) | ~np.isfinite(mid)
    mid[bad] = lo[bad]
    return mid


def fit_bins(X, max_bins):
    """Bin edges of every column of ``X`` as a padded (n_features, MAX_BINS) array
    (``inf`` beyond the last edge) and the number of non-missing bins per column.
    Columns are binned on the kernels' threads (numpy sorts without the GIL)."""
    if not 2 <= max_bins <= MAX_BINS:
        raise ValueError(f"max_bins must be in [2, {MAX_BINS}]")
    n_feat = X.shape[1]
    edges = np.full((n_feat, MAX_BINS), np.inf)
    n_bins = np.ones(n_feat, dtype=np.int32)
    workers = min(n_feat, kernel_threads.threads())
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            found = list(pool.map(lambda f: column_thresholds(X[:, f], max_bins), range(n_feat)))
    else:
        found = [column_thresholds(X[:, f], max_bins) for f in range(n_feat)]
    for f, t in enumerate(found):
        edges[f, : t.size] = t
        n_bins[f] = t.size + 1
    return edges, n_bins


def transform_bins(X, edges, n_bins):
    """Bin codes (uint8, column-major); NaN gets ``MISSING_BIN``.  A value ``x``
    lands in bin ``b`` with ``edges[b-1] < x <= edges[b]``."""
    X = np.asarray(X, dtype=np.float64)
    out = np.empty(X.shape, dtype=np.uint8, order="F")
    fill_bin_codes(X, edges, np.asarray(n_bins, dtype=np.int32), out)
    return out


@njit(cache=True, parallel=True, nogil=True)
def fill_bin_codes(X, edges, n_bins, out):
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
