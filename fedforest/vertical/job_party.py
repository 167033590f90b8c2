"""A party's side of every vertical job, the forest's and boosting's alike:
the opening steps of training (read, describe, align), the loop that grows
and stores the trees the master's batch messages ask for, the set-up facts
of the encrypted modes, and prediction.  See docs/protocol.md.
"""
import os
import re

import numpy as np

from ..crypto import paillier
from ..data.alignment import party_align
from ..data.columns import check_table_memory, return_large_frees
from ..data.io import pd
from ..data.validation import CLASSIFICATION
from ..errors import InputError
from ..federation.privacy import of_manifest
from ..tree import partitioner, predict
from . import messages
from ..tree import threads as numba_threads
from .messages import bad_message, index_array, int_array, int_value, shown
from ..tree.params import resolve_n_jobs
from ..tree.predict import pack_leaf_sets, party_leaf_sets, prepare_X
from ..federation.files import atomic_write
from .paillier import hidden, sealed
from . import explain, model_files, protocol
from ..transport.base import ProtocolError, expect
from .common import MASTER, PartyTable, peak_rss_mb, check_model_dir, check_world, load_role_model


JOB_ID = re.compile(r"[0-9a-f]{32}")   # job and run ids: 32 hex digits



MAX_CLASSES = 1 << 16



DEFAULT_BATCH_MB = 4096



def _crash_point(rank):
    """Fault injection for tests: FEDFOREST_FAULT_CRASH=<rank>:<trees> makes that
    party stop checkpointing after that many trees: it reports them at the
    batch's commit and fails at the master's next message."""
    spec = os.environ.get("FEDFOREST_FAULT_CRASH")
    if not spec:
        return None
    r, n = (int(x) for x in spec.split(":"))
    return n if r == rank else None



def open_training(comm, cfg):
    """A party's side of the steps every vertical training job starts with
    (:func:`fedforest.vertical.forest.master.open_training`): read and describe its
    table, check its model folder for this job, align its rows by ID.
    Returns ``(table, job_id, folder, trees already checkpointed, aligned X)``,
    X an :class:`~fedforest.data.columns.AlignedColumns` (the splitter takes
    its columns one by one, freeing each stored column)."""
    rank = comm.rank
    check_world(comm, cfg)
    comm.reply_timeout = cfg.reply_timeout
    comm.handshake()
    msg = expect(comm.recv(MASTER), protocol.LOAD)
    if msg.get("mode") != cfg.spec.name:
        raise InputError("mode", f"the master runs mode {str(msg.get('mode'))[:40]!r}; party {rank} "
                                 f"runs {cfg.spec.name!r}")
    if msg.get("label_privacy") != cfg.label_privacy:
        raise InputError("label_privacy", f"party {rank} requires {cfg.label_privacy!r} but the master "
                                          f"runs {str(msg.get('label_privacy'))[:40]!r}")
    if msg.get("label_column") != cfg.label_column:
        raise InputError("label_column", f"the master names label column "
                                         f"{str(msg.get('label_column'))[:80]!r}; party {rank}'s "
                                         f"configuration names {cfg.label_column!r}")
    # a table that cannot fit this rank's memory is refused before it is read
    check_table_memory(cfg.data[rank - 1], f"party {rank}", cfg.values.get("memory_mb"))
    table = PartyTable(cfg, rank, cfg.data[rank - 1], label_column=cfg.label_column)
    table.store.check_labels(f"party {rank}", cfg.label_column)     # a missing label: refused here
    # the bounds of this party's memory are its own: the master sizes batches within them
    comm.send(MASTER, {"n_rows": len(table.ids), "n_features": len(table.columns),
                       "has_label": table.has_label, "fingerprint": table.fingerprint(),
                       "tree_batch": cfg.values.get("tree_batch"),
                       "batch_memory_mb": cfg.values.get("batch_memory_mb", DEFAULT_BATCH_MB)})
    msg = expect(comm.recv(MASTER), protocol.CHECK_DIR)
    if not isinstance(msg.get("full_model"), bool):
        raise bad_message(f"'full_model' must be true or false, got {shown(msg.get('full_model'))}")
    if msg["full_model"] and not cfg.master_full_model:
        raise InputError("master_full_model", f"the master asks party {rank} for its split features "
                                              "and thresholds, which this party's configuration "
                                              "does not allow")
    job_id = _hex_id(msg.get("job_id"), "'job_id'")
    folder = model_files.party_dir(cfg.model_dir, rank)
    n_done = check_model_dir(folder, job_id, cfg.resume, cfg.overwrite,
                              f"party {rank} model_dir")
    comm.send(MASTER, {"n_trees": n_done})
    positions = party_align(comm, rank, table.ids, cfg.n_parties)
    table.y = None if table.y is None else table.y[positions]
    table.ids = table.store.ids = None      # training needs the IDs no more
    return table, job_id, folder, n_done, table.aligned(positions)



