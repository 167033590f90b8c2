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

from ..data.validation import CLASSIFICATION, encode_labels
from ..errors import InputError
from ..tree import predict
from ..tree import threads as numba_threads
from ..crypto import paillier
from ..tree.builder import SplitSettings, bad_message, check_fields, int_value, shown, tree_seeds
from ..tree.params import resolve_n_jobs
from ..tree.predict import leaf_positions, leaves_of, pack_leaf_sets, party_leaf_sets, unpack_leaf_sets
from ..transport.base import expect
from . import boosting as B
from . import encrypted_gradients as EG
from . import encrypted_labels as encrypted
from . import model_files, protocol
from .boost_params import BoostParams
from .common import (MASTER, RemoteParties, label_array, log, peak_rss_mb, plural_rounds, progress_bar,
                     report_training)
from .master import master_predict as server_predict
from .master import open_training
from .party import check_setup, party_predict as client_predict
from .party import public_key as party_public_key
from .party import open_training as party_open_training
from .party import serve_growth

__all__ = ["server_train", "client_train", "server_predict", "client_predict", "warm_up", "boost_params"]

STOP = "stop"              # master -> party: keep only the first trees (early stopping's best round)
LABEL_INFO = "label_info"  # master -> label holder (paillier): the classes and base margins
MAX_CLASSES = 1 << 16
BACKGROUND_FACTORS = 2048  # rounds needing at least this many encryption factors get them made ahead


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


def _row_values(trees, leaf_msgs, n_rows):
    """Per tree, the leaf value each row lands in; the rows' leaves come from
    the parties' leaf sets of these trees, intersected (the one-round
    prediction's Algorithm 4)."""
    per_party = [unpack_leaf_sets(m, trees, n_rows) for m in leaf_msgs]
    out = []
    for i, tree in enumerate(trees):
        leaves = leaves_of(tree)
        out.append(tree["value"][leaves[leaf_positions(n_rows, per_party, i, leaves.size)], 0])
    return out


def _leaf_sets_of(reply):
    """The leaf sets a party added to its commit reply (keys ``leaf.<name>``)."""
    return {k[5:]: v for k, v in reply.items() if k.startswith("leaf.")}


class _EarlyStopping:
    """The validation loss after every round and the best round so far."""

    def __init__(self, rounds):
        self.rounds = rounds
        self.history, self.best, self.best_loss = [], None, np.inf

    def add(self, r, loss):
        """Record the loss after round ``r``; True when boosting should stop."""
        self.history.append(float(loss))
        if self.history[-1] < self.best_loss:
            self.best, self.best_loss = r, self.history[-1]
            return False
        return r - self.best >= self.rounds


class _PlainGradients:
    """``label_privacy = "plain"``: the label holder sends its labels; the
    master computes gradients and losses and sends the gradients in the clear."""

    def __init__(self, comm, cfg, job, params):
        label_party = job.label_party
        y_raw = comm.exchange({label_party: {"op": protocol.SEND_LABELS}})[label_party]["y"]
        codes, self.classes = encode_labels(y_raw, cfg.task, what=f"label column {cfg.label_column!r}")
        n_classes = self.classes.size if cfg.task == CLASSIFICATION else 1
        self.objective = _objective(cfg.task, n_classes)
        self.target = np.asarray(codes, dtype=np.float64)
        self.train, self.valid = B.holdout(job.n_rows, params, job.random_state)
        self.base = B.base_margin(self.objective, self.target[self.train], np.ones(self.train.size), n_classes,
                                  params.base_score)
        self.summary = {}

    def grower(self, comm, gparams, settings, feature_counts):
        n = self.train.size
        return B.BoostGrower(RemoteParties(comm), B.GradientLabels(np.zeros(n), np.ones(n)), gparams, settings,
                             feature_counts)

    def losses(self, margins):
        return [B.loss(self.objective, self.target[self.valid], m[self.valid]) for m in margins]

    def close(self):
        pass

    def round(self, margin, with_loss, more=False):
        """The labels of a round's trees and, if asked, the validation loss at
        ``margin`` (``more``: another round follows)."""
        g, h = B.gradients(self.objective, self.target[self.train], margin[self.train], None)
        k_out = g.shape[1]
        return ([B.GradientLabels(g[:, k], h[:, k]) for k in range(k_out)],
                self.losses([margin])[0] if with_loss else None)


