"""ID3 jobs on numeric columns (setting ``numeric_bins``): the clients' numeric
columns become categories, the bins of equal-frequency edges the server agrees
from the clients' quantile sketches.

The job runs as :func:`fedforest.horizontal.client_tree.run_tree_server` /
``run_tree_client`` do, with a set-up of its own: each client describes its
table as for ID3 (kinds, classes, the values of its text columns and of
numeric columns with at most 64 values), plus a quantile sketch of every
numeric column and whether it has missing values.  A column numeric on every
client with more than ``numeric_bins`` distinct values in all (or with more
values than a client lists) is binned: the server pools the sketches
(:func:`fedforest.tree.id3.agree_bins`), the bins are the column's categories
(``"<= 12.5"``, ``"(12.5, 30]"``, ``"> 30"``, and ``NA`` when a client has
missing values), and every client codes its rows over the same edges.  Other
columns are categories as in any ID3 job.

Saved models keep the rows' raw values readable: ``encoding`` reads numeric
columns as numbers (the row encoding of the ``xgboost`` type, missing values
kept), ``bins`` holds each binned column's edges and ``id3_categories`` every
column's categories; :func:`predict_proba` and :func:`explain` bin the rows
before walking the tree.  A job where no column is binned saves a plain ID3
model.
"""
import time

import numpy as np
import pandas as pd

from ..errors import InputError
from ..federation import protocol
from ..tree import format as tree_format
from ..tree.id3 import agree_bins, bin_codes, bin_labels, numeric_sketch
from ..tree.rules import CATEGORICAL, leaf_rules
from .client_tree import ClientTree, TreeJob, grow_and_save, serve_client_tree, tree_depth
from .encoding import (MAX_CATEGORIES, MISSING, ClientTable, Encoding, agree, category_codes, client_what,
                       table_settings, text_of)
from .message_checks import bad_message, check_categories, field_of, message_encoding, number_array, same_setting
from .model_files import COVERED, covered, explain as tree_explain, predict_proba as tree_predict_proba, tree_proba
from .setup import SERVER, client_load, job_seed, log, server_load

ROW_TYPE = "xgboost"     # the row encoding of a saved binned model: numbers as numbers, missing values kept


# ---------------------------------------------------------------------------
# Set-up
# ---------------------------------------------------------------------------
def describe(table, n_bins):
    """A client's description of its table for a binned ID3 job."""
    info = table.describe("id3")
    sketches = []
    for j, c in enumerate(info["columns"]):
        if info["kinds"][j] != "numeric":
            sketches.append(None)
            continue
        sketches.append(numeric_sketch(table.X[c].to_numpy(dtype=np.float64, na_value=np.nan), n_bins))
        cats = info["categories"][j]
        if len([v for v in cats if v != MISSING]) > MAX_CATEGORIES:
            info["categories"][j] = None          # too many to list: the column is binned
    info["sketches"] = sketches
    info["missing"] = [bool(table.X[c].isna().any()) for c in info["columns"]]
    return info


def _binned_columns(infos, n_bins):
    """The columns to bin: numeric on every client, with more than ``n_bins``
    distinct values in all (or more than a client lists)."""
    ranks = sorted(infos)
    out = []
    for c in infos[ranks[0]]["columns"]:
        if not all(c in infos[r]["columns"] for r in ranks):
            continue                           # agree() names the columns that differ
        at = {r: infos[r]["columns"].index(c) for r in ranks}
        if any(infos[r]["kinds"][at[r]] != "numeric" for r in ranks):
            continue
        lists = [infos[r]["categories"][at[r]] for r in ranks]
        values = set().union(*[set(v) - {MISSING} for v in lists if v is not None])
        if any(v is None for v in lists) or len(values) > n_bins:
            out.append(c)
    return out


def agree_binned(infos, n_bins):
    """The server's checks of the descriptions and the job's encoding:
    ``(Encoding, edges per column or None)``."""
    binned = _binned_columns(infos, n_bins)
    checked = {}
    for r, info in infos.items():
        cats = [([MISSING] if info["missing"][j] else []) if c in binned else info["categories"][j]
                for j, c in enumerate(info["columns"])]
        checked[r] = dict(info, categories=cats)
    enc = agree(checked, "id3")
    edges = []
    for j, c in enumerate(enc.columns):
        if c not in binned:
            edges.append(None)
            continue
        sketches = [infos[r]["sketches"][infos[r]["columns"].index(c)] for r in sorted(infos)]
        e = agree_bins(sketches, n_bins)
        edges.append(e)
        enc.categories[j] = bin_labels(e) + ([MISSING] if MISSING in enc.categories[j] else [])
    return enc, edges


