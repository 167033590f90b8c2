"""The roles of the federated streaming trees (mode ``efdt``; see the package
docstring and docs/efdt.md): the set-up (columns, classes, categories and bin
edges agreed from the clients' descriptions), the aggregation of the clients'
trees (pure functions), the server and client rounds, model files, local
prediction and explanation.
"""
import os
import time

import numpy as np
import pandas as pd

from ...data.io import read_npz, read_table
from ...errors import InputError
from ...federation import protocol
from ...federation.aggregate import client_metrics
from ...federation.files import atomic_write, replaced_folder, write_summary
from ...federation.metrics import class_scores
from ...federation.rounds import Done, ask, serve
from ...tree import format as tree_format
from ...tree import hoeffding as ht
from ..encoding import MISSING, ClientTable, Encoding, client_what, table_settings, text_of
from ..message_checks import (bad_message, check_categories, field_of, job_seed_of, message_encoding, number_array,
                              same_setting, same_settings, whole_number)
from ..model_files import check_model_folder, client_dir, save_model, server_dir
from ..setup import SERVER, check_clients, check_world, job_seed, log

LEARN = "learn_chunk"        # server -> client: (adopt this tree,) predict then learn your next chunk
SEND_CHUNK = "send_chunk"    # server -> client (centralized): send your next chunk's rows
STATE_FILE = "efdt_state.npz"


# ---------------------------------------------------------------------------
# Set-up: the clients describe their tables, the server agrees columns, classes, categories and bin edges
# ---------------------------------------------------------------------------
def describe(table, n_bins, head=None):
    """A client's description: columns and their kinds, classes, the category
    values of text columns and a quantile sketch of numeric ones, over the
    rows ``head`` (positions: the head of the stream) or every row (None)."""
    cats, sketches, kinds = [], [], []
    for c in table.X.columns:
        col = table.X[c]
        if pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col):
            kinds.append("numeric")
            cats.append(None)
            x = col.to_numpy(dtype=np.float64)
            sketches.append(ht.quantile_sketch(x if head is None else x[head], n_bins))
        else:
            kinds.append("text")
            cats.append(sorted({text_of(v) for v in col.dropna()}) + ([MISSING] if col.isna().any() else []))
            sketches.append(None)
    return {"n_rows": int(table.X.shape[0]), "columns": list(table.X.columns), "kinds": kinds,
            "classes": sorted({text_of(v) for v in table.y}), "categories": cats, "sketches": sketches}


def agree_stream(infos, n_bins):
    """The server's checks of the descriptions: (Encoding, bin edges per column or None)."""
    ranks = sorted(infos)
    first = infos[ranks[0]]
    columns = first["columns"]
    for r in ranks[1:]:
        cols = infos[r]["columns"]
        if set(cols) != set(columns):
            raise InputError(client_what(r), f"has other columns than client {ranks[0]}: missing "
                                             f"{[c for c in columns if c not in cols]}, unexpected "
                                             f"{[c for c in cols if c not in columns]}")
    classes = sorted({c for r in ranks for c in infos[r]["classes"]})
    if len(classes) < 2:
        raise InputError("labels", f"all clients together have only the class(es) {classes}; "
                                   "a classifier needs at least two")
    categories, edges = [], []
    for c in columns:
        kinds = {r: infos[r]["kinds"][infos[r]["columns"].index(c)] for r in ranks}
        if len(set(kinds.values())) > 1:
            raise InputError("data", f"column {c!r} is numeric on clients "
                                     f"{[r for r in ranks if kinds[r] == 'numeric']} and text on clients "
                                     f"{[r for r in ranks if kinds[r] == 'text']}")
        at = {r: infos[r]["columns"].index(c) for r in ranks}
        if kinds[ranks[0]] == "numeric":
            categories.append(None)
            edges.append(ht.agree_edges([infos[r]["sketches"][at[r]] for r in ranks], n_bins))
        else:
            values = set()
            for r in ranks:
                values |= set(infos[r]["categories"][at[r]])
            categories.append(sorted(values - {MISSING}) + ([MISSING] if MISSING in values else []))
            edges.append(None)
    # the row encoding of saved models: category codes when every column is text,
    # else numeric columns as floats with missing values kept
    row_type = "id3" if all(c is not None for c in categories) else "xgboost"
    return Encoding(row_type, columns, classes, categories), edges


