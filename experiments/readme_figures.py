"""The README's measured figures, rebuilt from the committed result JSON.

    python experiments/readme_figures.py           # rewrite the blocks in README.md
    python experiments/readme_figures.py --check   # exit 1 if README.md differs from the results

Two blocks: the table between ``<!-- figures:begin -->`` and
``<!-- figures:end -->``, each row naming the JSON file and key it comes from,
and the first-contact paragraph (set-up, compile and demo times) between
``<!-- first-contact:begin -->`` and ``<!-- first-contact:end -->``, whose
figures all come from ``bench_startup.json``.  Nothing else of README.md is
touched, so a figure cannot drift from its result.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "experiments", "results")
README = os.path.join(ROOT, "README.md")
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"
PROSE_BEGIN, PROSE_END = "<!-- first-contact:begin -->", "<!-- first-contact:end -->"


def _get(doc, path):
    for key in path.split("."):
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


def _fmt(value, kind):
    if value is None:
        return None
    if kind == "x":
        return f"{value:.2f}×"
    if kind == "s":
        return f"{value:.3g} s"
    if kind == "MB":
        return f"{value / 1e6:.2f} MB"
    if kind == "%":
        return f"{100 * value:.1f} %"
    if kind == "int":
        return f"{int(round(value)):,}"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


# (what, file, key, format)
ROWS = [
    ("Vertical training time / scikit-learn RF (100k × 20, 100 trees, 2 parties)", "bench_vertical",
     "train_ratio_vs_sklearn", "x"),
    ("Vertical training time / XGBoost RF mode (same data)", "bench_vertical", "train_ratio_vs_xgboost", "x"),
    ("Vertical training time / LightGBM RF mode (same data)", "bench_vertical", "train_ratio_vs_lightgbm", "x"),
    ("Fastest peer of the three (same run)", "bench_vertical", "fastest_peer", ""),
    ("Single-process ForestClassifier training time / fastest peer (same data)", "bench_vertical",
     "single_process_ratio_vs_fastest_peer", "x"),
    ("CPU seconds of the whole federated job (every rank) / XGBoost RF fit", "bench_vertical",
     "cpu_ratio_vs_xgboost", "x"),
    ("Vertical exchanges per forest", "bench_vertical", "rounds_per_forest", "int"),
    ("Vertical one-round prediction speed-up over node-by-node", "bench_vertical",
     "predict_speedup_vs_classical", "x"),
    ("Vertical accuracy (fedforest / scikit-learn RF / XGBoost RF / LightGBM RF)", "bench_vertical",
     ("accuracy_fedforest", "accuracy_sklearn_rf", "accuracy_xgboost_rf", "accuracy_lightgbm_rf"), ""),
    ("Paillier labels, a9a-shaped sparse case: seconds per tree, encrypted / plain", "bench_paillier",
     "he_over_plain", "x"),
    ("Paillier labels, dense numeric case: seconds per tree, encrypted / plain", "bench_paillier",
     "dense.he_over_plain", "x"),
    ("Paillier label set-up, a full r^n per row / the label holder's CRT randomness", "bench_paillier",
     "dense.full_exponentiation_over_crt", "x"),
    ("Vertical boosting, a9a shape, seconds per tree: plain / Paillier-1024 / Paillier-2048", "bench_vertical_boost",
     ("a9a.seconds_per_tree_plain", "a9a.seconds_per_tree_paillier_1024", "a9a.seconds_per_tree_paillier_2048"), "s"),
    ("Vertical boosting, plain, seconds per tree / XGBoost hist on pooled data (a9a shape)", "bench_vertical_boost",
     "a9a.ratio_vs_xgboost_hist", "x"),
    ("FedXGBllr bytes per client (2 clients, 8,000 rows)", "bench_fedxgbllr", "bytes_per_client", "MB"),
    ("FedXGBllr bytes at 4× the rows / at 1×", "bench_fedxgbllr", "bytes_ratio_4x", "x"),
    ("FedXGBllr default run, churn-size data (3,500 rows, K = 5, one process): wall time", "bench_fedxgbllr",
     "seconds", "s"),
    ("FedXGBllr wall time / centralized XGBoost on the pooled rows (same run)", "bench_fedxgbllr",
     "ratio_vs_centralized_xgboost", "x"),
    ("FedXGBllr test accuracy / centralized XGBoost (same run)", "bench_fedxgbllr",
     ("test_accuracy", "centralized_xgboost_test_accuracy"), ""),
    ("FedXGBllr CNN epoch: numpy reference time / compiled kernels", "bench_fedxgbllr", "cnn_epoch_speedup", "x"),
    ("FedGA-Tree seconds per generation (10 clients, satellite, P = 20)", "bench_fedga",
     "seconds_per_generation", "s"),
    ("FedGA-Tree structures fitted per second", "bench_fedga", "structures_fitted_per_second", "int"),
    ("EFDT client throughput / river's EFDT (dna, satellite, Agrawal 100k)", "bench_efdt",
     ("streams.dna.speedup_vs_river", "streams.satellite.speedup_vs_river", "streams.agrawal.speedup_vs_river"),
     "x"),
    ("EFDT prequential accuracy, ours / river's (Agrawal 100k)", "bench_efdt",
     ("streams.agrawal.accuracy", "streams.agrawal.river_accuracy"), ""),
]


def rows():
    cache = {}
    out = []
    for what, name, key, kind in ROWS:
        if name not in cache:
            path = os.path.join(RESULTS, name + ".json")
            cache[name] = json.load(open(path)) if os.path.isfile(path) else None
        doc = cache[name]
        if doc is None:
            continue
        keys = key if isinstance(key, tuple) else (key,)
        values = [_fmt(_get(doc, k), kind) for k in keys]
        if any(v is None for v in values):
            continue
        out.append(f"| {what} | {' / '.join(values)} | `{name}.json`: {', '.join(f'`{k}`' for k in keys)} |")
    return out


def block():
    lines = [BEGIN,
             "| figure | value | source (`experiments/results/`) |", "|---|---:|---|", *rows(),
             "",
             "Generated by `python experiments/readme_figures.py` from the committed results; "
             "peers were measured in the same run on a shared 2-core machine, so compare ratios.",
             END]
    return "\n".join(lines)


# the first-contact paragraph: its text with {key} for each field of bench_startup.json
# (times formatted as "s", the commit shortened, the load average with one decimal)
FIRST_CONTACT = (
    "`make demo` creates `.venv`, installs what a job needs from pip wheels (MPICH through the `mpich` wheel, "
    "plus `mpi4py`, NumPy, numba, scikit-learn, pandas, pyarrow, cryptography, …), compiles the numba kernels "
    "once (`fedforest warm-up`) and runs the job below. On a fresh clone of a 2-core machine with an empty "
    "pip cache, the whole `make demo` took {fresh_clone_make_demo_seconds}: {fresh_clone_setup_seconds} to "
    "create `.venv` (pip from a nearby package index) and compile the kernels, {fresh_clone_demo_seconds} for "
    "the demo, whose training with encrypted labels took {fresh_clone_demo_train_seconds}. Compiling the "
    "kernels of a vertical job takes {cold_compile_seconds_vertical} by itself, every kernel "
    "{cold_compile_seconds_all}. Later runs load the kernels from numba's cache: a job's rank is ready to work "
    "{rank_startup_seconds} after it starts (`experiments/results/bench_startup.json`, measured at commit "
    "{git_commit} with a load average of {load_average_start} when the measurement started).")


def _prose_value(key, value):
    if key == "git_commit":
        return f"`{value[:7]}`"
    if key.startswith("load_average"):
        return f"{value:.1f}"
    return _fmt(value, "s").replace(" ", "\u00a0")     # no line break between a number and its unit


def first_contact(doc):
    """The first-contact paragraph from ``doc`` (bench_startup.json), wrapped at 100 columns."""
    import string
    import textwrap
    keys = [name for _, name, _, _ in string.Formatter().parse(FIRST_CONTACT) if name]
    missing = [k for k in keys if _get(doc, k) is None]
    if missing:
        raise SystemExit("experiments/results/bench_startup.json lacks " + ", ".join(missing)
                         + ": run experiments/bench_startup.py (without --no-fresh-clone)")
    text = FIRST_CONTACT.format(**{k: _prose_value(k, doc[k]) for k in keys})
    return "\n".join(textwrap.wrap(text, 100, break_on_hyphens=False)).replace("\u00a0", " ")


def _replaced(text, begin, end, new):
    if begin not in text or end not in text:
        raise SystemExit(f"README.md has no {begin} ... {end} block")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + new + tail


def updated(text):
    text = _replaced(text, BEGIN, END, block())
    path = os.path.join(RESULTS, "bench_startup.json")
    with open(path) as fh:
        doc = json.load(fh)
    return _replaced(text, PROSE_BEGIN, PROSE_END, "\n".join([PROSE_BEGIN, first_contact(doc), PROSE_END]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 when README.md is out of date")
    args = ap.parse_args(argv)
    with open(README) as fh:
        text = fh.read()
    new = updated(text)
    if args.check:
        if new != text:
            print("README.md's figures differ from experiments/results: run python experiments/readme_figures.py")
            return 1
        return 0
    with open(README, "w") as fh:
        fh.write(new)
    print(block())
    return 0


if __name__ == "__main__":
    sys.exit(main())
