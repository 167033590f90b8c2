"""Vertical Federated Forest: the master's and the parties' policies.

Rank 0 is the master; ranks 1..K are parties that share rows (matched by ID)
and hold different columns; exactly one party holds the label column.  See
docs/protocol.md for the message sequence and the threat model.
"""
import hashlib
import json
import os
import secrets
import time

import numpy as np
import pandas as pd
from tqdm import tqdm

from . import model_io
from .crypto.channel import SecureChannel
from .crypto.ids import hash_ids
from .crypto import paillier
from .crypto.keys import KeyPair, pair_keys, random_secret
from .data.io import check_ids, encode_features, read_table
from .errors import InputError
from .data.validation import encode_labels
from .params import CLASSIFICATION, resolve_max_samples, validate
from .tree import builder, encrypted, predict
from .tree.builder import PartySplitter, SplitSettings, TreeGrower, tree_seeds
from .tree.labels import PlainLabels, class_weight_vector
from .tree.predict import (leaf_positions, leaves_of, pack_leaf_sets, party_leaf_sets, prepare_X,
                           unpack_leaf_sets)
from .tree import kernels as K

MASTER = 0


def _log(cfg, text):
    if cfg.quiet:
        return
    print(text, flush=True)


def _bar(cfg, **kw):
    return tqdm(disable=not cfg.progress or cfg.quiet, **kw)


def _rounds(n):
    return f"{n} round" + ("" if n == 1 else "s")


def _expect(msg, op):
    if msg.get("op") != op:
        raise RuntimeError(f"protocol error: expected {op!r}, got {msg.get('op')!r}")
    return msg


def _check_world(comm, cfg):
    if comm.size - 1 != cfg.n_parties:
        raise InputError("n_parties", f"the config names {cfg.n_parties} parties but the job has "
                                      f"{comm.size} ranks; start it with mpiexec -n {cfg.n_parties + 1}")


def _party_what(rank):
    return f"party {rank}"


# ---------------------------------------------------------------------------
# Party data
# ---------------------------------------------------------------------------
class PartyTable:
    """One party's rows: IDs, encoded features and (for the label party) labels."""

    def __init__(self, cfg, rank, source, columns=None, categories=None, label_column=None):
        what = _party_what(rank)
        df = source if not isinstance(source, str) else read_table(source, cfg.id_column, what)
        if source is not df:
            df = df.copy()
        df.columns = [str(c) for c in df.columns]
        if cfg.id_column not in df.columns:
            raise InputError(what, f"the data has no ID column {cfg.id_column!r}")
        if df.shape[0] == 0:
            raise InputError(what, "the data has no rows")
        self.ids = check_ids(df[cfg.id_column], what)
        label = label_column if label_column in df.columns else None
        self.has_label = label is not None
        self.y = df[label].to_numpy() if label else None
        present = [c for c in df.columns if c not in (cfg.id_column, label)]
        if columns is None:
            self.columns = [str(c) for c in present]
        else:
            missing = [c for c in columns if c not in df.columns]
            extra = [c for c in present if c not in columns]
            if missing or extra:
                raise InputError(what, f"column set differs from the model's: missing {missing}, "
                                       f"unexpected {extra}")
            self.columns = list(columns)
        if columns is None and not self.columns and not self.has_label:
            raise InputError(what, "holds neither feature columns nor the label: nothing to contribute")
        self.X, self.categories, self.n_unseen = encode_features(df, self.columns, what, categories)

    def fingerprint(self):
        h = hashlib.sha256()
        h.update(json.dumps(self.columns).encode())
        h.update(np.ascontiguousarray(self.X).tobytes())
        h.update("\x00".join(self.ids).encode())
        if self.y is not None:
            h.update(np.asarray(self.y).astype(str).tobytes())
        return h.hexdigest()


def _label_array(y, task, what):
    """Labels as a buffer-friendly array (text labels as unicode)."""
    y = np.asarray(y)
    if y.dtype.kind == "O":
        missing = pd.isna(y)
        if missing.any():
            raise InputError(what, f"{int(missing.sum())} rows have no label")
        if task == CLASSIFICATION:
            return y.astype(str)
        try:
            return y.astype(np.float64)
        except (TypeError, ValueError):
            raise InputError(what, "regression labels must be numeric") from None
    return y


