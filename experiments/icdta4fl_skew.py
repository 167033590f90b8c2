"""ICDTA4FL under label skew: the global tree against always-majority, per run.

Each table is split with the product's own command, as a user would (README,
docs/horizontal.md):

    python -m fedforest split --input TABLE --by rows --parties K --scheme dirichlet \\
        --alpha 0.5 --seed S --label-column Y --test-size 0.25 --out clients/

(Dirichlet label skew, alpha 0.5, K = 2 and 5, seeds 0..19), then trained with
``fedforest.run_horizontal`` (mode ``icdta4fl``, the same protocol as under
mpiexec, server and clients in one process), CART and ID3, at the mode's
defaults; with ``--votes rows,fractions`` also with ``rule_votes =
"fractions"`` (the method's text: a merged rule's class distribution is the
sum of its leaves' class fractions, one vote per tree).

Per run: the global tree's accuracy on the pooled test rows of all clients
and on the largest client's test rows (the client with most training rows),
always-majority's accuracy on both (the class of most training rows over all
clients), the clients' own trees' accuracy on their test rows, and the
clients' row counts.  Top level, per setting: ``worst_pooled_minus_majority``
and ``worst_largest_client_minus_majority`` (the lowest global-tree accuracy
minus always-majority's over the runs, in points; >= 0 means the global tree
is never below always-majority).

Tables:

* ``churn``: the MLC++ customer churn table (5,000 rows, label ``churn``
  yes/no, 14 % yes; R package modeldata's ``mlc_churn``).  It is not in
  ``../shared/data``: give it as ``--churn PATH.csv``, or the script exports
  it with ``Rscript`` from Debian's ``r-cran-modeldata`` when that is
  installed (``apt-get install r-cran-modeldata``); without either the table
  is skipped and the result says so.
* ``spambase`` (``../shared/data``, 4,601 rows, label ``type``, 39 % spam).

    .venv/bin/python experiments/icdta4fl_skew.py                  # full run (20 seeds)
    .venv/bin/python experiments/icdta4fl_skew.py --seeds 3 --out /tmp/skew --allow-dirty   # quick check
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data")
OUT = os.path.join(ROOT, "experiments", "results")
TABLES = {"churn": "churn", "spambase": "type"}       # table -> label column
CLIENTS = [2, 5]
TREE_TYPES = ["cart", "id3"]
CENTRAL = {"cart": "centralized", "id3": "federated_id3"}     # a tree on all training rows pooled


def export_churn(folder):
    """mlc_churn as CSV, exported with Rscript from the modeldata package, or None."""
    if shutil.which("Rscript") is None:
        return None
    path = os.path.join(folder, "mlc_churn.csv")
    code = f'library(modeldata); data(mlc_churn); write.csv(mlc_churn, "{path}", row.names=FALSE)'
    done = subprocess.run(["Rscript", "-e", code], capture_output=True, text=True)
    return path if done.returncode == 0 and os.path.exists(path) else None


def table_path(name, churn, folder):
    if name == "churn":
        return churn or export_churn(folder)
    manifest = pd.read_csv(os.path.join(DATA, "MANIFEST.csv")).set_index("name")
    return os.path.join(DATA, manifest.loc[name, "file"])


def split(path, label, k, seed, out):
    """The product's split command (Dirichlet label skew); returns (train files, test files)."""
    cmd = [sys.executable, "-m", "fedforest", "split", "--input", path, "--by", "rows", "--parties", str(k),
           "--scheme", "dirichlet", "--alpha", "0.5", "--seed", str(seed), "--label-column", label,
           "--test-size", "0.25", "--out", out]
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    train = [os.path.join(out, f"client{i}.csv") for i in range(1, k + 1)]
    return train, [f.replace(".csv", "-test.csv") for f in train]


def labels(path, label):
    return pd.read_csv(path, usecols=[label], dtype=str, keep_default_na=False)[label].to_numpy()


def accuracies(summary, k):
    """Each client's test accuracy (clients 1..k) from a job's summary."""
    m = summary["test_metrics"]
    return np.array([(m[str(r)] if str(r) in m else m[r])["accuracy"] for r in range(1, k + 1)])


