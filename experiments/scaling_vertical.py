"""Scaling of the vertical Federated Forest (the shape of the paper's Fig. 3).

Run with ``.venv/bin/python experiments/scaling_vertical.py`` (``make
experiments``).  Training time, bytes on the wire, rounds and peak memory of
federated training (``mpiexec``, master + K parties, AES-GCM channels on)
against three random forests on the same pooled rows, measured in the same
run: scikit-learn ``RandomForestClassifier``, XGBoost's random forest (one
boosting round of ``num_parallel_tree`` trees, ``XGBClassifier``) and
LightGBM's random-forest mode (``LGBMClassifier(boosting_type="rf")``); the
constructors are ``sklearn_rf``, ``xgboost_rf`` and ``lightgbm_rf`` in
``bench_vertical.py``:

* rows: 10^4, 10^5, 10^6 (2 parties, 20 features, ``--rows-trees`` trees, default 20);
* parties: 2, 4, 8 (``--sweep-rows`` rows, default 20,000, 100 trees; the
  columns dealt round-robin);
* trees: 10, 100, 300 (``--sweep-rows`` rows, 2 parties);
* ``n_jobs``: 1, 2 per rank (``--sweep-rows`` rows, 100 trees; the peers with
  the same thread count);
* with ``--big``: 10^6 rows x 50 features, 4 parties, 100 trees, depth 12.

Data: ``sklearn.datasets.make_classification(n_samples, n_features,
n_informative=10, random_state=0)``, synthetic so that the row count can be
chosen freely.  Forest: ``max_depth`` 10, ``max_features`` "sqrt", feature
subsets per node, seed 0.  XGBoost: ``XGBClassifier(n_estimators=1,
num_parallel_tree=T, learning_rate=1, subsample=0.632, colsample_bynode=
sqrt(d)/d, reg_lambda=1e-5, tree_method="hist", max_bin=256)``, the forest of
XGBoost's random-forest mode.  LightGBM: ``LGBMClassifier(boosting_type="rf",
n_estimators=T, bagging_fraction=0.632, bagging_freq=1,
feature_fraction_bynode=sqrt(d)/d, num_leaves=2**depth, max_bin=256,
min_child_samples=1)``.  Federated times come from the master's run summary
(the tree-building loop); the peers are timed around ``fit``, one after the
other, with the same thread count.
Peak memory: the master's from its summary, each party's from its model
manifest (``ru_maxrss``).  Writes ``experiments/results/scaling_vertical.{json,md,png}``.
The machine may be shared: ratios between systems measured back to back in
the same run are the figures to read, not absolute seconds.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402
from bench_vertical import cpu_busy, machine_info  # noqa: E402  (the shared machine report)
from bench_vertical import lightgbm_rf, sklearn_rf, xgboost_rf  # noqa: E402  (the same peers)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
PYTHON = os.path.join(VENV_BIN, "python")
MPIEXEC = os.path.join(VENV_BIN, "mpiexec")
RESULTS = os.path.join(ROOT, "experiments", "results")
WORKDIR = os.path.join(ROOT, "build", "scaling")
SEED = 0

JOB = """# scaling_vertical.py
[job]
task = "classification"
data = [{data}]
id_column = "id"
label_column = "label"
model_dir = "model"
progress = false
quiet = true

