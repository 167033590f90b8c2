"""ICDTA4FL's roles (mode ``icdta4fl``; see the package docstring and docs/horizontal.md).

Rounds: every client fits its own tree and sends it (``train_local``); every
client scores all trees on its rows (``evaluate``); the server filters the
trees by their scores on the other clients, merges the kept trees' rules and
grows the global tree, which goes back to every client with the merged rules
(final round).
"""
import time
import warnings

import numpy as np

from ...errors import InputError
from ...federation.metrics import class_scores
from ...federation import protocol
from ...federation.rounds import ask
from ...tree.id3 import id3_from_rules
from ...tree.rules import (CATEGORICAL, NUMERIC, MergeStats, RuleArrays, aggregate, leaf_rules, leaf_votes,
                           tree_from_rules)
from . import cells as cover
from ..client_tree import TRAIN_LOCAL, run_tree_client, run_tree_server
from ..message_checks import bad_message, field_of, number_array
from ..model_files import tree_proba
from ..setup import log
from .. import binned_id3 as binned
from ..binned_id3 import explain as binned_explain
from ..binned_id3 import predict_proba  # noqa: F401  (the mode's local role)

EVALUATE = "evaluate"        # server -> client: score these trees on your rows
COVER = "cover"              # server -> client: count your rows in each combination of the kept trees' leaves
COUNT = "count"              # server -> client: count your rows at each node of the global tree
#: rule_votes "rows": the rows' worth of the merged trees' equal vote added to each merged rule's estimates
PRIOR_ROWS = 1.0


def cross_scores(matrix):
    """Each tree's mean score over the clients that did not train it:
    ``matrix[evaluating client, tree]`` -> one score per tree (with one client,
    its own score)."""
    m = np.asarray(matrix, dtype=np.float64)
    n = m.shape[0]
    if n == 1:
        return m[0].copy()
    off = ~np.eye(n, dtype=bool)
    return np.array([m[off[:, i], i].mean() for i in range(n)])


def filter_trees(scores, how, percentile=75.0, min_trees=1):
    """Indices (ascending) of the trees whose score reaches the filter
    threshold, and at least the ``min_trees`` best scored (ties: lower index)."""
    scores = np.asarray(scores, dtype=np.float64)
    if how == "none" or scores.size <= 1:
        return np.arange(scores.size)
    cut = {"mean": np.mean, "median": np.median}.get(how)
    threshold = cut(scores) if cut else np.percentile(scores, percentile)
    kept = set(np.flatnonzero(scores >= threshold - 1e-12).tolist())
    kept |= set(np.argsort(-scores, kind="stable")[:min_trees].tolist())
    return np.array(sorted(kept), dtype=np.int64)


def rule_arrays(merged, n_features, tree_type):
    """The merged rules as the arrays every client saves (``rules.npz``)."""
    arrays = RuleArrays.from_rules(merged, n_features)
    common = {"dist": arrays.dist, "support": arrays.support, "mass": arrays.mass}
    if tree_type == "id3":
        return dict(common, val=arrays.cond)
    return dict(common, lo=arrays.cond[0], hi=arrays.cond[1])


