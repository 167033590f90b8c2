"""FedGA-Tree against local trees, a centralized tree and the IBM DP tree (the paper's Fig. 3-4, 6-10).

Protocol (per data set and seed): a random 90/10 train/test split (stratified
for classification); the test rows are one shared test set that every client
scores; the training rows are shuffled and divided equally among N clients.
Classification tables are binned as in the paper's Appendix A (the modes'
``binning`` setting: 5 quantile bins per numeric column, fitted on each
client's training rows).  Every method runs through the public API
(``fedforest.run_horizontal``, in-process transport) with the paper's
settings (P = 20 / 40, G = 100, depths 2..15, K = 5, r = 0.8, epsilon = 1):

* ``fedga``: FedGA-Tree, one personalized tree per client;
* ``fedga_local``: each client's CART of its own cross-validated depth;
* ``fedga_central``: one CART of cross-validated depth on all training rows;
* ``ibm_tree``: the DP tree of Truex et al. with CART splits (depth 6,
  classification only).

Metrics (the paper's): Delta = mean over clients of (score_fed / score_local - 1) * 100
(Eq. 3; F1 for classification, binary or macro; MSE for regression, where a
negative Delta is better), the share of clients whose federated tree beats
their local tree, decision nodes per tree, and the normalized edit distance
between each client's final structure and its initial local structure.

Runs: the main table uses N = 20 clients (fewer where the data are small,
so that clients keep about 200 rows: concrete 5, bostonhousing 2) at full
participation, over ``--seeds`` seeds (one FedGA run per split; the paper
averages 10 runs per split).  Sweeps on satellite vary N (5, 10, 20) and the
participation (50 / 25 / 10 % of 20 clients) over ``--sweep-seeds`` seeds; a
check of binning off runs the classification sets at N = 20 over
``--binning-seeds`` seeds.  letter and shuttle are subsampled (stratified) to
8,000 rows to keep the run short.

    .venv/bin/python experiments/fedga_table.py              # the committed results
    .venv/bin/python experiments/fedga_table.py --quick      # a smoke run

Writes experiments/results/fedga_table.md, fedga_table.json,
fedga_delta_classification.png, fedga_delta_regression.png and
fedga_sweeps.png.
"""
import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

import provenance
from fedforest import run_horizontal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data")
OUT = os.path.join(ROOT, "experiments", "results")
CLASSIFICATION = ["spambase", "satellite", "letter", "shuttle", "mushroom"]
REGRESSION = ["chicago", "concrete", "bostonhousing"]
SUBSAMPLE = {"letter": 8000, "shuttle": 8000}
CLIENTS = {"concrete": 5, "bostonhousing": 2}
MAIN_CLIENTS = 20


def log(text):
    print(f"[{datetime.datetime.now():%H:%M:%S}] {text}", flush=True)


def load(name, seed):
    manifest = pd.read_csv(os.path.join(DATA, "MANIFEST.csv")).set_index("name")
    row = manifest.loc[name]
    df = pd.read_csv(os.path.join(DATA, row["file"]), keep_default_na=False, na_values=["NA", ""])
    task = "regression" if row["task"] == "regression" else "classification"
    target = row["target"]
    if name in SUBSAMPLE:
        df, _ = train_test_split(df, train_size=SUBSAMPLE[name], random_state=seed,
                                 stratify=_strata(df[target]))
    return df.reset_index(drop=True), target, task


def _strata(y):
    """Stratify by class when every class has at least 2 rows."""
    counts = y.value_counts()
    return y if counts.min() >= 2 else None


def write_clients(df, target, task, n_clients, seed, folder):
    train, test = train_test_split(df, test_size=0.1, random_state=seed,
                                   stratify=_strata(df[target]) if task == "classification" else None)
    train = train.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    test_path = os.path.join(folder, "test.csv")
    test.to_csv(test_path, index=False)
    paths = []
    for k, rows in enumerate(np.array_split(np.arange(len(train)), n_clients), start=1):
        paths.append(os.path.join(folder, f"client{k}.csv"))
        train.iloc[rows].to_csv(paths[-1], index=False)
    return paths, [test_path] * n_clients


