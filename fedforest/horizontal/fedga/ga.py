"""FedGA-Tree's genetic algorithm and the clients' pure helpers: numpy only,
every random draw from an explicit ``np.random.Generator``.

Server side: the operators on structure strings (tournament selection,
one-point crossover, node flip, node swap, substring swap), the (mu+lambda)
update with client-injected members, the weighted fitness average, the active
subset of a generation.  Client side: the noisy sample size, the regression
votes (Eq. 1 and 2 of the paper), the stratified fit/validation split, the
quantile binning of Appendix A, and the fitness scores (F1 of the job's
positive class, macro-F1, MSE).
"""
import math

import numpy as np

from ...federation.metrics import macro_f1
from ...tree.structure import canonicalize

FLIP, SWAP, SUBSTRING = "node_flip", "node_swap", "substring_swap"
OPERATORS = (FLIP, SWAP, SUBSTRING)


# ---------------------------------------------------------------------------
# Server: participation and aggregation
# ---------------------------------------------------------------------------
def choose_active(rng, clients, k):
    """A fresh random subset of ``k`` clients, in rank order."""
    clients = list(clients)
    if k >= len(clients):
        return clients
    return sorted(int(c) for c in rng.choice(clients, size=k, replace=False))


def weighted_fitness(per_client, sizes):
    """``sum_i f_i * n_i / sum_i n_i`` of equally long fitness arrays ``{rank: f_i}``
    with ``{rank: n_i}`` (the clients' noisy sizes)."""
    ranks = sorted(per_client)
    w = np.array([sizes[r] for r in ranks], dtype=np.float64)
    F = np.array([per_client[r] for r in ranks], dtype=np.float64)
    return (w[:, None] * F).sum(axis=0) / w.sum()


def key(string):
    """The dictionary key of a canonical string."""
    return np.asarray(string, dtype=np.int32).tobytes()


# ---------------------------------------------------------------------------
# Server: operators
# ---------------------------------------------------------------------------
def n_mutations(fraction, length):
    """m1 / m2: ``max(1, round(fraction * L))``."""
    return max(1, int(round(fraction * length)))


def tournament(rng, fitness, size):
    """Index of the fittest of ``size`` distinct members drawn at random (higher
    fitness wins; a tie goes to the member drawn first)."""
    fitness = np.asarray(fitness)
    pick = rng.choice(fitness.shape[0], size=min(size, fitness.shape[0]), replace=False)
    return int(pick[int(np.argmax(fitness[pick]))])


def crossover(rng, a, b):
    """One-point crossover: a cut in ``1..L-1`` and the two children that swap the
    tails (copies of the parents when ``L == 1``)."""
    a, b = np.array(a, dtype=np.int32), np.array(b, dtype=np.int32)
    L = a.shape[0]
    if L < 2:
        return a, b
    cut = int(rng.integers(1, L))
    return np.concatenate([a[:cut], b[cut:]]), np.concatenate([b[:cut], a[cut:]])


def node_flip(rng, s, m, n_features):
    """``m`` distinct slots (at most L) each take a value drawn uniformly from the
    columns and NIL, other than its current value."""
    s = np.array(s, dtype=np.int32)
    L = s.shape[0]
    for i in rng.choice(L, size=min(m, L), replace=False):
        v = int(rng.integers(-1, n_features - 1))   # n_features + 1 values minus the current one
        s[i] = v if v < s[i] else v + 1
    return s


def node_swap(rng, s, m):
    """``m`` times: exchange the values of two distinct random slots (nothing when L == 1)."""
    s = np.array(s, dtype=np.int32)
    L = s.shape[0]
    if L < 2:
        return s
    for _ in range(m):
        i, j = rng.choice(L, size=2, replace=False)
        s[i], s[j] = s[j], s[i]
    return s


_NON_IDENTITY = ((0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))


def substring_swap(rng, s):
    """Two distinct cuts split the string into three non-empty parts, which are
    put back in a random order other than the original (nothing when L < 3)."""
    s = np.array(s, dtype=np.int32)
    L = s.shape[0]
    if L < 3:
        return s
    c1, c2 = sorted(int(c) for c in rng.choice(np.arange(1, L), size=2, replace=False))
    parts = (s[:c1], s[c1:c2], s[c2:])
    order = _NON_IDENTITY[int(rng.integers(len(_NON_IDENTITY)))]
    return np.concatenate([parts[k] for k in order])


def mutate(rng, s, operator, m1, m2, n_features):
    if operator == FLIP:
        return node_flip(rng, s, m1, n_features)
    if operator == SWAP:
        return node_swap(rng, s, m2)
    if operator == SUBSTRING:
        return substring_swap(rng, s)
    raise ValueError(f"unknown mutation operator {operator!r}")


def offspring(rng, pop, fitness, n, tournament_size, m1, m2, n_features):
    """``n`` canonical children of ``pop`` ((P, L)): pairs of tournament winners,
    one-point crossover, then the one mutation operator drawn for this generation
    applied to every child.  Returns (children (n, L), operator)."""
    operator = OPERATORS[int(rng.integers(len(OPERATORS)))]
    kids = []
    while len(kids) < n:
        a = pop[tournament(rng, fitness, tournament_size)]
        b = pop[tournament(rng, fitness, tournament_size)]
        for child in crossover(rng, a, b):
            if len(kids) < n:
                kids.append(mutate(rng, child, operator, m1, m2, n_features))
    return canonicalize(np.array(kids, dtype=np.int32).reshape(n, pop.shape[1])), operator


