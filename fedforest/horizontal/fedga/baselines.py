"""The baselines of FedGA-Tree's experiments (modes ``fedga_local``,
``fedga_central`` and ``ibm_tree``; see the package docstring).

* ``fedga_local``: one round; each client cross-validates the depth on its
  own rows and keeps scikit-learn's CART of that depth.
* ``fedga_central``: the clients send their rows (a baseline only: every row
  and label moves in the clear); the server bins them when binning is on,
  cross-validates the depth, fits one CART and sends it (and the bin edges)
  back; each client evaluates and saves it.
* ``ibm_tree``: one global tree grown level by level, as the differentially
  private tree of Truex et al. with CART splits: every level, the active
  clients send per frontier node, column and code the class counts of their
  rows plus their share of Laplace noise (the shares of the t active clients
  add up to exactly one Laplace(scale) draw per count: each is the difference
  of two Gamma(1/t, scale) draws).  One row adds 1 to one count of every
  column's histogram of its node, so a level's counts have L1 sensitivity
  F (the number of columns); there are max_depth + 1 levels, so
  scale = (max_depth + 1) * F / epsilon (:func:`ibm_scale`) makes the whole
  tree epsilon-DP.  The server picks per node the split
  ``code <= c`` of least Gini index on the noisy counts.  Numeric columns are
  always binned (quantile bins of each client's training rows), text columns
  are category codes.
"""
import time

import numpy as np

from ...federation import protocol
from ...federation.rounds import ask, serve
from ...tree import format as tree_format
from ..message_checks import bad_message, field_of, message_tree, number_array, same_settings
from ..setup import log
from . import ga, n_active
from .roles import (bin_edges, cart, cv_scores, best_depth, explain, finish_server,  # noqa: F401
                    is_classification, n_classes, predict_proba, start_client, start_server)

SEND_ROWS = "send_rows"      # server -> client (fedga_central): send your rows and labels
COUNT = "count"              # server -> client (ibm_tree): noisy class counts of the frontier nodes


# ---------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------
def server_train(comm, cfg):
    t0 = time.perf_counter()
    name = cfg.mode
    clients, infos, enc, setup = start_server(comm, cfg, name)
    rounds0, bytes0 = comm.rounds, comm.bytes_sent
    summary = {"mode": name, "task": enc.task, "n_clients": len(clients), "random_state": setup["seed"],
               "rows": {r: infos[r]["n_rows"] for r in clients}, **setup["positive_summary"]}
    common = {}
    if name == "fedga_central":
        data = ask(comm, SEND_ROWS)
        X = np.concatenate([data[r]["X"] for r in clients])
        y = np.concatenate([data[r]["y"] for r in clients])
        edges = bin_edges(X, enc, setup["n_bins"]) if setup["binning"] else None
        if edges:
            X = ga.apply_bins(X, edges)
        depths = list(range(setup["min_depth"], setup["max_depth"] + 1))
        depth = best_depth(cv_scores(X, y, enc, depths, setup["cv_folds"], setup["seed"], setup["positive"]), depths)
        common = {"tree": cart(X, y, enc, depth, setup["seed"]), "edges": edges}
        summary["depth"] = depth
    elif name == "ibm_tree":
        tree, info = grow_ibm(comm, cfg, enc, setup, infos)
        common = {"tree": tree}
        summary.update(info)
    final = ask(comm, protocol.FINAL, common)
    if name == "fedga_local":
        summary["depths"] = {r: final[r]["depth"] for r in clients}
    log(cfg, f"{name}: {len(clients)} clients")
    return finish_server(comm, cfg, summary, final, t0, rounds0, bytes0)


def code_counts(enc, n_bins):
    """Codes per column: category count (text columns) or ``n_bins`` (binned columns)."""
    cats = enc.categories or [None] * len(enc.columns)
    return [len(c) if c is not None else n_bins for c in cats]


