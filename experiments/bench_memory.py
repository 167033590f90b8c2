"""Memory and set-up time of vertical training at scale (``make bench``).

Run with ``.venv/bin/python experiments/bench_memory.py [--rows 1000000 10000000]``.
For each row count: synthetic data of ``--features`` float columns (default
40) dealt round-robin over ``--parties`` parties (default 4), one CSV file per
party written to a temporary folder (text IDs, each party missing a different
0.5% of the rows and holding its rows in its own order; party 1 holds the
label); a 10-tree, depth-6 ``hist`` forest trained with ``mpiexec`` (the
CLI, one rank per process).  Measured per rank: peak RSS (``ru_maxrss`` of
the rank: the master's from its run summary, a party's from its model
manifest, which also holds the memory held when growth starts and its set-up
seconds), each taken as growth over a 1,000-row job of the same shape (the
interpreter, libraries and compiled kernels; run after a first 1,000-row job
that fills numba's cache, so no rank of the baseline compiles).  Beside it, XGBoost's random
forest (``num_parallel_tree``, ``hist``) on the pooled float64 table in a
child process: its peak RSS over the same process before the data, and its
fit time; skipped where the pooled table would not fit in half the machine's
available memory.

Targets checked: a party's peak growth <= 1.5 x one float64 copy of its
columns; what it holds in training <= 1.2 bytes per cell + 64 bytes per
row; the master's growth <= 64 bytes per row.  Writes
``experiments/results/bench_memory.{json,png}``.  Timings are noisy where
the machine is shared (the load average is recorded).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
PYTHON = os.path.join(VENV_BIN, "python")
MPIEXEC = os.path.join(VENV_BIN, "mpiexec")
RESULTS = os.path.join(ROOT, "experiments", "results")
SEED = 0
TREES, DEPTH = 10, 6
BLOCK_ROWS = 250_000
NO_XGB = [False]
CODE = [ROOT]          # the fedforest source the jobs run (--code: another checkout, for a before/after)

JOB = """# bench_memory.py
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
split_method = "hist"
random_state = 0
"""


def log(text):
    print(text, flush=True)


def features_of(n_features, n_parties, p):
    return list(range(p, n_features, n_parties))


def block(lo, hi, n_features):
    """Rows lo..hi-1 of the pooled table (a pure function of the row numbers)."""
    rng = np.random.default_rng([SEED, lo])
    X = np.round(rng.normal(size=(hi - lo, n_features)), 5)
    y = (X[:, 0] + X[:, 1] * X[:, 2] + 0.5 * rng.normal(size=hi - lo) > 0).astype(np.int64)
    return X, y


def write_parties(folder, n_rows, n_features, n_parties):
    """One CSV per party, written in blocks; returns the paths and bytes."""
    import pyarrow as pa
    from pyarrow import csv
    paths = [os.path.join(folder, f"party{p + 1}.csv") for p in range(n_parties)]
    writers = [None] * n_parties
    for lo in range(0, n_rows, BLOCK_ROWS):
        hi = min(lo + BLOCK_ROWS, n_rows)
        X, y = block(lo, hi, n_features)
        for p in range(n_parties):
            rng = np.random.default_rng([SEED, p, lo])
            keep = rng.random(hi - lo) >= 0.005           # each party misses its own 0.5%
            order = rng.permutation(int(keep.sum()))      # and holds its rows in its own order
            rows = np.flatnonzero(keep)[order]
            cols = {"id": pa.array([f"user-{i:010d}" for i in (lo + rows).tolist()])}
            for c in features_of(n_features, n_parties, p):
                cols[f"f{c:02d}"] = pa.array(X[rows, c])
            if p == 0:
                cols["label"] = pa.array(y[rows])
            table = pa.table(cols)
            if writers[p] is None:
                writers[p] = csv.CSVWriter(paths[p], table.schema)
            writers[p].write_table(table)
    for w in writers:
        w.close()
    return paths, [os.path.getsize(p) for p in paths]


def federated(folder, paths):
    job = os.path.join(folder, "job.toml")
    with open(job, "w") as fh:
        fh.write(JOB.format(data=", ".join(f'"{p}"' for p in paths), trees=TREES, depth=DEPTH))
    summary_path = os.path.join(folder, "summary.json")
    cmd = [MPIEXEC, "-n", str(len(paths) + 1), PYTHON, "-m", "fedforest", "train", "--config", job,
           "--summary-json", summary_path, "--overwrite"]
    env = dict(os.environ, PYTHONPATH=CODE[0])
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"failed: {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    with open(summary_path) as fh:
        s = json.load(fh)
    parties = {}
    for rank, d in sorted(s["model_dirs"].items()):
        if int(rank) == 0:
            continue
        with open(os.path.join(d, "manifest.json")) as fh:
            m = json.load(fh)
        parties[rank] = {k: m.get(k) for k in ("peak_rss_mb", "peak_rss_setup_mb", "rss_training_mb",
                                               "setup_seconds")}
    return {"wall_seconds": wall, "train_seconds": s["train_seconds"],
            "master_total_seconds": s["total_seconds"], "master_peak_rss_mb": s["peak_rss_mb"],
            "n_rows_aligned": s.get("n_rows"), "parties": parties}


XGB_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {here!r})
import numpy as np
from bench_memory import block
from bench_vertical import xgboost_rf
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
n, d = {n}, {d}
import xgboost  # noqa: F401  (loaded before the baseline)
base = rss()
X = np.empty((n, d)); y = np.empty(n, dtype=np.int64)
for lo in range(0, n, 250000):
    hi = min(lo + 250000, n)
    X[lo:hi], y[lo:hi] = block(lo, hi, d)
data = rss()
t0 = time.perf_counter()
xgboost_rf({trees}, {depth}, d).fit(X, y)
print(json.dumps({{"fit_seconds": time.perf_counter() - t0, "peak_rss_mb": rss(),
                  "baseline_rss_mb": base, "data_rss_mb": data}}))
"""