# ---------------------------------------------------------------------------
# ID alignment (shared by training and prediction)
# ---------------------------------------------------------------------------
def _master_align(comm, cfg, n_rows_by_party):
    """Parties agree on a secret the master cannot read, send keyed hashes of
    their IDs; the master intersects and sends each party its aligned order."""
    parties = comm.clients
    pubs = {r: m["public"] for r, m in comm.exchange({r: {"op": "group_public"} for r in parties}).items()}
    first = parties[0]
    others = parties[1:]
    comm.send(first, {"op": "group_lead", "peers": others,
                      **{f"pub{r}": pubs[r] for r in others}})
    sealed = comm.recv(first)
    for r in others:
        comm.send(r, {"op": "group_member", "lead": first, "lead_public": pubs[first],
                      "sealed": sealed[f"sealed{r}"]})
    digests = {r: m["digests"] for r, m in comm.exchange({r: {"op": "hash_ids"} for r in parties}).items()}
    index = {}
    for r in parties:
        keys = [d.tobytes() for d in digests[r]]
        index[r] = dict(zip(keys, range(len(keys))))
    order = [k for k in (d.tobytes() for d in digests[first]) if all(k in index[r] for r in others)]
    if not order:
        raise InputError("ID alignment", "no ID is shared by all parties")
    positions = {r: np.fromiter((index[r][k] for k in order), dtype=np.int64, count=len(order))
                 for r in parties}
    comm.scatter({r: {"op": "align", "positions": positions[r]} for r in parties})
    lost = {r: n_rows_by_party[r] - len(order) for r in parties}
    _log(cfg, f"ID alignment: {len(order)} rows shared by all parties; rows dropped per party: "
         + ", ".join(f"party {r}: {lost[r]}" for r in parties))
    return len(order), lost


def _party_align(comm, rank, ids):
    kp = KeyPair()
    _expect(comm.recv(MASTER), "group_public")
    comm.send(MASTER, {"public": np.frombuffer(kp.public, dtype=np.uint8)})
    msg = comm.recv(MASTER)
    if msg["op"] == "group_lead":
        secret = random_secret()
        out = {}
        for r in msg["peers"]:
            key, _ = pair_keys(kp, msg[f"pub{r}"].tobytes(), rank, r, b"group")
            out[f"sealed{r}"] = np.frombuffer(SecureChannel(rank, r, key, key).seal(secret), dtype=np.uint8)
        comm.send(MASTER, out)
    else:
        _expect(msg, "group_member")
        # the lead sealed with its send key, which is this party's receive key
        lead = msg["lead"]
        _, recv_key = pair_keys(kp, msg["lead_public"].tobytes(), rank, lead, b"group")
        secret = SecureChannel(rank, lead, recv_key, recv_key).open(msg["sealed"].tobytes())
    _expect(comm.recv(MASTER), "hash_ids")
    comm.send(MASTER, {"digests": hash_ids(ids, secret)})
    return _expect(comm.recv(MASTER), "align")["positions"]


# ---------------------------------------------------------------------------
# Remote parties for the tree grower
# ---------------------------------------------------------------------------
class RemoteParties:
    """The parties of an MPI (or in-process) job, as seen by the tree grower."""

    def __init__(self, comm):
        self.comm = comm

    def exchange(self, msgs):
        replies = self.comm.exchange({p + 1: m for p, m in enumerate(msgs) if m is not None})
        return [replies.get(p + 1) for p in range(len(msgs))]

    def broadcast(self, msgs):
        self.comm.scatter({p + 1: m for p, m in enumerate(msgs)})


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------
def _job_id(params, cfg, infos):
    doc = {"params": params.to_dict(), "task": cfg.task, "n_parties": cfg.n_parties,
           "parties": [infos[r]["fingerprint"] for r in sorted(infos)],
           "master_full_model": bool(cfg.master_full_model), "label_privacy": cfg.label_privacy}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _check_model_dir(folder, job_id, resume, overwrite, what):
    """How many finished trees to keep (0 = start fresh); refuses a model of another job."""
    existing = model_io.existing_model(folder)
    if existing is None:
        if resume:
            raise InputError(what, f"--resume given but {folder!r} holds no checkpoint")
        return 0
    if existing.get("job_id") != job_id:
        if overwrite:
            return 0
        raise InputError(what, f"{folder!r} holds a model from another job (job id "
                               f"{existing.get('job_id')}, this job is {job_id}); use another "
                               "model_dir or pass --overwrite")
    if resume:
        return int(existing.get("n_trees", 0))
    if overwrite:
        return 0
    raise InputError(what, f"{folder!r} already holds a model of this job; pass --resume to "
                           "continue it or --overwrite to start again")


