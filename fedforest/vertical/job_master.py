"""The master's side of every vertical job (rank 0), the forest's and boosting's
alike: the opening steps of training (the parties describe their tables and
check their model folders, ID alignment), the batch bounds, the label
holder's public key and bins in the encrypted modes, and prediction (one
round, or node by node, with the algorithm's model output).  See
docs/protocol.md.
"""
import secrets
import time

import numpy as np

from ..crypto import paillier
from ..data.alignment import master_align
from ..data.validation import CLASSIFICATION
from ..errors import InputError
from ..federation.privacy import of_manifest
from ..tree import predict
from ..tree import growth
from . import messages
from ..tree import threads as numba_threads
from ..tree.params import resolve_n_jobs
from ..tree.predict import leaf_positions, leaves_of, unpack_leaf_sets
from . import encrypted_labels as encrypted
from .paillier import sealed
from ..federation.files import write_summary
from . import explain, model_files, protocol
from ..data.columns import FIXED_BYTES, check_memory, return_large_frees
from .common import (check_model_dir, check_world, job_id_of, load_role_model, log, restart_note, plural_rounds, progress_bar)


MASTER_ALIGN_BYTES = 48      # a received digest (32 bytes) and its share of the matching



MASTER_POSITION_BYTES = 4    # a matched row number, kept for every party until sent



MASTER_ROW_BYTES = 64        # labels, their codes and one tree's row state



class Opening:
    """What the opening steps of a vertical training job established."""

    def __init__(self, **values):
        self.__dict__.update(values)



def open_training(comm, cfg, params):
    """The steps every vertical training job starts with, the forest's and
    boosting's alike: the parties read their tables and describe them (one of
    them must hold the label), check their model folders for this job (the
    first tree to grow: 0, or where a checkpoint ends), and align their rows
    by ID.  Returns an :class:`Opening`; nothing is written yet."""
    check_world(comm, cfg)
    comm.reply_timeout = cfg.reply_timeout
    comm.handshake()
    infos = comm.exchange({r: {"op": protocol.LOAD, "mode": cfg.spec.name, "label_column": cfg.label_column,
                               "label_privacy": cfg.label_privacy} for r in comm.clients})
    for r in comm.clients:
        check_load_reply(infos[r], r)
    holders = [r for r in comm.clients if infos[r]["has_label"]]
    if len(holders) != 1:
        where = "no party" if not holders else "parties " + ", ".join(map(str, holders))
        raise InputError("label_column", f"{cfg.label_column!r} must be held by exactly one party, "
                                         f"found on {where}")
    # the master's memory: two parties' ID digests at a time while aligning (the first
    # party's and one other's) and every party's matched row numbers, then the labels
    # and a tree's rows
    rows = [infos[r]["n_rows"] for r in comm.clients]
    held = rows[0] + max(rows[1:], default=0)
    check_memory("master", held * MASTER_ALIGN_BYTES + sum(rows) * MASTER_POSITION_BYTES
                 + max(rows) * MASTER_ROW_BYTES + FIXED_BYTES,
                 cfg.values.get("memory_mb"),
                 f"{held:,} ID digests of {MASTER_ALIGN_BYTES} bytes and {sum(rows):,} row numbers of "
                 f"{MASTER_POSITION_BYTES} while aligning + {max(rows):,} rows x {MASTER_ROW_BYTES} bytes + "
                 f"{FIXED_BYTES >> 20} MiB")
    feature_counts = [infos[r]["n_features"] for r in comm.clients]
    if sum(feature_counts) == 0:
        raise InputError("data", "no party holds any feature column")
    job_id = job_id_of(params, cfg, infos)
    my_dir = model_files.party_dir(cfg.model_dir, 0)
    dirs = comm.exchange({r: {"op": protocol.CHECK_DIR, "job_id": job_id,
                              "full_model": bool(cfg.master_full_model)} for r in comm.clients})
    done = [check_model_dir(my_dir, job_id, cfg.resume, cfg.overwrite, "master model_dir")]
    done += [dirs[r]["n_trees"] for r in comm.clients]
    start = min(done)
    stored = model_files.existing_model(my_dir) if cfg.resume and start == 0 else None
    if stored is not None and (stored.get("job_id") != job_id or max(done) > 0):
        # overwrite = true let a checkpoint of other settings (or a rank's missing one) through
        log(cfg, restart_note(my_dir, stored, job_id, params, cfg,
                              [r for r in comm.clients if not dirs[r]["n_trees"]]))
    # a run id tells models of different runs apart (kept when resuming); without a
    # fixed random_state the seed is drawn once and kept in the checkpoint too
    previous = model_files.read_manifest(my_dir) if start else {}
    run_id = previous.get("run_id") or secrets.token_hex(16)
    random_state = params.random_state
    if random_state is None:
        random_state = previous["random_state_used"] if start else \
            int(np.random.SeedSequence().entropy % (2 ** 63))
    n_rows, lost = master_align(comm, cfg, {r: infos[r]["n_rows"] for r in comm.clients})
    return Opening(infos=infos, label_party=holders[0], feature_counts=feature_counts, job_id=job_id,
                   my_dir=my_dir, start=start, previous=previous, run_id=run_id,
                   random_state=random_state, n_rows=n_rows, lost=lost)



