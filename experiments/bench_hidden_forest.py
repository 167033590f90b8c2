"""The encrypted forest in the hidden instance space against the shared one:
seconds per tree by depth and tree count, to say where the hidden space stays
within a given factor of the shared one.

Run with ``.venv/bin/python experiments/bench_hidden_forest.py`` (a few
minutes on 2 cores).  Every job runs in this process over the in-process
transport (:func:`fedforest.jobs.run_job`: each rank a thread, the real
protocol code): a9a-shaped data (``bench_vertical_boost.a9a_like``: 123
one-hot columns of 14 categorical attributes, ``--rows`` rows, seed 0),
party 1 holding the label and the first 61 columns, party 2 the other 62;
``label_privacy = "paillier"`` with a ``--key-length`` key (2048 by
default), ``random_state = 0``, the product's defaults otherwise (per-node
feature draws: ``max_features = "sqrt"``).  For each ``--depths`` value and
each of ``--trees`` tree counts, one job per instance space.

Figures per (depth, trees): ``shared_seconds`` and ``hidden_seconds`` (the
master's ``total_seconds``: set-up included, so the shared space's one
encryption of the labels counts once for all its trees, and the hidden
space's per-level encryptions for every tree), their ratio, and both
spaces' stage seconds (the parties' own manifests).  ``within_3x``: the
(depth, trees) cells where the hidden space costs at most 3 times the shared.

Writes ``experiments/results/bench_hidden_forest.json`` and ``.md``.
"""
import argparse
import glob
import json
import os
import sys
import tempfile
import time

import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402
import bench_vertical_boost as BVB  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "experiments", "results", "bench_hidden_forest.json")


def frames(n_rows):
    X, y, names = BVB.a9a_like(n_rows)
    half = X.shape[1] // 2
    ids = [f"r{i}" for i in range(n_rows)]
    f1 = pd.DataFrame(X[:, :half], columns=names[:half])
    f1.insert(0, "id", ids)
    f1["y"] = y
    f2 = pd.DataFrame(X[:, half:], columns=names[half:])
    f2.insert(0, "id", ids)
    return [f1, f2]


def run(parts, space, depth, trees, key_length, work):
    from fedforest.jobs import run_job
    model = tempfile.mkdtemp(dir=work)
    summary = run_job("train", parts, mode="vertical", task="classification", label_column="y",
                      label_privacy="paillier", key_length=key_length, insecure_key=key_length < 2048,
                      n_estimators=trees, max_depth=depth, random_state=0, model_dir=os.path.join(model, "m"),
                      instance_space=space, progress=False, quiet=True)
    stages = {}
    for path in glob.glob(os.path.join(model, "m", "party-*", "manifest.json")):
        with open(path) as fh:
            for k, v in (json.load(fh).get("stage_seconds") or {}).items():
                stages[k] = round(stages.get(k, 0.0) + v, 3)
    return float(summary["total_seconds"]), stages


def markdown(doc):
    lines = ["# The encrypted forest, hidden against shared instance space (`experiments/bench_hidden_forest.py`)", "",
             f"From commit `{doc['provenance']['git_commit']}`, {doc['provenance']['date']}; command: "
             f"`{doc['provenance']['command']}`; {doc['rows']} a9a-shaped rows, 2 parties, "
             f"{doc['key_length']}-bit key.", "",
             "| max_depth | trees | shared (s) | hidden (s) | hidden / shared |", "|---|---|---|---|---|"]
    for r in doc["results"]:
        lines.append(f"| {r['max_depth']} | {r['trees']} | {r['shared_seconds']:.2f} | {r['hidden_seconds']:.2f} | "
                     f"{r['hidden_over_shared']:.2f} |")
    lines += ["", f"Within 3x: {doc['within_3x'] or 'none of these cells'}.", ""]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--depths", default="2,4,6")
    ap.add_argument("--trees", default="1,10")
    ap.add_argument("--key-length", type=int, default=2048)
    ap.add_argument("--out", default=OUT)
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    prov = provenance.record(args)
    parts = frames(args.rows)
    results = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        run(parts, "hidden", 2, 1, args.key_length, work)       # warm-up: kernels, worker start-up
        for depth in (int(d) for d in args.depths.split(",")):
            for trees in (int(t) for t in args.trees.split(",")):
                shared, s_st = run(parts, "shared", depth, trees, args.key_length, work)
                hidden, h_st = run(parts, "hidden", depth, trees, args.key_length, work)
                r = {"max_depth": depth, "trees": trees, "shared_seconds": round(shared, 3),
                     "hidden_seconds": round(hidden, 3), "hidden_over_shared": round(hidden / shared, 3),
                     "shared_stage_seconds": s_st, "hidden_stage_seconds": h_st}
                results.append(r)
                print(f"depth {depth} trees {trees}: shared {shared:.2f} s, hidden {hidden:.2f} s "
                      f"({hidden / shared:.2f}x)", flush=True)
    doc = {"provenance": prov, "rows": args.rows, "key_length": args.key_length,
           "bench_seconds": round(time.perf_counter() - t0, 1), "results": results,
           "within_3x": [f"depth {r['max_depth']}, {r['trees']} trees" for r in results
                         if r["hidden_over_shared"] <= 3.0]}
    provenance.write_result_and_table(args.out, doc, markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