def encode_rows(X, enc, what):
    """A client's rows as floats: numeric columns as values (NaN kept), text
    columns as category codes (-1: a category the job has not seen)."""
    missing = [c for c in enc.columns if c not in X.columns]
    extra = [c for c in X.columns if c not in enc.columns]
    if missing or extra:
        raise InputError(what, f"column set differs from the job's: missing {missing}, unexpected {extra}")
    out = np.empty((X.shape[0], len(enc.columns)))
    for j, (c, cats) in enumerate(zip(enc.columns, enc.categories)):
        col = X[c]
        if cats is None:
            values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
            if (np.isnan(values) & col.notna().to_numpy()).any():
                raise InputError(what, f"column {c!r} is numeric in this job but holds text")
            out[:, j] = values
        else:
            index = {v: i for i, v in enumerate(cats)}
            out[:, j] = [index.get(MISSING if pd.isna(v) else text_of(v), -1) for v in col]
    return out


def to_codes(X, edges):
    """Rows (numeric values and category codes) as the tree's integer codes:
    numeric columns binned over ``edges`` (missing: the last code), category
    codes kept (an unseen category, -1 or NaN, becomes -1)."""
    X = np.asarray(X, dtype=np.float64)
    out = np.empty(X.shape, dtype=np.int32)
    for j, e in enumerate(edges):
        if e is None:
            col = X[:, j]
            out[:, j] = np.where(np.isnan(col), -1, col).astype(np.int32)
        else:
            out[:, j] = ht.bin_codes(X[:, j], e)
    return out


def schema_of(enc, edges):
    return ht.Schema.from_edges(edges, enc.categories)


def _settings(cfg):
    return dict(grace_period=cfg.grace_period, delta=float(cfg.delta), tau=float(cfg.tau),
                min_samples_reevaluate=cfg.min_samples_reevaluate, criterion=cfg.split_criterion,
                leaf_prediction=cfg.leaf_prediction, binary_split=bool(cfg.binary_split),
                max_depth=cfg.max_depth, multiway_only=bool(cfg.multiway_only), new_leaf_seen=cfg.new_leaf_seen,
                merit_range=cfg.merit_range, max_share_to_split=float(cfg.max_share_to_split),
                resplit_same_column=bool(cfg.resplit_same_column))


def stream_order(n_rows, shuffle, seed, rank):
    """Positions of a client's rows in its stream: file order, or shuffled
    with seed ``seed + rank``."""
    if shuffle:
        return np.random.default_rng(seed + rank).permutation(n_rows)
    return np.arange(n_rows)


def chunks(n_rows, rounds):
    """Row ranges of the rounds: ``rounds`` chunks of near-equal size (none empty)."""
    bounds = np.linspace(0, n_rows, rounds + 1).round().astype(np.int64)
    return list(zip(bounds[:-1], bounds[1:]))


# ---------------------------------------------------------------------------
# Aggregation (pure functions of the clients' trees)
# ---------------------------------------------------------------------------
def syn_base(states):
    """Index of the tree with the least total tree edit distance to the others
    (the first on ties), and the distance matrix."""
    d = ht.tree_edit_distances(states)
    return int(np.argmin(d.sum(axis=1))), d


def sem_base(predictions):
    """Index of the tree whose predictions (one row per tree) disagree least
    with the others' (the first on ties), and the disagreement matrix."""
    p = np.asarray(predictions)
    d = (p[:, None, :] != p[None, :, :]).mean(axis=2)
    return int(np.argmin(d.sum(axis=1))), d


def aggregate(states, strategy, merge_mode="delta", predictions=None):
    """One aggregated tree per client (syn/sem: the same merged base for all;
    ind: each client's own tree merged with the others) and the base index
    (None for ind)."""
    k = len(states)
    if strategy == "ind":
        return [ht.merge(states[i], [states[j] for j in range(k) if j != i], merge_mode) for i in range(k)], None
    if strategy == "syn":
        base, _ = syn_base(states)
    elif strategy == "sem":
        base, _ = sem_base(predictions)
    else:
        raise ValueError(f"strategy must be 'syn', 'sem' or 'ind', got {strategy!r}")
    merged = ht.merge(states[base], [states[j] for j in range(k) if j != base], merge_mode)
    return [merged] * k, base


# ---------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------
def _read_proxy(cfg):
    if not cfg.proxy_data:
        return None
    df = read_table(cfg.proxy_data, None, "proxy_data", **table_settings(cfg))
    df.columns = [str(c) for c in df.columns]
    if df.shape[0] == 0:
        raise InputError("proxy_data", f"{cfg.proxy_data!r} has no rows")
    return df.drop(columns=[c for c in (cfg.label_column, cfg.id_column) if c in df.columns])


