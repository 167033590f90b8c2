"""FedGA-Tree on imbalanced two-class data: the rare class's F1 against each client's local tree.

A review measured, on a 5 %-positive table split over N = 10 clients, the
clients' mean test F1 of the rare class falling from their local trees to
their FedGA trees while Delta (Eq. 3) stayed positive.  This script measures
where that comes from and what a user can set.

Data.  The shared data sets hold no two-class table with about 5 % positives
(and lending_club is not available here), so the sets are derived: a
stratified 8,000-row sample of letter or shuttle (as experiments/fedga_table.py
draws it, by the source's classes), then one class against all the others:

* ``letter_A``: letter "A" vs the rest (3.9 % positives, a class trees find easily);
* ``letter_E``, ``letter_S``: "E" or "S" vs the rest (3.8 % / 3.7 %, classes
  trees find less well, where FedGA lost F1 in a first look);
* ``shuttle_Bypass``: shuttle "Bypass" vs the rest (5.6 %);

and, as a control, spambase as it is (39 % spam, all 4,601 rows).

Protocol per data set and seed: fedga_table.py's split (90/10, stratified,
one shared test set; the training rows dealt equally to N = 10 clients),
classification columns binned (Appendix A), the paper's settings (P = 20,
depths 2..15, K = 5, r = 0.8, epsilon = 1) except G = 50 generations instead
of 100 (``--generations``: the best fitness no longer moves after about 40
generations on these sets, and the whole run stays within about 15
CPU-minutes).  Every run goes through the public API (``run_horizontal``,
mode ``fedga``); each client's local tree is the one the fedga job reports
beside its own (mode fedga_local's tree).  Settings compared:

* ``a``: fitness = F1 of the minority class (the default, ``positive_class`` unset);
* ``b``: fitness = F1 of the majority class (``positive_class`` = the majority,
  what earlier versions scored on these tables: "rest" sorts after the rare
  class);
* ``c1``: as ``a`` with ``train_ratio`` 0.5 (twice the held-out positives);
* ``c2``: as ``a`` with ``refit`` false (each client keeps the tree it scored,
  fitted on its fit rows, instead of refitting the chosen structure on all rows);
* ``c3``: ``c1`` and ``c2`` together.

Every figure is the test F1 of the rare class (for ``b``, whose summary
reports the majority's F1, derived exactly from each tree's accuracy and
majority F1 on the same test rows).  Per data set and setting: the clients'
mean F1 local -> FedGA (mean over seeds), the change of the mean (FedGA -
local, mean +- sd over seeds), the share of clients improved, Delta (Eq. 3;
clients with a local F1 of 0 left out), the seeds where Delta and the mean
change disagree in sign (:mod:`fedforest.horizontal.fedga.compare`), the
clients whose FedGA or local tree scores an F1 of 0, and the positives in
each client's held-out fitness rows (the stratified split keeps
``n - round(r n)`` of a client's ``n`` positives).

    .venv/bin/python experiments/fedga_imbalanced.py            # the committed results (about 15 min on 2 cores)
    .venv/bin/python experiments/fedga_imbalanced.py --smoke    # a tiny run into a temporary folder

Writes experiments/results/fedga_imbalanced.md and fedga_imbalanced.json.
"""
import argparse
import os
import platform
import tempfile
import time

import numpy as np
import pandas as pd

import provenance
from fedga_table import OUT, ROOT, load, log, mean_sd, per_client, run, write_clients
from fedforest.horizontal.fedga.compare import against_local

SETS = {"letter_A": ("letter", "A"), "letter_E": ("letter", "E"), "letter_S": ("letter", "S"),
        "shuttle_Bypass": ("shuttle", "Bypass")}
CONTROL = {"spambase": ("spambase", None)}      # the source's own two classes
ROWS = 8000                                     # the letter and shuttle sample, as fedga_table.py
CLIENTS = 10
REST = "rest"
CONFIGS = {
    "a": ("fitness F1 of the minority class (default)", {}),
    "b": ("fitness F1 of the majority class (old behaviour)", {"positive_class": "majority"}),
    "c1": ("minority F1, train_ratio 0.5", {"train_ratio": 0.5}),
    "c2": ("minority F1, refit false", {"refit": False}),
    "c3": ("minority F1, refit false, train_ratio 0.5", {"refit": False, "train_ratio": 0.5}),
}
CONTROL_CONFIGS = ("a", "c2")
PAPER_RATIO = 0.8

