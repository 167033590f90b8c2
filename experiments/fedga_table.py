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
  classification only), its Laplace noise scaled to the real sensitivity of
  a level's counts (one count per column: (depth + 1) x columns / epsilon).

Binary F1 is the F1 of the job's positive class: by default the minority
class of the pooled training labels (recorded per run).

Metrics (the paper's): Delta = mean over clients of (score_fed / score_local - 1) * 100
(Eq. 3; F1 for classification, binary or macro; MSE for regression, where a
negative Delta is better), the share of clients whose federated tree beats
their local tree, decision nodes per tree, and the normalized edit distance
between each client's final structure and its initial local structure.  A
client whose local score is 0 (local F1 = 0) has no Delta: it is counted and
listed, and left out of the mean (the share of clients improved still counts
it).  Beside Delta, a mean of per-client ratios, every table gives the
change of the mean score (mean FedGA - mean local over all clients, in F1 or
MSE) and flags the seeds where Delta and that change have opposite signs
(clients with a tiny local F1 can carry Delta up while the mean F1 falls);
the figures are those of the fedga summary's ``vs_local``
(:mod:`fedforest.horizontal.fedga.compare`).  The local trees are the ones
fedga reports beside its own (the trees of mode ``fedga_local``, tested).  Binary, multiclass and regression sets are reported and averaged
separately, and each group's mean is broken down (per data set, median and
spread of the clients' Delta, the mean without the most extreme clients) to
show what drives it.

Runs: the main table uses N = 20 clients at full participation on the sets
of at least 4,000 rows (the paper's regime: every client keeps about 200
rows or more): binary spambase and mushroom, multiclass satellite, letter
and shuttle, regression chicago; the small regression sets (concrete,
bostonhousing) run with fewer clients (5 and 2) and are reported apart,
outside the paper's regime.  Over ``--seeds`` seeds (one FedGA run per split;
the paper averages 10 runs per split).  Sweeps on satellite vary N (5, 10,
20) and the participation (50 / 25 / 10 % of 20 clients) over
``--sweep-seeds`` seeds; a check of binning off runs the classification
sets at N = 20 over ``--binning-seeds`` seeds.  letter and shuttle are
subsampled (stratified) to 8,000 rows to keep the run short.

    .venv/bin/python experiments/fedga_table.py              # the committed results
    .venv/bin/python experiments/fedga_table.py --smoke      # a tiny run into a temporary folder

Writes experiments/results/fedga_table.md, fedga_table.json,
fedga_delta_classification.png, fedga_delta_regression.png and
fedga_sweeps.png (``--smoke``: the same files in a temporary folder, or
``--out``).
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
BINARY = ["spambase", "mushroom"]
MULTICLASS = ["satellite", "letter", "shuttle"]
REGRESSION = ["chicago"]
SMALL_REGRESSION = ["concrete", "bostonhousing"]
KINDS = {**{n: "binary" for n in BINARY}, **{n: "multiclass" for n in MULTICLASS},
         **{n: "regression" for n in REGRESSION + SMALL_REGRESSION}}
SUBSAMPLE = {"letter": 8000, "shuttle": 8000}
CLIENTS = {"concrete": 5, "bostonhousing": 2}
MAIN_CLIENTS = 20
MIN_ROWS = 4000              # the paper's regime at N = 20
IBM_DEPTH = 6
TRIM = 0.05                  # share of clients with the largest |Delta| left out of the trimmed mean

# --smoke: tiny settings on small samples, output in a temporary folder
SMOKE_SETS = {"binary": ["spambase"], "multiclass": ["satellite"], "regression": ["chicago"],
              "small_regression": []}
SMOKE_ROWS, SMOKE_CLIENTS, SMOKE_DEPTHS = 800, 4, {"min_depth": 2, "max_depth": 4, "cv_folds": 3}


def log(text):
    print(f"[{datetime.datetime.now():%H:%M:%S}] {text}", flush=True)