def _check_job(comm, cfg, folder, what):
    """The checks of every rank before any message: settings, files, world size, model folder."""
    cfg.check_train()
    check_clients(cfg)
    check_world(comm, cfg)
    check_model_folder(folder, cfg, what)


def _connect(comm, cfg):
    comm.reply_timeout = cfg.reply_timeout
    comm.handshake()


def server_train(comm, cfg):
    t0 = time.perf_counter()
    _check_job(comm, cfg, server_dir(cfg.model_dir), "model_dir")
    proxy_df = _read_proxy(cfg)   # before any exchange: a bad file stops the job at once
    _connect(comm, cfg)
    clients = comm.clients
    seed = job_seed(cfg)   # before the descriptions: bin edges may come from the head of a shuffled stream
    infos = comm.exchange({r: {"op": protocol.LOAD, "n_bins": cfg.n_bins, "edge_rows": cfg.edge_rows,
                               "seed": seed} for r in clients})
    enc, edges = agree_stream(infos, cfg.n_bins)
    rows = {r: infos[r]["n_rows"] for r in clients}
    short = {r: n for r, n in rows.items() if n < cfg.rounds}
    if short:
        r = min(short, key=short.get)
        raise InputError("rounds", f"must be at most the rows of every client (client {r} has {short[r]} "
                                   f"rows), got {cfg.rounds}")
    proxy = to_codes(encode_rows(proxy_df, enc, "proxy_data"), edges) if proxy_df is not None else None
    schema = schema_of(enc, edges)
    settings = _settings(cfg)
    comm.bcast({"op": protocol.SETUP, "encoding": enc.to_dict(), "edges": edges, "settings": settings,
                "rounds": cfg.rounds, "strategy": cfg.strategy, "mode": cfg.mode, "seed": seed})
    log(cfg, f"efdt: {len(clients)} clients, {sum(rows.values())} rows, strategy {cfg.strategy}, merge "
             f"{cfg.merge}, {cfg.rounds} rounds")
    summary = {"mode": cfg.mode, "strategy": cfg.strategy, "merge": cfg.merge, "n_clients": len(clients),
               "rows": rows, "rounds": cfg.rounds, "settings": settings, "random_state": seed,
               "n_bins": [None if e is None else len(e) + 1 for e in edges], "edge_rows": cfg.edge_rows}
    rounds0, bytes0 = comm.rounds, comm.bytes_sent
    correct, seen = np.zeros(cfg.rounds), np.zeros(cfg.rounds)
    agg_seconds, bases, nodes = [], [], []
    central = ht.EFDT(schema, len(enc.classes), **settings) if cfg.strategy == "centralized" else None
    outgoing = {r: None for r in clients}
    for rnd in range(cfg.rounds):
        if central is not None:
            data = ask(comm, SEND_CHUNK, {"round": rnd})
            codes = np.concatenate([data[r]["codes"] for r in clients])
            y = np.concatenate([data[r]["y"] for r in clients])
            correct[rnd] = (central.predict_proba(codes).argmax(axis=1) == y).sum()
            seen[rnd] = y.size
            central.learn(codes, y)
            nodes.append(central.n_nodes)
            continue
        send = cfg.strategy != "local"
        replies = ask(comm, LEARN, {"round": rnd, "send_tree": send},
                      {r: {"tree": outgoing[r]} for r in clients})
        correct[rnd] = sum(replies[r]["correct"] for r in clients)
        seen[rnd] = sum(replies[r]["n"] for r in clients)
        if not send:
            continue
        states = [replies[r]["tree"] for r in clients]
        a0 = time.perf_counter()
        preds = None
        if cfg.strategy == "sem":
            preds = [ht.state_proba(s, schema, proxy, cfg.leaf_prediction).argmax(axis=1) for s in states]
        trees, base = aggregate(states, cfg.strategy, cfg.merge, preds)
        agg_seconds.append(time.perf_counter() - a0)
        bases.append(None if base is None else int(clients[base]))
        nodes.append([len(t["feature"]) for t in trees])
        outgoing = {r: {k: v for k, v in trees[i].items() if k not in ("dcounts", "dnijk")}
                    for i, r in enumerate(clients)}
    acc = np.cumsum(correct) / np.cumsum(seen)
    summary["round_accuracy"] = acc.tolist()
    summary["chunk_accuracy"] = (correct / seen).tolist()
    summary["prequential_accuracy"] = float(acc[-1])
    if agg_seconds:
        summary["aggregation_seconds_per_round"] = float(np.mean(agg_seconds))
    summary["base_client"] = bases
    summary["nodes"] = nodes
    final_tree = central.state(deltas=False) if central is not None else None
    final = comm.exchange({r: {"op": protocol.FINAL, "tree": final_tree if central is not None else outgoing[r]}
                           for r in clients})
    summary.update(exchanges=comm.rounds - rounds0, bytes_sent_by_server=comm.bytes_sent - bytes0,
                   bytes_sent_by_clients={r: final[r]["bytes_sent"] for r in clients},
                   model_dirs={r: final[r]["model_dir"] for r in clients})
    scored = [key for key in ("train", "test") if final[clients[0]].get(key)]
    for key in scored:   # per client, and the mean over clients
        summary[f"{key}_metrics"] = {r: final[r][key] for r in clients}
        summary.update({f"{key}_{m}": v for m, v in client_metrics(summary[f"{key}_metrics"]).items()})
    server_tree = final_tree if central is not None else (
        outgoing[clients[0]] if cfg.strategy in ("syn", "sem") else None)
    if server_tree is not None:
        doc = model_doc(cfg, enc, edges, schema, server_tree, settings)
        doc["summary"] = {k: v for k, v in summary.items() if k != "model_dirs"}
        summary["model_dirs"][0] = save_efdt(server_dir(cfg.model_dir), doc, server_tree)
    summary["seconds"] = time.perf_counter() - t0
    log(cfg, f"efdt: prequential accuracy {summary['prequential_accuracy']:.4f} after {cfg.rounds} rounds"
             + (f", mean client test accuracy {summary['test_accuracy']:.4f}" if "test_accuracy" in summary else "")
             + f" ({summary['seconds']:.2f}s)")
    write_summary(cfg.summary_json, summary)
    return summary