def master_train(comm, cfg):
    """Master side of training; returns a summary dict."""
    t_start = time.perf_counter()
    params = validate(cfg.forest_params(), cfg.task)
    cfg.check_job("train")
    _check_world(comm, cfg)
    comm.reply_timeout = cfg.reply_timeout
    if cfg.label_privacy == "paillier":
        _check_paillier(params, cfg)
    comm.handshake()
    infos = comm.exchange({r: {"op": "load", "label_column": cfg.label_column,
                               "label_privacy": cfg.label_privacy} for r in comm.clients})
    holders = [r for r in comm.clients if infos[r]["has_label"]]
    if len(holders) != 1:
        where = "no party" if not holders else "parties " + ", ".join(map(str, holders))
        raise InputError("label_column", f"{cfg.label_column!r} must be held by exactly one party, "
                                         f"found on {where}")
    feature_counts = [infos[r]["n_features"] for r in comm.clients]
    if sum(feature_counts) == 0:
        raise InputError("data", "no party holds any feature column")
    job_id = _job_id(params, cfg, infos)
    my_dir = model_io.party_dir(cfg.model_dir, 0)
    dirs = comm.exchange({r: {"op": "check_dir", "job_id": job_id,
                              "full_model": bool(cfg.master_full_model)} for r in comm.clients})
    done = [_check_model_dir(my_dir, job_id, cfg.resume, cfg.overwrite, "master model_dir")]
    done += [dirs[r]["n_trees"] for r in comm.clients]
    start = min(done)
    # a run id tells models of different runs apart (kept when resuming); without a
    # fixed random_state the seed is drawn once and kept in the checkpoint too
    previous = model_io.read_manifest(my_dir) if start else {}
    run_id = previous.get("run_id") or secrets.token_hex(16)
    random_state = params.random_state
    if random_state is None:
        random_state = previous["random_state_used"] if start else \
            int(np.random.SeedSequence().entropy % (2 ** 63))
    n_rows, lost = _master_align(comm, cfg, {r: infos[r]["n_rows"] for r in comm.clients})
    label_party = holders[0]
    is_clf = cfg.task == CLASSIFICATION
    common = {"op": "setup", "start": start, "job_id": job_id, "run_id": run_id,
              "params": params.to_dict(), "task": cfg.task}
    he = {}
    if cfg.label_privacy == "paillier":
        grower, classes, he = _paillier_setup(comm, cfg, params, n_rows, label_party, feature_counts,
                                              common)
        n_classes = classes.size if is_clf else 1
    else:
        y_raw = comm.exchange({label_party: {"op": "send_labels"}})[label_party]["y"]
        codes, classes = encode_labels(y_raw, cfg.task, what=f"label column {cfg.label_column!r}")
        n_classes = classes.size if is_clf else 1
        settings = SplitSettings(params, n_rows, is_clf, n_classes)
        settings.reveal_splits = bool(cfg.master_full_model)
        labels = PlainLabels(codes, is_clf, n_classes)
        grower = TreeGrower(RemoteParties(comm), labels, params, settings, feature_counts,
                            y_codes=codes if is_clf else None, classes=classes)
        if is_clf:
            class_weight_vector(params.class_weight, codes, np.ones(n_rows), n_classes, classes)
        # validation is complete: from here on work starts and files get written
        comm.bcast(dict(common, y=codes, n_classes=n_classes, settings=settings))
    manifest = {
        "role": "master", "rank": 0, "n_parties": cfg.n_parties, "job_id": job_id, "run_id": run_id,
        "task": cfg.task,
        "params": params.to_dict(), "feature_counts": feature_counts, "label_party": label_party,
        "classes": classes.tolist() if is_clf else None, "n_estimators": params.n_estimators,
        "full_model": bool(cfg.master_full_model), "split_method": params.split_method,
        "random_state_used": random_state, "label_privacy": cfg.label_privacy,
    }
    if start == 0:
        model_io.clear(my_dir)
    builder.warm_up(params.split_method, is_clf)
    seeds = tree_seeds(random_state, params.n_estimators)
    rounds0, bytes0, t_trees = comm.rounds, comm.bytes_sent, time.perf_counter()
    if start:
        _log(cfg, f"resuming from checkpoint: {start} of {params.n_estimators} trees already built")
    bar = _bar(cfg, total=params.n_estimators, initial=start, desc="training trees", unit="tree")
    writer = model_io.CheckpointWriter(my_dir)
    for t in range(start, params.n_estimators):
        tree = grower.grow(seeds[t])
        writer.submit(t, tree, dict(manifest, n_trees=t + 1, complete=t + 1 == params.n_estimators))
        bar.update(1)
    writer.close()
    bar.close()
    train_seconds = time.perf_counter() - t_trees
    tree_bytes = comm.bytes_sent - bytes0
    acks = comm.exchange({r: {"op": "done"} for r in comm.clients})
    n_built = params.n_estimators - start
    party_bytes = sum(a["tree_bytes_sent"] for a in acks.values())
    summary = {
        "n_rows": n_rows, "rows_lost": lost, "n_trees": params.n_estimators, "trees_built": n_built,
        "train_seconds": train_seconds, "total_seconds": time.perf_counter() - t_start,
        "rounds_per_tree": (comm.rounds - rounds0 - 1) / max(n_built, 1),
        "bytes_per_tree": (tree_bytes + party_bytes) / max(n_built, 1), "job_id": job_id,
        "model_dirs": {0: my_dir, **{r: acks[r]["model_dir"] for r in comm.clients}},
        "label_privacy": cfg.label_privacy, **he,
    }
    if he:
        summary["decrypts_per_tree"] = grower.decrypted / max(n_built, 1)
    _log(cfg, f"trained {params.n_estimators} trees on {n_rows} rows in {train_seconds:.2f}s "
              f"({summary['rounds_per_tree']:.1f} rounds per tree)")
    _log(cfg, "model files: " + "; ".join(f"{'master' if r == 0 else f'party {r}'}: {d}"
                                            for r, d in summary["model_dirs"].items()))
    model_io.write_summary(cfg.summary_json, summary)
    return summary