def serve_growth(comm, splitter, manifest, folder, start, batch, on_commit=None, on_op=None, on_done=None):
    """A party's training loop, the forest's and boosting's alike: grow the
    trees the master's batch messages ask for (at most ``batch`` trees from
    the last stored one), store each batch's trees at its commit (trees and
    manifest on disk before the reply counts them), stop at ``done``.
    ``on_commit(trees, reply, first)`` adds to a commit's reply (``first``:
    the number of the first of the stored ``trees``); ``on_op`` maps
    further ops to ``handler(msg, n_stored) -> (reply, n_stored)``;
    ``on_done()`` gives what the party adds to its manifest and its reply
    to ``done`` (the label holder's privacy audit)."""
    n_estimators = manifest["n_estimators"]
    crash_after = _crash_point(comm.rank)
    t = start
    bytes0 = comm.bytes_sent
    failing = None

    def step(op, msg):
        """One grow or commit message of the batch being grown; returns the reply."""
        nonlocal t, failing
        _check_batch_trees(msg.get("trees"), t, min(t + batch, n_estimators), op == messages.COMMIT)
        reply = splitter.handle_batch(msg)
        if op == messages.COMMIT:
            # the batch's trees are on disk before the master counts them as done
            done = list(zip(splitter.tree_ids, splitter.trees))
            if crash_after is not None:
                done = done[:max(0, crash_after - t)]
            model_files.write_trees(folder, done)
            if done:
                t = done[-1][0] + 1
            if crash_after is not None and t >= crash_after:
                failing = f"injected failure after {t} trees (FEDFOREST_FAULT_CRASH)"
            splitter.trees.clear()
            splitter.tree_ids.clear()
            model_files.write_manifest(folder, dict(manifest, n_trees=t,
                                                    complete=t == manifest["n_estimators"]))
            reply["n_trees"] = t
            if on_commit is not None:
                on_commit([tree for _, tree in done], reply, done[0][0] if done else t)
        return reply

    while True:
        msg = comm.recv(MASTER)
        if failing is not None:
            raise RuntimeError(failing)
        op = msg.get("op")
        if op == protocol.DONE:
            # the party's peak memory stays in its own manifest (the master learns
            # nothing of a party beyond what the protocol needs)
            # so do the seconds of its encrypted stages (party sums, decryption, the decision, ...)
            stages = {"stage_seconds": dict(splitter.seconds)} if splitter.seconds else {}
            kept, told = on_done() if on_done is not None else ({}, {})
            model_files.write_manifest(folder, dict(manifest, n_trees=t, peak_rss_mb=peak_rss_mb(),
                                                    complete=t == manifest["n_estimators"], **stages, **kept))
            comm.send(MASTER, {"tree_bytes_sent": comm.bytes_sent - bytes0, "model_dir": folder, **told})
            return folder
        if on_op is not None and op in on_op:
            reply, t = on_op[op](msg, t)
            comm.send(MASTER, reply)
            continue
        if op == messages.FUSED:
            # the previous batch's commit, then the next batch's first message
            parts = {k: msg.get(k) for k in ("commit", "grow")}
            for k, part in parts.items():
                want = messages.COMMIT if k == "commit" else messages.GROW
                if not (isinstance(part, dict) and part.get("op") == want):
                    raise ProtocolError(f"protocol error: the {k!r} part of a commit and grow message "
                                        f"must be a {want!r} message")
            committed = step(messages.COMMIT, parts["commit"])
            if failing is not None:
                raise RuntimeError(failing)
            reply = {"commit": committed, "grow": step(messages.GROW, parts["grow"])}
        elif op in (messages.GROW, messages.COMMIT):
            reply = step(op, msg)
        elif op == messages.APPLY:
            step(op, msg)       # one-way: the level's partitions, no reply
            continue
        else:
            raise ProtocolError(f"protocol error: unexpected {op!r}")
        comm.send(MASTER, reply)