# ---------------------------------------------------------------------------
# Client
# ---------------------------------------------------------------------------
def check_setup(setup, cfg, info, seed=None):
    """The server's ``setup`` message against this client's settings, table
    description ``info`` and the seed of the load message: (Encoding, bin
    edges, the client's own settings, seed)."""
    op = protocol.SETUP
    same_settings(setup, op, {"mode": cfg.mode, "strategy": cfg.strategy, "rounds": cfg.rounds})
    settings = same_settings(setup, op, {"settings": _settings(cfg)})["settings"]
    row_type = "id3" if all(k == "text" for k in info["kinds"]) else "xgboost"
    enc = message_encoding(op, field_of(setup, op, "encoding"), row_type, "classification")
    check_categories(op, enc, info, False)
    if enc.categories is None:
        raise bad_message(op, "encoding", "it needs one category list (or none) per column")
    edges = field_of(setup, op, "edges")
    if not isinstance(edges, (list, tuple)) or len(edges) != len(enc.columns):
        raise bad_message(op, "edges", f"expected one entry per column ({len(enc.columns)})")
    out = []
    for j, (e, cats) in enumerate(zip(edges, enc.categories)):
        if cats is not None:
            if e is not None:
                raise bad_message(op, "edges", f"column {j} holds categories, not bins")
            out.append(None)
            continue
        e = number_array(op, "edges", e, "iuf", ndim=1, dtype=np.float64)
        if e.size > cfg.n_bins or not np.isfinite(e).all() or np.any(np.diff(e) <= 0):
            raise bad_message(op, "edges", f"column {j} needs at most {cfg.n_bins} increasing finite edges")
        out.append(e)
    got = job_seed_of(setup, op, cfg)
    if seed is not None and got != seed:
        raise bad_message(op, "seed", f"expected the seed of the load message ({seed}), got {got}")
    return enc, out, settings, got


