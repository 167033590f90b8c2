"""ICDTA4FL-CART on numeric data: fedforest against the clients' own trees and the method's published figures.

Protocol, per seed s in (0, 1, 2), data set and number of clients K:

* a stratified 10 % test set shared by every client
  (``train_test_split(stratify=y, random_state=s)``);
* the other 90 % cut into K disjoint stratified shards
  (``StratifiedKFold(K, shuffle=True, random_state=s)``), one rows file per client;
* each client fits its CART tree (depth 5, gini) on its whole shard and scores
  the other clients' trees on it (the tree filter; ``validation_fraction`` at its
  default, 0);
* numeric columns as they are, text columns as sorted ordinal codes, a missing
  value as a code of its own (-1).

Every job runs through the product (``fedforest.run_horizontal``: the server and
K client threads over the in-process transport).  Reported, on the shared test
set: the global tree of ICDTA4FL-CART with the mode's default settings (read
from the mode's declaration when the script runs, and written into the result's
header); the same with the method's text taken literally (:data:`LITERAL`); the
mean over the clients of each client's own tree (the same trees ICDTA4FL
merges); and, for both global trees, the merged rules, the nodes and the depth
of the tree.  The "published" column holds the accuracy of the method's
published code on the same protocol (where it was measured).

It also measures the peak memory (tracemalloc) of one rule aggregation step of
10 000 rules x 64 rules over 60 features, the case where materialising every
compatible pair before applying ``max_rules`` needed 1.25 GiB.

    .venv/bin/python experiments/icdta4fl_cart.py                    # full run
    .venv/bin/python experiments/icdta4fl_cart.py --seeds 1 --clients 2,5 --datasets spambase
    # one process per data set, then one table from their records:
    .venv/bin/python experiments/icdta4fl_cart.py --datasets dna --name icdta4fl_cart_dna
    .venv/bin/python experiments/icdta4fl_cart.py --combine icdta4fl_cart_spambase,icdta4fl_cart_dna,...
    # smoke run, results outside the repository:
    .venv/bin/python experiments/icdta4fl_cart.py --seeds 1 --clients 2 --datasets spambase --out /tmp/r --allow-dirty
"""
import argparse
import json
import math
import os
import sys
import tempfile
import time
import tracemalloc
import warnings

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data")
OUT = os.path.join(ROOT, "experiments", "results")
DATASETS = ["spambase", "satellite", "soybean", "dna"]
CLIENTS = [2, 5, 10]
#: accuracy (%) of the method's published code on this protocol
PUBLISHED = {("spambase", 2): 91.2, ("spambase", 5): 90.9, ("satellite", 5): 80.6, ("soybean", 5): 73.0,
             ("dna", 5): 89.5}
#: the method's text taken literally: every setting where fedforest's defaults differ from it
LITERAL = {"merge_bounds": "loose", "rule_votes": "fractions", "rule_weight": "none", "global_max_depth": 5,
           "filter_min_trees": 1, "over_max_rules": "coarsen", "global_splits": "any", "validation_fraction": 0.0,
           "min_coverage": 0}
#: the defaults with every compatible combination of leaves merged, uncounted (before min_coverage)
UNCOUNTED = {"min_coverage": 0}
#: the settings the header reports
SHOWN = ("filter", "filter_min_trees", "validation_fraction", "min_coverage", "merge_bounds", "rule_votes",
         "rule_weight", "max_rules", "over_max_rules", "global_splits", "global_max_depth", "global_max_nodes")


def defaults():
    """The icdta4fl mode's default settings, as its declaration gives them."""
    from fedforest.horizontal.icdta4fl import PARAMS
    return {p.name: p.default for p in PARAMS}


def settings_text(settings):
    return ", ".join(f"`{k} = {json.dumps(settings[k])}`" for k in SHOWN if k in settings)


def load(name):
    """Features (numeric, text as sorted ordinal codes, missing as -1) and labels."""
    manifest = pd.read_csv(os.path.join(DATA, "MANIFEST.csv")).set_index("name")
    df = pd.read_csv(os.path.join(DATA, manifest.loc[name, "file"]), keep_default_na=False,
                     na_values=["NA", ""])
    y = df.pop(manifest.loc[name, "target"]).astype(str)
    X = pd.DataFrame({c: (df[c].fillna(-1).astype(float) if pd.api.types.is_numeric_dtype(df[c])
                          else pd.Categorical(df[c]).codes.astype(float)) for c in df.columns})
    return X, y