def _hex_id(value, name):
    if not (isinstance(value, str) and JOB_ID.fullmatch(value)):
        raise bad_message(f"{name} must be 32 hex digits, got {shown(value)}")
    return value



def check_setup(setup, cfg, params, rank, job_id, n_done, folder):
    """The job facts of the setup message, against the party's own; returns the
    first tree to grow.  Training restarts from tree 0 over this party's
    checkpoint only when the party itself allows it (overwrite)."""
    if setup.get("job_id") != job_id:
        raise bad_message("'job_id' differs from the one the model folder was checked for")
    run_id = _hex_id(setup.get("run_id"), "'run_id'")
    if setup.get("task") != cfg.task:
        raise InputError("task", f"the master runs {str(setup.get('task'))[:40]!r}; party {rank} "
                                 f"runs {cfg.task!r}")
    if setup.get("params") != params.to_dict():
        raise InputError("params", f"the master's forest settings differ from party {rank}'s: "
                                   f"{str(setup.get('params'))[:400]}")
    first = cfg.values.get("label_holder_first_trees", 0)
    if setup.get("label_holder_first_trees") != first:
        raise InputError("label_holder_first_trees", f"the master runs "
                                                     f"{str(setup.get('label_holder_first_trees'))[:40]}; party "
                                                     f"{rank} runs {first}")
    start = int_value(setup.get("start"), "'start'", 0, n_done)
    if start == 0 and n_done and not cfg.overwrite:
        raise InputError(f"party {rank} model_dir", f"the master restarts training from tree 0, which "
                                                    f"would delete the {n_done} trees checkpointed in "
                                                    f"{folder!r}; pass --overwrite to allow it")
    if start:
        kept = model_files.read_manifest(folder, f"party {rank} model")
        if kept.get("run_id") is not None and kept["run_id"] != run_id:
            raise bad_message(f"'run_id' differs from the run of this party's checkpoint ({kept['run_id']})")
        # the trees of a resumed run draw from the seed of the stored ones
        seed = kept.get("random_state_used")
        if seed is not None and setup.get("random_state") != seed:
            raise bad_message(f"'random_state' differs from the seed of this party's checkpoint ({seed})")
    return start


def job_seed(value, params):
    """The job's seed the master sends (``random_state``): this party's own
    random_state when it sets one.  Every tree's draws come from it, and the
    party recomputes them (:func:`~fedforest.tree.growth.tree_draws`)."""
    if params.random_state is not None:
        if isinstance(value, bool) or not isinstance(value, int) or value != params.random_state:
            raise bad_message(f"'random_state' must be this party's {params.random_state}, got {str(value)[:40]}")
        return params.random_state
    return int_value(value, "'random_state'", 0, 2 ** 63 - 1)



def _check_batch_trees(trees, first, end, commit):
    """The tree numbers of a batch message: trees of the batch being grown
    (at most ``first`` to ``end - 1``; the master may size a batch below that
    bound); a commit stores the batch's trees from ``first`` on, each tree once
    (the splitter refuses a commit that leaves a begun tree unfinished)."""
    trees = int_array(trees, "'trees'")
    if commit and not (0 < trees.size <= end - first and np.array_equal(trees, np.arange(first, first + trees.size))):
        raise bad_message(f"a commit must store trees {first} to at most {end - 1} (the batch being grown), "
                          f"in order from {first}, got {shown(trees)}")
    if trees.size and (trees.min() < first or trees.max() >= end):
        raise bad_message(f"'trees' names trees outside the batch being grown ({first} to {end - 1})")



