"""Federated streaming EFDT: Syn, Sem, Ind against local and centralized
streaming trees (shape of the paper's Tables 1-2 and Figs. 2-3).

Per data set and seed: a stratified holdout (``--holdout``, 30 % of the
rows) is set aside to score the final trees; 1 % of the rows (stratified,
except for soybean whose 7 proxy rows cannot cover its 19 classes) is set
aside as the server's proxy set (Sem); the rest is split into 4 stratified
equal shares, one rows file per client, each shuffled (``--order shuffled``,
the default) or kept in the data set's file order (``--order file``; its
record and figure sit beside the shuffled ones, ``efdt_<set>_file.*``), and
streamed in ``rounds`` chunks.  Every run is the product's horizontal protocol in one process
(``fedforest.run_horizontal(mode="efdt")``: server and 4 client threads over
the in-process transport) with the paper's tree settings: river's EFDT
defaults (grace period 200, delta 1e-7, tau 0.05, re-evaluation every 20
rows, information gain, nba leaves) and ``binary_split`` true, and this
package's ``new_leaf_seen`` default ("zero": a new leaf's bound counts the
rows it has learnt; river counts its inherited weight too, "inherited").
Each record names the ``new_leaf_seen`` it was made with.

Accuracy at round r: prequential (test-then-train) accuracy over rounds 1..r,
pooled over the clients: each client predicts its next chunk with its current
tree before learning it (centralized: the server's tree predicts every
client's chunk).  Holdout accuracy: every client's final tree (Syn, Sem,
Centralized: the one shared tree) scores the holdout, mean over the clients.  Methods: Syn, Sem, Ind with ``merge = "delta"`` (statistics
since the last broadcast) and with ``merge = "total"`` (the paper's literal
aggregation), Local (no federation) and Centralized (the pooled stream).

Rounds: 200, or fewer when a client holds fewer rows (one row per chunk at
least): housevotes84 and soybean have ~107 and ~169 rows per client.

    .venv/bin/python experiments/efdt_table.py                   # 10 seeds, every data set
    .venv/bin/python experiments/efdt_table.py --seeds 2 --datasets dna,satellite
    .venv/bin/python experiments/efdt_table.py --seeds 1 --datasets mushroom --order file

Each data set's runs are kept in ``experiments/results/efdt_<name>.json`` (with
the command, commit and time that produced them) and its plot in
``efdt_<name>.png``; ``efdt_tables.md`` is rebuilt from every record present,
so data sets can be run with different seed counts.
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
from sklearn.model_selection import StratifiedKFold, train_test_split

import provenance
from fedforest import run_horizontal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data")
OUT = os.path.join(ROOT, "experiments", "results")
DATASETS = {"mushroom": "class", "housevotes84": "Class", "soybean": "Class", "dna": "Class",
            "satellite": "classes"}
ROUNDS = 200
SHOWN = (1, 5, 15, 25, 50, 100, 150, 200)
CLIENTS = 4
METHODS = [("Centralized", "centralized", "delta"), ("Local", "local", "delta"), ("Ind", "ind", "delta"),
           ("Syn", "syn", "delta"), ("Sem", "sem", "delta"),
           ("Ind total", "ind", "total"), ("Syn total", "syn", "total"), ("Sem total", "sem", "total")]


def git_state():
    """(commit, dirty, dirty elsewhere): the code the results come from (see provenance.py)."""
    commit, dirty = provenance.git_state()
    return (commit or "")[:12], bool(dirty), bool(dirty)


def write_clients(folder, df, target, seed, holdout=0.3, order="shuffled"):
    """The clients' rows files, the proxy file and the holdout file; returns
    (client paths, fewest rows of a client, holdout path or None)."""
    test_path = None
    if holdout > 0:
        df, test = train_test_split(df, test_size=holdout, stratify=df[target], random_state=seed)
        df = df.sort_index()                   # the remaining rows keep the file order
        test_path = os.path.join(folder, "holdout.csv")
        test.to_csv(test_path, index=False)
    n_proxy = max(1, round(0.01 * len(df)))   # stratified unless it is smaller than the classes (soybean)
    strata = df[target] if n_proxy >= df[target].nunique() else None
    rest, proxy = train_test_split(df, test_size=n_proxy, stratify=strata, random_state=seed)
    rest = rest.sort_index()
    proxy.to_csv(os.path.join(folder, "proxy.csv"), index=False)
    paths, sizes = [], []
    folds = StratifiedKFold(CLIENTS, shuffle=True, random_state=seed).split(rest, rest[target])
    for k, (_, idx) in enumerate(folds, start=1):
        part = rest.iloc[np.random.default_rng(seed + k).permutation(idx) if order == "shuffled" else np.sort(idx)]
        paths.append(os.path.join(folder, f"client{k}.csv"))
        part.to_csv(paths[-1], index=False)
        sizes.append(len(idx))
    return paths, min(sizes), test_path


def run_seed(name, target, seed, rounds_cap, holdout=0.3, order="shuffled"):
    df = pd.read_csv(os.path.join(DATA, f"{name}.csv"), keep_default_na=False, na_values=["NA", ""])
    out = {}
    with tempfile.TemporaryDirectory() as folder:
        paths, fewest, test_path = write_clients(folder, df, target, seed, holdout, order)
        rounds = min(rounds_cap, fewest)
        for label, strategy, merge in METHODS:
            s = run_horizontal(paths, mode="efdt", task="classification", label_column=target, strategy=strategy,
                               merge=merge, rounds=rounds, binary_split=True,
                               proxy_data=os.path.join(folder, "proxy.csv"),
                               test_data=[test_path] * CLIENTS if test_path else None,
                               model_dir=os.path.join(folder, f"m-{strategy}-{merge}"))
            out[label] = {"round_accuracy": s["round_accuracy"], "seconds": s["seconds"],
                          "aggregation_seconds_per_round": s.get("aggregation_seconds_per_round"),
                          "holdout_accuracy": s.get("test_accuracy")}
    return out, rounds


def cell(runs, label, r):
    vals = [100 * run[label]["round_accuracy"][r - 1] for run in runs]
    return f"{np.mean(vals):.2f} ± {np.std(vals):.2f}"


def holdout_cell(runs, label):
    """Mean ± std over seeds of the final trees' holdout accuracy (%); "—" for records without one."""
    vals = [run[label].get("holdout_accuracy") for run in runs]
    if any(v is None for v in vals):
        return "—"
    vals = [100 * v for v in vals]
    return f"{np.mean(vals):.2f} ± {np.std(vals):.2f}"