def client_train(comm, cfg):
    rank = comm.rank
    what = client_what(rank)
    _check_job(comm, cfg, client_dir(cfg.model_dir, rank), f"{what} model_dir")
    _connect(comm, cfg)
    msg = protocol.expect(comm.recv(SERVER), protocol.LOAD)
    same_setting("n_bins", field_of(msg, protocol.LOAD, "n_bins"), cfg.n_bins)
    same_setting("edge_rows", field_of(msg, protocol.LOAD, "edge_rows"), cfg.edge_rows)
    load_seed = job_seed_of(msg, protocol.LOAD, cfg)
    table = ClientTable(cfg.data[rank - 1], rank, cfg.label_column, cfg.id_column, **table_settings(cfg))
    if table.X.shape[0] == 0:
        raise InputError(what, f"{cfg.data[rank - 1]!r} has no rows")
    order = stream_order(table.X.shape[0], cfg.shuffle, load_seed, rank)
    info = describe(table, cfg.n_bins, None if cfg.edge_rows is None else order[:cfg.edge_rows])
    comm.send(SERVER, info)
    enc, edges, settings, seed = check_setup(protocol.expect(comm.recv(SERVER), protocol.SETUP), cfg, info,
                                             load_seed)
    schema = schema_of(enc, edges)
    codes = to_codes(encode_rows(table.X, enc, what), edges)[order]
    y = enc.labels(table.y, what)[order]
    test = None
    if cfg.test_data:
        tt = ClientTable(cfg.test_data[rank - 1], rank, cfg.label_column, cfg.id_column, **table_settings(cfg))
        test = (to_codes(encode_rows(tt.X, enc, f"{what} test data"), edges), enc.labels(tt.y, f"{what} test data"))
    parts = chunks(y.size, cfg.rounds)
    model = ht.EFDT(schema, len(enc.classes), **settings)
    lp = settings["leaf_prediction"]
    bytes0 = comm.bytes_sent
    shared = cfg.strategy not in ("local", "centralized")   # the server sends merged trees
    done = {"rounds": 0}

    def next_round(op, m):
        rnd = whole_number(op, "round", field_of(m, op, "round"), 0, cfg.rounds - 1)
        if rnd != done["rounds"]:
            raise bad_message(op, "round", f"expected round {done['rounds']}, got {rnd}")
        done["rounds"] += 1
        return parts[rnd]

    def tree_of(op, m, expected):
        """The server's tree of ``m``: a state when ``expected``, else none."""
        st = m.get("tree")
        if not expected:
            if st is not None:
                raise bad_message(op, "tree", "this round sends no tree")
            return None
        try:
            return ht.check_state(st, schema, len(enc.classes), "tree", binary_split=bool(cfg.binary_split),
                                  max_depth=cfg.max_depth, multiway_only=bool(cfg.multiway_only))
        except InputError as exc:
            raise bad_message(op, "tree", exc.problem) from None

    def learn(m):
        first = done["rounds"] == 0
        lo, hi = next_round(LEARN, m)
        same_setting("send_tree", field_of(m, LEARN, "send_tree"), cfg.strategy != "local")
        st = tree_of(LEARN, m, shared and not first)
        if st is not None:
            model.load_state(st)
        c, t = codes[lo:hi], y[lo:hi]
        reply = {"correct": int((model.predict_proba(c).argmax(axis=1) == t).sum()), "n": int(t.size)}
        model.learn(c, t)
        if cfg.strategy != "local":
            reply["tree"] = model.state(deltas=True)
        return reply

    def send_chunk(m):
        lo, hi = next_round(SEND_CHUNK, m)
        return {"codes": codes[lo:hi], "y": y[lo:hi]}

    def final(m):
        if done["rounds"] != cfg.rounds:
            raise bad_message(protocol.FINAL, "op", f"the final message after {done['rounds']} of "
                                                  f"{cfg.rounds} rounds")
        st = tree_of(protocol.FINAL, m, cfg.strategy != "local")
        if st is not None:
            model.load_state(st)
        st = model.state(deltas=False)
        reply = {"train": class_scores(y, ht.state_proba(st, schema, codes, lp))}
        if test is not None:
            reply["test"] = class_scores(test[1], ht.state_proba(st, schema, test[0], lp))
        doc = model_doc(cfg, enc, edges, schema, st, settings)
        doc.update(client=rank, metrics=dict(reply))
        folder = save_efdt(client_dir(cfg.model_dir, rank), doc, st)
        reply.update(model_dir=folder, bytes_sent=comm.bytes_sent - bytes0)
        return Done(folder, reply)

    rounds = {SEND_CHUNK: send_chunk} if cfg.strategy == "centralized" else {LEARN: learn}
    return serve(comm, {**rounds, protocol.FINAL: final})