def run(mode, paths, tests, target, task, folder, seed, **opts):
    return run_horizontal(paths, mode=mode, task=task, label_column=target, test_data=tests,
                          model_dir=os.path.join(folder, mode), random_state=seed, overwrite=True, **opts)


def per_client(summary, task):
    key = "f1" if task == "classification" else "mse"
    return np.array([summary["test_metrics"][r][key] for r in sorted(summary["test_metrics"], key=int)])


def compare(fed, local, task):
    """Delta (Eq. 3) and the share of clients improved."""
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(local > 0, (fed / local - 1.0) * 100.0, 0.0)
    better = fed > local if task == "classification" else fed < local
    return float(d.mean()), float(better.mean() * 100.0)


def one(name, seed, n_clients, participation=1.0, binning=True, generations=100, baselines=True):
    df, target, task = load(name, seed)
    clf = task == "classification"
    with tempfile.TemporaryDirectory() as folder:
        paths, tests = write_clients(df, target, task, n_clients, seed, folder)
        bin_opt = {"binning": binning} if clf else {}
        t0 = time.perf_counter()
        fed = run("fedga", paths, tests, target, task, folder, seed, participation=participation,
                  generations=generations, **bin_opt)
        t_fed = time.perf_counter() - t0
        local = run("fedga_local", paths, tests, target, task, folder, seed, **bin_opt)
        out = {"dataset": name, "seed": seed, "clients": n_clients, "participation": participation,
               "binning": binning if clf else None, "task": task, "rows_per_client": len(df) * 0.9 / n_clients,
               "depth": fed["depth"], "fedga_seconds": t_fed,
               "fed_scores": per_client(fed, task).tolist(), "local_scores": per_client(local, task).tolist(),
               "fed_nodes": float(np.mean(list(fed["decision_nodes"].values()))),
               "local_nodes": float(np.mean(list(local["decision_nodes"].values()))),
               "edit_distance": float(np.mean(list(fed["edit_distance"].values())))}
        out["delta"], out["improved"] = compare(per_client(fed, task), per_client(local, task), task)
        if baselines:
            cen = run("fedga_central", paths, tests, target, task, folder, seed, **bin_opt)
            out["central_delta"], _ = compare(per_client(cen, task), per_client(local, task), task)
            out["central_score"] = float(per_client(cen, task).mean())
            if clf:
                ibm = run("ibm_tree", paths, tests, target, task, folder, seed, participation=participation)
                out["ibm_delta"], out["ibm_improved"] = compare(per_client(ibm, task), per_client(local, task), task)
                out["ibm_nodes"] = float(np.mean(list(ibm["decision_nodes"].values())))
        elif clf and participation < 1.0:
            ibm = run("ibm_tree", paths, tests, target, task, folder, seed, participation=participation)
            out["ibm_delta"], out["ibm_improved"] = compare(per_client(ibm, task), per_client(local, task), task)
    log(f"{name} seed {seed} N={n_clients} c={participation:.0%} binning={binning}: Delta {out['delta']:+.2f}% "
        f"({out['improved']:.0f}% improved), depth {out['depth']}, fedga {t_fed:.1f}s")
    return out


def mean_sd(values):
    v = np.array([x for x in values if x is not None], dtype=float)
    if v.size == 0:
        return "—"
    return f"{v.mean():+.2f} ± {v.std():.2f}" if v.size > 1 else f"{v.mean():+.2f}"


def plain(values, fmt="{:.1f}"):
    v = np.array([x for x in values if x is not None], dtype=float)
    return fmt.format(v.mean()) if v.size else "—"