SMOKE_SETS, SMOKE_ROWS, SMOKE_CLIENTS = {"letter_A": ("letter", "A")}, 1600, 4
SMOKE_DEPTHS = {"min_depth": 2, "max_depth": 4, "cv_folds": 3}


def two_class_table(name, source, rare, seed, rows):
    """The data set's rows with a two-class label: ``rare`` against ``"rest"``
    (or, without ``rare``, the source's own classes).  Returns (df, target,
    rare class, majority class)."""
    df, target, _, _ = load(source, seed, {source: rows} if rows else None)
    if rare is not None:
        df[target] = np.where(df[target].astype(str) == rare, rare, REST)
    counts = df[target].astype(str).value_counts()
    if len(counts) != 2:
        raise SystemExit(f"{name}: needs two classes, got {list(counts.index)}")
    return df, target, counts.idxmin(), counts.idxmax()


def other_class_f1(accuracy, f1, n, n_other):
    """F1 of the other class of a two-class confusion matrix over ``n`` rows
    (``n_other`` of them of the other class), from the accuracy and one class's
    F1.  With ``e`` wrong predictions, that class's hits are ``t = f1 e / (2 (1 - f1))``
    (from ``f1 = 2t / (2t + e)``), the other class's ``n - e - t``."""
    e = int(round(n * (1.0 - accuracy)))
    if e == 0:
        return 1.0 if n_other else 0.0
    t = f1 * e / (2.0 * (1.0 - f1))
    if abs(t - round(t)) > 1e-6:
        raise ValueError(f"accuracy {accuracy} and F1 {f1} over {n} rows are not one confusion matrix")
    hits = n - e - int(round(t))
    return 2.0 * hits / (2.0 * hits + e)


def rare_f1(summary, part, rare, n, n_rare):
    """Per client (rank order) the F1 of the rare class on the test rows of
    ``summary[part]`` ("test_metrics" or "local_test_metrics")."""
    if str(summary.get("positive_class")) == str(rare):
        return per_client(summary, "classification", part)
    m = summary[part]
    return np.array([other_class_f1(m[r]["accuracy"], m[r]["f1"], n, n_rare) for r in sorted(m, key=int)])


def one(name, source, rare, seed, key, generations, n_clients, rows, depths):
    df, target, rare, major = two_class_table(name, source, rare, seed, rows)
    _, opts = CONFIGS[key]
    opts = {k: (major if v == "majority" else v) for k, v in opts.items()}
    ratio = opts.get("train_ratio", PAPER_RATIO)
    with tempfile.TemporaryDirectory() as folder:
        paths, tests = write_clients(df, target, "classification", n_clients, seed, folder)
        positives = [int((pd.read_csv(p)[target].astype(str) == rare).sum()) for p in paths]
        test_y = pd.read_csv(tests[0])[target].astype(str)
        t0 = time.perf_counter()
        s = run("fedga", paths, tests, target, "classification", folder, seed, generations=generations,
                binning=True, **opts, **depths)
        seconds = time.perf_counter() - t0
    n, n_rare = len(test_y), int((test_y == rare).sum())
    fed, local = rare_f1(s, "test_metrics", rare, n, n_rare), rare_f1(s, "local_test_metrics", rare, n, n_rare)
    c = against_local(fed, local, True)
    ranks = sorted(s["population_fitness"], key=int)
    chosen_fitness = [s["population_fitness"][r][s["chosen_structure"][r]] for r in ranks]
    sizes = np.array(list(s["noisy_sizes"].values()))
    out = {"dataset": name, "source": source, "seed": seed, "config": key, "settings": opts,
           "fitness_class": s.get("positive_class"), "rare_class": rare, "majority_class": major,
           "rows": len(df), "rare_share": float((df[target].astype(str) == rare).mean()), "clients": n_clients,
           "generations": generations, "refit": s["refit"], "train_ratio": ratio, "depth": s["depth"],
           "local_depths": [s["local_depths"][r] for r in ranks], "seconds": seconds,
           "positives": positives, "heldout_positives": [p - int(round(ratio * p)) for p in positives],
           "fed_scores": fed.tolist(), "local_scores": local.tolist(),
           "chosen_heldout_fitness": chosen_fitness, "noisy_size_spread": float(sizes.max() / sizes.min() - 1),
           "delta": c["delta_percent"], "mean_local": c["mean_local"], "mean_fed": c["mean_fedga"],
           "mean_change": c["mean_change"], "mean_change_percent": c["mean_change_percent"],
           "improved": c["improved_percent"], "no_delta": c["clients_without_delta"],
           "disagree": c["delta_and_mean_disagree"]}
    shown = "—" if out["delta"] is None else f"{out['delta']:+.1f} %"
    log(f"{name} seed {seed} {key}: rare F1 local {c['mean_local']:.4f} -> FedGA {c['mean_fedga']:.4f} "
        f"({c['mean_change']:+.4f}), {c['improved_percent']:.0f} % improved, Delta {shown}, depth {s['depth']}, "
        f"held-out positives {min(out['heldout_positives'])}..{max(out['heldout_positives'])}, {seconds:.1f}s")
    return out


