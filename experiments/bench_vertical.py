"""Benchmark of the vertical Federated Forest against scikit-learn, XGBoost and LightGBM.

Run with ``make bench`` (or ``.venv/bin/python experiments/bench_vertical.py``).
This script is only the driver: it runs no MPI itself.  It

1. generates one synthetic table with ``make_classification(n_samples=110_000,
   n_features=20, random_state=0)`` (scikit-learn's defaults otherwise) and
   splits it by rows: the first 100,000 rows train, the last 10,000 test
   (``make_classification`` shuffles, so the split is random);
2. splits both parts by columns into two party files (Parquet): party 1 holds
   ``f00..f09`` and the label, party 2 holds ``f10..f19``; the test files hold
   no label (the truth stays with this driver);
3. writes a job TOML and runs, as subprocesses with ``mpiexec -n 3`` (master +
   2 parties), a small warm-up job (so numba's on-disk cache is compiled and
   compile time is not counted), then ``train``, ``predict --predict-method
   oneshot`` and ``predict --predict-method classical`` on the benchmark data;
4. trains three random-forest peers on the pooled training data in this
   process, each with all cores, after one tiny untimed fit each (XGBoost's
   first fit in a process costs seconds of start-up):

   * scikit-learn ``RandomForestClassifier(n_estimators=T, max_depth=D,
     max_features="sqrt")``;
   * XGBoost's random forest as one boosting round of ``T`` parallel trees:
     ``XGBClassifier(n_estimators=1, num_parallel_tree=T, learning_rate=1,
     subsample=0.632, colsample_bynode=sqrt(d)/d, reg_lambda=1e-5,
     tree_method="hist", max_depth=D, max_bin=256)`` (the forest that
     XGBoost's deprecated random-forest wrapper grows with the same settings, tree for tree);
   * LightGBM's random-forest mode: ``LGBMClassifier(boosting_type="rf",
     n_estimators=T, bagging_fraction=0.632, bagging_freq=1,
     feature_fraction_bynode=sqrt(d)/d, max_depth=D, num_leaves=2**D,
     max_bin=256, min_child_samples=1)``;

   (see :func:`sklearn_rf`, :func:`xgboost_rf` and :func:`lightgbm_rf`);
5. prints a table (metric, value, target, met?) and writes
   ``experiments/results/bench_vertical.json``.  Each peer's training time
   (``sklearn_rf_seconds``, ``xgboost_rf_seconds``, ``lightgbm_rf_seconds``)
   sits beside its test accuracy (``accuracy_sklearn_rf``, ...);
   ``fastest_peer`` names the peer with the shortest training time and
   ``train_ratio_vs_fastest_peer`` is the federated training time over it.

Timings of the federated runs come from the product, not from subprocess wall
time: the master writes its run summary with ``--summary-json`` (training:
``train_seconds`` = the tree-building loop, ``rounds_per_tree``,
``bytes_per_tree``; prediction: ``seconds`` and ``rounds`` of the prediction
protocol).  Peers are timed around ``fit`` / ``predict`` only.  The training
times of the federated forest, XGBoost, LightGBM and fedforest's
single-process ``ForestClassifier`` are the medians of ``--train-repeats``
runs each, taken in turns (federated, XGBoost, LightGBM, single process,
federated, ...); scikit-learn's and the other figures come from single runs.
CPU: ``cpu_seconds_federated_job`` is the user + sys time of every rank of a
whole training job (``getrusage`` of the finished ``mpiexec``), against the
CPU time of XGBoost's fit (all its threads), medians of the same turns.
The share of CPU used by other processes is sampled for one second at the
start, between the federated runs and the peers, and at the end; the script
warns when it exceeds 25 % (XGBoost in particular slows down many times on
shared cores).

Forest settings: 100 trees, ``max_depth`` 10, ``max_features`` "sqrt", seed 0.
scikit-learn's ``max_features``, XGBoost's ``colsample_bynode`` and LightGBM's
``feature_fraction_bynode`` draw the feature subset per node, as the product's
default ``feature_sampling = "node"`` does (the paper's "tree" draws one subset
per tree; pass ``--feature-sampling tree`` to benchmark that; the peers keep
drawing per node).  XGBoost and LightGBM draw 63.2 % of the rows per tree
without replacement (the expected share of distinct rows in a bootstrap
sample) and bin each feature into at most 256 histogram bins.  AES-GCM
channels are always on in the product.
"""
import argparse
import datetime as dt
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
PYTHON = os.path.join(VENV_BIN, "python")
MPIEXEC = os.path.join(VENV_BIN, "mpiexec")
RESULT = os.path.join(ROOT, "experiments", "results", "bench_vertical.json")
WORKDIR = os.path.join(ROOT, "build", "bench")