def best_code_split(hist):
    """Best split of one node from noisy counts ``hist[f, code, class]`` (clipped
    at 0): ``(f, c)`` for ``code <= c`` of least weighted Gini index, both sides
    with a positive count; None when there is none."""
    best, out = np.inf, None
    for f in range(hist.shape[0]):
        cum = np.cumsum(hist[f], axis=0)          # [c, class]: rows with code <= c
        total = cum[-1]
        for c in range(hist.shape[1] - 1):
            lft, rgt = cum[c], total - cum[c]
            nl, nr = lft.sum(), rgt.sum()
            if nl <= 0 or nr <= 0:
                continue
            g = nl * (1 - ((lft / nl) ** 2).sum()) + nr * (1 - ((rgt / nr) ** 2).sum())
            if g < best - 1e-12:
                best, out = g, (f, c)
    return out


def ibm_scale(depth, n_columns, epsilon):
    """Laplace scale of every noisy count of an ibm_tree of depth ``depth`` on
    ``n_columns`` columns for a total budget ``epsilon``.

    The counts of a level are one histogram per column of every frontier node;
    adding or removing a row changes one count in each column's histogram of
    its node, so a level has L1 sensitivity ``n_columns``.  The ``depth + 1``
    levels (the last one gives the leaves' values) share the budget evenly:
    ``epsilon / (depth + 1)`` per level, noise scale
    ``(depth + 1) * n_columns / epsilon``."""
    return (int(depth) + 1) * int(n_columns) / float(epsilon)


def ibm_noise(cfg, enc, n_bins):
    """The settings of an ibm_tree level the server and every client agree on:
    codes per column, Laplace scale and the number of noise shares (active clients)."""
    return {"n_codes": max(code_counts(enc, n_bins)),
            "scale": ibm_scale(cfg.max_depth, len(enc.columns), cfg.epsilon),
            "shares": n_active(cfg.participation, cfg.n_parties)}


def grow_ibm(comm, cfg, enc, setup, infos):
    """The global tree, level by level over the clients' noisy counts."""
    clients = comm.clients
    rng = np.random.default_rng([setup["seed"], 0])
    k = n_active(cfg.participation, len(clients))
    depth = int(cfg.max_depth)
    scale = ibm_scale(depth, len(enc.columns), cfg.epsilon)
    V = max(code_counts(enc, setup["n_bins"]))
    C = n_classes(enc)
    feature, left, right, threshold, value = [tree_format.LEAF], [-1], [-1], [-2.0], [np.full(C, 1.0 / C)]
    frontier = [0]
    for level in range(depth + 1):
        if not frontier:
            break
        partial = tree_format.binary(left, right, feature, threshold, np.array(value))
        active = ga.choose_active(rng, clients, k)
        replies = ask(comm, COUNT, {"tree": partial, "frontier": np.array(frontier), "n_codes": V,
                                    "scale": scale, "shares": len(active)}, clients=active)
        H = np.maximum(sum(np.asarray(replies[r]["counts"], dtype=np.float64) for r in active), 0.0)
        nxt = []
        for i, node in enumerate(frontier):
            counts = H[i].sum(axis=1).mean(axis=0)      # class counts, averaged over the columns' histograms
            total = counts.sum()
            value[node] = counts / total if total > 0 else np.full(C, 1.0 / C)
            if level == depth or total < 2:
                continue
            split = best_code_split(H[i])
            if split is None:
                continue
            f, c = split
            feature[node], threshold[node] = f, c + 0.5
            left[node], right[node] = len(feature), len(feature) + 1
            for _ in range(2):
                feature.append(tree_format.LEAF)
                left.append(-1)
                right.append(-1)
                threshold.append(-2.0)
                value.append(np.full(C, 1.0 / C))
            nxt += [left[node], right[node]]
        frontier = nxt
    tree = tree_format.binary(left, right, feature, threshold, np.array(value))
    return tree, {"noise_scale": scale, "noise_sensitivity_per_level": len(enc.columns),
                  "epsilon_per_level": float(cfg.epsilon) / (depth + 1), "depth": depth, "active_per_level": k}


