"""ICDTA4FL (rule aggregation of client trees) and its baselines, horizontal mode.

``mode`` selects the algorithm; all run over the same transport (rank 0 the
server, ranks 1..K the clients) and end the same way: the server sends the
final tree to every client, which evaluates it on its rows (and on its
``test_data`` file, when given) and saves it.

* ``icdta4fl``: each client trains a local tree (CART with scikit-learn, or
  ID3) and sends it; the server sends all trees to every client, which
  evaluates the other clients' trees on its rows (accuracy, macro-F1); the
  server drops trees whose mean score over the other clients does not reach
  the filter (mean of the scores by default, median or a percentile), turns
  the kept trees into rules, merges the rule sets by Cartesian product and
  grows the global tree from the merged rules.
* ``local``: every client keeps its own tree (the baseline of the method).
* ``centralized``: the clients send their rows to the server, which trains one
  tree on all of them.  A baseline only: it moves every row to the server.
* ``federated_id3``: Federated-ID3 (Truex et al., without differential
  privacy): the server grows one ID3 tree level by level, asking the clients
  for class counts per (node, feature, category) of their rows.
"""
import time
import warnings

import numpy as np
from sklearn.metrics import accuracy_score, f1_score
from sklearn.tree import DecisionTreeClassifier

from .errors import InputError
from .horizontal import (
    check_clients,
    client_dir,
    client_setup,
    log,
    predict_proba,
    save_model,
    save_rules,
    server_dir,
    server_setup,
)
from .model_io import write_summary
from .tree.id3 import _Builder, _entropy, fit_id3, id3_from_rules, rules_from_id3
from .tree.rules import RuleArrays, aggregate, rules_from_tree, tree_from_rules

MASTER = 0
MODES = ("icdta4fl", "local", "centralized", "federated_id3")
TREE_TYPES = ("cart", "id3")
FILTERS = ("mean", "median", "percentile", "none")
CART_DEFAULT_DEPTH = 5


def check_config(cfg):
    """Horizontal settings, refused before any work."""
    check_clients(cfg)
    if cfg.mode not in MODES:
        raise InputError("mode", f"{cfg.mode!r} is not one of this module's modes {MODES}")
    if cfg.task != "classification":
        raise InputError("task", f"mode {cfg.mode!r} supports classification only, got {cfg.task!r}")
    if cfg.tree_type not in TREE_TYPES:
        raise InputError("tree_type", f"must be 'cart' or 'id3', got {cfg.tree_type!r}")
    if cfg.mode == "federated_id3" and cfg.tree_type != "id3":
        raise InputError("tree_type", "mode 'federated_id3' grows an ID3 tree: set tree_type = 'id3'")
    if cfg.filter not in FILTERS:
        raise InputError("filter", f"must be one of {FILTERS}, got {cfg.filter!r}")
    p = cfg.filter_percentile
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 100:
        raise InputError("filter_percentile", f"must be a number in [0, 100], got {p!r}")
    if cfg.filter_metric not in ("accuracy", "f1"):
        raise InputError("filter_metric", f"must be 'accuracy' or 'f1', got {cfg.filter_metric!r}")
    for key in ("max_rules", "global_max_nodes"):
        m = cfg.values[key]
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise InputError(key, f"must be an int >= 1, got {m!r}")
    if cfg.criterion not in (None, "gini", "entropy"):
        raise InputError("criterion", f"must be 'gini' or 'entropy' for CART client trees, got {cfg.criterion!r}")
    for key in ("max_depth", "global_max_depth"):
        d = cfg.values[key]
        if d is not None and (isinstance(d, bool) or not isinstance(d, int) or d < 1):
            raise InputError(key, f"must be None or an int >= 1, got {d!r}")


