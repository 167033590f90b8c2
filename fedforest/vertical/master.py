"""Vertical Federated Forest, the master's policy (rank 0): training and prediction.

Rank 0 is the master; ranks 1..K are parties that share rows (matched by ID)
and hold different columns; exactly one party holds the label column.  See
docs/protocol.md for the message sequence and the threat model.
"""
import secrets
import time

import numpy as np

from ..crypto import paillier
from ..data.alignment import master_align
from ..data.validation import CLASSIFICATION, encode_labels
from ..errors import InputError
from ..tree import predict
from ..tree import growth
from . import messages
from . import tree_grower
from ..tree import threads as numba_threads
from ..tree.growth import SplitSettings, tree_seeds
from .tree_grower import TreeGrower
from ..tree.labels import PlainLabels, class_weight_vector
from ..tree.params import resolve_max_samples, resolve_n_jobs, validate
from ..tree.predict import leaf_positions, leaves_of, unpack_leaf_sets
from . import encrypted_labels as encrypted
from .paillier import sealed
from .paillier.relay import LabelHolderChooses, RowCount
from ..federation.files import write_summary
from . import boosting, explain, forest_params, model_files, protocol
from ..data.columns import FIXED_BYTES, check_memory, return_large_frees
from .common import (RemoteParties, check_encrypted_job, check_model_dir, check_world, job_id_of, load_role_model, log,
                     peak_rss_mb, restart_note, plural_rounds, progress_bar, bar_round, report_training)


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