SEED = 0
N_FEATURES = 20
N_PARTIES = 2
LABEL = "label"

JOB = """# bench_vertical.py: {what}
[job]
task = "classification"
data = ["train-party1.parquet", "train-party2.parquet"]
id_column = "id"
label_column = "{label}"
model_dir = "model"
output = "predictions.csv"
progress = false

[forest]
n_estimators = {trees}
max_depth = {depth}
max_features = "sqrt"
feature_sampling = "{feature_sampling}"
random_state = {seed}
"""


def log(text):
    print(text, flush=True)


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------
def make_data(n_train, n_test, seed=SEED):
    from sklearn.datasets import make_classification
    X, y = make_classification(n_samples=n_train + n_test, n_features=N_FEATURES, random_state=seed)
    return (X[:n_train], y[:n_train]), (X[n_train:], y[n_train:])


def feature_names():
    return [f"f{j:02d}" for j in range(N_FEATURES)]


def party_columns():
    names = feature_names()
    half = N_FEATURES // N_PARTIES
    return [names[p * half:(p + 1) * half] for p in range(N_PARTIES)]


def write_job(folder, train, test, trees, depth, feature_sampling, what):
    """Party files (Parquet) and job.toml in ``folder``; returns the paths."""
    os.makedirs(folder, exist_ok=True)
    names = feature_names()
    groups = party_columns()
    paths = {"train": [], "test": []}
    offset = 0
    for part, (X, y) in (("train", train), ("test", test)):
        ids = np.arange(offset, offset + X.shape[0], dtype=np.int64)  # test IDs follow train IDs
        offset += X.shape[0]
        for p, cols in enumerate(groups, start=1):
            df = pd.DataFrame({"id": ids})
            for c in cols:
                df[c] = X[:, names.index(c)]
            if part == "train" and p == 1:
                df[LABEL] = y
            path = os.path.join(folder, f"{part}-party{p}.parquet")
            df.to_parquet(path, index=False)
            paths[part].append(path)
    pd.DataFrame({"id": np.arange(train[0].shape[0], offset), LABEL: test[1]}).to_parquet(
        os.path.join(folder, "test-truth.parquet"), index=False)
    job = os.path.join(folder, "job.toml")
    with open(job, "w") as fh:
        fh.write(JOB.format(what=what, label=LABEL, trees=trees, depth=depth,
                            feature_sampling=feature_sampling, seed=SEED))
    paths["job"] = job
    return paths


# ---------------------------------------------------------------------------
# Federated runs (subprocesses under mpiexec)
# ---------------------------------------------------------------------------
def run_fedforest(command, job, summary_path, extra=()):
    """One ``mpiexec -n 3 python -m fedforest <command>``; returns (summary dict, stdout, wall s)."""
    if os.path.exists(summary_path):
        os.remove(summary_path)
    cmd = [MPIEXEC, "-n", str(N_PARTIES + 1), PYTHON, "-m", "fedforest", command,
           "--config", job, "--summary-json", summary_path, *extra]
    t0 = time.perf_counter()
    cpu0 = _children_cpu()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    cpu = _children_cpu() - cpu0
    if proc.returncode != 0 or not os.path.isfile(summary_path):
        sys.stderr.write(f"command failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                         f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}\n")
        if not os.path.isfile(summary_path):
            sys.stderr.write(f"no summary written to {summary_path} (the CLI needs --summary-json)\n")
        raise SystemExit(1)
    with open(summary_path) as fh:
        summary = json.load(fh)
    summary["job_cpu_seconds"] = cpu      # user + sys of every rank (and the launcher), whole job
    return summary, proc.stdout, wall


