"""Vertical Federated Forest, a party's policy (ranks 1..K): training and prediction.

A party trusts no value of the master's messages that it can check: every
message is compared with what the party knows itself (its configuration, its
aligned rows and columns, the classes, the trees it has open) or the value is
recomputed here; anything else stops the job with a
:class:`~fedforest.transport.base.ProtocolError` (an
:class:`~fedforest.errors.InputError` where settings differ) naming the field.
"""
import time

import numpy as np

from ...crypto import paillier
from ...data.columns import return_large_frees
from ...data.validation import CLASSIFICATION, encode_labels
from ...errors import InputError
from ...tree import growth
from .. import tree_grower
from ...tree import threads as numba_threads
from ..messages import accept_settings, bad_message, check_fields, int_value, shown
from ..party_splitter import PartySplitter
from ...tree.labels import PlainLabels
from ...tree.params import resolve_max_samples, resolve_n_jobs, validate
from .. import encrypted_labels as encrypted
from ..paillier import sealed
from ..paillier import hidden as H
from ..paillier.holder import KeyHolder
from .held_labels import HeldLabels
from ...tree.growth import ForestTrees
from ..job_party import MAX_CLASSES, check_setup, job_seed, open_training, public_key, serve_growth, setup_parties
from .. import audit, model_files, protocol
from . import forest_params
from ...transport.base import expect
from ..common import MASTER, current_rss_mb, peak_rss_mb, label_array


def party_train(comm, cfg):
    """Party side of training."""
    return_large_frees()
    rank = comm.rank
    t0 = time.perf_counter()
    cfg.check_train()
    params = validate(forest_params(cfg), cfg.task)
    table, job_id, folder, n_done, X = open_training(comm, cfg)
    n_rows = X.shape[0]
    msg = comm.recv(MASTER)
    held = None
    encrypted = cfg.privacy.encrypted      # this party's own label_privacy
    if table.has_label:  # the master asks the label holder, and only it, for its labels
        if encrypted:
            held = _encrypt_labels(comm, cfg, expect(msg, protocol.ENCRYPT_LABELS), table.y)
        else:
            expect(msg, protocol.SEND_LABELS)
            y = label_array(table.y, cfg.task, f"label column {cfg.label_column!r}")
            comm.send(MASTER, {"y": y})
            held = {"y": y}
        msg = comm.recv(MASTER)
    setup = expect(msg, protocol.SETUP)
    start = check_setup(setup, cfg, params, rank, job_id, n_done, folder)
    seed = job_seed(setup.get("random_state"), params)
    is_clf = cfg.task == CLASSIFICATION
    if held is not None and "y" in held:  # plain mode: the codes the master makes of them
        held["codes"], held["classes"] = encode_labels(held["y"], cfg.task,
                                                       what=f"label column {cfg.label_column!r}")
    n_classes = _n_classes(setup.get("n_classes"), is_clf, n_rows, held)
    settings = accept_settings(setup.get("settings"), params, n_rows, is_clf, n_classes,
                                    len(table.columns), cfg.master_full_model)
    n_total = resolve_max_samples(params.max_samples, n_rows) if params.bootstrap else n_rows
    if encrypted:
        splitter = _paillier_splitter(comm, cfg, rank, X, settings, setup, held, n_classes, n_total)
    else:
        labels = PlainLabels(_plain_labels(setup.get("y"), is_clf, n_classes, n_rows, held), is_clf,
                             n_classes)
        splitter = PartySplitter(X, settings, labels)
    # what every tree's first message must hold: the draws of one tree, class weights if asked
    splitter.count_total = n_total
    splitter.count_max = n_total if params.bootstrap else 1
    splitter.class_weighted = is_clf and params.class_weight is not None
    # and the draws themselves: every tree's counts are recomputed here from the job's seed
    # (a job has no sample weights), so the master cannot choose a tree's rows
    n_boot, bootstrap = resolve_max_samples(params.max_samples, n_rows), params.bootstrap
    splitter.draws = growth.tree_draws(seed, params.n_estimators,
                                       lambda rng: growth.bootstrap_counts(rng, n_rows, n_boot, None, bootstrap))
    # the first trees are the label holder's alone: any other party takes no part in them
    first_trees = cfg.label_holder_first_trees
    splitter.solo_trees, splitter.grows_solo = first_trees, table.has_label
    on_done = None
    if encrypted and table.has_label:
        splitter.channel.solo_trees = first_trees
        # the audit: what a party without the labels could read from the trees it sees
        splitter.channel.audit = audit.LabelAudit(held["codes"], settings) \
            if is_clf and cfg.instance_space != H.HIDDEN else None
        on_done = audit.holder_done(cfg, splitter.channel.audit)
    # the trees of a batch: at most what this party's own tree_batch and batch_memory_mb allow
    n_estimators = params.n_estimators
    batch = growth.resolve_tree_batch(
        cfg.tree_batch, n_estimators, cfg.batch_memory_mb,
        tree_grower.tree_state_bytes(n_rows, n_classes if is_clf else 3, encrypted, cfg.key_length))
    numba_threads.set_threads(resolve_n_jobs(cfg.n_jobs))
    splitter.crypto_workers = cfg.encrypt_workers or resolve_n_jobs(cfg.n_jobs, alone=True)
    tree_grower.warm_up(settings.split_method, settings.is_classification)
    manifest = {
        "role": "party", "rank": rank, "mode": cfg.spec.name, "n_parties": cfg.n_parties, "job_id": job_id,
        "run_id": setup["run_id"],
        "task": cfg.task, "params": params.to_dict(), "columns": table.columns,
        "categories": table.categories, "has_label": table.has_label,
        "label_column": cfg.label_column if table.has_label else None,
        "id_column": cfg.id_column, "split_method": settings.split_method,
        "n_estimators": n_estimators,
        "label_privacy": cfg.label_privacy, "random_state_used": seed,
        # the label holder's rank: a prediction's leaf sets go sealed to it (encrypted labels)
        "label_party": setup.get("label_party") if encrypted else None,
        # hidden: the parties without labels hold thresholds, not trees (prediction routes at the label holder)
        "instance_space": cfg.instance_space if encrypted else None,
        "label_holder_first_trees": first_trees,
        # this party's set-up (read, align, bin) and the memory it holds when growth starts
        "setup_seconds": time.perf_counter() - t0, "peak_rss_setup_mb": peak_rss_mb(),
        "rss_training_mb": current_rss_mb(),
    }
    if encrypted and held is not None:
        # the label holder writes the predictions: the class names stay with it
        manifest["classes"] = [str(c) for c in held["classes"]] if is_clf else None
    if start == 0:
        model_files.clear(folder)
    try:
        return serve_growth(comm, splitter, manifest, folder, start, batch, on_done=on_done)
    finally:
        close = getattr(splitter.channel, "close", None)   # the hidden space's randomness workers
        if close is not None:
            close()


