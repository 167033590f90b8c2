"""``bench_vertical`` at 100,000 and 1,000,000 rows on a many-core machine.

Run with ``.venv/bin/python experiments/bench_many_core.py`` on a cluster node
(or any machine with many cores): it runs ``experiments/bench_vertical.py``
once per row count (``--rows``, default 100000 1000000) with the same forest
(100 trees of depth 10, 2 parties + master under ``mpiexec -n 3``, the peers
with every core), and writes each result to
``experiments/results/bench_vertical_<cores>cores_<rows>.json``, the machine
(cores, CPU, platform, date, commit) recorded in it by ``bench_vertical``.
A table of the ratios against the fastest random-forest peer and of the
prediction times is printed at the end.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "experiments", "results")
KEYS = ("train_ratio_vs_fastest_peer", "single_process_ratio_vs_fastest_peer",
        "predict_seconds_oneshot", "predict_seconds_classical")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--train-repeats", type=int, default=3)
    ap.add_argument("--allow-dirty", action="store_true")
    args = ap.parse_args()
    cores = os.cpu_count()
    done = []
    for n in args.rows:
        out = os.path.join(RESULTS, f"bench_vertical_{cores}cores_{n}.json")
        cmd = [sys.executable, os.path.join(ROOT, "experiments", "bench_vertical.py"), "--rows", str(n),
               "--train-repeats", str(args.train_repeats), "--out", out,
               "--workdir", os.path.join(ROOT, "build", f"bench_many_core_{n}")]
        if args.allow_dirty:
            cmd.append("--allow-dirty")
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        done.append((n, out))
    print(f"\n{'rows':>9}  " + "  ".join(f"{k:>36}" for k in KEYS))
    for n, out in done:
        with open(out) as fh:
            doc = json.load(fh)
        print(f"{n:>9}  " + "  ".join(f"{doc.get(k, float('nan')):>36.3f}" for k in KEYS))


if __name__ == "__main__":
    main()