def _build(comm, job):
    cfg, enc, summary = job.cfg, job.enc, job.summary
    clients = comm.clients
    trees = ask(comm, TRAIN_LOCAL)
    trees = [trees[r]["tree"] for r in clients]
    evals = ask(comm, EVALUATE, {"trees": trees})
    acc = np.array([evals[r]["accuracy"] for r in clients])   # [evaluating client, tree]
    f1 = np.array([evals[r]["f1"] for r in clients])
    scores = cross_scores(acc if cfg.filter_metric == "accuracy" else f1)
    kept = filter_trees(scores, cfg.filter, cfg.filter_percentile, cfg.filter_min_trees)
    t0 = time.perf_counter()
    kind = CATEGORICAL if enc.tree_type == "id3" else NUMERIC
    if cfg.over_max_rules == "drop_sets":
        # best score first (ties: client order), so the cap leaves out the weakest trees
        kept = kept[np.argsort(-scores[kept], kind="stable")]
    leaf_sets = [leaf_rules(trees[i], kind) for i in kept]
    # uncounted (min_coverage = 0), each leaf votes with the class counts of all its rows
    # (rule_votes "rows") or its class fractions; counted, see _covered
    rule_sets = [list(leaf_votes(rs, cfg.rule_votes).values()) for rs in leaf_sets]
    counted = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if cfg.min_coverage > 0:
            merged, stats = _covered(comm, job, kept, leaf_sets, counted)
        else:
            merged, stats = aggregate(rule_sets, cfg.max_rules, bounds=cfg.merge_bounds,
                                      over_max_rules=cfg.over_max_rules)
    merged_trees = [int(clients[i]) for i in kept[:stats.merged_sets]]
    for w in caught:
        log(cfg, f"warning: {w.message}")
    if not merged:
        if cfg.min_coverage > 0:
            raise InputError("min_coverage", f"no combination of the kept trees' leaves holds {cfg.min_coverage} "
                                             "rows of the clients; lower min_coverage")
        raise InputError("rules", "the kept trees have no compatible rules to merge; try filter = 'none' "
                                  "or fewer clients")
    info = {}
    depth = cfg.global_max_depth or (job.max_depth if enc.tree_type == "id3" else None)
    t1 = time.perf_counter()
    if enc.tree_type == "id3":   # rules count once (the method's entropy of rules)
        tree = id3_from_rules(merged, len(enc.classes), max_depth=depth, max_nodes=cfg.global_max_nodes, info=info,
                              splits=cfg.global_splits)
    else:
        weights = [r.mass for r in merged] if cfg.rule_weight == "mass" else None
        tree = tree_from_rules(merged, len(enc.classes), max_depth=depth, max_nodes=cfg.global_max_nodes,
                               info=info, weights=weights, splits=cfg.global_splits)
    grow_seconds = time.perf_counter() - t1
    if info.get("truncated"):
        log(cfg, f"warning: the global tree reached global_max_nodes={cfg.global_max_nodes}; "
                  "nodes beyond it were left as leaves")
    if enc.tree_type == "cart":
        tree = {k: v for k, v in tree.items() if k != "n_rules"}
    tree = _with_rows(comm, job, tree)
    reached = tree["n_node_samples"]
    leaves = np.flatnonzero(tree["feature"] < 0)
    shown, left_out = cover.shortened_rules(tree, kind, len(enc.columns))
    lengths = [_conditions(r) for r in shown.values()]
    paths = [_conditions(r) for r in leaf_rules(tree, kind).values()]
    summary.update(
        scores=scores.tolist(), kept_trees=[int(clients[i]) for i in sorted(kept)],
        merged_trees=merged_trees,
        # per kept tree, in the order of kept_trees (client order)
        rules_per_tree=[len(rs) for _, rs in sorted(zip(kept.tolist(), rule_sets))],
        merged_rules=len(merged), rule_votes=cfg.rule_votes,
        merge_steps=stats.steps, rules_capped=stats.capped, **counted,
        global_tree_truncated=bool(info.get("truncated")),
        global_tree_nodes=len(tree["value"]), global_tree_leaves=int(leaves.size),
        global_leaves_reached=int((reached[leaves] > 0).sum()),
        global_rule_conditions_mean=float(np.mean(lengths)) if lengths else 0.0,
        global_rule_conditions_max=int(max(lengths, default=0)), global_conditions_left_out=int(left_out),
        global_path_conditions_mean=float(np.mean(paths)) if paths else 0.0,
        global_path_conditions_max=int(max(paths, default=0)),
        global_tree_depth=int(info["depth"]), global_cut_splits=int(info["cut_splits"]),
        aggregate_seconds=time.perf_counter() - t0, global_tree_seconds=grow_seconds,
        local_self_accuracy=np.diag(acc).tolist(), local_self_f1=np.diag(f1).tolist())
    if all("own_test" in evals[r] for r in clients):   # each client's own tree on its test file
        for m in ("accuracy", "f1"):
            per = [float(evals[r]["own_test"][m]) for r in clients]
            summary[f"local_test_{m}s"] = per
            summary[f"local_test_{m}"] = float(np.mean(per))
    left_out = sorted(set(summary["kept_trees"]) - set(merged_trees))
    log(cfg, f"icdta4fl: kept trees of clients {summary['kept_trees']} (filter {cfg.filter} on "
              f"{cfg.filter_metric})" + (f", clients {left_out} left out at max_rules" if left_out else "")
              + f"; {sum(len(rs) for rs in rule_sets[:stats.merged_sets])} rules merged into {len(merged)} "
              f"in {summary['aggregate_seconds']:.3f}s; global tree of {len(tree['value'])} nodes "
              f"({summary['global_tree_leaves']} leaves, {summary['global_leaves_reached']} reached by the clients' "
              f"rows, depth {summary['global_tree_depth']})")
    return tree, rule_arrays(merged, len(enc.columns), enc.tree_type)


