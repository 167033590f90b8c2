"""FedGA-Tree against each client's local tree: three figures side by side.

* ``delta_percent``: the paper's Delta (Eq. 3), the mean over the clients of
  ``(fed / local - 1) * 100``, a mean of per-client ratios.  A client whose
  local score is 0 has no ratio: it is listed and left out of the mean.
* ``mean_change``: ``mean(fed) - mean(local)`` over every client, in the
  score's own units (F1, or MSE for regression), and ``mean_change_percent``,
  the same as a share of ``mean(local)``.
* ``improved_percent``: the share of all clients whose federated score is
  strictly better than their local one (``worse_percent``: strictly worse).

Delta weighs every client's ratio alike, so a client with a tiny local score
moves it most: on an imbalanced set, two clients going from F1 0.02 to 0.08
add +300 % each to the sum, while ten clients losing 0.03 each subtract a
few tens of percent.  Delta can then be positive while the mean F1 falls.
``delta_and_mean_disagree`` flags that case (the two have strictly opposite
signs); read the mean change and the share improved before Delta then.

Both Delta and the mean change are signed the same way (federated against
local), so for classification (F1) positive is better and for regression
(MSE) negative is better.
"""
import numpy as np


def against_local(fed, local, higher_is_better=True, names=None):
    """The figures above from per-client scores ``fed`` and ``local`` (same
    order).  ``names``: the clients' names (default 1..n), used in
    ``client_delta_percent`` and ``clients_without_delta``."""
    fed, local = np.asarray(fed, dtype=np.float64), np.asarray(local, dtype=np.float64)
    if fed.shape != local.shape or fed.ndim != 1 or fed.size == 0:
        raise ValueError(f"need one federated and one local score per client, got {fed.shape} and {local.shape}")
    names = list(range(1, fed.size + 1)) if names is None else list(names)
    defined = local > 0
    ratios = np.full(fed.shape, np.nan)
    ratios[defined] = (fed[defined] / local[defined] - 1.0) * 100.0
    delta = float(ratios[defined].mean()) if defined.any() else None
    mean_local, mean_fed = float(local.mean()), float(fed.mean())
    change = mean_fed - mean_local
    better = fed > local if higher_is_better else fed < local
    worse = fed < local if higher_is_better else fed > local
    disagree = delta is not None and delta * change < 0
    return {
        "delta_percent": delta,
        "mean_local": mean_local,
        "mean_fedga": mean_fed,
        "mean_change": change,
        "mean_change_percent": (change / mean_local * 100.0) if mean_local != 0 else None,
        "improved_percent": float(better.mean() * 100.0),
        "worse_percent": float(worse.mean() * 100.0),
        "clients": int(fed.size),
        "clients_improved": int(better.sum()),
        "clients_without_delta": [n for n, d in zip(names, defined) if not d],
        "client_delta_percent": {n: (None if np.isnan(v) else float(v)) for n, v in zip(names, ratios)},
        "delta_and_mean_disagree": bool(disagree),
    }


def describe(c, metric, scored_on="test"):
    """Log lines of :func:`against_local`'s figures (``metric``: "f1" or "mse")."""
    d = c["delta_percent"]
    pct = c["mean_change_percent"]
    lines = [f"fedga against each client's local tree ({scored_on} {metric}): mean {c['mean_local']:.4g} -> "
             f"{c['mean_fedga']:.4g}, change {c['mean_change']:+.4g}"
             + (f" ({pct:+.1f} % of the local mean)" if pct is not None else "")
             + f"; Delta (Eq. 3, mean of per-client ratios) "
             + ("undefined (every local score is 0)" if d is None else f"{d:+.2f} %")
             + f"; {c['clients_improved']} of {c['clients']} clients improved ({c['improved_percent']:.0f} %)"]
    if c["clients_without_delta"]:
        lines.append(f"  clients without Delta (local {metric} 0): {c['clients_without_delta']}")
    if c["delta_and_mean_disagree"]:
        ranked = sorted(((v, n) for n, v in c["client_delta_percent"].items() if v is not None),
                        key=lambda t: -abs(t[0]))[:3]
        lines.append(f"  note: Delta and the change of the mean disagree in sign; Delta weighs each client's "
                     f"ratio alike, and the largest are " + ", ".join(f"client {n} {v:+.0f} %" for v, n in ranked)
                     + f"; the mean {metric} " + ("rose" if c["mean_change"] > 0 else "fell"))
    return lines