def batch_limits(cfg, infos, n_estimators, bytes_per_tree):
    """The fixed batch size (None: sized by memory and time) and the largest
    batch: the smallest any rank allows, each by its own ``tree_batch`` and
    ``batch_memory_mb`` (a party's memory is its own to bound)."""
    own = [(cfg.tree_batch, cfg.batch_memory_mb)] + [(i["tree_batch"], i["batch_memory_mb"]) for i in infos.values()]
    limit = min(growth.resolve_tree_batch(tb, n_estimators, mb, bytes_per_tree) for tb, mb in own)
    fixed = [tb for tb, _ in own if tb is not None]
    return (min(min(fixed), limit) if fixed else None), limit



def check_load_reply(info, r):
    """A party's description of its table and its own batch bounds."""
    tb, mb = info.get("tree_batch"), info.get("batch_memory_mb")
    ok = isinstance(info.get("has_label"), bool) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (info.get("n_rows"), info.get("n_features")))
    ok = ok and (tb is None or (isinstance(tb, int) and not isinstance(tb, bool) and tb >= 1))
    ok = ok and isinstance(mb, int) and not isinstance(mb, bool) and mb >= 1
    if not ok:
        raise messages.bad_message(f"party {r} described its table as {str(info)[:200]}")



def received_key(rep, cfg, label_party):
    """The label holder's public key from its reply, of the configured length."""
    data = rep.get("public_key")
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 1
            and 0 < data.size <= 16_384 // 8):
        raise encrypted.ProtocolIntegrityError(f"party {label_party} sent {messages.shown(data)} as its public key")
    public = paillier.PublicKey.from_bytes(data)
    if public.key_length != cfg.key_length:
        raise encrypted.ProtocolIntegrityError(f"party {label_party} made a {public.key_length}-bit key; the "
                                               f"job's key_length is {cfg.key_length}")
    paillier.check_key_length(public.key_length, cfg.insecure_key)
    return public



def relay_bins(comm, label_party):
    """The other parties' bin counts and most frequent bins, sealed for the
    label holder (it reads their sums), passed on to it."""
    others = [r for r in comm.clients if r != label_party]
    bins = comm.exchange({r: {"op": protocol.BINS} for r in others}) if others else {}
    items = []
    for r in others:
        blob = bins[r].get("sealed")
        if not (isinstance(blob, np.ndarray) and blob.dtype == np.uint8 and blob.ndim == 1) or len(bins[r]) != 1:
            raise messages.bad_message(f"party {r} answered 'bins' with {sorted(map(str, bins[r]))[:4]}, not "
                                       "its sealed bins")
        items.append((r - 1, blob))
    comm.exchange({label_party: dict(sealed.incoming(items), op=protocol.BINS)})