def public_key(data, cfg):
    """The label holder's Paillier public key (relayed by the master), of the
    length this party's settings ask, and no longer than its own max_key_length."""
    paillier.check_key_bound(cfg.key_length, cfg.max_key_length)
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 1
            and 0 < data.size <= 16_384 // 8):
        raise bad_message(f"'public_key' must be the bytes of a Paillier key, got {shown(data)}")
    public = paillier.PublicKey.from_bytes(data)
    if public.key_length != cfg.key_length:
        raise InputError("key_length", f"the relayed public key has {public.key_length} bits; this "
                                       f"party's key_length is {cfg.key_length}")
    paillier.check_key_length(public.key_length, cfg.insecure_key)
    return public



def setup_parties(setup, cfg, rank):
    """The parties' column counts and the label holder's rank from the setup message."""
    fc = setup.get("feature_counts")
    if not (isinstance(fc, list) and len(fc) == cfg.n_parties
            and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in fc)):
        raise bad_message(f"'feature_counts' must list {cfg.n_parties} column counts, got {shown(fc)}")
    lp = int_value(setup.get("label_party"), "'label_party'", 1, cfg.n_parties)
    return fc, lp



def party_predict(comm, cfg, output):
    """A party's side of prediction (``output``: the algorithm's
    :class:`~.model_output.ModelOutput`, used where the party holds the leaf values)."""
    rank = comm.rank
    check_world(comm, cfg)
    comm.reply_timeout = cfg.reply_timeout
    folder, manifest, trees = load_role_model(cfg, rank)
    comm.handshake()
    expect(comm.recv(MASTER), protocol.LOAD)
    table = PartyTable(cfg, rank, cfg.data[rank - 1], columns=manifest["columns"],
                       categories=manifest["categories"], label_column=manifest.get("label_column"))
    table_ids, rows = table.ids, None
    if cfg.explain_row is not None:
        found = table_ids.find(cfg.explain_row)
        if not found.size:
            raise InputError("explain_row", f"ID {cfg.explain_row!r} is not in party {rank}'s data")
        rows = found[:1]
        table_ids = table_ids.take(rows)
    comm.send(MASTER, {"job_id": manifest["job_id"], "run_id": manifest.get("run_id"),
                       "n_trees": manifest["n_trees"],
                       "n_rows": len(table_ids), "n_unseen": table.n_unseen})
    positions = party_align(comm, rank, table_ids, cfg.n_parties)
    # the aligned rows only, built column by column (the stored columns freed as they are taken)
    X = table.aligned(positions if rows is None else rows[positions]).dense()
    ids = table_ids.take(positions).to_numpy()
    table = table_ids = None
    method = manifest["split_method"]
    numba_threads.set_threads(resolve_n_jobs(cfg.n_jobs))
    predict.warm_up()
    # with encrypted labels the leaf sets go sealed to the label holder, which keeps its own
    at_holder = of_manifest(manifest).encrypted
    sealer = sealed.Sealer.of(comm) if at_holder else None
    hidden_space = manifest.get("instance_space") == hidden.HIDDEN
    own_sets = None
    while True:
        msg = comm.recv(MASTER)
        op = msg.get("op")
        if op == protocol.READY:
            comm.send(MASTER, {})
        elif op == protocol.LEAF_SETS and hidden_space:
            # the hidden instance space: thresholds' bits for the label holder, which routes the rows
            lp = _label_party(manifest, msg, cfg)
            if lp == rank:
                own_sets = hidden.HIDDEN
                comm.send(MASTER, {})
            else:
                comm.send(MASTER, sealed.outgoing([(lp - 1, sealed.LEAF_SETS, sealer.seal(
                    lp - 1, sealed.LEAF_SETS, *sealed.PREDICTION, hidden.record_bits(X, trees)))]))
        elif op == protocol.LEAF_SETS:
            sets = pack_leaf_sets(party_leaf_sets(X, trees, method))
            if not at_holder:
                comm.send(MASTER, sets)
                continue
            lp = _label_party(manifest, msg, cfg)
            if lp == rank:
                own_sets = sets
                comm.send(MASTER, {})
            else:
                comm.send(MASTER, sealed.seal_leaf_sets(sealer, lp - 1, sets, sealed.PREDICTION))
        elif op == protocol.CLASSICAL:
            if at_holder:
                raise bad_message("node-by-node prediction of a model whose leaf values are the label "
                                  "holder's: its rows would pass through the master")
            Xp = prepare_X(X, method)
            while True:
                m = comm.recv(MASTER)
                if m.get("op") == protocol.END_CLASSICAL:
                    break
                expect(m, protocol.ROUTE)
                comm.send(MASTER, {"bits": np.packbits(_route(m, trees, Xp))})
        elif op == protocol.PATH:
            steps = _path_steps(msg, trees)
            lines = explain.party_path_lines(trees, steps, X[0], manifest["columns"],
                                             manifest.get("categories")) or \
                ["(no split of this party on these paths)"]
            print("\n".join(f"[party {rank}] {line}" for line in
                            [f"conditions of row {cfg.explain_row!r} on this party's columns:"] + lines),
                  flush=True)
            comm.send(MASTER, {"n_lines": len(lines)})
        elif op == protocol.RESULT:
            if rank != cfg.result_party:
                raise bad_message(f"predictions sent to party {rank}; result_party is {cfg.result_party}")
            reply = {}
            if at_holder:   # the leaf values are this party's: it makes the predictions
                if own_sets is None:
                    raise bad_message("a result before the leaf sets")
                if hidden_space:
                    leaves = hidden.route_hidden(trees, X, rank - 1, hidden.opened_records(
                        sealer, msg, sealed.PREDICTION), ids.shape[0])
                else:
                    leaves = sealed.leaves_from_sets(sealer, msg, own_sets, trees, ids.shape[0],
                                                     sealed.PREDICTION)
                msg = _holder_result(leaves, trees, manifest, ids.shape[0], cfg, output)
                if cfg.explain_row is not None:
                    # the one row the job explains: its leaves go to the master, which prints its path
                    reply["leaves"] = leaves[:, 0].astype(np.int64)
            _check_result(msg, ids.shape[0])
            reply["path"] = _write_predictions(cfg, ids, msg, manifest)
            comm.send(MASTER, reply)
        elif op == protocol.DONE:
            comm.send(MASTER, {})
            return None
        else:
            raise ProtocolError(f"protocol error: unexpected {op!r}")



