"""Benchmark of the encrypted-label mode (``label_privacy = "paillier"``).

Run with ``make bench`` (or ``.venv/bin/python experiments/bench_paillier.py``).
The script is only the driver; the jobs run under ``mpiexec -n 3`` (master +
2 parties).  It

1. generates a synthetic table of the shape of a9a: 32,561 rows, 123 binary
   columns that are the one-hot codes of 14 categorical attributes (so, as in
   a9a, every row has 14 ones, about 11 % density), and a binary label from a
   logistic model of the attributes (about a quarter positive);
2. gives party 1 the label and the columns of the first 5 attributes (62
   columns), party 2 the other 61 columns (Parquet files);
3. runs an untimed tiny warm-up job (numba's on-disk cache), then the same
   forest twice with the same seed: ``label_privacy = "plain"`` and
   ``label_privacy = "paillier"`` with a 2048-bit key; 5 trees, ``max_depth``
   6, otherwise the product's defaults (``max_features`` "sqrt" drawn per
   node, 255 histogram bins);
4. measures, in this process and with the product's key objects, homomorphic
   additions and decryptions per second at 2048 bits;
5. prints a table and writes ``experiments/results/bench_paillier.json``.

A second, dense numeric case (``--dense``, on by default; ``--no-dense`` to
skip; ``--dense-only`` runs it alone and updates the ``dense`` entry of the
results file): ``make_classification(--dense-rows (default 100,000), 20,
random_state=0)``, 10 columns per
party, 255 bins, ``max_depth`` 8, 10 trees, 2048-bit key, plain and Paillier
(the label holder makes the key and its encryption randomness with the CRT).
Label encryption is also timed in this process with the product's
functions on ``--randomness-rows`` rows (default 2,000) and scaled to the
full row count: the CRT factors plus the multiplications, against a full
``r^n mod n²`` per row (both with ``encrypt_workers`` processes).

A third, the demo table (``--demo``, on by default; ``--demo-only`` runs it
alone and updates the ``demo`` entry and ``demo_forest_seconds_paillier_2048``):
``python -m fedforest demo-data``'s breast-cancer table (426 training rows,
15 + 15 columns, party 1 holds the label), ``--demo-trees`` (default 100)
forest trees with the product's defaults (``max_depth`` None, ``max_features``
"sqrt" per node, 255 bins), plain and Paillier-2048:
``demo_forest_seconds_paillier_2048`` is the Paillier run's ``train_seconds``
for those trees (target 5 s), ``demo.stage_seconds_per_tree`` its seconds per
tree by stage from the parties' own manifests (the other party's
``party_sums``, the label holder's ``decryption`` and the rest of its
``decision``; summed over the trees, which a batch handles on several
threads at once, so they can add up to more than the wall time).

Per-tree times are ``train_seconds / n_trees`` from the master's run summary
(the tree loop; label encryption is reported apart as
``label_encrypt_seconds``).  The label holder encrypts with
``encrypt_workers`` processes (``--encrypt-workers``, default 2 = the cores
of this machine).  ``bytes_per_tree`` counts every encrypted byte sent by all
ranks during tree growth.  Both runs must produce the same trees; the script
checks the saved trees: the master's structure, every party's splits, and
the Paillier label holder's leaf values and statistics against the plain
master's.  ``paillier_key_holder`` says which rank made and held the key.
"""
import argparse
import json
import os
import shutil
import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402
from bench_vertical import ROOT, cpu_busy, log, machine_info, print_table, run_fedforest

RESULT = os.path.join(ROOT, "experiments", "results", "bench_paillier.json")
WORKDIR = os.path.join(ROOT, "build", "bench_paillier")
N_ROWS = 32_561
CARDINALITIES = [16, 16, 15, 9, 6, 7, 5, 2, 5, 5, 5, 14, 5, 13]  # 123 columns in all
SPLIT_ATTRIBUTE = 5

JOB = """# bench_paillier.py: {what}
[job]
task = "classification"
data = ["party1.parquet", "party2.parquet"]
label_column = "label"
model_dir = "model-{tag}"
progress = false
overwrite = true

[forest]
label_privacy = "{privacy}"
key_length = {key_length}
insecure_key = {insecure}
encrypt_workers = {workers}
n_estimators = {trees}
max_depth = {depth}
random_state = 0
{extra}"""