def load(name, seed, subsample=None):
    manifest = pd.read_csv(os.path.join(DATA, "MANIFEST.csv")).set_index("name")
    row = manifest.loc[name]
    df = pd.read_csv(os.path.join(DATA, row["file"]), keep_default_na=False, na_values=["NA", ""])
    task = "regression" if row["task"] == "regression" else "classification"
    target = row["target"]
    n = subsample.get(name) if subsample else None
    if n and n < len(df):
        df, _ = train_test_split(df, train_size=n, random_state=seed,
                                 stratify=_strata(df[target]) if task == "classification" else None)
    return df.reset_index(drop=True), target, task, row["task"]


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


def per_client(summary, task, part="test_metrics"):
    key = "f1" if task == "classification" else "mse"
    return np.array([summary[part][r][key] for r in sorted(summary[part], key=int)])


def compare(fed, local, task):
    """Eq. 3 per client and its summary (the figures of the fedga summary's
    ``vs_local``): ``delta`` (mean over the clients whose local score is
    positive; None when there is none), ``improved`` (% of all clients whose
    federated score is better), ``client_delta`` (per client, None where the
    local score is 0), ``no_delta`` (1-based clients whose local score is 0:
    Delta is undefined for them), ``mean_local``, ``mean_fed``, ``mean_change``
    (mean fed - mean local over all clients), ``mean_change_percent`` (the same
    as a share of the local mean) and ``disagree`` (Delta and the mean change
    of opposite signs)."""
    from fedforest.horizontal.fedga.compare import against_local
    c = against_local(fed, local, task == "classification")
    return {"delta": c["delta_percent"], "improved": c["improved_percent"],
            "client_delta": list(c["client_delta_percent"].values()), "no_delta": c["clients_without_delta"],
            "mean_local": c["mean_local"], "mean_fed": c["mean_fedga"], "mean_change": c["mean_change"],
            "mean_change_percent": c["mean_change_percent"], "disagree": c["delta_and_mean_disagree"]}


def one(name, seed, n_clients, participation=1.0, binning=True, generations=100, baselines=True,
        depths=None, subsample=None, ibm_depth=IBM_DEPTH):
    df, target, task, kind = load(name, seed, subsample)
    clf = task == "classification"
    depths = depths or {}
    with tempfile.TemporaryDirectory() as folder:
        paths, tests = write_clients(df, target, task, n_clients, seed, folder)
        bin_opt = {"binning": binning} if clf else {}
        t0 = time.perf_counter()
        fed = run("fedga", paths, tests, target, task, folder, seed, participation=participation,
                  generations=generations, **bin_opt, **depths)
        t_fed = time.perf_counter() - t0
        # each client's local tree (mode fedga_local's), scored by the fedga job beside its own
        fed_s, local_s = per_client(fed, task), per_client(fed, task, "local_test_metrics")
        c = compare(fed_s, local_s, task)
        v = fed["vs_local"]
        assert np.isclose(v["mean_change"], c["mean_change"]) and v["delta_and_mean_disagree"] == c["disagree"]
        out = {"dataset": name, "kind": kind, "seed": seed, "clients": n_clients, "participation": participation,
               "binning": binning if clf else None, "task": task, "rows": len(df),
               "rows_per_client": len(df) * 0.9 / n_clients, "positive_class": fed.get("positive_class"),
               "depth": fed["depth"], "fedga_seconds": t_fed,
               "fed_scores": fed_s.tolist(), "local_scores": local_s.tolist(),
               "fed_nodes": float(np.mean(list(fed["decision_nodes"].values()))),
               "local_nodes": float(np.mean(list(fed["local_decision_nodes"].values()))),
               "edit_distance": float(np.mean(list(fed["edit_distance"].values()))),
               "delta": c["delta"], "improved": c["improved"], "client_delta": c["client_delta"],
               "no_delta": c["no_delta"], "mean_local": c["mean_local"], "mean_fed": c["mean_fed"],
               "mean_change": c["mean_change"], "mean_change_percent": c["mean_change_percent"],
               "disagree": c["disagree"]}
        if baselines:
            cen = run("fedga_central", paths, tests, target, task, folder, seed, **bin_opt, **depths)
            out["central_delta"] = compare(per_client(cen, task), local_s, task)["delta"]
            out["central_score"] = float(per_client(cen, task).mean())
        if clf and (baselines or participation < 1.0):
            ibm = run("ibm_tree", paths, tests, target, task, folder, seed, participation=participation,
                      max_depth=ibm_depth)
            ci = compare(per_client(ibm, task), local_s, task)
            out["ibm_delta"], out["ibm_improved"] = ci["delta"], ci["improved"]
            out["ibm_noise_scale"] = ibm["noise_scale"]
            if baselines:
                out["ibm_nodes"] = float(np.mean(list(ibm["decision_nodes"].values())))
    shown = "—" if out["delta"] is None else f"{out['delta']:+.2f}%"
    log(f"{name} seed {seed} N={n_clients} c={participation:.0%} binning={binning}: Delta {shown}, mean change "
        f"{out['mean_change']:+.4g}{' (signs disagree)' if out['disagree'] else ''} "
        f"({out['improved']:.0f}% improved), depth {out['depth']}, fedga {t_fed:.1f}s"
        + (f"; {len(out['no_delta'])} client(s) with local F1 = 0: {out['no_delta']}" if out["no_delta"] else ""))
    return out


