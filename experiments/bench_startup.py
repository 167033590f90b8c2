"""First contact: what a new user and every rank pay before any real work.

Run with ``make bench`` (or ``.venv/bin/python experiments/bench_startup.py``).
Every figure is the median of ``--repeats`` runs (default 3), each in a new
process, as a user meets it:

* ``cold_compile_seconds_vertical``: ``fedforest warm-up`` (every kernel a
  vertical job grows or predicts with, both split methods and tasks) in an
  empty, temporary ``NUMBA_CACHE_DIR``;
* ``cold_compile_seconds_all``: the same, then a tiny job of every horizontal
  mode in the same process (their kernels compile on first use);
* ``rank_startup_seconds``: what a party rank of the demo's training job does
  before its first message, in a new interpreter with a warm cache: the
  command line's imports and parser, MPI start, the job's settings, the
  mode's roles, the table reader (pandas) and ``Mode.prepare_rank`` (the
  job's kernels from the cache); ``warm_up_seconds``: ``fedforest warm-up``
  with a warm cache (every vertical kernel of both tasks and split methods);
* ``version_seconds`` and ``help_seconds``: ``python -m fedforest --version``
  and ``--help``;
* ``demo_train_seconds`` (``train_seconds`` of the master's run summary) and
  ``demo_wall_seconds`` (the four commands of ``make demo`` after set-up);
* ``demo_threads_ratio_vs_n_jobs_1``: the demo's training (``train_seconds``)
  with the default ``n_jobs`` (every core) over the same job with
  ``n_jobs = 1``, run right after it: a small job must not pay for threads
  it cannot use (``demo_n_jobs_1_train_seconds`` beside it);
* ``small_job_ratio_vs_single_process``: a 1,000-row, 100-tree, depth-6
  federated forest (``mpiexec -n 3``, ``train_seconds``) over the same forest
  trained by ``ForestClassifier`` in one process;
* ``fresh_clone_make_demo_seconds`` (once per run, not per repeat): ``make
  demo`` as a new user meets it, in a fresh ``git clone`` of this checkout
  (its uncommitted changes applied) with an empty pip cache and an empty
  numba cache: ``make venv`` (``.venv`` with the runtime dependencies only,
  ``fedforest warm-up``; ``fresh_clone_setup_seconds``), then ``make demo``
  (``fresh_clone_demo_seconds``; its training's ``total_seconds``, with the
  label encryption: ``fresh_clone_demo_train_seconds``).  ``--no-fresh-clone``
  leaves it out (README's figures need it);
* ``load_average_start`` / ``load_average_end``: the machine's 1-minute load
  average when the benchmark started and ended (other work on it slows every
  figure).

Written to ``experiments/results/bench_startup.json``; a table with the
targets is printed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402

ROOT = provenance.ROOT
VENV_BIN = os.path.dirname(sys.executable)
OUT = os.path.join(ROOT, "experiments", "results", "bench_startup.json")
# the demo trains with Paillier-encrypted labels (2048-bit key): its budget is what the
# 3 minutes of a fresh clone's make demo leave after pip and the 60 s compile
TARGETS = {"cold_compile_seconds_vertical": 60, "cold_compile_seconds_all": 120, "rank_startup_seconds": 1.0,
           "version_seconds": 0.3, "help_seconds": 0.3, "demo_train_seconds": 40, "demo_wall_seconds": 60,
           "small_job_ratio_vs_single_process": 2.0, "demo_threads_ratio_vs_n_jobs_1": 1.05}
FRESH_CLONE_TARGETS = {"fresh_clone_make_demo_seconds": 180}

HORIZONTAL = """
import numpy as np, pandas as pd, tempfile
from fedforest.jobs import run_horizontal
rng = np.random.default_rng(0)
X = np.round(rng.normal(size=(240, 4)), 1); y = np.where(X[:, 0] - X[:, 2] > 0, "yes", "no")
with tempfile.TemporaryDirectory() as d:
    paths = []
    for c in (1, 2):
        rows = slice(c - 1, None, 2)
        paths.append(f"{d}/c{c}.csv")
        pd.DataFrame({f"f{j}": X[rows, j] for j in range(4)}).assign(y=y[rows]).to_csv(paths[-1], index=False)
    small = {"icdta4fl": {}, "local": {}, "centralized": {}, "federated_id3": {},
             "fedxgbllr": {"xgb_trees": 4, "rounds": 1, "local_epochs": 1},
             "efdt": {"rounds": 2}, "fedga": {"generations": 2, "population_size": 4},
             "fedga_local": {}, "fedga_central": {}, "ibm_tree": {}}
    for mode, extra in small.items():
        run_horizontal(paths, mode=mode, model_dir=f"{d}/{mode}", task="classification", label_column="y",
                       random_state=0, quiet=True, progress=False, **extra)
