"""ICDTA4FL against its baselines, in the shape of the paper's Tables 2-5.

For every data set, number of clients K in (2, 5, 10, 20, 50), distribution
(IID: stratified equal shares; non-IID: Dirichlet label skew, alpha 0.5, at
least 5 rows per client) and seed, the rows are split across K clients with
``fedforest.data.partition``; each client keeps a random 25 % of its rows as
its own test set.  Each method then runs through the product's horizontal
protocol in one process (``fedforest.run_horizontal``: the server and K
client threads over the in-process transport with encrypted channels, the
same code as under mpiexec; 50 MPI ranks would oversubscribe this 2-core
machine 25 times, so no many-client run uses MPI here).  Reported: accuracy
and macro-F1 of each client on its own test rows, averaged over the clients
and then over seeds (the paper averages 10-fold cross-validation per client;
this script uses one 75/25 split per client and seed).

Methods (tree_type, mode):

* Baseline (ID3) / Baseline (CART): every client's own tree (mode ``local``);
* ICDTA4FL-ID3 / ICDTA4FL-CART: mode ``icdta4fl`` with the default filter
  (mean accuracy of a tree on the other clients' rows);
* Federated-ID3: mode ``federated_id3``.

Every mode runs at its current defaults (recorded in the result with the
commit).  Preprocessing, as the paper does for trees that need it: for ID3,
numeric columns with more than 8 distinct values are cut into 4 quantile bins
over the whole table before the split (so every ID3 method, the ``local``
baseline included, sees the same categories; the modes' own ``numeric_bins``
then leaves them as they are); for CART, text categories become their integer
codes and missing values -1.
Depths: ID3 |features|/2 (the paper's default), CART 5.  The ICDTA4FL rows
also report the merged rules and the global tree's nodes and depth.

The script writes ``icdta4fl_tables.md``, ``.json`` and ``.png``; the figure
shows only runs made with the modes' current defaults (``--replot`` redraws it
from the JSON and leaves out runs recorded with other settings, or none).

    .venv/bin/python experiments/icdta4fl_tables.py              # full run
    .venv/bin/python experiments/icdta4fl_tables.py --quick --out /tmp/r --allow-dirty   # smoke run
    .venv/bin/python experiments/icdta4fl_tables.py --replot     # the figure from the JSON

``--methods`` runs some of the methods only; a baseline left out then takes the
scores of the clients' own trees from the evaluate round of the matching
ICDTA4FL run (the same trees the ``local`` mode fits), and ``--reuse
earlier.json`` takes the rows of the methods not run from an earlier result,
naming its commit (rerunning ICDTA4FL after a change to it only):

    .venv/bin/python experiments/icdta4fl_tables.py --methods ICDTA4FL-ID3,ICDTA4FL-CART \
        --reuse experiments/results/icdta4fl_tables.json

The grid can run as several processes (the work is mostly one core per
process), each on part of it, writing its finished cells to a file that a
stopped run also goes on from; the tables are then written from the cells:

    .venv/bin/python experiments/icdta4fl_tables.py --datasets dna --cells /tmp/dna.jsonl
    .venv/bin/python experiments/icdta4fl_tables.py --datasets satellite --cells /tmp/sat.jsonl
    .venv/bin/python experiments/icdta4fl_tables.py --merge /tmp/dna.jsonl /tmp/sat.jsonl
"""
import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
import warnings

import numpy as np
import pandas as pd

import provenance
from fedforest.data.partition import dirichlet_partition, iid_partition
from fedforest.errors import InputError
from fedforest import run_horizontal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data")
OUT = os.path.join(ROOT, "experiments", "results")
DATASETS = ["housevotes84", "soybean", "dna", "spambase", "satellite"]
CLIENTS = [2, 5, 10, 20, 50]
METHODS = [("Baseline (ID3)", "id3", "local"), ("ICDTA4FL-ID3", "id3", "icdta4fl"),
           ("Federated-ID3", "id3", "federated_id3"), ("Baseline (CART)", "cart", "local"),
           ("ICDTA4FL-CART", "cart", "icdta4fl")]


