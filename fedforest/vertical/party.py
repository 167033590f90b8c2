"""Vertical Federated Forest, a party's policy (ranks 1..K): training and prediction."""
import os
import time

import numpy as np
import pandas as pd

from ..crypto import paillier
from ..data.alignment import party_align
from ..data.validation import CLASSIFICATION, encode_labels
from ..errors import InputError
from ..tree import builder, kernels, predict
from ..tree.builder import PartySplitter, SplitSettings
from ..tree.labels import PlainLabels
from ..tree.params import resolve_n_jobs, validate
from ..tree.predict import pack_leaf_sets, party_leaf_sets, prepare_X
from ..federation.files import atomic_write
from . import encrypted_labels as encrypted
from . import explain, forest_params, model_files, protocol
from ..transport.base import ProtocolError, expect
from .common import MASTER, PartyTable, peak_rss_mb, check_model_dir, check_world, label_array, load_role_model

def _crash_point(rank):
    """Fault injection for tests: FEDFOREST_FAULT_CRASH=<rank>:<trees> makes that
    party stop checkpointing after that many trees: it reports them at the
    batch's commit and fails at the master's next message."""
    spec = os.environ.get("FEDFOREST_FAULT_CRASH")
    if not spec:
        return None
    r, n = (int(x) for x in spec.split(":"))
    return n if r == rank else None


def party_train(comm, cfg):
    """Party side of training."""
    rank = comm.rank
    cfg.check_train()
    validate(forest_params(cfg), cfg.task)
    check_world(comm, cfg)
    comm.reply_timeout = cfg.reply_timeout
    comm.handshake()
    msg = expect(comm.recv(MASTER), protocol.LOAD)
    if cfg.label_privacy == "paillier" and msg["label_privacy"] != "paillier":
        raise InputError("label_privacy", f"party {rank} requires 'paillier' but the master runs "
                                          f"{msg['label_privacy']!r}")
    table = PartyTable(cfg, rank, cfg.data[rank - 1], label_column=msg["label_column"])
    comm.send(MASTER, {"n_rows": len(table.ids), "n_features": len(table.columns),
                       "has_label": table.has_label, "fingerprint": table.fingerprint()})
    msg = expect(comm.recv(MASTER), protocol.CHECK_DIR)
    if msg["full_model"] and not cfg.master_full_model:
        raise InputError("master_full_model", f"the master asks party {rank} for its split features "
                                              "and thresholds, which this party's configuration "
                                              "does not allow")
    folder = model_files.party_dir(cfg.model_dir, rank)
    n_done = check_model_dir(folder, msg["job_id"], cfg.resume, cfg.overwrite,
                              f"party {rank} model_dir")
    comm.send(MASTER, {"n_trees": n_done})
    positions = party_align(comm, rank, table.ids)
    X = table.X[positions]
    msg = comm.recv(MASTER)
    held = None
    if msg["op"] == protocol.SEND_LABELS:
        comm.send(MASTER, {"y": label_array(table.y[positions], cfg.task,
                                             f"label column {cfg.label_column!r}")})
        msg = comm.recv(MASTER)
    elif msg["op"] == protocol.ENCRYPT_LABELS:
        held = _encrypt_labels(comm, cfg, msg, table.y[positions])
        msg = comm.recv(MASTER)
    setup = expect(msg, protocol.SETUP)
    settings = SplitSettings.from_dict(setup["settings"])
    if "spec" in setup:
        splitter = _paillier_splitter(comm, rank, X, settings, setup, held)
    else:
        labels = PlainLabels(setup["y"], settings.is_classification, setup["n_classes"])
        splitter = PartySplitter(X, settings, labels)
    kernels.set_threads(resolve_n_jobs(cfg.n_jobs))
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
        model_files.clear(folder)
    crash_after = _crash_point(rank)
    t = start
    bytes0 = comm.bytes_sent
    failing = None
    while True:
        msg = comm.recv(MASTER)
        if failing is not None:
            raise RuntimeError(failing)
        op = msg["op"]
        if op == protocol.DONE:
            # the party's peak memory stays in its own manifest (the master learns
            # nothing of a party beyond what the protocol needs)
            model_files.write_manifest(folder, dict(manifest, n_trees=t, peak_rss_mb=peak_rss_mb(),
                                                    complete=t == manifest["n_estimators"]))
            comm.send(MASTER, {"tree_bytes_sent": comm.bytes_sent - bytes0, "model_dir": folder})
            return folder
        if op not in (builder.GROW, builder.COMMIT):
            raise ProtocolError(f"protocol error: unexpected {op!r}")
        reply = splitter.handle_batch(msg)
        if op == builder.COMMIT:
            # the batch's trees are on disk before the master counts them as done
            for index, arrays in zip(splitter.tree_ids, splitter.trees):
                if crash_after is not None and t >= crash_after:
                    break
                model_files.write_tree(folder, index, arrays)
                t = index + 1
            if crash_after is not None and t >= crash_after:
                failing = f"injected failure after {t} trees (FEDFOREST_FAULT_CRASH)"
            splitter.trees.clear()
            splitter.tree_ids.clear()
            model_files.write_manifest(folder, dict(manifest, n_trees=t,
                                                    complete=t == manifest["n_estimators"]))
            reply["n_trees"] = t
        comm.send(MASTER, reply)


