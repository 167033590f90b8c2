"""FedXGBllr's time against centralized XGBoost, and its communication at N and 4N rows.

Run with ``make bench`` (or ``.venv/bin/python experiments/bench_fedxgbllr.py``).

Time (the reviewer's setting, in one process, every setting at its default:
500 trees over the clients, depth 8, eta 0.1, 10 rounds, 100 local epochs,
batch 64, 64 channels, Adam 1e-3): a churn-like table of 3,500 rows (nine
customer columns, binary label; the held-out churn set is not shipped), a
random 75/25 split, the 2,625 training rows dealt to K = 5 clients, the test
rows scored by every client.  ``seconds`` is the wall time of
``fedforest.run_horizontal`` (server and client threads, in-process transport,
encrypted channels; the numba kernels already compiled and cached) and
``ratio_vs_centralized_xgboost`` its ratio to ``xgboost.train`` on the pooled
training rows with the same trees (500 rounds, depth 8, eta 0.1, one thread
like each client's XGBoost: OpenMP threads that spin at barriers take minutes
on a busy shared machine), timed in the same process just after.  ``cpu_seconds`` is the federated run's
user + sys time (all threads), ``cpu_ratio_vs_centralized_xgboost`` its ratio to
XGBoost's; ``cpu_busy_before`` the share of the cores that
other programs kept busy just before (the machine is shared: wall times
stretch with it).  ``cnn_epoch_seconds_*``: one client's CNN epoch (client 1's
tree outputs, default settings) in the numpy reference
(``cnn.train_local_reference``, the implementation before the kernels) and in
the kernels (``cnn.train_local``), CPU seconds, best of 3.
The job runs under ``mpiexec -n 3`` (server + 2 clients) with the product's
defaults for the trees (500 trees over the clients, depth 8, eta 0.1) and
the CNN (10 rounds, 64 channels, batch 64) except ``local_epochs`` = 5:
epochs change the clients' compute, not what they send, and 100 epochs on
16,000 rows per client would make the benchmark take many minutes.

Communication: ``make_classification(n_samples, 20 features, random_state=0)``, split
in two equal client files, with N = 8,000 and 4N = 32,000 rows.

Figures come from the server's run summary, counted by the transport:
``rounds`` (round 0 + R FedAvg rounds), ``bytes_sent_per_client`` (client ->
server: the ensemble once, then one CNN per round), ``bytes_received_per_client``
(server -> client: the aggregate ensembles once, then the global CNN per
round), ``bytes_per_client`` (both directions).  All encrypted bytes, as
sent.  Written to ``experiments/results/bench_fedxgbllr.json``.

The CNN's size depends only on K, the trees per client and the channels, so
its R messages weigh the same at any row count; the ensembles travel once and
grow with the rows only until their trees are full (depth 8: at most 255
nodes per tree), so the total grows far slower than the rows and is bounded.
The table shows both parts.  ``seconds_bytes_run`` (and ``_4x``): the wall
time of those mpiexec jobs (start-up included, 5 epochs).
"""
import os
import resource
import shutil
import sys
import time

import numpy as np
import pandas as pd
import xgboost as xgb
from sklearn.datasets import make_classification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_vertical import ROOT, cpu_busy, log, machine_info, print_table, run_fedforest
import provenance  # noqa: E402

RESULT = os.path.join(ROOT, "experiments", "results", "bench_fedxgbllr.json")
WORKDIR = os.path.join(ROOT, "build", "bench_fedxgbllr")
N = 8_000
JOB = """# bench_fedxgbllr.py
[job]
mode = "fedxgbllr"
task = "classification"
data = ["client1.csv", "client2.csv"]
label_column = "label"
model_dir = "model"
progress = false

[fedxgbllr]
local_epochs = 5
"""


def run(n_rows):
    folder = os.path.join(WORKDIR, f"n{n_rows}")
    os.makedirs(folder)
    X, y = make_classification(n_rows, 20, random_state=0)
    df = pd.DataFrame(X, columns=[f"f{j:02d}" for j in range(20)])
    df["label"] = y
    for k, rows in enumerate(np.array_split(np.arange(n_rows), 2), start=1):
        df.iloc[rows].to_csv(os.path.join(folder, f"client{k}.csv"), index=False)
    job = os.path.join(folder, "job.toml")
    with open(job, "w") as fh:
        fh.write(JOB)
    summary, _, wall = run_fedforest("train", job, os.path.join(folder, "summary.json"))
    summary["wall_seconds"] = wall
    # what the ensembles weigh: the model files hold exactly the bytes that travelled in round 0
    mdir = os.path.join(folder, "model", "server")
    summary["ensemble_bytes"] = sum(os.path.getsize(os.path.join(mdir, f)) for f in os.listdir(mdir)
                                    if f.startswith("ensemble-"))
    with np.load(os.path.join(mdir, "cnn.npz")) as z:
        summary["cnn_bytes"] = sum(z[k].nbytes for k in z.files)
    log(f"{n_rows} rows: {summary['bytes_per_client'] / 1e6:.3f} MB per client, {summary['rounds']} rounds, "
        f"wall {wall:.1f}s")
    return summary