def load(name):
    manifest = pd.read_csv(os.path.join(DATA, "MANIFEST.csv")).set_index("name")
    target = manifest.loc[name, "target"]
    df = pd.read_csv(os.path.join(DATA, manifest.loc[name, "file"]), keep_default_na=False,
                     na_values=["NA", ""])
    y = df.pop(target).astype(str)
    return df, y


def for_id3(df):
    """Numeric columns with more than 8 distinct values as 4 quantile bins of the whole table."""
    out = df.copy()
    for c in out.columns:
        col = out[c]
        if pd.api.types.is_numeric_dtype(col) and col.nunique() > 8:
            out[c] = pd.qcut(col, 4, labels=False, duplicates="drop").astype("Int64").astype(str)
    return out


def current_settings():
    """Per method, the settings its runs use: the mode's declared defaults and the tree type."""
    from fedforest.federation.registry import get_mode
    out = {}
    for label, tree_type, mode in METHODS:
        defaults = {p.name: p.default for p in get_mode(mode).params}
        out[label] = dict(defaults, mode=mode, tree_type=tree_type)
    return out


def for_cart(df):
    out = pd.DataFrame(index=df.index)
    for c in df.columns:
        col = df[c]
        if pd.api.types.is_numeric_dtype(col):
            out[c] = col.fillna(-1).astype(float)
        else:
            out[c] = pd.Categorical(col).codes.astype(float)  # missing -> -1
    return out


def write_clients(folder, X, y, parts, seed):
    rng = np.random.default_rng(seed)
    train, test = [], []
    for k, rows in enumerate(parts, start=1):
        rows = rng.permutation(rows)
        cut = max(1, int(round(0.25 * rows.size)))
        df = X.iloc[rows].copy()
        df["label"] = y.iloc[rows].to_numpy()
        test.append(os.path.join(folder, f"c{k}-test.csv"))
        train.append(os.path.join(folder, f"c{k}.csv"))
        df.iloc[:cut].to_csv(test[-1], index=False)
        df.iloc[cut:].to_csv(train[-1], index=False)
    return train, test


def always_majority(y, k, dist, seed):
    """Always-majority on the split :func:`run_one` makes: the class of most training
    rows over all clients, scored on each client's test rows; the mean over the clients."""
    parts = (iid_partition(y.to_numpy(), k, seed) if dist == "IID"
             else dirichlet_partition(y.to_numpy(), k, 0.5, seed, min_rows=5))
    rng = np.random.default_rng(seed)
    train, test = [], []
    for rows in parts:                       # the permutation and cut of write_clients
        rows = rng.permutation(rows)
        cut = max(1, int(round(0.25 * rows.size)))
        test.append(y.iloc[rows[:cut]].to_numpy())
        train.append(y.iloc[rows[cut:]].to_numpy())
    classes, counts = np.unique(np.concatenate(train), return_counts=True)
    majority = classes[np.argmax(counts)]
    return float(np.mean([np.mean(t == majority) for t in test]))


#: a baseline that an ICDTA4FL run measures too: its evaluate round scores every client's own tree
#: (the ``local`` mode's tree: same rows, depth and seed) on the client's test file
OWN_TREES = {"Baseline (ID3)": "ICDTA4FL-ID3", "Baseline (CART)": "ICDTA4FL-CART"}