def _children_cpu():
    """user + sys seconds of this process's finished children (mpiexec and its ranks)."""
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def federated(paths, folder, tag):
    """Train, then predict the test files with both methods.  Returns the summaries."""
    out = {}
    out["train"], stdout, out["train_wall"] = run_fedforest(
        "train", paths["job"], os.path.join(folder, "summary-train.json"), ["--overwrite"])
    out["train_stdout"] = stdout
    for method in ("oneshot", "classical"):
        pred = os.path.join(folder, f"predictions-{method}.csv")
        s, stdout, wall = run_fedforest(
            "predict", paths["job"], os.path.join(folder, f"summary-predict-{method}.json"),
            ["--predict-method", method, "--output", pred, "--data", *paths["test"]])
        s["predictions_file"] = pred
        out[method], out[method + "_wall"], out[method + "_stdout"] = s, wall, stdout
    log(f"  [{tag}] train {out['train_wall']:.1f}s wall, predict oneshot {out['oneshot_wall']:.1f}s, "
        f"classical {out['classical_wall']:.1f}s wall (incl. start-up)")
    return out


def peak_rss(train_summary):
    """Peak resident memory per rank in MiB: the master's from its summary, each
    party's from the manifest in its model folder (parties keep it to themselves)."""
    out = {"0": train_summary.get("peak_rss_mb")}
    for rank, folder in sorted(train_summary.get("model_dirs", {}).items(), key=lambda kv: int(kv[0])):
        if int(rank) == 0:
            continue
        try:
            with open(os.path.join(folder, "manifest.json")) as fh:
                out[str(rank)] = json.load(fh).get("peak_rss_mb")
        except (OSError, ValueError):
            out[str(rank)] = None
    return out


def fed_accuracy(pred_file, truth):
    pred = pd.read_csv(pred_file, dtype={"id": str})
    joined = pred.merge(truth, on="id", how="inner")
    if len(joined) != len(truth):
        raise SystemExit(f"{pred_file}: {len(joined)} of {len(truth)} test IDs have a prediction")
    return float((joined["prediction"].astype(int).to_numpy() == joined[LABEL].to_numpy()).mean()), \
        pred.set_index("id")["prediction"]


# ---------------------------------------------------------------------------
# Peers (in this process, pooled data)
# ---------------------------------------------------------------------------
def time_fit_predict(model, train, test):
    """Fit and predict timed separately (the fit's wall and CPU seconds of all
    its threads), plus test accuracy."""
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(*train)
    fit, fit_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    pred = model.predict(test[0])
    predict = time.perf_counter() - t0
    return {"fit_seconds": fit, "fit_cpu_seconds": fit_cpu, "predict_seconds": predict,
            "accuracy": float((pred == test[1]).mean())}


def run_single_process(train, test, trees, depth, feature_sampling):
    """fedforest's ForestClassifier on the pooled columns (the federated forest's trees, one process)."""
    from fedforest import ForestClassifier
    model = ForestClassifier(n_estimators=trees, max_depth=depth, feature_sampling=feature_sampling,
                             random_state=0, n_jobs=-1)
    return time_fit_predict(model, train, test)


#: share of the rows each XGBoost / LightGBM tree is grown on (drawn without
#: replacement; 0.632 is the expected share of distinct rows in a bootstrap sample)
PEER_ROW_FRACTION = 0.632
#: histogram bins per feature of XGBoost and LightGBM (XGBoost's default)
PEER_MAX_BIN = 256
#: LightGBM's largest allowed ``num_leaves``
LIGHTGBM_MAX_LEAVES = 131_072


def node_feature_fraction(n_features):
    """Share of the features drawn per node: sqrt(d)/d, as ``max_features="sqrt"``."""
    return math.sqrt(n_features) / n_features


def _threads(n_jobs):
    return n_jobs if n_jobs is not None and n_jobs > 0 else os.cpu_count()