def plot(name, runs, rounds, path, order="shuffled"):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"Centralized": ("k", "-"), "Local": ("tab:gray", "-"), "Ind": ("tab:green", "-"),
              "Syn": ("tab:blue", "-"), "Sem": ("tab:orange", "-"), "Ind total": ("tab:green", ":"),
              "Syn total": ("tab:blue", ":"), "Sem total": ("tab:orange", ":")}
    x = np.arange(1, rounds + 1)
    for label, _, _ in METHODS:
        acc = 100 * np.array([run[label]["round_accuracy"] for run in runs])
        color, ls = styles[label]
        ax.plot(x, acc.mean(axis=0), color=color, linestyle=ls, linewidth=1.4, label=label)
    ax.set_xlabel("round")
    ax.set_ylabel("prequential accuracy (%)")
    ax.set_title(f"{name} ({order} order): 4 clients, mean of {len(runs)} seed(s); dotted: merge = total")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


ORDERS = ("shuffled", "file")


def _suffix(order):
    return "" if order == "shuffled" else f"_{order}"


def record_path(name, order="shuffled"):
    """One data set's record per stream order (shuffled: ``efdt_<name>.json``; file: ``efdt_<name>_file.json``)."""
    return os.path.join(OUT, f"efdt_{name}{_suffix(order)}.json")


