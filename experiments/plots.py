"""Pictures of the committed experiment results (reads experiments/results/*.json, writes PNGs beside them).

    python experiments/plots.py            # every figure whose JSON exists
    python experiments/plots.py --only lossless icdta4fl

Figures (icdta4fl_tables.py draws its own figure, from the runs at the current defaults):
  lossless_vs_sklearn.png   accuracy / R² over seeds per data set: scikit-learn RF vs the federated forest
                            (per-node and per-tree feature sampling), box plots
  fedxgbllr_table.png       accuracy / MSE vs number of clients: centralized XGBoost, local-only, FedXGBllr
  bench_vertical.png        training and prediction seconds: federated forest vs scikit-learn, XGBoost and LightGBM,
                            one-shot vs node-by-node prediction
"""
import argparse
import json
import os
from collections import defaultdict

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "experiments", "results")


def _load(name):
    path = os.path.join(RESULTS, name + ".json")
    if not os.path.isfile(path):
        return None
    with open(path) as fh:
        return json.load(fh)


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _grid(n, width=4.0, height=3.2, cols=3):
    plt = _plt()
    cols = min(cols, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return plt, fig, list(axes.flat)


def _save(fig, name, layout=True):
    path = os.path.join(RESULTS, name + ".png")
    if layout:
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def lossless():
    d = _load("lossless_vs_sklearn")
    if d is None:
        return None
    rows = d["summary"]
    plt, fig, axes = _grid(len(rows))
    for ax, r in zip(axes, rows):
        series = [("scikit-learn RF\n(features\nper node)", r["sklearn"]),
                  ("fedforest\nfeatures\nper node", r["fedforest_node"]),
                  ("fedforest\nfeatures\nper tree", r["fedforest_tree"])]
        ax.boxplot([s for _, s in series], showmeans=True)
        ax.set_xticks(range(1, len(series) + 1), [n for n, _ in series], fontsize=7)
        ax.set_title(f"{r['dataset']} ({len(r['seeds'])} seeds)", fontsize=10)
        ax.set_ylabel(f"test {r['metric']}")
        ax.grid(axis="y", alpha=0.3)
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color="C1", label="median (line)"),
               Line2D([], [], marker="^", color="green", linestyle="", label="mean (triangle)")]
    axes[0].legend(handles=handles, loc="upper right", fontsize=7)
    fig.suptitle(f"Federated Forest vs scikit-learn RandomForest: test score over seeds (same data, "
                 f"{d.get('n_estimators', 100)} trees); boxes: quartiles, whiskers: 1.5 IQR.\n"
                 "'features per node' = feature_sampling 'node' (scikit-learn's rule), "
                 "'per tree' = 'tree' (the paper's: one subset per tree)", fontsize=10)
    return _save(fig, "lossless_vs_sklearn")


def _clients_axis(ax, xs, title, ylabel, log=False):
    if log:
        ax.set_xscale("log")
        ax.minorticks_off()
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("clients")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def _split_key(key):
    return key.split("|")


def fedxgbllr():
    d = _load("fedxgbllr_table")
    if d is None:
        return None
    by_set = defaultdict(lambda: defaultdict(dict))
    for key, runs in d.items():
        parts = _split_key(key)
        if len(parts) != 2 or not isinstance(runs, list):
            continue
        name, clients = parts[0], int(parts[1])
        for m in ("central", "local", "fed"):
            vals = [run[m] for run in runs if run.get(m) is not None]
            if vals:
                by_set[name][m][clients] = (float(np.mean(vals)), runs[0].get("task", ""))
    if not by_set:
        return None
    labels = {"central": "centralized XGBoost", "local": "local XGBoost (mean over clients)", "fed": "FedXGBllr"}
    names = sorted(by_set)
    plt, fig, axes = _grid(len(names))
    for ax, name in zip(axes, names):
        task = ""
        for m in ("central", "local", "fed"):
            curve = by_set[name][m]
            xs = sorted(curve)
            task = curve[xs[0]][1] if xs else task
            ax.plot(xs, [curve[x][0] for x in xs], "--" if m != "fed" else "-", marker="o", ms=3, label=labels[m])
        _clients_axis(ax, xs, name, "MSE" if task == "regression" else "accuracy")
    # one legend for every panel, under the title, so it hides no curve
    fig.legend(*axes[0].get_legend_handles_labels(), loc="upper center", ncol=3, fontsize=8,
               bbox_to_anchor=(0.5, 0.955), frameon=False)
    fig.suptitle("FedXGBllr vs centralized and local-only XGBoost", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return _save(fig, "fedxgbllr_table", layout=False)


def bench_vertical():
    d = _load("bench_vertical")
    if d is None:
        return None
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    train = [("fedforest\n(federated)", d.get("train_seconds")), ("scikit-learn RF\n(pooled)",
             d.get("sklearn_rf_seconds")), ("XGBoost RF\n(pooled)", d.get("xgboost_rf_seconds")),
             ("LightGBM RF\n(pooled)", d.get("lightgbm_rf_seconds"))]
    train = [(n, v) for n, v in train if v is not None]
    a.bar([n for n, _ in train], [v for _, v in train], color=["C0", "C1", "C2", "C4"][:len(train)])
    a.set_ylabel("seconds")
    a.set_title("training", fontsize=10)
    pred = [("one-shot\n(1 round)", d.get("predict_seconds_oneshot")),
            (f"node by node\n({d.get('predict_rounds_classical', '?')} rounds)", d.get("predict_seconds_classical")),
            ("scikit-learn", d.get("sklearn_rf_predict_seconds")), ("XGBoost", d.get("xgboost_rf_predict_seconds")),
            ("LightGBM", d.get("lightgbm_rf_predict_seconds"))]
    pred = [(n, v) for n, v in pred if v is not None]
    b.bar([n for n, _ in pred], [v for _, v in pred], color=["C0", "C3", "C1", "C2", "C4"][:len(pred)])
    a.tick_params(axis="x", labelsize=8)
    b.tick_params(axis="x", labelsize=8)
    b.set_yscale("log")
    b.set_ylabel("seconds (log)")
    b.set_title("prediction", fontsize=10)
    setup = d.get("setup", {})
    fig.suptitle(f"Vertical forest, {setup.get('train_rows', '?')} rows x {setup.get('n_features', '?')} features, "
                 f"{setup.get('n_parties', '?')} parties, {setup.get('forest', {}).get('n_estimators', '?')} trees "
                 "(same machine, same run)", fontsize=10)
    return _save(fig, "bench_vertical")


FIGURES = {"lossless": lossless, "fedxgbllr": fedxgbllr, "bench_vertical": bench_vertical}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", choices=sorted(FIGURES), help="draw only these figures")
    args = p.parse_args(argv)
    for name in args.only or sorted(FIGURES):
        path = FIGURES[name]()
        print(f"{name}: {path or 'no results JSON yet'}")


if __name__ == "__main__":
    main()
