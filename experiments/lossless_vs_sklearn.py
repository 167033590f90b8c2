"""Federated Forest vs scikit-learn's RandomForest over repeated seeds (paper section 5.2).

The paper (Liu et al., "Federated Forest", section 5.2) splits UCI data sets
vertically and at random into two parties, trains the Federated Forest (FF)
and a pooled random forest (NonFF) over 40 rounds and runs a Z-test on the
means to show the federated forest is lossless.  This script does the same
with the public API only:

* the vertical federated forest runs through ``fedforest.run_vertical``
  (the real protocol: master + 2 party threads, encrypted channels), once with
  ``feature_sampling="tree"`` (one feature subset per tree, as in the paper)
  and once with ``feature_sampling="node"`` (the default: a subset per node,
  as in scikit-learn);
* ``fedforest.ForestClassifier`` / ``ForestRegressor`` on the pooled columns
  (party 1's then party 2's) with the same seed serve as the centralized
  reference: the federated predictions must equal them exactly;
* the peer is ``sklearn.ensemble.RandomForestClassifier`` /
  ``RandomForestRegressor(n_estimators=100, random_state=seed, n_jobs=-1)`` on
  the pooled data.

Per seed: a 75/25 train/test split (stratified for classification) with that
seed, the feature columns split at random into two halves (seed-dependent),
the label on party 1.  Metric: accuracy (classification), R^2 (regression).
Statistics per data set: paired differences (fedforest - sklearn) over seeds,
mean +- sd, a two-sided paired t-test (scipy.stats.ttest_rel), the paired
normal-approximation Z and the paper's two-sample Z on the means.

Writes ``experiments/results/lossless_vs_sklearn.md`` (tables) and ``.json``
(per-seed numbers) and prints the tables.

    .venv/bin/python experiments/lossless_vs_sklearn.py            # full run
    .venv/bin/python experiments/lossless_vs_sklearn.py --quick    # smoke run
    .venv/bin/python experiments/lossless_vs_sklearn.py --seeds 5 --datasets ionosphere,concrete
"""
import argparse
import datetime
import json
import math
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

import numpy as np
import pandas as pd

import provenance

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA_DIR = os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))
RESULTS = os.path.join(HERE, "results")
DEFAULT_DATASETS = ["spambase", "ionosphere", "satellite", "letter", "bostonhousing", "concrete"]
# rough relative cost, to start the expensive jobs first when running in parallel
COST = {"letter": 10, "spambase": 4, "satellite": 4, "concrete": 1, "bostonhousing": 1, "ionosphere": 1}

ID, LABEL = "id", "y"


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------
def manifest():
    m = pd.read_csv(os.path.join(DATA_DIR, "MANIFEST.csv"))
    return {r["name"]: r for r in m.to_dict("records")}


def load(name, max_rows):
    """Features (DataFrame), target (ndarray), task and a note on subsampling."""
    info = manifest()[name]
    df = pd.read_csv(os.path.join(DATA_DIR, info["file"]), na_values=["NA"])
    task = "regression" if info["task"] == "regression" else "classification"
    note = ""
    if max_rows and len(df) > max_rows:
        # one fixed subsample (seed 0) for every round, stratified for classification
        from sklearn.model_selection import train_test_split
        strat = df[info["target"]].astype(str) if task == "classification" else None
        df, _ = train_test_split(df, train_size=max_rows, stratify=strat, random_state=0)
        note = f"fixed stratified subsample of the {len(_) + max_rows} rows"
    df = df.reset_index(drop=True)
    y = df.pop(info["target"]).to_numpy()
    if task == "classification":
        y = y.astype(str)
    else:
        y = y.astype(np.float64)
    return df, y, task, note


def is_text(col):
    return not (pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col))


