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
from ..tree.builder import SplitSettings, bad_message, int_value, tree_seeds
from ..tree.params import resolve_n_jobs
from ..tree.predict import leaf_positions, leaves_of, pack_leaf_sets, party_leaf_sets, unpack_leaf_sets
from ..transport.base import expect
from . import boosting as B
from . import model_files, protocol
from .boost_params import BoostParams
from .common import (MASTER, RemoteParties, label_array, log, peak_rss_mb, plural_rounds, progress_bar,
                     report_training)
from .master import master_predict as server_predict
from .master import open_training
from .party import check_setup, party_predict as client_predict
from .party import open_training as party_open_training
from .party import serve_growth

__all__ = ["server_train", "client_train", "server_predict", "client_predict", "warm_up", "boost_params"]

STOP = "stop"      # master -> party: keep only the first trees (early stopping's best round)
MAX_CLASSES = 1 << 16


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

    def __init__(self, objective, y_valid, rounds):
        self.objective, self.y, self.rounds = objective, y_valid, rounds
        self.history, self.best, self.best_loss = [], None, np.inf

    def add(self, r, margin_valid):
        """Record round ``r``; True when boosting should stop."""
        self.history.append(B.loss(self.objective, self.y, margin_valid))
        if self.history[-1] < self.best_loss:
            self.best, self.best_loss = r, self.history[-1]
            return False
        return r - self.best >= self.rounds


def server_train(comm, cfg):
    """The master's side of a boosting job; returns the summary."""
    t_start = time.perf_counter()
    cfg.check_train()
    params = boost_params(cfg)
    job = open_training(comm, cfg, params)
    n_rows, label_party, my_dir = job.n_rows, job.label_party, job.my_dir
    is_clf = cfg.task == CLASSIFICATION
    y_raw = comm.exchange({label_party: {"op": protocol.SEND_LABELS}})[label_party]["y"]
    codes, classes = encode_labels(y_raw, cfg.task, what=f"label column {cfg.label_column!r}")
    n_classes = classes.size if is_clf else 1
    objective = _objective(cfg.task, n_classes)
    k_out = B.n_outputs(objective, n_classes)
    target = np.asarray(codes, dtype=np.float64)
    seed = job.random_state
    train, valid = B.holdout(n_rows, params, seed)
    base = B.base_margin(objective, target[train], np.ones(train.size), n_classes, params.base_score)
    gparams = params.grower_params()
    settings = SplitSettings(gparams, train.size, False, 1, sum(job.feature_counts))
    settings.reveal_splits = bool(cfg.master_full_model)
    grower = B.BoostGrower(RemoteParties(comm), B.GradientLabels(np.zeros(train.size), np.ones(train.size)),
                           gparams, settings, job.feature_counts)
    n_trees = params.n_estimators * k_out
    start = job.start
    if start % k_out or start > n_trees:
        raise InputError("model_dir", f"the checkpoint holds {start} trees, not whole rounds of {k_out}")
    # validation is complete: from here on work starts and files get written
    comm.bcast({"op": protocol.SETUP, "start": start, "job_id": job.job_id, "run_id": job.run_id,
                "params": params.to_dict(), "task": cfg.task, "objective": objective, "n_classes": n_classes,
                "random_state": seed, "settings": settings.to_dict()})
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
    stopping = None if valid is None else \
        _EarlyStopping(objective, target[valid], params.early_stopping_rounds)
    finished = bool(job.previous.get("complete"))   # resuming a finished model: nothing to grow
    if start and not finished:
        log(cfg, f"resuming from checkpoint: {start // k_out} of {params.n_estimators} rounds already built")
        stored = model_files.read_trees(my_dir, start, "master model")
        replies = comm.exchange({r: {"op": protocol.LEAF_SETS} for r in comm.clients})
        values = _row_values(stored, [replies[r] for r in comm.clients], n_rows)
        for r in range(start // k_out):   # the margins and validation losses, round by round
            for k in range(k_out):
                margin[:, k] += values[r * k_out + k]
            if stopping is not None:
                stopping.add(r, margin[valid])
    seeds = tree_seeds(seed, n_trees)
    rounds0, bytes0, t_trees = comm.rounds, comm.bytes_sent, time.perf_counter()
    bar = progress_bar(cfg, total=params.n_estimators, initial=start // k_out, desc="boosting", unit="round")
    writer = model_files.CheckpointWriter(my_dir)
    done, failed = start, False
    for r in range(start // k_out, start // k_out if finished else params.n_estimators):
        g, h = B.gradients(objective, target[train], margin[train], None)
        ids = range(r * k_out, (r + 1) * k_out)
        trees, acks = grower.grow_batch([seeds[t] for t in ids], first=ids[0],
                                        labels=[B.GradientLabels(g[:, k], h[:, k]) for k in range(k_out)])
        if min(a["n_trees"] for a in acks) < ids[-1] + 1:
            failed = True   # a round counts only when every party stored all its trees
            break
        done = ids[-1] + 1
        for t, tree in zip(ids, trees):
            tree["value"] = tree["value"] * params.learning_rate
            writer.submit(t, tree, dict(manifest, n_trees=t + 1, complete=t + 1 == n_trees))
        bar.update(1)
        values = _row_values(trees, [_leaf_sets_of(a) for a in acks], n_rows)
        for k in range(k_out):
            margin[:, k] += values[k]
        if stopping is not None and stopping.add(r, margin[valid]):
            break
    writer.close()
    bar.close()
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
    }
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
    if table.has_label:  # the master asks the label holder, and only it, for its labels
        expect(msg, protocol.SEND_LABELS)
        y = label_array(table.y, cfg.task, f"label column {cfg.label_column!r}")
        comm.send(MASTER, {"y": y})
        held = encode_labels(y, cfg.task, what=f"label column {cfg.label_column!r}")[1]
        msg = comm.recv(MASTER)
    setup = expect(msg, protocol.SETUP)
    start = check_setup(setup, cfg, params, rank, job_id, n_done, folder)
    is_clf = cfg.task == CLASSIFICATION
    n_classes = int_value(setup.get("n_classes"), "'n_classes'", 2 if is_clf else 1,
                          max(2, min(n_rows, MAX_CLASSES)) if is_clf else 1)
    if held is not None and is_clf and n_classes != held.size:
        raise bad_message(f"'n_classes' is {n_classes}; the labels of this party have {held.size} classes")
    objective = _objective(cfg.task, n_classes)
    if setup.get("objective") != objective:
        raise bad_message(f"'objective' must be {objective!r} for this task and {n_classes} classes, got "
                          f"{str(setup.get('objective'))[:40]!r}")
    k_out = B.n_outputs(objective, n_classes)
    seed = setup.get("random_state")
    if params.random_state is not None and seed != params.random_state:
        raise bad_message(f"'random_state' must be this party's {params.random_state}, got {str(seed)[:40]}")
    seed = int_value(seed, "'random_state'", 0, 2 ** 63 - 1)
    train, _ = B.holdout(n_rows, params, seed)
    settings = SplitSettings.accept(setup.get("settings"), params.grower_params(), train.size, False, 1,
                                    len(table.columns), cfg.master_full_model)
    splitter = B.BoostSplitter(X[train], settings)
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

    return serve_growth(comm, splitter, manifest, folder, start, k_out, on_commit,
                        {protocol.LEAF_SETS: stored_leaf_sets, STOP: stop})

