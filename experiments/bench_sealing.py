"""What the sealed party-to-party payloads cost (issue 47's budget: at most
5 % per tree).

Run with ``make bench`` (or ``.venv/bin/python experiments/bench_sealing.py``).
In the encrypted modes every payload one party tells another (per-bin sums
and counts, the label holder's decision, partition bits, leaf sets, bins;
see docs/protocol.md, "Sealed party-to-party payloads") is encoded and
sealed with AES-256-GCM by its sender and opened and decoded by its
receiver, and a receiving party assembles a level's bitmap from the
winners' bits.  This script runs in-process jobs (every rank a thread, the
real protocol code) of both encrypted algorithms on a synthetic table
(``make_classification``, 20,000 rows, 30 columns, 3 parties of 10 columns,
the label at party 2; 1024-bit keys: the sealing's cost does not depend on
the key, the rest grows with it) and times, on every party, each call of
:meth:`fedforest.vertical.paillier.sealed.Sealer.seal` and ``open`` and of
:func:`~fedforest.vertical.paillier.sealed.assemble_bits`, with the bytes
sealed.  ``sealing_share_of_tree`` is the sealing seconds of all parties
together over the job's tree-growth seconds (every rank's part of the
sealing counted as if nothing overlapped it: an upper bound of its share
of the wall time).  Writes ``experiments/results/bench_sealing.json``.
"""
import argparse
import functools
import os
import sys
import threading
import time

import numpy as np
import pandas as pd
from sklearn.datasets import make_classification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402

from fedforest.jobs import run_job  # noqa: E402
from fedforest.vertical.paillier import sealed  # noqa: E402

RESULT = os.path.join(provenance.ROOT, "experiments", "results", "bench_sealing.json")


def frames(n_rows, seed=0):
    X, y = make_classification(n_rows, 30, n_informative=12, random_state=seed)
    ids = [f"r{i}" for i in range(n_rows)]
    out = []
    for p in range(3):
        f = pd.DataFrame(X[:, 10 * p:10 * (p + 1)], columns=[f"p{p}_{j}" for j in range(10)])
        f.insert(0, "id", ids)
        if p == 1:
            f["y"] = y
        out.append(f)
    return out


class Timer:
    """Seconds and bytes of the sealing steps, summed over every party's thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seconds = {"seal": 0.0, "open": 0.0, "assemble": 0.0}
        self.calls = {"seal": 0, "open": 0, "assemble": 0}
        self.bytes = 0
        self.saved = []

    def wrap(self, owner, name, key, count_bytes=False):
        orig = getattr(owner, name)
        self.saved.append((owner, name, orig))

        @functools.wraps(orig)
        def timed(*args, **kw):
            t0 = time.perf_counter()
            out = orig(*args, **kw)
            dt = time.perf_counter() - t0
            with self.lock:
                self.seconds[key] += dt
                self.calls[key] += 1
                if count_bytes:
                    self.bytes += int(out.size)
            return out
        setattr(owner, name, timed)

    def __enter__(self):
        self.wrap(sealed.Sealer, "seal", "seal", count_bytes=True)
        self.wrap(sealed.Sealer, "open", "open")
        self.wrap(sealed, "assemble_bits", "assemble")
        return self

    def __exit__(self, *exc):
        for owner, name, orig in reversed(self.saved):
            setattr(owner, name, orig)


def run(name, data, tmp, **options):
    with Timer() as t:
        summary = run_job("train", data, model_dir=os.path.join(tmp, name), label_column="y", task="classification",
                          label_privacy="paillier", key_length=1024, insecure_key=True, random_state=0,
                          **options)
    n_trees = summary["n_trees"]
    sealing = sum(t.seconds.values())
    return {"job": options, "n_trees": n_trees, "train_seconds": summary["train_seconds"],
            "seconds_per_tree": summary["train_seconds"] / n_trees,
            "sealing_seconds": dict(t.seconds), "sealing_calls": dict(t.calls),
            "sealing_seconds_per_tree": sealing / n_trees, "sealed_bytes_per_tree": t.bytes / n_trees,
            "bytes_per_tree": summary["bytes_per_tree"],
            "sealing_share_of_tree": sealing / summary["train_seconds"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000)
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    prov = provenance.record(args)
    import tempfile
    data = frames(args.rows)
    out = {"provenance": prov, "rows": args.rows, "key_length": 1024, "parties": 3, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        run("warm-up", frames(400), tmp, mode="vertical", n_estimators=1, max_depth=3)       # numba's cache
        cases = {"forest": dict(mode="vertical", n_estimators=5, max_depth=8),
                 "boosting_subsample": dict(mode="vertical_boost", n_estimators=5, max_depth=6, subsample=0.8)}
        for name, options in cases.items():
            r = run(name, data, tmp, **options)
            out["cases"][name] = r
            print(f"{name:20s} {r['seconds_per_tree']:.3f} s/tree, sealing {r['sealing_seconds_per_tree'] * 1e3:.2f} "
                  f"ms/tree ({100 * r['sealing_share_of_tree']:.2f} %), sealed {r['sealed_bytes_per_tree'] / 1e3:.1f} "
                  f"kB/tree of {r['bytes_per_tree'] / 1e3:.1f} kB", flush=True)
    out["max_sealing_share_of_tree"] = max(c["sealing_share_of_tree"] for c in out["cases"].values())
    provenance.write_result(RESULT, out)
    print(f"wrote {os.path.relpath(RESULT, provenance.ROOT)}")


if __name__ == "__main__":
    main()