def rescored(row):
    """A row of an earlier run's JSON with the figures derived from its
    per-client scores recomputed (``--from-json``)."""
    c = compare(row["fed_scores"], row["local_scores"], row["task"])
    return dict(row, **{k: c[k] for k in ("delta", "improved", "client_delta", "no_delta", "mean_local",
                                          "mean_fed", "mean_change", "mean_change_percent", "disagree")})


def mean_sd(values):
    v = np.array([x for x in values if x is not None], dtype=float)
    if v.size == 0:
        return "—"
    return f"{v.mean():+.2f} ± {v.std():.2f}" if v.size > 1 else f"{v.mean():+.2f}"


def plain(values, fmt="{:.1f}"):
    v = np.array([x for x in values if x is not None], dtype=float)
    return fmt.format(v.mean()) if v.size else "—"


def no_delta_text(rows):
    """Clients without Delta over the seeds of one data set: ``"3 (seed 0: 4, 17; seed 2: 9)"`` or ``"0"``."""
    parts = [f"seed {r['seed']}: {', '.join(map(str, r['no_delta']))}" for r in rows if r["no_delta"]]
    n = sum(len(r["no_delta"]) for r in rows)
    return f"{n} ({'; '.join(parts)})" if n else "0"


def client_deltas(rows):
    return np.array([d for r in rows for d in r["client_delta"] if d is not None], dtype=float)


def drivers(rows, names, what):
    """Lines saying what drives a group's mean Delta: per data set, the clients'
    median and spread, the trimmed mean and the clients left out."""
    if not rows:
        return []
    per_set = {n: np.mean([r["delta"] for r in rows if r["dataset"] == n and r["delta"] is not None])
               for n in names if any(r["dataset"] == n and r["delta"] is not None for r in rows)}
    if not per_set:
        return [f"{what}: no client has a local score above 0, so there is no Delta."]
    mean = float(np.mean(list(per_set.values())))
    d = client_deltas(rows)
    lines = [f"{what}: mean Delta {mean:+.2f} % (mean over data sets of the mean over seeds and clients): "
             + ", ".join(f"{n} {v:+.2f}" for n, v in per_set.items()) + "."]
    if len(per_set) > 1:
        top = max(per_set, key=lambda n: abs(per_set[n]))
        rest = [v for n, v in per_set.items() if n != top]
        lines.append(f"The largest share comes from {top} ({per_set[top] / len(per_set):+.2f} of the "
                     f"{mean:+.2f}); without it the mean is {np.mean(rest):+.2f} %.")
    if d.size:
        k = int(np.floor(TRIM * d.size))
        order = np.argsort(np.abs(d))
        trimmed = d[order[:d.size - k]] if k else d
        text = (f"Over all {d.size} client runs: median {np.median(d):+.2f} %, 10th-90th percentile "
                f"{np.percentile(d, 10):+.2f} to {np.percentile(d, 90):+.2f} %, largest |Delta| "
                f"{d[order[-1]]:+.2f} %, pooled mean {d.mean():+.2f} %")
        if k:
            text += (f"; without the {k} client run{'s' if k > 1 else ''} of largest |Delta| ({TRIM:.0%}) "
                     f"the pooled mean is {trimmed.mean():+.2f} %")
        lines.append(text + ".")
    dis = [r for r in rows if r.get("disagree")]
    if dis:
        lines.append("Delta and the change of the mean disagree in sign on "
                     + "; ".join(f"{r['dataset']} seed {r['seed']} (Delta {r['delta']:+.2f} %, mean "
                                 f"{_score(r['mean_local'], r['task'] == 'classification')} → "
                                 f"{_score(r['mean_fed'], r['task'] == 'classification')})" for r in dis)
                     + ": there Delta is carried by a few clients' large ratios, and the mean says otherwise.")
    n0 = sum(len(r["no_delta"]) for r in rows)
    if n0:
        lines.append(f"{n0} client run(s) had a local F1 of 0 and no Delta (listed in the table); they are "
                     "not in these means.")
    return lines