"""


def timed(cmd, env=None, cwd=ROOT, env_replace=None):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env_replace if env_replace is not None else dict(os.environ, **(env or {})),
                          capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return seconds, proc


def cold(script_args):
    with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
        return timed([sys.executable] + script_args, env={"NUMBA_CACHE_DIR": cache})[0]


def cold_all():
    with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
        env = {"NUMBA_CACHE_DIR": cache}
        return (timed([sys.executable, "-m", "fedforest", "warm-up"], env=env)[0]
                + timed([sys.executable, "-c", HORIZONTAL], env=env)[0])


RANK = """
import gc, sys
gc.disable()                                  # as the command line starts a job rank
from fedforest.cli import build_parser
from fedforest.federation.config import resolve
from fedforest.transport.base import Comm
from fedforest.transport.mpi import world_transport
import fedforest.data.io                      # the party reads its table with it
build_parser()
comm = Comm(world_transport())
cfg = resolve(sys.argv[1], {})
cfg.spec.role("client_train")
cfg.spec.prepare_rank(cfg, "train")
"""


def rank_startup(job):
    return timed([sys.executable, "-c", RANK, job])[0]


def mpi_train(job, n_ranks=3, summary=None):
    summary = summary or job + ".summary.json"
    cmd = [os.path.join(VENV_BIN, "mpiexec"), "-n", str(n_ranks), sys.executable, "-m", "fedforest", "train",
           "--config", job, "--overwrite", "--summary-json", summary, "--quiet"]
    wall, _ = timed(cmd)
    with open(summary) as fh:
        return json.load(fh)["train_seconds"], wall


def demo(folder):
    t0 = time.perf_counter()
    from fedforest.demo import SUMMARY
    timed([sys.executable, "-m", "fedforest", "demo-data", "--out", folder])
    train_seconds, _ = mpi_train(os.path.join(folder, "job.toml"), summary=os.path.join(folder, SUMMARY))
    timed([os.path.join(VENV_BIN, "mpiexec"), "-n", "3", sys.executable, "-m", "fedforest", "predict",
           "--config", os.path.join(folder, "job.toml"), "--data", os.path.join(folder, "test-party1.csv"),
           os.path.join(folder, "test-party2.csv")])
    timed([sys.executable, "-m", "fedforest", "demo-report", "--dir", folder])
    return train_seconds, time.perf_counter() - t0


def demo_one_thread(folder):
    """``train_seconds`` of the demo's training job with ``n_jobs = 1``."""
    with open(os.path.join(folder, "job.toml")) as fh:
        text = fh.read()
    job = os.path.join(folder, "job-n-jobs-1.toml")
    with open(job, "w") as fh:
        fh.write(text.replace("[forest]\n", "[forest]\nn_jobs = 1\n", 1))
    return mpi_train(job)[0]


def small_job(folder):
    """(federated train_seconds, single-process fit seconds) of the same 1,000-row forest."""
    import numpy as np
    import pandas as pd
    from sklearn.datasets import make_classification
    from fedforest import ForestClassifier
    X, y = make_classification(1000, 10, random_state=0)
    ids = np.arange(len(y))
    pd.DataFrame({"id": ids, **{f"a{j}": X[:, j] for j in range(5)}, "y": y}).to_csv(f"{folder}/p1.csv",
                                                                                    index=False)
    pd.DataFrame({"id": ids, **{f"b{j}": X[:, 5 + j] for j in range(5)}}).to_csv(f"{folder}/p2.csv", index=False)
    job = os.path.join(folder, "small.toml")
    with open(job, "w") as fh:
        fh.write('[job]\ntask = "classification"\ndata = ["p1.csv", "p2.csv"]\nlabel_column = "y"\n'
                 'model_dir = "small-model"\nprogress = false\n\n[forest]\nn_estimators = 100\nmax_depth = 6\n'
                 'random_state = 0\n')
    federated, _ = mpi_train(job)
    clf = ForestClassifier(n_estimators=2, max_depth=3, random_state=0).fit(X[:100], y[:100])  # kernels loaded
    t0 = time.perf_counter()
    clf = ForestClassifier(n_estimators=100, max_depth=6, random_state=0).fit(X, y)
    return federated, time.perf_counter() - t0


