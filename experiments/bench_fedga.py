"""Speed and communication of FedGA-Tree: 10 clients on satellite, P = 20, G = 100.

Run with ``.venv/bin/python experiments/bench_fedga.py`` (``--no-mpi`` skips the
mpiexec run).  Data: ``../shared/data/satellite.csv`` (6,435 rows, 36
columns, 6 classes), shuffled with seed 0 and divided into 10 equal client
files (about 640 rows each); the paper's settings (P = 20, G = 100, K = 5
folds over depths 2..15, r = 0.8, binning on) with ``random_state`` 0.

Two transports:

* ``inprocess``: ``fedforest.run_horizontal`` (server and 10 clients as
  threads of one process, encrypted channels).  The clients' numba kernels
  hold the interpreter lock, so the 10 clients' fits run one after the other
  on one core: the figure is the sum of all clients' compute;
* ``mpiexec``: ``mpiexec -n 11 python -m fedforest train --mode fedga`` on
  this 2-core machine (11 processes share 2 cores).

Figures (from the server's run summary): ``seconds_per_generation`` (wall
time of the G evaluation rounds / G), ``structures_fitted_per_second``
(structures fitted by all clients / that time: a client fits only the
structures it has not scored before), ``bytes_per_generation`` (encrypted
bytes server -> clients and clients -> server during the G rounds, / G),
``rounds`` (G + 3: depth proposal, client structures, G generations, final),
``seconds_total`` (the whole job, set-up and cross-validation included).
Written to ``experiments/results/bench_fedga.json``.
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

from fedforest import run_horizontal

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_vertical import ROOT, log, machine_info, print_table  # noqa: E402
import provenance  # noqa: E402

DATA = os.path.join(ROOT, "..", "shared", "data", "satellite.csv")
RESULT = os.path.join(ROOT, "experiments", "results", "bench_fedga.json")
WORKDIR = os.path.join(ROOT, "build", "bench_fedga")
CLIENTS, P, G = 10, 20, 100
SETTINGS = {"population_size": P, "generations": G, "binning": True, "random_state": 0}
FIGURES = ("seconds_per_generation", "structures_fitted_per_second", "bytes_per_generation", "rounds",
           "seconds_total")


def client_files():
    df = pd.read_csv(DATA).sample(frac=1.0, random_state=0).reset_index(drop=True)
    paths = []
    for k, rows in enumerate(np.array_split(np.arange(len(df)), CLIENTS), start=1):
        path = os.path.join(WORKDIR, f"client{k}.csv")
        df.iloc[rows].to_csv(path, index=False)
        paths.append(path)
    return paths


def figures(summary, wall):
    gen_seconds = summary["seconds_per_generation"] * summary["generations"]
    return {"seconds_per_generation": summary["seconds_per_generation"],
            "structures_fitted_per_second": summary["structures_fitted"] / gen_seconds,
            "bytes_per_generation": summary["bytes_per_generation"], "rounds": summary["rounds"],
            "seconds_total": wall, "structures_fitted": summary["structures_fitted"],
            "depth": summary["depth"], "train_f1": summary["train_f1"]}


def run_inprocess(paths):
    t0 = time.perf_counter()
    s = run_horizontal(paths, mode="fedga", task="classification", label_column="classes",
                       model_dir=os.path.join(WORKDIR, "model-inprocess"), **SETTINGS)
    return figures(s, time.perf_counter() - t0)


def run_mpi(paths):
    summary = os.path.join(WORKDIR, "summary-mpi.json")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    cmd = [mpiexec, "-n", str(CLIENTS + 1), sys.executable, "-m", "fedforest", "train", "--mode", "fedga",
           "--task", "classification", "--label-column", "classes", "--data", *paths,
           "--model-dir", os.path.join(WORKDIR, "model-mpi"), "--summary-json", summary, "--quiet",
           *[a for k, v in SETTINGS.items() for a in (f"--{k.replace('_', '-')}", str(v).lower()
                                                       if isinstance(v, bool) else str(v))]]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(1)
    with open(summary) as fh:
        return figures(json.load(fh), wall)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-mpi", action="store_true", help="skip the mpiexec run")
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    prov = provenance.record(args)
    shutil.rmtree(WORKDIR, ignore_errors=True)
    os.makedirs(WORKDIR)
    paths = client_files()
    # warm the numba cache with a small job (the first compile is not the product's speed)
    run_horizontal(paths[:2], mode="fedga", task="classification", label_column="classes", generations=1,
                   max_depth=3, model_dir=os.path.join(WORKDIR, "warm-up"), binning=True)
    out = {"transport": "inprocess", **run_inprocess(paths)}
    log(f"in-process: {out['seconds_per_generation']:.4f} s per generation, {out['seconds_total']:.1f} s in all")
    if not args.no_mpi:
        out["mpiexec"] = run_mpi(paths)
        log(f"mpiexec: {out['mpiexec']['seconds_per_generation']:.4f} s per generation, "
            f"{out['mpiexec']['seconds_total']:.1f} s in all")
    out["setup"] = {"data": "satellite (6,435 rows, 36 columns, 6 classes)", "clients": CLIENTS, **SETTINGS,
                    "command": ".venv/bin/python experiments/bench_fedga.py"}
    out["machine"] = machine_info()
    out["provenance"] = prov
    rows = [(k, out[k], "whole run < 60 s" if k == "seconds_total" else "", out[k] < 60
             if k == "seconds_total" else None) for k in FIGURES]
    if "mpiexec" in out:
        rows += [(f"mpiexec {k}", out["mpiexec"][k], "", None) for k in FIGURES]
    os.makedirs(os.path.dirname(RESULT), exist_ok=True)
    with open(RESULT, "w") as fh:
        json.dump(out, fh, indent=2, sort_keys=True)
    print_table(rows)
    log(f"results in {RESULT}")


if __name__ == "__main__":
    raise SystemExit(main())