def boxplot(rows, names, path, title, ylabel, ibm=False):
    """Left: Delta per data set over seeds (FedGA, and the IBM tree); right:
    FedGA's change of the mean score (F1 for classification; for regression,
    % of the local mean MSE, the sets' MSE having different scales)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(2.6 * len(names) + 4, 4),
                                  gridspec_kw={"width_ratios": [1.6, 1]})
    clf = rows[0]["task"] == "classification"
    key = "mean_change" if clf else "mean_change_percent"
    ax2.boxplot([[r[key] for r in rows if r["dataset"] == n and r.get(key) is not None] for n in names],
                positions=range(len(names)))
    ax2.set_xticks(range(len(names)))
    ax2.set_xticklabels(names)
    ax2.axhline(0, color="grey", lw=0.8, ls="--")
    ax2.set_ylabel("mean F1, FedGA - local" if clf else "mean MSE, FedGA vs local (%)")
    ax2.set_title("change of the clients' mean F1" if clf else "change of the clients' mean MSE")
    data = [[r["delta"] for r in rows if r["dataset"] == n and r["delta"] is not None] for n in names]
    pos = np.arange(len(names)) * (3 if ibm else 1)
    b = ax.boxplot(data, positions=pos, widths=0.8, patch_artist=True)
    for patch in b["boxes"]:
        patch.set_facecolor("#8fb9e0")
    handles = [b["boxes"][0]]
    labels = ["FedGA"]
    if ibm:
        data2 = [[r["ibm_delta"] for r in rows if r["dataset"] == n and r.get("ibm_delta") is not None]
                 for n in names]
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
    axes[0].boxplot([[r["delta"] for r in nsw if r["clients"] == n and r["delta"] is not None] for n in ns],
                    positions=range(len(ns)))
    axes[0].set_xticks(range(len(ns)))
    axes[0].set_xticklabels([f"N={n}" for n in ns])
    axes[0].set_title("satellite: Delta F1 (%) vs clients, c = 100 %")
    psw = [r for r in rows if r["sweep"] == "participation"]
    cs = sorted({r["participation"] for r in psw}, reverse=True)
    pos = np.arange(len(cs)) * 3
    b1 = axes[1].boxplot([[r["delta"] for r in psw if r["participation"] == c and r["delta"] is not None]
                          for c in cs], positions=pos, patch_artist=True)
    b2 = axes[1].boxplot([[r["ibm_delta"] for r in psw if r["participation"] == c and r.get("ibm_delta") is not None]
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


HEADER = ("| data set | N | rows | rows/client | positive class | depth | FedGA Delta % (Eq. 3) "
          "| mean {m} local → FedGA | mean {m} change (% of local mean) | improved % | Delta and mean change "
          "disagree | clients without Delta (local score 0) | IBM Delta % | IBM improved % | central Delta % "
          "| nodes FedGA | nodes local | nodes IBM | edit distance |")


def _score(v, clf):
    return f"{v:.4f}" if clf else f"{v:.4g}"


def means_text(rows):
    """Mean over seeds of the clients' mean local and FedGA scores: ``"0.8123 → 0.8246"``."""
    clf = rows[0]["task"] == "classification"
    return (f"{_score(np.mean([r['mean_local'] for r in rows]), clf)} → "
            f"{_score(np.mean([r['mean_fed'] for r in rows]), clf)}")