class _EncryptedGradients:
    """``label_privacy = "paillier"``: the master holds the private key; the
    label holder computes gradients and losses from the margins the master
    sends and returns the gradients encrypted, which the master relays."""

    def __init__(self, comm, cfg, job, params):
        paillier.check_key_length(cfg.key_length, cfg.insecure_key)
        self.comm, self.cfg, self.lh = comm, cfg, job.label_party
        self.public, self.private = paillier.generate_keypair(cfg.key_length, cfg.insecure_key)
        log(cfg, f"Paillier key: {self.public.key_length} bits; party {self.lh} encrypts the gradients")
        rep = comm.exchange({self.lh: {"op": LABEL_INFO, "random_state": job.random_state,
                                       "public_key": self.public.to_bytes()}})[self.lh]
        is_clf = cfg.task == CLASSIFICATION
        self.classes = np.asarray(rep.get("classes")) if is_clf else np.empty(0)
        n_classes = self.classes.size if is_clf else 1
        if is_clf and not (self.classes.ndim == 1 and 2 <= n_classes <= MAX_CLASSES):
            raise encrypted.ProtocolIntegrityError(f"party {self.lh} sent {shown(rep.get('classes'))} as classes")
        self.objective = _objective(cfg.task, n_classes)
        self.k_out = B.n_outputs(self.objective, n_classes)
        base = rep.get("base_margin")
        if not (isinstance(base, np.ndarray) and base.dtype == np.float64 and base.shape == (self.k_out,)
                and np.all(np.isfinite(base))):
            raise encrypted.ProtocolIntegrityError(f"party {self.lh} sent {shown(base)} as base margins")
        self.base = base
        self.train, self.valid = B.holdout(job.n_rows, params, job.random_state)
        self.spec = EG.GradientSpec(self.train.size, self.public.key_length, cfg.slot_bits)
        self.seconds = {"label_randomness_seconds": 0.0, "label_encrypt_seconds": 0.0}
        self.maker = None
        if cfg.label_randomness == "master":
            # the factors of every round are made in worker processes while the
            # parties grow the previous round's trees (and, for the first round,
            # while the job sets up): the master waits only for what is not ready, and
            # the parties wait for that too, so the maker takes every core of the host
            self.maker = paillier.RandomnessMaker(self.private, resolve_n_jobs(cfg.n_jobs, alone=True))
            self._ahead = self._factors_needed() >= BACKGROUND_FACTORS
            if self._ahead:
                self.maker.start(self._factors_needed())
        self.summary = {"key_length": self.public.key_length, "label_randomness": cfg.label_randomness,
                        "slot_bits": self.spec.width, "values_per_ciphertext": self.spec.per_ciphertext}

    def setup_message(self, r):
        """What the setup message adds for party rank ``r``."""
        return {"public_key": self.public.to_bytes(), "spec": self.spec.to_dict()}

    def grower(self, comm, gparams, settings, feature_counts):
        others = [r for r in comm.clients if r != self.lh]
        bins = comm.exchange({r: {"op": protocol.BINS} for r in others}) if others else {}
        party_bins = [None if r == self.lh else (bins[r]["n_bins"], bins[r]["skip"]) for r in comm.clients]
        info = encrypted.LabelInfo(False, 1, self.train.size)
        self.grower_ = EG.PaillierBoostGrower(RemoteParties(comm), info, gparams, settings, feature_counts,
                                              self.private, self.spec, self.lh - 1, party_bins)
        return self.grower_

    def _factors_needed(self):
        return self.train.size * self.k_out

    def close(self):
        if self.maker is not None:
            self.maker.close()

    def _ask(self, margins, with_loss, encrypt, more=False):
        msg = {"op": EG.GRADIENTS, "margins": np.ascontiguousarray(margins, dtype=np.float64),
               "losses": bool(with_loss and self.valid is not None), "encrypt": bool(encrypt)}
        if encrypt and self.maker is not None:
            t0 = time.perf_counter()
            factors = self.maker.take(self._factors_needed())
            if more and self._ahead:
                self.maker.start(self._factors_needed())
            msg["randomness"] = self.public.serialize(factors)
            self.seconds["label_randomness_seconds"] += time.perf_counter() - t0
        rep = self.comm.exchange({self.lh: msg})[self.lh]
        losses = rep.get("valid_loss")
        n_losses = margins.shape[0] if msg["losses"] else 0
        if not (isinstance(losses, np.ndarray) and losses.dtype == np.float64 and losses.shape == (n_losses,)):
            raise encrypted.ProtocolIntegrityError(f"party {self.lh} sent {shown(losses)} as validation losses")
        return rep, losses

    def losses(self, margins):
        return list(self._ask(np.stack(margins), True, False)[1])

    def round(self, margin, with_loss, more=False):
        rep, losses = self._ask(margin[None], with_loss, True, more)
        if rep.get("fingerprint") != self.public.fingerprint:
            raise encrypted.ProtocolIntegrityError(f"party {self.lh} encrypted the gradients under another key")
        n = self.train.size
        blocks = rep.get("blocks")
        if not (isinstance(blocks, np.ndarray) and blocks.dtype == np.uint8
                and blocks.shape == (n * self.k_out, self.public.ciphertext_bytes)):
            raise encrypted.ProtocolIntegrityError(f"party {self.lh} sent {shown(blocks)} as encrypted gradients")
        self.seconds["label_encrypt_seconds"] += float(rep.get("seconds", 0.0))
        steps = EG.check_steps(rep.get("steps"), self.k_out)
        labels = [EG.EncryptedRound(k, blocks[k * n:(k + 1) * n], steps[k]) for k in range(self.k_out)]
        return labels, (float(losses[0]) if losses.size else None)