def _setup_edges(setup, enc, n_bins):
    """The ``bins`` of the server's ``setup`` message: per column None, or
    increasing finite edges matching the column's bin categories."""
    op = protocol.SETUP
    bins = field_of(setup, op, "bins")
    if not isinstance(bins, (list, tuple)) or len(bins) != len(enc.columns):
        raise bad_message(op, "bins", f"expected one entry per column ({len(enc.columns)})")
    out = []
    for j, e in enumerate(bins):
        if e is None:
            out.append(None)
            continue
        e = number_array(op, "bins", e, "iuf", ndim=1, dtype=np.float64)
        if (not 1 <= e.size <= n_bins or not np.isfinite(e).all() or np.any(np.diff(e) <= 0)
                or enc.categories[j][:e.size + 1] != bin_labels(e)):
            raise bad_message(op, "bins", f"column {j} needs 1 to {n_bins} increasing finite edges "
                                          "named by its categories")
        out.append(e)
    return out


def id3_codes(X, enc, edges, what):
    """A client's rows (DataFrame) as ID3 category codes: binned columns over
    their edges, other columns by their category values (-1: unseen)."""
    missing = [c for c in enc.columns if c not in X.columns]
    extra = [c for c in X.columns if c not in enc.columns]
    if missing or extra:
        raise InputError(what, f"column set differs from the job's: missing {missing}, unexpected {extra}")
    out = np.empty((X.shape[0], len(enc.columns)), dtype=np.int64)
    for j, (c, cats) in enumerate(zip(enc.columns, enc.categories)):
        if edges[j] is None:
            out[:, j] = category_codes(X[c], {v: i for i, v in enumerate(cats)}, -1)
            continue
        values = pd.to_numeric(X[c], errors="coerce").to_numpy(dtype=np.float64)
        if (np.isnan(values) & X[c].notna().to_numpy()).any():
            raise InputError(what, f"column {c!r} is numeric in this job but holds text")
        out[:, j] = bin_codes(values, edges[j], cats.index(MISSING) if MISSING in cats else -1)
    return out


def model_doc(cfg, enc, edges, tree, **extra):
    """The model document of a binned ID3 job (a plain ID3 one when no column is binned)."""
    doc = {"mode": cfg.mode, "encoding": enc.to_dict(), "label_column": cfg.label_column, "tree": tree, **extra}
    if all(e is None for e in edges):
        return doc
    rows = Encoding(ROW_TYPE, enc.columns, enc.classes,
                    [cats if e is None else None for cats, e in zip(enc.categories, edges)])
    return dict(doc, encoding=rows.to_dict(), id3_categories=enc.categories,
                bins=[None if e is None else [float(v) for v in e] for e in edges])


# ---------------------------------------------------------------------------
# The job (server and client), as run_tree_server / run_tree_client with the set-up above
# ---------------------------------------------------------------------------
def run_server(comm, cfg, build):
    t0 = time.perf_counter()
    clients = comm.clients
    infos = server_load(comm, cfg, "id3", "classification", numeric_bins=cfg.numeric_bins)
    enc, edges = agree_binned(infos, cfg.numeric_bins)
    max_depth = tree_depth(cfg, enc)
    seed = job_seed(cfg)
    comm.bcast({"op": protocol.SETUP, "encoding": enc.to_dict(), "bins": edges, "max_depth": max_depth,
                "seed": seed, "mode": cfg.mode, "criterion": cfg.criterion or "gini"})
    rows = {r: infos[r]["n_rows"] for r in clients}
    n_binned = sum(e is not None for e in edges)
    log(cfg, f"{cfg.mode}: {len(clients)} clients, {sum(rows.values())} rows "
              f"({', '.join(f'client {r}: {rows[r]}' for r in clients)}), id3, max_depth {max_depth}, "
              f"{n_binned} numeric columns in at most {cfg.numeric_bins + 1} bins")
    summary = {"mode": cfg.mode, "tree_type": "id3", "n_clients": len(clients), "rows": rows,
               "max_depth": max_depth, "random_state": seed,
               "binned_columns": [c for c, e in zip(enc.columns, edges) if e is not None]}
    return grow_and_save(comm, cfg, build, TreeJob(cfg, enc, infos, max_depth, seed, summary), t0,
                         lambda tree, kept: model_doc(cfg, enc, edges, tree, summary=kept))


