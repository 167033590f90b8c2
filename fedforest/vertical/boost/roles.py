"""Vertical gradient boosting as a federated job (``--mode vertical_boost``):
the master's and the parties' training policies.

A boosting job runs the forest's job (:mod:`.master`, :mod:`.party`): the same
opening steps, the same grower and batch messages, the same model files and
the same one-round prediction.  What differs:

* the label holder sends its labels to the master (``plain`` mode); each
  round the master computes every training row's gradient and hessian from
  the labels and the current margins and sends them with the first message of
  the round's trees (:class:`~.boosting.BoostGrower`);
* a round's trees (one per output) are one batch, so every round is a
  checkpoint; each party's commit reply also holds its leaf row sets of the
  round's trees over all its aligned rows, from which the master learns every
  row's leaf (the one-round prediction's intersection) and so the new margins
  of the training and the validation rows;
* on resume the master asks once for the leaf sets of the stored trees;
* with early stopping the master tells the parties how many trees to keep.
"""
import time

import numpy as np

from ...crypto import paillier
from ...data.validation import CLASSIFICATION, encode_labels
from ...errors import InputError
from ...transport.base import expect
from ...tree import predict
from ...tree import threads as numba_threads
from ...tree.growth import SplitSettings, row_subsample, tree_draws, tree_seeds
from ...tree.params import resolve_n_jobs
from ...tree.predict import leaf_positions, leaves_of, pack_leaf_sets, party_leaf_sets, unpack_leaf_sets
from .. import encrypted_labels as encrypted
from .. import audit, messages, model_files, protocol, tree_grower
from ..common import (MASTER, RemoteParties, bar_round, check_encrypted_job, label_array, log, peak_rss_mb,
                      plural_rounds, progress_bar, report_training)
from ..job_master import open_training, received_key, relay_bins
from ..job_party import (check_setup, job_seed, open_training as party_open_training, serve_growth,
                         setup_parties)
from ..job_party import public_key as party_public_key
from ..model_output import prediction_roles
from ..messages import accept_settings, bad_message, check_fields, int_value, shown
from ..paillier import sealed
from ..paillier import hidden as H
from ..paillier.holder import KeyHolder
from ..paillier.relay import LabelHolderChooses, RowCount
from ..party_splitter import PartySplitter
from . import boosting as B
from . import encrypted_gradients as EG
from .gradient_rounds import GradientRounds
from .output import BoostOutput
from .params import BoostParams

__all__ = ["server_train", "client_train", "server_predict", "client_predict", "warm_up", "boost_params"]

STOP = "stop"              # master -> party: keep only the first trees (early stopping's best round)
LABEL_INFO = "label_info"  # master -> label holder (paillier): the classes and base margins
MAX_CLASSES = 1 << 16


# prediction: the shared one with boosting's model output
server_predict, client_predict = prediction_roles(BoostOutput())


def warm_up(cfg, command):
    """Load the kernels a rank of this job runs (from numba's cache)."""
    if command == "train":
        B.warm_up(cfg.split_method)
    predict.warm_up()


def boost_params(cfg):
    """The boosting settings of a resolved job configuration."""
    return BoostParams(**{k: cfg.values[k] for k in BoostParams.names()})


def _objective(task, n_classes):
    if task != CLASSIFICATION:
        return B.SQUARED_ERROR
    return B.LOGISTIC if n_classes == 2 else B.SOFTMAX


def _row_leaves(trees, leaf_msgs, n_rows):
    """Per tree, the leaf (node id) each row lands in, from the parties' leaf
    sets of these trees, intersected (the one-round prediction's Algorithm 4)."""
    per_party = [unpack_leaf_sets(m, trees, n_rows) for m in leaf_msgs]
    out = []
    for i, tree in enumerate(trees):
        leaves = leaves_of(tree)
        out.append(leaves[leaf_positions(n_rows, per_party, i, leaves.size)])
    return out


def leaves_from_growth(params, train, valid, n_rows):
    """Whether every row of the table trains every tree (no validation
    share, no row subsample), so that the rows' leaves are known from the
    growth: the master then fuses each round's commit with the next round's
    first message and the parties send no leaf sets with their commits."""
    return valid is None and params.subsample >= 1.0 and train.size == n_rows


def _leaf_sets_of(reply):
    """The leaf sets a party added to its commit reply (keys ``leaf.<name>``)."""
    return {k[5:]: v for k, v in reply.items() if k.startswith("leaf.")}