def _check_paillier(params, cfg):
    """Settings the encrypted-label mode cannot honour, refused before any work."""
    paillier.check_key_length(cfg.key_length, cfg.insecure_key)
    if params.split_method != "hist":
        raise InputError("split_method", "label_privacy = 'paillier' needs split_method = 'hist' "
                                         "(encrypted statistics are summed per histogram bin)")
    if params.class_weight is not None:
        raise InputError("class_weight", "is not available with label_privacy = 'paillier' "
                                         "(encrypted statistics are integer counts)")


def _paillier_setup(comm, cfg, params, n_rows, label_party, feature_counts, common):
    """Key generation, label encryption by the label holder, relay of the
    ciphertexts to the other parties; returns the grower, the classes and
    figures for the summary."""
    is_clf = cfg.task == CLASSIFICATION
    n_total = resolve_max_samples(params.max_samples, n_rows) if params.bootstrap else n_rows
    public, private = paillier.generate_keypair(cfg.key_length, cfg.insecure_key)
    _log(cfg, f"Paillier key: {public.key_length} bits; party {label_party} encrypts the labels")
    rep = comm.exchange({label_party: {"op": "encrypt_labels", "public_key": public.to_bytes(),
                                       "n_total": n_total, "slot_bits": cfg.slot_bits}})[label_party]
    if rep["fingerprint"] != public.fingerprint:
        raise encrypted.ProtocolIntegrityError(
            f"party {label_party} encrypted the labels under another public key (fingerprint "
            f"{rep['fingerprint']}, the master's key is {public.fingerprint})")
    spec = rep["spec"]
    if spec.key_length != public.key_length or spec.n_total != n_total:
        raise encrypted.ProtocolIntegrityError(f"party {label_party} sent a slot layout for another job")
    classes = np.asarray(rep["classes"]) if is_clf else np.empty(0)
    n_classes = classes.size if is_clf else 1
    settings = SplitSettings(params, n_rows, is_clf, n_classes)
    settings.reveal_splits = bool(cfg.master_full_model)
    # validation is complete: from here on work starts and files get written
    comm.scatter({r: dict(common, settings=settings, n_classes=n_classes, spec=spec,
                          public_key=public.to_bytes(),
                          **({} if r == label_party else {"labels": rep["blocks"],
                                                          "fingerprint": rep["fingerprint"]}))
                  for r in comm.clients})
    others = [r for r in comm.clients if r != label_party]
    bins = comm.exchange({r: {"op": "bins"} for r in others}) if others else {}
    party_bins = [None if r == label_party else (bins[r]["n_bins"], bins[r]["skip"])
                  for r in comm.clients]
    info = encrypted.LabelInfo(is_clf, n_classes, n_rows)
    grower = encrypted.PaillierGrower(RemoteParties(comm), info, params, settings, feature_counts,
                                      private, spec, label_party - 1, party_bins)
    he = {"key_length": public.key_length, "label_encrypt_seconds": rep["seconds"],
          "slot_bits": spec.width, "values_per_ciphertext": spec.per_ciphertext}
    _log(cfg, f"labels encrypted in {rep['seconds']:.1f}s ({n_rows} rows, {spec.width}-bit slots, "
              f"{spec.per_ciphertext} statistics vectors per ciphertext)")
    return grower, classes, he