def run_one(name, X_by_type, y, k, dist, seed, workdir, methods=None):
    """One seed of one cell: every method of ``methods`` (labels; default all).  A
    baseline left out whose ICDTA4FL run is in takes that run's scores of the
    clients' own trees (``local_test_accuracy``, ``local_test_f1``)."""
    methods = [m for m, _, _ in METHODS] if methods is None else methods
    parts = (iid_partition(y.to_numpy(), k, seed) if dist == "IID"
             else dirichlet_partition(y.to_numpy(), k, 0.5, seed, min_rows=5))
    out = {}
    files = {}
    for tree_type, X in X_by_type.items():
        folder = os.path.join(workdir, f"{tree_type}")
        os.makedirs(folder, exist_ok=True)
        files[tree_type] = write_clients(folder, X, y, parts, seed)
    for label, tree_type, mode in METHODS:
        if label not in methods:
            continue
        train, test = files[tree_type]
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                s = run_horizontal(train, mode=mode, tree_type=tree_type, task="classification",
                                   label_column="label", test_data=test, random_state=seed,
                                   model_dir=os.path.join(workdir, f"model-{tree_type}-{mode}"), overwrite=True)
            out[label] = {"acc": s["test_accuracy"], "f1": s["test_f1"],
                          "seconds": time.perf_counter() - t0,
                          "merged_rules": s.get("merged_rules"), "kept": len(s.get("kept_trees", [])),
                          "nodes": s.get("global_tree_nodes"), "depth": s.get("global_tree_depth"),
                          "leaves": s.get("global_tree_leaves"), "reached": s.get("global_leaves_reached"),
                          "rule_conditions_mean": s.get("global_rule_conditions_mean"),
                          "rule_conditions_max": s.get("global_rule_conditions_max")}
            for base, icdta in OWN_TREES.items():
                if icdta == label and base not in methods and "local_test_accuracy" in s:
                    out[base] = {"acc": s["local_test_accuracy"], "f1": s["local_test_f1"],
                                 "from": f"{label} (the clients' own trees in its evaluate round)"}
        except InputError as exc:
            out[label] = {"error": str(exc)}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--clients", default=",".join(map(str, CLIENTS)))
    ap.add_argument("--quick", action="store_true", help="1 seed, housevotes84 and spambase, 2 and 5 clients")
    ap.add_argument("--out", default=OUT, help=f"folder of the result files (default {OUT})")
    ap.add_argument("--replot", action="store_true",
                    help="redraw icdta4fl_tables.png from icdta4fl_tables.json instead of running")
    ap.add_argument("--cells", default=None, metavar="PATH.jsonl",
                    help="append every finished cell to this file and skip the cells it already holds "
                         "(a run of part of the grid, or one that was stopped, goes on from it)")
    ap.add_argument("--methods", default=None,
                    help="run only these methods (comma-separated labels, e.g. 'ICDTA4FL-ID3,ICDTA4FL-CART'); "
                         "a baseline left out takes its ICDTA4FL run's scores of the clients' own trees")
    ap.add_argument("--reuse", default=None, metavar="PATH.json",
                    help="the rows of methods not run (nor derived) taken from this earlier icdta4fl_tables.json "
                         "(same cells and seeds); the result names the commit they come from")
    ap.add_argument("--merge", nargs="+", default=None, metavar="PATH.jsonl",
                    help="write the tables from the cells of these files (runs of parts of the grid, "
                         "from one commit) instead of running")
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    methods = args.methods.split(",") if args.methods else None
    unknown = sorted(set(methods or []) - {m for m, _, _ in METHODS})
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; the methods are {[m for m, _, _ in METHODS]}")
    if args.merge:
        return merge(args.merge, args.out, args.reuse)
    if args.replot:
        with open(os.path.join(args.out, "icdta4fl_tables.json")) as fh:
            doc = json.load(fh)
        print(plot(doc.get("results", {}), doc.get("settings"), os.path.join(args.out, "icdta4fl_tables.png")))
        return 0
    prov = provenance.record(args)
    datasets = args.datasets.split(",")
    clients = [int(c) for c in args.clients.split(",")]
    seeds = args.seeds
    if args.quick:
        datasets, clients, seeds = ["housevotes84", "spambase"], [2, 5], 1
    results = read_cells([args.cells], prov["git_commit"], seeds) if args.cells and os.path.exists(args.cells) else {}
    t_all = time.perf_counter()
    for name in datasets:
        X, y = load(name)
        X_by_type = {"id3": for_id3(X), "cart": for_cart(X)}
        for dist in ("IID", "non-IID"):
            for k in clients:
                key = f"{name}|{dist}|{k}"
                if key in results:
                    continue
                runs = []
                t_cell = time.perf_counter()
                for seed in range(seeds):
                    with tempfile.TemporaryDirectory() as work:
                        runs.append(run_one(name, X_by_type, y, k, dist, seed, work, methods))
                results[key] = runs
                if args.cells:
                    with open(args.cells, "a") as fh:
                        fh.write(json.dumps({"key": key, "runs": runs, "seeds": seeds, "seconds":
                                             time.perf_counter() - t_cell, "provenance": prov},
                                            default=float) + "\n")
                cells = {m: np.mean([r[m]["acc"] for r in runs if "acc" in r.get(m, {})] or [np.nan])
                         for m, _, _ in METHODS}
                print(f"{name:13s} {dist:7s} K={k:2d} " + "  ".join(f"{m}: {v:.4f}" for m, v in cells.items()),
                      flush=True)
    write(results, datasets, clients, seeds, " ".join(sys.argv[1:] if argv is None else argv),
          time.perf_counter() - t_all, prov, args.out, args.reuse)
    return 0