CHURN_ROWS, CHURN_CLIENTS, TREES, DEPTH, ETA = 3_500, 5, 500, 8, 0.1


def churn_like(n=CHURN_ROWS, seed=0):
    """A customer table shaped like the churn sets: usage minutes, charges, calls,
    plans, tenure; the label from a noisy rule over them."""
    rng = np.random.default_rng(seed)
    day, eve, night = rng.normal(180, 50, n), rng.normal(200, 50, n), rng.normal(200, 50, n)
    intl, calls = rng.normal(10, 3, n), rng.poisson(1.5, n).astype(float)
    plan, mail = (rng.random(n) < 0.1).astype(float), (rng.random(n) < 0.27).astype(float)
    score = (0.02 * (day - 180) + 0.008 * (eve - 200) + 0.003 * (night - 200) + 0.8 * (calls > 3)
             + 1.8 * plan * (intl > 12) - 0.7 * mail)
    label = (score + rng.logistic(0, 0.6, n) > 1.2).astype(int)
    return pd.DataFrame({"day_minutes": day, "day_charge": (day * 0.17).round(2), "eve_minutes": eve,
                         "night_minutes": night, "intl_minutes": intl, "service_calls": calls,
                         "intl_plan": plan, "voice_mail": mail,
                         "tenure_months": rng.integers(1, 240, n).astype(float), "churned": label})


def _cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def churn_run():
    """The default FedXGBllr run on churn-size data in this process, against centralized XGBoost."""
    from fedforest import run_horizontal
    from fedforest.horizontal.fedxgbllr import cnn, roles
    folder = os.path.join(WORKDIR, "churn")
    os.makedirs(folder)
    df = churn_like()
    order = np.random.default_rng(0).permutation(len(df))
    cut = int(0.75 * len(df))
    train, test = df.iloc[order[:cut]], df.iloc[order[cut:]]
    paths = []
    for k, rows in enumerate(np.array_split(np.arange(len(train)), CHURN_CLIENTS), start=1):
        paths.append(os.path.join(folder, f"client{k}.csv"))
        train.iloc[rows].to_csv(paths[-1], index=False)
    test_path = os.path.join(folder, "test.csv")
    test.to_csv(test_path, index=False)
    opts = dict(mode="fedxgbllr", task="classification", label_column="churned", test_data=[test_path] * CHURN_CLIENTS,
                model_dir=os.path.join(folder, "model"), random_state=0, overwrite=True)
    # compile (or load from numba's cache) the kernels outside the timed run
    cnn.train_local(cnn.init_params(2, 1, 1, 2), np.zeros((3, 2)), np.zeros(3), cnn.BINARY, epochs=1)
    busy = cpu_busy()
    t0, c0 = time.perf_counter(), _cpu()
    s = run_horizontal(paths, **opts)
    seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    Xtr, ytr = train.drop(columns="churned").to_numpy(), train["churned"].to_numpy()
    t0, c0 = time.perf_counter(), _cpu()
    booster = xgb.train({"objective": "binary:logistic", "max_depth": DEPTH, "eta": ETA, "seed": 0, "nthread": 1},
                        xgb.DMatrix(Xtr, label=ytr), num_boost_round=TREES)
    central_seconds, central_cpu = time.perf_counter() - t0, _cpu() - c0
    p = booster.predict(xgb.DMatrix(test.drop(columns="churned").to_numpy()))
    central_acc = float(((p > 0.5) == test["churned"].to_numpy()).mean())
    # one client's CNN epoch, numpy reference against the kernels (client 1's tree outputs)
    mdir = os.path.join(folder, "model", "client-1")
    boosters, params = roles.load_parts({"n_ensembles": CHURN_CLIENTS}, mdir)
    one = pd.read_csv(paths[0])
    S = roles.tree_outputs(boosters, one.drop(columns="churned").to_numpy())
    y = one["churned"].to_numpy().astype(float)
    epoch = {}
    for name, fit in (("reference", cnn.train_local_reference), ("kernel", cnn.train_local)):
        best = float("inf")
        for _ in range(3):
            c0 = time.process_time()
            fit(params, S, y, cnn.BINARY, epochs=1)
            best = min(best, time.process_time() - c0)
        epoch[name] = best
    log(f"churn-size run: {seconds:.1f}s wall ({cpu:.1f}s CPU), accuracy {s['test_accuracy']:.4f}; "
        f"centralized XGBoost {central_seconds:.2f}s, accuracy {central_acc:.4f}; "
        f"CNN epoch {epoch['reference'] * 1e3:.0f} ms -> {epoch['kernel'] * 1e3:.1f} ms")
    return {"seconds": seconds, "cpu_seconds": cpu, "centralized_xgboost_seconds": central_seconds,
            "ratio_vs_centralized_xgboost": seconds / central_seconds, "centralized_xgboost_cpu_seconds": central_cpu,
            "cpu_ratio_vs_centralized_xgboost": cpu / central_cpu, "test_accuracy": s["test_accuracy"],
            "centralized_xgboost_test_accuracy": central_acc,
            "accuracy_drop_points": 100 * (central_acc - s["test_accuracy"]), "cpu_busy_before": busy,
            "cnn_epoch_seconds_reference": epoch["reference"], "cnn_epoch_seconds_kernel": epoch["kernel"],
            "cnn_epoch_speedup": epoch["reference"] / epoch["kernel"],
            "churn_setup": {"rows": CHURN_ROWS, "train_rows": cut, "test_rows": len(df) - cut,
                            "clients": CHURN_CLIENTS, "features": df.shape[1] - 1, "xgb_trees": TREES,
                            "max_depth": DEPTH, "rounds": 10, "local_epochs": 100, "batch_size": 64,
                            "channels": 64, "process": "one (run_horizontal: server and client threads)",
                            "centralized": "xgboost.train, 500 rounds, depth 8, eta 0.1, nthread 1"}}