def _crash_point(rank):
    """Fault injection for tests: FEDFOREST_FAULT_CRASH=<rank>:<trees> makes that
    party fail right after checkpointing that many trees."""
    spec = os.environ.get("FEDFOREST_FAULT_CRASH")
    if not spec:
        return None
    r, n = (int(x) for x in spec.split(":"))
    return n if r == rank else None


def party_train(comm, cfg):
    """Party side of training."""
    rank = comm.rank
    validate(cfg.forest_params(), cfg.task)
    cfg.check_job("train")
    _check_world(comm, cfg)
    comm.reply_timeout = cfg.reply_timeout
    comm.handshake()
    msg = _expect(comm.recv(MASTER), "load")
    if cfg.label_privacy == "paillier" and msg["label_privacy"] != "paillier":
        raise InputError("label_privacy", f"party {rank} requires 'paillier' but the master runs "
                                          f"{msg['label_privacy']!r}")
    table = PartyTable(cfg, rank, cfg.data[rank - 1], label_column=msg["label_column"])
    comm.send(MASTER, {"n_rows": len(table.ids), "n_features": len(table.columns),
                       "has_label": table.has_label, "fingerprint": table.fingerprint()})
    msg = _expect(comm.recv(MASTER), "check_dir")
    if msg["full_model"] and not cfg.master_full_model:
        raise InputError("master_full_model", f"the master asks party {rank} for its split features "
                                              "and thresholds, which this party's configuration "
                                              "does not allow")
    folder = model_io.party_dir(cfg.model_dir, rank)
    n_done = _check_model_dir(folder, msg["job_id"], cfg.resume, cfg.overwrite,
                              f"party {rank} model_dir")
    comm.send(MASTER, {"n_trees": n_done})
    positions = _party_align(comm, rank, table.ids)
    X = table.X[positions]
    msg = comm.recv(MASTER)
    held = None
    if msg["op"] == "send_labels":
        comm.send(MASTER, {"y": _label_array(table.y[positions], cfg.task,
                                             f"label column {cfg.label_column!r}")})
        msg = comm.recv(MASTER)
    elif msg["op"] == "encrypt_labels":
        held = _encrypt_labels(comm, cfg, msg, table.y[positions])
        msg = comm.recv(MASTER)
    setup = _expect(msg, "setup")
    settings = setup["settings"]
    if "spec" in setup:
        splitter = _paillier_splitter(comm, rank, X, settings, setup, held)
    else:
        labels = PlainLabels(setup["y"], settings.is_classification, setup["n_classes"])
        splitter = PartySplitter(X, settings, labels)
    builder.warm_up(settings.split_method, settings.is_classification)
    manifest = {
        "role": "party", "rank": rank, "n_parties": cfg.n_parties, "job_id": setup["job_id"],
        "run_id": setup["run_id"],
        "task": setup["task"], "params": setup["params"], "columns": table.columns,
        "categories": table.categories, "has_label": table.has_label,
        "label_column": cfg.label_column if table.has_label else None,
        "id_column": cfg.id_column, "split_method": settings.split_method,
        "n_estimators": setup["params"]["n_estimators"],
        "label_privacy": "paillier" if "spec" in setup else "plain",
    }
    start = setup["start"]
    if start == 0:
        model_io.clear(folder)
    crash_after = _crash_point(rank)
    t = start
    bytes0 = comm.bytes_sent
    writer = model_io.CheckpointWriter(folder)
    while True:
        msg = comm.recv(MASTER)
        op = msg["op"]
        if op == "done":
            writer.close()
            comm.send(MASTER, {"tree_bytes_sent": comm.bytes_sent - bytes0, "model_dir": folder})
            return folder
        reply = splitter.handle(msg)
        if reply is not None:
            comm.send(MASTER, reply)
        if op == "finish":
            t += 1
            writer.submit(t - 1, splitter.trees.pop(),
                          dict(manifest, n_trees=t, complete=t == manifest["n_estimators"]))
            if crash_after is not None and t == crash_after:
                writer.close()
                raise RuntimeError(f"injected failure after {t} trees (FEDFOREST_FAULT_CRASH)")