def _route(msg, trees, Xp):
    """The left (1) / right (0) bit of every routed row: the rows ``sizes[k]``
    at a time, each block at split ``node[k]`` of tree ``tree[k]`` (one this
    party owns)."""
    tree, node, sizes = (int_array(msg.get(k), repr(k)) for k in ("tree", "node", "sizes"))
    if not tree.shape == node.shape == sizes.shape:
        raise bad_message("'tree', 'node' and 'sizes' differ in length")
    rows = index_array(msg.get("rows"), "'rows'", Xp.shape[0]).astype(np.int32)
    if (sizes.size and sizes.min() < 0) or int(sizes.sum()) != rows.size:
        raise bad_message(f"'sizes' (sum {int(sizes.sum())}) do not split the {rows.size} 'rows'")
    out = np.empty(rows.size, dtype=np.uint8)
    at = 0
    for i, n, size in zip(tree.tolist(), node.tolist(), sizes.tolist()):
        t, n = _own_split(trees, i, n)
        out[at:at + size] = partitioner.goes_left(Xp[:, int(t["feature"][n])], rows, at, at + size,
                                                  float(t["threshold"][n]), int(t["missing_left"][n]))
        at += size
    return out



def _own_split(trees, tree, node):
    """``(trees[tree], node)`` when ``node`` is a split this party owns in that tree."""
    return_large_frees()
    i = int_value(tree, "'tree'", 0, len(trees) - 1)
    t = trees[i]
    node = int_value(node, "'node'", 0, t["feature"].shape[0] - 1)
    if t["feature"][node] < 0:
        raise bad_message(f"node {node} of tree {i} is not a split of this party")
    return t, node



