"""Splitting one table into per-client row sets (horizontal federated learning).

Two seeded schemes, as used in the horizontal experiments:

* :func:`iid_partition`: stratified, equal sizes — every client gets the same
  number of rows (within one) and every class in the same proportion (within
  one row per class);
* :func:`dirichlet_partition`: label skew — every client first gets
  ``min_rows`` random rows; then, for each class, the shares of the clients
  in its remaining rows are drawn from a symmetric Dirichlet distribution
  with concentration ``alpha`` (small ``alpha``: each client sees few classes).
"""
import numpy as np

from ..errors import InputError


def _check(y, n_clients, min_rows):
    y = np.asarray(y)
    if isinstance(n_clients, bool) or not isinstance(n_clients, (int, np.integer)) or n_clients < 1:
        raise InputError("clients", f"must be an int >= 1, got {n_clients!r}")
    if y.shape[0] < n_clients * min_rows:
        raise InputError("clients", f"{y.shape[0]} rows cannot give {n_clients} clients at least "
                                    f"{min_rows} rows each")
    return y


def iid_partition(y, n_clients, seed=0):
    """Stratified equal-size row sets (sorted index arrays), one per client."""
    y = _check(y, n_clients, 1)
    rng = np.random.default_rng(seed)
    _, codes = np.unique(y, return_inverse=True)
    # shuffle inside each class, lay the classes end to end and deal the rows
    # round-robin, starting each class where the previous one stopped
    order = np.concatenate([rng.permutation(np.flatnonzero(codes == c)) for c in range(codes.max() + 1)])
    owner = (np.arange(order.size) + rng.integers(n_clients)) % n_clients
    return [np.sort(order[owner == k]) for k in range(n_clients)]


def dirichlet_partition(y, n_clients, alpha=0.5, seed=0, min_rows=5):
    """Label-skewed row sets (sorted index arrays), one per client, each with
    at least ``min_rows`` rows: every client first gets ``min_rows`` random
    rows, then the rows of each class are shared out by a Dirichlet draw."""
    y = _check(y, n_clients, min_rows)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0:
        raise InputError("alpha", f"must be a number > 0, got {alpha!r}")
    rng = np.random.default_rng(seed)
    _, codes = np.unique(y, return_inverse=True)
    order = rng.permutation(y.shape[0])
    base = np.split(order[:n_clients * min_rows], n_clients)
    rest = order[n_clients * min_rows:]
    parts = [[b] for b in base]
    for c in range(codes.max() + 1):
        rows = rest[codes[rest] == c]
        shares = rng.dirichlet(np.full(n_clients, float(alpha)))
        cuts = (np.cumsum(shares)[:-1] * rows.size).astype(np.int64)
        for k, chunk in enumerate(np.split(rows, cuts)):
            parts[k].append(chunk)
    return [np.sort(np.concatenate(p)) for p in parts]