def _conditions(rule):
    """The conditions a rule states: per column one equality (ID3), or one per bounded side (CART)."""
    if rule.kind == CATEGORICAL:
        return len(rule.conditions)
    return sum(int(np.isfinite(lo)) + int(np.isfinite(hi)) for lo, hi in rule.conditions.values())


def _covered(comm, job, kept, leaf_sets, counted):
    """The merged rules of the leaf combinations the clients' rows reach
    (``min_coverage`` > 0): one ``cover`` round, then :mod:`.cells`.  Fills
    ``counted`` with the figures for the summary; returns ``(rules, MergeStats)``."""
    cfg, enc = job.cfg, job.enc
    clients = comm.clients
    rows_vote = cfg.rule_votes == "rows"
    replies = ask(comm, COVER, {"trees": [int(i) for i in kept], "votes": rows_vote})
    leaves = [np.array(sorted(ls), dtype=np.int64) for ls in leaf_sets]
    C = len(enc.classes) if rows_vote else None
    parts = [cover.check_cells(r, COVER, replies[r], leaves, int(job.infos[r]["n_rows"]), C) for r in clients]
    cells, counts, *votes = cover.pool_cells(parts)
    pos = cover.positions(cells, leaves)
    use, m, capped = cover.refine(pos, counts, cfg.max_rules, cfg.over_max_rules)
    stats = MergeStats(capped=capped, merged_sets=m)
    if capped and cfg.over_max_rules == "drop_sets":
        warnings.warn(f"rule aggregation: merging rule set {m + 1} would give more than max_rules="
                      f"{cfg.max_rules} covered rules; it and the {len(kept) - m - 1} after it were left out",
                      RuntimeWarning, stacklevel=2)
    elif capped:
        warnings.warn(f"rule aggregation: some covered rules of least rows were not refined (max_rules="
                      f"{cfg.max_rules})", RuntimeWarning, stacklevel=2)
    use, of_cell, rows = cover.group(use, counts)
    keep = rows >= cfg.min_coverage
    leaf_arrays = [RuleArrays.from_rules(list(ls.values()), len(enc.columns)) for ls in leaf_sets]
    every = cover.cell_arrays(use, leaf_arrays, cfg.merge_bounds, len(enc.classes))
    if rows_vote:
        # each rule's class distribution: its rows, each counted by its client with its own tree, and
        # one row's worth of the merged trees' equal vote (their class fractions averaged), which only
        # decides where a rule holds a row or two
        fractions = every.dist / np.maximum(every.dist.sum(axis=1, keepdims=True), 1e-300)
        every.dist = fractions * PRIOR_ROWS
        np.add.at(every.dist, of_cell, votes[0])
    every.support = rows.astype(np.float64)
    every.mass = every.support / max(1.0, float(rows[keep].sum()))
    arrays = every.take(np.flatnonzero(keep))
    counted.update(min_coverage=int(cfg.min_coverage), covered_cells=int(len(rows)),
                   rows_in_cells=int(rows.sum()), rows_in_merged_rules=int(rows[keep].sum()),
                   cells_below_min_coverage=int((~keep).sum()))
    return arrays.rules(), stats