[forest]
n_estimators = {trees}
max_depth = {depth}
max_features = "sqrt"
random_state = {seed}
n_jobs = {n_jobs}
"""


def log(text):
    print(text, flush=True)


def make_data(n_rows, n_features):
    from sklearn.datasets import make_classification
    return make_classification(n_samples=n_rows, n_features=n_features, n_informative=10,
                               random_state=SEED)


def write_parties(folder, X, y, n_parties):
    """Party files (columns dealt round-robin, party 1 holds the label); returns paths."""
    os.makedirs(folder, exist_ok=True)
    ids = np.arange(X.shape[0], dtype=np.int64)
    paths = []
    for p in range(n_parties):
        cols = list(range(p, X.shape[1], n_parties))
        df = pd.DataFrame({"id": ids})
        for c in cols:
            df[f"f{c:02d}"] = X[:, c]
        if p == 0:
            df["label"] = y
        path = os.path.join(folder, f"party{p + 1}.parquet")
        df.to_parquet(path, index=False)
        paths.append(path)
    return paths


def federated(folder, paths, trees, depth, n_jobs):
    """One training under mpiexec; returns the master's summary plus the parties' peak memory."""
    job = os.path.join(folder, "job.toml")
    with open(job, "w") as fh:
        fh.write(JOB.format(data=", ".join(f'"{p}"' for p in paths), trees=trees, depth=depth,
                            seed=SEED, n_jobs=n_jobs))
    summary_path = os.path.join(folder, "summary.json")
    cmd = [MPIEXEC, "-n", str(len(paths) + 1), PYTHON, "-m", "fedforest", "train", "--config", job,
           "--summary-json", summary_path, "--overwrite"]
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(f"failed: {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}\n")
        raise SystemExit(1)
    with open(summary_path) as fh:
        s = json.load(fh)
    rss = {"0": s["peak_rss_mb"]}
    for rank, d in s["model_dirs"].items():
        if int(rank):
            with open(os.path.join(d, "manifest.json")) as fh:
                rss[str(rank)] = json.load(fh).get("peak_rss_mb")
    return {"train_seconds": s["train_seconds"], "rounds_per_forest": s["rounds_per_forest"],
            "bytes_total": s["bytes_per_tree"] * s["trees_built"], "tree_batch": s["tree_batch"],
            "n_jobs": s["n_jobs"], "peak_rss_mb": rss}


#: the peers in the order they are fitted: (name, result key, constructor(trees, depth, d, n_jobs))
PEERS = (("sklearn", "sklearn_seconds", lambda t, depth, d, j: sklearn_rf(t, depth, n_jobs=j)),
         ("xgboost", "xgboost_seconds", xgboost_rf),
         ("lightgbm", "lightgbm_seconds", lightgbm_rf))
PEER_KEYS = tuple(key for _, key, _ in PEERS)


def peers(X, y, trees, depth, n_jobs):
    """Training seconds of each peer on the pooled rows, one after the other
    (``n_jobs`` -1: all cores)."""
    out = {}
    for _, key, make in PEERS:
        model = make(trees, depth, X.shape[1], n_jobs)
        t0 = time.perf_counter()
        model.fit(X, y)
        out[key] = time.perf_counter() - t0
        del model
    return out


def add_ratios(row):
    """fedforest training time over each peer's, for the peers fitted on this point."""
    for name, key, _ in PEERS:
        if key in row:
            row[f"ratio_vs_{name}"] = row["train_seconds"] / row[key]
    return row


def point(sweep, value, X, y, n_parties, trees, depth, n_jobs, with_peers=True, peer_cache=None):
    folder = os.path.join(WORKDIR, f"{sweep}-{value}")
    shutil.rmtree(folder, ignore_errors=True)
    paths = write_parties(folder, X, y, n_parties)
    fed = federated(folder, paths, trees, depth, n_jobs)
    row = {"sweep": sweep, "value": value, "rows": X.shape[0], "features": X.shape[1],
           "parties": n_parties, "trees": trees, "depth": depth, "n_jobs": n_jobs, **fed}
    if with_peers:
        key = (X.shape, trees, depth, n_jobs)
        if peer_cache is not None and key in peer_cache:
            row.update(peer_cache[key])
        else:
            row.update(peers(X, y, trees, depth, n_jobs))
            if peer_cache is not None:
                peer_cache[key] = {k: row[k] for k in PEER_KEYS}
        add_ratios(row)
    shutil.rmtree(folder, ignore_errors=True)
    log(f"  {sweep}={value}: fedforest {row['train_seconds']:.2f}s, {row['rounds_per_forest']} rounds, "
        f"{row['bytes_total'] / 2 ** 20:.1f} MiB, peak RSS {max(v or 0 for v in row['peak_rss_mb'].values()):.0f} MiB"
        + (f"; sklearn {row['sklearn_seconds']:.2f}s, xgboost {row['xgboost_seconds']:.2f}s, "
           f"lightgbm {row['lightgbm_seconds']:.2f}s" if with_peers else ""))
    return row


def warm_up():
    """A tiny job per rank count (numba's on-disk cache; not recorded), and each peer once."""
    X, y = make_data(2000, 20)
    for k in (2, 4, 8):
        point("warmup", k, X, y, k, 3, 4, -1, with_peers=False)
    peers(X, y, 3, 4, -1)