class _PlainGradients:
    """``label_privacy = "plain"``: the label holder sends its labels; the
    master keeps the margins, computes gradients and losses, decides early
    stopping and sends the gradients in the clear."""

    def __init__(self, comm, cfg, job, params):
        label_party = job.label_party
        y_raw = comm.exchange({label_party: {"op": protocol.SEND_LABELS}})[label_party]["y"]
        codes, classes = encode_labels(y_raw, cfg.task, what=f"label column {cfg.label_column!r}")
        self.classes = classes.tolist() if cfg.task == CLASSIFICATION else None
        self.n_classes = classes.size if cfg.task == CLASSIFICATION else 1
        self.objective = _objective(cfg.task, self.n_classes)
        self.k_out = B.n_outputs(self.objective, self.n_classes)
        self.target = np.asarray(codes, dtype=np.float64)
        self.train, self.valid = B.holdout(job.n_rows, params, job.random_state)
        self.base = B.base_margin(self.objective, self.target[self.train], np.ones(self.train.size), self.n_classes,
                                  params.base_score)
        self.margin = np.tile(self.base, (job.n_rows, 1))
        self.stopping = None if self.valid is None else B.EarlyStopping(params.early_stopping_rounds)
        self.learning_rate = params.learning_rate
        self.summary = {}

    def setup_message(self, r):
        return {}

    def grower(self, comm, gparams, settings, feature_counts, fuse):
        n = self.train.size
        grower = B.BoostGrower(RemoteParties(comm), B.GradientLabels(np.zeros(n), np.ones(n)), gparams, settings,
                               feature_counts)
        # the master knows every training row's leaf from its own partition when each
        # round's sample holds every row: it updates the margins without leaf sets
        grower.record_row_leaves = fuse
        return grower

    def manifest(self):
        return {"classes": self.classes, "base_margin": self.base.tolist()}

    def _loss(self):
        return B.loss(self.objective, self.target[self.valid], self.margin[self.valid])

    def close(self):
        pass

    def resume(self, rounds, trees, replies):
        """The margins (and validation losses) after the stored rounds, from
        the parties' leaf sets of the stored trees."""
        leaves = _row_leaves(trees, [_leaf_sets_of(r) for r in replies], self.margin.shape[0])
        for r in range(rounds):
            for k in range(self.k_out):
                t = r * self.k_out + k
                self.margin[:, k] += trees[t]["value"][leaves[t], 0]
            if self.stopping is not None:
                self.stopping.add(r, self._loss())

    def round(self, r, first):
        """The labels of round ``r``'s trees, or None when early stopping ends boosting here."""
        if self.stopping is not None and r > first and self.stopping.add(r - 1, self._loss()):
            return None
        g, h = B.gradients(self.objective, self.target[self.train], self.margin[self.train], None)
        return [B.GradientLabels(g[:, k], h[:, k]) for k in range(g.shape[1])]

    def scale(self, trees):
        """A round's trees are grown: their leaf values times the learning rate."""
        for tree in trees:
            tree["value"] = tree["value"] * self.learning_rate

    def grown(self, trees, acks):
        """Add a round's (scaled) leaf values to the margins (every row's leaf
        from the parties' leaf sets in their commit replies ``acks``, or from
        the growth when None)."""
        leaves = None if acks is None else _row_leaves(trees, [_leaf_sets_of(a) for a in acks],
                                                       self.margin.shape[0])
        for k, tree in enumerate(trees):
            leaf = tree.pop("row_leaf") if leaves is None else leaves[k]
            self.margin[:, k] += tree["value"][leaf, 0]

    def finish(self, rounds, more):
        """The best round (None without early stopping); ``more``: the last
        round grown has not been scored yet."""
        if self.stopping is None:
            return None
        if more:
            self.stopping.add(rounds - 1, self._loss())
        self.summary.update(validation_loss=self.stopping.history)
        return self.stopping.best


