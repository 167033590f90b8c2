"""Aggregation on the server: pure functions of the clients' replies."""
import numpy as np


def in_rank_order(by_rank):
    """The values of ``{rank: value}`` ordered by rank, whatever order they arrived in."""
    return [by_rank[r] for r in sorted(by_rank)]


def weighted_average(values, weights):
    """Weighted mean of equally shaped arrays (weights need not sum to one)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size != len(values) or w.size == 0:
        raise ValueError("one weight per value is needed")
    if (w < 0).any() or w.sum() <= 0:
        raise ValueError("weights must be >= 0 with a positive sum")
    w = w / w.sum()
    out = np.zeros_like(np.asarray(values[0], dtype=np.float64))
    for v, wi in zip(values, w):
        out = out + wi * np.asarray(v, dtype=np.float64)
    return out


def fedavg(models, weights):
    """FedAvg: every parameter array is the weighted mean of the clients' arrays
    (``models``: one dict of arrays per client, with the same keys and shapes)."""
    keys = list(models[0])
    for m in models[1:]:
        if list(m) != keys:
            raise ValueError("clients sent models with different parameters")
    return {k: weighted_average([m[k] for m in models], weights) for k in keys}


def client_metrics(per_client, weights=None):
    """``{metric: mean over clients}`` of ``{rank: {metric: value}}`` (weighted
    by ``{rank: weight}`` when given)."""
    ranks = sorted(per_client)
    names = list(per_client[ranks[0]])
    w = None if weights is None else [weights[r] for r in ranks]
    return {m: float(np.average([per_client[r][m] for r in ranks], weights=w)) for m in names}