# ---------------------------------------------------------------------------
# Client
# ---------------------------------------------------------------------------
def noisy_counts(rng, X, y, tree, frontier, n_codes, n_classes_, scale, shares):
    """``counts[i, f, code, class]`` of the rows at frontier node ``i`` plus this
    client's share of Laplace(scale) noise (Gamma(1/shares) difference)."""
    at = tree_format.apply(tree, X)
    pos = {int(n): i for i, n in enumerate(frontier)}
    F = X.shape[1]
    counts = np.zeros((len(frontier), F, n_codes, n_classes_))
    codes = np.clip(np.nan_to_num(X, nan=n_codes - 1), 0, n_codes - 1).astype(np.int64)
    for r in range(X.shape[0]):
        i = pos.get(int(at[r]))
        if i is not None:
            counts[i, np.arange(F), codes[r], int(y[r])] += 1.0
    shape = counts.shape
    noise = rng.gamma(1.0 / shares, scale, shape) - rng.gamma(1.0 / shares, scale, shape)
    return counts + noise


def check_edges(op, edges, enc, n_bins):
    """The server's bin edges (fedga_central): per column None (text columns) or
    at most ``n_bins - 1`` increasing finite numbers."""
    cats = enc.categories or [None] * len(enc.columns)
    if not isinstance(edges, (list, tuple)) or len(edges) != len(cats):
        raise bad_message(op, "edges", f"expected one entry per column ({len(cats)})")
    out = []
    for j, (e, cat) in enumerate(zip(edges, cats)):
        if cat is not None:
            if e is not None:
                raise bad_message(op, "edges", f"column {j} holds categories, not bins")
            out.append(None)
            continue
        try:
            a = np.asarray(e, dtype=np.float64)
        except (TypeError, ValueError):
            raise bad_message(op, "edges", f"the edges of column {j} are not numbers") from None
        if a.ndim != 1 or a.size > n_bins - 1 or not np.isfinite(a).all() or np.any(np.diff(a) <= 0):
            raise bad_message(op, "edges", f"column {j} needs at most {n_bins - 1} increasing finite edges")
        out.append(a.tolist())
    return out


def client_train(comm, cfg):
    c = start_client(comm, cfg)
    s, enc = c.setup, c.enc
    rng = np.random.default_rng([s["seed"], c.rank])
    F = len(enc.columns)
    width = n_classes(enc) if is_classification(enc) else 1
    max_depth = int(s["max_depth"])
    noise = ibm_noise(cfg, enc, s["n_bins"]) if cfg.mode == "ibm_tree" else None

    def final(msg):
        if cfg.mode == "fedga_local":
            depths, scores = c.cv()
            depth = best_depth(scores, depths)
            return c.finish(cart(c.X, c.y, enc, depth, c.seed), {"depth": depth})
        tree = message_tree(protocol.FINAL, "tree", field_of(msg, protocol.FINAL, "tree"), F, width, "cart",
                          max_depth=max_depth)
        edges = msg.get("edges")
        if cfg.mode == "fedga_central" and s["binning"]:
            c.edges = check_edges(protocol.FINAL, field_of(msg, protocol.FINAL, "edges"), enc, s["n_bins"])
            c.X = ga.apply_bins(c.raw_X, c.edges)
            if c.test is not None:
                c.test = (ga.apply_bins(c.raw_test[0], c.edges), c.test[1])
        elif edges:
            raise bad_message(protocol.FINAL, "edges", "this job does not bin on the server")
        return c.finish(tree)

    def count(msg):
        tree = message_tree(COUNT, "tree", field_of(msg, COUNT, "tree"), F, width, "cart", max_depth=max_depth)
        same_settings(msg, COUNT, noise)
        frontier = number_array(COUNT, "frontier", field_of(msg, COUNT, "frontier"), "iu", ndim=1,
                               dtype=np.int64)
        n = tree["feature"].shape[0]
        if (frontier.size > 2 ** max_depth or np.unique(frontier).size != frontier.size
                or (frontier.size and (frontier.min() < 0 or frontier.max() >= n))
                or np.any(tree["children_left"][frontier] >= 0)):
            raise bad_message(COUNT, "frontier", f"expected distinct leaves of the tree, at most {2 ** max_depth}")
        return {"counts": noisy_counts(rng, c.X, c.y, tree, frontier, noise["n_codes"], n_classes(enc),
                                       noise["scale"], noise["shares"])}

    handlers = {protocol.FINAL: final}
    if cfg.mode == "fedga_central":
        handlers[SEND_ROWS] = lambda msg: {"X": c.raw_X, "y": c.y}
    if cfg.mode == "ibm_tree":
        handlers[COUNT] = count
    return serve(comm, handlers)