def one_run(task):
    """Every tree type and vote of one (table, K, seed): the split, then one job each."""
    from fedforest import run_horizontal
    name, path, label, k, seed, votes = task
    out = []
    with tempfile.TemporaryDirectory() as work:
        train, test = split(path, label, k, seed, os.path.join(work, "clients"))
        y_train = [labels(f, label) for f in train]
        y_test = [labels(f, label) for f in test]
        classes, counts = np.unique(np.concatenate(y_train), return_counts=True)
        majority = classes[np.argmax(counts)]
        rows = [len(y) for y in y_train]
        big = int(np.argmax(rows))                     # the largest client (first of equals)
        n_test = np.array([len(y) for y in y_test], dtype=np.float64)
        maj_pooled = float(np.mean(np.concatenate(y_test) == majority))
        maj_big = float(np.mean(y_test[big] == majority))
        for tree_type in TREE_TYPES:
            # reference: one tree of the job's type on all training rows pooled: mode centralized (CART),
            # federated_id3 (ID3: the same tree as ID3 on the pooled rows, over the job's bins)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                c = run_horizontal(train, mode=CENTRAL[tree_type], tree_type=tree_type, task="classification",
                                   label_column=label, test_data=test, random_state=seed,
                                   model_dir=os.path.join(work, f"c-{tree_type}"), overwrite=True, quiet=True)
            central = accuracies(c, k)
            for vote in votes:
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    s = run_horizontal(train, mode="icdta4fl", tree_type=tree_type, task="classification",
                                       label_column=label, test_data=test, random_state=seed,
                                       rule_votes=vote, model_dir=os.path.join(work, f"m-{tree_type}-{vote}"),
                                       overwrite=True, quiet=True)
                acc = accuracies(s, k)
                own = s.get("local_test_accuracys")
                out.append({
                    "table": name, "clients": k, "seed": seed, "tree_type": tree_type, "rule_votes": vote,
                    "rows": rows, "test_rows": n_test.astype(int).tolist(), "largest_client": big + 1,
                    "majority_class": str(majority),
                    "global_pooled": float((acc * n_test).sum() / n_test.sum()),
                    "global_largest_client": float(acc[big]),
                    "majority_pooled": maj_pooled, "majority_largest_client": maj_big,
                    "own_tree_largest_client": float(own[big]) if own else None,
                    "centralized_pooled": float((central * n_test).sum() / n_test.sum()),
                    "centralized_largest_client": float(central[big]),
                    "own_trees_pooled": float((np.array(own) * n_test).sum() / n_test.sum()) if own else None,
                    "kept_trees": s.get("kept_trees"), "merged_rules": s.get("merged_rules"),
                    "global_tree_leaves": s.get("global_tree_leaves"),
                    "seconds": time.perf_counter() - t0})
    return out


def summarize(runs):
    """Per (table, tree type, votes, clients) and overall: the worst and mean margins over always-majority."""
    groups = {}
    for r in runs:
        groups.setdefault((r["table"], r["tree_type"], r["rule_votes"], r["clients"]), []).append(r)
    cells = []
    for (table, tree_type, vote, k), rs in sorted(groups.items()):
        pooled = np.array([r["global_pooled"] - r["majority_pooled"] for r in rs]) * 100
        big = np.array([r["global_largest_client"] - r["majority_largest_client"] for r in rs]) * 100
        own = np.array([r["global_largest_client"] - r["own_tree_largest_client"] for r in rs]) * 100
        central = np.array([r["centralized_largest_client"] - r["majority_largest_client"] for r in rs]) * 100
        cells.append({"table": table, "tree_type": tree_type, "rule_votes": vote, "clients": k, "runs": len(rs),
                      "global_pooled_mean": float(np.mean([r["global_pooled"] for r in rs])),
                      "majority_pooled_mean": float(np.mean([r["majority_pooled"] for r in rs])),
                      "global_largest_client_mean": float(np.mean([r["global_largest_client"] for r in rs])),
                      "majority_largest_client_mean": float(np.mean([r["majority_largest_client"] for r in rs])),
                      "own_tree_largest_client_mean": float(np.mean([r["own_tree_largest_client"] for r in rs])),
                      "worst_pooled_minus_majority": float(pooled.min()),
                      "worst_largest_client_minus_majority": float(big.min()),
                      "runs_below_majority_pooled": int((pooled < 0).sum()),
                      "runs_below_majority_largest_client": int((big < 0).sum()),
                      "worst_largest_client_minus_own_tree": float(own.min()),
                      "centralized_pooled_mean": float(np.mean([r["centralized_pooled"] for r in rs])),
                      "centralized_largest_client_mean": float(np.mean([r["centralized_largest_client"] for r in rs])),
                      "runs_centralized_below_majority_largest_client": int((central < 0).sum())})
    return cells


def worst(cells, vote, key):
    vals = [c[key] for c in cells if c["rule_votes"] == vote]
    return float(min(vals)) if vals else None