def _encrypt_labels(comm, cfg, msg, y):
    """The label holder: encode and encrypt its labels under the master's key."""
    what = f"label column {cfg.label_column!r}"
    codes, classes = encode_labels(_label_array(y, cfg.task, what), cfg.task, what=what)
    public = paillier.PublicKey.from_bytes(msg["public_key"])
    paillier.check_key_length(public.key_length, cfg.insecure_key)
    is_clf = cfg.task == CLASSIFICATION
    if is_clf:
        spec = encrypted.EncryptionSpec(True, classes.size, msg["n_total"], public.key_length,
                                        msg["slot_bits"])
        scored = codes
    else:
        codes, step, bias = encrypted.regression_grid(codes, msg["n_total"])
        spec = encrypted.EncryptionSpec(False, 1, msg["n_total"], public.key_length,
                                        msg["slot_bits"], step=step, bias=bias)
        scored = codes * step
    t0 = time.perf_counter()
    cts = encrypted.encrypt_rows(public, spec.row_plaintexts(codes), cfg.encrypt_workers)
    seconds = time.perf_counter() - t0
    comm.send(MASTER, {"classes": classes if is_clf else None, "spec": spec, "seconds": seconds,
                       "blocks": public.serialize(cts), "fingerprint": public.fingerprint})
    return {"codes": codes, "scored": scored, "public": public}


def _paillier_splitter(comm, rank, X, settings, setup, held):
    """The splitter of a party in the encrypted-label mode."""
    spec = setup["spec"]
    public = paillier.PublicKey.from_bytes(setup["public_key"])
    if held is not None:
        if public.fingerprint != held["public"].fingerprint:
            raise InputError(f"party {rank}", "the master's public key changed during setup")
        labels = PlainLabels(held["scored"], settings.is_classification, setup["n_classes"])
        return encrypted.LabelHolderSplitter(X, settings, labels, held["codes"], spec, public)
    if setup["fingerprint"] != public.fingerprint:
        raise InputError(f"party {rank}", f"the labels were encrypted under another public key "
                                          f"(fingerprint {setup['fingerprint']}, the master's key is "
                                          f"{public.fingerprint})")
    labels_ct = public.deserialize(setup["labels"], "encrypted labels")
    if len(labels_ct) != X.shape[0]:
        raise InputError(f"party {rank}", f"received {len(labels_ct)} encrypted labels for "
                                          f"{X.shape[0]} aligned rows")
    splitter = encrypted.EncryptedHistSplitter(X, settings, labels_ct, spec, public)
    _expect(comm.recv(MASTER), "bins")
    comm.send(MASTER, {"n_bins": splitter.n_bins, "skip": splitter.skip})
    return splitter