def xgboost_peer(n_rows, n_features):
    code = XGB_CHILD.format(here=os.path.dirname(os.path.abspath(__file__)), n=n_rows, d=n_features,
                            trees=TREES, depth=DEPTH)
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    if proc.returncode != 0:
        return {"error": proc.stderr[-500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def available_mb():
    with open("/proc/meminfo") as fh:
        info = dict(line.split(":", 1) for line in fh)
    return int(info["MemAvailable"].split()[0]) / 1024.0


def run(n_rows, n_features, n_parties, small, peer=True):
    with tempfile.TemporaryDirectory(prefix="bench_memory_") as folder:
        t0 = time.perf_counter()
        paths, sizes = write_parties(folder, n_rows, n_features, n_parties)
        log(f"{n_rows} rows: data written in {time.perf_counter() - t0:.1f}s "
            f"({sum(sizes) / 2 ** 20:.0f} MiB of CSV)")
        load = os.getloadavg()[0]
        fed = federated(folder, paths)
    row = {"n_rows": n_rows, "n_features": n_features, "n_parties": n_parties, "csv_bytes": sizes,
           "load_average_1min": load, **fed}
    if small is not None:
        cols = [len(features_of(n_features, n_parties, p)) for p in range(n_parties)]
        for p, (rank, info) in enumerate(sorted(fed["parties"].items(), key=lambda kv: int(kv[0]))):
            s0 = small["parties"][rank]
            f64 = n_rows * cols[p] * 8 / 2 ** 20
            info["peak_growth_mb"] = info["peak_rss_mb"] - s0["peak_rss_mb"]
            held = info.get("rss_training_mb")
            info["held_growth_mb"] = None if held is None else held - s0["rss_training_mb"]
            info["float64_copy_mb"] = f64
            info["peak_over_float64"] = info["peak_growth_mb"] / f64
            info["held_over_target"] = None if held is None else (
                info["held_growth_mb"] * 2 ** 20 / (n_rows * cols[p] * 1.2 + n_rows * 64))
        row["master_growth_mb"] = fed["master_peak_rss_mb"] - small["master_peak_rss_mb"]
        row["master_bytes_per_row"] = row["master_growth_mb"] * 2 ** 20 / n_rows
        row["setup_seconds"] = max(p["setup_seconds"] or 0 for p in fed["parties"].values()) or \
            fed["master_total_seconds"] - fed["train_seconds"]
    pooled_mb = n_rows * n_features * 8 / 2 ** 20
    if not peer:
        return row
    if NO_XGB[0]:
        row["xgboost"] = {"skipped": "--no-xgboost"}
    elif pooled_mb * 3 < available_mb():
        row["xgboost"] = xgboost_peer(n_rows, n_features)
        if "peak_rss_mb" in row["xgboost"]:
            row["xgboost"]["growth_mb"] = row["xgboost"]["peak_rss_mb"] - row["xgboost"]["baseline_rss_mb"]
    else:
        row["xgboost"] = {"skipped": f"pooled table {pooled_mb:.0f} MiB x 3 > available memory"}
    return row


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = [r["n_rows"] for r in rows]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 5))
    a1.plot(n, [max(p["peak_growth_mb"] for p in r["parties"].values()) for r in rows], "o-",
            label="fedforest party, peak growth")
    a1.plot(n, [max(p["held_growth_mb"] or 0 for p in r["parties"].values()) for r in rows], "s-",
            label="fedforest party, held in training")
    a1.plot(n, [r["master_growth_mb"] for r in rows], "^-", label="fedforest master, peak growth")
    xg = [(r["n_rows"], r["xgboost"].get("growth_mb")) for r in rows if r["xgboost"].get("growth_mb")]
    if xg:
        a1.plot([a for a, _ in xg], [b for _, b in xg], "d--", label="XGBoost RF (pooled), peak growth")
    a1.plot(n, [max(p["float64_copy_mb"] for p in r["parties"].values()) for r in rows], "x:",
            color="grey", label="one float64 copy of a party's columns")
    a1.set(xscale="log", yscale="log", xlabel="rows", ylabel="MiB", title="memory per rank")
    # legends below the panels: no point hides under them, however few row counts
    a1.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    a2.plot(n, [r["setup_seconds"] for r in rows], "o-", label="fedforest set-up (slowest party)")
    a2.plot(n, [r["train_seconds"] for r in rows], "s-", label="fedforest training (master)")
    a2.plot(n, [r["wall_seconds"] for r in rows], "^-", label="fedforest job, wall")
    xt = [(r["n_rows"], r["xgboost"].get("fit_seconds")) for r in rows if r["xgboost"].get("fit_seconds")]
    if xt:
        a2.plot([a for a, _ in xt], [b for _, b in xt], "d--", label="XGBoost RF fit (pooled)")
    a2.set(xscale="log", yscale="log", xlabel="rows", ylabel="seconds", title="time")
    a2.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    fig.suptitle(f"{rows[0]['n_features']} float columns over {rows[0]['n_parties']} parties, "
                 f"{TREES} trees, depth {DEPTH}, hist")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--features", type=int, default=40)
    ap.add_argument("--parties", type=int, default=4)
    ap.add_argument("--out", default=os.path.join(RESULTS, "bench_memory"))
    ap.add_argument("--code", default=ROOT, help="the fedforest checkout the jobs run (default: this one)")
    ap.add_argument("--no-xgboost", action="store_true")
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    prov = provenance.record(args)
    CODE[0] = os.path.abspath(args.code)
    NO_XGB[0] = args.no_xgboost
    # a first 1,000-row job compiles (or loads) the kernels into numba's cache, so the
    # measured baseline holds what every job holds, not the compiler's memory
    run(1000, args.features, args.parties, None, peer=False)
    small = run(1000, args.features, args.parties, None)
    log(f"1000-row job: master {small['master_peak_rss_mb']:.0f} MiB, parties "
        + ", ".join(f"{p['peak_rss_mb']:.0f}" for p in small["parties"].values()) + " MiB")
    rows = []
    for n in args.rows:
        row = run(n, args.features, args.parties, small)
        rows.append(row)
        log(json.dumps(row, indent=1))
        doc = {"machine": {"cpus": os.cpu_count(), "available_mb_at_end": available_mb()},
               "trees": TREES, "depth": DEPTH, "baseline_1000_rows": small, "rows": rows,
               "note": "timings noisy on a shared machine: see load_average_1min per row", "provenance": prov}
        provenance.write_result(args.out + ".json", doc)
        plot(rows, args.out + ".png")
    return rows


if __name__ == "__main__":
    main()