def ordinal_encode(train, test):
    """Numeric matrices for the pooled models: text columns become ordinal codes
    of the sorted training categories (unseen at test -> NaN), as fedforest does
    per party; NaN stays NaN (missing)."""
    a = np.empty(train.shape, dtype=np.float64)
    b = np.empty(test.shape, dtype=np.float64)
    for j, c in enumerate(train.columns):
        if is_text(train[c]):
            cats = sorted(set(train[c].dropna().astype(str)))
            lookup = {v: float(i) for i, v in enumerate(cats)}
            a[:, j] = [lookup[str(v)] if pd.notna(v) else np.nan for v in train[c]]
            b[:, j] = [lookup.get(str(v), np.nan) if pd.notna(v) else np.nan for v in test[c]]
        else:
            a[:, j] = train[c].to_numpy(dtype=np.float64, na_value=np.nan)
            b[:, j] = test[c].to_numpy(dtype=np.float64, na_value=np.nan)
    return a, b


# ---------------------------------------------------------------------------
# One round
# ---------------------------------------------------------------------------
def split(X, y, task, seed):
    from sklearn.model_selection import train_test_split
    idx = np.arange(len(y))
    tr, te = train_test_split(idx, test_size=0.25, random_state=seed,
                              stratify=y if task == "classification" else None)
    rng = np.random.default_rng(seed)
    cols = list(X.columns)
    perm = [cols[i] for i in rng.permutation(len(cols))]
    half = len(perm) // 2
    return tr, te, [perm[:half], perm[half:]]


def party_frames(X, y, rows, parties, with_label):
    """One DataFrame per party, rows in the same order for every party."""
    ids = np.array([f"r{i}" for i in rows], dtype=object)
    frames = []
    for p, cols in enumerate(parties):
        f = X.iloc[rows][cols].reset_index(drop=True)
        f.insert(0, ID, ids)
        if p == 0 and with_label:
            f[LABEL] = y[rows]
        frames.append(f)
    return frames, ids


def metric(task, y_true, y_pred):
    from sklearn.metrics import accuracy_score, r2_score
    if task == "classification":
        return float(accuracy_score(y_true, np.asarray(y_pred).astype(str)))
    return float(r2_score(y_true, np.asarray(y_pred, dtype=np.float64)))


def run_federated(task, train_frames, test_frames, test_ids, seed, n_estimators, sampling, split_method,
                  workdir):
    from fedforest import run_vertical
    model_dir = os.path.join(workdir, f"model-{sampling}")
    out = os.path.join(workdir, f"pred-{sampling}.csv")
    t0 = time.perf_counter()
    summary = run_vertical("train", train_frames, task=task, label_column=LABEL, id_column=ID,
                           model_dir=model_dir, n_estimators=n_estimators, random_state=seed,
                           overwrite=True, feature_sampling=sampling, split_method=split_method)
    t1 = time.perf_counter()
    n_train = len(train_frames[0])
    if summary["n_rows"] != n_train or any(summary["rows_lost"].values()):
        raise RuntimeError(f"federated training aligned {summary['n_rows']} of {n_train} rows")
    res = run_vertical("predict", test_frames, model_dir=model_dir, id_column=ID, output=out)
    t2 = time.perf_counter()
    pred = np.asarray(res["prediction"])
    if pred.shape[0] != len(test_ids):
        raise RuntimeError(f"federated prediction has {pred.shape[0]} rows, the test set {len(test_ids)}")
    written = pd.read_csv(out, dtype={ID: str})
    if list(written[ID]) != list(test_ids):
        raise RuntimeError("federated predictions are not in the test rows' order")
    return pred, np.asarray(res["values"]), {"train_s": t1 - t0, "predict_s": t2 - t1,
                                             "rounds_per_tree": summary["rounds_per_tree"]}