def change_text(rows):
    """The change of the mean score (FedGA - local), mean ± sd over seeds, and
    in brackets the mean over seeds of the change as a share of the local mean."""
    clf = rows[0]["task"] == "classification"
    v = np.array([r["mean_change"] for r in rows], dtype=float)
    text = f"{v.mean():+.4f}" if clf else f"{v.mean():+.4g}"
    if v.size > 1:
        text += f" ± {v.std():.4f}" if clf else f" ± {v.std():.3g}"
    pct = [r["mean_change_percent"] for r in rows if r.get("mean_change_percent") is not None]
    return text + (f" ({np.mean(pct):+.1f} %)" if pct else "")


def disagree_text(rows):
    """The seeds whose Delta and mean change have opposite signs: ``"seed 0, 3 (2 of 5)"`` or ``"none"``."""
    seeds = [str(r["seed"]) for r in rows if r.get("disagree")]
    return f"seed {', '.join(seeds)} ({len(seeds)} of {len(rows)})" if seeds else "none"


def table_rows(rows, names):
    clf = bool(rows) and rows[0]["task"] == "classification"
    header = HEADER.format(m="F1" if clf else "MSE")
    out = [header, "|" + "---|" * (header.count("|") - 1)]
    for n in names:
        rs = [r for r in rows if r["dataset"] == n]
        if not rs:
            continue
        pos = sorted({str(r["positive_class"]) for r in rs if r.get("positive_class") is not None})
        out.append(f"| {n} | {rs[0]['clients']} | {rs[0]['rows']} | {rs[0]['rows_per_client']:.0f} | "
                   f"{', '.join(pos) or '—'} | {plain([r['depth'] for r in rs])} | "
                   f"{mean_sd([r['delta'] for r in rs])} | {means_text(rs)} | {change_text(rs)} | "
                   f"{plain([r['improved'] for r in rs], '{:.0f}')} | {disagree_text(rs)} | "
                   f"{no_delta_text(rs)} | {mean_sd([r.get('ibm_delta') for r in rs])} | "
                   f"{plain([r.get('ibm_improved') for r in rs], '{:.0f}')} | "
                   f"{mean_sd([r.get('central_delta') for r in rs])} | {plain([r['fed_nodes'] for r in rs])} | "
                   f"{plain([r['local_nodes'] for r in rs])} | {plain([r.get('ibm_nodes') for r in rs])} | "
                   f"{plain([r['edit_distance'] for r in rs], '{:.2f}')} |")
    return out


def group_line(rows, what, paper=None):
    """One line of a group's averages (data sets and seeds pooled)."""
    if not rows:
        return []
    clf = rows[0]["task"] == "classification"
    pct = [r["mean_change_percent"] for r in rows if r.get("mean_change_percent") is not None]
    change = (f"mean F1 change {np.mean([r['mean_change'] for r in rows]):+.4f} ({np.mean(pct):+.1f} % of the "
              "local mean)" if clf else f"mean MSE change {np.mean(pct):+.1f} % of the local mean")
    n_dis = sum(bool(r.get("disagree")) for r in rows)
    text = (f"{what}, averaged over data sets and seeds: FedGA Delta {mean_sd_pooled([r['delta'] for r in rows])}, "
            f"{change}, {np.mean([r['improved'] for r in rows]):.0f} % of clients improved; Delta and the mean "
            f"change disagree in sign on {n_dis} of {len(rows)} runs")
    if any(r.get("ibm_delta") is not None for r in rows):
        text += (f"; IBM tree Delta {mean_sd_pooled([r.get('ibm_delta') for r in rows])} with "
                 f"{plain([r.get('ibm_improved') for r in rows], '{:.0f}')} % improved")
    return [text + (f" ({paper})" if paper else "") + "."]