# ---------------------------------------------------------------------------
# Prediction
# ---------------------------------------------------------------------------
def _load_party_model(cfg, rank):
    folder = model_io.party_dir(cfg.model_dir, rank)
    what = f"party {rank} model" if rank else "master model"
    m = model_io.read_manifest(folder, what)
    role = "master" if rank == 0 else "party"
    if m.get("role") != role or m.get("rank") != rank:
        raise InputError(what, f"{folder!r} holds the model of {m.get('role')} rank {m.get('rank')}, "
                               f"not of {role} rank {rank}")
    if not m.get("complete"):
        raise InputError(what, f"{folder!r} holds an unfinished training checkpoint "
                               f"({m.get('n_trees')} of {m.get('n_estimators')} trees); resume training first")
    return folder, m, model_io.read_trees(folder, m["n_trees"], what)


def master_predict(comm, cfg):
    """Master side of prediction; returns a summary with the predictions."""
    cfg.check_job("predict")
    _check_world(comm, cfg)
    comm.reply_timeout = cfg.reply_timeout
    folder, manifest, trees = _load_party_model(cfg, 0)
    if manifest["n_parties"] != cfg.n_parties:
        raise InputError("master model", f"was trained with {manifest['n_parties']} parties, "
                                          f"this job has {cfg.n_parties}")
    comm.handshake()
    infos = comm.exchange({r: {"op": "load"} for r in comm.clients})
    for r in comm.clients:
        if infos[r]["job_id"] != manifest["job_id"]:
            raise InputError(f"party {r} model", f"belongs to job {infos[r]['job_id']}, the master's "
                                                 f"model to job {manifest['job_id']}")
        if infos[r]["run_id"] != manifest.get("run_id"):
            raise InputError(f"party {r} model", f"comes from another training run (run id "
                                                 f"{infos[r]['run_id']}, the master's {manifest.get('run_id')})")
        if infos[r]["n_trees"] != manifest["n_trees"]:
            raise InputError(f"party {r} model", f"has {infos[r]['n_trees']} trees, the master's "
                                                 f"{manifest['n_trees']}")
        if infos[r]["n_unseen"]:
            _log(cfg, f"party {r}: {infos[r]['n_unseen']} values of text columns were not seen in "
                      "training and are treated as missing")
    n_rows, lost = _master_align(comm, cfg, {r: infos[r]["n_rows"] for r in comm.clients})
    predict.warm_up()
    comm.exchange({r: {"op": "ready"} for r in comm.clients})  # every rank has its kernels loaded
    rounds0 = comm.rounds
    t0 = time.perf_counter()
    if cfg.predict_method == "oneshot":
        values = _predict_oneshot(comm, cfg, trees, n_rows)
    else:
        values = _predict_classical(comm, cfg, trees, n_rows)
    seconds = time.perf_counter() - t0
    predict_rounds = comm.rounds - rounds0
    values /= len(trees)
    is_clf = manifest["task"] == CLASSIFICATION
    msg = {"op": "result"}
    if is_clf:
        classes = np.array(manifest["classes"])
        msg.update(prediction=classes[np.argmax(values, axis=1)], proba=values,
                   classes=[str(c) for c in classes])
    else:
        msg.update(prediction=values[:, 0])
    out = comm.exchange({cfg.result_party: msg})[cfg.result_party]
    comm.exchange({r: {"op": "done"} for r in comm.clients})
    _log(cfg, f"predicted {n_rows} rows with {len(trees)} trees in {seconds:.3f}s "
              f"({cfg.predict_method}, {_rounds(predict_rounds)}); predictions written by party "
              f"{cfg.result_party} to {out['path']}")
    summary = {"n_rows": n_rows, "rows_lost": lost, "seconds": seconds, "rounds": predict_rounds,
               "method": cfg.predict_method, "values": values, "prediction": msg["prediction"],
               "output": out["path"]}
    model_io.write_summary(cfg.summary_json, summary)
    return summary