# ---------------------------------------------------------------------------
# Prediction
# ---------------------------------------------------------------------------
def master_predict(comm, cfg, output):
    """Master side of prediction; returns a summary with the predictions
    (``output``: the algorithm's :class:`~.model_output.ModelOutput`)."""
    return_large_frees()
    check_world(comm, cfg)
    comm.reply_timeout = cfg.reply_timeout
    folder, manifest, trees = load_role_model(cfg, 0)
    if manifest["n_parties"] != cfg.n_parties:
        raise InputError("master model", f"was trained with {manifest['n_parties']} parties, "
                                          f"this job has {cfg.n_parties}")
    # with encrypted labels the leaf values live at the label holder: it writes the predictions
    at_holder = of_manifest(manifest).encrypted
    if at_holder and cfg.result_party != manifest["label_party"]:
        raise InputError("result_party", f"the model's leaf values are held by the label holder (party "
                                         f"{manifest['label_party']}), which writes the predictions; set "
                                         f"result_party = {manifest['label_party']}")
    if at_holder and cfg.predict_method != "oneshot":
        raise InputError("predict_method", f"{cfg.predict_method!r} routes every row through the master, "
                                           "but this model's leaf values are the label holder's "
                                           "(label_privacy = 'paillier'): predict with 'oneshot', where the "
                                           "parties' leaf sets go sealed to the label holder")
    comm.handshake()
    infos = comm.exchange({r: {"op": protocol.LOAD} for r in comm.clients})
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
            log(cfg, f"party {r}: {infos[r]['n_unseen']} values of text columns were not seen in "
                      "training and are treated as missing")
    n_rows, lost = master_align(comm, cfg, {r: infos[r]["n_rows"] for r in comm.clients})
    numba_threads.set_threads(resolve_n_jobs(cfg.n_jobs))
    predict.warm_up()
    comm.exchange({r: {"op": protocol.READY} for r in comm.clients})  # every rank has its kernels loaded
    rounds0 = comm.rounds
    t0 = time.perf_counter()
    boost = manifest.get("boost")
    values = leaves = None
    if at_holder:
        # the parties' leaf sets go sealed to the label holder, which intersects them and
        # writes the predictions: the master learns no row's leaf
        envelope = _sealed_leaf_sets(comm, manifest["label_party"])
        predict_rounds = comm.rounds - rounds0    # the result message delivers, as in the plain mode
        out = comm.exchange({cfg.result_party: {"op": protocol.RESULT, **envelope}})[cfg.result_party]
        if cfg.explain_row is not None:
            leaves = [int(v) for v in _explained_leaves(out.get("leaves"), trees)]
    else:
        if cfg.predict_method == "oneshot":
            row_leaves = _leaves_oneshot(comm, cfg, trees, n_rows)
        else:
            row_leaves = _leaves_classical(comm, cfg, trees, n_rows)
        if cfg.explain_row is not None:
            leaves = [int(r[0]) for r in row_leaves]
        values = output.values(trees, row_leaves, n_rows, manifest)
        msg = _result_message(values, manifest)
        predict_rounds = comm.rounds - rounds0
    seconds = time.perf_counter() - t0
    path = None
    if leaves is not None:
        path = _explain_path(comm, cfg, manifest, trees, leaves)
    if not at_holder:
        out = comm.exchange({cfg.result_party: msg})[cfg.result_party]
    comm.exchange({r: {"op": protocol.DONE} for r in comm.clients})
    log(cfg, f"predicted {n_rows} rows with {len(trees)} trees in {seconds:.3f}s "
              f"({cfg.predict_method}, {plural_rounds(predict_rounds)}); predictions written by party "
              f"{cfg.result_party} to {out['path']}")
    summary = {"n_rows": n_rows, "rows_lost": lost, "seconds": seconds, "rounds": predict_rounds,
               "method": cfg.predict_method, "output": out["path"]}
    if values is not None:
        summary.update(values=values, prediction=msg["prediction"])
    if path is not None:
        summary["path"] = path
    write_summary(cfg.summary_json, summary)
    return summary



def _sealed_leaf_sets(comm, label_party):
    """One round: every party's leaf sets, sealed for the label holder (which
    keeps its own), as the envelope of its result message."""
    replies = comm.exchange({r: {"op": protocol.LEAF_SETS, "label_party": label_party} for r in comm.clients})
    items = []
    for r in comm.clients:
        rep = replies[r]
        if r == label_party:
            if rep:
                raise messages.bad_message(f"party {r} (the label holder) sent its leaf sets to the master")
            continue
        parts = sealed.from_reply(messages.TreeReply(rep, r - 1), r - 1, comm.size - 1)
        if set(parts) != {(label_party - 1, sealed.LEAF_SETS)}:
            raise messages.bad_message(f"party {r} sent {sorted(parts)} as its leaf sets")
        items.append((r - 1, parts[(label_party - 1, sealed.LEAF_SETS)]))
    return sealed.incoming(items)



def _explained_leaves(leaves, trees):
    """The explained row's leaf in each tree, from the label holder."""
    if not (isinstance(leaves, np.ndarray) and leaves.dtype.kind in "iu" and leaves.shape == (len(trees),)):
        raise messages.bad_message(f"the label holder sent {messages.shown(leaves)} as the explained row's leaves")
    for tree, leaf in zip(trees, leaves.tolist()):
        left = tree["children_left"]
        if not (0 <= leaf < left.shape[0] and left[leaf] < 0):
            raise messages.bad_message("the label holder named a node that is not a leaf for the explained row")
    return leaves



def _result_message(values, manifest):
    """The predictions for the result party: classes and probabilities, or values."""
    msg = {"op": protocol.RESULT}
    if manifest["task"] == CLASSIFICATION:
        classes = np.array(manifest["classes"])
        msg.update(prediction=classes[np.argmax(values, axis=1)], proba=values,
                   classes=[str(c) for c in classes])
    else:
        msg.update(prediction=values[:, 0])
    return msg