def update(candidates, fitness, size, elites=()):
    """The (mu+lambda) update: the ``size`` fittest distinct candidates (higher
    fitness first, earlier candidate on a tie); candidates whose key is in
    ``elites`` (the clients' structures under elitism) are kept whatever their
    fitness.  With fewer distinct candidates than ``size`` the fittest are
    repeated.  Returns (population (size, L), fitness (size,))."""
    candidates = np.asarray(candidates, dtype=np.int32)
    fitness = np.asarray(fitness, dtype=np.float64)
    seen, unique = set(), []
    for i in range(candidates.shape[0]):
        k = key(candidates[i])
        if k not in seen:
            seen.add(k)
            unique.append(i)
    unique = np.array(unique)
    order = unique[np.argsort(-fitness[unique], kind="stable")]
    elite_keys = set(elites)
    forced = [i for i in order if key(candidates[i]) in elite_keys][:size]
    rest = [i for i in order if key(candidates[i]) not in elite_keys]
    chosen = forced + rest[:size - len(forced)]
    position = {int(i): k for k, i in enumerate(order)}
    chosen = sorted(chosen, key=lambda i: position[int(i)])
    n_distinct = len(chosen)
    while len(chosen) < size:
        chosen.append(chosen[len(chosen) % n_distinct])
    chosen = np.array(chosen)
    return candidates[chosen].copy(), fitness[chosen].copy()


# ---------------------------------------------------------------------------
# Clients
# ---------------------------------------------------------------------------
def noisy_size(rng, n, epsilon):
    """``n + Laplace(1 / epsilon)``, at least 1."""
    return max(1.0, float(n) + float(rng.laplace(0.0, 1.0 / epsilon)))


def coefficient_of_variation(v):
    v = np.asarray(v, dtype=np.float64)
    mean = abs(float(np.mean(v)))
    return float(np.std(v)) / mean if mean > 0 else math.inf


def vote_all_rows(scores, depth_index, phi_star, theta_star):
    """Eq. 1: ``scores[k, j]`` are the R^2 of fold k at the j-th depth of the range;
    vote 1 (fit and score on all rows) when the folds agree at the global depth
    (phi < phi*) and the depths differ (mean over folds of theta > theta*)."""
    scores = np.asarray(scores, dtype=np.float64)
    phi = coefficient_of_variation(scores[:, depth_index])
    theta = float(np.mean([coefficient_of_variation(row) for row in scores]))
    return int(phi < phi_star and theta > theta_star), phi, theta


def vote_elitism(y, mu_star):
    """Eq. 2: vote 1 when the fraction of distinct targets exceeds ``mu_star``."""
    y = np.asarray(y)
    mu = np.unique(y).size / max(1, y.size)
    return int(mu > mu_star), mu


def split_rows(rng, y, ratio, stratify):
    """A seeded fit/validation split of ``range(len(y))`` (``ratio`` to fit),
    stratified by class when ``stratify``.  Both parts are non-empty when there
    are at least 2 rows; ``ratio == 1`` fits and scores on every row."""
    n = len(y)
    rows = np.arange(n)
    if ratio >= 1.0 or n < 2:
        return rows, rows
    groups = [rows[y == c] for c in np.unique(y)] if stratify else [rows]
    fit, val = [], []
    for g in groups:
        g = rng.permutation(g)
        cut = int(round(ratio * g.size))
        fit.append(g[:cut])
        val.append(g[cut:])
    fit, val = np.sort(np.concatenate(fit)), np.sort(np.concatenate(val))
    if fit.size == 0 or val.size == 0:
        perm = rng.permutation(n)
        cut = min(n - 1, max(1, int(round(ratio * n))))
        fit, val = np.sort(perm[:cut]), np.sort(perm[cut:])
    return fit, val


def fit_bins(col, n_bins):
    """Inner bin edges of one column (Appendix A): ``n_bins`` quantile bins
    (equal edges merged); when that leaves one bin, 2 uniform bins."""
    col = np.asarray(col, dtype=np.float64)
    edges = np.unique(np.quantile(col, np.linspace(0, 1, n_bins + 1)))
    inner = edges[1:-1]
    if inner.size == 0:
        lo, hi = float(col.min()), float(col.max())
        inner = np.array([(lo + hi) / 2.0]) if hi > lo else np.empty(0)
    return inner


def apply_bins(X, edges):
    """Bin codes of the columns that have edges (``edges[j]`` None: kept as is)."""
    X = np.array(X, dtype=np.float64, copy=True)
    for j, e in enumerate(edges):
        if e is not None:
            X[:, j] = np.searchsorted(np.asarray(e, dtype=np.float64), X[:, j], side="right")
    return X


def f1_score(y, pred, n_classes, positive=1):
    """F1 of class code ``positive`` when there are two classes (the job's
    positive class: see :func:`fedforest.data.validation.positive_class_index`),
    else macro-F1 over the classes present in ``y`` or ``pred`` (scikit-learn's
    ``f1_score`` with ``zero_division=0``; ``positive`` is then unused)."""
    if n_classes != 2:
        return macro_f1(y, pred)
    y, pred = np.asarray(y) == positive, np.asarray(pred) == positive
    tp2, wrong = 2 * np.count_nonzero(y & pred), np.count_nonzero(y != pred)
    return float(tp2 / (tp2 + wrong)) if tp2 + wrong else 0.0


def mse(y, pred):
    return float(np.mean((np.asarray(y, dtype=np.float64) - np.asarray(pred, dtype=np.float64)) ** 2))