DENSE_FEATURES = 20


def make_data(seed=0):
    rng = np.random.default_rng(seed)
    blocks, score, names = [], np.zeros(N_ROWS), []
    for a, card in enumerate(CARDINALITIES):
        value = rng.choice(card, N_ROWS, p=rng.dirichlet(np.full(card, 0.7)))
        blocks.append(np.eye(card, dtype=np.float32)[value])
        score += rng.normal(0.0, 1.0, card)[value]
        names += [f"a{a:02d}_{v:02d}" for v in range(card)]
    X = np.hstack(blocks)
    y = (score + rng.logistic(size=N_ROWS) > np.quantile(score, 0.76)).astype(np.int64)
    return X, y, names


def write_files(folder):
    X, y, names = make_data()
    cut = sum(CARDINALITIES[:SPLIT_ATTRIBUTE])
    ids = [f"r{i:06d}" for i in range(N_ROWS)]
    p1 = pd.DataFrame(X[:, :cut], columns=names[:cut])
    p1.insert(0, "id", ids)
    p1["label"] = y
    p2 = pd.DataFrame(X[:, cut:], columns=names[cut:])
    p2.insert(0, "id", ids)
    p1.to_parquet(os.path.join(folder, "party1.parquet"))
    p2.to_parquet(os.path.join(folder, "party2.parquet"))
    return cut, X.shape[1] - cut, float(X.mean()), float(y.mean())


def job_file(folder, tag, privacy, trees, depth, key_length, workers, insecure=False, extra=""):
    path = os.path.join(folder, f"{tag}.toml")
    with open(path, "w") as fh:
        fh.write(JOB.format(what=tag, tag=tag, privacy=privacy, trees=trees, depth=depth,
                            key_length=key_length, workers=workers,
                            insecure=str(insecure).lower(), extra=extra))
    return path


def write_dense_files(folder, n_rows):
    from sklearn.datasets import make_classification
    X, y = make_classification(n_rows, DENSE_FEATURES, random_state=0)
    ids = [f"r{i:06d}" for i in range(n_rows)]
    half = DENSE_FEATURES // 2
    for p, cols in enumerate((range(half), range(half, DENSE_FEATURES)), start=1):
        df = pd.DataFrame({f"f{c:02d}": X[:, c] for c in cols})
        df.insert(0, "id", ids)
        if p == 1:
            df["label"] = y
        df.to_parquet(os.path.join(folder, f"party{p}.parquet"))


def label_encryption_rates(key_length, rows, workers, insecure=False):
    """Seconds per row to encrypt labels with the label holder's CRT randomness
    (it holds the key's factorisation) against a full ``r^n mod n²`` per row."""
    from fedforest.crypto import paillier
    from fedforest.vertical import encrypted_labels as E
    pub, priv = paillier.generate_keypair(key_length, insecure)
    plaintexts = [int(i % 2) << 40 for i in range(rows)]
    t0 = time.perf_counter()
    factors = priv.randomness(rows, workers)
    crt = time.perf_counter() - t0
    t0 = time.perf_counter()
    E.encrypt_rows(pub, plaintexts, factors=[paillier.gmpy2.mpz(f) for f in factors])
    multiply = time.perf_counter() - t0
    t0 = time.perf_counter()
    E.encrypt_rows(pub, plaintexts, workers)
    full = time.perf_counter() - t0
    return {"rows_timed": rows, "workers": workers,
            "crt_randomness_seconds_per_row": crt / rows,
            "multiply_seconds_per_row": multiply / rows,
            "full_exponentiation_seconds_per_row": full / rows}