def reuse_rows(results, path):
    """Fill every method missing from ``results`` (``{key: runs}``) from the earlier
    result ``path``; returns ``{method: {"commit": ..., "settings": ...}}`` for those filled."""
    with open(path) as fh:
        old = json.load(fh)
    filled = {}
    for key, runs in results.items():
        before = old["results"].get(key)
        if before is None or len(before) != len(runs):
            raise SystemExit(f"--reuse {path}: no runs of {key} with {len(runs)} seeds")
        for run, prev in zip(runs, before):
            for m, _, _ in METHODS:
                if m not in run and m in prev:
                    run[m] = dict(prev[m], reused_from=old["provenance"]["git_commit"])
                    where = filled.setdefault(m, {"commit": old["provenance"]["git_commit"],
                                                  "settings": (old.get("settings") or {}).get(m), "runs": 0})
                    where["runs"] += 1
    return filled


def read_cells(paths, commit=None, seeds=None):
    """The cells of ``--cells`` files, ``{key: runs}``; refuses cells made at
    another commit or with another number of seeds than ``commit``/``seeds``
    (when given) or than each other."""
    out, commits, n_seeds = {}, set(), set()
    for path in paths:
        with open(path) as fh:
            for line in fh:
                if line.strip():
                    cell = json.loads(line)
                    out[cell["key"]] = cell["runs"]
                    commits.add(cell["provenance"]["git_commit"])
                    n_seeds.add(cell["seeds"])
    commits |= {commit} if commit and out else set()
    n_seeds |= {seeds} if seeds and out else set()
    if len(commits) > 1 or len(n_seeds) > 1:
        raise SystemExit(f"cells from several commits {sorted(commits)} or seed counts {sorted(n_seeds)}: "
                         "rerun them from one commit")
    return out


def merge(paths, out, reuse=None):
    """Write the tables from the cells of ``paths`` (one commit, one seed count),
    the rows of the methods they lack from ``reuse`` (an earlier result)."""
    cells = []
    for path in paths:
        with open(path) as fh:
            cells += [json.loads(line) for line in fh if line.strip()]
    results = read_cells(paths)
    names = [d for d in DATASETS if any(k.startswith(d + "|") for k in results)]
    clients = sorted({int(k.split("|")[2]) for k in results})
    missing = [f"{d}|{dist}|{k}" for d in names for dist in ("IID", "non-IID") for k in clients
               if f"{d}|{dist}|{k}" not in results]
    if missing:
        raise SystemExit(f"cells missing from {paths}: {', '.join(missing)}")
    argv = "--merge " + " ".join(os.path.relpath(p, ROOT) for p in paths) + (" --reuse EARLIER.json" if reuse else "")
    prov = dict(cells[0]["provenance"], command="python experiments/icdta4fl_tables.py " + argv,
                merged_at_commit=provenance.git_state()[0])
    write(results, names, clients, cells[0]["seeds"], argv,
          sum(c["seconds"] for c in cells), prov, out, reuse)
    return 0


def _cell(runs, method, key):
    vals = [100 * r[method][key] for r in runs if key in r.get(method, {})]
    if not vals:
        return "n/a"
    return f"{np.mean(vals):.2f}"


def _size(runs, method):
    """Mean merged rules / global tree nodes / depth / leaves / leaves reached by training rows (%) and
    mean / max conditions of a rule of an ICDTA4FL cell."""
    vals = [r[method] for r in runs if r.get(method, {}).get("nodes") is not None]
    if not vals:
        return "n/a"
    out = " / ".join(f"{np.mean([v[k] for v in vals]):.{d}f}" for k, d in
                     (("merged_rules", 0), ("nodes", 0), ("depth", 1)))
    if all(v.get("leaves") is not None for v in vals):
        out += (f" / {np.mean([v['leaves'] for v in vals]):.0f}"
                f" / {np.mean([100 * v['reached'] / v['leaves'] for v in vals]):.0f} %"
                f" / {np.mean([v['rule_conditions_mean'] for v in vals]):.1f}"
                f" / {max(v['rule_conditions_max'] for v in vals)}")
    return out


