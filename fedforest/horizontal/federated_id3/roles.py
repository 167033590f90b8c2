"""Federated-ID3's roles (mode ``federated_id3``; see the package docstring).

The server's level-by-level growth (:func:`information_gains` on the summed
counts) and the client's side: :class:`Growth` checks each ``counts``
message against the tree grown so far, :func:`client_counts` routes the rows
and counts their classes.
"""
import numpy as np

from ...federation.rounds import ask
from ...tree.id3 import Builder
from ...tree.impurity import entropy
from ..client_tree import global_tree, no_rules, run_tree_client, run_tree_server
from ..message_checks import bad_message, field_of, whole_number
from .. import binned_id3 as binned
from ..binned_id3 import explain, predict_proba  # noqa: F401  (the mode's local roles)

COUNTS = "counts"            # server -> client: route rows through the last splits, send class counts


def information_gains(cls, tables):
    """Information gain of each feature at a node: ``cls`` the node's class
    counts, ``tables[k]`` the (category, class) counts of the k-th candidate."""
    total = cls.sum()
    h = float(entropy(cls))
    gains = []
    for t in tables:
        sizes = t.sum(axis=1)
        present = sizes > 0
        gains.append(h - float((sizes[present] / total * entropy(t[present])).sum()))
    return np.array(gains)


def _build(comm, job):
    enc, max_depth = job.enc, job.max_depth
    C = len(enc.classes)
    nv = enc.n_values
    b = Builder(C)
    root = b.node(np.zeros(C), 0.0)
    frontier = [(root, frozenset(), 0)]
    splits = []
    levels = 0
    while frontier:
        asked = [(node, sorted(set(range(len(nv))) - used)) for node, used, _ in frontier]
        replies = ask(comm, COUNTS, {"splits": splits, "nodes": [a[0] for a in asked],
                                     "features": [a[1] for a in asked]})
        levels += 1
        counts = sum(replies[r]["counts"] for r in comm.clients)
        pos = 0
        splits, nxt = [], []
        for (node, used, depth), (_, feats) in zip(frontier, asked):
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
            gains = information_gains(cls, tables)
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
    job.summary["levels"] = levels
    return b.arrays(), {}


def client_counts(X, y, n_values, n_classes, node_of_row, msg):
    """Route rows through the last level's splits (updating ``node_of_row``),
    then class counts per node and per (node, feature, category)."""
    for node, f, values, children in msg["splits"]:
        at = node_of_row == node
        for v, c in zip(values, children):
            node_of_row[at & (X[:, f] == v)] = c
    parts = []
    for node, feats in zip(msg["nodes"], msg["features"]):
        rows = np.flatnonzero(node_of_row == node)
        parts.append(np.bincount(y[rows], minlength=n_classes))
        for f in feats:
            table = np.zeros((n_values[f], n_classes), dtype=np.int64)
            codes = X[rows, f]
            ok = codes >= 0
            np.add.at(table, (codes[ok], y[rows][ok]), 1)
            parts.append(table.ravel())
    return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)


class Growth:
    """A client's view of the tree the server grows: the nodes asked last
    (the open level), each node's depth and used features.  :meth:`check`
    takes a ``counts`` message only when its splits split open nodes on unused
    features into new nodes (one per category code), within the job's depth,
    and its nodes are the new level."""

    def __init__(self, n_values, max_depth):
        self.n_values, self.max_depth = list(n_values), int(max_depth)
        self.depth, self.used, self.open = {0: 0}, {0: frozenset()}, None

    def _ints(self, field, v, lo, hi):
        if not isinstance(v, (list, tuple)) or len(set(map(repr, v))) != len(v):
            raise bad_message(COUNTS, field, "expected a list of distinct whole numbers")
        return [whole_number(COUNTS, field, x, lo, hi) for x in v]

    def check(self, msg):
        F = len(self.n_values)
        splits, nodes, features = (field_of(msg, COUNTS, k) for k in ("splits", "nodes", "features"))
        if not isinstance(splits, (list, tuple)):
            raise bad_message(COUNTS, "splits", "expected a list")
        new, out = [], []
        for sp in splits:
            if not isinstance(sp, (list, tuple)) or len(sp) != 4:
                raise bad_message(COUNTS, "splits", "a split is (node, feature, codes, children)")
            node = whole_number(COUNTS, "splits", sp[0], 0, 2 ** 62)
            if self.open is None or node not in self.open:
                raise bad_message(COUNTS, "splits", f"node {node} is not a node of the last level")
            self.open.discard(node)
            f = whole_number(COUNTS, "splits", sp[1], 0, F - 1)
            if f in self.used[node] or self.depth[node] >= self.max_depth:
                raise bad_message(COUNTS, "splits", f"node {node} cannot split on column {f}")
            values = self._ints("splits", sp[2], 0, self.n_values[f] - 1)
            children = self._ints("splits", sp[3], 1, 2 ** 62)
            if len(children) != len(values) or any(c in self.depth or c in new for c in children):
                raise bad_message(COUNTS, "splits", f"the children of node {node} are not new nodes, one per code")
            for c in children:
                self.depth[c], self.used[c] = self.depth[node] + 1, self.used[node] | {f}
            new += children
            out.append((node, f, values, children))
        level = {0} if self.open is None else set(new)
        nodes = self._ints("nodes", nodes, 0, 2 ** 62)
        if not set(nodes) <= level:
            raise bad_message(COUNTS, "nodes", "not nodes of the new level")
        if not isinstance(features, (list, tuple)) or len(features) != len(nodes):
            raise bad_message(COUNTS, "features", "expected one list of columns per node")
        feats = [self._ints("features", fs, 0, F - 1) for fs in features]
        if any(set(fs) & self.used[n] for n, fs in zip(nodes, feats)):
            raise bad_message(COUNTS, "features", "a node's columns include one its path has used")
        self.open = set(nodes)
        return {"splits": out, "nodes": nodes, "features": feats}


def server_train(comm, cfg):
    if cfg.numeric_bins is not None:
        return binned.run_server(comm, cfg, _build)
    return run_tree_server(comm, cfg, _build)


def client_train(comm, cfg):
    state = {}

    def counts(client, msg):
        if "node_of_row" not in state:
            state["node_of_row"] = np.zeros(client.X.shape[0], dtype=np.int64)
            state["growth"] = Growth(client.enc.n_values, client.setup["max_depth"])
        msg = state["growth"].check(msg)
        return {"counts": client_counts(client.X, client.y, client.enc.n_values, len(client.enc.classes),
                                        state["node_of_row"], msg)}

    if cfg.numeric_bins is not None:
        return binned.run_client(comm, cfg, {COUNTS: counts}, final_tree=global_tree, final_rules=no_rules)
    return run_tree_client(comm, cfg, {COUNTS: counts})