def run_centralized(task, Xtr, ytr, Xte, seed, n_estimators, sampling, split_method):
    from fedforest import ForestClassifier, ForestRegressor
    cls = ForestClassifier if task == "classification" else ForestRegressor
    t0 = time.perf_counter()
    m = cls(n_estimators, random_state=seed, feature_sampling=sampling,
            split_method=split_method).fit(Xtr, ytr)
    if task == "classification":
        values = m.predict_proba(Xte)
        pred = m.classes_[np.argmax(values, axis=1)]
    else:
        values = m.predict(Xte)[:, None]
        pred = values[:, 0]
    return pred, values, time.perf_counter() - t0


def run_sklearn(task, Xtr, ytr, Xte, seed, n_estimators):
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
    cls = RandomForestClassifier if task == "classification" else RandomForestRegressor
    t0 = time.perf_counter()
    m = cls(n_estimators=n_estimators, random_state=seed, n_jobs=-1).fit(Xtr, ytr)
    return m.predict(Xte), time.perf_counter() - t0


def one_round(job):
    """All models for one (data set, seed); returns a JSON-friendly record."""
    name, seed, n_estimators, max_rows, check, split_method = (
        job[k] for k in ("dataset", "seed", "n_estimators", "max_rows", "check", "split_method"))
    t_start = time.perf_counter()
    X, y, task, _ = load(name, max_rows)
    tr, te, parties = split(X, y, task, seed)
    pooled_cols = parties[0] + parties[1]
    rec = {"dataset": name, "seed": seed, "task": task, "n_train": int(tr.size), "n_test": int(te.size),
           "party_columns": parties, "time_s": {}}
    y_te = y[te]

    # scikit-learn peer on pooled data (original column order)
    Xtr_sk, Xte_sk = ordinal_encode(X.iloc[tr], X.iloc[te])
    pred, secs = run_sklearn(task, Xtr_sk, y[tr], Xte_sk, seed, n_estimators)
    rec["sklearn"] = metric(task, y_te, pred)
    rec["time_s"]["sklearn"] = secs

    train_frames, _ = party_frames(X, y, tr, parties, True)
    test_frames, test_ids = party_frames(X, y, te, parties, False)
    Xtr_c, Xte_c = ordinal_encode(X.iloc[tr][pooled_cols], X.iloc[te][pooled_cols])
    for sampling in ("tree", "node"):
        with tempfile.TemporaryDirectory(prefix="ff-lossless-") as work:
            fpred, fvalues, t = run_federated(task, train_frames, test_frames, test_ids, seed,
                                              n_estimators, sampling, split_method, work)
        rec[f"fedforest_{sampling}"] = metric(task, y_te, fpred)
        rec["time_s"][f"federated_{sampling}"] = t
        if check:
            cpred, cvalues, secs = run_centralized(task, Xtr_c, y[tr], Xte_c, seed, n_estimators, sampling,
                                                   split_method)
            same_pred = bool(np.array_equal(np.asarray(cpred).astype(str) if task == "classification" else cpred,
                                            np.asarray(fpred).astype(str) if task == "classification" else fpred))
            max_diff = float(np.max(np.abs(cvalues - fvalues))) if cvalues.shape == fvalues.shape else float("inf")
            rec[f"centralized_{sampling}"] = metric(task, y_te, cpred)
            rec[f"identical_{sampling}"] = same_pred and max_diff == 0.0
            rec[f"max_value_diff_{sampling}"] = max_diff
            rec["time_s"][f"centralized_{sampling}"] = secs
    rec["time_s"]["round"] = time.perf_counter() - t_start
    return rec


# ---------------------------------------------------------------------------
# Statistics and tables
# ---------------------------------------------------------------------------
def norm_p(z):
    return float(math.erfc(abs(z) / math.sqrt(2.0)))


