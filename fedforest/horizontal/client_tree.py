"""The client-tree job shared by the tree modes (ICDTA4FL, its baselines,
Federated-ID3): the server's part (:func:`run_tree_server`) runs the set-up of
:mod:`fedforest.horizontal.setup`, the mode's own rounds, then the final round
that sends the tree to every client; a client (:func:`run_tree_client`)
answers the mode's messages until that final tree arrives, evaluates it on its
rows (and test file) and saves it.
"""
import os
import time

from ..federation import protocol
from ..federation.aggregate import client_metrics
from ..federation.files import replaced_folder, write_summary
from ..federation.metrics import class_scores
from ..federation.rounds import Done, serve
from ..tree import format as tree_format
from ..tree.id3 import fit_id3
from .declare import CART_DEFAULT_DEPTH
from .message_checks import bad_message, field_of, job_seed_of, message_tree, same_settings
from .model_files import client_dir, save_model, save_rules, server_dir, tree_proba
from .setup import client_setup, job_seed, log, server_setup


TRAIN_LOCAL = "train_local"  # server -> client: fit your own tree, send it


def tree_depth(cfg, enc):
    if cfg.max_depth is not None:
        return int(cfg.max_depth)
    return max(1, len(enc.columns) // 2) if enc.tree_type == "id3" else CART_DEFAULT_DEPTH


def fit_client_tree(X, y, enc, max_depth, seed, criterion="gini"):
    """A client's tree (canonical flat arrays, class columns of the whole job):
    ID3 on category codes, or scikit-learn's CART on numeric columns."""
    C = len(enc.classes)
    if enc.tree_type == "id3":
        return fit_id3(X, y, enc.n_values, C, max_depth=max_depth)
    from sklearn.tree import DecisionTreeClassifier  # a second to import: only where used
    clf = DecisionTreeClassifier(max_depth=max_depth, criterion=criterion, random_state=seed).fit(X, y)
    return tree_format.from_sklearn(clf, C)


class TreeJob:
    """What the server's part of a tree mode sees: the config, the encoding,
    the clients' row counts, the depth and seed, and the summary to fill."""

    def __init__(self, cfg, enc, infos, max_depth, seed, summary):
        self.cfg, self.enc, self.infos = cfg, enc, infos
        self.max_depth, self.seed, self.summary = max_depth, seed, summary


def run_tree_server(comm, cfg, build):
    """Server of a tree mode: set-up, then ``build(comm, job)`` (the mode's own
    rounds) returns ``(tree, rules)`` — the global tree (None: every client
    keeps its own) and the merged rules to send back (may be empty) — then the
    final round, the summary and the server's model file."""
    t0 = time.perf_counter()
    clients = comm.clients
    tree_type = cfg.tree_type
    infos, enc = server_setup(comm, cfg, tree_type)
    max_depth = tree_depth(cfg, enc)
    seed = job_seed(cfg)
    comm.bcast({"op": protocol.SETUP, "encoding": enc.to_dict(), "max_depth": max_depth, "seed": seed,
                "mode": cfg.mode, "criterion": cfg.criterion or "gini"})
    rows = {r: infos[r]["n_rows"] for r in clients}
    log(cfg, f"{cfg.mode}: {len(clients)} clients, {sum(rows.values())} rows "
              f"({', '.join(f'client {r}: {rows[r]}' for r in clients)}), {enc.tree_type}, "
              f"max_depth {max_depth}")
    summary = {"mode": cfg.mode, "tree_type": enc.tree_type, "n_clients": len(clients),
               "rows": rows, "max_depth": max_depth, "random_state": seed}
    return grow_and_save(comm, cfg, build, TreeJob(cfg, enc, infos, max_depth, seed, summary), t0,
                         lambda tree, kept: {"mode": cfg.mode, "encoding": enc.to_dict(),
                                             "label_column": cfg.label_column, "tree": tree, "summary": kept})


def grow_and_save(comm, cfg, build, job, t0, model_doc):
    """The rounds of a tree job after its set-up: ``build(comm, job)`` grows the
    global tree, the final round hands it (and the merged rules) to every client,
    the summary gathers the clients' metrics, and the server writes its model
    file ``model_doc(tree, summary)``.  Returns the summary."""
    clients, summary = comm.clients, job.summary
    rounds0, bytes0 = comm.rounds, comm.bytes_sent
    tree, rules = build(comm, job)
    final = comm.exchange({r: {"op": protocol.FINAL, "tree": tree, "rules": rules} for r in clients})
    summary["rounds"] = comm.rounds - rounds0
    summary["bytes_sent_by_server"] = comm.bytes_sent - bytes0
    summary["bytes_sent_by_clients"] = {r: final[r]["bytes_sent"] for r in clients}
    for key in ("train", "test"):
        if final[clients[0]].get(key):
            per = {r: final[r][key] for r in clients}
            summary[f"{key}_metrics"] = per
            for m, v in client_metrics(per).items():
                summary[f"{key}_{m}"] = v
    summary["model_dirs"] = {r: final[r]["model_dir"] for r in clients}
    if tree is not None:
        folder = server_dir(cfg.model_dir)
        with replaced_folder(folder) as stage:
            save_model(stage, model_doc(tree, {k: v for k, v in summary.items() if k != "model_dirs"}))
        summary["model_dirs"][0] = os.path.join(folder, "model.json")
    summary["seconds"] = time.perf_counter() - t0
    if "test_accuracy" in summary or "train_accuracy" in summary:
        which = "test" if "test_accuracy" in summary else "train"
        log(cfg, f"{cfg.mode}: mean client {which} accuracy {summary[f'{which}_accuracy']:.4f}, "
                  f"macro-F1 {summary[f'{which}_f1']:.4f} ({summary['rounds']} rounds, "
                  f"{summary['seconds']:.2f}s)")
    write_summary(cfg.summary_json, summary)
    return summary


def tree_setup(setup, cfg, enc):
    """A tree mode's ``setup`` message checked against this client's settings:
    the values of this client's own settings (mode, depth, criterion, seed)."""
    op = protocol.SETUP
    out = same_settings(setup, op, {"mode": cfg.mode, "max_depth": tree_depth(cfg, enc),
                                     "criterion": cfg.criterion or "gini"})
    out["seed"] = job_seed_of(setup, op, cfg)
    return out


class ClientTree:
    """What a tree mode's client handlers see: its rows, encoding and set-up
    (the set-up as this client's settings give it, see :func:`tree_setup`)."""

    def __init__(self, comm, cfg, setup, enc, X, y, test):
        self.comm, self.cfg, self.enc = comm, cfg, enc
        self.setup = tree_setup(setup, cfg, enc)
        self.X, self.y, self.test = X, y, test
        self.own = None

    @property
    def n_features(self):
        return len(self.enc.columns)

    @property
    def n_classes(self):
        return len(self.enc.classes)

    def tree(self, op, field, tree, max_depth=None, max_nodes=None):
        """A tree of the server's ``op`` message, checked against this client's
        columns, classes and tree type (see :func:`message_tree`)."""
        return message_tree(op, field, tree, self.n_features, self.n_classes, self.enc.tree_type,
                          max_depth=max_depth, max_nodes=max_nodes)

    def own_tree(self, rows=None):
        """This client's own tree (fitted once, on its ``rows`` when given)."""
        if self.own is None:
            s = self.setup
            X, y = (self.X, self.y) if rows is None else (self.X[rows], self.y[rows])
            self.own = fit_client_tree(X, y, self.enc, s["max_depth"], s["seed"] + self.comm.rank, s["criterion"])
        return self.own


def global_tree(client):
    """The limits of the final tree of a tree mode that grows one: the job's depth."""
    return {"max_depth": client.setup["max_depth"]}


def no_rules(client, rules):
    """The final ``rules`` of a mode that sends none: empty."""
    if rules is not None and not (isinstance(rules, dict) and not rules):
        raise bad_message(protocol.FINAL, "rules", "this mode sends no rules")
    return {}


def run_tree_client(comm, cfg, handlers=None, final_tree=global_tree, final_rules=no_rules):
    """Client of a tree mode: set-up, then the mode's ``handlers`` (``{message
    name: handler(client, msg)}``; no other message is answered), until the final tree
    arrives: it is evaluated on this client's rows (and test file) and saved.

    ``final_tree(client)`` gives the limits of the final tree (keywords of
    :meth:`ClientTree.tree`), or None when every client keeps its own tree (the
    server then sends none); ``final_rules(client, rules)`` checks the final
    rules and returns what to save (nothing when empty)."""
    client = ClientTree(comm, cfg, *client_setup(comm, cfg, cfg.tree_type))
    return serve_client_tree(comm, cfg, client, handlers, final_tree, final_rules,
                             lambda tree, reply: {"mode": cfg.mode, "encoding": client.enc.to_dict(),
                                                  "label_column": cfg.label_column, "tree": tree,
                                                  "client": comm.rank, "metrics": reply})


def serve_client_tree(comm, cfg, client, handlers, final_tree, final_rules, model_doc):
    """The rounds of a tree client after its set-up (see :func:`run_tree_client`):
    the mode's ``handlers`` until the final tree, which is scored on the
    client's rows (and test file) and saved as ``model_doc(tree, metrics)``."""
    rank = comm.rank
    bytes0 = comm.bytes_sent

    def final(msg):
        limits = final_tree(client)
        sent = field_of(msg, protocol.FINAL, "tree")
        if limits is None:
            if sent is not None:
                raise bad_message(protocol.FINAL, "tree", f"every client keeps its own tree in mode {cfg.mode!r}")
            tree = client.own_tree()
        else:
            tree = client.tree(protocol.FINAL, "tree", sent, **limits)
        rules = final_rules(client, msg.get("rules"))
        reply = {"train": class_scores(client.y, tree_proba(tree, client.X))}
        if client.test is not None:
            reply["test"] = class_scores(client.test[1], tree_proba(tree, client.test[0]))
        folder = client_dir(cfg.model_dir, rank)
        with replaced_folder(folder) as stage:
            if rules:
                save_rules(stage, rules)
            save_model(stage, model_doc(tree, reply))
        reply.update(model_dir=folder, bytes_sent=comm.bytes_sent - bytes0)
        return Done(folder, reply)

    table = {protocol.FINAL: final}     # a mode that shares its own tree (icdta4fl) handles train_local
    for op, handler in (handlers or {}).items():
        table[op] = (lambda h: lambda msg: h(client, msg))(handler)
    return serve(comm, table)