def _encrypt_labels(comm, cfg, msg, y):
    """The label holder: encode and encrypt its labels under the master's key."""
    what = f"label column {cfg.label_column!r}"
    codes, classes = encode_labels(label_array(y, cfg.task, what), cfg.task, what=what)
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
    factors = None
    if "randomness" in msg:
        factors = public.factors_from_blocks(msg["randomness"], "randomness from the master")
    cts = encrypted.encrypt_rows(public, spec.row_plaintexts(codes), cfg.encrypt_workers, factors)
    seconds = time.perf_counter() - t0
    comm.send(MASTER, {"classes": classes if is_clf else None, "spec": spec.to_dict(), "seconds": seconds,
                       "blocks": public.serialize(cts), "fingerprint": public.fingerprint})
    return {"codes": codes, "scored": scored, "public": public}


def _paillier_splitter(comm, rank, X, settings, setup, held):
    """The splitter of a party in the encrypted-label mode."""
    spec = encrypted.EncryptionSpec.from_dict(setup["spec"])
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
    expect(comm.recv(MASTER), protocol.BINS)
    comm.send(MASTER, {"n_bins": splitter.n_bins, "skip": splitter.skip})
    return splitter


def party_predict(comm, cfg):
    rank = comm.rank
    check_world(comm, cfg)
    comm.reply_timeout = cfg.reply_timeout
    folder, manifest, trees = load_role_model(cfg, rank)
    comm.handshake()
    expect(comm.recv(MASTER), protocol.LOAD)
    table = PartyTable(cfg, rank, cfg.data[rank - 1], columns=manifest["columns"],
                       categories=manifest["categories"], label_column=manifest.get("label_column"))
    table_ids, table_X = table.ids, table.X
    if cfg.explain_row is not None:
        found = np.flatnonzero(table_ids == cfg.explain_row)
        if not found.size:
            raise InputError("explain_row", f"ID {cfg.explain_row!r} is not in party {rank}'s data")
        table_ids, table_X = table_ids[found[:1]], table_X[found[:1]]
    comm.send(MASTER, {"job_id": manifest["job_id"], "run_id": manifest.get("run_id"),
                       "n_trees": manifest["n_trees"],
                       "n_rows": len(table_ids), "n_unseen": table.n_unseen})
    positions = party_align(comm, rank, table_ids)
    X = table_X[positions]
    ids = table_ids[positions]
    method = manifest["split_method"]
    kernels.set_threads(resolve_n_jobs(cfg.n_jobs))
    predict.warm_up()
    while True:
        msg = comm.recv(MASTER)
        op = msg["op"]
        if op == protocol.READY:
            comm.send(MASTER, {})
        elif op == protocol.LEAF_SETS:
            comm.send(MASTER, pack_leaf_sets(party_leaf_sets(X, trees, method)))
        elif op == protocol.CLASSICAL:
            Xp = prepare_X(X, method)
            while True:
                m = comm.recv(MASTER)
                if m["op"] == protocol.END_CLASSICAL:
                    break
                t = trees[m["tree"]]
                node = m["node"]
                f = int(t["feature"][node])
                rows = m["rows"]
                bits = kernels.goes_left(Xp[:, f], rows.astype(np.int32), 0, rows.size,
                                   float(t["threshold"][node]), int(t["missing_left"][node]))
                comm.send(MASTER, {"bits": np.packbits(bits)})
        elif op == protocol.PATH:
            steps = list(zip(msg["tree"].tolist(), msg["node"].tolist(), msg["child"].tolist()))
            lines = explain.party_path_lines(trees, steps, X[0], manifest["columns"],
                                             manifest.get("categories")) or \
                ["(no split of this party on these paths)"]
            print("\n".join(f"[party {rank}] {line}" for line in
                            [f"conditions of row {cfg.explain_row!r} on this party's columns:"] + lines),
                  flush=True)
            comm.send(MASTER, {"n_lines": len(lines)})
        elif op == protocol.RESULT:
            path = _write_predictions(cfg, ids, msg, manifest)
            comm.send(MASTER, {"path": path})
        elif op == protocol.DONE:
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
    atomic_write(path, lambda fh: fh.write(df.to_csv(index=False).encode()))
    return path