def run_client(comm, cfg, handlers, final_tree, final_rules):
    rank = comm.rank
    what = client_what(rank)
    msg = client_load(comm, cfg, "id3", "classification")
    same_setting("numeric_bins", field_of(msg, protocol.LOAD, "numeric_bins"), cfg.numeric_bins)
    table = ClientTable(cfg.data[rank - 1], rank, cfg.label_column, cfg.id_column, **table_settings(cfg))
    info = describe(table, cfg.numeric_bins)
    comm.send(SERVER, info)
    setup = protocol.expect(comm.recv(SERVER), protocol.SETUP)
    enc = message_encoding(protocol.SETUP, field_of(setup, protocol.SETUP, "encoding"), "id3", "classification",
                           max(MAX_CATEGORIES, cfg.numeric_bins + 2))
    edges = _setup_edges(setup, enc, cfg.numeric_bins)
    at = {c: j for j, c in enumerate(enc.columns)}
    own = [None if c in at and edges[at[c]] is not None else cats           # binned: its values are not categories
           for c, cats in zip(info["columns"], info["categories"])]
    check_categories(protocol.SETUP, enc, dict(info, categories=own), True)
    X, y = id3_codes(table.X, enc, edges, what), enc.labels(table.y, what)
    test = None
    if cfg.test_data:
        tt = ClientTable(cfg.test_data[rank - 1], rank, cfg.label_column, cfg.id_column, **table_settings(cfg))
        test = (id3_codes(tt.X, enc, edges, f"{what} test data"), enc.labels(tt.y, f"{what} test data"))
    client = ClientTree(comm, cfg, setup, enc, X, y, test)
    return serve_client_tree(comm, cfg, client, handlers, final_tree, final_rules,
                             lambda tree, reply: model_doc(cfg, enc, edges, tree, client=rank, metrics=reply))


# ---------------------------------------------------------------------------
# Saved models: prediction and explanation
# ---------------------------------------------------------------------------
def _id3_encoding(doc):
    enc = doc["encoding"]
    return Encoding("id3", enc.columns, enc.classes, doc["id3_categories"])


def id3_rows(doc, X):
    """Rows in a binned model's row encoding (numbers, text codes, NaN) as the
    tree's category codes."""
    X = np.asarray(X, dtype=np.float64)
    out = np.empty(X.shape, dtype=np.float64)
    for j, (e, cats) in enumerate(zip(doc["bins"], doc["id3_categories"])):
        if e is None:
            out[:, j] = np.where(np.isnan(X[:, j]), -1.0, X[:, j])       # an unseen category: no branch
        else:
            out[:, j] = bin_codes(X[:, j], e, cats.index(MISSING) if MISSING in cats else -1)
    return out


def predict_proba(doc, X):
    """Class distributions of rows encoded with the model's encoding."""
    if "bins" not in doc:
        return tree_predict_proba(doc, X)
    return tree_proba(doc["tree"], id3_rows(doc, X))


def explain(doc, X=None, raw=None, row=None, rules=None, rows=None):
    """The saved tree as rules (a binned column's condition as its range); with
    one encoded row, the rule that decided it (``rules``, ``rows``: see
    :func:`fedforest.horizontal.model_files.explain`)."""
    if "bins" not in doc:
        return tree_explain(doc, X, raw, row, rules=rules, rows=rows)
    enc = _id3_encoding(doc)
    binned = [e is not None for e in doc["bins"]]
    rules = leaf_rules(doc["tree"], CATEGORICAL) if rules is None else rules

    def text(rule):
        cond = rule.text(names=enc.columns, categories=enc.categories, joiner=" AND ", empty="always",
                         binned=binned)
        return f"IF {cond} THEN {enc.classes[int(np.argmax(rule.dist))]}"
    order = sorted(rules)
    lines = [f"{doc['mode']} model (id3 on {sum(binned)} binned numeric columns, {len(rules)} rules, "
             f"classes {enc.classes}"
             + (f"; [{COVERED}]" if rows is not None else "") + "):"]
    lines += [f"  rule {k}: {text(rules[n])}{covered(rows, n, rules[n].dist, enc.classes)}"
              for k, n in enumerate(order, start=1)]
    if X is not None:
        leaf = int(tree_format.apply(doc["tree"], id3_rows(doc, X))[0])

        def shown(features):
            return ", ".join(f"{enc.columns[f]}={text_of(raw[enc.columns[f]])}" for f in sorted(features))
        if leaf in rules:
            lines.append(f"row {row} ({shown(rules[leaf].conditions) or 'no conditions'}) is decided by "
                         f"rule {order.index(leaf) + 1}: {text(rules[leaf])}")
        else:
            f = int(doc["tree"]["feature"][leaf])
            lines.append(f"row {row} ({shown([f])}) has a category with no branch at an inner node; "
                         f"it takes that node's class {enc.classes[int(np.argmax(doc['tree']['value'][leaf]))]}")
    return "\n".join(lines)