def _with_rows(comm, job, tree):
    """The global tree with ``n_node_samples``: the clients' rows reaching each
    node (one ``count`` round; every client counts all its rows)."""
    replies = ask(comm, COUNT, {"tree": tree})
    n = len(tree["feature"])
    ends = sum(cover.check_node_rows(r, COUNT, replies[r], n, int(job.infos[r]["n_rows"])) for r in comm.clients)
    return dict(tree, n_node_samples=cover.subtree_rows(tree, ends))


def split_rows(n, fraction, seed):
    """``(fit rows, validation rows)`` of a client with ``n`` rows: a seeded
    random ``fraction`` of them (at least one row, and one row left to fit)
    is held out; with ``fraction`` 0 (or one row) both are all the rows."""
    every = np.arange(n)
    if not fraction or n < 2:
        return every, every
    perm = np.random.default_rng(seed).permutation(n)
    k = min(n - 1, max(1, int(round(fraction * n))))
    return np.sort(perm[k:]), np.sort(perm[:k])


def _rows(client):
    return split_rows(len(client.y), client.cfg.validation_fraction, client.setup["seed"] + client.comm.rank)


def _train_local(client, msg):
    return {"tree": client.own_tree(_rows(client)[0])}


def _evaluate(client, msg):
    trees = field_of(msg, EVALUATE, "trees")
    K = client.cfg.n_parties
    if not isinstance(trees, (list, tuple)) or len(trees) != K:
        raise bad_message(EVALUATE, "trees", f"expected one tree per client ({K})")
    # the clients' own trees: the job's tree type and depth
    trees = [client.tree(EVALUATE, f"trees[{i}]", t, max_depth=client.setup["max_depth"])
             for i, t in enumerate(trees)]
    rows = _rows(client)[1]
    X, y = client.X[rows], client.y[rows]
    client.trees = trees          # the kept ones are counted in the cover round
    scores = [class_scores(y, tree_proba(t, X)) for t in trees]
    reply = {"accuracy": np.array([s["accuracy"] for s in scores]), "f1": np.array([s["f1"] for s in scores])}
    if client.test is not None:
        reply["own_test"] = class_scores(client.test[1], tree_proba(client.own_tree(), client.test[0]))
    return reply


def _cover(client, msg):
    """The leaf combinations of the kept trees that this client's rows reach,
    and how many rows each holds (all rows of the client); when the server
    asks (``votes``, ``rule_votes = "rows"``), also per combination its rows
    counted with the class fractions of its own tree."""
    trees = getattr(client, "trees", None)
    if trees is None:
        raise bad_message(COVER, "op", "no trees were evaluated before")
    kept = field_of(msg, COVER, "trees")
    K = len(trees)
    if (not isinstance(kept, (list, tuple)) or not kept or len(set(map(repr, kept))) != len(kept)
            or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < K for i in kept)):
        raise bad_message(COVER, "trees", f"expected distinct tree numbers in 0..{K - 1}")
    votes = msg.get("votes", False)
    if not isinstance(votes, bool):
        raise bad_message(COVER, "votes", f"expected true or false, got {type(votes).__name__}")
    if votes and client.cfg.rule_votes != "rows":
        raise bad_message(COVER, "votes", f"this client's rule_votes is {client.cfg.rule_votes!r}: it sends no "
                                          "class estimates")
    if not votes:
        cells, counts = cover.client_cells([trees[i] for i in kept], client.X)
        return {"cells": cells, "counts": counts}
    # its rows in each cell counted with the class fractions of its own tree (its model of its rows)
    cells, counts, est = cover.client_cells([trees[i] for i in kept], client.X, own=client.own_tree())
    return {"cells": cells, "counts": counts, "votes": est}