def sklearn_rf(trees, depth, n_jobs=-1):
    """scikit-learn's random forest (bootstrap rows, sqrt(d) features per node)."""
    from sklearn.ensemble import RandomForestClassifier
    return RandomForestClassifier(n_estimators=trees, max_depth=depth, max_features="sqrt",
                                  n_jobs=n_jobs, random_state=SEED)


def xgboost_rf(trees, depth, n_features, n_jobs=None):
    """XGBoost's random forest: one boosting round of ``trees`` parallel trees,
    learning rate 1, rows and per-node features subsampled; ``reg_lambda=1e-5``
    as in XGBoost's random-forest mode, so the trees are those its deprecated wrapper
    grows with the same settings."""
    import xgboost as xgb
    return xgb.XGBClassifier(n_estimators=1, num_parallel_tree=trees, learning_rate=1,
                             subsample=PEER_ROW_FRACTION,
                             colsample_bynode=node_feature_fraction(n_features), reg_lambda=1e-5,
                             tree_method="hist", max_depth=depth, max_bin=PEER_MAX_BIN,
                             n_jobs=_threads(n_jobs), random_state=SEED)


def lightgbm_rf(trees, depth, n_features, n_jobs=None):
    """LightGBM's random-forest mode (``boosting_type="rf"``): ``trees`` trees,
    each on a fresh row sample, features drawn per node, at most ``depth``
    levels (``num_leaves`` 2**depth, so depth is the only limit), leaves of one
    row allowed."""
    import lightgbm as lgb
    return lgb.LGBMClassifier(boosting_type="rf", n_estimators=trees,
                              bagging_fraction=PEER_ROW_FRACTION, bagging_freq=1,
                              feature_fraction_bynode=node_feature_fraction(n_features),
                              max_depth=depth, num_leaves=min(2 ** depth, LIGHTGBM_MAX_LEAVES),
                              max_bin=PEER_MAX_BIN, min_child_samples=1,
                              n_jobs=_threads(n_jobs), random_state=SEED, verbose=-1)


XGBOOST_PARAMS = ("n_estimators", "num_parallel_tree", "learning_rate", "max_depth", "subsample",
                  "colsample_bynode", "reg_lambda", "tree_method", "max_bin", "n_jobs", "random_state")
LIGHTGBM_PARAMS = ("boosting_type", "n_estimators", "bagging_fraction", "bagging_freq",
                   "feature_fraction_bynode", "max_depth", "num_leaves", "max_bin", "min_child_samples",
                   "n_jobs", "random_state")


def peer_params(model, names):
    """The model's constructor arguments named in ``names``."""
    params = model.get_params()
    return {k: params[k] for k in names if k in params}


def run_sklearn(train, test, trees, depth):
    return time_fit_predict(sklearn_rf(trees, depth, n_jobs=-1), train, test)


def run_xgboost(train, test, trees, depth):
    model = xgboost_rf(trees, depth, train[0].shape[1])
    return dict(time_fit_predict(model, train, test), params=peer_params(model, XGBOOST_PARAMS))


def run_lightgbm(train, test, trees, depth):
    model = lightgbm_rf(trees, depth, train[0].shape[1])
    return dict(time_fit_predict(model, train, test), params=peer_params(model, LIGHTGBM_PARAMS))


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------
def machine_info():
    import importlib
    versions = {"python": platform.python_version()}
    for mod in ("fedforest", "numpy", "pandas", "sklearn", "xgboost", "lightgbm", "numba", "mpi4py",
                "cryptography", "pyarrow"):
        try:
            versions[mod] = importlib.import_module(mod).__version__
        except Exception:  # noqa: BLE001 - informational only
            versions[mod] = None
    try:
        line = subprocess.run([os.path.join(VENV_BIN, "mpichversion")], capture_output=True,
                              text=True).stdout.splitlines()
        versions["mpich"] = next((ln.split(":", 1)[1].strip() for ln in line if "Version" in ln), None)
    except OSError:
        versions["mpich"] = None
    commit, dirty = provenance.git_state()
    return {"cores": os.cpu_count(), "cpu": provenance.cpu_name(), "platform": platform.platform(),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "git_commit": commit, "fedforest_uncommitted_changes": dirty, "versions": versions}


BUSY_WARN = 0.25