def save_record(name, runs, rounds, seeds, argv, seconds, holdout=0.3, order="shuffled"):
    """One data set's runs and their provenance (``efdt_<name>.json``)."""
    from fedforest.horizontal.efdt import PARAMS
    commit, dirty, dirty_elsewhere = git_state()
    rec = {"rounds": rounds, "seeds": seeds, "runs": runs, "seconds": seconds, "date": str(datetime.date.today()),
           "holdout": holdout, "order": order,
           "new_leaf_seen": next(p.default for p in PARAMS if p.name == "new_leaf_seen"),
           "command": ("`.venv/bin/python experiments/efdt_table.py " + argv).rstrip() + "`",
           "commit": commit, "dirty": dirty, "dirty_elsewhere": dirty_elsewhere}
    with open(record_path(name, order), "w") as fh:
        json.dump(rec, fh, default=float)


def provenance_text(rec):
    code = (" with uncommitted changes to the efdt code" if rec["dirty"] else " (efdt code as committed"
            + ("; other modules of fedforest/ had uncommitted changes)" if rec["dirty_elsewhere"] else ")"))
    return (f"{rec['seeds']} seed(s), {rec['seconds'] / 60:.1f} minutes on {platform.node()} "
            f"({os.cpu_count()} shared cores), {rec['date']}; code at commit {rec['commit']}{code}; "
            f"`new_leaf_seen = \"{rec.get('new_leaf_seen', 'inherited')}\"`; command: {rec['command']}.")