def boxplot(rows, names, path, title, ylabel, ibm=False):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 4))
    data = [[r["delta"] for r in rows if r["dataset"] == n] for n in names]
    pos = np.arange(len(names)) * (3 if ibm else 1)
    b = ax.boxplot(data, positions=pos, widths=0.8, patch_artist=True)
    for patch in b["boxes"]:
        patch.set_facecolor("#8fb9e0")
    handles = [b["boxes"][0]]
    labels = ["FedGA"]
    if ibm:
        data2 = [[r["ibm_delta"] for r in rows if r["dataset"] == n and "ibm_delta" in r] for n in names]
        b2 = ax.boxplot(data2, positions=pos + 1, widths=0.8, patch_artist=True)
        for patch in b2["boxes"]:
            patch.set_facecolor("#f2a477")
        handles.append(b2["boxes"][0])
        labels.append("IBM tree")
        ax.set_xticks(pos + 0.5)
    else:
        ax.set_xticks(pos)
    ax.set_xticklabels(names)
    ax.axhline(0, color="grey", lw=0.8, ls="--")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(handles, labels, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def sweep_plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    nsw = [r for r in rows if r["sweep"] == "clients"]
    ns = sorted({r["clients"] for r in nsw})
    axes[0].boxplot([[r["delta"] for r in nsw if r["clients"] == n] for n in ns], positions=range(len(ns)))
    axes[0].set_xticks(range(len(ns)))
    axes[0].set_xticklabels([f"N={n}" for n in ns])
    axes[0].set_title("satellite: Delta F1 (%) vs clients, c = 100 %")
    psw = [r for r in rows if r["sweep"] == "participation"]
    cs = sorted({r["participation"] for r in psw}, reverse=True)
    pos = np.arange(len(cs)) * 3
    b1 = axes[1].boxplot([[r["delta"] for r in psw if r["participation"] == c] for c in cs], positions=pos,
                         patch_artist=True)
    b2 = axes[1].boxplot([[r["ibm_delta"] for r in psw if r["participation"] == c and "ibm_delta" in r]
                          for c in cs], positions=pos + 1, patch_artist=True)
    for b, colour in ((b1, "#8fb9e0"), (b2, "#f2a477")):
        for patch in b["boxes"]:
            patch.set_facecolor(colour)
    axes[1].set_xticks(pos + 0.5)
    axes[1].set_xticklabels([f"c={c:.0%}" for c in cs])
    axes[1].legend([b1["boxes"][0], b2["boxes"][0]], ["FedGA", "IBM tree"])
    axes[1].set_title("satellite, N = 20: Delta F1 (%) vs participation")
    for ax in axes:
        ax.axhline(0, color="grey", lw=0.8, ls="--")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--sweep-seeds", type=int, default=3)
    ap.add_argument("--binning-seeds", type=int, default=2)
    ap.add_argument("--generations", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="1 seed, 10 generations, 2 data sets, no sweeps")
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    prov = provenance.record(args)
    clf_sets, reg_sets = CLASSIFICATION, REGRESSION
    if args.quick:
        args.seeds, args.sweep_seeds, args.binning_seeds, args.generations = 1, 0, 0, 10
        clf_sets, reg_sets = ["satellite"], ["concrete"]
    t0 = time.perf_counter()
    commit, dirty = prov["git_commit"], prov["fedforest_uncommitted_changes"]
    G = args.generations
    main_rows = [one(n, s, CLIENTS.get(n, MAIN_CLIENTS), generations=G)
                 for n in clf_sets + reg_sets for s in range(args.seeds)]
    sweeps = []
    for s in range(args.sweep_seeds):
        for n in (5, 10):
            sweeps.append(dict(one("satellite", s, n, generations=G, baselines=False), sweep="clients"))
        for c in (0.5, 0.25, 0.1):
            sweeps.append(dict(one("satellite", s, 20, participation=c, generations=G, baselines=False),
                               sweep="participation"))
    for r in main_rows:
        if r["dataset"] == "satellite" and r["seed"] < args.sweep_seeds:
            sweeps.append(dict(r, sweep="clients"))
            sweeps.append(dict(r, sweep="participation"))
    unbinned = [one(n, s, MAIN_CLIENTS, binning=False, generations=G, baselines=False)
                for n in clf_sets for s in range(args.binning_seeds) if n != "mushroom"]
    seconds = time.perf_counter() - t0

    os.makedirs(OUT, exist_ok=True)
    meta = {"git_commit": commit, "fedforest_uncommitted_changes": dirty, "seconds": seconds,
            "seeds": args.seeds, "sweep_seeds": args.sweep_seeds, "binning_seeds": args.binning_seeds,
            "generations": G, "python": platform.python_version(),
            "command": "python experiments/fedga_table.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    with open(os.path.join(OUT, "fedga_table.json"), "w") as fh:
        json.dump({"meta": meta, "main": main_rows, "sweeps": sweeps, "unbinned": unbinned}, fh, indent=1)

    L = ["# FedGA-Tree against local, centralized and IBM trees", "",
         f"Produced by `{meta['command'].strip()}` at commit `{commit}`"
         f"{' (uncommitted changes in fedforest/)' if dirty else ''} in {seconds / 60:.1f} min on "
         f"{platform.node() or 'this machine'} (2 shared cores).", "",
         "Protocol: 90/10 split per seed (stratified), a shared test set, training rows divided equally among "
         "N clients; one FedGA run per split (the paper averages 10 runs per split); paper settings "
         f"(P = 20 / 40, G = {G}, depths 2..15, K = 5, r = 0.8, epsilon = 1); classification columns binned "
         "(Appendix A, fitted per client). letter and shuttle subsampled to 8,000 rows. "
         f"Main table: N = {MAIN_CLIENTS} clients (concrete 5, bostonhousing 2), full participation, "
         f"{args.seeds} seeds. Reduced from the full grid (N = 5, 10, 20 x participation 100 / 50 / 25 / 10 % "
         "on every data set) to fit the time budget: the N and participation "
         f"sweeps run on satellite only, over {args.sweep_seeds} seeds; binning off is checked over "
         f"{args.binning_seeds} seed{'s' if args.binning_seeds != 1 else ''}.", "",
         "Delta = mean over clients of (fed / local - 1) x 100 (Eq. 3): F1 for classification (higher is "
         "better, Delta > 0 good), MSE for regression (Delta < 0 good). Improved = share of clients whose "
         "FedGA tree beats their local tree. Mean ± sd over seeds.", "",
         "## Main table", "",
         "| data set | task | N | rows/client | depth | FedGA Delta % | improved % | IBM Delta % | IBM improved % "
         "| central Delta % | nodes FedGA | nodes local | nodes IBM | edit distance |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in clf_sets + reg_sets:
        rs = [r for r in main_rows if r["dataset"] == n]
        L.append(f"| {n} | {rs[0]['task'][:5]} | {rs[0]['clients']} | {rs[0]['rows_per_client']:.0f} | "
                 f"{plain([r['depth'] for r in rs])} | {mean_sd([r['delta'] for r in rs])} | "
                 f"{plain([r['improved'] for r in rs], '{:.0f}')} | {mean_sd([r.get('ibm_delta') for r in rs])} | "
                 f"{plain([r.get('ibm_improved') for r in rs], '{:.0f}')} | "
                 f"{mean_sd([r.get('central_delta') for r in rs])} | {plain([r['fed_nodes'] for r in rs])} | "
                 f"{plain([r['local_nodes'] for r in rs])} | {plain([r.get('ibm_nodes') for r in rs])} | "
                 f"{plain([r['edit_distance'] for r in rs], '{:.2f}')} |")
    clf_rows = [r for r in main_rows if r["task"] == "classification"]
    reg_rows = [r for r in main_rows if r["task"] == "regression"]
    summary_lines = []
    if clf_rows:
        summary_lines.append(
            "Classification, averaged over data sets and seeds: FedGA Delta "
            f"{np.mean([r['delta'] for r in clf_rows]):+.2f} % "
            f"F1 with {np.mean([r['improved'] for r in clf_rows]):.0f} % of clients improved; IBM tree Delta "
            f"{np.mean([r['ibm_delta'] for r in clf_rows]):+.2f} % with "
            f"{np.mean([r['ibm_improved'] for r in clf_rows]):.0f} % improved (paper: +5.58 % / 75 % and "
            "-2.58 % / 31 %).")
    if reg_rows:
        summary_lines.append(
            f"Regression: FedGA Delta {np.mean([r['delta'] for r in reg_rows]):+.2f} % MSE with "
            f"{np.mean([r['improved'] for r in reg_rows]):.0f} % of clients improved.")
    L += [""] + summary_lines
    if sweeps:
        L += ["", "## Sweeps on satellite (Fig. 6-7, 10)", "",
              "| sweep | N | participation | seeds | FedGA Delta % | improved % | IBM Delta % |",
              "|---|---|---|---|---|---|---|"]
        for kind, keyf in (("clients", "clients"), ("participation", "participation")):
            rs = [r for r in sweeps if r["sweep"] == kind]
            for v in sorted({r[keyf] for r in rs}, reverse=(kind == "participation")):
                g = [r for r in rs if r[keyf] == v]
                L.append(f"| {kind} | {g[0]['clients']} | {g[0]['participation']:.0%} | {len(g)} | "
                         f"{mean_sd([r['delta'] for r in g])} | {plain([r['improved'] for r in g], '{:.0f}')} | "
                         f"{mean_sd([r.get('ibm_delta') for r in g])} |")
    if unbinned:
        L += ["", "## Binning (Appendix A) on or off, N = 20", "",
              "| data set | seeds | Delta % binned | Delta % not binned | mean local F1 binned "
              "| mean local F1 not binned "
              "| mean FedGA F1 binned | mean FedGA F1 not binned |", "|---|---|---|---|---|---|---|---|"]
        for n in sorted({r["dataset"] for r in unbinned}, key=clf_sets.index):
            b = [r for r in main_rows if r["dataset"] == n and r["seed"] < args.binning_seeds]
            u = [r for r in unbinned if r["dataset"] == n]
            L.append(f"| {n} | {len(u)} | {mean_sd([r['delta'] for r in b])} | {mean_sd([r['delta'] for r in u])} | "
                     f"{plain([np.mean(r['local_scores']) for r in b], '{:.4f}')} | "
                     f"{plain([np.mean(r['local_scores']) for r in u], '{:.4f}')} | "
                     f"{plain([np.mean(r['fed_scores']) for r in b], '{:.4f}')} | "
                     f"{plain([np.mean(r['fed_scores']) for r in u], '{:.4f}')} |")
    L += ["", "Plots: `fedga_delta_classification.png`, `fedga_delta_regression.png` (box plots of Delta per "
          "data set over seeds, as the paper's Fig. 3 and Fig. 8), `fedga_sweeps.png` (Fig. 6-7)."]
    with open(os.path.join(OUT, "fedga_table.md"), "w") as fh:
        fh.write("\n".join(L) + "\n")
    if clf_rows:
        boxplot(clf_rows, clf_sets, os.path.join(OUT, "fedga_delta_classification.png"),
                f"Delta F1 (%) of federated vs local trees, N = {MAIN_CLIENTS}, c = 100 %", "Delta F1 (%)", ibm=True)
    if reg_rows:
        boxplot(reg_rows, reg_sets, os.path.join(OUT, "fedga_delta_regression.png"),
                "Delta MSE (%) of FedGA vs local trees (lower is better)", "Delta MSE (%)")
    if sweeps:
        sweep_plot(sweeps, os.path.join(OUT, "fedga_sweeps.png"))
    log(f"done in {seconds / 60:.1f} min; wrote {os.path.join(OUT, 'fedga_table.md')}")


if __name__ == "__main__":
    raise SystemExit(main())