# ---------------------------------------------------------------------------
# Model files, local prediction and explanation
# ---------------------------------------------------------------------------
def model_doc(cfg, enc, edges, schema, st, settings, mode=None):
    return {"mode": mode or cfg.mode, "encoding": enc.to_dict(), "label_column": cfg.label_column,
            "tree": ht.export(st, schema), "edges": [None if e is None else np.asarray(e).tolist() for e in edges],
            "schema": schema.to_dict(), "settings": settings}


def save_efdt(folder, doc, st):
    """``folder/efdt_state.npz`` (the tree's statistics, for naive Bayes leaves
    and explanations) and ``folder/model.json``, written beside an older model
    and swapped in together."""
    arrays = {k: np.asarray(v) for k, v in st.items() if k not in ("dcounts", "dnijk")}
    with replaced_folder(folder) as stage:
        atomic_write(os.path.join(stage, STATE_FILE), lambda fh: np.savez(fh, **arrays))
        save_model(stage, doc)
    return folder


def load_state(doc):
    """The tree's statistics beside a saved model, checked (:func:`ht.check_state`)."""
    path = os.path.join(doc["folder"], STATE_FILE)
    if not os.path.isfile(path):
        raise InputError("model_dir", f"{path!r} is missing (the tree's statistics)")
    try:
        st = read_npz(path)
        schema = ht.Schema.from_dict(doc["schema"])
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise InputError("model_dir", f"cannot read {path!r}: {exc}") from None
    return ht.check_state(st, schema, len(doc["encoding"].classes), f"model {path!r}")


def _edges(doc):
    return [None if e is None else np.asarray(e, dtype=np.float64) for e in doc["edges"]]


def predict_proba(doc, X):
    """Class probabilities of rows encoded with the model's encoding."""
    st = load_state(doc)
    schema = ht.Schema.from_dict(doc["schema"])
    return ht.state_proba(st, schema, to_codes(X, _edges(doc)), doc["settings"]["leaf_prediction"])


def _condition(enc, edges, st, node, c):
    """The text of the branch to child ``c`` of ``node``."""
    f, k, v = int(st["feature"][node]), int(st["kind"][node]), int(st["value"][node])
    name = enc.columns[f]
    if k == ht.LE:
        return f"{name} <= {edges[f][v]:g}" if c == 0 else f"{name} > {edges[f][v]:g} (or missing)"
    cats = enc.categories[f]
    if k == ht.EQ:
        return f"{name} = {cats[v]}" if c == 0 else f"{name} != {cats[v]}"
    return f"{name} = {cats[c]}"


def leaf_rules(doc, st):
    """``{leaf: (conditions, counts)}`` of a saved tree, in node order."""
    enc, edges = doc["encoding"], _edges(doc)
    out, stack = {}, [(0, [])]
    while stack:
        node, cond = stack.pop()
        n = int(st["n_children"][node])
        if n == 0:
            out[node] = (cond, np.asarray(st["counts"][node]))
            continue
        f0 = int(st["first"][node])
        for c in range(n - 1, -1, -1):
            stack.append((int(st["child"][f0 + c]), cond + [_condition(enc, edges, st, node, c)]))
    return {k: out[k] for k in sorted(out)}


def _rule_text(enc, cond, counts):
    tally = ", ".join(f"{c}: {int(round(n))}" for c, n in zip(enc.classes, counts))
    return f"IF {' AND '.join(cond) or 'always'} THEN {enc.classes[int(np.argmax(counts))]} ({tally})"


def explain(doc, X=None, raw=None, row=None):
    """The saved tree as rules with their class counts; with one encoded row,
    the rule (or the inner node) that decides it."""
    enc = doc["encoding"]
    st = load_state(doc)
    rules = leaf_rules(doc, st)
    order = list(rules)
    lines = [f"{doc['mode']} model ({len(rules)} rules, {doc['settings']['leaf_prediction']} leaves, "
             f"classes {enc.classes}):"]
    for i, n in enumerate(order, start=1):
        lines.append(f"  rule {i}: {_rule_text(enc, *rules[n])}")
    if X is not None:
        node = int(tree_format.apply(doc["tree"], to_codes(X, _edges(doc)).astype(np.float64))[0])
        if node in rules:
            lines.append(f"row {row} is decided by rule {order.index(node) + 1}")
        else:
            f = enc.columns[int(st["feature"][node])]
            lines.append(f"row {row} has a value of {f!r} ({text_of(raw[f])}) with no branch at an inner "
                         f"node; it takes that node's class {enc.classes[int(np.argmax(st['counts'][node]))]}")
    return "\n".join(lines)