def write_clients(folder, X, y, k, seed):
    """Client rows files and the shared test file of one seed; returns (paths, test path)."""
    from sklearn.model_selection import StratifiedKFold, train_test_split
    idx = np.arange(len(y))
    train, test = train_test_split(idx, test_size=0.1, stratify=y, random_state=seed)
    df = X.copy()
    df["label"] = y.to_numpy()
    test_path = os.path.join(folder, "test.csv")
    df.iloc[test].to_csv(test_path, index=False)
    paths = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # classes rarer than k in the shards (soybean)
        shards = [train[part] for _, part in StratifiedKFold(k, shuffle=True, random_state=seed)
                  .split(np.zeros(train.size), y.iloc[train])]
    for c, rows in enumerate(shards, start=1):
        paths.append(os.path.join(folder, f"client{c}.csv"))
        df.iloc[rows].to_csv(paths[-1], index=False)
    return paths, test_path


def run_settings(tree_filter="mean", max_rules=10_000):
    """``{"default": settings, "uncounted": settings, "literal": settings}``: the icdta4fl settings of the
    three runs."""
    d = dict({k: v for k, v in defaults().items() if k in SHOWN}, filter=tree_filter, max_rules=max_rules)
    return {"default": d, "uncounted": dict(d, **UNCOUNTED), "literal": dict(d, **LITERAL)}


def run_one(name, X, y, k, seed, tree_filter="mean", max_rules=10_000):
    from fedforest import run_horizontal
    out = {}
    with tempfile.TemporaryDirectory() as work:
        paths, test = write_clients(work, X, y, k, seed)
        base = dict(mode="icdta4fl", tree_type="cart", task="classification", label_column="label",
                    max_depth=5, criterion="gini", random_state=seed, test_data=[test] * k, overwrite=True)
        for label, settings in run_settings(tree_filter, max_rules).items():
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                s = run_horizontal(paths, model_dir=os.path.join(work, f"model-{label}"), **base, **settings)
            out[label] = {"acc": s["test_accuracy"], "f1": s["test_f1"], "seconds": time.perf_counter() - t0,
                          "merged_rules": s["merged_rules"], "kept": len(s["kept_trees"]),
                          "capped": s["rules_capped"], "aggregate_seconds": s["aggregate_seconds"],
                          "nodes": s["global_tree_nodes"], "depth": s["global_tree_depth"],
                          "truncated": s["global_tree_truncated"], "leaves": s["global_tree_leaves"],
                          "reached": s["global_leaves_reached"],
                          "rule_conditions_mean": s["global_rule_conditions_mean"],
                          "rule_conditions_max": s["global_rule_conditions_max"],
                          "path_conditions_mean": s["global_path_conditions_mean"],
                          "path_conditions_max": s["global_path_conditions_max"]}
            out["local"] = {"acc": s["local_test_accuracy"], "f1": s["local_test_f1"]}
    return out


def aggregation_memory(n_rules=10_000, n_next=64, n_features=60, max_rules=10_000, seed=0):
    """Peak memory (MiB, tracemalloc) of aggregating ``n_rules`` x ``n_next`` rules over
    ``n_features`` features, and how many pairs were compatible."""
    from fedforest.tree.rules import NUMERIC, Rule, aggregate
    rng = np.random.default_rng(seed)

    def rules(n, width):
        out = []
        for _ in range(n):
            feats = rng.choice(n_features, size=3, replace=False)
            lo = rng.normal(size=3) - width
            out.append(Rule({int(f): (float(a), float(a + 2 * width)) for f, a in zip(feats, lo)},
                            np.eye(2)[rng.integers(2)], float(rng.integers(1, 50)), NUMERIC))
        return out
    first, second = rules(n_rules, 2.0), rules(n_next, 2.0)
    first[0].conditions[n_features - 1] = (-math.inf, 0.0)  # every rule set spans all features
    tracemalloc.start()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        merged, stats = aggregate([first, second], max_rules=max_rules, bounds="intersect")
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    step = stats.steps[0]
    # what materialising every compatible pair first would hold: lo, hi (float64), dist, support, mass
    naive = step["compatible"] * (2 * n_features + 2 + 2) * 8
    return {"rules": [n_rules, n_next], "features": n_features, "max_rules": max_rules,
            "compatible_pairs": step["compatible"], "kept_rules": step["kept_rules"],
            "peak_mib": peak / 2 ** 20, "all_pairs_arrays_mib": naive / 2 ** 20, "seconds": seconds}


def pct(v):
    return f"{100 * v:.1f}" if v is not None else "—"


def size(runs, key):
    """Mean merged rules, nodes and depth of a run's global trees ("—" for runs that did not record them)."""
    if not all("nodes" in r[key] for r in runs):
        return "—"
    mean = {f: np.mean([r[key][f] for r in runs]) for f in ("merged_rules", "nodes", "depth")}
    cut = "*" if any(r[key].get("truncated") for r in runs) else ""
    return f"{mean['merged_rules']:.0f} / {mean['nodes']:.0f}{cut} / {mean['depth']:.1f}"