def _n_classes(value, is_clf, n_rows, held):
    """The number of classes (1 for regression): bounded by the rows, the label
    holder's own count."""
    if not is_clf:
        return int_value(value, "'n_classes'", 1, 1)
    n = int_value(value, "'n_classes'", 2, max(2, min(n_rows, MAX_CLASSES)))
    if held is not None and n != held["classes"].size:
        raise bad_message(f"'n_classes' is {n}; the labels of this party have {held['classes'].size} classes")
    return n


def _plain_labels(y, is_clf, n_classes, n_rows, held):
    """The labels of the plain mode: a class code per aligned row, each class
    present (classes are the distinct labels), or finite targets; the label
    holder's must be its own."""
    if not (isinstance(y, np.ndarray) and y.shape == (n_rows,)
            and y.dtype.kind in ("iu" if is_clf else "f")):
        kind = "integer class codes" if is_clf else "float targets"
        raise bad_message(f"'y' must hold {n_rows} {kind} (one per aligned row), got {shown(y)}")
    if is_clf:
        if y.size and (y.min() < 0 or y.max() >= n_classes):
            raise bad_message(f"'y' holds class codes outside [0, {n_classes})")
        if not np.all(np.bincount(y.astype(np.int64), minlength=n_classes)):
            raise bad_message(f"'y' leaves some of its {n_classes} classes without rows")
    elif not np.all(np.isfinite(y)):
        raise bad_message("'y' holds targets that are not finite")
    if held is not None and not np.array_equal(y, held["codes"]):
        raise bad_message("'y' differs from this party's own labels")
    return y