def markdown(rows, big):
    lines = ["# Vertical Federated Forest: scaling", "",
             "Produced by `experiments/scaling_vertical.py`; ratios = fedforest training time / peer "
             "fit time, measured back to back in the same run. Bytes: everything the master and "
             "the parties sent during training. Peak RSS: largest resident set of any rank.", "",
             "| sweep | value | rows | features | parties | trees | n_jobs | fedforest s | rounds | MiB sent "
             "| peak RSS MiB | sklearn s | xgboost s | lightgbm s | ÷ sklearn | ÷ xgboost | ÷ lightgbm |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows + ([big] if big else []):
        lines.append(
            f"| {r['sweep']} | {r['value']} | {r['rows']:,} | {r['features']} | {r['parties']} | "
            f"{r['trees']} | {r['n_jobs']} | {r['train_seconds']:.2f} | {r['rounds_per_forest']} | "
            f"{r['bytes_total'] / 2 ** 20:.1f} | {max(v or 0 for v in r['peak_rss_mb'].values()):.0f} | "
            + "".join(f"{r.get(k, float('nan')):.2f} | " for k in PEER_KEYS)
            + " | ".join(f"{r.get(f'ratio_vs_{name}', float('nan')):.2f}" for name, _, _ in PEERS) + " |")
    return "\n".join(lines) + "\n"


def _axis(ax, x, label, logx, ylabel):
    ax.set_xlabel(label)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{v:,}" for v in x])
    ax.minorticks_off()
    ax.grid(alpha=0.3)


def _headroom(ax, log):
    """Room above the highest point for the legend (a legend must not hide a point)."""
    lo, hi = ax.get_ylim()
    if log:
        ax.set_ylim(lo, hi * (hi / lo) ** 0.45)
    else:
        ax.set_ylim(min(lo, 0), hi + 0.45 * (hi - min(lo, 0)))


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sweeps = [("rows", "rows", True), ("parties", "parties", False), ("trees", "trees", True),
              ("n_jobs", "n_jobs per rank", False)]
    fig, axes = plt.subplots(2, 4, figsize=(17, 7.5))
    for col, (sweep, label, logx) in enumerate(sweeps):
        pts = sorted((r for r in rows if r["sweep"] == sweep), key=lambda r: r["value"])
        if not pts:
            continue
        x = [r["value"] for r in pts]
        ax = axes[0, col]
        ax.plot(x, [r["train_seconds"] for r in pts], "o-", label="fedforest (federated)")
        for key, style, name in (("sklearn_seconds", "s--", "scikit-learn RF"),
                                 ("xgboost_seconds", "^--", "XGBoost RF"),
                                 ("lightgbm_seconds", "v--", "LightGBM RF")):
            have = [r for r in pts if key in r]
            if have:
                ax.plot([r["value"] for r in have], [r[key] for r in have], style,
                        label=name + (" (pooled data: one fit per point, no parties)" if sweep == "parties"
                                      else ""))
        missing = [r["value"] for r in pts if "xgboost_seconds" not in r]
        if missing and any("xgboost_seconds" in r for r in pts):
            ax.text(0.02, 0.02, f"peers not run at {', '.join(f'{v:,}' for v in missing)}",
                    transform=ax.transAxes, fontsize=7)
        if sweep == "n_jobs":
            for key, name in (("xgboost_seconds", "XGBoost"), ("sklearn_seconds", "scikit-learn"),
                              ("lightgbm_seconds", "LightGBM")):
                have = [r[key] for r in pts if key in r]
                if len(have) >= 2 and have[-1] > 2 * have[0]:
                    ax.text(0.02, 0.5, f"{name} slower with more threads:\nthe cores were shared, a noisy point",
                            transform=ax.transAxes, fontsize=7)
        _axis(ax, x, label, logx, "training seconds")
        ax.set_title(f"time vs {label}")
        _headroom(ax, logx)
        ax.legend(fontsize=7, loc="upper left")
        ax = axes[1, col]
        ax.plot(x, [r["bytes_total"] / 2 ** 20 for r in pts], "o-", color="C3", label="MiB sent (all ranks)")
        _axis(ax, x, label, logx, "MiB sent (all ranks)")
        ax2 = ax.twinx()
        ax2.plot(x, [max(v or 0 for v in r["peak_rss_mb"].values()) for r in pts], "s:", color="C4",
                 label="peak RSS of the largest rank")
        ax2.set_ylabel("peak RSS of a rank, MiB", color="C4")
        ax2.set_ylim(0, 1.5 * max(max(v or 0 for v in r["peak_rss_mb"].values()) for r in pts))
        _headroom(ax, logx)
        lines = ax.get_legend_handles_labels()
        more = ax2.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="upper left")
        ax.set_title(f"bytes and memory vs {label}")
    busy = [r for r in rows if r.get("cpu_busy_by_others", 0) > 0.25]
    note = (f"; {len(busy)} point(s) measured while other processes used > 25 % of the CPU: noisy"
            if busy else "")
    fig.suptitle("Vertical Federated Forest scaling (20 features, depth 10, synthetic data; "
                 "rows sweep with 20 trees, other sweeps on 20,000 rows; peers fit the same pooled "
                 f"data in the same run){note}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(out, doc, rows, big, t_all, busy):
    """The JSON, markdown and plot of what has been measured so far; returns the markdown."""
    doc.update(machine=dict(machine_info(), cpu_busy_by_others=busy, loadavg_end=list(os.getloadavg())),
               total_seconds=time.perf_counter() - t_all)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".json", "w") as fh:
        json.dump(doc, fh, indent=2, default=str)
        fh.write("\n")
    md = markdown(rows, big)
    with open(out + ".md", "w") as fh:
        fh.write(md)
    if rows:
        plot(rows, out + ".png")
    return md


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--max-rows", type=int, default=1_000_000, help="largest row count of the rows sweep")
    ap.add_argument("--big", action="store_true", help="also the 10^6 x 50, 4 parties, depth 12 run")
    ap.add_argument("--sweeps", default="rows,parties,trees,n_jobs", help="comma list, or 'none'")
    ap.add_argument("--sweep-rows", type=int, default=20_000,
                    help="rows of the parties, trees and n_jobs sweeps")
    ap.add_argument("--rows-trees", type=int, default=20, help="trees of the rows sweep")
    ap.add_argument("--replot", action="store_true", help="only redraw the plot from the --out JSON")
    ap.add_argument("--keep", default="", help="comma list of sweeps whose points are kept from --out")
    ap.add_argument("--peers-max-rows", type=int, default=None,
                    help="rows sweep: fit the peers only up to this many rows (None: always)")
    ap.add_argument("--out", default=os.path.join(RESULTS, "scaling_vertical"))
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    provenance.record(args)           # refuses uncommitted code unless --allow-dirty
    if args.replot:
        with open(args.out + ".json") as fh:
            plot(json.load(fh)["rows"], args.out + ".png")
        return 0
    t_all = time.perf_counter()
    busy = {"start": cpu_busy()}
    log("warm-up (not recorded)")
    warm_up()
    rows, cache = [], {}
    if args.keep:
        # points of an earlier run of this script (other sweeps) stay in the results
        with open(args.out + ".json") as fh:
            rows += [r for r in json.load(fh)["rows"] if r["sweep"] in args.keep.split(",")]
    doc = {"rows": rows, "big": None,
           "setup": {"data": "sklearn make_classification(n_samples, n_features, n_informative=10, "
                             "random_state=0)", "depth": args.depth, "max_features": "sqrt",
                     "feature_sampling": "node", "seed": SEED, "channels": "AES-256-GCM",
                     "sweep_rows": args.sweep_rows, "rows_sweep_trees": args.rows_trees,
                     "peers_max_rows": args.peers_max_rows,
                     "command": "python experiments/scaling_vertical.py " + " ".join(argv or sys.argv[1:])}}
    base_X, base_y = make_data(args.sweep_rows, 20)
    sweeps = args.sweeps.split(",")
    if "rows" in sweeps:
        log(f"rows sweep: 2 parties, {args.rows_trees} trees")
        for n in (10_000, 100_000, 1_000_000):
            if n > args.max_rows:
                continue
            X, y = make_data(n, 20)
            with_peers = args.peers_max_rows is None or n <= args.peers_max_rows
            rows.append(point("rows", n, X, y, 2, args.rows_trees, args.depth, -1,
                              with_peers=with_peers, peer_cache=cache))
            write(args.out, doc, rows, None, t_all, busy)
            del X, y
    if "parties" in sweeps:
        log(f"parties sweep: {args.sweep_rows:,} rows, 100 trees")
        for k in (2, 4, 8):
            rows.append(point("parties", k, base_X, base_y, k, 100, args.depth, -1, peer_cache=cache))
            write(args.out, doc, rows, None, t_all, busy)
    if "trees" in sweeps:
        log(f"trees sweep: {args.sweep_rows:,} rows, 2 parties")
        for t in (10, 100, 300):
            rows.append(point("trees", t, base_X, base_y, 2, t, args.depth, -1, peer_cache=cache))
            write(args.out, doc, rows, None, t_all, busy)
    if "n_jobs" in sweeps:
        log(f"n_jobs sweep: {args.sweep_rows:,} rows, 2 parties, 100 trees (peers with the same n_jobs)")
        for j in (1, 2):
            rows.append(point("n_jobs", j, base_X, base_y, 2, 100, args.depth, j, peer_cache=cache))
            write(args.out, doc, rows, None, t_all, busy)
    big = None
    if args.big:
        log("big run: 10^6 x 50, 4 parties, 100 trees, depth 12")
        del base_X, base_y
        X, y = make_data(1_000_000, 50)
        # the federated figures are written before the (long) peer fits
        big = doc["big"] = point("big", "1e6x50", X, y, 4, 100, 12, -1, with_peers=False)
        write(args.out, doc, rows, big, t_all, busy)
        big.update(peers(X, y, 100, 12, -1))
        add_ratios(big)
        log(f"  big: sklearn {big['sklearn_seconds']:.1f}s, xgboost {big['xgboost_seconds']:.1f}s, "
            f"lightgbm {big['lightgbm_seconds']:.1f}s")
    busy["end"] = cpu_busy()
    print(write(args.out, doc, rows, big, t_all, busy))
    log(f"results: {args.out}.{{json,md,png}} ({doc['total_seconds']:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