def write(doc, out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "icdta4fl_skew.json"), "w") as fh:
        json.dump(doc, fh, indent=1)
    lines = ["# ICDTA4FL under label skew: the global tree against always-majority", "",
             f"Command: `{doc['command']}`", "",
             f"Dirichlet label skew (alpha 0.5) by `python -m fedforest split --by rows --scheme dirichlet`, "
             f"{doc['seeds']} seeds, 25 % of each client's rows as its test rows; `icdta4fl` at its defaults "
             "(`rule_votes = \"rows\"`), and with `rule_votes = \"fractions\"` (the method's text) where listed. "
             "Accuracy in %; margins in points: the global tree minus always-majority (the class of most "
             "training rows over all clients) on the pooled test rows and on the largest client's test rows; "
             "then the largest client's own tree on its test rows, and a reference: one tree of the same type "
             "trained on all clients' training rows pooled (CART: mode `centralized`; ID3: mode "
             "`federated_id3`, which grows the ID3 tree of the pooled rows over the job's bins).", "",
             f"Run on {doc['machine']} ({doc['cores']} cores), {doc['date']}, {doc['seconds'] / 60:.1f} minutes; "
             f"code at commit {str(doc['provenance']['git_commit'])[:12]}"
             f"{' with uncommitted changes' if doc['provenance'].get('fedforest_uncommitted_changes') else ''}.", ""]
    for vote in doc["votes"]:
        lines.append(f"- `rule_votes = \"{vote}\"`: worst pooled minus majority "
                     f"{doc['by_votes'][vote]['worst_pooled_minus_majority']:+.1f}, worst largest client minus "
                     f"majority {doc['by_votes'][vote]['worst_largest_client_minus_majority']:+.1f}")
    if doc.get("skipped"):
        lines += [""] + [f"- skipped: {s}" for s in doc["skipped"]]
    lines += ["", "| table | tree | rule_votes | K | global pooled | majority pooled | worst pooled − maj. | "
              "runs below (pooled) | global largest | majority largest | worst largest − maj. | "
              "runs below (largest) | own tree largest | worst largest − own tree | centralized pooled | "
              "centralized largest | centralized runs below (largest) |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in doc["cells"]:
        lines.append(f"| {c['table']} | {c['tree_type']} | {c['rule_votes']} | {c['clients']} | "
                     f"{100 * c['global_pooled_mean']:.1f} | {100 * c['majority_pooled_mean']:.1f} | "
                     f"{c['worst_pooled_minus_majority']:+.1f} | {c['runs_below_majority_pooled']}/{c['runs']} | "
                     f"{100 * c['global_largest_client_mean']:.1f} | {100 * c['majority_largest_client_mean']:.1f} | "
                     f"{c['worst_largest_client_minus_majority']:+.1f} | "
                     f"{c['runs_below_majority_largest_client']}/{c['runs']} | "
                     f"{100 * c['own_tree_largest_client_mean']:.1f} | "
                     f"{c['worst_largest_client_minus_own_tree']:+.1f} | "
                     f"{100 * c['centralized_pooled_mean']:.1f} | {100 * c['centralized_largest_client_mean']:.1f} | "
                     f"{c['runs_centralized_below_majority_largest_client']}/{c['runs']} |")
    lines.append("")
    with open(os.path.join(out, "icdta4fl_skew.md"), "w") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20, help="seeds 0..N-1 (default 20; e.g. 3 for a quick check)")
    ap.add_argument("--clients", default=",".join(map(str, CLIENTS)))
    ap.add_argument("--tables", default=",".join(TABLES))
    ap.add_argument("--votes", default="rows,fractions",
                    help="rule_votes settings to run (default rows,fractions: the default and the method's text)")
    ap.add_argument("--churn", default=None, metavar="PATH.csv", help="the churn table (else exported with Rscript)")
    ap.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    ap.add_argument("--out", default=OUT, help=f"folder of the result files (default {OUT})")
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    prov = provenance.record(args)
    votes = args.votes.split(",")
    t0 = time.perf_counter()
    tasks, skipped = [], []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.tables.split(","):
            path = table_path(name, args.churn, folder)
            if path is None:
                skipped.append(f"{name}: no --churn file and no Rscript with the modeldata package")
                continue
            for k in map(int, args.clients.split(",")):
                tasks += [(name, path, TABLES[name], k, seed, votes) for seed in range(args.seeds)]
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            runs = [r for part in pool.map(one_run, tasks) for r in part]
    cells = summarize(runs)
    doc = {"command": "python experiments/icdta4fl_skew.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "seeds": args.seeds, "votes": votes, "skipped": skipped,
           "worst_pooled_minus_majority": worst(cells, "rows", "worst_pooled_minus_majority"),
           "worst_largest_client_minus_majority": worst(cells, "rows", "worst_largest_client_minus_majority"),
           "by_votes": {v: {"worst_pooled_minus_majority": worst(cells, v, "worst_pooled_minus_majority"),
                            "worst_largest_client_minus_majority":
                                worst(cells, v, "worst_largest_client_minus_majority")} for v in votes},
           "cells": cells, "runs": runs, "machine": platform.node(), "cores": os.cpu_count(),
           "date": str(datetime.date.today()), "seconds": time.perf_counter() - t0, "provenance": prov}
    write(doc, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