def dense_case(args):
    folder = os.path.join(WORKDIR, "dense")
    os.makedirs(folder)
    rows = args.dense_rows
    write_dense_files(folder, rows)
    log(f"dense case: {rows} x {DENSE_FEATURES} numeric, 10 trees, depth 8, 255 bins")
    runs = {}
    for privacy in ("plain", "paillier"):
        job = job_file(folder, privacy, privacy, 10, 8, args.key_length, args.encrypt_workers,
                       insecure=args.insecure_key, extra="max_bins = 255\n")
        summary, _, wall = run_fedforest("train", job, os.path.join(folder, f"{privacy}.json"))
        runs[privacy] = summary
        log(f"  {privacy}: {summary['train_seconds']:.1f}s for 10 trees (wall {wall:.0f}s)")
    he, plain = runs["paillier"], runs["plain"]
    rates = label_encryption_rates(args.key_length, args.randomness_rows, args.encrypt_workers, args.insecure_key)
    per_row_crt = rates["crt_randomness_seconds_per_row"] + rates["multiply_seconds_per_row"]
    return {
        "paillier_key_holder": he["paillier_key_holder"],
        "seconds_per_tree": he["train_seconds"] / 10,
        "plain_seconds_per_tree": plain["train_seconds"] / 10,
        "he_over_plain": he["train_seconds"] / plain["train_seconds"],
        "label_encrypt_seconds": he["label_encrypt_seconds"],
        "label_setup_seconds_crt_scaled_to_1e5_rows": per_row_crt * 100_000,
        "label_setup_seconds_full_exponentiation_scaled_to_1e5_rows":
            rates["full_exponentiation_seconds_per_row"] * 100_000,
        "full_exponentiation_over_crt": rates["full_exponentiation_seconds_per_row"] / per_row_crt,
        "label_encryption_timing": rates,
        "bytes_per_tree": he["bytes_per_tree"],
        "rounds_per_forest": he.get("rounds_per_forest"),
        "plain_rounds_per_forest": plain.get("rounds_per_forest"),
        "same_trees_as_plain": same_trees(folder),
        "setup": {"rows": rows, "features": DENSE_FEATURES, "columns": [10, 10], "trees": 10,
                  "max_depth": 8, "max_bins": 255, "key_length": args.key_length,
                  "data": f"sklearn make_classification({rows}, {DENSE_FEATURES}, random_state=0)",
                  "command": "python experiments/bench_paillier.py " + " ".join(sys.argv[1:])},
    }


DEMO_TREES = 100
DEMO_STAGES = ("randomness", "encryption", "party_sums", "decryption", "decision")
DEMO_JOB = """# {script}: {what}
[job]
mode = "{mode}"
task = "classification"
data = ["train-party1.csv", "train-party2.csv"]
id_column = "id"
label_column = "diagnosis"
model_dir = "model-{tag}"
progress = false
overwrite = true

[{section}]
label_privacy = "{privacy}"
key_length = {key_length}
insecure_key = {insecure}
n_estimators = {trees}
random_state = 0
"""


def demo_table(folder):
    """The demo's party files (``python -m fedforest demo-data``) in ``folder``."""
    from fedforest.demo import make_demo
    shutil.rmtree(folder, ignore_errors=True)
    make_demo(folder)
    return folder


def demo_job(folder, tag, mode, privacy, trees, key_length=2048, script="bench_paillier.py"):
    """A job of ``mode`` on the demo table of ``folder``, the product's defaults otherwise."""
    path = os.path.join(folder, f"{tag}.toml")
    with open(path, "w") as fh:
        fh.write(DEMO_JOB.format(script=script, what=tag, mode=mode, tag=tag, privacy=privacy,
                                 section="boost" if mode == "vertical_boost" else "forest", key_length=key_length,
                                 insecure=str(key_length < 2048).lower(), trees=trees))
    return path


def stage_seconds(summary):
    """Seconds by stage of an encrypted run, summed from the parties' own
    manifests (``stage_seconds``: the master never receives them); the
    label holder's ``decision`` less its ``decryption``."""
    total = dict.fromkeys(DEMO_STAGES, 0.0)
    for rank, folder in summary["model_dirs"].items():
        if int(rank) == 0:
            continue
        with open(os.path.join(folder, "manifest.json")) as fh:
            for k, v in json.load(fh).get("stage_seconds", {}).items():
                total[k] = total.get(k, 0.0) + v
    total["decision"] -= total["decryption"]
    return total


