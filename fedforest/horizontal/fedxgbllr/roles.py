"""FedXGBllr's roles (see the package docstring).

Round 0: every client trains an XGBoost ensemble on its rows with the
``xgboost`` package (``xgb_trees`` / K trees, ``max_depth`` 8, ``xgb_eta``
0.1 by default) and sends it once.  The server orders the ensembles by client
rank and sends the aggregate to every client with the initial CNN weights.
Each client computes the output of every one of the K·T trees on its rows
(leaf indices and leaf values from xgboost itself): the input of a one-layer
1D CNN (:mod:`.cnn`) whose kernel holds one learning rate per tree.
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

from ...data.io import read_npz
from ...errors import InputError
from ...federation import protocol
from ...federation.aggregate import client_metrics, fedavg, in_rank_order
from ...federation.files import atomic_write, replaced_folder, write_summary
from ...federation.metrics import class_scores
from ...federation.rounds import Done, ask, serve
from ...optional import require
from ..encoding import Encoding
from ..message_checks import bad_message, field_of, job_seed_of, number_array, same_settings, whole_number
from ..model_files import client_dir, server_dir, write_model_doc
from ..setup import client_setup, job_seed, log, server_setup
from . import DEFAULT_DEPTH, cnn

xgb = require("xgboost", extra="xgboost", what="mode", feature="mode 'fedxgbllr'")

SERVER = 0
TRAIN_XGB = "train_xgb"      # server -> client: train your XGBoost ensemble, send it
FIT = "fit"                  # server -> client: train the CNN locally from these weights


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
        values = leaf_values(booster)
        cols.append(values[np.arange(values.shape[0])[None, :], leaves])
    return np.hstack(cols) if cols else np.empty((X.shape[0], 0))


def leaf_values(booster):
    """``values[tree, node]``: the output of each leaf of the booster's trees
    (0 at inner nodes), read from the model's JSON once per booster."""
    cached = getattr(booster, "_fedforest_leaf_values", None)
    if cached is not None:
        return cached
    trees = json.loads(bytes(booster.save_raw("json")))["learner"]["gradient_booster"]["model"]["trees"]
    width = max(len(t["left_children"]) for t in trees)
    values = np.zeros((len(trees), width))
    for t in trees:
        left = np.asarray(t["left_children"])
        leaf = np.flatnonzero(left == -1)
        values[int(t["id"]), leaf] = np.asarray(t["split_conditions"], dtype=np.float64)[leaf]
    booster._fedforest_leaf_values = values
    return values


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
    return class_scores(y, pred)


# ---------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------
def setup_settings(cfg, n_clients):
    """The settings of the ``setup`` message (each client checks the server's against its own)."""
    return {"trees_per_client": cfg.xgb_trees // n_clients, "max_depth": cfg.max_depth or DEFAULT_DEPTH,
            "eta": float(cfg.xgb_eta), "epochs": cfg.local_epochs, "batch_size": cfg.batch_size,
            "lr": float(cfg.cnn_lr)}


PARAM_KEYS = ("W", "b", "V", "c")


def check_params(op, params, channels, n_trees, n_clients, n_out):
    """The CNN weights of the server's message: exactly W (channels, T), b
    (channels,), V (n_out, channels * K), c (n_out,), as float64."""
    if not isinstance(params, dict) or set(params) != set(PARAM_KEYS):
        raise bad_message(op, "params", f"expected the arrays {', '.join(PARAM_KEYS)}")
    shapes = {"W": (channels, n_trees), "b": (channels,), "V": (n_out, channels * n_clients), "c": (n_out,)}
    return {k: number_array(op, f"params.{k}", params[k], "f", shape=shapes[k], dtype=np.float64)
            for k in PARAM_KEYS}