def _path_steps(msg, trees):
    """The ``(tree, node, child)`` steps of a PATH message: splits this party owns
    and one of their children."""
    arrays = [int_array(msg.get(k), repr(k)) for k in ("tree", "node", "child")]
    if not arrays[0].shape == arrays[1].shape == arrays[2].shape:
        raise bad_message("'tree', 'node' and 'child' differ in length")
    steps = []
    for i, node, child in zip(*(a.tolist() for a in arrays)):
        t, node = _own_split(trees, i, node)
        if child not in (int(t["children_left"][node]), int(t["children_right"][node])):
            raise bad_message(f"'child' {child} is not a child of node {node} of tree {i}")
        steps.append((i, node, child))
    return steps



def _label_party(manifest, msg, cfg):
    """The label holder's rank, from this party's own model (a model of an
    older version: from the master's message)."""
    lp = manifest.get("label_party")
    if lp is None:
        lp = int_value(msg.get("label_party"), "'label_party'", 1, cfg.n_parties)
    if (lp == manifest["rank"]) != bool(manifest.get("has_label")):
        raise bad_message(f"'label_party' {lp} is not the party that holds the labels")
    return lp



def _holder_result(leaves, trees, manifest, n_rows, cfg, output):
    """The label holder's predictions from every row's leaf in each tree (its
    intersection of the parties' leaf sets) and its own leaf values."""
    if not manifest.get("has_label"):
        raise bad_message("a result asked of a party that holds no leaf values")
    row_leaves = [leaves[i] for i in range(len(trees))]
    boost = manifest.get("boost")
    values = output.values(trees, row_leaves, n_rows, manifest)
    if cfg.explain_row is not None:
        classes = manifest["classes"] if manifest["task"] == CLASSIFICATION else None
        lines = [] if boost is None else [explain.base_margin_line(classes, boost)]
        for i, (tree, leaf) in enumerate(zip(trees[:cfg.explain_trees], row_leaves)):
            value = tree["value"][leaf[0]]
            shown = ", ".join(f"{v:.6g}" for v in value) if boost is None else \
                explain.leaf_text(i, value, classes, boost)
            lines.append(f"tree {i}: leaf {int(leaf[0])} value {shown}")
        print("\n".join(f"[party {manifest['rank']}] {line}" for line in lines), flush=True)
    out = {"op": protocol.RESULT}
    if manifest["task"] == CLASSIFICATION:
        classes = np.array(manifest["classes"])
        out.update(prediction=classes[np.argmax(values, axis=1)], proba=values, classes=[str(c) for c in classes])
    else:
        out.update(prediction=values[:, 0])
    return out



def _check_result(msg, n_rows):
    """Predictions for each aligned row, class probabilities with one name per column."""
    pred = msg.get("prediction")
    if not (isinstance(pred, np.ndarray) and pred.shape == (n_rows,) and pred.dtype.kind in "biufU"):
        raise bad_message(f"'prediction' must hold {n_rows} values (one per aligned row), got {shown(pred)}")
    if "proba" in msg:
        proba, classes = msg["proba"], msg.get("classes")
        if not (isinstance(classes, list) and classes and all(isinstance(c, str) and len(c) <= 200
                                                              for c in classes)):
            raise bad_message(f"'classes' must list the class names, got {shown(classes)}")
        if not (isinstance(proba, np.ndarray) and proba.dtype.kind == "f"
                and proba.shape == (n_rows, len(classes))):
            raise bad_message(f"'proba' must be a ({n_rows}, {len(classes)}) float array, got {shown(proba)}")



def _write_predictions(cfg, ids, msg, manifest):
    df = pd.DataFrame({cfg.id_column: ids, "prediction": msg["prediction"]})
    if "proba" in msg:
        for k, c in enumerate(msg["classes"]):
            df[f"proba_{c}"] = msg["proba"][:, k]
    path = os.path.abspath(cfg.output)
    atomic_write(path, lambda fh: fh.write(df.to_csv(index=False).encode()))
    return path
