"""Vertical Federated Forest, the master's policy (rank 0): training and prediction.

Rank 0 is the master; ranks 1..K are parties that share rows (matched by ID)
and hold different columns; exactly one party holds the label column.  See
docs/protocol.md for the message sequence and the threat model.
"""
import time

import numpy as np

from ...crypto import paillier
from ...data.validation import CLASSIFICATION, encode_labels
from ...errors import InputError
from ...tree import growth
from .. import messages
from .. import tree_grower
from ...tree import threads as numba_threads
from ...tree.growth import SplitSettings, tree_seeds
from ..tree_grower import TreeGrower
from ...tree.labels import PlainLabels, class_weight_vector
from ...tree.params import resolve_max_samples, resolve_n_jobs, validate
from .. import encrypted_labels as encrypted
from ..paillier.hidden import HIDDEN, HiddenChooses
from ..paillier.relay import LabelHolderChooses, RowCount
from ..job_master import batch_limits, open_training, received_key, relay_bins
from .. import audit, model_files, protocol
from . import forest_params
from ...data.columns import return_large_frees
from ..common import (RemoteParties, check_encrypted_job, log, peak_rss_mb, plural_rounds, progress_bar, bar_round, report_training)


def master_train(comm, cfg):
    """Master side of training; returns a summary dict."""
    return_large_frees()
    t_start = time.perf_counter()
    cfg.check_train()
    params = validate(forest_params(cfg), cfg.task)
    encrypted = cfg.privacy.encrypted      # the label holder keeps the key and decides the splits
    if encrypted:
        _check_paillier(params, cfg)
    job = open_training(comm, cfg, params)
    feature_counts, job_id, my_dir = job.feature_counts, job.job_id, job.my_dir
    start, run_id, random_state, n_rows, lost = job.start, job.run_id, job.random_state, job.n_rows, job.lost
    label_party = job.label_party
    is_clf = cfg.task == CLASSIFICATION
    first_trees = cfg.label_holder_first_trees
    tree_grower.check_label_holder_first(first_trees, feature_counts, label_party - 1)
    # the job's seed: every party recomputes each tree's bootstrap draws from it
    common = {"op": protocol.SETUP, "start": start, "job_id": job_id, "run_id": run_id,
              "params": params.to_dict(), "task": cfg.task, "random_state": random_state,
              "label_holder_first_trees": first_trees}
    he = {}
    if encrypted:
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
    # the first trees split on the label holder's columns alone; the other parties take no part
    grower.label_holder_first(first_trees, label_party - 1)
    manifest = {
        "role": "master", "rank": 0, "mode": cfg.spec.name, "n_parties": cfg.n_parties, "job_id": job_id,
        "run_id": run_id,
        "task": cfg.task,
        "params": params.to_dict(), "feature_counts": feature_counts, "label_party": label_party,
        "classes": classes.tolist() if is_clf and classes is not None else None,
        "n_classes": n_classes, "n_estimators": params.n_estimators,
        "full_model": bool(cfg.master_full_model), "split_method": params.split_method,
        "random_state_used": random_state, "label_privacy": cfg.label_privacy,
        "label_holder_first_trees": first_trees,
    }
    if start == 0:
        model_files.clear(my_dir)
    n_jobs = numba_threads.set_threads(resolve_n_jobs(cfg.n_jobs))
    tree_grower.warm_up(params.split_method, is_clf)
    seeds = tree_seeds(random_state, params.n_estimators)
    n_stats = n_classes if is_clf else 3
    fixed, batch = batch_limits(cfg, job.infos, params.n_estimators,
                                tree_grower.tree_state_bytes(n_rows, n_stats, encrypted, he.get("key_length")))
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
    if encrypted:
        # the label holder's audit: the two fractions, in the summary and the master's manifest
        summary[audit.AUDIT] = audit.master_received(cfg, acks[label_party], label_party, first_trees)
        audit.add_to_manifest(my_dir, summary[audit.AUDIT])
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
    hidden = cfg.instance_space == HIDDEN     # no row ciphertexts at set-up: the label holder slots them per level
    if hidden and blocks is not None:
        raise encrypted.ProtocolIntegrityError(f"party {label_party} sent encrypted labels in the hidden instance space")
    if not hidden and not (isinstance(blocks, np.ndarray) and blocks.dtype == np.uint8
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
                          label_party=label_party, instance_space=cfg.instance_space,
                          **({} if r == label_party or hidden else {"labels": blocks,
                                                                   "fingerprint": public.fingerprint}))
                  for r in comm.clients})
    relay_bins(comm, label_party)
    # the forest's grower with the label channel of the label holder
    grower = TreeGrower(RemoteParties(comm), RowCount(n_rows), params, settings, feature_counts,
                        channel=(HiddenChooses if hidden else LabelHolderChooses)(label_party - 1, spec, public))
    # who got the labels, and in which form: the master and the other parties their ciphertexts only
    got = {"form": "paillier ciphertexts", "rows": n_rows, "bytes": 0 if hidden else int(blocks.nbytes),
           "key_holder": label_party}
    if hidden:
        got["form"] = "paillier ciphertexts in node slots, per level (hidden instance space)"
    he = {"key_length": public.key_length, "paillier_key_holder": "label_holder",
          "label_encrypt_seconds": float(rep.get("seconds", 0.0)), "slot_bits": spec.width,
          "values_per_ciphertext": spec.per_ciphertext, "instance_space": cfg.instance_space,
          "labels_received": {r: got for r in range(comm.size) if r != label_party}}
    log(cfg, f"labels encrypted by party {label_party} in {he['label_encrypt_seconds']:.1f}s ({n_rows} rows, "
              f"{spec.width}-bit slots, {spec.per_ciphertext} statistics vectors per ciphertext)")
    return grower, n_classes, he


