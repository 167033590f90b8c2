"""Node impurity: class-count entropy and Gini index (numpy, any shape), and the
numba scalar :func:`impurity` the growth kernels evaluate per node.

The numpy functions add the per-class terms one class after the other, so a
row of a matrix gets exactly the result of the same counts given alone, and
classes with no count change nothing.
"""
import numpy as np
from numba import njit

GINI = 0
ENTROPY = 1
SQUARED_ERROR = 2
NEWTON = 3          # gradient boosting: second-order (Newton) statistics (h, g, 0)


def _fractions(counts, axis):
    counts = np.moveaxis(np.asarray(counts, dtype=np.float64), axis, -1)
    n = counts.sum(axis=-1, keepdims=True)
    return np.divide(counts, n, out=np.zeros_like(counts), where=n > 0)


def _scalar_or_array(a):
    return a[()] if a.ndim == 0 else a


def entropy(counts, axis=-1):
    """Entropy in bits of class counts (or weights) along ``axis``; classes with
    zero count are ignored and an all-zero distribution has entropy 0."""
    p = _fractions(counts, axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0)
    s = np.zeros(p.shape[:-1])
    for k in range(p.shape[-1]):
        s = s + terms[..., k]
    return _scalar_or_array(np.subtract(0.0, s))


def gini(counts, axis=-1):
    """Gini index ``1 - sum p_k^2`` of class counts (or weights) along ``axis``;
    an all-zero distribution has index 0."""
    counts = np.asarray(counts, dtype=np.float64)
    p = _fractions(counts, axis)
    s = np.zeros(p.shape[:-1])
    for k in range(p.shape[-1]):
        s = s + p[..., k] * p[..., k]
    empty = np.moveaxis(counts, axis, -1).sum(axis=-1) <= 0
    return _scalar_or_array(np.where(empty, 0.0, 1.0 - s))


@njit(cache=True)
def impurity(stats, w, crit, lam):
    """Impurity of a node from its statistics vector and total weight
    (``crit``: :data:`GINI`, :data:`ENTROPY` on class weights,
    :data:`SQUARED_ERROR` on ``(w, w*y, w*y*y)``, or :data:`NEWTON` on
    ``(H, G, 0)``, sums of the hessians and gradients, with ``w = H``:
    ``-G^2 / ((H + lam) w)``, so that a weighted decrease is XGBoost's gain;
    ``lam`` is the L2 penalty on leaf values, used by NEWTON only)."""
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
    if crit == NEWTON:
        # times the weight, minus the node's structure score G^2 / (H + lambda)
        return -(stats[1] * stats[1]) / ((w + lam) * w)
    mean = stats[1] / w
    return stats[2] / w - mean * mean