def server_train(comm, cfg):
    t0 = time.perf_counter()
    clients = comm.clients
    infos, enc = server_setup(comm, cfg, "xgboost", cfg.task)
    K = len(clients)
    T_req = cfg.xgb_trees // K
    setup = {"op": protocol.SETUP, "encoding": enc.to_dict(), "seed": job_seed(cfg),
             **setup_settings(cfg, K)}
    comm.bcast(setup)
    rows = {r: infos[r]["n_rows"] for r in clients}
    log(cfg, f"fedxgbllr: {K} clients, {sum(rows.values())} rows, {T_req} trees per client, "
              f"{cfg.rounds} rounds")
    rounds0, sent0 = comm.rounds, comm.bytes_sent
    # round 0: every ensemble once, aggregated in client order
    ens = ask(comm, TRAIN_XGB)
    aggregate = in_rank_order({r: ens[r]["model"] for r in clients})
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
        common = {"params": params, "round": t}
        if t == 1:
            common["ensembles"] = aggregate
        replies = ask(comm, FIT, common)
        weights = [replies[r]["n_rows"] for r in clients]
        params = fedavg([replies[r]["params"] for r in clients], weights)
        losses.append(float(np.average([replies[r]["loss"] for r in clients], weights=weights)))
    rounds = comm.rounds - rounds0
    server_bytes = comm.bytes_sent - sent0
    final = ask(comm, protocol.FINAL, {"params": params})
    summary = {"mode": "fedxgbllr", "task": enc.task, "n_clients": K, "rows": rows, "random_state": setup["seed"],
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
            for m, v in client_metrics(per, {r: final[r][f"{key}_rows"] for r in clients}).items():
                summary[f"{key}_{m}"] = v
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


# ---------------------------------------------------------------------------
# Client
# ---------------------------------------------------------------------------
def client_train(comm, cfg):
    rank = comm.rank
    sent, enc, X, y, test = client_setup(comm, cfg, "xgboost", cfg.task)
    K = cfg.n_parties
    setup = same_settings(sent, protocol.SETUP, setup_settings(cfg, K))
    setup["seed"] = job_seed_of(sent, protocol.SETUP, cfg)
    what = f"client {rank}"
    bytes0 = comm.bytes_sent
    kind = kind_of(enc)
    per_round = len(enc.classes) if kind == cnn.MULTICLASS else 1
    state = {"round": 0}

    def n_trees(booster):
        return booster.num_boosted_rounds() * per_round

    def train_xgb(msg):
        if "model" in state:
            raise bad_message(TRAIN_XGB, "op", "the ensemble is trained once")
        model = train_ensemble(X, y, enc, setup["trees_per_client"], setup["max_depth"], setup["eta"],
                               setup["seed"] + rank)
        state["model"], state["n_trees"] = model, n_trees(load_booster(model))
        return {"model": model, "n_trees": state["n_trees"]}

    def params_of(op, msg):
        return check_params(op, field_of(msg, op, "params"), cfg.cnn_channels, state["n_trees"], K,
                            n_outputs(enc))

    def load_ensembles(raw):
        """The aggregate: K ensembles of this client's number of trees, this client's own at its rank."""
        if not isinstance(raw, (list, tuple)) or len(raw) != K:
            raise bad_message(FIT, "ensembles", f"expected one ensemble per client ({K})")
        raw = [number_array(FIT, "ensembles", r, "u", ndim=1, dtype=np.uint8) for r in raw]
        if not np.array_equal(raw[rank - 1], state["model"]):
            raise bad_message(FIT, "ensembles", f"ensemble {rank} is not this client's")
        boosters = []
        for k, r in enumerate(raw, start=1):
            try:
                booster = load_booster(r)
            except xgb.core.XGBoostError:
                raise bad_message(FIT, "ensembles", f"ensemble {k} is not an XGBoost model") from None
            if n_trees(booster) != state["n_trees"] or booster.num_features() != len(enc.columns):
                raise bad_message(FIT, "ensembles", f"ensemble {k} does not have {state['n_trees']} trees "
                                                  f"over {len(enc.columns)} columns")
            boosters.append(booster)
        return boosters

    def outputs(rows):
        try:
            S = tree_outputs(state["boosters"], rows)
        except (xgb.core.XGBoostError, IndexError, KeyError, TypeError, ValueError) as exc:
            raise bad_message(FIT, "ensembles", f"the trees cannot be read ({str(exc)[:200]})") from None
        if S.shape != (rows.shape[0], K * state["n_trees"]):
            raise bad_message(FIT, "ensembles", f"{S.shape[1]} tree outputs, expected {K * state['n_trees']}")
        return S

    def fit(msg):
        if "model" not in state:
            raise bad_message(FIT, "op", f"{FIT!r} before {TRAIN_XGB!r}")
        rnd = whole_number(FIT, "round", field_of(msg, FIT, "round"), 1, cfg.rounds)
        if rnd != state["round"] + 1:
            raise bad_message(FIT, "round", f"expected round {state['round'] + 1}, got {rnd}")
        if (rnd == 1) != ("ensembles" in msg):
            raise bad_message(FIT, "ensembles", "the ensembles come with the first round, and only then")
        params = params_of(FIT, msg)
        if rnd == 1:
            state["boosters"] = load_ensembles(msg["ensembles"])
            state["S"] = outputs(X)
            _check_outputs(state["S"], what)
            if test is not None:
                state["S_test"] = outputs(test[0])
                _check_outputs(state["S_test"], f"{what} test data")
        state["round"] = rnd
        params, loss = cnn.train_local(params, state["S"], y, kind, setup["epochs"], setup["batch_size"],
                                       setup["lr"], seed=setup["seed"] + 7919 * rank + rnd)
        return {"params": params, "n_rows": int(X.shape[0]), "loss": loss}

    def final(msg):
        if state["round"] != cfg.rounds:
            raise bad_message(protocol.FINAL, "op", f"the final message after {state['round']} of "
                                                  f"{cfg.rounds} rounds")
        params = params_of(protocol.FINAL, msg)
        reply = {"train": _metrics(enc, y, cnn.predict(params, state["S"], kind)), "train_rows": int(X.shape[0])}
        if test is not None:
            reply["test"] = _metrics(enc, test[1], cnn.predict(params, state["S_test"], kind))
            reply["test_rows"] = int(test[0].shape[0])
        folder = client_dir(cfg.model_dir, rank)
        save_model(folder, enc, cfg.label_column, raw_ensembles(state["boosters"]), params,
                   {"client": rank, "metrics": reply})
        reply.update(model_dir=folder, bytes_sent=comm.bytes_sent - bytes0)
        return Done(folder, reply)

    return serve(comm, {TRAIN_XGB: train_xgb, FIT: fit, protocol.FINAL: final})


def raw_ensembles(boosters):
    return [np.frombuffer(bytes(b.save_raw("ubj")), dtype=np.uint8) for b in boosters]


# ---------------------------------------------------------------------------
# Model files, prediction, explanation
# ---------------------------------------------------------------------------
def save_model(folder, enc, label_column, ensembles, params, extra):
    """``model.json`` + ``ensemble-<k>.ubj`` (client order) + ``cnn.npz``, written
    beside ``folder`` and swapped in at once; returns the path of model.json."""
    with replaced_folder(folder) as stage:
        for k, raw in enumerate(ensembles, start=1):
            data = np.asarray(raw, dtype=np.uint8).tobytes()
            atomic_write(os.path.join(stage, f"ensemble-{k}.ubj"), lambda fh, d=data: fh.write(d))
        atomic_write(os.path.join(stage, "cnn.npz"), lambda fh: np.savez(fh, **params))
        write_model_doc(stage, dict(extra, mode="fedxgbllr", encoding=enc.to_dict(),
                                    label_column=label_column, n_ensembles=len(ensembles)))
    return os.path.join(os.path.abspath(folder), "model.json")


def load_parts(doc, folder):
    boosters = []
    for k in range(1, doc["n_ensembles"] + 1):
        path = os.path.join(folder, f"ensemble-{k}.ubj")
        if not os.path.isfile(path):
            raise InputError("model_dir", f"{folder!r} lacks {os.path.basename(path)}")
        booster = xgb.Booster()
        booster.load_model(path)
        boosters.append(booster)
    params = read_npz(os.path.join(folder, "cnn.npz"))
    return boosters, params


def _encoding(doc):
    enc = doc["encoding"]
    return enc if isinstance(enc, Encoding) else Encoding.from_dict(enc)


def predict_proba(doc, X):
    """Prediction with a saved model (``doc`` as loaded, with its ``folder``)."""
    enc = _encoding(doc)
    boosters, params = load_parts(doc, doc["folder"])
    S = tree_outputs(boosters, X)
    _check_outputs(S, "data")
    return cnn.predict(params, S, kind_of(enc))


def explain(doc, X=None, raw=None, row=None):
    """The learned per-tree learning rates (conv channels) and per-client head
    weights (the same for every row: ``X``, ``raw`` and ``row`` are not used)."""
    enc = _encoding(doc)
    _, params = load_parts(doc, doc["folder"])
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