def cpu_busy(seconds=1.0):
    """Share of all cores busy over ``seconds`` (sampled while this benchmark runs nothing)."""
    def snap():
        with open("/proc/stat") as fh:
            vals = [int(x) for x in fh.readline().split()[1:]]
        return vals[3] + vals[4], sum(vals)  # idle + iowait, total
    try:
        i0, t0 = snap()
        time.sleep(seconds)
        i1, t1 = snap()
    except (OSError, ValueError, IndexError):
        return float("nan")
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


def fmt(v):
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if abs(v) >= 1e4:
            return f"{v:,.0f}"
        return f"{v:.4g}" if abs(v) < 1 else f"{v:.3f}"
    return str(v)


def print_table(rows):
    head = ("metric", "value", "target", "met?")
    cells = [head] + [(m, fmt(v), t or "", "" if ok is None else ("yes" if ok else "NO"))
                      for m, v, t, ok in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(4)]
    line = "  ".join("-" * w for w in widths)
    out = []
    for i, r in enumerate(cells):
        out.append("  ".join(c.ljust(w) if j == 0 or j == 2 else c.rjust(w) if j == 1 else c.ljust(w)
                             for j, (c, w) in enumerate(zip(r, widths))).rstrip())
        if i == 0:
            out.append(line)
    log("\n".join(out))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=100_000, help="training rows")
    ap.add_argument("--test-rows", type=int, default=10_000, help="prediction rows")
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--feature-sampling", choices=["node", "tree"], default="node")
    ap.add_argument("--train-repeats", type=int, default=3,
                    help="federated trainings, XGBoost fits and LightGBM fits, taken in turns; the "
                         "training ratios are ratios of their medians (this machine's timings are noisy)")
    ap.add_argument("--workdir", default=WORKDIR, help="party files, models and run summaries")
    ap.add_argument("--out", default=RESULT, help="JSON results file")
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    provenance.record(args)           # refuses uncommitted code unless --allow-dirty

    t_all = time.perf_counter()
    phases = {}
    busy = {"start": cpu_busy()}
    if busy["start"] > BUSY_WARN:
        log(f"warning: other processes use {busy['start']:.0%} of the CPU before the run; "
            "timings will be distorted")
    for sub in ("job", "warmup"):  # only what this script creates
        shutil.rmtree(os.path.join(args.workdir, sub), ignore_errors=True)

    log(f"data: make_classification {args.rows + args.test_rows:,} x {N_FEATURES} (random_state={SEED}); "
        f"first {args.rows:,} rows train, last {args.test_rows:,} test")
    t0 = time.perf_counter()
    train, test = make_data(args.rows, args.test_rows)
    bench_dir = os.path.join(args.workdir, "job")
    paths = write_job(bench_dir, train, test, args.trees, args.depth, args.feature_sampling,
                      f"{args.rows} rows, {args.trees} trees, depth {args.depth}")
    phases["data_seconds"] = time.perf_counter() - t0

    log("warm-up: tiny federated job (fills numba's on-disk cache; not timed)")
    t0 = time.perf_counter()
    warm_train, warm_test = make_data(2_000, 500, seed=SEED + 1)
    warm_dir = os.path.join(args.workdir, "warmup")
    warm_paths = write_job(warm_dir, warm_train, warm_test, 3, 4, args.feature_sampling, "warm-up")
    federated(warm_paths, warm_dir, "warm-up")
    phases["warmup_seconds"] = time.perf_counter() - t0

    log(f"federated: mpiexec -n {N_PARTIES + 1} (master + {N_PARTIES} parties), {args.trees} trees, "
        f"max_depth {args.depth}, max_features sqrt, feature_sampling {args.feature_sampling}")
    t0 = time.perf_counter()
    fed = federated(paths, bench_dir, "bench")
    phases["federated_seconds"] = time.perf_counter() - t0
    for key in ("train_stdout", "oneshot_stdout", "classical_stdout"):
        for ln in fed[key].splitlines():
            if ln.startswith(("trained ", "predicted ")):
                log("  master: " + ln)

    truth = pd.read_parquet(os.path.join(bench_dir, "test-truth.parquet"))
    truth["id"] = truth["id"].astype(str)
    acc_oneshot, pred_oneshot = fed_accuracy(fed["oneshot"]["predictions_file"], truth)
    acc_classical, pred_classical = fed_accuracy(fed["classical"]["predictions_file"], truth)
    same = bool((pred_oneshot.sort_index() == pred_classical.sort_index()).all())

    busy["before_peers"] = cpu_busy()
    # the first XGBoost fit in a process pays a one-off start-up cost (seconds); warm every peer
    run_sklearn(warm_train, warm_test, 3, 4)
    run_xgboost(warm_train, warm_test, 3, 4)
    run_lightgbm(warm_train, warm_test, 3, 4)
    run_single_process(warm_train, warm_test, 3, 4, args.feature_sampling)
    log("scikit-learn RandomForestClassifier (n_jobs=-1) on pooled data")
    t0 = time.perf_counter()
    sk = run_sklearn(train, test, args.trees, args.depth)
    phases["sklearn_seconds"] = time.perf_counter() - t0
    log(f"XGBoost random forest: XGBClassifier(n_estimators=1, num_parallel_tree={args.trees}, "
        f"n_jobs={os.cpu_count()}) on pooled data")
    t0 = time.perf_counter()
    xg = run_xgboost(train, test, args.trees, args.depth)
    phases["xgboost_seconds"] = time.perf_counter() - t0
    log(f"LightGBM random forest: LGBMClassifier(boosting_type='rf', n_estimators={args.trees}, "
        f"n_jobs={os.cpu_count()}) on pooled data")
    t0 = time.perf_counter()
    lg = run_lightgbm(train, test, args.trees, args.depth)
    phases["lightgbm_seconds"] = time.perf_counter() - t0
    # the training ratios on a shared machine: more trainings and fits in turns, medians
    fed_times, xgb_times, lgb_times = [fed["train"]["train_seconds"]], [xg["fit_seconds"]], [lg["fit_seconds"]]
    fed_cpu, xgb_cpu = [fed["train"]["job_cpu_seconds"]], [xg["fit_cpu_seconds"]]
    single = run_single_process(train, test, args.trees, args.depth, args.feature_sampling)
    single_times = [single["fit_seconds"]]
    for i in range(1, max(1, args.train_repeats)):
        s, _, _ = run_fedforest("train", paths["job"], os.path.join(bench_dir, f"summary-train-{i}.json"),
                                ["--overwrite", "--model-dir", os.path.join(bench_dir, "model-repeat")])
        fed_times.append(s["train_seconds"])
        fed_cpu.append(s["job_cpu_seconds"])
        x = run_xgboost(train, test, args.trees, args.depth)
        xgb_times.append(x["fit_seconds"])
        xgb_cpu.append(x["fit_cpu_seconds"])
        lgb_times.append(run_lightgbm(train, test, args.trees, args.depth)["fit_seconds"])
        single_times.append(run_single_process(train, test, args.trees, args.depth,
                                               args.feature_sampling)["fit_seconds"])
    shutil.rmtree(os.path.join(bench_dir, "model-repeat"), ignore_errors=True)
    log("  train seconds, federated: " + ", ".join(f"{v:.2f}" for v in fed_times)
        + "; XGBoost: " + ", ".join(f"{v:.2f}" for v in xgb_times)
        + "; LightGBM: " + ", ".join(f"{v:.2f}" for v in lgb_times)
        + "; ForestClassifier (one process): " + ", ".join(f"{v:.2f}" for v in single_times))
    log("  CPU seconds, federated job (every rank): " + ", ".join(f"{v:.2f}" for v in fed_cpu)
        + "; XGBoost fit: " + ", ".join(f"{v:.2f}" for v in xgb_cpu))

    tr, po, pc = fed["train"], fed["oneshot"], fed["classical"]
    bytes_per_tree = tr.get("bytes_per_tree")
    if bytes_per_tree is None and "bytes_total" in tr:
        bytes_per_tree = tr["bytes_total"] / max(tr["trees_built"], 1)
    train_seconds = float(np.median(fed_times))
    peer_seconds = {"sklearn_rf": sk["fit_seconds"], "xgboost_rf": float(np.median(xgb_times)),
                    "lightgbm_rf": float(np.median(lgb_times))}
    fastest = min(peer_seconds, key=peer_seconds.get)
    res = {
        "train_seconds": train_seconds,
        "accuracy_fedforest": acc_oneshot,
        "sklearn_rf_seconds": peer_seconds["sklearn_rf"],
        "accuracy_sklearn_rf": sk["accuracy"],
        "xgboost_rf_seconds": peer_seconds["xgboost_rf"],
        "accuracy_xgboost_rf": xg["accuracy"],
        "lightgbm_rf_seconds": peer_seconds["lightgbm_rf"],
        "accuracy_lightgbm_rf": lg["accuracy"],
        "fastest_peer": fastest,
        "train_ratio_vs_sklearn": train_seconds / peer_seconds["sklearn_rf"],
        "train_ratio_vs_xgboost": train_seconds / peer_seconds["xgboost_rf"],
        "train_ratio_vs_lightgbm": train_seconds / peer_seconds["lightgbm_rf"],
        "train_ratio_vs_fastest_peer": train_seconds / peer_seconds[fastest],
        "train_seconds_runs": fed_times,
        "single_process_seconds": float(np.median(single_times)),
        "single_process_seconds_runs": single_times,
        "accuracy_single_process": single["accuracy"],
        "single_process_ratio_vs_fastest_peer": float(np.median(single_times)) / peer_seconds[fastest],
        "cpu_seconds_federated_job": float(np.median(fed_cpu)),
        "cpu_seconds_xgboost_fit": float(np.median(xgb_cpu)),
        "cpu_ratio_vs_xgboost": float(np.median(fed_cpu)) / float(np.median(xgb_cpu)),
        "cpu_seconds_runs": {"federated_job": fed_cpu, "xgboost_fit": xgb_cpu},
        "xgboost_rf_seconds_runs": xgb_times,
        "lightgbm_rf_seconds_runs": lgb_times,
        "rounds_per_tree": tr["rounds_per_tree"],
        "rounds_per_forest": tr.get("rounds_per_forest"),
        "tree_batch": tr.get("tree_batch"),
        "n_jobs_per_rank": tr.get("n_jobs"),
        "bytes_per_tree": bytes_per_tree,
        "peak_rss_mb_per_rank": peak_rss(tr),
        "predict_rounds": po["rounds"],
        "predict_seconds_oneshot": po["seconds"],
        "predict_seconds_classical": pc["seconds"],
        "predict_speedup_vs_classical": pc["seconds"] / po["seconds"],
        "predict_rounds_classical": pc["rounds"],
        "train_total_seconds": tr.get("total_seconds"),
        "accuracy_fedforest_classical": acc_classical,
        "oneshot_equals_classical": same,
        "sklearn_rf_predict_seconds": sk["predict_seconds"],
        "xgboost_rf_predict_seconds": xg["predict_seconds"],
        "lightgbm_rf_predict_seconds": lg["predict_seconds"],
    }
    depth = args.depth
    targets = {
        "train_ratio_vs_sklearn": ("<= 0.5", res["train_ratio_vs_sklearn"] <= 0.5),
        "train_ratio_vs_xgboost": ("<= 1.5", res["train_ratio_vs_xgboost"] <= 1.5),
        "train_ratio_vs_fastest_peer": ("<= 1.5", res["train_ratio_vs_fastest_peer"] <= 1.5),
        "single_process_ratio_vs_fastest_peer": ("<= 1.0", res["single_process_ratio_vs_fastest_peer"] <= 1.0),
        "cpu_ratio_vs_xgboost": ("<= 1.5", res["cpu_ratio_vs_xgboost"] <= 1.5),
        "rounds_per_tree": (f"<= {2 * depth} (2 x depth)", res["rounds_per_tree"] <= 2 * depth),
        "rounds_per_forest": (f"<= {2 * depth + 2} (2 x depth + set-up)",
                              res["rounds_per_forest"] is not None
                              and res["rounds_per_forest"] <= 2 * depth + 2),
        "predict_rounds": ("= 1", res["predict_rounds"] == 1),
        "predict_speedup_vs_classical": (">= 10", res["predict_speedup_vs_classical"] >= 10),
        "oneshot_equals_classical": ("True", same),
    }
    order = ["train_seconds", "accuracy_fedforest", "sklearn_rf_seconds", "accuracy_sklearn_rf",
             "xgboost_rf_seconds", "accuracy_xgboost_rf", "lightgbm_rf_seconds", "accuracy_lightgbm_rf",
             "fastest_peer", "train_ratio_vs_sklearn", "train_ratio_vs_xgboost", "train_ratio_vs_lightgbm",
             "train_ratio_vs_fastest_peer", "single_process_seconds", "single_process_ratio_vs_fastest_peer",
             "cpu_seconds_federated_job", "cpu_seconds_xgboost_fit", "cpu_ratio_vs_xgboost", "rounds_per_tree", "rounds_per_forest", "bytes_per_tree",
             "predict_rounds",
             "predict_seconds_oneshot", "predict_seconds_classical", "predict_speedup_vs_classical",
             "oneshot_equals_classical"]
    log("")
    log(f"vertical Federated Forest: {args.rows:,} x {N_FEATURES}, {N_PARTIES} parties + master, "
        f"{args.trees} trees, depth {depth}; prediction on {args.test_rows:,} rows")
    print_table([(k, res[k], *targets.get(k, (None, None))) for k in order])
    busy["end"] = cpu_busy()
    if max(busy.values()) > BUSY_WARN:
        log("note: the CPU was not idle when sampled between phases ("
            + ", ".join(f"{k} {v:.0%}" for k, v in busy.items())
            + " busy): other processes shared the cores, timings are not clean")

    phases["total_seconds"] = time.perf_counter() - t_all
    doc = dict(res)
    doc["targets"] = {k: {"target": t, "met": bool(ok)} for k, (t, ok) in targets.items()}
    doc["setup"] = {
        "data": f"sklearn make_classification(n_samples={args.rows + args.test_rows}, "
                f"n_features={N_FEATURES}, random_state={SEED}); first {args.rows} rows train, "
                f"last {args.test_rows} rows test",
        "train_rows": args.rows, "test_rows": args.test_rows, "n_features": N_FEATURES,
        "n_parties": N_PARTIES, "mpi_ranks": N_PARTIES + 1, "party_columns": party_columns(),
        "label_party": 1, "file_format": "parquet",
        "forest": {"n_estimators": args.trees, "max_depth": depth, "max_features": "sqrt",
                   "feature_sampling": args.feature_sampling, "random_state": SEED},
        "sklearn": {"n_estimators": args.trees, "max_depth": depth, "max_features": "sqrt",
                    "n_jobs": -1, "random_state": SEED},
        "xgboost": dict(xg["params"], estimator="xgboost.XGBClassifier (random forest: one round of "
                                                 "num_parallel_tree trees)"),
        "lightgbm": dict(lg["params"], estimator="lightgbm.LGBMClassifier (boosting_type='rf')"),
        "timing": "federated figures from the master's --summary-json (train: tree-building loop; "
                  "predict: prediction protocol only); peers timed around fit/predict; training: medians of "
                  f"{max(1, args.train_repeats)} federated trainings, XGBoost fits and LightGBM fits in turns, "
                  "others single runs",
    }
    doc["fedforest_summaries"] = {"train": tr, "predict_oneshot": po, "predict_classical": pc}
    doc["subprocess_wall_seconds"] = {"train": fed["train_wall"], "predict_oneshot": fed["oneshot_wall"],
                                      "predict_classical": fed["classical_wall"]}
    doc["phases"] = phases
    doc["machine"] = machine_info()
    doc["machine"]["cpu_busy_by_others"] = busy
    doc["machine"]["loadavg_end"] = list(os.getloadavg())
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(doc, fh, indent=2, default=str)
        fh.write("\n")
    log(f"\nresults: {args.out}  (bench total {phases['total_seconds']:.1f}s: "
        + ", ".join(f"{k.replace('_seconds', '')} {v:.1f}s" for k, v in phases.items() if k != "total_seconds")
        + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