def master_train(comm, cfg):
    """Master side of training; returns a summary dict."""
    return_large_frees()
    t_start = time.perf_counter()
    cfg.check_train()
    params = validate(forest_params(cfg), cfg.task)
    if cfg.label_privacy == "paillier":
        _check_paillier(params, cfg)
    job = open_training(comm, cfg, params)
    feature_counts, job_id, my_dir = job.feature_counts, job.job_id, job.my_dir
    start, run_id, random_state, n_rows, lost = job.start, job.run_id, job.random_state, job.n_rows, job.lost
    label_party = job.label_party
    is_clf = cfg.task == CLASSIFICATION
    common = {"op": protocol.SETUP, "start": start, "job_id": job_id, "run_id": run_id,
              "params": params.to_dict(), "task": cfg.task}
    he = {}
    if cfg.label_privacy == "paillier":
        # the master learns the number of classes, not their names
        grower, n_classes, he = _paillier_setup(comm, cfg, params, n_rows, label_party, feature_counts, common)
        classes = None
    else:
        y_raw = comm.exchange({label_party: {"op": protocol.SEND_LABELS}})[label_party]["y"]
        # who got the labels, for the summary: the master, then every party in the set-up message below
        he["labels_received"] = {r: {"form": "plaintext", "rows": int(np.size(y_raw))} for r in range(comm.size)}
        codes, classes = encode_labels(y_raw, cfg.task, what=f"label column {cfg.label_column!r}")
        n_classes = classes.size if is_clf else 1
        settings = SplitSettings(params, n_rows, is_clf, n_classes, sum(feature_counts))
        settings.reveal_splits = bool(cfg.master_full_model)
        labels = PlainLabels(codes, is_clf, n_classes)
        grower = TreeGrower(RemoteParties(comm), labels, params, settings, feature_counts,
                            y_codes=codes if is_clf else None, classes=classes)
        if is_clf:
            class_weight_vector(params.class_weight, codes, np.ones(n_rows), n_classes, classes)
        # validation is complete: from here on work starts and files get written
        comm.bcast(dict(common, y=codes, n_classes=n_classes, settings=settings.to_dict()))
    manifest = {
        "role": "master", "rank": 0, "mode": cfg.spec.name, "n_parties": cfg.n_parties, "job_id": job_id,
        "run_id": run_id,
        "task": cfg.task,
        "params": params.to_dict(), "feature_counts": feature_counts, "label_party": label_party,
        "classes": classes.tolist() if is_clf and classes is not None else None,
        "n_classes": n_classes, "n_estimators": params.n_estimators,
        "full_model": bool(cfg.master_full_model), "split_method": params.split_method,
        "random_state_used": random_state, "label_privacy": cfg.label_privacy,
    }
    if start == 0:
        model_files.clear(my_dir)
    n_jobs = numba_threads.set_threads(resolve_n_jobs(cfg.n_jobs))
    tree_grower.warm_up(params.split_method, is_clf)
    seeds = tree_seeds(random_state, params.n_estimators)
    n_stats = n_classes if is_clf else 3
    fixed, batch = batch_limits(cfg, job.infos, params.n_estimators,
                                tree_grower.tree_state_bytes(n_rows, n_stats, cfg.label_privacy, he.get("key_length")))
    plan = growth.BatchPlan(fixed, batch, 60.0 * cfg.checkpoint_minutes,
                             tree_grower.estimated_tree_seconds(n_rows, max(feature_counts), params.max_depth,
                                                            he.get("key_length")))
    rounds0, bytes0, t_trees = comm.rounds, comm.bytes_sent, time.perf_counter()
    if start:
        log(cfg, f"resuming from checkpoint: {start} of {params.n_estimators} trees already built")
    bar = progress_bar(cfg, total=params.n_estimators, initial=start, desc="training trees", unit="tree")
    with model_files.kept_on_stop(my_dir, params.n_estimators), model_files.CheckpointWriter(my_dir) as writer:
        done = b0 = start

        def stored(ids, trees, acks):
            """Write the trees every party has stored; False when a party stored fewer."""
            nonlocal done
            # a tree counts as done once every party has stored its part
            n = min(a["n_trees"] for a in acks)
            writer.submit_batch([(t, tree, dict(manifest, n_trees=t + 1, complete=t + 1 == params.n_estimators))
                                 for t, tree in zip(ids, trees) if t < n])
            bar.update(max(0, n - done))
            done = n
            return n >= ids[-1] + 1

        # each batch's commit travels with the next batch's first message
        carry, pending, complete = None, None, [True]

        def on_carried(acks):
            complete[0] = stored(*pending, acks)

        while b0 < params.n_estimators:
            ids = range(b0, b0 + plan.next_size(params.n_estimators - b0))
            b0 = ids[-1] + 1
            t_batch = time.perf_counter()
            trees, commit = grower.grow_batch_fused([seeds[t] for t in ids], first=ids[0], carry=carry,
                                                       on_carried=on_carried, on_round=bar_round(bar, ids))
            plan.record(len(ids), time.perf_counter() - t_batch)
            carry, pending = commit, (ids, trees)
            if not complete[0]:
                carry = None
                break
        if carry is not None:
            stored(*pending, RemoteParties(comm).exchange(carry))
    bar.close()
    train_seconds = time.perf_counter() - t_trees
    tree_bytes = comm.bytes_sent - bytes0
    train_rounds = comm.rounds - rounds0
    acks = comm.exchange({r: {"op": protocol.DONE} for r in comm.clients})
    if done < params.n_estimators:
        raise RuntimeError(f"the parties stored only {done} of {params.n_estimators} trees")
    n_built = params.n_estimators - start
    party_bytes = sum(a["tree_bytes_sent"] for a in acks.values())
    summary = {
        "n_rows": n_rows, "rows_lost": lost, "n_trees": params.n_estimators, "trees_built": n_built,
        "train_seconds": train_seconds, "total_seconds": time.perf_counter() - t_start,
        "rounds_per_tree": train_rounds / max(n_built, 1), "rounds_per_forest": train_rounds,
        "tree_batch": max(plan.sizes, default=0), "batches": plan.sizes, "n_jobs": n_jobs,
        "peak_rss_mb": peak_rss_mb(),
        "bytes_per_tree": (tree_bytes + party_bytes) / max(n_built, 1), "job_id": job_id,
        "model_dirs": {0: my_dir, **{r: acks[r]["model_dir"] for r in comm.clients}},
        # sealed bytes each rank received in this run (a party: what the master sent it)
        "bytes_received": {0: sum(comm.bytes_received_from.values()),
                           **{r: comm.bytes_sent_to.get(r, 0) for r in comm.clients}},
        "label_privacy": cfg.label_privacy, **he,
    }
    log(cfg, f"trained {params.n_estimators} trees on {n_rows} rows in {train_seconds:.2f}s "
              f"({plural_rounds(train_rounds)}, {_batches(plan.sizes)})")
    return report_training(cfg, summary)


def _batches(sizes):
    """How the trees were batched, for the log: 'one batch of 100 trees', '4 batches of 25 trees'."""
    if len(set(sizes)) > 1:
        return f"{len(sizes)} batches of {min(sizes)}-{max(sizes)} trees"
    n = len(sizes)
    return f"{'one batch' if n == 1 else f'{n} batches'} of {sizes[0] if sizes else 0} trees"


def _check_paillier(params, cfg):
    """Settings the encrypted-label mode cannot honour, refused before any work."""
    paillier.check_key_length(cfg.key_length, cfg.insecure_key)
    check_encrypted_job(cfg)
    if params.split_method != "hist":
        raise InputError("split_method", "label_privacy = 'paillier' needs split_method = 'hist' "
                                         "(encrypted statistics are summed per histogram bin)")
    if params.class_weight is not None:
        raise InputError("class_weight", "is not available with label_privacy = 'paillier' "
                                         "(encrypted statistics are integer counts)")