def _depth(cfg, enc):
    if cfg.max_depth is not None:
        return int(cfg.max_depth)
    return max(1, len(enc.columns) // 2) if enc.tree_type == "id3" else CART_DEFAULT_DEPTH


def _metrics(y, proba):
    pred = proba.argmax(axis=1)
    return float(accuracy_score(y, pred)), float(f1_score(y, pred, average="macro", zero_division=0))


# ---------------------------------------------------------------------------
# Trees of a client
# ---------------------------------------------------------------------------
def fit_local(X, y, enc, max_depth, seed, criterion="gini"):
    """A client's tree as flat arrays with class columns of the whole job."""
    C = len(enc.classes)
    if enc.tree_type == "id3":
        return fit_id3(X, y, enc.n_values, C, max_depth=max_depth)
    clf = DecisionTreeClassifier(max_depth=max_depth, criterion=criterion, random_state=seed).fit(X, y)
    t = clf.tree_
    value = np.zeros((t.node_count, C))
    value[:, clf.classes_] = t.value[:, 0, :]
    value /= np.maximum(value.sum(axis=1, keepdims=True), 1e-300)
    return {"children_left": t.children_left.astype(np.int32), "children_right": t.children_right.astype(np.int32),
            "feature": t.feature.astype(np.int32), "threshold": t.threshold.astype(np.float64),
            "value": value, "n_node_samples": t.n_node_samples.astype(np.int64)}


def tree_rules(tree, tree_type):
    if tree_type == "id3":
        return rules_from_id3(tree)
    return rules_from_tree(tree["children_left"], tree["children_right"], tree["feature"],
                           tree["threshold"], tree["value"], tree["n_node_samples"])


def filter_trees(scores, how, percentile=75.0):
    """Indices of the trees whose score reaches the filter threshold."""
    scores = np.asarray(scores, dtype=np.float64)
    if how == "none" or scores.size <= 1:
        return np.arange(scores.size)
    cut = {"mean": np.mean, "median": np.median}.get(how)
    threshold = cut(scores) if cut else np.percentile(scores, percentile)
    return np.flatnonzero(scores >= threshold - 1e-12)


# ---------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------
def server_train(comm, cfg):
    t0 = time.perf_counter()
    check_config(cfg)
    clients = comm.clients
    infos, enc = server_setup(comm, cfg, cfg.tree_type)
    max_depth = _depth(cfg, enc)
    seed = cfg.random_state if cfg.random_state is not None else 0
    comm.bcast({"op": "setup", "encoding": enc.to_dict(), "max_depth": max_depth, "seed": seed,
                "mode": cfg.mode, "criterion": cfg.criterion or "gini"})
    rows = {r: infos[r]["n_rows"] for r in clients}
    log(cfg, f"{cfg.mode}: {len(clients)} clients, {sum(rows.values())} rows "
              f"({', '.join(f'client {r}: {rows[r]}' for r in clients)}), {enc.tree_type}, "
              f"max_depth {max_depth}")
    summary = {"mode": cfg.mode, "tree_type": enc.tree_type, "n_clients": len(clients),
               "rows": rows, "max_depth": max_depth}
    rounds0, bytes0 = comm.rounds, comm.bytes_sent
    tree = None
    rules = {}
    if cfg.mode == "icdta4fl":
        tree, rules = _server_icdta4fl(comm, cfg, enc, max_depth, summary)
    elif cfg.mode == "centralized":
        data = comm.exchange({r: {"op": "send_rows"} for r in clients})
        X = np.concatenate([data[r]["X"] for r in clients])
        y = np.concatenate([data[r]["y"] for r in clients])
        tree = fit_local(X, y, enc, max_depth, seed, cfg.criterion or "gini")
    elif cfg.mode == "federated_id3":
        tree = _server_federated_id3(comm, enc, max_depth, summary)
    final = comm.exchange({r: {"op": "final", "tree": tree, "rules": rules} for r in clients})
    summary["rounds"] = comm.rounds - rounds0
    summary["bytes_sent_by_server"] = comm.bytes_sent - bytes0
    summary["bytes_sent_by_clients"] = {r: final[r]["bytes_sent"] for r in clients}
    for key in ("train", "test"):
        if final[clients[0]].get(key):
            per = {r: final[r][key] for r in clients}
            summary[f"{key}_metrics"] = per
            summary[f"{key}_accuracy"] = float(np.mean([m["accuracy"] for m in per.values()]))
            summary[f"{key}_f1"] = float(np.mean([m["f1"] for m in per.values()]))
    summary["model_dirs"] = {r: final[r]["model_dir"] for r in clients}
    if tree is not None:
        path = save_model(server_dir(cfg.model_dir), {
            "mode": cfg.mode, "encoding": enc.to_dict(), "label_column": cfg.label_column,
            "tree": tree, "summary": {k: v for k, v in summary.items() if k != "model_dirs"}})
        summary["model_dirs"][0] = path
    summary["seconds"] = time.perf_counter() - t0
    if "test_accuracy" in summary or "train_accuracy" in summary:
        which = "test" if "test_accuracy" in summary else "train"
        log(cfg, f"{cfg.mode}: mean client {which} accuracy {summary[f'{which}_accuracy']:.4f}, "
                  f"macro-F1 {summary[f'{which}_f1']:.4f} ({summary['rounds']} rounds, "
                  f"{summary['seconds']:.2f}s)")
    write_summary(cfg.summary_json, summary)
    return summary


def _server_icdta4fl(comm, cfg, enc, max_depth, summary):
    clients = comm.clients
    trees = comm.exchange({r: {"op": "train_local"} for r in clients})
    trees = [trees[r]["tree"] for r in clients]
    evals = comm.exchange({r: {"op": "evaluate", "trees": trees} for r in clients})
    n = len(clients)
    acc = np.array([evals[r]["accuracy"] for r in clients])   # [evaluating client, tree]
    f1 = np.array([evals[r]["f1"] for r in clients])
    metric = acc if cfg.filter_metric == "accuracy" else f1
    off = ~np.eye(n, dtype=bool)
    scores = np.array([metric[off[:, i], i].mean() if n > 1 else metric[0, 0] for i in range(n)])
    kept = filter_trees(scores, cfg.filter, cfg.filter_percentile)
    t0 = time.perf_counter()
    rule_sets = [tree_rules(trees[i], enc.tree_type) for i in kept]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        merged, stats = aggregate(rule_sets, cfg.max_rules)
    for w in caught:
        log(cfg, f"warning: {w.message}")
    C = len(enc.classes)
    if not merged:
        raise InputError("rules", "the kept trees have no compatible rules to merge; try filter = 'none' "
                                  "or fewer clients")
    build = id3_from_rules if enc.tree_type == "id3" else tree_from_rules
    info = {}
    tree = build(merged, C, max_depth=cfg.global_max_depth or max_depth, max_nodes=cfg.global_max_nodes,
                 info=info)
    if info.get("truncated"):
        log(cfg, f"warning: the global tree reached global_max_nodes={cfg.global_max_nodes}; "
                  "nodes beyond it were left as leaves")
    if enc.tree_type == "cart":
        tree = {k: v for k, v in tree.items() if k != "n_rules"}
    summary.update(
        scores=scores.tolist(), kept_trees=[int(clients[i]) for i in kept],
        rules_per_tree=[len(rs) for rs in rule_sets], merged_rules=len(merged),
        merge_steps=stats.steps, rules_capped=stats.capped,
        global_tree_truncated=bool(info.get("truncated")),
        aggregate_seconds=time.perf_counter() - t0,
        local_self_accuracy=np.diag(acc).tolist(), local_self_f1=np.diag(f1).tolist())
    log(cfg, f"icdta4fl: kept trees of clients {summary['kept_trees']} (filter {cfg.filter} on "
              f"{cfg.filter_metric}); {sum(summary['rules_per_tree'])} rules merged into {len(merged)} "
              f"in {summary['aggregate_seconds']:.3f}s; global tree of {len(tree['value'])} nodes")
    n_feat = len(enc.columns)
    arrays = RuleArrays.from_rules(merged, n_feat)
    if enc.tree_type == "id3":
        rules = {"val": arrays.cond, "dist": arrays.dist, "support": arrays.support}
    else:
        rules = {"lo": arrays.cond[0], "hi": arrays.cond[1], "dist": arrays.dist, "support": arrays.support}
    return tree, rules


def _server_federated_id3(comm, enc, max_depth, summary):
    """Level-wise Federated-ID3: one round per level."""
    C = len(enc.classes)
    nv = enc.n_values
    b = _Builder(C)
    root = b.node(np.zeros(C), 0.0)
    frontier = [(root, frozenset(), 0)]
    splits = []
    levels = 0
    while frontier:
        ask = [(node, sorted(set(range(len(nv))) - used)) for node, used, _ in frontier]
        msgs = {r: {"op": "counts", "splits": splits, "nodes": [a[0] for a in ask],
                    "features": [a[1] for a in ask]} for r in comm.clients}
        replies = comm.exchange(msgs)
        levels += 1
        counts = sum(replies[r]["counts"] for r in comm.clients)
        pos = 0
        splits, nxt = [], []
        for (node, used, depth), (_, feats) in zip(frontier, ask):
            cls = counts[pos:pos + C].astype(np.float64)
            pos += C
            tables = []
            for f in feats:
                tables.append(counts[pos:pos + nv[f] * C].reshape(nv[f], C).astype(np.float64))
                pos += nv[f] * C
            total = cls.sum()
            b.value[node] = cls / total if total > 0 else cls
            b.support[node] = total
            if depth >= max_depth or np.count_nonzero(cls) <= 1 or not feats:
                continue
            h = _entropy(cls)
            gains = [h - sum(t[v].sum() / total * _entropy(t[v]) for v in np.flatnonzero(t.sum(axis=1)))
                     for t in tables]
            k = int(np.argmax(gains))
            if gains[k] <= 1e-12:
                continue
            f = feats[k]
            values = np.flatnonzero(tables[k].sum(axis=1)).tolist()
            children = [(v, b.node(np.zeros(C), 0.0)) for v in values]
            b.link(node, f, children)
            splits.append((node, f, [v for v, _ in children], [c for _, c in children]))
            nxt += [(c, used | {f}, depth + 1) for _, c in children]
        frontier = nxt
    summary["levels"] = levels
    return b.arrays()


# ---------------------------------------------------------------------------
# Client
# ---------------------------------------------------------------------------
def client_train(comm, cfg):
    rank = comm.rank
    check_config(cfg)
    setup, enc, X, y, test = client_setup(comm, cfg)
    bytes0 = comm.bytes_sent
    own = None
    node_of_row = np.zeros(X.shape[0], dtype=np.int64)
    while True:
        msg = comm.recv(MASTER)
        op = msg["op"]
        if op == "train_local":
            own = fit_local(X, y, enc, setup["max_depth"], setup["seed"] + rank, setup["criterion"])
            comm.send(MASTER, {"tree": own})
        elif op == "evaluate":
            scores = [_metrics(y, predict_proba(t, X, enc.tree_type)) for t in msg["trees"]]
            comm.send(MASTER, {"accuracy": np.array([s[0] for s in scores]),
                               "f1": np.array([s[1] for s in scores])})
        elif op == "send_rows":
            comm.send(MASTER, {"X": X, "y": y})
        elif op == "counts":
            comm.send(MASTER, {"counts": _client_counts(X, y, enc, node_of_row, msg)})
        elif op == "final":
            tree = msg["tree"]
            if tree is None:  # local mode: every client keeps its own tree
                own = own if own is not None else fit_local(X, y, enc, setup["max_depth"],
                                                            setup["seed"] + rank, setup["criterion"])
                tree = own
            reply = {"train": dict(zip(("accuracy", "f1"), _metrics(y, predict_proba(tree, X, enc.tree_type))))}
            if test is not None:
                reply["test"] = dict(zip(("accuracy", "f1"),
                                         _metrics(test[1], predict_proba(tree, test[0], enc.tree_type))))
            folder = client_dir(cfg.model_dir, rank)
            if msg.get("rules"):
                save_rules(folder, msg["rules"])
            save_model(folder, {"mode": setup["mode"], "encoding": enc.to_dict(),
                                "label_column": cfg.label_column, "tree": tree,
                                "client": rank, "metrics": reply})
            reply.update(model_dir=folder, bytes_sent=comm.bytes_sent - bytes0)
            comm.send(MASTER, reply)
            return folder
        else:
            raise RuntimeError(f"protocol error: unexpected {op!r}")


def _client_counts(X, y, enc, node_of_row, msg):
    """Federated-ID3: route rows through the last level's splits, then class
    counts per node and per (node, feature, category)."""
    for node, f, values, children in msg["splits"]:
        at = node_of_row == node
        for v, c in zip(values, children):
            node_of_row[at & (X[:, f] == v)] = c
    C = len(enc.classes)
    nv = enc.n_values
    parts = []
    for node, feats in zip(msg["nodes"], msg["features"]):
        rows = np.flatnonzero(node_of_row == node)
        parts.append(np.bincount(y[rows], minlength=C))
        for f in feats:
            table = np.zeros((nv[f], C), dtype=np.int64)
            codes = X[rows, f]
            ok = codes >= 0
            np.add.at(table, (codes[ok], y[rows][ok]), 1)
            parts.append(table.ravel())
    return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)