def fresh_clone():
    """(``make venv`` seconds, ``make demo`` seconds after it, the demo
    training's ``total_seconds``) in a fresh clone of this checkout with its
    uncommitted changes, empty pip and numba caches."""
    with tempfile.TemporaryDirectory(prefix="fresh-clone-") as d:
        clone = os.path.join(d, "fedforest")
        timed(["git", "clone", "--quiet", ROOT, clone])
        diff = subprocess.run(["git", "diff", "--binary", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
        if diff:
            subprocess.run(["git", "apply", "--whitespace=nowarn"], cwd=clone, input=diff, check=True)
        untracked = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                                   capture_output=True, text=True, check=True).stdout.split("\0")
        for name in filter(None, untracked):
            os.makedirs(os.path.dirname(os.path.join(clone, name)), exist_ok=True)
            with open(os.path.join(ROOT, name), "rb") as src, open(os.path.join(clone, name), "wb") as dst:
                dst.write(src.read())
        env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "VIRTUAL_ENV", "PYTHONPATH")}
        env["PIP_CACHE_DIR"] = os.path.join(d, "pip-cache")
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != VENV_BIN)
        from fedforest.demo import SUMMARY
        setup = timed(["make", "venv"], cwd=clone, env_replace=env)[0]
        demo_seconds = timed(["make", "demo"], cwd=clone, env_replace=env)[0]
        with open(os.path.join(clone, "build", "demo", SUMMARY)) as fh:
            return setup, demo_seconds, json.load(fh)["total_seconds"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--no-fresh-clone", action="store_true",
                    help="skip the fresh clone's make demo (README's figures need it)")
    provenance.add_arguments(ap)
    args = ap.parse_args()
    prov = provenance.record(args)
    runs = {k: [] for k in TARGETS}
    extra = {"small_job_federated_train_seconds": [], "small_job_single_process_seconds": [], "warm_up_seconds": [],
             "demo_n_jobs_1_train_seconds": []}
    targets = dict(TARGETS)
    load_start = os.getloadavg()[0]
    if not args.no_fresh_clone:
        print("fresh clone: make venv, make demo", flush=True)
        setup, demo_seconds, train = fresh_clone()
        runs["fresh_clone_make_demo_seconds"] = [setup + demo_seconds]
        extra.update(fresh_clone_setup_seconds=[setup], fresh_clone_demo_seconds=[demo_seconds],
                     fresh_clone_demo_train_seconds=[train])
        targets.update(FRESH_CLONE_TARGETS)
    for i in range(args.repeats):
        print(f"run {i + 1} of {args.repeats}", flush=True)
        runs["cold_compile_seconds_vertical"].append(cold(["-m", "fedforest", "warm-up"]))
        runs["cold_compile_seconds_all"].append(cold_all())
        timed([sys.executable, "-m", "fedforest", "warm-up"])          # the package's own cache, warm
        extra["warm_up_seconds"].append(timed([sys.executable, "-m", "fedforest", "warm-up"])[0])
        runs["version_seconds"].append(timed([sys.executable, "-m", "fedforest", "--version"])[0])
        runs["help_seconds"].append(timed([sys.executable, "-m", "fedforest", "--help"])[0])
        with tempfile.TemporaryDirectory() as d:
            train, wall = demo(os.path.join(d, "demo"))
            one = demo_one_thread(os.path.join(d, "demo"))
            runs["rank_startup_seconds"].append(rank_startup(os.path.join(d, "demo", "job.toml")))
            fed, single = small_job(d)
        runs["demo_train_seconds"].append(train)
        runs["demo_wall_seconds"].append(wall)
        runs["demo_threads_ratio_vs_n_jobs_1"].append(train / one)
        extra["demo_n_jobs_1_train_seconds"].append(one)
        runs["small_job_ratio_vs_single_process"].append(fed / single)
        extra["small_job_federated_train_seconds"].append(fed)
        extra["small_job_single_process_seconds"].append(single)
    result = {k: statistics.median(v) for k, v in {**runs, **extra}.items()}
    doc = dict(result, runs={**runs, **extra}, targets=targets, repeats=args.repeats,
               met={k: result[k] <= t for k, t in targets.items()}, load_average_start=load_start,
               load_average_end=os.getloadavg()[0], **prov)
    provenance.write_result(args.out, doc)
    width = max(map(len, targets))
    print(f"\n{'metric':<{width}}  {'median':>9}  {'target':>7}  met?")
    for k, t in targets.items():
        print(f"{k:<{width}}  {result[k]:9.3f}  {t:7g}  {'yes' if result[k] <= t else 'NO'}")
    print(f"written to {os.path.relpath(args.out, ROOT)}")


if __name__ == "__main__":
    main()