def mean_sd_pooled(values):
    v = np.array([x for x in values if x is not None], dtype=float)
    return f"{v.mean():+.2f} %" if v.size else "—"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--sweep-seeds", type=int, default=3)
    ap.add_argument("--binning-seeds", type=int, default=2)
    ap.add_argument("--generations", type=int, default=100)
    ap.add_argument("--smoke", "--quick", dest="smoke", action="store_true",
                    help=f"a tiny run of every step: 1 seed, 2 generations, depths 2..4, {SMOKE_CLIENTS} clients "
                         f"on {SMOKE_ROWS}-row samples of one binary, one multiclass and one regression set, "
                         "results in a temporary folder (or --out)")
    ap.add_argument("--out", default=None, help=f"folder of the results (default {os.path.relpath(OUT, ROOT)}; "
                                                "--smoke: a new temporary folder)")
    ap.add_argument("--from-json", default=None, metavar="PATH",
                    help="no training: re-render the tables and plots from the per-client scores (fed_scores, "
                         "local_scores) of an earlier run's fedga_table.json; every figure derived from them "
                         "(Delta, mean change, improved, disagreement) is recomputed, the rest is kept")
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    sets = {"binary": BINARY, "multiclass": MULTICLASS, "regression": REGRESSION,
            "small_regression": SMALL_REGRESSION}
    n_main, clients_of, depths, subsample, ibm_depth = MAIN_CLIENTS, dict(CLIENTS), None, SUBSAMPLE, IBM_DEPTH
    sweep_n, sweep_c = (5, 10), (0.5, 0.25, 0.1)
    out_dir = args.out or OUT
    if args.smoke:
        args.seeds, args.sweep_seeds, args.binning_seeds, args.generations = 1, 1, 1, 2
        args.allow_dirty = True                 # the results go to a temporary folder
        sets, n_main, clients_of, depths, ibm_depth = SMOKE_SETS, SMOKE_CLIENTS, {}, SMOKE_DEPTHS, 3
        subsample = {n: SMOKE_ROWS for group in SMOKE_SETS.values() for n in group}
        sweep_n, sweep_c = (2,), (0.5,)
        out_dir = args.out or tempfile.mkdtemp(prefix="fedga_table_smoke_")
    prov = provenance.record(args)
    clf_sets = sets["binary"] + sets["multiclass"]
    reg_sets = sets["regression"] + sets["small_regression"]
    t0 = time.perf_counter()
    commit, dirty = prov["git_commit"], prov["fedforest_uncommitted_changes"]
    G = args.generations
    common = dict(generations=G, depths=depths, subsample=subsample, ibm_depth=ibm_depth)
    source = None
    if args.from_json:
        with open(args.from_json) as fh:
            source = json.load(fh)
        src = source["meta"]
        args.seeds, args.sweep_seeds, args.binning_seeds = src["seeds"], src["sweep_seeds"], src["binning_seeds"]
        G, n_main = src["generations"], src["clients"]
    main_rows = ([rescored(r) for r in source["main"]] if source else
                 [one(n, s, clients_of.get(n, n_main), **common) for n in clf_sets + reg_sets
                  for s in range(args.seeds)])
    sweeps = [rescored(r) for r in source["sweeps"] if r["participation"] < 1 or r["clients"] != n_main] \
        if source else []
    sweep_set = "satellite" if "satellite" in clf_sets else None
    for s in range(args.sweep_seeds if sweep_set and not source else 0):
        for n in sweep_n:
            sweeps.append(dict(one(sweep_set, s, n, baselines=False, **common), sweep="clients"))
        for c in sweep_c:
            sweeps.append(dict(one(sweep_set, s, n_main, participation=c, baselines=False, **common),
                               sweep="participation"))
    for r in main_rows:
        if r["dataset"] == sweep_set and r["seed"] < args.sweep_seeds:
            sweeps.append(dict(r, sweep="clients"))
            sweeps.append(dict(r, sweep="participation"))
    unbinned = ([rescored(r) for r in source["unbinned"]] if source else
                [one(n, s, n_main, binning=False, baselines=False, **common)
                 for n in clf_sets for s in range(args.binning_seeds) if n != "mushroom"])
    seconds = time.perf_counter() - t0

    os.makedirs(out_dir, exist_ok=True)
    command = ("python experiments/fedga_table.py " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    meta = {"git_commit": commit, "fedforest_uncommitted_changes": dirty, "seconds": seconds,
            "seeds": args.seeds, "sweep_seeds": args.sweep_seeds, "binning_seeds": args.binning_seeds,
            "generations": G, "clients": n_main, "smoke": bool(args.smoke), "python": platform.python_version(),
            "command": command, "provenance": prov}
    produced = (f"Produced by `{meta['command']}` at commit `{commit}`"
                f"{' (uncommitted changes in fedforest/ or experiments/)' if dirty else ''} in {seconds / 60:.1f} min "
                f"on {platform.node() or 'this machine'} (2 shared cores).")
    if source:
        src = source["meta"].get("scores_from") or source["meta"]
        meta.update(seconds=src["seconds"], scores_from={k: src[k] for k in (
            "git_commit", "fedforest_uncommitted_changes", "seconds", "command", "python") if k in src})
        produced = (f"Scores (every training run) produced by `{src['command']}` at commit `{src['git_commit']}` in "
                    f"{src['seconds'] / 60:.1f} min on 2 shared cores; tables and plots re-rendered from its "
                    f"per-client scores by `{command}` at commit `{commit}`"
                    f"{' (uncommitted changes)' if dirty else ''} (no training: the figures beside Delta are "
                    "computed from the same per-client F1 / MSE).")
    with open(os.path.join(out_dir, "fedga_table.json"), "w") as fh:
        json.dump({"meta": meta, "main": main_rows, "sweeps": sweeps, "unbinned": unbinned}, fh, indent=1)

    binary = [r for r in main_rows if r["kind"] == "binary"]
    multi = [r for r in main_rows if r["kind"] == "multiclass"]
    reg = [r for r in main_rows if r["dataset"] in sets["regression"]]
    small = [r for r in main_rows if r["dataset"] in sets["small_regression"]]
    span = depths or {"min_depth": 2, "max_depth": 15, "cv_folds": 5}
    seeds_text = f"{args.seeds} seed{'s' if args.seeds != 1 else ''}"
    L = ["# FedGA-Tree against local, centralized and IBM trees", "",
         produced + (" **Smoke run: tiny settings, not results.**" if args.smoke else ""), "",
         "Protocol: 90/10 split per seed (stratified), a shared test set, training rows divided equally among "
         "N clients; one FedGA run per split (the paper averages 10 runs per split); paper settings "
         f"(P = 20 / 40, G = {G}, depths {span['min_depth']}..{span['max_depth']}, K = {span['cv_folds']}, "
         "r = 0.8, epsilon = 1); classification columns binned "
         "(Appendix A, fitted per client). letter and shuttle subsampled to 8,000 rows. "
         f"Main tables: N = {n_main} clients at full participation on the sets of at least {MIN_ROWS:,} rows "
         f"(the paper's regime), {seeds_text}; the small regression sets run with fewer clients "
         f"({', '.join(f'{n} {c}' for n, c in CLIENTS.items())}) and are reported apart. Reduced from the full "
         "grid (N = 5, 10, 20 x participation 100 / 50 / 25 / 10 % on every data set) to fit the time budget: "
         f"the N and participation sweeps run on satellite only, over {args.sweep_seeds} "
         f"seed{'s' if args.sweep_seeds != 1 else ''}; binning off is "
         f"checked over {args.binning_seeds} seed{'s' if args.binning_seeds != 1 else ''}.", "",
         "Delta = mean over clients of (fed / local - 1) x 100 (Eq. 3): F1 for classification (higher is "
         "better, Delta > 0 good), MSE for regression (Delta < 0 good). Binary F1 is the F1 of the positive "
         "class, the minority class of the pooled training labels (column 'positive class'); multiclass F1 is "
         "macro-F1. Improved = share of all clients whose FedGA tree beats their local tree. Mean ± sd over "
         "seeds.", "",
         "Delta is a mean of per-client ratios: every client weighs alike, so a client whose local F1 is tiny "
         "moves it most (0.02 → 0.08 is +300 %). On an imbalanced set Delta can rise while the mean F1 falls. "
         "The tables therefore give beside Delta the clients' mean score, local → FedGA (mean over seeds), the "
         "change of the mean (FedGA - local, over all clients; mean ± sd over seeds, and in brackets as a share "
         "of the local mean) and the seeds where Delta and the mean change have opposite signs; where they "
         "do, read the mean change and the share improved.", "",
         "Clients without Delta: a client whose local tree scores an F1 of 0 on the test rows has no ratio; "
         "it is counted and listed per seed (client numbers) and left out of every Delta mean (FedGA, IBM, "
         "central), but counted in 'improved' (any F1 above 0 beats it).", "",
         f"IBM tree: depth {ibm_depth}, epsilon 1, Laplace scale (depth + 1) x columns / epsilon per count (a "
         "row adds one count to every column's histogram of a level). Results made before this scale "
         "used (depth + 1) / epsilon, which is not epsilon-DP and favoured the IBM tree.", ""]
    L += ["## Binary sets", ""] + table_rows(binary, sets["binary"]) + [""]
    L += group_line(binary, "Binary", "paper, mostly binary sets: +5.58 % / 75 % and -2.58 % / 31 %")
    L += ["", "## Multiclass sets", ""] + table_rows(multi, sets["multiclass"]) + [""]
    L += group_line(multi, "Multiclass (macro-F1)")
    L += ["", f"## Regression, N = {n_main}, at least {MIN_ROWS:,} rows", ""] + table_rows(reg, sets["regression"])
    L += [""] + group_line(reg, "Regression (MSE; negative is better)")
    if small:
        L += ["", "## Small regression sets (fewer clients; outside the paper's regime)", ""]
        L += table_rows(small, sets["small_regression"]) + [""]
        L += group_line(small, "Small regression sets (MSE)")
    L += ["", "## What drives the means", ""]
    for rows, names, what in ((binary, sets["binary"], "Binary"), (multi, sets["multiclass"], "Multiclass"),
                              (reg, sets["regression"], "Regression"),
                              (small, sets["small_regression"], "Small regression sets")):
        lines = drivers(rows, names, what)
        if lines:
            L += [" ".join(lines), ""]
    if sweeps:
        L += [f"## Sweeps on {sweep_set} (Fig. 6-7, 10)", "",
              "| sweep | N | participation | seeds | FedGA Delta % | mean F1 local → FedGA | mean F1 change "
              "(% of local mean) | improved % | Delta and mean change disagree | clients without Delta "
              "| IBM Delta % |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for kind, keyf in (("clients", "clients"), ("participation", "participation")):
            rs = [r for r in sweeps if r["sweep"] == kind]
            for v in sorted({r[keyf] for r in rs}, reverse=(kind == "participation")):
                g = [r for r in rs if r[keyf] == v]
                L.append(f"| {kind} | {g[0]['clients']} | {g[0]['participation']:.0%} | {len(g)} | "
                         f"{mean_sd([r['delta'] for r in g])} | {means_text(g)} | {change_text(g)} | "
                         f"{plain([r['improved'] for r in g], '{:.0f}')} | {disagree_text(g)} | "
                         f"{no_delta_text(g)} | {mean_sd([r.get('ibm_delta') for r in g])} |")
        L.append("")
    if unbinned:
        L += [f"## Binning (Appendix A) on or off, N = {n_main}", "",
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
        L.append("")
    L += ["Plots: `fedga_delta_classification.png`, `fedga_delta_regression.png` (box plots of Delta per "
          "data set over seeds, as the paper's Fig. 3 and Fig. 8, and beside them the change of the clients' "
          "mean F1, or of their mean MSE in % of the local mean), `fedga_sweeps.png` (Fig. 6-7)."]
    with open(os.path.join(out_dir, "fedga_table.md"), "w") as fh:
        fh.write("\n".join(L) + "\n")
    clf_rows = binary + multi
    if clf_rows:
        boxplot(clf_rows, clf_sets, os.path.join(out_dir, "fedga_delta_classification.png"),
                f"Delta F1 (%) of federated vs local trees, N = {n_main}, c = 100 %", "Delta F1 (%)", ibm=True)
    if reg + small:
        boxplot(reg + small, reg_sets, os.path.join(out_dir, "fedga_delta_regression.png"),
                "Delta MSE (%) of FedGA vs local trees (lower is better)", "Delta MSE (%)")
    if sweeps:
        sweep_plot(sweeps, os.path.join(out_dir, "fedga_sweeps.png"))
    log(f"done in {seconds / 60:.1f} min; wrote {os.path.join(out_dir, 'fedga_table.md')}")


if __name__ == "__main__":
    raise SystemExit(main())