def plot(results, settings, path):
    """Accuracy against clients per data set and distribution, every method, from the
    runs made with the modes' current defaults only; returns what it did."""
    current = current_settings()
    fresh = [m for m, _, _ in METHODS if (settings or {}).get(m) == current[m]]
    stale = [m for m, _, _ in METHODS if m not in fresh]
    keys = sorted({tuple(k.split("|")[:2]) for k in results})
    if not fresh or not keys:
        return f"no figure: no run at the current defaults (superseded: {', '.join(stale)})"
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cols = min(4, len(keys))
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.0 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    for ax, (name, dist) in zip(axes.flat, keys):
        ks = sorted(int(k.split("|")[2]) for k in results if k.startswith(f"{name}|{dist}|"))
        for m in fresh:
            acc = [np.mean([r[m]["acc"] for r in results[f"{name}|{dist}|{k}"] if "acc" in r.get(m, {})] or [np.nan])
                   for k in ks]
            ax.plot(ks, acc, "--" if m.startswith("Baseline") else "-", marker="o", ms=3, label=m)
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_title(f"{name}, {dist}", fontsize=10)
        ax.set_xlabel("clients")
        ax.set_ylabel("accuracy (mean over seeds)")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("ICDTA4FL at the current defaults: accuracy vs number of clients (baselines dashed)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"wrote {path}" + (f" (left out, run with other settings: {', '.join(stale)})" if stale else "")


def write(results, datasets, clients, seeds, argv, seconds, prov, out=OUT, reuse=None):
    os.makedirs(out, exist_ok=True)
    reused = reuse_rows(results, reuse) if reuse else {}
    derived = sorted({m for runs in results.values() for r in runs for m, v in r.items() if "from" in v})
    lines = ["# ICDTA4FL against its baselines (shape of the paper's Tables 2-5)", "",
             ("Command: `.venv/bin/python experiments/icdta4fl_tables.py " + argv).rstrip() + "`", "",
             f"Mean over {seeds} seed(s) of the clients' mean test accuracy and macro-F1 (%), each client "
             "testing on its own held-out 25 % of rows. IID = stratified equal shares; non-IID = Dirichlet "
             "label skew (alpha 0.5, at least 5 rows per client). Every run uses the product's horizontal "
             "protocol in one process (server + K client threads over the in-process transport, "
             "encrypted channels); no many-client run uses oversubscribed MPI ranks.", "",
             f"Run on {platform.node()} ({os.cpu_count()} cores), {datetime.date.today()}, "
             f"{seconds / 60:.1f} minutes in all; code at commit {str(prov['git_commit'])[:12]}"
             f"{' with uncommitted changes' if prov['fedforest_uncommitted_changes'] else ''}.", ""]
    if prov.get("merged_at_commit") and prov["merged_at_commit"] != prov["git_commit"]:
        lines += [f"Tables (and the always-majority rows, computed from the same splits) written by "
                  f"`--merge` at commit {prov['merged_at_commit'][:12]}.", ""]
    for m in derived:
        lines += [f"{m}: the scores of the clients' own trees in the evaluate round of the matching ICDTA4FL "
                  "run (the `local` mode's trees: same rows, depth and seed; not a separate run).", ""]
    n_runs = sum(len(runs) for runs in results.values())
    for m, where in sorted(reused.items()):
        what = "not rerun: its runs are" if where["runs"] == n_runs else \
            f"{where['runs']} of its {n_runs} runs (where no run of this commit gave it) are"
        lines += [f"{m}: {what} those of the run at commit {where['commit'][:12]} (`--reuse` its "
                  "icdta4fl_tables.json).", ""]
    majority = {}                            # {key: always-majority's accuracy per seed}
    for d in datasets:
        _, y = load(d)
        for key in [k for k in results if k.startswith(d + "|")]:
            _, dist, k = key.split("|")
            majority[key] = [always_majority(y, int(k), dist, seed) for seed in range(len(results[key]))]
    below = {}
    for method in ("ICDTA4FL-ID3", "ICDTA4FL-CART"):
        margins = {key: 100 * (np.mean([r[method]["acc"] for r in runs if "acc" in r.get(method, {})])
                               - np.mean(majority[key])) for key, runs in results.items()
                   if key in majority and any("acc" in r.get(method, {}) for r in runs)}
        runs_below = [f"{key} seed {i}" for key, runs in results.items() if key in majority
                      for i, r in enumerate(runs) if r.get(method, {}).get("acc", np.inf) < majority[key][i]]
        n_runs = sum(1 for key, runs in results.items() if key in majority for r in runs if "acc" in r.get(method, {}))
        if margins:
            below[method] = {"cells": len(margins), "below": sorted(k for k, v in margins.items() if v < 0),
                             "worst_minus_majority": min(margins.values()),
                             "worst_cell": min(margins, key=margins.get), "runs": n_runs, "runs_below": runs_below}
            cells_below = below[method]["below"]
            lines += [f"{method} against always-majority (the class of most training rows of all clients, "
                      f"scored like the methods): below it in {len(cells_below)} of {len(margins)} cells "
                      f"(mean over seeds){': ' + ', '.join(cells_below) if cells_below else ''}; worst margin "
                      f"{below[method]['worst_minus_majority']:+.2f} points ({below[method]['worst_cell']}); "
                      f"single runs below it: {len(runs_below)} of {n_runs}"
                      f"{' (' + ', '.join(runs_below) + ')' if runs_below else ''}.", ""]
    for dist in ("IID", "non-IID"):
        lines += [f"## {dist}", "", "| clients | method | " + " | ".join(f"{d} Acc | {d} F1" for d in datasets)
                  + " |", "|---|---|" + "---|---|" * len(datasets)]
        for k in clients:
            for method, _, _ in METHODS:
                row = [str(k), method]
                for d in datasets:
                    runs = results.get(f"{d}|{dist}|{k}", [])
                    row += [_cell(runs, method, "acc"), _cell(runs, method, "f1")]
                lines.append("| " + " | ".join(row) + " |")
            row = [str(k), "Always-majority"]
            for d in datasets:
                accs = majority.get(f"{d}|{dist}|{k}")
                row += [f"{100 * np.mean(accs):.2f}" if accs else "n/a", "—"]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    lines += ["## Global trees (ICDTA4FL)", "", "Means over seeds: merged rules / global tree nodes / depth / "
              "leaves / percentage of the leaves that some training row of the clients reaches / conditions "
              "of a rule as `explain` prints it (mean / max over the seeds' trees).", "",
              "| distribution | clients | method | " + " | ".join(datasets) + " |",
              "|---|---|---|" + "---|" * len(datasets)]
    for dist in ("IID", "non-IID"):
        for k in clients:
            for method in ("ICDTA4FL-ID3", "ICDTA4FL-CART"):
                lines.append(f"| {dist} | {k} | {method} | "
                             + " | ".join(_size(results.get(f"{d}|{dist}|{k}", []), method) for d in datasets) + " |")
    lines.append("")
    errors = sorted({f"{key} {m}: {r[m]['error']}" for key, runs in results.items() for r in runs
                     for m in r if "error" in r[m]})
    if errors:
        lines += ["## Runs that stopped with an input error", ""] + [f"- {e}" for e in errors] + [""]
    settings = current_settings()
    for m, where in reused.items():
        settings[m] = where["settings"]
    lines += ["![accuracy against clients](icdta4fl_tables.png)", ""]
    with open(os.path.join(out, "icdta4fl_tables.md"), "w") as fh:
        fh.write("\n".join(lines))
    with open(os.path.join(out, "icdta4fl_tables.json"), "w") as fh:
        json.dump({"results": results, "settings": settings, "provenance": prov,
                   "reused": {m: w["commit"] for m, w in reused.items()}, "derived": derived,
                   "always_majority": majority, "below_always_majority": below},
                  fh, indent=1, default=float)
    print("\n".join(lines))
    print(plot(results, settings, os.path.join(out, "icdta4fl_tables.png")))


if __name__ == "__main__":
    raise SystemExit(main())