class _EncryptedGradients:
    """``label_privacy = "paillier"``: the label holder makes and keeps the
    key, the labels, the margins, the leaf values and the validation loss;
    every round it returns the gradients encrypted under its own key, which
    the master relays.  The master learns the number of classes, never their
    names, a margin, a gradient or a loss: only when to stop."""

    def __init__(self, comm, cfg, job, params):
        paillier.check_key_length(cfg.key_length, cfg.insecure_key)
        self.comm, self.cfg, self.lh = comm, cfg, job.label_party
        self.train, self.valid = B.holdout(job.n_rows, params, job.random_state)
        rep = comm.exchange({self.lh: {"op": LABEL_INFO, "random_state": job.random_state}})[self.lh]
        self.public = received_key(rep, cfg, self.lh)
        is_clf = cfg.task == CLASSIFICATION
        n_classes = rep.get("n_classes")
        if not (isinstance(n_classes, int) and not isinstance(n_classes, bool)
                and (2 <= n_classes <= min(job.n_rows, MAX_CLASSES) if is_clf else n_classes == 1)):
            raise encrypted.ProtocolIntegrityError(f"party {self.lh} sent {shown(n_classes)} as its number of "
                                                   "classes")
        self.classes, self.n_classes = None, n_classes
        self.objective = _objective(cfg.task, n_classes)
        self.k_out = B.n_outputs(self.objective, n_classes)
        self.spec = EG.GradientSpec(self.train.size, self.public.key_length, cfg.slot_bits)
        # instance space, chosen once: the other parties see each level's partition, or none
        self.hidden = cfg.instance_space == H.HIDDEN
        self.leaves = None    # the other parties' sealed leaf sets for the next 'gradients' message
        self.encrypt_seconds = 0.0
        self.summary = {"key_length": self.public.key_length, "paillier_key_holder": "label_holder",
                        "slot_bits": self.spec.width, "values_per_ciphertext": self.spec.per_ciphertext,
                        "instance_space": cfg.instance_space}
        log(cfg, f"Paillier key: {self.public.key_length} bits, made by party {self.lh}, which holds the "
                  "labels, encrypts the gradients and decides every split")

    def setup_message(self, r):
        """What the setup message adds for party rank ``r``."""
        return {"public_key": self.public.to_bytes(), "spec": self.spec.to_dict(),
                "feature_counts": list(self.feature_counts), "label_party": self.lh,
                "instance_space": self.cfg.instance_space}

    def grower(self, comm, gparams, settings, feature_counts, fuse):
        relay_bins(comm, self.lh)
        # the boosting grower with the label channel of the label holder
        channel = (H.HiddenChooses if self.hidden else LabelHolderChooses)(self.lh - 1, self.spec, self.public)
        return B.BoostGrower(RemoteParties(comm), RowCount(self.train.size), gparams, settings, feature_counts,
                             channel=channel)

    def manifest(self):
        return {}

    def close(self):
        pass

    def resume(self, rounds, trees, replies):
        self.leaves = self._sealed_sets(replies)

    def _sealed_sets(self, replies):
        """The other parties' leaf sets, sealed for the label holder, as an envelope for it."""
        items = []
        for p, rep in enumerate(replies):
            if p + 1 == self.lh:
                if any(k == "sealed" or str(k).startswith("leaf.") for k in rep):
                    raise encrypted.ProtocolIntegrityError(f"party {self.lh} (the label holder) sent its leaf "
                                                           "sets to the master")
                continue
            parts = sealed.from_reply(messages.TreeReply(rep, p), p, len(replies))
            if set(parts) != {(self.lh - 1, sealed.LEAF_SETS)}:
                raise encrypted.ProtocolIntegrityError(f"party {p + 1} sent {sorted(parts)} for its leaf sets")
            items.append((p, parts[(self.lh - 1, sealed.LEAF_SETS)]))
        return sealed.incoming(items)

    def _ask(self, msg):
        if self.leaves is not None:
            msg.update(self.leaves)
        t0 = time.perf_counter()
        rep = self.comm.exchange({self.lh: msg})[self.lh]
        self.encrypt_seconds += time.perf_counter() - t0
        self.leaves = None
        best = rep.get("best")
        if not (isinstance(rep.get("stop"), bool) and isinstance(best, int) and not isinstance(best, bool)
                and -1 <= best < msg["round"]):
            raise encrypted.ProtocolIntegrityError(f"party {self.lh} answered the round's gradients with "
                                                   f"{sorted(map(str, rep))[:8]}")
        self.best = None if best < 0 else best
        return rep

    def round(self, r, first):
        rep = self._ask({"op": EG.GRADIENTS, "round": r})
        if rep["stop"]:
            return None
        n = self.train.size
        blocks = rep.get("blocks")
        if self.hidden:     # no row ciphertexts per round: the label holder slots them per level
            if blocks is not None:
                raise encrypted.ProtocolIntegrityError(f"party {self.lh} sent a round's encrypted gradients "
                                                       "in the hidden instance space")
            return [EG.EncryptedRound(k, None) for k in range(self.k_out)]
        if not (isinstance(blocks, np.ndarray) and blocks.dtype == np.uint8
                and blocks.shape == (n * self.k_out, self.public.ciphertext_bytes)):
            raise encrypted.ProtocolIntegrityError(f"party {self.lh} sent {shown(blocks)} as encrypted gradients")
        return [EG.EncryptedRound(k, blocks[k * n:(k + 1) * n]) for k in range(self.k_out)]

    def scale(self, trees):
        pass     # the leaf values are the label holder's

    def grown(self, trees, acks):
        # the label holder adds the leaf values to its margins: from its own trees when the
        # round's sample held every row, else from the parties' leaf sets, sealed for it
        self.leaves = None if acks is None else self._sealed_sets(acks)

    def finish(self, rounds, more):
        if self.valid is None:
            return None
        self._ask({"op": EG.GRADIENTS, "round": rounds, "final": True})
        return self.best