def compare(a, b):
    """Paired comparison of per-seed scores a (fedforest) and b (sklearn)."""
    from scipy import stats
    a, b = np.asarray(a, float), np.asarray(b, float)
    d = a - b
    n = d.size
    out = {"n": n, "mean_diff": float(d.mean()), "sd_diff": float(d.std(ddof=1)) if n > 1 else float("nan")}
    if n < 2:
        out.update(p_paired_t=float("nan"), z_paired=float("nan"), p_paired_z=float("nan"),
                   z_two_sample=float("nan"), p_two_sample_z=float("nan"))
        return out
    if np.all(d == 0):
        out.update(t=0.0, p_paired_t=1.0, z_paired=0.0, p_paired_z=1.0)
    else:
        t = stats.ttest_rel(a, b)
        z = d.mean() / (d.std(ddof=1) / math.sqrt(n))
        out.update(t=float(t.statistic), p_paired_t=float(t.pvalue), z_paired=float(z), p_paired_z=norm_p(z))
    se = math.sqrt(a.var(ddof=1) / n + b.var(ddof=1) / n)
    z2 = (a.mean() - b.mean()) / se if se > 0 else 0.0
    out.update(z_two_sample=float(z2), p_two_sample_z=norm_p(z2) if se > 0 else 1.0)
    return out


def ms(x):
    x = np.asarray(x, float)
    sd = x.std(ddof=1) if x.size > 1 else float("nan")
    return f"{x.mean():.4f} ± {sd:.4f}"


def fmt_p(p):
    if p is None or not np.isfinite(p):
        return "n/a"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def mark(p):
    if p is None or not np.isfinite(p):
        return ""
    return " **" if p < 0.01 else (" *" if p < 0.05 else "")


def summarise(records, names, info):
    rows = []
    for name in names:
        recs = sorted((r for r in records if r["dataset"] == name), key=lambda r: r["seed"])
        if not recs:
            continue
        sk = [r["sklearn"] for r in recs]
        row = {"dataset": name, "task": recs[0]["task"], "rows": info[name]["rows"],
               "features": info[name]["features"], "note": info[name]["note"],
               "metric": "accuracy" if recs[0]["task"] == "classification" else "R²",
               "seeds": [r["seed"] for r in recs], "sklearn": sk}
        for s in ("tree", "node"):
            ff = [r[f"fedforest_{s}"] for r in recs]
            row[f"fedforest_{s}"] = ff
            row[f"stats_{s}"] = compare(ff, sk)
            checked = [r[f"identical_{s}"] for r in recs if f"identical_{s}" in r]
            row[f"identical_{s}"] = {"checked": len(checked), "identical": int(sum(checked))}
        rows.append(row)
    return rows


def identical_text(row):
    parts = []
    for s in ("tree", "node"):
        c = row[f"identical_{s}"]
        if not c["checked"]:
            parts.append("not checked")
        elif c["identical"] == c["checked"]:
            parts.append(f"yes ({c['checked']}/{c['checked']})")
        else:
            parts.append(f"NO ({c['identical']}/{c['checked']})")
    return parts[0] if parts[0] == parts[1] else f"tree: {parts[0]}; node: {parts[1]}"