def shape(runs, key, length="rule"):
    """Leaves, the percentage reached by the clients' training rows, and the mean / max conditions of a
    rule (``length``: "rule", as ``explain`` prints it, or "path", every split on the way), means over
    seeds ("—" where not recorded)."""
    if not all("leaves" in r[key] for r in runs):
        return "—"
    leaves = np.mean([r[key]["leaves"] for r in runs])
    reached = np.mean([100 * r[key]["reached"] / r[key]["leaves"] for r in runs])
    mean = np.mean([r[key][f"{length}_conditions_mean"] for r in runs])
    most = max(r[key][f"{length}_conditions_max"] for r in runs)
    return f"{leaves:.0f} / {reached:.0f} % / {mean:.1f} / {most}"


def table(results, datasets, clients):
    lines = ["| set | clients | ICDTA4FL-CART (default) | rules / nodes / depth (default) | "
             "leaves / reached / conditions mean / max (default) | uncounted (`min_coverage = 0`) | "
             "leaves / reached / path conditions mean / max (uncounted) | "
             "ICDTA4FL-CART (text literally) | rules / nodes / depth (literally) | local CART mean | "
             "published code | default ≥ local | default ≥ published |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in datasets:
        for k in clients:
            runs = results.get(f"{name}/{k}")
            if not runs:
                continue
            d = np.mean([r["default"]["acc"] for r in runs])
            unc = (pct(np.mean([r["uncounted"]["acc"] for r in runs]))
                   if all("uncounted" in r for r in runs) else "—")
            lit = np.mean([r["literal"]["acc"] for r in runs])
            loc = np.mean([r["local"]["acc"] for r in runs])
            pub = PUBLISHED.get((name, k))
            ok_pub = "—" if pub is None else ("yes" if 100 * d >= pub - 1e-9 else "**no**")
            lines.append(f"| {name} | {k} | {pct(d)} ± {100 * np.std([r['default']['acc'] for r in runs]):.1f} | "
                         f"{size(runs, 'default')} | {shape(runs, 'default')} | {unc} | "
                         f"{shape(runs, 'uncounted', 'path') if all('uncounted' in r for r in runs) else '—'} | "
                         f"{pct(lit)} | {size(runs, 'literal')} | {pct(loc)} | "
                         f"{pub if pub is not None else '—'} | "
                         f"{'yes' if d >= loc - 1e-9 else '**no**'} | {ok_pub} |")
    return "\n".join(lines)


def plot(results, datasets, clients, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(datasets), figsize=(4 * len(datasets), 4.0 if len(datasets) >= 3 else 5.0), squeeze=False)
    for ax, name in zip(axes[0], datasets):
        ks = [k for k in clients if results.get(f"{name}/{k}")]
        for key, label, style in (("default", "ICDTA4FL-CART (default)", "o-"),
                                  ("uncounted", "uncounted (min_coverage = 0)", "x-."),
                                  ("literal", "ICDTA4FL-CART (text literally)", "s:"),
                                  ("local", "local CART (mean)", "^--")):
            ax.plot(ks, [100 * np.mean([r[key]["acc"] for r in results[f"{name}/{k}"]]) for k in ks], style,
                    label=label)
        pub = [(k, PUBLISHED[(name, k)]) for k in ks if (name, k) in PUBLISHED]
        if pub:
            ax.plot(*zip(*pub), "k*", markersize=11, label="published code")
        ax.set_title(name)
        ax.set_xlabel("clients")
        ax.set_xticks(ks)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test accuracy (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:  # the published points may be absent from the first panel
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    ncol = len(labels) if len(datasets) >= 3 else 1  # one row of entries only where it fits
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.08 if ncol > 1 else 0.06 * len(labels), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (default 3)")
    ap.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated data sets")
    ap.add_argument("--clients", default=",".join(map(str, CLIENTS)), help="comma-separated client counts")
    ap.add_argument("--name", default="icdta4fl_cart", help="base name of the result files")
    ap.add_argument("--filter", default="mean", help="the tree filter of every run (default: the method's 'mean')")
    ap.add_argument("--max-rules", type=int, default=10_000, help="max_rules of every run (default 10000)")
    ap.add_argument("--out", default=OUT, help=f"folder of the result files (default {OUT})")
    ap.add_argument("--combine", default=None,
                    help="comma-separated base names of earlier result files (JSON) to tabulate together "
                         "instead of running")
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    prov = provenance.record(args)
    datasets = args.datasets.split(",")
    clients = [int(c) for c in args.clients.split(",")]
    out_dir = args.out
    results, runs_from = {}, None
    settings = run_settings(args.filter, args.max_rules)
    t_all = time.perf_counter()
    if args.combine:
        runs_from, recorded = {}, []
        for base in args.combine.split(","):
            with open(os.path.join(out_dir, f"{base}.json")) as fh:
                doc = json.load(fh)
            results.update(doc["results"])
            runs_from[base] = doc["provenance"]
            recorded.append(doc.get("settings"))
        # the header reports what the combined runs ran with, not what this code would run
        settings = recorded[0] if all(r == recorded[0] for r in recorded) else None
        datasets = [d for d in datasets if any(key.startswith(f"{d}/") for key in results)]
    for name in (datasets if not args.combine else []):
        X, y = load(name)
        for k in clients:
            runs = []
            for seed in range(args.seeds):
                r = run_one(name, X, y, k, seed, args.filter, args.max_rules)
                runs.append(r)
                print(f"{name} K={k} seed={seed}: default {pct(r['default']['acc'])} "
                      f"({r['default']['merged_rules']} rules, {r['default']['leaves']} leaves, "
                      f"{r['default']['reached']} reached, {r['default']['seconds']:.0f}s) uncounted "
                      f"{pct(r['uncounted']['acc'])} ({r['uncounted']['leaves']} leaves, "
                      f"{r['uncounted']['reached']} reached) literal "
                      f"{pct(r['literal']['acc'])} local {pct(r['local']['acc'])}", flush=True)
            results[f"{name}/{k}"] = runs
    memory = aggregation_memory()
    print(f"aggregation of 10000 x 64 rules over 60 features: peak {memory['peak_mib']:.1f} MiB "
          f"({memory['compatible_pairs']} compatible pairs; holding them all: "
          f"{memory['all_pairs_arrays_mib']:.0f} MiB)", flush=True)
    os.makedirs(out_dir, exist_ok=True)
    md = table(results, datasets, clients)
    png = os.path.join(out_dir, f"{args.name}.png")
    plot(results, datasets, clients, png)
    with open(os.path.join(out_dir, f"{args.name}.json"), "w") as fh:
        json.dump({"filter": args.filter, "max_rules": args.max_rules, "settings": settings, "results": results,
                   "aggregation_memory": memory, "provenance": prov, "runs_from": runs_from,
                   "seconds": time.perf_counter() - t_all}, fh, indent=1, default=float)
    if settings is None:
        described = ("*Default* and *text literally*: the combined result files were run with different or "
                     "unrecorded settings (see their JSON).")
    else:
        described = (f"*Default* (the mode's defaults): {settings_text(settings['default'])}. "
                     f"*Text literally*: {settings_text(settings['literal'])}.")
    text = [f"# ICDTA4FL-CART on numeric data ({args.seeds} seeds, tree filter '{args.filter}', max_rules {args.max_rules})", "",
            f"`{prov['command']}` at commit `{(prov['git_commit'] or '?')[:12]}`"
            f"{' (uncommitted changes)' if prov['fedforest_uncommitted_changes'] else ''}, {prov['date']}"
            + (" from the runs of " + ", ".join(f"`{b}.json` (commit `{(p['git_commit'] or '?')[:12]}`)"
                                                for b, p in runs_from.items()) if runs_from else "") + ".", "",
            "Test accuracy (%) on the shared 10 % test set, mean over seeds (± standard deviation for the "
            "default); *rules / nodes / depth*: the merged rules, the global tree's nodes (* when it reached "
            "`global_max_nodes`) and its depth, means over seeds; *leaves / reached / conditions*: the global "
            "tree's leaves, the percentage of them that some training row of the clients reaches, and the "
            "mean / max conditions of a rule as `explain` prints it (default: without the conditions its rows "
            "do not need) or of a root-to-leaf path (uncounted: what `explain` printed before rules were "
            "counted); *uncounted*: the defaults with `min_coverage = 0` (every compatible combination of the "
            "kept trees' leaves, uncounted: fedforest's default before this setting). " + described
            + " *Local*: mean over the "
            "clients of each client's own tree. *Published code*: the method's published code on the same "
            "protocol.", "",
            md, "", f"![accuracy against clients]({os.path.basename(png)})", "",
            "Peak memory of one aggregation step of 10 000 x 64 rules over 60 features "
            f"(`max_rules = 10000`): {memory['peak_mib']:.1f} MiB (tracemalloc), "
            f"{memory['compatible_pairs']} compatible pairs, {memory['kept_rules']} rules kept; holding every "
            f"compatible pair before the cap would take {memory['all_pairs_arrays_mib']:.0f} MiB of arrays.", ""]
    with open(os.path.join(out_dir, f"{args.name}.md"), "w") as fh:
        fh.write("\n".join(text))
    print(md)


if __name__ == "__main__":
    main()