def demo_runs(folder, mode, trees, key_length=2048, script="bench_paillier.py"):
    """An untimed warm-up, then plain and Paillier runs of ``mode`` on the demo
    table: ``{privacy: summary}`` (with ``wall_seconds``)."""
    warm = demo_job(folder, "warmup", mode, "paillier", 1, 512, script)
    run_fedforest("train", warm, os.path.join(folder, "warmup.json"))
    runs = {}
    for privacy in ("plain", "paillier"):
        job = demo_job(folder, privacy, mode, privacy, trees, key_length, script)
        summary, _, wall = run_fedforest("train", job, os.path.join(folder, f"{privacy}.json"))
        summary["wall_seconds"] = wall
        runs[privacy] = summary
        log(f"  demo {mode} {privacy}: {summary['train_seconds']:.2f}s for {summary['trees_built']} trees "
            f"(wall {wall:.1f}s)")
    return runs


def demo_case(args):
    """The demo table's forest: ``--demo-trees`` trees, plain and Paillier."""
    folder = demo_table(os.path.join(WORKDIR, "demo"))
    log(f"demo table: {args.demo_trees} forest trees, {args.key_length}-bit key")
    runs = demo_runs(folder, "vertical", args.demo_trees, args.key_length)
    he, plain = runs["paillier"], runs["plain"]
    n = he["trees_built"]
    stages = stage_seconds(he)
    return {
        f"forest_seconds_paillier_{args.key_length}": he["train_seconds"],
        "forest_seconds_plain": plain["train_seconds"],
        "trees": n,
        "stage_seconds_per_tree": {k: v / n for k, v in stages.items()},
        "bytes_per_tree": he["bytes_per_tree"],
        "rounds_per_tree": he["rounds_per_tree"],
        "tree_batch": he.get("tree_batch"),
        "same_trees_as_plain": same_trees(folder),
        "setup": {"rows": he["n_rows"], "columns": [15, 15], "trees": n, "key_length": args.key_length,
                  "data": "python -m fedforest demo-data (scikit-learn's breast cancer, training rows)",
                  "settings": "the product's forest defaults (max_depth None, max_features 'sqrt', 255 bins)",
                  "command": "python experiments/bench_paillier.py " + " ".join(sys.argv[1:])},
    }


def demo_result(args):
    """:func:`demo_case` with the machine and the other processes' load, and its table."""
    busy = cpu_busy()
    demo = demo_case(args)
    demo["cpu_busy_other"] = busy
    demo["cpu_busy_other_end"] = cpu_busy()
    demo["machine"] = machine_info()
    key = f"forest_seconds_paillier_{args.key_length}"
    print_table([
        (f"demo_{key}", demo[key], "<= 5", demo[key] <= 5),
        ("demo forest_seconds_plain", demo["forest_seconds_plain"], "", None),
        *((f"demo {k} per tree", v, "", None) for k, v in demo["stage_seconds_per_tree"].items()),
        ("demo same_trees_as_plain", demo["same_trees_as_plain"], "True", demo["same_trees_as_plain"]),
    ])
    return demo


def crypto_rates(key_length, insecure=False, seconds=1.0):
    """Homomorphic additions and decryptions per second with the product's key objects."""
    from fedforest.crypto import paillier
    pub, priv = paillier.generate_keypair(key_length, insecure)
    cts = [pub.encrypt(i) for i in range(16)]
    n, t0 = 0, time.perf_counter()
    acc = pub.zero()
    while time.perf_counter() - t0 < seconds:
        for c in cts:
            acc = pub.add(acc, c)
        n += len(cts)
    adds = n / (time.perf_counter() - t0)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        priv.decrypt(cts[n % len(cts)])
        n += 1
    return adds, n / (time.perf_counter() - t0)