def write():
    """``efdt_tables.md`` from every data set's record found in the results folder."""
    records = {(n, o): json.load(open(record_path(n, o))) for n in DATASETS for o in ORDERS
               if os.path.isfile(record_path(n, o))}
    lines = ["# Federated streaming EFDT (shape of the paper's Tables 1-2)", "",
             "Mean ± std over seeds of the prequential accuracy (%) pooled over 4 clients, at the given rounds "
             "(cumulative from round 1), and the final trees' accuracy on a stratified holdout (mean over the "
             "clients' final trees) where the record has one. 1 % of the remaining rows (stratified; soybean: "
             "random, its 7 rows cannot cover 19 classes) is the server's proxy set; the rest is split in 4 "
             "stratified equal shares, each client's share shuffled or kept in file order (each section says "
             "which) and streamed in `rounds` chunks. Trees: river's EFDT defaults with "
             "`binary_split` true, except `new_leaf_seen` (this package's default \"zero\"; river's rule is "
             "\"inherited\"; each section names the one its record used). Syn/Sem/Ind merge the statistics gathered since the last broadcast "
             "(`merge = \"delta\"`); the *total* columns merge the totals (the paper's literal aggregation). "
             "Every run is the product's protocol in one process (server and 4 client threads, encrypted "
             "channels).", ""]
    fewer = [_title(*k) for k, r in records.items() if r["seeds"] < 10]
    if fewer:
        lines += [f"Fewer seeds than the paper's 10 for {', '.join(fewer)} (see each section), to keep the run "
                  "within about half an hour on the shared 2-core machine (other jobs kept it loaded); `--seeds 10` gives the paper's "
                  "count.", ""]
    cut = [_title(*k) for k, r in records.items() if "--rounds" in r["command"]]
    if cut:
        lines += [f"Fewer rounds than the paper's 200 for {', '.join(cut)} (`--rounds`, see each section): "
                  "each round sends every tree with its statistics, and these runs had to fit the shared "
                  "machine's time.  housevotes84 and soybean have fewer rows per client than 200, hence "
                  "their rounds.", ""]
    for (name, order), rec in records.items():
        R, runs = rec["rounds"], rec["runs"]
        shown = [r for r in SHOWN if r < R] + [R]
        split = (f"holdout {100 * rec['holdout']:.0f} %, " if rec.get("holdout") else "no holdout, ") + (
            f"streams in {rec.get('order', 'shuffled')} order")
        lines += [f"## {_title(name, order)} ({R} rounds)", "", provenance_text(rec) + f" {split[0].upper() + split[1:]}.", "",
                  "| round | " + " | ".join(label for label, _, _ in METHODS) + " |",
                  "|---|" + "---|" * len(METHODS)]
        for r in shown:
            lines.append(f"| {r} | " + " | ".join(cell(runs, label, r) for label, _, _ in METHODS) + " |")
        lines.append("| final tree, holdout | " + " | ".join(holdout_cell(runs, label) for label, _, _ in METHODS)
                     + " |")
        agg = {label: np.mean([run[label]["aggregation_seconds_per_round"] for run in runs]) * 1e3
               for label, strategy, _ in METHODS if strategy in ("syn", "sem", "ind")}
        lines += ["", "Server aggregation per round (ms): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in agg.items()) + ".", "",
                  f"![accuracy vs round]({os.path.basename(plot_path(name, order))})", ""]
    lines += ["## At the last round", "",
              "Prequential accuracy (%) after the last round, mean over seeds, and in brackets the final "
              "trees' accuracy on the holdout; gain = strategy − Local, gap = Centralized − strategy; "
              "total − delta compares the two merges of the same strategy (prequential).", "",
              "| data set | Local | Syn | Sem | Ind | Centralized | Syn gain | Syn gap | Syn total − delta | "
              "Sem total − delta | Ind total − delta |", "|---|" + "---|" * 10]
    for (name, order), rec in records.items():
        last = {label: 100 * np.mean([run[label]["round_accuracy"][-1] for run in rec["runs"]])
                for label, _, _ in METHODS}
        held = {label: [run[label].get("holdout_accuracy") for run in rec["runs"]] for label, _, _ in METHODS}
        both = {label: f"{last[label]:.2f}" + ("" if None in held[label] else f" ({100 * np.mean(held[label]):.2f})")
                for label in last}
        lines.append(f"| {_title(name, order)} | {both['Local']} | {both['Syn']} | {both['Sem']} | {both['Ind']} | "
                     f"{both['Centralized']} | {last['Syn'] - last['Local']:+.2f} | "
                     f"{last['Centralized'] - last['Syn']:+.2f} | {last['Syn total'] - last['Syn']:+.2f} | "
                     f"{last['Sem total'] - last['Sem']:+.2f} | {last['Ind total'] - last['Ind']:+.2f} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(OUT, "efdt_tables.md"), "w") as fh:
        fh.write(text)
    print(text)


def plot_path(name, order="shuffled"):
    return os.path.join(OUT, f"efdt_{name}{_suffix(order)}.png")


def _title(name, order):
    return name if order == "shuffled" else f"{name}, file order"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--holdout", type=float, default=0.3,
                    help="share of the rows set aside (stratified) to score the final trees (0: none)")
    ap.add_argument("--order", choices=("shuffled", "file"), default="shuffled",
                    help="each client's rows streamed shuffled or in the data set's file order")
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    provenance.record(args)          # refuses uncommitted code unless --allow-dirty
    names = args.datasets.split(",")
    unknown = [n for n in names if n not in DATASETS]
    if unknown:
        ap.error(f"unknown data sets {unknown}; choose among {list(DATASETS)}")
    os.makedirs(OUT, exist_ok=True)
    argv_text = " ".join(sys.argv[1:] if argv is None else argv)
    for name in names:   # each data set's record and plot replace its previous ones; the table shows all
        t0 = time.perf_counter()
        runs = []
        for seed in range(args.seeds):
            out, rounds = run_seed(name, DATASETS[name], seed, args.rounds, args.holdout, args.order)
            runs.append(out)
            print(f"{name} seed {seed}: " + ", ".join(
                f"{k} {100 * v['round_accuracy'][-1]:.2f}"
                + ("" if v["holdout_accuracy"] is None else f" (holdout {100 * v['holdout_accuracy']:.2f})")
                for k, v in out.items())
                  + f" ({time.perf_counter() - t0:.0f}s)", flush=True)
        plot(name, runs, rounds, plot_path(name, args.order), args.order)
        save_record(name, runs, rounds, args.seeds, argv_text, time.perf_counter() - t0, args.holdout, args.order)
        write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
