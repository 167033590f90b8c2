"""FedXGBllr: federated XGBoost with learnable learning rates (horizontal).

Round 0: every client trains an XGBoost ensemble on its rows with the
``xgboost`` package (``xgb_trees`` / K trees, ``max_depth`` 8, ``xgb_eta``
0.1 by default) and sends it once.  The server orders the ensembles by client
rank and sends the aggregate to every client with the initial CNN weights.
Each client computes the output of every one of the K·T trees on its rows
(leaf indices and leaf values from xgboost itself): the input of a one-layer
1D CNN (:mod:`fedforest.cnn`) whose kernel holds one learning rate per tree.
Rounds 1..R: FedAvg of the CNN, weighted by the clients' row counts; each
client trains ``local_epochs`` epochs of mini-batches of ``batch_size`` rows
with Adam.  No gradient or hessian of the trees is ever shared.

For multiclass tasks XGBoost grows one tree per class per boosting round;
"trees" counts those trees, so a client runs ``T // C`` rounds (at least one)
and the CNN sees ``T`` outputs per client ensemble.
"""
import json
import os
import time

import numpy as np
import xgboost as xgb

from . import __version__, cnn, model_io
from .errors import InputError
from .horizontal import (
    FORMAT,
    FORMAT_VERSION,
    Encoding,
    check_clients,
    client_dir,
    client_setup,
    expect,
    log,
    server_dir,
    server_setup,
)
from .model_io import write_summary

MASTER = 0
DEFAULT_DEPTH = 8