def tables(rows):
    main = ["| dataset | task | rows | features | metric | sklearn RF | fedforest (tree) | Δ tree | p (t) "
            "| fedforest (node) | Δ node | p (t) | identical to centralized |",
            "|---|---|---:|---:|---|---|---|---:|---:|---|---:|---:|---|"]
    for r in rows:
        st, sn = r["stats_tree"], r["stats_node"]
        rows_txt = str(r["rows"]) + (f" ({r['note']})" if r["note"] else "")
        main.append(
            f"| {r['dataset']} | {r['task']} | {rows_txt} | {r['features']} | {r['metric']} "
            f"| {ms(r['sklearn'])} | {ms(r['fedforest_tree'])} | {st['mean_diff']:+.4f} "
            f"| {fmt_p(st['p_paired_t'])}{mark(st['p_paired_t'])} "
            f"| {ms(r['fedforest_node'])} | {sn['mean_diff']:+.4f} "
            f"| {fmt_p(sn['p_paired_t'])}{mark(sn['p_paired_t'])} | {identical_text(r)} |")
    z = ["| dataset | tree: paired Z | p | tree: two-sample Z (paper) | p | node: paired Z | p "
         "| node: two-sample Z (paper) | p |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        cells = []
        for s in ("tree", "node"):
            st = r[f"stats_{s}"]
            cells += [f"{st['z_paired']:+.2f}", fmt_p(st["p_paired_z"]) + mark(st["p_paired_z"]),
                      f"{st['z_two_sample']:+.2f}", fmt_p(st["p_two_sample_z"]) + mark(st["p_two_sample_z"])]
        z.append(f"| {r['dataset']} | " + " | ".join(cells) + " |")
    return "\n".join(main), "\n".join(z)


def versions():
    import numba
    import scipy
    import sklearn
    import fedforest
    return {"python": platform.python_version(), "fedforest": fedforest.__version__,
            "scikit-learn": sklearn.__version__, "numpy": np.__version__, "pandas": pd.__version__,
            "scipy": scipy.__version__, "numba": numba.__version__}


def write_markdown(path, rows, args, seeds, runtime, command, vers):
    main, z = tables(rows)
    head = f"""# Federated Forest vs scikit-learn RandomForest (lossless check, paper section 5.2)

- Date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; runtime {runtime / 60:.1f} min \
({args.jobs} worker process{'es' if args.jobs > 1 else ''} on {os.cpu_count()} shared cores)
- Command: `{command}`
- Seeds: {len(seeds)} ({', '.join(map(str, seeds))}); per seed a 75/25 train/test split with that seed \
(stratified for classification), feature columns shuffled with that seed and split into two halves \
(party 1 gets ⌊p/2⌋ columns and the label, party 2 the rest).
- Forests: {args.n_estimators} trees, otherwise default parameters. **sklearn RF** = \
`RandomForest{{Classifier,Regressor}}(n_estimators={args.n_estimators}, random_state=seed, n_jobs=-1)` on the \
pooled data. **fedforest (tree)** = the vertical federated forest run through `fedforest.run_vertical` \
(real protocol, 2 parties + master, encrypted channels) with `feature_sampling="tree"` \
(one random feature subset per tree, as in the paper); **fedforest (node)** = the same with \
the default `feature_sampling="node"` (a new feature subset at every node, as scikit-learn does). Both fedforest runs use \
`split_method="{args.split_method}"`{' (the default: 255 quantile bins per feature)' if args.split_method == 'hist' else ' (exact thresholds, like scikit-learn)'}.
- Metric: accuracy (classification), R² (regression), on the 25% test rows. Cells are mean ± sd over seeds; \
Δ = mean of the paired differences fedforest − sklearn; p (t) = two-sided paired t-test \
(`scipy.stats.ttest_rel`) for zero mean difference (* p < 0.05, ** p < 0.01).
- Identical to centralized: the federated predictions (labels and the averaged leaf values / class \
probabilities) equal, bit for bit, those of `fedforest.ForestClassifier`/`ForestRegressor` fitted on the pooled \
columns (party 1's, then party 2's) with the same seed and `feature_sampling`; (k/n) = seeds checked (the first k seeds; `--check-seeds`).
- Versions: {', '.join(f'{k} {v}' for k, v in vers.items())}.

## Accuracy / R² over seeds

{main}

## Z-tests (normal approximation)

Paired Z = mean difference / (sd of differences / √n); two-sample Z (as in the paper) = \
(mean_fedforest − mean_sklearn) / √(s²_fedforest/n + s²_sklearn/n). Two-sided p-values.

{z}
"""
    with open(path, "w") as fh:
        fh.write(head)
    return head


# ---------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10, help="number of seeds (rounds) per data set, 0..N-1")
    ap.add_argument("--datasets", default=",".join(DEFAULT_DATASETS), help="comma-separated names from MANIFEST.csv")
    ap.add_argument("--n-estimators", type=int, default=100)
    ap.add_argument("--letter-rows", type=int, default=6000,
                    help="fixed stratified subsample of letter (20000 rows) to fit the time budget; 0 = all")
    ap.add_argument("--check-seeds", type=int, default=3,
                    help="compare with the centralized fedforest estimator on the first K seeds "
                         "(default 3, to fit the time budget; -1 = all)")
    ap.add_argument("--split-method", choices=("hist", "exact"), default="hist",
                    help="fedforest split search for both fedforest variants (default: the product default, hist)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (each runs whole rounds)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 2 seeds, 10 trees, ionosphere and concrete, letter capped at 1000 rows")
    ap.add_argument("--out", default=os.path.join(RESULTS, "lossless_vs_sklearn"),
                    help="output path without extension (.md and .json are written)")
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    prov = provenance.record(args)
    if args.quick:
        args.seeds = min(args.seeds, 2)
        args.n_estimators = 10
        args.letter_rows = 1000
        if args.datasets == ",".join(DEFAULT_DATASETS):
            args.datasets = "ionosphere,concrete"
        if args.out == os.path.join(RESULTS, "lossless_vs_sklearn"):
            args.out = os.path.join(tempfile.gettempdir(), "lossless_vs_sklearn_quick")
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    known = manifest()
    unknown = [n for n in names if n not in known]
    if unknown:
        ap.error(f"unknown data sets {unknown}; known: {sorted(known)}")
    seeds = list(range(args.seeds))
    check = len(seeds) if args.check_seeds < 0 else args.check_seeds
    command = " ".join(["python", os.path.relpath(os.path.abspath(__file__), ROOT)] + sys.argv[1:])

    info = {}
    for n in names:
        X, y, task, note = load(n, args.letter_rows if n == "letter" else None)
        info[n] = {"rows": len(y), "features": X.shape[1], "note": note, "task": task}
    jobs = [{"dataset": n, "seed": s, "n_estimators": args.n_estimators, "check": s < check,
             "split_method": args.split_method,
             "max_rows": args.letter_rows if n == "letter" else None}
            for n in sorted(names, key=lambda n: -COST.get(n, 2)) for s in seeds]

    t0 = time.perf_counter()
    records = []

    def done(rec):
        records.append(rec)
        extra = "".join(f" identical_{s}={rec[f'identical_{s}']}" for s in ("tree", "node") if f"identical_{s}" in rec)
        print(f"[{time.perf_counter() - t0:7.1f}s] {rec['dataset']:<13} seed {rec['seed']:>2}: "
              f"sklearn {rec['sklearn']:.4f}  ff-tree {rec['fedforest_tree']:.4f}  "
              f"ff-node {rec['fedforest_node']:.4f}{extra}  ({rec['time_s']['round']:.1f}s)", flush=True)

    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            for fut in as_completed([pool.submit(one_round, job) for job in jobs]):
                done(fut.result())
    else:
        for job in jobs:
            done(one_round(job))
    runtime = time.perf_counter() - t0

    rows = summarise(records, names, info)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    vers = versions()
    text = write_markdown(args.out + ".md", rows, args, seeds, runtime, command, vers)
    doc = {"command": command, "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "runtime_s": runtime, "seeds": seeds, "n_estimators": args.n_estimators,
           "letter_rows": args.letter_rows, "split_method": args.split_method,
           "check_seeds": check, "jobs": args.jobs, "versions": vers, "datasets": info, "provenance": prov,
           "summary": [{k: v for k, v in r.items()} for r in rows],
           "per_seed": sorted(records, key=lambda r: (names.index(r["dataset"]), r["seed"]))}
    with open(args.out + ".json", "w") as fh:
        json.dump(doc, fh, indent=1, default=lambda o: o.item() if hasattr(o, "item") else str(o))
    print()
    print(text)
    print(f"wrote {args.out}.md and {args.out}.json in {runtime:.0f}s")
    bad = [r["dataset"] for r in rows for s in ("tree", "node")
           if r[f"identical_{s}"]["identical"] != r[f"identical_{s}"]["checked"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