def _count(client, msg):
    """The rows of this client ending at each node of the global tree."""
    tree = client.tree(COUNT, "tree", field_of(msg, COUNT, "tree"), **_final_tree(client))
    return {"rows": cover.node_rows(tree, client.X)}


def _final_tree(client):
    """The global tree's limits: global_max_depth (ID3: else the client trees'
    depth) and global_max_nodes, as :func:`_build` grows it."""
    cfg = client.cfg
    depth = cfg.global_max_depth or (client.setup["max_depth"] if client.enc.tree_type == "id3" else None)
    return {"max_depth": depth, "max_nodes": max(1, int(cfg.global_max_nodes))}


def _final_rules(client, rules):
    """The merged rules of the final message (:func:`rule_arrays`): exactly
    its arrays, numbers of the shapes of R rules over this job's columns and
    classes, in their canonical dtypes."""
    op = protocol.FINAL
    id3 = client.enc.tree_type == "id3"
    keys = {"dist", "support", "mass"} | ({"val"} if id3 else {"lo", "hi"})
    if not isinstance(rules, dict) or set(rules) != keys:
        got = sorted(map(str, rules)) if isinstance(rules, dict) else type(rules).__name__
        raise bad_message(op, "rules", f"expected the arrays {sorted(keys)}, got {str(got)[:200]}")
    F, C = client.n_features, client.n_classes
    dist = number_array(op, "rules.dist", rules["dist"], "biuf", shape=(None, C), dtype=np.float64)
    R = dist.shape[0]
    if R == 0:
        raise bad_message(op, "rules", "no rules")
    out = {"dist": dist}
    for k in ("support", "mass"):
        out[k] = number_array(op, f"rules.{k}", rules[k], "biuf", shape=(R,), dtype=np.float64)
    if id3:
        out["val"] = number_array(op, "rules.val", rules["val"], "iu", shape=(R, F), dtype=np.int64)
        if out["val"].size and (out["val"].min() < -1
                                or np.any(out["val"] >= np.array(client.enc.n_values)[None, :])):
            raise bad_message(op, "rules.val", "category codes out of range")
    else:
        for k in ("lo", "hi"):
            out[k] = number_array(op, f"rules.{k}", rules[k], "biuf", shape=(R, F), dtype=np.float64)
    return out


def explain(doc, X=None, raw=None, row=None):
    """The global tree as rules, each with the clients' training rows it
    covers and without the conditions those rows do not need
    (:func:`.cells.shortened_rules`; a model without row counts: the tree's
    paths, no counts)."""
    tree = doc["tree"]
    if "n_node_samples" not in tree:
        return binned_explain(doc, X, raw, row)
    enc = doc["encoding"]
    kind = CATEGORICAL if "child_count" in tree else NUMERIC
    rules, _ = cover.shortened_rules(tree, kind, len(enc.columns))
    return binned_explain(doc, X, raw, row, rules=rules, rows=np.asarray(tree["n_node_samples"]))


def _binned(cfg):
    return cfg.tree_type == "id3" and cfg.numeric_bins is not None


def server_train(comm, cfg):
    run = binned.run_server if _binned(cfg) else run_tree_server
    return run(comm, cfg, _build)


def client_train(comm, cfg):
    run = binned.run_client if _binned(cfg) else run_tree_client
    return run(comm, cfg, {TRAIN_LOCAL: _train_local, EVALUATE: _evaluate, COVER: _cover, COUNT: _count},
               final_tree=_final_tree, final_rules=_final_rules)