def _encrypt_labels(comm, cfg, msg, y):
    """The label holder: make its own key pair, encode its labels and encrypt
    them with its own randomness; the public key, the public slot layout and
    the ciphertexts go to the master (which relays them), the private key and
    the grid step stay here.  A key_length above this party's own
    max_key_length is refused before any work."""
    paillier.check_key_bound(cfg.key_length, cfg.max_key_length, f"party {comm.rank}")
    what = f"label column {cfg.label_column!r}"
    codes, classes = encode_labels(label_array(y, cfg.task, what), cfg.task, what=what)
    params = validate(forest_params(cfg), cfg.task)
    n = codes.shape[0]
    n_total = resolve_max_samples(params.max_samples, n) if params.bootstrap else n
    if msg.get("n_total") != n_total or isinstance(msg.get("n_total"), bool):
        raise bad_message(f"'n_total' must be {n_total} (the draws of a tree), got "
                          f"{shown(msg.get('n_total'))}")
    if msg.get("slot_bits") != cfg.slot_bits or isinstance(msg.get("slot_bits"), bool):
        raise bad_message(f"'slot_bits' must be {cfg.slot_bits} (this party's settings), got "
                          f"{shown(msg.get('slot_bits'))}")
    public, private = paillier.generate_keypair(cfg.key_length, cfg.insecure_key, cfg.paillier_randomness)
    is_clf = cfg.task == CLASSIFICATION
    if is_clf:
        spec = encrypted.EncryptionSpec(True, classes.size, n_total, public.key_length, cfg.slot_bits)
        scored = codes
    else:
        codes, step, bias = encrypted.regression_grid(codes, n_total)
        spec = encrypted.EncryptionSpec(False, 1, n_total, public.key_length, cfg.slot_bits,
                                        step=step, bias=bias)
        scored = codes * step
    t0 = time.perf_counter()
    reply = {}
    if cfg.instance_space != H.HIDDEN:   # hidden: the rows are encrypted per level, in node slots
        # fresh randomness of its own key: by default every core of its host (the others wait)
        cts = encrypted.encrypt_own(private, spec.row_plaintexts(codes),
                                    cfg.encrypt_workers or resolve_n_jobs(cfg.n_jobs, alone=True))
        reply["blocks"] = public.serialize(cts)
    seconds = time.perf_counter() - t0
    # the grid step says how large the targets are: it stays here (the others read no sums)
    public_spec = dict(spec.to_dict(), step=1.0)
    comm.send(MASTER, dict(reply, public_key=public.to_bytes(), spec=public_spec, seconds=seconds))
    return {"codes": codes, "scored": scored, "public": public, "private": private, "spec": spec,
            "classes": classes}


def _paillier_splitter(comm, cfg, rank, X, settings, setup, held, n_classes, n_total):
    """The splitter of a party in the encrypted-label mode: the label holder
    decides the splits; every other party sums ciphertexts."""
    is_clf = settings.is_classification
    fc, lp = setup_parties(setup, cfg, rank)
    # the instance space is this party's own setting too: the master cannot choose another
    if setup.get("instance_space") != cfg.instance_space:
        raise InputError("instance_space", f"the job asks {shown(setup.get('instance_space'))}; this party's own "
                                           f"setting is {cfg.instance_space!r}")
    hidden = cfg.instance_space == H.HIDDEN
    if (held is not None) != (lp == rank):
        raise bad_message(f"'label_party' is {lp}; this party {'holds' if held is not None else 'does not hold'} "
                          "the labels")
    if held is not None:
        public = public_key(setup.get("public_key"), cfg)
        if public.fingerprint != held["public"].fingerprint:
            raise InputError(f"party {rank}", "the setup message carries another public key than this "
                                              "party's own")
        check_fields(setup.get("spec"), dict(held["spec"].to_dict(), step=1.0), "the slot layout")
        labels = HeldLabels(PlainLabels(held["scored"], is_clf, n_classes), held["codes"], held["spec"])
        sealer = sealed.Sealer.of(comm)
        splitter = PartySplitter(X, settings, labels,
                                 (H.HiddenHolder if hidden else KeyHolder)(ForestTrees(settings), held["spec"],
                                                                           held["private"], rank - 1, fc, sealer))
        splitter.channel.set_bins(sealed.open_bins(sealer, expect(comm.recv(MASTER), protocol.BINS)))
        splitter.channel.always_workers = cfg.encrypt_workers is not None
        comm.send(MASTER, {})
        return splitter
    public = public_key(setup.get("public_key"), cfg)
    spec = encrypted.party_spec(setup.get("spec"), is_clf, n_classes, n_total, cfg.key_length,
                                cfg.slot_bits)
    if hidden:
        sealer = sealed.Sealer.of(comm)
        splitter = PartySplitter(X, settings, H.HiddenLabels(), H.HiddenSums(spec, public, sealer, lp - 1))
        expect(comm.recv(MASTER), protocol.BINS)
        comm.send(MASTER, sealed.seal_bins(sealer, lp - 1, splitter))
        return splitter
    if setup.get("fingerprint") != public.fingerprint:
        raise InputError(f"party {rank}", f"the labels were encrypted under another public key "
                                          f"(fingerprint {str(setup.get('fingerprint'))[:40]}, the "
                                          f"relayed key is {public.fingerprint})")
    blocks = setup.get("labels")
    if not (isinstance(blocks, np.ndarray) and blocks.dtype == np.uint8 and blocks.ndim == 2):
        raise bad_message(f"'labels' must be blocks of ciphertext bytes, got {shown(blocks)}")
    if blocks.shape[0] != X.shape[0]:
        raise InputError(f"party {rank}", f"received {blocks.shape[0]} encrypted labels for "
                                          f"{X.shape[0]} aligned rows")
    labels_ct = public.deserialize(blocks, "encrypted labels")
    sealer = sealed.Sealer.of(comm)
    splitter = PartySplitter(X, settings, encrypted.EncryptedLabels(labels_ct, public),
                             encrypted.CipherSums(spec, public, sealer, lp - 1))
    expect(comm.recv(MASTER), protocol.BINS)
    comm.send(MASTER, sealed.seal_bins(sealer, lp - 1, splitter))
    return splitter


