"""Communication of FedXGBllr: bytes per client and rounds, at N and 4N rows.

Run with ``make bench`` (or ``.venv/bin/python experiments/bench_fedxgbllr.py``).
The job runs under ``mpiexec -n 3`` (server + 2 clients) with the product's
defaults for the trees (500 trees over the clients, depth 8, eta 0.1) and
the CNN (10 rounds, 64 channels, batch 64) except ``local_epochs`` = 5:
epochs change the clients' compute, not what they send, and 100 epochs on
16,000 rows per client would make the benchmark take many minutes.

Data: ``make_classification(n_samples, 20 features, random_state=0)``, split
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
The table shows both parts.
"""
import os
import shutil
import sys

import numpy as np
import pandas as pd
from sklearn.datasets import make_classification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_vertical import ROOT, log, machine_info, print_table, run_fedforest
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
    # what the ensembles weigh: the model files hold exactly the bytes that travelled in round 0
    mdir = os.path.join(folder, "model", "server")
    summary["ensemble_bytes"] = sum(os.path.getsize(os.path.join(mdir, f)) for f in os.listdir(mdir)
                                    if f.startswith("ensemble-"))
    with np.load(os.path.join(mdir, "cnn.npz")) as z:
        summary["cnn_bytes"] = sum(z[k].nbytes for k in z.files)
    log(f"{n_rows} rows: {summary['bytes_per_client'] / 1e6:.3f} MB per client, {summary['rounds']} rounds, "
        f"wall {wall:.1f}s")
    return summary


def main(argv=None):
    prov = provenance.start(__doc__, argv)
    shutil.rmtree(WORKDIR, ignore_errors=True)
    small, large = run(N), run(4 * N)
    out = {
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
