"""What lowers the privacy audit's figure: the label holder's own measure
(``privacy_audit`` of the run summary, :mod:`fedforest.vertical.audit`) of
how many training labels a party without the labels could name from the
trees' structure, on the demo table (breast cancer, 426 training rows, 2
parties, party 1 holds the labels), encrypted forest and boosting, under the
settings that make fewer or larger leaves, fewer trees, or trees the other
parties do not see (``label_holder_first_trees``).

Run with ``.venv/bin/python experiments/audit_levers.py``. Every job runs
in this process (:func:`fedforest.jobs.run_job`), ``label_privacy =
"paillier"``, ``random_state = 0``, otherwise the product's defaults but
the setting named and the key: ``--key-length`` (default 512, with
``insecure_key``; the trees and so the audit do not depend on the key).
``experiments/bench_leakage.py`` checks that the audit equals its own
attack on a passive party's recorded view; this script reads the audit only.

Written to ``experiments/results/audit_levers.json`` and ``.md``.
"""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402

ROOT = provenance.ROOT
OUT = os.path.join(ROOT, "experiments", "results", "audit_levers.json")
FOREST, BOOST = "vertical", "vertical_boost"
CASES = [(FOREST, {"n_estimators": 30}), (FOREST, {"n_estimators": 30, "min_samples_leaf": 5}),
         (FOREST, {"n_estimators": 30, "min_samples_leaf": 20}), (FOREST, {"n_estimators": 30, "max_depth": 3}),
         (FOREST, {"n_estimators": 5}),
         (FOREST, {"n_estimators": 30, "label_holder_first_trees": 25}),
         (FOREST, {"n_estimators": 30, "label_holder_first_trees": 29}),
         (BOOST, {"n_estimators": 10}), (BOOST, {"n_estimators": 10, "min_child_weight": 5}),
         (BOOST, {"n_estimators": 10, "min_child_weight": 20}), (BOOST, {"n_estimators": 10, "max_depth": 2}),
         (BOOST, {"n_estimators": 3}),
         (BOOST, {"n_estimators": 10, "label_holder_first_trees": 5}),
         (BOOST, {"n_estimators": 10, "label_holder_first_trees": 9})]


def markdown(doc):
    lines = ["# What lowers the privacy audit's figure (`experiments/audit_levers.py`)", "",
             f"From commit `{doc['provenance']['git_commit']}`, {doc['provenance']['date']}; command: "
             f"`{doc['provenance']['command']}`. Demo table, {doc['rows']} training rows; guessing the majority "
             f"class: {100 * doc['majority_baseline_fraction']:.1f} %.", "",
             "| job | setting | a party without the labels could name |", "|---|---|---|"]
    for r in doc["results"]:
        job = ("forest" if r["mode"] == FOREST else "boosting") + f", {r['n_estimators']} " + \
            ("trees" if r["mode"] == FOREST else "rounds")
        setting = ", ".join(f"`{k} = {v}`" for k, v in r["settings"].items() if k != "n_estimators") or "defaults"
        lines.append(f"| {job} | {setting} | {100 * r['passive_labels_recovered_fraction']:.1f} % |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--key-length", type=int, default=512)
    ap.add_argument("--out", default=OUT)
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    prov = provenance.record(args)
    from fedforest.demo import make_demo
    from fedforest.jobs import run_job
    results = []
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        make_demo(os.path.join(work, "demo"))
        files = [os.path.join(work, "demo", f"train-party{p}.csv") for p in (1, 2)]
        for i, (mode, settings) in enumerate(CASES):
            t0 = time.perf_counter()
            summary = run_job("train", files, mode=mode, task="classification", id_column="id",
                              label_column="diagnosis", label_privacy="paillier", random_state=0,
                              key_length=args.key_length, insecure_key=args.key_length < 2048,
                              model_dir=os.path.join(work, f"model-{i}"), **settings)
            audit = summary["privacy_audit"]
            results.append({"mode": mode, "n_estimators": settings["n_estimators"], "settings": settings,
                            "passive_labels_recovered_fraction": audit["passive_labels_recovered_fraction"],
                            "majority_baseline_fraction": audit["majority_baseline_fraction"],
                            "job_seconds": round(time.perf_counter() - t0, 1)})
            print(json.dumps(results[-1]), flush=True)
            rows = summary["n_rows"]
    doc = {"provenance": prov, "key_length": args.key_length, "rows": rows, "random_state": 0,
           "majority_baseline_fraction": results[0]["majority_baseline_fraction"],
           "bench_seconds": round(time.perf_counter() - t_start, 1), "results": results}
    provenance.write_result_and_table(args.out, doc, markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