def same_trees(folder):
    """Whether the Paillier run grew the plain run's trees: the master's
    structure and owners, every party's splits, and the leaf values and node
    statistics (the plain master's, the Paillier label holder's)."""
    from fedforest.vertical import model_files as model_io
    plain, he = os.path.join(folder, "model-plain"), os.path.join(folder, "model-paillier")
    n = model_io.read_manifest(model_io.party_dir(plain, 0))["n_trees"]
    pm, hm = (model_io.read_trees(model_io.party_dir(d, 0), n) for d in (plain, he))
    holder = model_io.read_trees(model_io.party_dir(he, 1), n)      # party 1 holds the label
    for x, z, h in zip(pm, hm, holder):
        if not all(np.array_equal(x[k], z[k]) for k in z):
            return False
        if not all(np.array_equal(x[k], h[k]) for k in ("value", "impurity", "weighted_n_node_samples")):
            return False
    for r in (1, 2):
        a, b = (model_io.read_trees(model_io.party_dir(d, r), n) for d in (plain, he))
        keys = ("children_left", "children_right", "feature", "threshold", "missing_left")
        if not all(np.array_equal(x[k], z[k], equal_nan=True) for x, z in zip(a, b) for k in keys):
            return False
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trees", type=int, default=5)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--key-length", type=int, default=2048)
    ap.add_argument("--encrypt-workers", type=int, default=2)
    ap.add_argument("--insecure-key", action="store_true", help="allow short keys (trial runs)")
    ap.add_argument("--output", default=RESULT)
    ap.add_argument("--dense", action=argparse.BooleanOptionalAction, default=True,
                    help="also the dense numeric case (10^5 x 20)")
    ap.add_argument("--randomness-rows", type=int, default=2000,
                    help="rows on which both label randomness sources are timed")
    ap.add_argument("--dense-rows", type=int, default=100_000, help="rows of the dense case")
    ap.add_argument("--dense-only", action="store_true",
                    help="only the dense case; the other figures stay as they are in --output")
    ap.add_argument("--demo", action=argparse.BooleanOptionalAction, default=True,
                    help="also the demo table's forest (426 rows, 15 + 15 columns)")
    ap.add_argument("--demo-trees", type=int, default=DEMO_TREES, help="forest trees of the demo case")
    ap.add_argument("--demo-only", action="store_true",
                    help="only the demo case; the other figures stay as they are in --output")
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    provenance.record(args)           # refuses uncommitted code unless --allow-dirty
    if args.demo_only:
        os.makedirs(WORKDIR, exist_ok=True)
        with open(args.output) as fh:
            result = json.load(fh)
        result["demo"] = demo_result(args)
        result[f"demo_forest_seconds_paillier_{args.key_length}"] = \
            result["demo"][f"forest_seconds_paillier_{args.key_length}"]
        with open(args.output, "w") as fh:
            json.dump(result, fh, indent=2, sort_keys=True)
        log(json.dumps({k: v for k, v in result["demo"].items() if not isinstance(v, dict)}, indent=1))
        log(f"wrote {args.output} (demo case only)")
        return 0
    if args.dense_only:
        shutil.rmtree(WORKDIR, ignore_errors=True)
        os.makedirs(WORKDIR)
        with open(args.output) as fh:
            result = json.load(fh)
        result["dense"] = dense_case(args)
        result["dense"]["cpu_busy_other_end"] = cpu_busy()
        result["dense"]["machine"] = machine_info()
        with open(args.output, "w") as fh:
            json.dump(result, fh, indent=2, sort_keys=True)
        log(json.dumps({k: v for k, v in result["dense"].items() if not isinstance(v, dict)}, indent=1))
        log(f"wrote {args.output} (dense case only)")
        return 0
    shutil.rmtree(WORKDIR, ignore_errors=True)
    os.makedirs(WORKDIR)
    busy = [cpu_busy()]
    n1, n2, density, positives = write_files(WORKDIR)
    log(f"data: {N_ROWS} rows, {n1}+{n2} binary columns (density {density:.3f}), "
        f"{positives:.1%} positive labels")
    warm = job_file(WORKDIR, "warmup", "paillier", 1, 2, 512, 1, insecure=True)
    run_fedforest("train", warm, os.path.join(WORKDIR, "warmup.json"))
    runs = {}
    for privacy in ("plain", "paillier"):
        job = job_file(WORKDIR, privacy, privacy, args.trees, args.depth, args.key_length,
                       args.encrypt_workers, insecure=args.insecure_key)
        summary, _, wall = run_fedforest("train", job, os.path.join(WORKDIR, f"{privacy}.json"))
        summary["wall_seconds"] = wall
        runs[privacy] = summary
        log(f"{privacy}: {summary['train_seconds']:.2f}s for {args.trees} trees (wall {wall:.1f}s)")
    busy.append(cpu_busy())
    adds, decrypts = crypto_rates(args.key_length, args.insecure_key)
    busy.append(cpu_busy())
    he, plain = runs["paillier"], runs["plain"]
    seconds_per_tree = he["train_seconds"] / args.trees
    plain_per_tree = plain["train_seconds"] / args.trees
    result = {
        "seconds_per_tree": seconds_per_tree,
        "plain_seconds_per_tree": plain_per_tree,
        "he_over_plain": seconds_per_tree / plain_per_tree,
        "paillier_key_holder": he["paillier_key_holder"],
        "label_encrypt_seconds": he["label_encrypt_seconds"],
        "encrypt_workers": args.encrypt_workers,
        "adds_per_second": adds,
        "decrypts_per_second": decrypts,
        "bytes_per_tree": he["bytes_per_tree"],
        "plain_bytes_per_tree": plain["bytes_per_tree"],
        "rounds_per_tree": he["rounds_per_tree"],
        "plain_rounds_per_tree": plain["rounds_per_tree"],
        "key_length": he["key_length"],
        "slot_bits": he["slot_bits"],
        "values_per_ciphertext": he["values_per_ciphertext"],
        "same_trees_as_plain": same_trees(WORKDIR),
        "total_seconds_paillier": he["total_seconds"],
        "setup": {"rows": N_ROWS, "columns": [n1, n2], "density": density, "trees": args.trees,
                  "max_depth": args.depth, "parties": 2, "ranks": 3,
                  "command": "make bench (experiments/bench_paillier.py)"},
        "cpu_busy_other": busy,
        "machine": machine_info(),
    }
    print_table([
        ("seconds_per_tree", seconds_per_tree, "<= 5", seconds_per_tree <= 5),
        ("plain_seconds_per_tree", plain_per_tree, "", None),
        ("he_over_plain", result["he_over_plain"], "<= 30", result["he_over_plain"] <= 30),
        ("label_encrypt_seconds", result["label_encrypt_seconds"],
         f"{args.encrypt_workers} worker(s)", None),
        ("adds_per_second", adds, "", None),
        ("decrypts_per_second", decrypts, "", None),
        ("bytes_per_tree", result["bytes_per_tree"], "", None),
        ("rounds_per_tree", result["rounds_per_tree"], "", None),
        ("key_length", result["key_length"], "2048", result["key_length"] >= 2048),
        ("same_trees_as_plain", result["same_trees_as_plain"], "True", result["same_trees_as_plain"]),
    ])
    if args.dense:
        dense = dense_case(args)
        result["dense"] = dense
        log(f"dense numeric case ({args.dense_rows} x 20, 10 trees, depth 8, 255 bins):")
        print_table([
            ("seconds_per_tree", dense["seconds_per_tree"], "", None),
            ("plain_seconds_per_tree", dense["plain_seconds_per_tree"], "", None),
            ("he_over_plain", dense["he_over_plain"], "", None),
            ("label_encrypt_seconds (run, the label holder's CRT randomness)",
             dense["label_encrypt_seconds"], "", None),
            ("label_setup_seconds_crt_scaled_to_1e5_rows",
             dense["label_setup_seconds_crt_scaled_to_1e5_rows"], "", None),
            ("label_setup_seconds_full_exponentiation_scaled_to_1e5_rows",
             dense["label_setup_seconds_full_exponentiation_scaled_to_1e5_rows"], "", None),
            ("full_exponentiation_over_crt", dense["full_exponentiation_over_crt"], ">= 3",
             dense["full_exponentiation_over_crt"] >= 3),
            ("rounds_per_forest", dense["rounds_per_forest"], "", None),
            ("same_trees_as_plain", dense["same_trees_as_plain"], "True", dense["same_trees_as_plain"]),
        ])
        busy.append(cpu_busy())
        result["cpu_busy_other"] = busy
    if args.demo:
        result["demo"] = demo_result(args)
        result[f"demo_forest_seconds_paillier_{args.key_length}"] = \
            result["demo"][f"forest_seconds_paillier_{args.key_length}"]
        busy.append(result["demo"]["cpu_busy_other_end"])
    if max(busy) > 0.25:
        log(f"warning: other processes kept {max(busy):.0%} of the CPU busy; timings are inflated")
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as fh:
        json.dump(result, fh, indent=2, sort_keys=True)
    log(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