def main(argv=None):
    prov = provenance.start(__doc__, argv)
    shutil.rmtree(WORKDIR, ignore_errors=True)
    churn = churn_run()
    small, large = run(N), run(4 * N)
    out = {
        **churn,
        "seconds_bytes_run": small["wall_seconds"], "seconds_bytes_run_4x": large["wall_seconds"],
        "rows": N, "rounds": small["rounds"], "bytes_per_client": small["bytes_per_client"],
        "bytes_sent_per_client": float(np.mean(list(small["bytes_sent_per_client"].values()))),
        "bytes_received_per_client": small["bytes_received_per_client"],
        "rows_4x": 4 * N, "rounds_4x": large["rounds"], "bytes_per_client_4x": large["bytes_per_client"],
        "bytes_sent_per_client_4x": float(np.mean(list(large["bytes_sent_per_client"].values()))),
        "bytes_received_per_client_4x": large["bytes_received_per_client"],
        "bytes_ratio_4x": large["bytes_per_client"] / small["bytes_per_client"],
        "ensemble_bytes_all_clients": small["ensemble_bytes"], "ensemble_bytes_all_clients_4x": large["ensemble_bytes"],
        "cnn_bytes": small["cnn_bytes"], "cnn_bytes_4x": large["cnn_bytes"],
        "train_accuracy": small["train_accuracy"], "train_accuracy_4x": large["train_accuracy"],
        "setup": {"clients": 2, "ranks": 3, "xgb_trees": 500, "max_depth": 8, "rounds": 10,
                  "local_epochs": 5, "features": 20, "command": "make bench (experiments/bench_fedxgbllr.py)"},
        "machine": machine_info(), "provenance": prov,
    }
    print_table([
        ("seconds (churn-size, K = 5, defaults)", out["seconds"], "under ~10 s", out["seconds"] < 10),
        ("ratio_vs_centralized_xgboost", out["ratio_vs_centralized_xgboost"], "a small multiple", None),
        ("cpu_seconds", out["cpu_seconds"], "", None),
        ("accuracy_drop_points", out["accuracy_drop_points"], "about 0.6 (the paper, K = 5)", None),
        ("cnn_epoch_speedup", out["cnn_epoch_speedup"], "", None),
        ("rows", N, "", None), ("rounds", out["rounds"], "R + 1 = 11", out["rounds"] == 11),
        ("bytes_per_client", out["bytes_per_client"], "", None),
        ("rows_4x", 4 * N, "", None), ("rounds_4x", out["rounds_4x"], "R + 1 = 11", out["rounds_4x"] == 11),
        ("bytes_per_client_4x", out["bytes_per_client_4x"], "", None),
        ("bytes_ratio_4x", out["bytes_ratio_4x"], "far below 4 (sublinear)", out["bytes_ratio_4x"] < 2),
        ("cnn_bytes (per message)", out["cnn_bytes"], "same at 4x", out["cnn_bytes"] == out["cnn_bytes_4x"]),
        ("ensemble_bytes_all_clients", out["ensemble_bytes_all_clients"], "", None),
        ("ensemble_bytes_all_clients_4x", out["ensemble_bytes_all_clients_4x"], "<= depth-8 cap", None),
    ])
    log(f"wrote {provenance.write_result(RESULT, out)}")


if __name__ == "__main__":
    raise SystemExit(main())
