"""Quantile binning of feature columns for histogram split search."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit, prange

from . import threads as kernel_threads
from .threads import prange_only

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
    n_bins = np.asarray(n_bins, dtype=np.int32)
    out = np.empty(X.shape, dtype=np.uint8, order="F")
    # the kernel takes both transposed, C-contiguous (a column-major X's
    # transpose is, without a copy): one type of arguments whatever the layout
    # and column count (a one-column array would be typed otherwise)
    fill_bin_codes(np.ascontiguousarray(X.T), _padded_edges(edges, n_bins), n_bins, out.T)
    return out


def _padded_edges(edges, n_bins):
    """``edges`` as the kernel reads them: (n_features, MAX_BINS) float64,
    ``inf`` beyond each feature's ``n_bins - 1`` edges (what :func:`fit_bins`
    returns is used as it is)."""
    edges = np.asarray(edges, dtype=np.float64)
    n_edges = np.asarray(n_bins, dtype=np.int64) - 1
    if n_edges.size and not (n_edges.min() >= 0 and n_edges.max() < MAX_BINS):
        raise ValueError(f"n_bins must be in [1, {MAX_BINS}]")
    beyond = np.arange(MAX_BINS)[None, :] >= n_edges[:, None]
    if edges.ndim == 2 and edges.shape == (n_edges.size, MAX_BINS) and np.all(edges[beyond] == np.inf):
        return np.ascontiguousarray(edges)
    padded = np.full((n_edges.size, MAX_BINS), np.inf)
    for f, k in enumerate(n_edges):
        padded[f, :k] = edges[f, :k]
    return padded


#: a bin holding at least this share of a feature's rows is its default bin
#: (histograms add only the other rows where sums are exact: splitter._add_rows_skipping)
DEFAULT_BIN_SHARE = 0.5
#: bytes per cell (of all the party's columns) that the per-row lists of
#: values outside the default bins may take (splitter.row_entries: 3 bytes
#: per listed value); the features whose default bins hold the most rows
#: are listed first
LISTED_BYTES_PER_CELL = 0.35
LISTED_ENTRY_BYTES = 3


def listed_features(share, n_rows, bytes_per_cell=None):
    """Which features (with a default bin holding ``share`` of the rows, 0
    for none) to list per row: those of the largest shares, while their
    listed values take at most ``bytes_per_cell`` (default
    :data:`LISTED_BYTES_PER_CELL`) per cell of all columns."""
    if bytes_per_cell is None:
        bytes_per_cell = LISTED_BYTES_PER_CELL
    share = np.asarray(share, dtype=np.float64)
    listed = np.zeros(share.size, dtype=bool)
    budget = bytes_per_cell * share.size * n_rows
    used = 0.0
    for f in np.argsort(-share, kind="stable"):
        if share[f] <= 0:
            break
        cost = (1.0 - share[f]) * n_rows * LISTED_ENTRY_BYTES
        if used + cost > budget:
            break
        used += cost
        listed[f] = True
    return listed


def default_bins(codes, min_share=DEFAULT_BIN_SHARE):
    """Per column of the bin codes: the code of its most common bin where
    that bin holds at least ``min_share`` of the rows (the lowest code on a
    tie), else -1 (int64); and that bin's share of the rows (float64)."""
    n, n_feat = codes.shape
    out = np.full(n_feat, -1, dtype=np.int64)
    share = np.zeros(n_feat)
    for f in range(n_feat):
        counts = np.bincount(codes[:, f], minlength=MISSING_BIN + 1)
        b = int(np.argmax(counts))
        if n and counts[b] >= min_share * n:
            out[f] = b
            share[f] = counts[b] / n
    return out, share


BIN_ROWS = 4096      # rows per block of fill_bin_codes (a block's columns one after another)


@njit(cache=True, parallel=prange_only(), nogil=True)
def fill_bin_codes(XT, edges, n_bins, outT):
    """Bin code of every value of ``XT`` (features by rows, the transpose of
    the data) into ``outT`` (uint8, the same shape): the number of the
    feature's edges below the value (``MISSING_BIN`` for NaN); blocks of
    rows in parallel, one column at a time within a block.  ``edges`` padded
    with ``inf`` to ``MAX_BINS`` columns (:func:`_padded_edges`).

    The search is branch-free: halving steps of a fixed count (enough for
    the feature's edges), each adding its step where the edge it reads lies
    below the value, so the processor never mispredicts a comparison (twice
    as fast as a branching binary search on random values); a NaN compares
    below no edge and takes the missing bin."""
    n_feat, n = XT.shape
    n_blocks = (n + BIN_ROWS - 1) // BIN_ROWS
    for blk in prange(n_blocks):
        lo = blk * BIN_ROWS
        hi = min(n, lo + BIN_ROWS)
        for f in range(n_feat):
            levels = 0
            while (1 << levels) <= n_bins[f] - 1:     # 2^levels - 1 >= the feature's edges
                levels += 1
            e = edges[f]
            for i in range(lo, hi):
                v = XT[f, i]
                b = 0
                for level in range(levels - 1, -1, -1):
                    step = 1 << level
                    b += step * (e[b + step - 1] < v)
                outT[f, i] = MISSING_BIN if np.isnan(v) else b