# ---------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------
def pooled(rows, field):
    return [v for r in rows for v in r[field]]


def zero_text(rows, field):
    """Clients (over all seeds) whose F1 is 0: ``"3 of 30"``."""
    v = pooled(rows, field)
    return f"{sum(1 for x in v if x == 0)} of {len(v)}"


def heldout_text(rows):
    v = pooled(rows, "heldout_positives")
    return f"{min(v)}–{int(np.median(v))}–{max(v)} ({sum(1 for x in v if x == 0)})"


def disagree_text(rows):
    seeds = [str(r["seed"]) for r in rows if r["disagree"]]
    return f"seed {', '.join(seeds)}" if seeds else "none"


def change_text(rows):
    v = np.array([r["mean_change"] for r in rows])
    pct = [r["mean_change_percent"] for r in rows if r["mean_change_percent"] is not None]
    return (f"{v.mean():+.4f}" + (f" ± {v.std():.4f}" if v.size > 1 else "")
            + (f" ({np.mean(pct):+.1f} %)" if pct else ""))


def main_table(rows, names, configs):
    L = ["| data set (rare class, share) | setting | mean rare-class F1, local → FedGA | change of the mean ± sd "
         "(% of local) | improved % | Delta % (Eq. 3) | Delta and mean disagree | FedGA trees with F1 0 | "
         "local trees with F1 0 | held-out positives per client: min–median–max (clients with 0) |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for n in names:
        for k in configs:
            g = [r for r in rows if r["dataset"] == n and r["config"] == k]
            if not g:
                continue
            label = CONFIGS[k][0]
            L.append(f"| {n} ({g[0]['rare_class']}, {g[0]['rare_share']:.1%}) | {k}: {label} | "
                     f"{np.mean([r['mean_local'] for r in g]):.4f} → {np.mean([r['mean_fed'] for r in g]):.4f} | "
                     f"{change_text(g)} | {np.mean([r['improved'] for r in g]):.0f} | "
                     f"{mean_sd([r['delta'] for r in g])} | {disagree_text(g)} | {zero_text(g, 'fed_scores')} | "
                     f"{zero_text(g, 'local_scores')} | {heldout_text(g)} |")
    return L


def selection_table(rows, names):
    """Per data set, for the minority-F1 settings: the chosen tree's held-out
    F1 (its fitness) against its test F1, and the depths."""
    L = ["| data set | setting | chosen tree's held-out F1 (fitness) | its test F1 | held-out − test | "
         "global depth (mean over seeds) | clients' local depths, median (range) |", "|---|---|---|---|---|---|---|"]
    for n in names:
        for k in ("a", "c1", "c2", "c3"):
            g = [r for r in rows if r["dataset"] == n and r["config"] == k]
            if not g:
                continue
            h, t = np.mean(pooled(g, "chosen_heldout_fitness")), np.mean(pooled(g, "fed_scores"))
            d = pooled(g, "local_depths")
            L.append(f"| {n} | {k} | {h:.4f} | {t:.4f} | {h - t:+.4f} | {np.mean([r['depth'] for r in g]):.1f} | "
                     f"{np.median(d):.0f} ({min(d)}–{max(d)}) |")
    return L


def mean_of(rows, name, key, field="mean_fed"):
    g = [r[field] for r in rows if r["dataset"] == name and r["config"] == key]
    return float(np.mean(g)) if g else None


def findings(rows, names):
    """Lines computed from the runs: what each setting changes against the default."""
    out = []
    ho = pooled([r for r in rows if r["config"] == "a" and r["dataset"] in names], "heldout_positives")
    ho5 = pooled([r for r in rows if r["config"] == "c1" and r["dataset"] in names], "heldout_positives")
    pos = pooled([r for r in rows if r["config"] == "a" and r["dataset"] in names], "positives")
    if ho:
        out.append(f"* Held-out positives: every client holds {min(pos)}–{max(pos)} positives; the stratified split "
                   f"leaves {min(ho)}–{max(ho)} (median {np.median(ho):.0f}) in its held-out fitness rows at "
                   f"train_ratio 0.8" + (f", {min(ho5)}–{max(ho5)} at 0.5" if ho5 else "")
                   + f"; {sum(1 for x in ho if x == 0)} clients have none.  One positive more or less moves a "
                   "client's fitness by about 0.1–0.2 of F1.")
    spread = max(r["noisy_size_spread"] for r in rows)
    out.append(f"* Weights: the clients' noisy sizes differ by at most {spread:.1%}, so the weighted average of "
               "Algorithm 1 (step 37) is the plain mean here.")
    for k, what in (("b", "Majority-class fitness (b) against minority-class fitness (a)"),
                    ("c1", "train_ratio 0.5 (c1) against the default (a)"),
                    ("c2", "refit false (c2) against the default (a)"),
                    ("c3", "refit false and train_ratio 0.5 (c3) against the default (a)")):
        parts = []
        for n in names:
            a, x = mean_of(rows, n, "a"), mean_of(rows, n, k)
            if a is not None and x is not None:
                parts.append(f"{n} {a:.4f} → {x:.4f} ({x - a:+.4f})")
        if parts:
            out.append(f"* {what}, mean FedGA rare-class F1: " + "; ".join(parts) + ".")
    paired = []
    for n in names:
        diffs, better = [], 0
        for seed in sorted({r["seed"] for r in rows if r["dataset"] == n}):
            a, c = (next((r for r in rows if (r["dataset"], r["seed"], r["config"]) == (n, seed, k)), None)
                    for k in ("a", "c2"))
            if a and c:
                d = np.array(a["fed_scores"]) - np.array(c["fed_scores"])
                diffs += d.tolist()
                better += d.mean() < 0
        if diffs:
            d = np.array(diffs)
            seeds = len({r["seed"] for r in rows if r["dataset"] == n})
            paired.append(f"{n}: refit false better on {better} of {seeds} seeds, {int((d < -0.05).sum())} of "
                          f"{d.size} clients lose more than 0.05 with the refit and {int((d > 0.05).sum())} gain "
                          f"more than 0.05, largest loss {-min(d.min(), 0.0):.3f}")
    if paired:
        out.append("* Refit true (a) against false (c2) client by client (the same seed runs the same search and "
                   "chooses the same structure; only the final fit differs): " + "; ".join(paired) + ".")
    depths = [f"{n} {np.mean([r['depth'] for r in rows if r['dataset'] == n and r['config'] == 'a']):.1f} vs "
              f"{np.median(pooled([r for r in rows if r['dataset'] == n and r['config'] == 'a'], 'local_depths')):.0f}"
              for n in names if any(r["dataset"] == n and r["config"] == "a" for r in rows)]
    out.append("* Depth, setting a: the global depth (mean over seeds) against the clients' median local depth: "
               + "; ".join(depths) + ".")
    for k in ("a", "c2"):
        g = [r for r in rows if r["config"] == k and r["dataset"] in names]
        if g:
            out.append(f"* FedGA trees with a test F1 of 0, setting {k}: {zero_text(g, 'fed_scores')} client runs "
                       f"(local trees: {zero_text(g, 'local_scores')}).")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--generations", type=int, default=50)
    ap.add_argument("--smoke", action="store_true",
                    help=f"a tiny run: 1 seed, 2 generations, depths 2..4, {SMOKE_CLIENTS} clients on a "
                         f"{SMOKE_ROWS}-row sample of letter_A, results in a temporary folder (or --out)")
    ap.add_argument("--out", default=None, help=f"folder of the results (default {os.path.relpath(OUT, ROOT)}; "
                                                "--smoke: a new temporary folder)")
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    sets, control, n_clients, rows, depths = SETS, CONTROL, CLIENTS, ROWS, {}
    out_dir = args.out or OUT
    if args.smoke:
        args.seeds, args.generations, args.allow_dirty = 1, 2, True
        sets, control, n_clients, rows, depths = SMOKE_SETS, {}, SMOKE_CLIENTS, SMOKE_ROWS, SMOKE_DEPTHS
        out_dir = args.out or tempfile.mkdtemp(prefix="fedga_imbalanced_smoke_")
    prov = provenance.record(args)
    t0 = time.perf_counter()
    results = [one(n, src, rare, s, k, args.generations, n_clients, rows, depths)
               for n, (src, rare) in sets.items() for s in range(args.seeds) for k in CONFIGS]
    results += [one(n, src, rare, s, k, args.generations, n_clients, None, depths)
                for n, (src, rare) in control.items() for s in range(args.seeds) for k in CONTROL_CONFIGS]
    seconds = time.perf_counter() - t0
    meta = {"seconds": seconds, "seeds": args.seeds, "generations": args.generations, "clients": n_clients,
            "rows": rows, "smoke": bool(args.smoke), "configs": {k: v[0] for k, v in CONFIGS.items()},
            "provenance": prov}
    os.makedirs(out_dir, exist_ok=True)
    provenance.write_result(os.path.join(out_dir, "fedga_imbalanced.json"), {"meta": meta, "runs": results})

    names, cnames = list(sets), list(control)
    commit, dirty = prov["git_commit"], prov["fedforest_uncommitted_changes"]
    L = ["# FedGA-Tree on imbalanced two-class data: the rare class's F1", "",
         f"Produced by `{prov['command']}` at commit `{commit}`{' (uncommitted changes)' if dirty else ''} in "
         f"{seconds / 60:.1f} min on {platform.node() or 'this machine'} ({prov['cores']} shared cores)."
         + (" **Smoke run: tiny settings, not results.**" if args.smoke else ""), "",
         "Data (derived: the shared data hold no two-class table with about 5 % positives, and lending_club is "
         f"not available here): a stratified {rows:,}-row sample of letter or shuttle (as fedga_table.py draws "
         "it), then one class against all the others (`letter_A`: \"A\" vs the rest, and so on); spambase as it "
         "is (39 % spam) as a control. Protocol of fedga_table.py: 90/10 split (stratified, one shared test "
         f"set), training rows dealt equally to N = {n_clients} clients, columns binned (Appendix A); paper "
         f"settings (P = 20, depths 2..15, K = 5, r = 0.8, epsilon = 1) but G = {args.generations} generations "
         f"(the paper: 100; reduced to keep the run short: the best fitness stops moving after about 40); "
         f"{args.seeds} seed{'s' if args.seeds != 1 else ''}. Each client's local tree is the one its fedga job "
         "reports (mode fedga_local's tree: CART of its own cross-validated depth).", "",
         "Settings: " + "; ".join(f"**{k}** {v[0]}" for k, v in CONFIGS.items()) + ". Every figure is the test F1 "
         "of the rare class; for b, whose job scores the majority class, it is derived exactly from each tree's "
         "accuracy and majority F1 on the same test rows; its local trees, too, take the depth their "
         "cross-validation of the majority class's F1 picks (the old behaviour for both), so its local column "
         "differs. Delta (Eq. 3) is a mean of per-client ratios; the change of the mean (FedGA − local over all "
         "clients, ± sd over seeds) and the share of clients improved sit beside it because they can disagree "
         "(`fedforest/horizontal/fedga/compare.py`). Held-out positives: the rare-class rows in each client's "
         "held-out fitness rows (the stratified split keeps n − round(r·n) of its n positives).", "",
         "## Rare-class F1, FedGA against each client's local tree", ""]
    L += main_table(results, names + cnames, list(CONFIGS)) + [""]
    L += ["## What the fitness sees: the chosen tree's held-out F1 against its test F1", "",
          "Mean over clients and seeds. With refit true (a, c1) the tree on the test rows is the chosen "
          "structure refitted on all the client's rows, not the tree that was scored; with refit false (c2, c3) "
          "it is the scored tree, so the gap is the optimism of choosing on few held-out positives.", ""]
    L += selection_table(results, names + cnames) + [""]
    L += ["## Findings (computed from the runs above, derived sets only)", ""] + findings(results, names) + [""]
    ctrl = [r for r in results if r["dataset"] in cnames]
    if ctrl:
        L += ["Control (spambase, 39 % spam): mean FedGA F1 of spam " + "; ".join(
            f"{k} {mean_of(ctrl, n, k):.4f} (local {mean_of(ctrl, n, k, 'mean_local'):.4f})"
            for n in cnames for k in CONTROL_CONFIGS) + ".", ""]
    with open(os.path.join(out_dir, "fedga_imbalanced.md"), "w") as fh:
        fh.write("\n".join(L) + "\n")
    log(f"done in {seconds / 60:.1f} min; wrote {os.path.join(out_dir, 'fedga_imbalanced.md')}")


if __name__ == "__main__":
    raise SystemExit(main())