def _paillier_setup(comm, cfg, params, n_rows, label_party, feature_counts, common):
    """The label holder makes its key pair and encrypts its labels; the master
    relays the public key and the ciphertexts to the other parties and their
    bin counts back to the label holder.  Returns the grower, the number of
    classes and figures for the summary."""
    is_clf = cfg.task == CLASSIFICATION
    n_total = resolve_max_samples(params.max_samples, n_rows) if params.bootstrap else n_rows
    rep = comm.exchange({label_party: {"op": protocol.ENCRYPT_LABELS, "n_total": n_total,
                                       "slot_bits": cfg.slot_bits}})[label_party]
    public = received_key(rep, cfg, label_party)
    spec = encrypted.EncryptionSpec.from_dict(rep.get("spec"))
    if spec.key_length != public.key_length or spec.n_total != n_total or spec.is_classification != is_clf:
        raise encrypted.ProtocolIntegrityError(f"party {label_party} sent a slot layout for another job")
    n_classes = spec.n_classes if is_clf else 1
    blocks = rep.get("blocks")
    if not (isinstance(blocks, np.ndarray) and blocks.dtype == np.uint8
            and blocks.shape == (n_rows, public.ciphertext_bytes)):
        raise encrypted.ProtocolIntegrityError(f"party {label_party} sent {messages.shown(blocks)} as its "
                                               "encrypted labels")
    log(cfg, f"Paillier key: {public.key_length} bits, made by party {label_party}, which holds the labels "
              f"and decides every split")
    settings = SplitSettings(params, n_rows, is_clf, n_classes, sum(feature_counts))
    settings.reveal_splits = bool(cfg.master_full_model)
    # validation is complete: from here on work starts and files get written
    comm.scatter({r: dict(common, settings=settings.to_dict(), n_classes=n_classes, spec=spec.to_dict(),
                          public_key=public.to_bytes(), feature_counts=list(feature_counts),
                          label_party=label_party,
                          **({} if r == label_party else {"labels": blocks, "fingerprint": public.fingerprint}))
                  for r in comm.clients})
    relay_bins(comm, label_party)
    # the forest's grower with the label channel of the label holder
    grower = TreeGrower(RemoteParties(comm), RowCount(n_rows), params, settings, feature_counts,
                        channel=LabelHolderChooses(label_party - 1, spec, public))
    # who got the labels, and in which form: the master and the other parties their ciphertexts only
    got = {"form": "paillier ciphertexts", "rows": int(blocks.shape[0]), "bytes": int(blocks.nbytes),
           "key_holder": label_party}
    he = {"key_length": public.key_length, "paillier_key_holder": "label_holder",
          "label_encrypt_seconds": float(rep.get("seconds", 0.0)), "slot_bits": spec.width,
          "values_per_ciphertext": spec.per_ciphertext,
          "labels_received": {r: got for r in range(comm.size) if r != label_party}}
    log(cfg, f"labels encrypted by party {label_party} in {he['label_encrypt_seconds']:.1f}s ({n_rows} rows, "
              f"{spec.width}-bit slots, {spec.per_ciphertext} statistics vectors per ciphertext)")
    return grower, n_classes, he


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
def master_predict(comm, cfg):
    """Master side of prediction; returns a summary with the predictions."""
    return_large_frees()
    check_world(comm, cfg)
    comm.reply_timeout = cfg.reply_timeout
    folder, manifest, trees = load_role_model(cfg, 0)
    if manifest["n_parties"] != cfg.n_parties:
        raise InputError("master model", f"was trained with {manifest['n_parties']} parties, "
                                          f"this job has {cfg.n_parties}")
    # with encrypted labels the leaf values live at the label holder: it writes the predictions
    at_holder = manifest.get("label_privacy") == "paillier"
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
        values = _leaf_sums(trees, row_leaves, n_rows, boost)
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


def _leaf_sums(trees, row_leaves, n_rows, boost):
    """The model's output per row from every row's leaf in each tree: the
    forest's mean leaf value, or boosting's probabilities (or values) from
    the base margin plus the trees' leaf values (tree ``t`` of a round adds to
    output ``t % n_outputs``)."""
    if boost is None:
        values = np.zeros((n_rows, trees[0]["value"].shape[1]))
        for tree, leaf in zip(trees, row_leaves):
            values += tree["value"][leaf]
        return values / len(trees)
    k_out = boost["n_outputs"]
    margin = np.tile(np.asarray(boost["base_margin"], dtype=np.float64), (n_rows, 1))
    for i, (tree, leaf) in enumerate(zip(trees, row_leaves)):
        margin[:, i % k_out] += tree["value"][leaf, 0]
    return boosting.predict_output(boost["objective"], margin).reshape(n_rows, -1)


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