def _predict_oneshot(comm, cfg, trees, n_rows):
    """Algorithm 4: one collective round for the whole forest."""
    comm.scatter({r: {"op": "leaf_sets"} for r in comm.clients})
    leaf_lists = [leaves_of(t) for t in trees]
    per_party = [unpack_leaf_sets(rep, trees, n_rows) for _, rep in comm.gather_each()]
    width = trees[0]["value"].shape[1]
    values = np.zeros((n_rows, width))
    for i in _bar(cfg, iterable=range(len(trees)), desc="combining leaf sets", unit="tree"):
        pos = leaf_positions(n_rows, per_party, i, leaf_lists[i].size)
        values += trees[i]["value"][leaf_lists[i][pos]]
    return values


def _predict_classical(comm, cfg, trees, n_rows):
    """Node-by-node prediction: one round trip to the owning party per split node."""
    comm.bcast({"op": "classical"})
    width = trees[0]["value"].shape[1]
    values = np.zeros((n_rows, width))
    for i, t in enumerate(_bar(cfg, iterable=trees, desc="classical prediction", unit="tree")):
        stack = [(0, np.arange(n_rows, dtype=np.int64))]
        while stack:
            node, rows = stack.pop()
            if t["children_left"][node] < 0:
                values[rows] += t["value"][node]
                continue
            if rows.size == 0:
                continue
            owner = int(t["owner"][node]) + 1
            rep = comm.exchange({owner: {"op": "route", "tree": i, "node": node, "rows": rows}})[owner]
            left = np.unpackbits(rep["bits"], count=rows.size).astype(bool)
            stack.append((int(t["children_right"][node]), rows[~left]))
            stack.append((int(t["children_left"][node]), rows[left]))
    comm.bcast({"op": "end_classical"})
    return values


def party_predict(comm, cfg):
    rank = comm.rank
    cfg.check_job("predict")
    _check_world(comm, cfg)
    comm.reply_timeout = cfg.reply_timeout
    folder, manifest, trees = _load_party_model(cfg, rank)
    comm.handshake()
    _expect(comm.recv(MASTER), "load")
    table = PartyTable(cfg, rank, cfg.data[rank - 1], columns=manifest["columns"],
                       categories=manifest["categories"], label_column=manifest.get("label_column"))
    comm.send(MASTER, {"job_id": manifest["job_id"], "run_id": manifest.get("run_id"),
                       "n_trees": manifest["n_trees"],
                       "n_rows": len(table.ids), "n_unseen": table.n_unseen})
    positions = _party_align(comm, rank, table.ids)
    X = table.X[positions]
    ids = table.ids[positions]
    method = manifest["split_method"]
    predict.warm_up()
    while True:
        msg = comm.recv(MASTER)
        op = msg["op"]
        if op == "ready":
            comm.send(MASTER, {})
        elif op == "leaf_sets":
            comm.send(MASTER, pack_leaf_sets(party_leaf_sets(X, trees, method)))
        elif op == "classical":
            Xp = prepare_X(X, method)
            while True:
                m = comm.recv(MASTER)
                if m["op"] == "end_classical":
                    break
                t = trees[m["tree"]]
                node = m["node"]
                f = int(t["feature"][node])
                rows = m["rows"]
                bits = K.goes_left(Xp[:, f], rows.astype(np.int32), 0, rows.size,
                                   float(t["threshold"][node]), int(t["missing_left"][node]))
                comm.send(MASTER, {"bits": np.packbits(bits)})
        elif op == "result":
            path = _write_predictions(cfg, ids, msg, manifest)
            comm.send(MASTER, {"path": path})
        elif op == "done":
            comm.send(MASTER, {})
            return None
        else:
            raise RuntimeError(f"protocol error: unexpected {op!r}")


def _write_predictions(cfg, ids, msg, manifest):
    df = pd.DataFrame({cfg.id_column: ids, "prediction": msg["prediction"]})
    if "proba" in msg:
        for k, c in enumerate(msg["classes"]):
            df[f"proba_{c}"] = msg["proba"][:, k]
    path = os.path.abspath(cfg.output)
    model_io._atomic_write(path, lambda fh: fh.write(df.to_csv(index=False).encode()))
    return path