def server_train(comm, cfg):
    """The master's side of a boosting job; returns the summary."""
    t_start = time.perf_counter()
    cfg.check_train()
    params = boost_params(cfg)
    job = open_training(comm, cfg, params)
    source = (_EncryptedGradients if cfg.label_privacy == "paillier" else _PlainGradients)(comm, cfg, job, params)
    try:
        return _boost(comm, cfg, params, job, source, t_start)
    finally:
        source.close()


def _boost(comm, cfg, params, job, source, t_start):
    """The master's training after the label source is set up."""
    n_rows, label_party, my_dir = job.n_rows, job.label_party, job.my_dir
    is_clf = cfg.task == CLASSIFICATION
    classes, objective, train, valid, base = source.classes, source.objective, source.train, source.valid, \
        source.base
    n_classes = classes.size if is_clf else 1
    k_out = B.n_outputs(objective, n_classes)
    seed = job.random_state
    gparams = params.grower_params()
    settings = SplitSettings(gparams, train.size, False, 1, sum(job.feature_counts))
    settings.reveal_splits = bool(cfg.master_full_model)
    n_trees = params.n_estimators * k_out
    start = job.start
    if start % k_out or start > n_trees:
        raise InputError("model_dir", f"the checkpoint holds {start} trees, not whole rounds of {k_out}")
    # validation is complete: from here on work starts and files get written
    setup = {"op": protocol.SETUP, "start": start, "job_id": job.job_id, "run_id": job.run_id,
             "params": params.to_dict(), "task": cfg.task, "objective": objective, "n_classes": n_classes,
             "random_state": seed, "settings": settings.to_dict()}
    if cfg.label_privacy == "paillier":
        comm.scatter({r: dict(setup, **source.setup_message(r)) for r in comm.clients})
    else:
        comm.bcast(setup)
    grower = source.grower(comm, gparams, settings, job.feature_counts)
    manifest = {
        "role": "master", "rank": 0, "mode": cfg.spec.name, "n_parties": cfg.n_parties, "job_id": job.job_id,
        "run_id": job.run_id, "task": cfg.task, "params": params.to_dict(),
        "feature_counts": job.feature_counts, "label_party": label_party,
        "classes": classes.tolist() if is_clf else None, "n_estimators": n_trees,
        "full_model": bool(cfg.master_full_model), "split_method": params.split_method,
        "random_state_used": seed, "label_privacy": cfg.label_privacy,
        "boost": {"objective": objective, "base_margin": base.tolist(), "n_outputs": k_out,
                  "learning_rate": params.learning_rate},
    }
    if start == 0:
        model_files.clear(my_dir)
    n_jobs = numba_threads.set_threads(resolve_n_jobs(cfg.n_jobs))
    B.warm_up(params.split_method)
    predict.warm_up()
    margin = np.tile(base, (n_rows, 1))
    stopping = None if valid is None else _EarlyStopping(params.early_stopping_rounds)
    finished = bool(job.previous.get("complete"))   # resuming a finished model: nothing to grow
    if start and not finished:
        log(cfg, f"resuming from checkpoint: {start // k_out} of {params.n_estimators} rounds already built")
        stored = model_files.read_trees(my_dir, start, "master model")
        replies = comm.exchange({r: {"op": protocol.LEAF_SETS} for r in comm.clients})
        values = _row_values(stored, [replies[r] for r in comm.clients], n_rows)
        after = []
        for r in range(start // k_out):   # the margins after every stored round
            for k in range(k_out):
                margin[:, k] += values[r * k_out + k]
            after.append(margin.copy())
        if stopping is not None:
            for r, loss in enumerate(source.losses(after)):
                stopping.add(r, loss)
    seeds = tree_seeds(seed, n_trees)
    rounds0, bytes0, t_trees = comm.rounds, comm.bytes_sent, time.perf_counter()
    bar = progress_bar(cfg, total=params.n_estimators, initial=start // k_out, desc="boosting", unit="round")
    with model_files.CheckpointWriter(my_dir) as writer:
        done, failed, stopped = start, False, False
        first = start // k_out
        # Without a validation share or a row subsample the master knows every training
        # row's leaf from its own partition: it updates the margins itself and sends each
        # round's commit with the next round's first message (one exchange fewer per round).
        fuse = stopping is None and params.subsample >= 1.0 and train.size == n_rows
        grower.record_row_leaves = fuse
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
            # the validation loss after the previous round comes with this round's gradients
            labels, loss = source.round(margin, stopping is not None and r > first, r + 1 < params.n_estimators)
            if loss is not None and stopping.add(r - 1, loss):
                stopped = True
                break
            ids = range(r * k_out, (r + 1) * k_out)
            if fuse:
                complete = []
                trees, commit = grower.grow_batch_fused(
                    [seeds[t] for t in ids], first=ids[0], labels=labels, carry=carry,
                    on_carried=lambda acks: complete.append(stored(*pending, acks)))
                if not all(complete):
                    failed = True   # a round counts only when every party stored all its trees
                    break
                for k, tree in enumerate(trees):
                    tree["value"] = tree["value"] * params.learning_rate
                    margin[:, k] += tree["value"][tree.pop("row_leaf"), 0]
                carry, pending = commit, (ids, trees)
                continue
            trees, acks = grower.grow_batch([seeds[t] for t in ids], first=ids[0], labels=labels)
            for tree in trees:
                tree["value"] = tree["value"] * params.learning_rate
            if not stored(ids, trees, acks):
                failed = True
                break
            values = _row_values(trees, [_leaf_sets_of(a) for a in acks], n_rows)
            for k in range(k_out):
                margin[:, k] += values[k]
        if carry is not None and not failed:
            replies = RemoteParties(comm).exchange(carry)
            failed = not stored(*pending, replies)
    bar.close()
    if stopping is not None and not (failed or stopped or finished) and done > start:
        stopping.add(done // k_out - 1, source.losses([margin])[0])
    train_seconds = time.perf_counter() - t_trees
    train_rounds, tree_bytes = comm.rounds - rounds0, comm.bytes_sent - bytes0
    n_built = done - start
    if not (failed or finished) and stopping is not None and (stopping.best + 1) * k_out < done:
        # the model keeps the rounds up to the best one
        keep = (stopping.best + 1) * k_out
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
        "best_iteration": None if stopping is None else stopping.best,
        "validation_loss": None if stopping is None else stopping.history,
        **source.summary, **getattr(source, "seconds", {}),
    }
    if cfg.label_privacy == "paillier":
        summary["decrypts_per_tree"] = grower.decrypted / max(n_built, 1)
    log(cfg, f"boosted {done // k_out} rounds ({done} trees) on {n_rows} rows in {train_seconds:.2f}s "
              f"({plural_rounds(train_rounds)})")
    return report_training(cfg, summary)


def client_train(comm, cfg):
    """A party's side of a boosting job."""
    rank = comm.rank
    cfg.check_train()
    params = boost_params(cfg)
    table, job_id, folder, n_done, X = party_open_training(comm, cfg)
    n_rows = X.shape[0]
    msg = comm.recv(MASTER)
    held = None
    paillier_mode = cfg.label_privacy == "paillier"
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
    seed = _seed(setup.get("random_state"), params)
    if table.has_label and paillier_mode and seed != info["seed"]:
        raise bad_message("'random_state' differs from the one the label information was made with")
    train, valid = B.holdout(n_rows, params, seed)
    settings = SplitSettings.accept(setup.get("settings"), params.grower_params(), train.size, False, 1,
                                    len(table.columns), cfg.master_full_model)
    on_op = {}
    if not paillier_mode:
        splitter = B.BoostSplitter(X[train], settings)
    else:
        public = party_public_key(setup.get("public_key"), cfg)
        spec = EG.GradientSpec(train.size, public.key_length, cfg.slot_bits)
        check_fields(setup.get("spec"), spec.to_dict(), "the slot layout")
        if table.has_label:
            if public.fingerprint != info["public"].fingerprint:
                raise InputError(f"party {rank}", "the master's public key changed during setup")
            splitter = EG.GradientHolderSplitter(X, settings, spec, public, objective,
                                                 np.asarray(codes, dtype=np.float64), train, valid)
            on_op[EG.GRADIENTS] = _gradients_handler(cfg, splitter, public, k_out)
        else:
            splitter = EG.EncryptedGradientSplitter(X[train], settings, spec, public)
            expect(comm.recv(MASTER), protocol.BINS)
            comm.send(MASTER, {"n_bins": splitter.n_bins, "skip": splitter.skip})
    splitter.count_max = 1
    splitter.count_total = train.size if params.subsample >= 1.0 else None
    splitter.class_weighted = False
    n_trees = params.n_estimators * k_out
    if start % k_out:
        raise bad_message(f"'start' must be a whole round of {k_out} trees, got {start}")
    numba_threads.set_threads(resolve_n_jobs(cfg.n_jobs))
    B.warm_up(settings.split_method)
    predict.warm_up()
    manifest = {
        "role": "party", "rank": rank, "mode": cfg.spec.name, "n_parties": cfg.n_parties, "job_id": job_id,
        "run_id": setup["run_id"], "task": cfg.task, "params": params.to_dict(), "columns": table.columns,
        "categories": table.categories, "has_label": table.has_label,
        "label_column": cfg.label_column if table.has_label else None,
        "id_column": cfg.id_column, "split_method": settings.split_method,
        "n_estimators": n_trees, "label_privacy": cfg.label_privacy,
    }
    if start == 0:
        model_files.clear(folder)
    method = settings.split_method

    def leaf_sets(trees):
        return pack_leaf_sets(party_leaf_sets(X, trees, method))

    def on_commit(trees, reply):
        reply.update({"leaf." + k: v for k, v in leaf_sets(trees).items()})

    def stored_leaf_sets(msg, t):
        if t != start or not start:
            raise bad_message("leaf sets of the stored trees are asked for only before growth resumes")
        return leaf_sets(model_files.read_trees(folder, t, f"party {rank} model")), t

    def stop(msg, t):
        keep = int_value(msg.get("keep"), "'keep'", k_out, t)
        if keep % k_out:
            raise bad_message(f"'keep' must be whole rounds of {k_out} trees, got {keep}")
        manifest.update(n_estimators=keep, stopped_early=keep < n_trees)
        model_files.write_manifest(folder, dict(manifest, n_trees=keep, complete=True))
        model_files.drop_trees(folder, keep, t)
        return {}, keep

    on_op.update({protocol.LEAF_SETS: stored_leaf_sets, STOP: stop})
    return serve_growth(comm, splitter, manifest, folder, start, k_out, on_commit, on_op)


def _seed(value, params):
    """The seed the master sends: the party's own random_state when it sets one."""
    if params.random_state is not None and value != params.random_state:
        raise bad_message(f"'random_state' must be this party's {params.random_state}, got {str(value)[:40]}")
    return int_value(value, "'random_state'", 0, 2 ** 63 - 1)


def _label_info(comm, cfg, params, msg, codes, classes, n_rows):
    """The label holder, encrypted mode: the classes and the base margins the
    master needs (the labels stay here)."""
    public = party_public_key(msg.get("public_key"), cfg)
    seed = _seed(msg.get("random_state"), params)
    is_clf = cfg.task == CLASSIFICATION
    n_classes = classes.size if is_clf else 1
    objective = _objective(cfg.task, n_classes)
    target = np.asarray(codes, dtype=np.float64)
    train, _ = B.holdout(n_rows, params, seed)
    base = B.base_margin(objective, target[train], np.ones(train.size), n_classes, params.base_score)
    comm.send(MASTER, {"classes": classes if is_clf else None, "base_margin": np.asarray(base, dtype=np.float64)})
    return {"public": public, "seed": seed}


def _gradients_handler(cfg, splitter, public, k_out):
    """The label holder's reply to a round's ``gradients`` message."""
    def handle(msg, t):
        factors = None
        if msg.get("encrypt") and ("randomness" in msg) != (cfg.label_randomness == "master"):
            raise bad_message(f"with label_randomness = {cfg.label_randomness!r} the master "
                              f"{'sends' if cfg.label_randomness == 'master' else 'does not send'} "
                              "'randomness'")
        if msg.get("encrypt") and "randomness" in msg:
            factors = public.factors_from_blocks(msg["randomness"], "randomness from the master")
        t0 = time.perf_counter()
        reply = splitter.encrypt_round(msg, k_out, factors, cfg.encrypt_workers)
        reply["seconds"] = time.perf_counter() - t0
        return reply, t
    return handle