def check_config(cfg):
    """FedXGBllr settings, refused before any work."""
    check_clients(cfg)
    if cfg.task not in ("classification", "regression"):
        raise InputError("task", f"must be 'classification' or 'regression', got {cfg.task!r}")
    for key, low in (("xgb_trees", 1), ("rounds", 1), ("local_epochs", 1), ("batch_size", 1),
                     ("cnn_channels", 1)):
        v = cfg.values[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise InputError(key, f"must be an int >= {low}, got {v!r}")
    for key in ("xgb_eta", "cnn_lr"):
        v = cfg.values[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise InputError(key, f"must be a number > 0, got {v!r}")
    d = cfg.max_depth
    if d is not None and (isinstance(d, bool) or not isinstance(d, int) or d < 1):
        raise InputError("max_depth", f"must be None or an int >= 1, got {d!r}")
    if cfg.xgb_trees < cfg.n_parties:
        raise InputError("xgb_trees", f"{cfg.xgb_trees} trees cannot give each of {cfg.n_parties} "
                                      "clients one tree")


def kind_of(enc):
    if enc.task == "regression":
        return cnn.REGRESSION
    return cnn.BINARY if len(enc.classes) == 2 else cnn.MULTICLASS


def n_outputs(enc):
    return len(enc.classes) if kind_of(enc) == cnn.MULTICLASS else 1


# ---------------------------------------------------------------------------
# XGBoost ensembles
# ---------------------------------------------------------------------------
def train_ensemble(X, y, enc, n_trees, max_depth, eta, seed):
    """One client's XGBoost booster (``n_trees`` trees in all) as raw UBJSON bytes."""
    kind = kind_of(enc)
    params = {"max_depth": max_depth, "eta": eta, "seed": seed, "nthread": 1}
    rounds = n_trees
    if kind == cnn.BINARY:
        params["objective"] = "binary:logistic"
    elif kind == cnn.MULTICLASS:
        params.update(objective="multi:softprob", num_class=len(enc.classes))
        rounds = max(1, n_trees // len(enc.classes))
    else:
        params["objective"] = "reg:squarederror"
    booster = xgb.train(params, xgb.DMatrix(X, label=y, missing=np.nan), num_boost_round=rounds)
    return np.frombuffer(bytes(booster.save_raw("ubj")), dtype=np.uint8)


def load_booster(raw):
    booster = xgb.Booster()
    booster.load_model(bytearray(np.asarray(raw, dtype=np.uint8).tobytes()))
    return booster


def tree_outputs(boosters, X):
    """Per-tree outputs (rows x all trees, client ensembles side by side): the
    leaf each row reaches (xgboost's ``pred_leaf``) mapped to that leaf's value."""
    dm = xgb.DMatrix(X, missing=np.nan)
    cols = []
    for booster in boosters:
        leaves = booster.predict(dm, pred_leaf=True).astype(np.int64).reshape(X.shape[0], -1)
        df = booster.trees_to_dataframe()
        leaf = df[df["Feature"] == "Leaf"]
        values = np.zeros((int(df["Tree"].max()) + 1, int(df["Node"].max()) + 1))
        values[leaf["Tree"].to_numpy(), leaf["Node"].to_numpy()] = leaf["Gain"].to_numpy()
        cols.append(values[np.arange(values.shape[0])[None, :], leaves])
    return np.hstack(cols) if cols else np.empty((X.shape[0], 0))


def intercepts(raw_ensembles, n_features, n_out):
    """Each ensemble's constant term (XGBoost's base score on the margin scale):
    the margin minus the sum of its tree outputs, on a row of missing values."""
    row = np.full((1, n_features), np.nan)
    dm = xgb.DMatrix(row, missing=np.nan)
    out = []
    for raw in raw_ensembles:
        booster = load_booster(raw)
        margin = np.asarray(booster.predict(dm, output_margin=True), dtype=np.float64).reshape(-1)
        trees = tree_outputs([booster], row)[0]
        if n_out > 1:
            out.append(margin - trees.reshape(-1, n_out).sum(axis=0))
        else:
            out.append(margin[:1] - trees.sum())
    return np.array(out)


def _check_outputs(S, what):
    if not np.isfinite(S).all():
        bad = int((~np.isfinite(S)).any(axis=0).sum())
        raise InputError(what, f"{bad} trees give non-finite outputs on its rows (NaN or infinity); "
                               "check the features for extreme values")


def _metrics(enc, y, pred):
    if enc.task == "regression":
        return {"mse": float(np.mean((pred - y) ** 2))}
    from sklearn.metrics import accuracy_score, f1_score
    lab = pred.argmax(axis=1)
    return {"accuracy": float(accuracy_score(y, lab)),
            "f1": float(f1_score(y, lab, average="macro", zero_division=0))}


# ---------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------
def server_train(comm, cfg):
    t0 = time.perf_counter()
    check_config(cfg)
    clients = comm.clients
    infos, enc = server_setup(comm, cfg, "xgboost", cfg.task)
    K = len(clients)
    T_req = cfg.xgb_trees // K
    setup = {"op": "setup", "encoding": enc.to_dict(), "trees_per_client": T_req,
             "max_depth": cfg.max_depth or DEFAULT_DEPTH, "eta": float(cfg.xgb_eta),
             "seed": cfg.random_state if cfg.random_state is not None else 0,
             "epochs": cfg.local_epochs, "batch_size": cfg.batch_size, "lr": float(cfg.cnn_lr)}
    comm.bcast(setup)
    rows = {r: infos[r]["n_rows"] for r in clients}
    log(cfg, f"fedxgbllr: {K} clients, {sum(rows.values())} rows, {T_req} trees per client, "
              f"{cfg.rounds} rounds")
    rounds0, sent0 = comm.rounds, comm.bytes_sent
    # round 0: every ensemble once, aggregated in client order
    ens = comm.exchange({r: {"op": "train_xgb"} for r in clients})
    aggregate = aggregate_ensembles({r: ens[r]["model"] for r in clients})
    T = ens[clients[0]]["n_trees"]
    if any(ens[r]["n_trees"] != T for r in clients):
        raise InputError("xgb_trees", "the clients' ensembles have different numbers of trees: "
                                      f"{ {r: ens[r]['n_trees'] for r in clients} }")
    params = cnn.init_params(T, K, n_outputs(enc), cfg.cnn_channels, setup["seed"])
    # the output bias starts at the ensembles' mean intercept: the tree outputs leave it out
    params["c"] = np.average(intercepts(aggregate, len(enc.columns), n_outputs(enc)), axis=0,
                             weights=[rows[r] for r in clients])
    losses = []
    for t in range(1, cfg.rounds + 1):
        msg = {"op": "fit", "params": params, "round": t}
        if t == 1:
            msg["ensembles"] = aggregate
        replies = comm.exchange({r: msg for r in clients})
        params = cnn.fedavg([replies[r]["params"] for r in clients], [replies[r]["n_rows"] for r in clients])
        losses.append(float(np.average([replies[r]["loss"] for r in clients],
                                       weights=[replies[r]["n_rows"] for r in clients])))
    rounds = comm.rounds - rounds0
    server_bytes = comm.bytes_sent - sent0
    final = comm.exchange({r: {"op": "final", "params": params} for r in clients})
    summary = {"mode": "fedxgbllr", "task": enc.task, "n_clients": K, "rows": rows,
               "trees_per_client": T, "rounds": rounds, "train_loss_per_round": losses,
               "bytes_sent_per_client": {r: final[r]["bytes_sent"] for r in clients},
               "bytes_received_per_client": server_bytes / K,
               "model_dirs": {r: final[r]["model_dir"] for r in clients}}
    summary["bytes_per_client"] = float(np.mean(list(summary["bytes_sent_per_client"].values()))
                                        + summary["bytes_received_per_client"])
    for key in ("train", "test"):
        if final[clients[0]].get(key):
            per = {r: final[r][key] for r in clients}
            summary[f"{key}_metrics"] = per
            for m in per[clients[0]]:
                summary[f"{key}_{m}"] = float(np.average([per[r][m] for r in clients],
                                                         weights=[final[r][f"{key}_rows"] for r in clients]))
    summary["model_dirs"][0] = save_model(server_dir(cfg.model_dir), enc, cfg.label_column, aggregate,
                                          params, {"summary": {k: v for k, v in summary.items()
                                                               if k != "model_dirs"}})
    summary["seconds"] = time.perf_counter() - t0
    which = "test" if "test_mse" in summary or "test_accuracy" in summary else "train"
    metric = "mse" if enc.task == "regression" else "accuracy"
    log(cfg, f"fedxgbllr: {rounds} rounds, {summary['bytes_per_client'] / 1e6:.2f} MB per client, "
              f"client {which} {metric} {summary[f'{which}_{metric}']:.4f} ({summary['seconds']:.1f}s)")
    write_summary(cfg.summary_json, summary)
    return summary


def aggregate_ensembles(by_rank):
    """The clients' ensembles ordered by client rank (whatever order they arrived in)."""
    return [by_rank[r] for r in sorted(by_rank)]


# ---------------------------------------------------------------------------
# Client
# ---------------------------------------------------------------------------
def client_train(comm, cfg):
    rank = comm.rank
    check_config(cfg)
    setup, enc, X, y, test = client_setup(comm, cfg)
    what = f"client {rank}"
    bytes0 = comm.bytes_sent
    kind = kind_of(enc)
    expect(comm.recv(MASTER), "train_xgb")
    model = train_ensemble(X, y, enc, setup["trees_per_client"], setup["max_depth"], setup["eta"],
                           setup["seed"] + rank)
    n_trees = load_booster(model).num_boosted_rounds() * (len(enc.classes) if kind == cnn.MULTICLASS else 1)
    comm.send(MASTER, {"model": model, "n_trees": n_trees})
    S = S_test = boosters = None
    while True:
        msg = comm.recv(MASTER)
        if msg["op"] == "fit":
            if "ensembles" in msg:
                boosters = [load_booster(raw) for raw in msg["ensembles"]]
                S = tree_outputs(boosters, X)
                _check_outputs(S, what)
                if test is not None:
                    S_test = tree_outputs(boosters, test[0])
                    _check_outputs(S_test, f"{what} test data")
            params, loss = cnn.train_local(msg["params"], S, y, kind, setup["epochs"], setup["batch_size"],
                                           setup["lr"], seed=setup["seed"] + 7919 * rank + msg["round"])
            comm.send(MASTER, {"params": params, "n_rows": int(X.shape[0]), "loss": loss})
        elif msg["op"] == "final":
            params = msg["params"]
            reply = {"train": _metrics(enc, y, cnn.predict(params, S, kind)), "train_rows": int(X.shape[0])}
            if test is not None:
                reply["test"] = _metrics(enc, test[1], cnn.predict(params, S_test, kind))
                reply["test_rows"] = int(test[0].shape[0])
            folder = client_dir(cfg.model_dir, rank)
            save_model(folder, enc, cfg.label_column, msg_ensembles(boosters), params,
                       {"client": rank, "metrics": reply})
            reply.update(model_dir=folder, bytes_sent=comm.bytes_sent - bytes0)
            comm.send(MASTER, reply)
            return folder
        else:
            raise RuntimeError(f"protocol error: unexpected {msg['op']!r}")


def msg_ensembles(boosters):
    return [np.frombuffer(bytes(b.save_raw("ubj")), dtype=np.uint8) for b in boosters]


# ---------------------------------------------------------------------------
# Model files, prediction, explanation
# ---------------------------------------------------------------------------
def save_model(folder, enc, label_column, ensembles, params, extra):
    """``model.json`` + ``ensemble-<k>.ubj`` (client order) + ``cnn.npz``, each written atomically."""
    os.makedirs(folder, exist_ok=True)
    for k, raw in enumerate(ensembles, start=1):
        data = np.asarray(raw, dtype=np.uint8).tobytes()
        model_io._atomic_write(os.path.join(folder, f"ensemble-{k}.ubj"), lambda fh, d=data: fh.write(d))
    model_io._atomic_write(os.path.join(folder, "cnn.npz"), lambda fh: np.savez(fh, **params))
    doc = dict(extra, format=FORMAT, format_version=FORMAT_VERSION, fedforest_version=__version__,
               mode="fedxgbllr", encoding=enc.to_dict(), label_column=label_column,
               n_ensembles=len(ensembles))
    data = json.dumps(doc, indent=1, sort_keys=True, default=float).encode()
    path = os.path.join(folder, "model.json")
    model_io._atomic_write(path, lambda fh: fh.write(data))
    return path


def load_parts(doc, folder):
    boosters = []
    for k in range(1, doc["n_ensembles"] + 1):
        path = os.path.join(folder, f"ensemble-{k}.ubj")
        if not os.path.isfile(path):
            raise InputError("model_dir", f"{folder!r} lacks {os.path.basename(path)}")
        booster = xgb.Booster()
        booster.load_model(path)
        boosters.append(booster)
    with np.load(os.path.join(folder, "cnn.npz")) as z:
        params = {k: z[k] for k in z.files}
    return boosters, params


def predict_proba(doc, folder, X):
    enc = Encoding.from_dict(doc["encoding"])
    boosters, params = load_parts(doc, folder)
    S = tree_outputs(boosters, X)
    _check_outputs(S, "data")
    return cnn.predict(params, S, kind_of(enc))


def explain_text(doc, folder):
    """The learned per-tree learning rates (conv channels) and per-client head weights."""
    enc = Encoding.from_dict(doc["encoding"])
    _, params = load_parts(doc, folder)
    W, V = params["W"], params["V"]
    C, T = W.shape
    K = doc["n_ensembles"]
    head = V.reshape(V.shape[0], C, K)      # [output, channel, client]
    active = np.abs(head).sum(axis=(0, 2))
    order = np.argsort(-active)
    lines = [f"fedxgbllr model: {K} client ensembles of {T} trees, {C} learning-rate channels, "
             f"task {enc.task}" + (f", classes {enc.classes}" if enc.task == "classification" else ""),
             "per-tree learning rates (conv kernel) of the 5 channels with the largest head weights:"]
    show = min(T, 8)
    for c in order[:5]:
        rates = " ".join(f"{w:+.3f}" for w in W[c, :show]) + (" ..." if T > show else "")
        lines.append(f"  channel {c:2d} (bias {params['b'][c]:+.3f}; mean {W[c].mean():+.4f}, "
                     f"min {W[c].min():+.3f}, max {W[c].max():+.3f}): {rates}")
    lines.append("per-client head weights (sum over channels" + (", per output" if V.shape[0] > 1 else "") + "):")
    totals = head.sum(axis=1)               # [output, client]
    for k in range(K):
        vals = " ".join(f"{v:+.3f}" for v in totals[:, k])
        lines.append(f"  client {k + 1}: {vals}")
    return "\n".join(lines)