def server_train(comm, cfg):
    """The master's side of a boosting job; returns the summary."""
    t_start = time.perf_counter()
    cfg.check_train()
    params = boost_params(cfg)
    if cfg.privacy.encrypted:
        paillier.check_key_length(cfg.key_length, cfg.insecure_key)
        check_encrypted_job(cfg)
    job = open_training(comm, cfg, params)
    # the label source, chosen once: encrypted at the label holder, or the labels at the master
    source = (_EncryptedGradients if cfg.privacy.encrypted else _PlainGradients)(comm, cfg, job, params)
    source.feature_counts = job.feature_counts
    try:
        return _boost(comm, cfg, params, job, source, t_start)
    finally:
        source.close()


def _boost(comm, cfg, params, job, source, t_start):
    """The master's training after the label source is set up."""
    n_rows, label_party, my_dir = job.n_rows, job.label_party, job.my_dir
    objective, train, valid, k_out, n_classes = source.objective, source.train, source.valid, source.k_out, \
        source.n_classes
    seed = job.random_state
    gparams = params.grower_params()
    settings = SplitSettings(gparams, train.size, False, 1, sum(job.feature_counts))
    settings.reveal_splits = bool(cfg.master_full_model)
    n_trees = params.n_estimators * k_out
    start = job.start
    if start % k_out or start > n_trees:
        raise InputError("model_dir", f"the checkpoint holds {start} trees, not whole rounds of {k_out}")
    # the trees of the first rounds split on the label holder's columns alone
    first_rounds = cfg.label_holder_first_trees
    tree_grower.check_label_holder_first(first_rounds, job.feature_counts, label_party - 1)
    # validation is complete: from here on work starts and files get written
    setup = {"op": protocol.SETUP, "start": start, "job_id": job.job_id, "run_id": job.run_id,
             "params": params.to_dict(), "task": cfg.task, "objective": objective, "n_classes": n_classes,
             "random_state": seed, "settings": settings.to_dict(), "label_holder_first_trees": first_rounds}
    comm.scatter({r: dict(setup, **source.setup_message(r)) for r in comm.clients})
    # Without a validation share or a row subsample every training row lies in every tree:
    # each round's commit travels with the next round's first message (one exchange fewer)
    fuse = leaves_from_growth(params, train, valid, n_rows)
    grower = source.grower(comm, gparams, settings, job.feature_counts, fuse)
    grower.label_holder_first(first_rounds * k_out, label_party - 1)
    manifest = {
        "role": "master", "rank": 0, "mode": cfg.spec.name, "n_parties": cfg.n_parties, "job_id": job.job_id,
        "run_id": job.run_id, "task": cfg.task, "params": params.to_dict(),
        "feature_counts": job.feature_counts, "label_party": label_party,
        "classes": source.manifest().get("classes"), "n_classes": n_classes, "n_estimators": n_trees,
        "full_model": bool(cfg.master_full_model), "split_method": params.split_method,
        "random_state_used": seed, "label_privacy": cfg.label_privacy,
        "label_holder_first_trees": first_rounds,
        "boost": dict({"objective": objective, "n_outputs": k_out, "learning_rate": params.learning_rate},
                      **({"base_margin": source.manifest()["base_margin"]} if "base_margin" in source.manifest()
                         else {})),
    }
    if start == 0:
        model_files.clear(my_dir)
    n_jobs = numba_threads.set_threads(resolve_n_jobs(cfg.n_jobs))
    B.warm_up(params.split_method)
    predict.warm_up()
    finished = bool(job.previous.get("complete"))   # resuming a finished model: nothing to grow
    if start and not finished:
        log(cfg, f"resuming from checkpoint: {start // k_out} of {params.n_estimators} rounds already built")
        stored = model_files.read_trees(my_dir, start, "master model")
        replies = comm.exchange({r: {"op": protocol.LEAF_SETS} for r in comm.clients})
        source.resume(start // k_out, stored, [replies[r] for r in comm.clients])
    seeds = tree_seeds(seed, n_trees)
    rounds0, bytes0, t_trees = comm.rounds, comm.bytes_sent, time.perf_counter()
    bar = progress_bar(cfg, total=params.n_estimators, initial=start // k_out, desc="boosting", unit="round")
    with model_files.kept_on_stop(my_dir, params.n_estimators, "rounds", k_out), \
            model_files.CheckpointWriter(my_dir) as writer:
        done, failed, stopped = start, False, False
        first = start // k_out
        carry, pending = None, None     # the commit messages not yet sent, and their round

        def stored(ids, trees, acks):
            """Count a round once every party stored all its trees; False if one did not."""
            nonlocal done
            if min(a["n_trees"] for a in acks) < ids[-1] + 1:
                return False
            done = ids[-1] + 1
            for t, tree in zip(ids, trees):
                writer.submit(t, tree, dict(manifest, n_trees=t + 1, complete=t + 1 == n_trees))
            bar.update(1)
            return True

        for r in range(first, first if finished else params.n_estimators):
            labels = source.round(r, first)
            if labels is None:      # early stopping: the last rounds did not improve
                stopped = True
                break
            ids = range(r * k_out, (r + 1) * k_out)
            if fuse:
                complete = []
                trees, commit = grower.grow_batch_fused(
                    [seeds[t] for t in ids], first=ids[0], labels=labels, carry=carry,
                    on_carried=lambda acks: complete.append(stored(*pending, acks)), on_round=bar_round(bar, ids))
                if not all(complete):
                    failed = True   # a round counts only when every party stored all its trees
                    break
                source.scale(trees)
                source.grown(trees, None)
                carry, pending = commit, (ids, trees)
                continue
            trees, acks = grower.grow_batch([seeds[t] for t in ids], first=ids[0], labels=labels,
                                            on_round=bar_round(bar, ids))
            source.scale(trees)
            if not stored(ids, trees, acks):
                failed = True
                break
            source.grown(trees, acks)
        if carry is not None and not failed:
            replies = RemoteParties(comm).exchange(carry)
            failed = not stored(*pending, replies)
    bar.close()
    best = None
    if not (failed or finished):
        best = source.finish(done // k_out, not stopped and done > start)
    train_seconds = time.perf_counter() - t_trees
    train_rounds, tree_bytes = comm.rounds - rounds0, comm.bytes_sent - bytes0
    n_built = done - start
    if best is not None and (best + 1) * k_out < done:
        # the model keeps the rounds up to the best one
        keep = (best + 1) * k_out
        comm.exchange({r: {"op": STOP, "keep": keep} for r in comm.clients})
        model_files.write_manifest(my_dir, dict(manifest, n_trees=keep, n_estimators=keep, complete=True,
                                                stopped_early=True))
        model_files.drop_trees(my_dir, keep, done)
        done = keep
    acks = comm.exchange({r: {"op": protocol.DONE} for r in comm.clients})
    if failed:
        raise RuntimeError(f"the parties stored only {done} of {n_trees} trees")
    party_bytes = sum(a["tree_bytes_sent"] for a in acks.values())
    summary = {
        "n_rows": n_rows, "rows_lost": job.lost, "n_train_rows": int(train.size),
        "n_valid_rows": 0 if valid is None else int(valid.size),
        "objective": objective, "n_outputs": k_out, "n_rounds": done // k_out, "n_trees": done,
        "trees_built": n_built, "train_seconds": train_seconds, "total_seconds": time.perf_counter() - t_start,
        "rounds_per_boosting_round": train_rounds / max(n_built // k_out, 1),
        "rounds_per_tree": train_rounds / max(n_built, 1), "rounds_total": train_rounds,
        "n_jobs": n_jobs, "peak_rss_mb": peak_rss_mb(),
        "bytes_per_tree": (tree_bytes + party_bytes) / max(n_built, 1), "job_id": job.job_id,
        "model_dirs": {0: my_dir, **{r: acks[r]["model_dir"] for r in comm.clients}},
        "label_privacy": cfg.label_privacy,
        "best_iteration": best if valid is not None else None,
        "validation_loss": None,
        **source.summary,
    }
    if cfg.privacy.encrypted:
        summary["label_round_seconds"] = source.encrypt_seconds
        # the label holder's audit: the two fractions, in the summary and the master's manifest
        summary[audit.AUDIT] = audit.master_received(cfg, acks[label_party], label_party, first_rounds)
        audit.add_to_manifest(my_dir, summary[audit.AUDIT])
    log(cfg, f"boosted {done // k_out} rounds ({done} trees) on {n_rows} rows in {train_seconds:.2f}s "
              f"({plural_rounds(train_rounds)})")
    return report_training(cfg, summary)


def client_train(comm, cfg):
    """A party's side of a boosting job."""
    rank = comm.rank
    cfg.check_train()
    params = boost_params(cfg)
    table, job_id, folder, n_done, X = party_open_training(comm, cfg)
    # boosting routes every aligned row through each round's trees: the values stay (float64)
    X = X.dense() if hasattr(X, "dense") else X
    n_rows = X.shape[0]
    msg = comm.recv(MASTER)
    held = None
    paillier_mode = cfg.privacy.encrypted
    if table.has_label:  # the master asks the label holder, and only it, for its labels
        y = label_array(table.y, cfg.task, f"label column {cfg.label_column!r}")
        codes, held = encode_labels(y, cfg.task, what=f"label column {cfg.label_column!r}")
        if paillier_mode:
            info = _label_info(comm, cfg, params, expect(msg, LABEL_INFO), codes, held, n_rows)
        else:
            expect(msg, protocol.SEND_LABELS)
            comm.send(MASTER, {"y": y})
        msg = comm.recv(MASTER)
    setup = expect(msg, protocol.SETUP)
    start = check_setup(setup, cfg, params, rank, job_id, n_done, folder)
    is_clf = cfg.task == CLASSIFICATION
    n_classes = int_value(setup.get("n_classes"), "'n_classes'", 2 if is_clf else 1,
                          max(2, min(n_rows, MAX_CLASSES)) if is_clf else 1)
    if table.has_label and is_clf and n_classes != held.size:
        raise bad_message(f"'n_classes' is {n_classes}; the labels of this party have {held.size} classes")
    objective = _objective(cfg.task, n_classes)
    if setup.get("objective") != objective:
        raise bad_message(f"'objective' must be {objective!r} for this task and {n_classes} classes, got "
                          f"{str(setup.get('objective'))[:40]!r}")
    k_out = B.n_outputs(objective, n_classes)
    seed = job_seed(setup.get("random_state"), params)
    if table.has_label and paillier_mode and seed != info["seed"]:
        raise bad_message("'random_state' differs from the one the label information was made with")
    train, valid = B.holdout(n_rows, params, seed)
    settings = accept_settings(setup.get("settings"), params.grower_params(), train.size, False, 1,
                                    len(table.columns), cfg.master_full_model)
    on_op = {}
    if not paillier_mode:
        splitter = PartySplitter(X[train], settings, B.RoundGradients())
    else:
        public = party_public_key(setup.get("public_key"), cfg)
        spec = EG.GradientSpec(train.size, public.key_length, cfg.slot_bits)
        check_fields(setup.get("spec"), spec.to_dict(), "the slot layout")
        fc, lp = setup_parties(setup, cfg, rank)
        # the instance space is this party's own setting too: the master cannot choose another
        hidden = setup.get("instance_space") == H.HIDDEN
        if setup.get("instance_space") != cfg.instance_space:
            raise InputError("instance_space", f"the job asks {shown(setup.get('instance_space'))}; this party's "
                                               f"own setting is {cfg.instance_space!r}")
        if hidden and not leaves_from_growth(params, train, valid, n_rows):
            raise bad_message("instance_space = 'hidden' with a validation share or a row subsample")
        if lp != rank and table.has_label or lp == rank and not table.has_label:
            raise bad_message(f"'label_party' is {lp}; this party {'holds' if table.has_label else 'does not hold'} "
                              "the labels")
        if table.has_label:
            if public.fingerprint != info["public"].fingerprint:
                raise InputError(f"party {rank}", "the setup message carries another public key than this "
                                                  "party's own")
            stopping = None if valid is None else B.EarlyStopping(params.early_stopping_rounds)
            holder = GradientRounds(spec, info["private"], objective, np.asarray(codes, dtype=np.float64), train,
                                    valid, info["base"], params.learning_rate, stopping,
                                    cfg.encrypt_workers or resolve_n_jobs(cfg.n_jobs, alone=True))
            sealer = sealed.Sealer.of(comm)
            holder.encrypt_rows = not hidden
            holder.always_workers = cfg.encrypt_workers is not None
            splitter = PartySplitter(X[train], settings, holder,
                                     (H.HiddenHolder if hidden else KeyHolder)(B.BoostTrees(settings), spec,
                                                                               info["private"], rank - 1, fc, sealer))
            splitter.channel.set_bins(sealed.open_bins(sealer, expect(comm.recv(MASTER), protocol.BINS)))
            splitter.channel.always_workers = cfg.encrypt_workers is not None
            comm.send(MASTER, {})
        else:
            sealer = sealed.Sealer.of(comm)
            splitter = PartySplitter(X[train], settings, H.HiddenLabels() if hidden else EG.EncryptedGradients(public),
                                     (H.HiddenSums if hidden else encrypted.CipherSums)(spec, public, sealer, lp - 1))
            expect(comm.recv(MASTER), protocol.BINS)
            comm.send(MASTER, sealed.seal_bins(sealer, lp - 1, splitter))
    if not (paillier_mode and table.has_label):
        holder = None
    # the trees of the first rounds are the label holder's alone: any other party takes no part in them
    first_trees = cfg.label_holder_first_trees * k_out
    splitter.solo_trees, splitter.grows_solo = first_trees, table.has_label
    on_done = None
    if holder is not None:
        splitter.channel.solo_trees = first_trees
        # the audit: what a party without the labels could read from the trees it sees
        splitter.channel.audit = audit.LabelAudit(np.asarray(codes)[train], settings) \
            if is_clf and not (paillier_mode and hidden) else None
        on_done = audit.holder_done(cfg, splitter.channel.audit)
    splitter.count_max = 1
    splitter.count_total = train.size if params.subsample >= 1.0 else None
    splitter.class_weighted = False
    n_trees = params.n_estimators * k_out
    if start % k_out:
        raise bad_message(f"'start' must be a whole round of {k_out} trees, got {start}")
    # every tree's row subsample is recomputed here from the job's seed (tree t: output
    # t % k_out of round t // k_out), so the master cannot choose the rows of a tree
    n_train, subsample = train.size, params.subsample
    splitter.draws = tree_draws(seed, n_trees, lambda rng: row_subsample(rng, n_train, subsample))
    numba_threads.set_threads(resolve_n_jobs(cfg.n_jobs))
    splitter.crypto_workers = cfg.encrypt_workers or resolve_n_jobs(cfg.n_jobs, alone=True)
    B.warm_up(settings.split_method)
    predict.warm_up()
    manifest = {
        "role": "party", "rank": rank, "mode": cfg.spec.name, "n_parties": cfg.n_parties, "job_id": job_id,
        "run_id": setup["run_id"], "task": cfg.task, "params": params.to_dict(), "columns": table.columns,
        "categories": table.categories, "has_label": table.has_label,
        "label_column": cfg.label_column if table.has_label else None,
        "id_column": cfg.id_column, "split_method": settings.split_method,
        "n_estimators": n_trees, "label_privacy": cfg.label_privacy, "random_state_used": seed,
        # the label holder's rank: a prediction's leaf sets go sealed to it (encrypted gradients)
        "label_party": lp if paillier_mode else None,
        # hidden: the parties without labels hold thresholds, not trees (prediction routes at the label holder)
        "instance_space": cfg.instance_space if paillier_mode else None,
        "label_holder_first_trees": cfg.label_holder_first_trees,
    }
    if holder is not None:
        # the label holder writes the predictions: the classes, the base margins and the
        # leaf values stay with it
        manifest.update(classes=[str(c) for c in held] if is_clf else None,
                        boost={"objective": objective, "base_margin": info["base"].tolist(), "n_outputs": k_out,
                               "learning_rate": params.learning_rate})
        if start:
            holder.rounds_done = None    # the first round's message brings the stored trees' leaves
        on_op[EG.GRADIENTS] = _gradients_handler(holder, folder, rank, start, k_out, manifest)
    if start == 0:
        model_files.clear(folder)
    method = settings.split_method

    def leaf_sets(trees):
        return pack_leaf_sets(party_leaf_sets(X, trees, method))

    def reply_with(sets, place):
        """Leaf sets as a reply: in the clear for the master (plain mode), else
        sealed for the label holder, which keeps its own."""
        if not paillier_mode:
            return {"leaf." + k: v for k, v in sets.items()}
        if holder is not None:
            holder.own_leaf_sets = sets
            return {}
        return sealed.seal_leaf_sets(sealer, lp - 1, sets, place)

    def on_commit(trees, reply, first):
        reply.update(reply_with(leaf_sets(trees), (first, sealed.ROUND_LEAVES)))

    def stored_leaf_sets(msg, t):
        if t != start or not start:
            raise bad_message("leaf sets of the stored trees are asked for only before growth resumes")
        return reply_with(leaf_sets(model_files.read_trees(folder, t, f"party {rank} model")),
                          (t, sealed.STORED_LEAVES)), t

    def stop(msg, t):
        keep = int_value(msg.get("keep"), "'keep'", k_out, t)
        if keep % k_out:
            raise bad_message(f"'keep' must be whole rounds of {k_out} trees, got {keep}")
        manifest.update(n_estimators=keep, stopped_early=keep < n_trees)
        model_files.write_manifest(folder, dict(manifest, n_trees=keep, complete=True))
        model_files.drop_trees(folder, keep, t)
        return {}, keep

    on_op.update({protocol.LEAF_SETS: stored_leaf_sets, STOP: stop})
    # where the rows' leaves are known from the growth, the master asks for no leaf sets
    try:
        return serve_growth(comm, splitter, manifest, folder, start, k_out,
                            None if leaves_from_growth(params, train, valid, n_rows) else on_commit, on_op, on_done)
    finally:
        # the label holder's randomness workers (its rounds', the hidden space's levels')
        for part in (splitter.labels, splitter.channel):
            close = getattr(part, "close", None)
            if close is not None:
                close()


def _label_info(comm, cfg, params, msg, codes, classes, n_rows):
    """The label holder, encrypted mode: make its own key pair and its base
    margins (from its training labels); the master gets the public key and the
    number of classes only.  A key_length above this party's own
    max_key_length is refused before any work."""
    paillier.check_key_bound(cfg.key_length, cfg.max_key_length, f"party {comm.rank}")
    seed = job_seed(msg.get("random_state"), params)
    is_clf = cfg.task == CLASSIFICATION
    n_classes = classes.size if is_clf else 1
    objective = _objective(cfg.task, n_classes)
    target = np.asarray(codes, dtype=np.float64)
    train, _ = B.holdout(n_rows, params, seed)
    base = np.asarray(B.base_margin(objective, target[train], np.ones(train.size), n_classes, params.base_score),
                      dtype=np.float64)
    public, private = paillier.generate_keypair(cfg.key_length, cfg.insecure_key, cfg.paillier_randomness)
    comm.send(MASTER, {"public_key": public.to_bytes(), "n_classes": int(n_classes)})
    return {"public": public, "private": private, "seed": seed, "base": base}


def _gradients_handler(holder, folder, rank, start, k_out, manifest):
    """The label holder's reply to a round's ``gradients`` message (see
    :meth:`~.gradient_rounds.GradientRounds.gradients`); the first one of a
    resumed run brings every row's leaf in the stored trees."""
    def handle(msg, t):
        # the parties' leaf sets of the last round (or, resuming, of the stored trees) come
        # sealed for this party: the master never learns a row's leaf
        allowed = {"op", "round", "final", *sealed.IN_KEYS}
        extra = sorted(str(k) for k in msg if k not in allowed)
        if extra:
            raise bad_message(f"a 'gradients' message may not hold {', '.join(map(repr, extra))}")
        if "final" in msg and msg["final"] is not True:
            raise bad_message("'final' must be true when given")
        if holder.rounds_done is None:
            stored = model_files.read_trees(folder, start, f"party {rank} model")
            if holder.own_leaf_sets is None or "sealed" not in msg:
                raise bad_message("the first round of a resumed run needs the stored trees' leaf sets")
            own, holder.own_leaf_sets = holder.own_leaf_sets, None
            leaves = sealed.leaves_from_sets(holder.splitter.channel.sealer, msg, own, stored, holder.y.shape[0],
                                             (start, sealed.STORED_LEAVES))
            holder.resume(start // k_out, [tree["value"][:, 0] for tree in stored], leaves)
            msg = {k: v for k, v in msg.items() if k not in sealed.IN_KEYS}
        t0 = time.perf_counter()
        reply = holder.gradients(msg)
        reply["seconds"] = time.perf_counter() - t0
        if holder.stopping is not None:
            # the validation losses stay with the label holder, in its own manifest
            manifest.update(validation_loss=list(holder.stopping.history),
                            best_iteration=holder.stopping.best)
        return reply, t
    return handle