def _explain_path(comm, cfg, manifest, trees, leaves):
    """The decision paths of the one row of an ``explain_row`` job: each party
    in turn gets the splits it owns on the paths of the first trees (node and
    the child the row went to) and prints its conditions; the master prints
    the owners along each path and the leaves.  Returns the master's lines."""
    n_show = min(cfg.explain_trees, len(trees))
    classes = manifest["classes"] if manifest["task"] == CLASSIFICATION else None
    paths = [explain.tree_path(t, leaf) for t, leaf in zip(trees[:n_show], leaves[:n_show])]
    for r in comm.clients:
        steps = [(t, a, b) for t, p in enumerate(paths) for a, b in zip(p[:-1], p[1:])
                 if int(trees[t]["owner"][a]) + 1 == r]
        arr = np.array(steps, dtype=np.int64).reshape(-1, 3)
        comm.exchange({r: {"op": protocol.PATH, "tree": arr[:, 0], "node": arr[:, 1],
                           "child": arr[:, 2]}})
    lines = [f"decision path of row {cfg.explain_row!r} (master's view; each party prints its own "
             "conditions):"] + explain.path_lines(trees, leaves, classes, n_show, manifest.get("boost"))
    print("\n".join(lines), flush=True)
    return lines



def _leaves_oneshot(comm, cfg, trees, n_rows):
    """Algorithm 4: one collective round for the whole forest; every row's
    leaf (node id) in each tree."""
    comm.scatter({r: {"op": protocol.LEAF_SETS} for r in comm.clients})
    leaf_lists = [leaves_of(t) for t in trees]
    per_party = [unpack_leaf_sets(rep, trees, n_rows) for _, rep in comm.gather_each()]
    out = []
    bar = progress_bar(cfg, total=len(trees), desc="combining leaf sets", unit="tree")
    # intersections in parallel blocks of trees
    block = 4 * max(1, numba_threads.threads())
    for b0 in range(0, len(trees), block):
        ids = range(b0, min(b0 + block, len(trees)))
        found = predict.in_threads(lambda i: leaf_positions(n_rows, per_party, i, leaf_lists[i].size), ids)
        out += [leaf_lists[i][pos] for i, pos in zip(ids, found)]
        bar.update(len(ids))
    bar.close()
    return out



#: row indices one node-by-node routing exchange carries at most (in trees' blocks)
ROUTE_ROWS = 1 << 22



def _leaves_classical(comm, cfg, trees, n_rows):
    """Node-by-node prediction: each row follows each tree from the root, and
    at every split the party that owns it says which rows go left.  The
    routes of a level travel together, for a block of trees at a time: one
    exchange per level with the parties owning that level's splits (each
    learns, as node by node, only which rows reach its own splits).  Every
    row's leaf (node id) in each tree."""
    comm.bcast({"op": protocol.CLASSICAL})
    out = []
    bar = progress_bar(cfg, total=len(trees), desc="classical prediction", unit="tree")
    block = max(1, ROUTE_ROWS // max(n_rows, 1))
    dtype = np.int32 if n_rows < 2 ** 31 else np.int64
    for b0 in range(0, len(trees), block):
        ids = range(b0, min(b0 + block, len(trees)))
        leaves = {i: np.zeros(n_rows, dtype=np.int64) for i in ids}
        frontier = [(i, 0, np.arange(n_rows, dtype=dtype)) for i in ids]
        while frontier:
            asks = {}    # party -> [(tree, node, rows)] of the splits it owns on this level
            for i, node, rows in frontier:
                t = trees[i]
                if t["children_left"][node] < 0:
                    leaves[i][rows] = node
                elif rows.size:
                    asks.setdefault(int(t["owner"][node]) + 1, []).append((i, node, rows))
            if not asks:
                break
            replies = comm.exchange({r: {"op": protocol.ROUTE,
                                         "tree": np.array([a[0] for a in items], dtype=np.int64),
                                         "node": np.array([a[1] for a in items], dtype=np.int64),
                                         "sizes": np.array([a[2].size for a in items], dtype=np.int64),
                                         "rows": np.concatenate([a[2] for a in items])}
                                     for r, items in asks.items()})
            frontier = []
            for r, items in asks.items():
                n = sum(a[2].size for a in items)
                bits = replies[r].get("bits")
                if not (isinstance(bits, np.ndarray) and bits.dtype == np.uint8 and bits.ndim == 1
                        and bits.size == (n + 7) // 8):
                    raise messages.bad_message(f"party {r} answered {n} routed rows with "
                                               f"{messages.shown(bits)}")
                left = np.unpackbits(bits, count=n).astype(bool)
                at = 0
                for i, node, rows in items:
                    go = left[at:at + rows.size]
                    at += rows.size
                    t = trees[i]
                    frontier.append((i, int(t["children_left"][node]), rows[go]))
                    frontier.append((i, int(t["children_right"][node]), rows[~go]))
        out += [leaves[i] for i in ids]
        bar.update(len(ids))
    bar.close()
    comm.bcast({"op": protocol.END_CLASSICAL})
    return out
