"""Benchmark of vertical gradient boosting (``--mode vertical_boost``): plain and Paillier.

Run with ``.venv/bin/python experiments/bench_vertical_boost.py`` (long: every
Paillier round encrypts one gradient ciphertext per training row);
``--smoke`` checks the script in seconds on tiny data with a 512-bit key and
writes to a temporary folder, never to the results file.  The script is only
the driver: the jobs run as subprocesses under ``mpiexec -n 3`` (master + 2
parties) through ``python -m fedforest train`` / ``predict``.

Data (``--datasets a9a,dense``; both by default):

* ``a9a``: synthetic data of the *shape* of LIBSVM's a9a (the real a9a is not
  bundled): 32,561 training rows and 3,256 test rows (10 % more), 123 binary
  columns that are the one-hot codes of 14 categorical attributes of a9a's
  cardinalities (so every row has 14 ones, about 11 % density), and a binary
  label from a logistic model of the attributes (about a quarter positive),
  all from seed 0.  Party 1 holds the label and the columns of the first 5
  attributes (62 columns), party 2 the other 61.  The columns are stored
  dense (0/1, a zero is a value, not a missing cell), for the federated jobs
  and for XGBoost alike.
* ``dense``: ``bench_vertical``'s table, ``make_classification(110_000, 20,
  random_state=0)``: the first 100,000 rows train, the last 10,000 test;
  party 1 holds ``f00..f09`` and the label, party 2 ``f10..f19``.

Boosting settings: depth 6, 255 bins per feature (``max_bins = 255``),
learning rate 0.3, ``random_state = 0``, otherwise the product's defaults
(XGBoost's).  For each data set the script runs

1. an untimed tiny warm-up (plain and Paillier-512 jobs; numba's on-disk cache,
   XGBoost's first-fit start-up);
2. ``--rounds`` boosting rounds with ``label_privacy = "plain"``, in turns with
   XGBoost ``hist`` and fedforest's single-process ``BoostClassifier`` on the
   pooled training columns (``--train-repeats`` turns; the medians count);
3. ``--he-rounds`` rounds with ``label_privacy = "paillier"`` for every key
   length of ``--keys`` (1024 with ``insecure_key = true``, to hold against
   peers' published figures, which use 512-1024-bit keys), and a plain job of
   ``--he-rounds`` rounds as their reference;
4. ``predict`` on the test rows (the files hold no label) with every model:
   accuracy and AUC of the plain model, and the Paillier models' probabilities
   against the plain reference's.

Figures.  Seconds per tree = the master's ``train_seconds`` (the boosting
loop, with each round's gradient encryption) over ``trees_built``; with a
binary label one tree is one boosting round.  ``rounds_per_tree`` is the
summary's ``rounds_per_boosting_round`` (communication rounds), ``bytes_per_tree``
the summary's (every byte all ranks sent while growing).  ``he_over_plain`` is
Paillier-2048 seconds per tree over plain seconds per tree.
``stage_seconds_per_tree_paillier_<bits>``: the Paillier run's seconds per
tree by stage, summed from the parties' own manifests (``stage_seconds``):
``randomness`` and ``encryption`` (the label holder's rounds of encrypted
gradients), ``party_sums`` (the other party's encrypted per-bin sums),
``decryption`` and ``decision`` (the rest of the label holder's decisions),
and ``other`` (the master's remaining training time: messages, relaying,
its own steps).  ``randomness_floor_paillier_<bits>``: one round's CPU-time
floor of fresh randomness, the training rows times the seconds of one
factor measured here in one process, beside the measured wall seconds of
that stage per round (with every core of the machine).
``randomness_seconds_per_factor_2048``: CPU seconds of one fresh encryption
factor of the label holder with its default ``paillier_randomness = "short"``
(``h_s^r mod n²``, ``r`` of 224 bits), one process, a fresh 2048-bit key,
its tables built (the median of 5 batches of 400 after a batch of 50);
``randomness_seconds_per_factor_2048_full`` the same with ``"full"``
(uniform factors); target: short at most 0.15 ms (``--smoke``: a 512-bit
key, under the names ``..._512``).
``ratio_vs_xgboost_hist`` is plain federated seconds per tree over those of
``XGBClassifier(n_estimators=R, max_depth=6, learning_rate=0.3, max_bin=256,
tree_method="hist", n_jobs=<cores>)`` on the pooled training data in this
process (timed around ``fit``; fedforest's 255 bins for values plus its
missing-value bin match XGBoost's ``max_bin=256``).
``fixed_cost_per_level``: seconds per level of a boosting tree on a
400-row a9a-shaped table (20 rounds, depth 6), where the kernels cost
nearly nothing: the per-level fixed cost of the Python steps, messages and
exchanges, federated (3 ranks, the master's ``train_seconds``) and in the
single-process ``BoostClassifier`` (fit seconds), each over the levels the
trees grew (the depth of their deepest leaf).
``identical_trees_plain_vs_paillier``: every array of every saved tree file
of every Paillier run equals, byte for byte, the plain reference's array of
the same name (the importance shares aside: with Paillier only the label
holder has them), the Paillier label holder's leaf values and node
statistics equal the plain master's, and the predicted probabilities are
equal (max abs difference 0.0).  ``paillier_key_holder``: the rank that made
and held the key (``"label_holder"``).

The demo table (``--demo``, on by default; ``--demo-only`` runs it alone and
updates its figures in the results file): ``python -m fedforest
demo-data``'s breast-cancer table (426 training rows, 15 + 15 columns),
the product's defaults otherwise, plain and Paillier-2048, after an untimed
warm-up: ``demo_seconds_per_tree_paillier_2048``, ``--demo-rounds``
(default 10) boosting rounds' ``train_seconds`` over the trees (target
0.5 s), with ``demo.stage_seconds_per_tree`` as above; and
``demo_forest_seconds_paillier_2048``, ``--demo-trees`` (default 100) forest
trees' ``train_seconds`` (target 5 s; ``bench_paillier.py`` measures the
same), with the forest's stages per tree (summed over the trees of a batch,
which the parties handle on several threads at once).

The hidden instance space (``--hidden``, on by default, a9a only): the
headline key's Paillier run again with ``instance_space = "hidden"``:
``seconds_per_tree_paillier_2048_hidden``, ``hidden_over_shared`` (over the
shared space's seconds per tree; target at most 3), its stages per tree, and
``identical_trees_hidden_vs_shared`` (the label holder's tree files equal the
shared run's, array for array, and the predicted probabilities equal the
plain reference's).
Published peer figures (quoted, not measured here; 512-1024-bit keys): FedTree
5.25 s per tree on a9a (CPU), FATE 34 s per tree, FATE 2.0 1 min 54 s per tree
at 100k x 330.  Targets: Paillier-2048 at most 5 s per tree at a9a's shape,
HE/plain at most 20x, at most 2 x depth rounds per tree.

Writes ``experiments/results/bench_vertical_boost.json`` (``--out``): the
headline data set's (a9a's) figures at the top level and both data sets'
under ``"a9a"`` and ``"dense"``.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402
import bench_vertical as BV  # noqa: E402
import bench_paillier as BP  # noqa: E402
from bench_paillier import CARDINALITIES, SPLIT_ATTRIBUTE  # noqa: E402

ROOT = BV.ROOT
RESULT = os.path.join(ROOT, "experiments", "results", "bench_vertical_boost.json")
WORKDIR = os.path.join(ROOT, "build", "bench_vertical_boost")

SEED = 0
DEPTH = 6
MAX_BINS = 255
XGB_MAX_BIN = MAX_BINS + 1      # XGBoost's max_bin counts the missing-value bin
LEARNING_RATE = 0.3
LABEL = "label"
A9A_TRAIN, A9A_TEST = 32_561, 3_256
DENSE_TRAIN, DENSE_TEST = 100_000, 10_000
SMOKE_TRAIN, SMOKE_TEST = 2_000, 200

#: the demo table's targets (2048-bit key): seconds per boosting tree, seconds of the forest's trees
TARGET_DEMO_SECONDS_PER_TREE = 0.5
TARGET_DEMO_FOREST_SECONDS = 5.0
DEMO_ROUNDS, DEMO_FOREST_TREES = 10, 100

#: targets of the issue (seconds per tree at a9a shape with a 2048-bit key; HE over plain)
TARGET_SECONDS_PER_TREE_2048 = 5.0
TARGET_HE_OVER_PLAIN = 20.0
TARGET_FACTOR_SECONDS = 0.15e-3   # the label holder's short randomness, one factor at 2048 bits

#: peers' published figures, quoted (not measured by this script); they use 512-1024-bit keys
PUBLISHED_PEERS = {
    "FedTree a9a (CPU)": {"seconds_per_tree": 5.25},
    "FATE": {"seconds_per_tree": 34.0},
    "FATE 2.0, 100k x 330": {"seconds_per_tree": 114.0},
    "note": "published figures quoted in the benchmark's issue, with 512-1024-bit keys; not measured here",
}


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------
def a9a_like(n_rows, seed=SEED):
    """123 one-hot columns of 14 categorical attributes (a9a's cardinalities) and a
    label from a logistic model of the attributes, about a quarter positive."""
    rng = np.random.default_rng(seed)
    card = np.asarray(CARDINALITIES)
    start = np.concatenate(([0], np.cumsum(card)[:-1]))
    probs = [rng.dirichlet(np.full(c, 0.7)) for c in card]
    effect = np.concatenate([rng.normal(0.0, 1.0, c) for c in card])
    hot = np.column_stack([rng.choice(c, n_rows, p=p) for c, p in zip(card, probs)]) + start
    X = np.zeros((n_rows, card.sum()), dtype=np.float32)
    np.put_along_axis(X, hot, 1.0, axis=1)
    score = effect[hot].sum(axis=1)
    y = (score + rng.logistic(size=n_rows) > np.quantile(score, 0.76)).astype(np.int64)
    names = [f"a{a:02d}_{v:02d}" for a, c in enumerate(card) for v in range(c)]
    return X, y, names


def dataset(name, n_train, n_test):
    """``(train, test, names, groups, description)`` of data set ``name``;
    ``train`` and ``test`` are ``(X, y)``, ``groups`` the party columns."""
    if name == "a9a":
        X, y, names = a9a_like(n_train + n_test)
        cut = sum(CARDINALITIES[:SPLIT_ATTRIBUTE])
        what = (f"a9a-shaped synthetic data (seed {SEED}): {n_train + n_test} rows, {X.shape[1]} one-hot "
                f"columns of {len(CARDINALITIES)} attributes; first {n_train} rows train, last {n_test} test")
        return (X[:n_train], y[:n_train]), (X[n_train:], y[n_train:]), names, [names[:cut], names[cut:]], what
    train, test = BV.make_data(n_train, n_test)
    what = (f"sklearn make_classification(n_samples={n_train + n_test}, n_features={BV.N_FEATURES}, "
            f"random_state={SEED}); first {n_train} rows train, last {n_test} test")
    return train, test, BV.feature_names(), BV.party_columns(), what


def write_parties(folder, train, test, names, groups):
    """Party files (Parquet, label on party 1; test files without label) and the
    test truth.  Returns ``{"train": [...], "test": [...], "truth": DataFrame}``."""
    os.makedirs(folder, exist_ok=True)
    out = {"train": [], "test": []}
    n_train = train[0].shape[0]
    for part, (X, y), first in (("train", train, 0), ("test", test, n_train)):
        ids = np.arange(first, first + X.shape[0], dtype=np.int64)   # test IDs follow train IDs
        for p, cols in enumerate(groups, start=1):
            frame = pd.DataFrame(X[:, [names.index(c) for c in cols]], columns=cols)
            frame.insert(0, "id", ids)
            if part == "train" and p == 1:
                frame[LABEL] = y
            path = os.path.join(folder, f"{part}-party{p}.parquet")
            frame.to_parquet(path, index=False)
            out[part].append(path)
    out["truth"] = pd.DataFrame({"id": np.arange(n_train, n_train + test[0].shape[0]).astype(str),
                                 LABEL: test[1]})
    return out


# ---------------------------------------------------------------------------
# Federated jobs
# ---------------------------------------------------------------------------
def write_job(folder, tag, rounds, privacy="plain", key_length=None, depth=DEPTH, instance_space=None):
    """``<folder>/<tag>.toml``: a vertical_boost job on the party files of ``folder``."""
    boost = {"n_estimators": rounds, "max_depth": depth, "max_bins": MAX_BINS, "learning_rate": LEARNING_RATE,
             "random_state": SEED, "label_privacy": privacy}
    if privacy == "paillier":
        boost.update(key_length=key_length, insecure_key=key_length < 2048)
    if instance_space is not None:
        boost["instance_space"] = instance_space
    lines = [f"# bench_vertical_boost.py: {tag}", "[job]", 'mode = "vertical_boost"',
             'task = "classification"', 'data = ["train-party1.parquet", "train-party2.parquet"]',
             'id_column = "id"', f'label_column = "{LABEL}"', f'model_dir = "model-{tag}"',
             "progress = false", "overwrite = true", "", "[boost]"]
    for key, value in boost.items():
        lines.append(f"{key} = " + (str(value).lower() if isinstance(value, bool)
                                    else f'"{value}"' if isinstance(value, str) else str(value)))
    path = os.path.join(folder, f"{tag}.toml")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def train(folder, tag, rounds, **job):
    """One training job; the master's summary with ``wall_seconds`` and ``job`` (the TOML) added."""
    path = write_job(folder, tag, rounds, **job)
    summary, _, wall = BV.run_fedforest("train", path, os.path.join(folder, f"summary-train-{tag}.json"))
    summary.update(wall_seconds=wall, job=path)
    return summary


def predict(folder, summary, test_files, truth):
    """Predict the test rows with the model of a training ``summary``; the predictions
    joined to the truth (id, prediction, proba_<class>..., label)."""
    tag = os.path.splitext(os.path.basename(summary["job"]))[0]
    out = os.path.join(folder, f"predictions-{tag}.csv")
    BV.run_fedforest("predict", summary["job"], os.path.join(folder, f"summary-predict-{tag}.json"),
                     ["--output", out, "--data", *test_files])
    pred = pd.read_csv(out, dtype={"id": str})
    joined = pred.merge(truth, on="id", how="inner")
    if len(joined) != len(truth):
        raise SystemExit(f"{out}: {len(joined)} of {len(truth)} test IDs have a prediction")
    return joined.sort_values("id", key=lambda s: s.astype(np.int64)).reset_index(drop=True)


def seconds_per_tree(summary):
    return summary["train_seconds"] / max(summary["trees_built"], 1)


def stage_breakdown(summary):
    """Seconds per tree of the encrypted stages, from the parties' own manifests
    (``stage_seconds``: the master never receives them): the label holder's
    randomness and encryption of each round's gradients, the other party's
    encrypted per-bin sums, the label holder's decryption and the rest of its
    decisions (``decision`` less ``decryption``); ``other`` is the master's
    training time left (messages, relaying, the master's steps, waiting)."""
    n = max(summary["trees_built"], 1)
    out = {k: v / n for k, v in BP.stage_seconds(summary).items()}
    out["other"] = max(seconds_per_tree(summary) - sum(out.values()), 0.0)
    return out


def randomness_floor(key_length, rows):
    """The CPU-time floor of one round's fresh encryption factors: ``rows``
    times the measured seconds of one factor (the label holder's CRT
    randomness, one process, a fresh key of ``key_length`` bits)."""
    from fedforest.crypto import paillier
    _, private = paillier.generate_keypair(key_length, insecure=key_length < 2048)
    private.randomness(50, 1)
    t0 = time.process_time()
    private.randomness(400, 1)
    per_factor = (time.process_time() - t0) / 400
    return {"seconds_per_factor": per_factor, "rows": int(rows), "cpu_seconds_per_round": per_factor * rows}


def randomness_per_factor(key_length, batches=5, size=400):
    """``{randomness_seconds_per_factor_<bits>[_full]: CPU seconds}``: one fresh
    encryption factor of the label holder's short (default) and full
    randomness, one process, a fresh key of ``key_length`` bits, its tables
    built by a first batch of 50 (the median of ``batches`` batches of ``size``)."""
    from fedforest.crypto import paillier
    _, private = paillier.generate_keypair(key_length, insecure=key_length < 2048)
    out = {}
    for mode, suffix in (("short", ""), ("full", "_full")):
        with paillier.RandomnessMaker(private, 1, mode) as maker:
            maker.take(50)
            runs = []
            for _ in range(batches):
                t0 = time.process_time()
                maker.take(size)
                runs.append((time.process_time() - t0) / size)
        out[f"randomness_seconds_per_factor_{key_length}{suffix}"] = float(np.median(runs))
    return out


def tree_arrays(model_dir):
    """``{relative path of every saved tree file: {array name: array}}`` of a federated model."""
    out = {}
    for dirpath, _, files in os.walk(model_dir):
        if os.path.basename(dirpath) != "trees":
            continue
        for f in files:
            if f.endswith(".npz"):
                path = os.path.join(dirpath, f)
                with np.load(path, allow_pickle=False) as z:
                    out[os.path.relpath(path, model_dir)] = {k: z[k] for k in z.files}
    return out


def same_trees(plain_dir, he_dir, label_rank=1):
    """``(equal, files compared)``: every tree file of the Paillier model equals
    the plain model's in every array they share but the importance shares
    (the label holder's alone with Paillier), byte for byte, and the
    Paillier label holder's leaf values and node statistics equal the plain
    master's (the master of a Paillier model holds none of them)."""
    a, b = tree_arrays(plain_dir), tree_arrays(he_dir)
    if not a or a.keys() != b.keys():
        return False, len(a)

    def same(x, y):
        return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
    holder = f"party-{label_rank}"
    for path, arrays in b.items():
        other = a[path]
        # importance shares are the label holder's alone with Paillier: the other files hold none
        if not all(same(x, other[k]) for k, x in arrays.items() if k in other and k != "importance"):
            return False, len(a)
        if path.startswith(holder + os.sep):
            master = a[path.replace(holder, "master", 1)]
            if not all(same(arrays[k], master[k]) for k in ("value", "impurity", "weighted_n_node_samples")):
                return False, len(a)
    return True, len(a)


def head_key_of(he):
    """The key length the headline figures use: 2048 where it ran."""
    return 2048 if 2048 in he else max(he) if he else None


def same_holder_trees(shared_dir, hidden_dir, label_rank=1):
    """Whether the label holder's tree files of the hidden-space model equal
    the shared-space model's in every array they share (the other parties'
    files differ by design: thresholds only)."""
    a, b = tree_arrays(shared_dir), tree_arrays(hidden_dir)
    holder = f"party-{label_rank}" + os.sep
    keys = sorted(k for k in a if k.startswith(holder))
    if not keys or keys != sorted(k for k in b if k.startswith(holder)):
        return False
    return all(x.dtype == b[k][n].dtype and x.tobytes() == b[k][n].tobytes()
               for k in keys for n, x in a[k].items() if n in b[k])


def proba_columns(frame):
    return sorted(c for c in frame.columns if c.startswith("proba_"))


def scores(frame):
    """Accuracy and AUC of joined predictions (binary label, class 1 positive)."""
    from sklearn.metrics import roc_auc_score
    truth = frame[LABEL].to_numpy()
    return {"accuracy": float((frame["prediction"].astype(np.int64).to_numpy() == truth).mean()),
            "auc": float(roc_auc_score(truth, frame["proba_1"].to_numpy()))}


# ---------------------------------------------------------------------------
# In-process references on the pooled columns
# ---------------------------------------------------------------------------
def xgboost_hist(rounds, depth=DEPTH):
    import xgboost as xgb
    return xgb.XGBClassifier(n_estimators=rounds, max_depth=depth, learning_rate=LEARNING_RATE,
                             max_bin=XGB_MAX_BIN, tree_method="hist", n_jobs=os.cpu_count(), random_state=SEED)


def boost_single_process(rounds, depth=DEPTH):
    from fedforest import BoostClassifier
    return BoostClassifier(n_estimators=rounds, max_depth=depth, max_bins=MAX_BINS, learning_rate=LEARNING_RATE,
                           random_state=SEED)


def fit_scored(model, train, test):
    """Fit (timed: wall and this process's CPU seconds), then the test probabilities and scores."""
    from sklearn.metrics import roc_auc_score
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(*train)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    proba = model.predict_proba(test[0])
    return {"fit_seconds": seconds, "fit_cpu_seconds": cpu, "proba": proba,
            "accuracy": float((model.classes_[proba.argmax(axis=1)] == test[1]).mean()),
            "auc": float(roc_auc_score(test[1], proba[:, 1]))}


# ---------------------------------------------------------------------------
# The fixed cost of a level
# ---------------------------------------------------------------------------
FIXED_ROWS, FIXED_ROUNDS = 400, 20


def levels_of(model_dir):
    """Levels grown per tree (mean over the master's tree files): the depth of
    each tree's deepest leaf (a split search on every level above it)."""
    arrays = tree_arrays(os.path.join(model_dir, "master"))
    depths = []
    for t in arrays.values():
        left, right = t["children_left"], t["children_right"]
        depth = np.zeros(left.size, dtype=np.int64)
        for node in range(left.size):           # parents come before their children
            if left[node] >= 0:
                depth[left[node]] = depth[right[node]] = depth[node] + 1
        depths.append(int(depth.max()))
    return float(np.mean(depths)) if depths else 0.0


def fixed_cost(args):
    """Seconds per level on a table so small that the kernels cost nothing:
    the per-level fixed cost of a boosting tree (the master's and the
    parties' Python steps, message building, exchanges), federated (3 ranks)
    and in the single-process estimator, median of the turns."""
    folder = os.path.join(args.workdir, "fixed")
    shutil.rmtree(folder, ignore_errors=True)
    X, y, names = a9a_like(FIXED_ROWS, seed=SEED + 2)
    cut = sum(CARDINALITIES[:SPLIT_ATTRIBUTE])
    write_parties(folder, (X, y), (X[:10], y[:10]), names, [names[:cut], names[cut:]])
    fed, single = [], []
    for i in range(args.train_repeats):
        s = train(folder, "fixed", FIXED_ROUNDS)
        fed.append(seconds_per_tree(s))
        single.append(fit_scored(boost_single_process(FIXED_ROUNDS), (X, y), (X[:10], y[:10]))["fit_seconds"]
                      / FIXED_ROUNDS)
    levels = levels_of(os.path.join(folder, "model-fixed"))
    out = {"rows": FIXED_ROWS, "rounds": FIXED_ROUNDS, "levels_per_tree": levels,
           "federated_seconds_per_level": float(np.median(fed)) / max(levels, 1),
           "single_process_seconds_per_level": float(np.median(single)) / max(levels, 1),
           "federated_seconds_per_tree_runs": fed, "single_process_seconds_per_tree_runs": single}
    BV.log(f"fixed cost per level ({FIXED_ROWS} rows, {levels:.1f} levels per tree): federated "
           f"{out['federated_seconds_per_level'] * 1e3:.2f} ms, single process "
           f"{out['single_process_seconds_per_level'] * 1e3:.2f} ms")
    return out


# ---------------------------------------------------------------------------
# One data set
# ---------------------------------------------------------------------------
def run_dataset(name, args, n_train, n_test):
    folder = os.path.join(args.workdir, name)
    shutil.rmtree(folder, ignore_errors=True)
    t_data = time.perf_counter()
    train_xy, test_xy, names, groups, what = dataset(name, n_train, n_test)
    files = write_parties(folder, train_xy, test_xy, names, groups)
    log_data = (f"[{name}] {what}; party columns {len(groups[0])}/{len(groups[1])}, density "
                f"{float(train_xy[0].astype(bool).mean()):.3f}, {float(train_xy[1].mean()):.1%} positive")
    BV.log(log_data)
    data_seconds = time.perf_counter() - t_data
    R, H = args.rounds, args.he_rounds
    busy = {"start": BV.cpu_busy()}

    # plain federated training in turns with XGBoost hist and the single-process estimator
    BV.log(f"[{name}] plain: {R} rounds, depth {DEPTH}, {MAX_BINS} bins; XGBoost hist and BoostClassifier "
           f"on the pooled columns; {args.train_repeats} turn(s)")
    plain, fed_times, xgb_runs, single_runs = None, [], [], []
    for i in range(args.train_repeats):
        s = train(folder, f"plain-{R}" if i == 0 else f"plain-{R}-repeat", R)
        plain = plain or s
        fed_times.append(seconds_per_tree(s))
        xgb_runs.append(fit_scored(xgboost_hist(R), train_xy, test_xy))
        single_runs.append(fit_scored(boost_single_process(R), train_xy, test_xy))
        BV.log(f"  turn {i + 1}: federated {s['train_seconds']:.2f}s (wall {s['wall_seconds']:.1f}s), XGBoost "
               f"{xgb_runs[-1]['fit_seconds']:.2f}s, BoostClassifier {single_runs[-1]['fit_seconds']:.2f}s")
    shutil.rmtree(os.path.join(folder, f"model-plain-{R}-repeat"), ignore_errors=True)
    busy["after_plain"] = BV.cpu_busy()

    # Paillier runs and their plain reference of the same rounds
    reference = plain if H == R else train(folder, f"plain-{H}", H)
    he = {}
    for key in args.keys:
        BV.log(f"[{name}] paillier-{key}: {H} rounds" + (" (insecure_key)" if key < 2048 else ""))
        he[key] = train(folder, f"paillier-{key}-{H}", H, privacy="paillier", key_length=key)
        BV.log(f"  {he[key]['train_seconds']:.2f}s for {he[key]['trees_built']} trees "
               f"(the label holder's rounds of encrypted gradients {he[key]['label_round_seconds']:.2f}s; "
               f"wall {he[key]['wall_seconds']:.1f}s)")
    hidden = None
    if args.hidden and name == "a9a" and he:
        key = head_key_of(he)
        BV.log(f"[{name}] paillier-{key}, instance_space = 'hidden': {H} rounds")
        hidden = train(folder, f"paillier-{key}-{H}-hidden", H, privacy="paillier", key_length=key,
                       instance_space="hidden")
        BV.log(f"  {hidden['train_seconds']:.2f}s for {hidden['trees_built']} trees (wall {hidden['wall_seconds']:.1f}s)")
    busy["after_paillier"] = BV.cpu_busy()

    # predictions: the plain model's scores; the Paillier models against the plain reference
    pred_plain = predict(folder, plain, files["test"], files["truth"])
    pred_ref = pred_plain if reference is plain else predict(folder, reference, files["test"], files["truth"])
    proba_diff, trees_equal, tree_files = 0.0, bool(he), {}
    for key, s in he.items():
        p = predict(folder, s, files["test"], files["truth"])
        cols = proba_columns(pred_ref)
        if proba_columns(p) != cols:
            proba_diff = float("inf")
        else:
            proba_diff = max(proba_diff, float(np.abs(p[cols].to_numpy() - pred_ref[cols].to_numpy()).max()))
        equal, n = same_trees(os.path.join(folder, f"model-plain-{H}"),
                              os.path.join(folder, f"model-paillier-{key}-{H}"))
        trees_equal = trees_equal and equal
        tree_files[str(key)] = {"equal": equal, "files": n}
    hidden_equal = None
    if hidden is not None:
        key = head_key_of(he)
        p = predict(folder, hidden, files["test"], files["truth"])
        cols = proba_columns(pred_ref)
        shared_dir, hidden_dir = (os.path.join(folder, f"model-paillier-{key}-{H}{x}") for x in ("", "-hidden"))
        hidden_equal = (proba_columns(p) == cols
                        and float(np.abs(p[cols].to_numpy() - pred_ref[cols].to_numpy()).max()) == 0.0
                        and same_holder_trees(shared_dir, hidden_dir))
    fed_scores = scores(pred_plain)
    single_proba = single_runs[0]["proba"]
    single_diff = float(np.abs(pred_plain[proba_columns(pred_plain)].to_numpy() - single_proba).max())
    busy["end"] = BV.cpu_busy()

    plain_spt = float(np.median(fed_times))
    xgb_spt = float(np.median([x["fit_seconds"] for x in xgb_runs])) / R
    single_spt = float(np.median([x["fit_seconds"] for x in single_runs])) / R
    head_key = head_key_of(he)
    res = {
        "seconds_per_tree_plain": plain_spt,
        **{f"seconds_per_tree_paillier_{k}": None for k in (1024, 2048)},
        **{f"seconds_per_tree_paillier_{k}": seconds_per_tree(s) for k, s in he.items()},
        "he_key_length": head_key,
        "he_over_plain": seconds_per_tree(he[head_key]) / plain_spt if he else None,
        **{f"he_over_plain_{k}": seconds_per_tree(s) / plain_spt for k, s in he.items()},
        "rounds_per_tree": (he[head_key] if he else plain)["rounds_per_boosting_round"],
        "rounds_per_tree_plain": plain["rounds_per_boosting_round"],
        **{f"rounds_per_tree_paillier_{k}": s["rounds_per_boosting_round"] for k, s in he.items()},
        "max_depth": DEPTH,
        "max_bins": MAX_BINS,
        "bytes_per_tree_plain": plain["bytes_per_tree"],
        **{f"bytes_per_tree_paillier_{k}": s["bytes_per_tree"] for k, s in he.items()},
        **{f"label_round_seconds_per_round_paillier_{k}": s["label_round_seconds"] / max(s["n_rounds"], 1)
           for k, s in he.items()},
        **{f"paillier_key_holder_{k}": s["paillier_key_holder"] for k, s in he.items()},
        **{f"stage_seconds_per_tree_paillier_{k}": stage_breakdown(s) for k, s in he.items()},
        **({} if hidden is None else {
            f"seconds_per_tree_paillier_{head_key}_hidden": seconds_per_tree(hidden),
            "hidden_over_shared": seconds_per_tree(hidden) / seconds_per_tree(he[head_key]),
            f"stage_seconds_per_tree_paillier_{head_key}_hidden": stage_breakdown(hidden),
            f"rounds_per_tree_paillier_{head_key}_hidden": hidden["rounds_per_boosting_round"],
            f"bytes_per_tree_paillier_{head_key}_hidden": hidden["bytes_per_tree"],
            "identical_trees_hidden_vs_shared": hidden_equal}),
        # one round's randomness: its CPU-time floor (rows x seconds per factor) and the
        # measured wall time of the stage with the label holder's encrypt_workers
        **{f"randomness_floor_paillier_{k}": dict(
            randomness_floor(k, s["n_train_rows"]),
            measured_seconds_per_round=stage_breakdown(s)["randomness"] * s["trees_built"] / max(s["n_rounds"], 1))
           for k, s in he.items()},
        "paillier_key_holder": next(iter(he.values()))["paillier_key_holder"] if he else None,
        "xgboost_hist_seconds_per_tree": xgb_spt,
        "ratio_vs_xgboost_hist": plain_spt / xgb_spt,
        "he_ratio_vs_xgboost_hist": seconds_per_tree(he[head_key]) / xgb_spt if he else None,
        "single_process_seconds_per_tree": single_spt,
        "single_process_ratio_vs_xgboost_hist": single_spt / xgb_spt,
        "identical_trees_plain_vs_paillier": bool(trees_equal and proba_diff == 0.0),
        "max_abs_proba_diff_plain_vs_paillier": proba_diff if he else None,
        "tree_files_plain_vs_paillier": tree_files,
        "max_abs_proba_diff_plain_vs_single_process": single_diff,
        "accuracy_fedforest": fed_scores["accuracy"],
        "auc_fedforest": fed_scores["auc"],
        "accuracy_xgboost_hist": xgb_runs[0]["accuracy"],
        "auc_xgboost_hist": xgb_runs[0]["auc"],
        "accuracy_single_process": single_runs[0]["accuracy"],
        "seconds_per_tree_plain_runs": fed_times,
        "xgboost_hist_fit_seconds_runs": [x["fit_seconds"] for x in xgb_runs],
        "xgboost_hist_fit_cpu_seconds_runs": [x["fit_cpu_seconds"] for x in xgb_runs],
        "single_process_fit_seconds_runs": [x["fit_seconds"] for x in single_runs],
        "rounds": R,
        "he_rounds": H,
        "setup": {"data": what, "train_rows": int(n_train), "test_rows": int(n_test), "n_features": len(names),
                  "party_columns": [len(g) for g in groups], "label_party": 1, "file_format": "parquet",
                  "density": float(train_xy[0].astype(bool).mean()), "positive_share": float(train_xy[1].mean()),
                  "boost": {"max_depth": DEPTH, "max_bins": MAX_BINS, "learning_rate": LEARNING_RATE,
                            "random_state": SEED, "rounds_plain": R, "rounds_paillier": H,
                            "key_lengths": list(args.keys)},
                  "xgboost": {k: v for k, v in xgboost_hist(R).get_params().items()
                              if k in ("n_estimators", "max_depth", "learning_rate", "max_bin", "tree_method",
                                       "n_jobs", "random_state")},
                  "timing": "federated: the master's train_seconds over trees_built (median of the turns); "
                            "XGBoost and BoostClassifier: fit seconds over rounds (median of the turns)"},
        "summaries": {"plain": plain, "plain_reference": reference, **{f"paillier_{k}": s for k, s in he.items()}},
        "cpu_busy_by_others": busy,
        "data_seconds": data_seconds,
    }
    return res


def demo_case(args, key_length=2048):
    """The demo table: ``--demo-rounds`` boosting rounds and ``--demo-trees``
    forest trees, plain and Paillier (``key_length``); the figures, their
    stages per tree and whether the trees are the plain ones."""
    out = {"cpu_busy_by_others_start": BV.cpu_busy()}
    folder = BP.demo_table(os.path.join(args.workdir, "demo"))
    for mode, n in (("vertical_boost", args.demo_rounds), ("vertical", args.demo_trees)):
        runs = BP.demo_runs(folder, mode, n, key_length, script="bench_vertical_boost.py")
        he, plain = runs["paillier"], runs["plain"]
        trees = he["trees_built"]
        stages = stage_breakdown(he) if mode == "vertical_boost" else \
            {k: v / trees for k, v in BP.stage_seconds(he).items()}
        same = same_trees(os.path.join(folder, "model-plain"), os.path.join(folder, "model-paillier"))[0]
        if mode == "vertical_boost":
            out.update({f"seconds_per_tree_paillier_{key_length}": seconds_per_tree(he),
                        "seconds_per_tree_plain": seconds_per_tree(plain), "trees": trees,
                        "stage_seconds_per_tree": stages, "bytes_per_tree": he["bytes_per_tree"],
                        "identical_trees_plain_vs_paillier": same})
        else:
            out["forest"] = {f"seconds_paillier_{key_length}": he["train_seconds"],
                             "seconds_plain": plain["train_seconds"], "trees": trees,
                             "stage_seconds_per_tree": stages, "bytes_per_tree": he["bytes_per_tree"],
                             "identical_trees_plain_vs_paillier": same}
    out["cpu_busy_by_others_end"] = BV.cpu_busy()
    out["setup"] = {"rows": he["n_rows"], "columns": [15, 15], "key_length": key_length,
                    "data": "python -m fedforest demo-data (scikit-learn's breast cancer, training rows)",
                    "settings": "the product's defaults (boosting: depth 6, 255 bins; forest: max_depth None, "
                                "max_features 'sqrt', 255 bins)",
                    "command": "python experiments/bench_vertical_boost.py " + " ".join(sys.argv[1:])}
    sec, forest = out[f"seconds_per_tree_paillier_{key_length}"], out["forest"][f"seconds_paillier_{key_length}"]
    out["targets"] = {
        f"demo_seconds_per_tree_paillier_{key_length}": {"target": f"<= {TARGET_DEMO_SECONDS_PER_TREE:g}",
                                                         "met": bool(sec <= TARGET_DEMO_SECONDS_PER_TREE)},
        f"demo_forest_seconds_paillier_{key_length}": {"target": f"<= {TARGET_DEMO_FOREST_SECONDS:g}",
                                                       "met": bool(forest <= TARGET_DEMO_FOREST_SECONDS)}}
    BV.log(f"demo table, {key_length}-bit key: boosting {sec:.3f} s per tree (plain "
           f"{out['seconds_per_tree_plain']:.4f}), forest {forest:.2f} s for {out['forest']['trees']} trees "
           f"(plain {out['forest']['seconds_plain']:.2f}); stages per boosting tree "
           + ", ".join(f"{k} {v:.3f}" for k, v in out["stage_seconds_per_tree"].items()))
    return out


def demo_figures(demo, key_length=2048):
    """The demo's headline figures, as they stand at the top of the results."""
    return {f"demo_seconds_per_tree_paillier_{key_length}": demo[f"seconds_per_tree_paillier_{key_length}"],
            f"demo_forest_seconds_paillier_{key_length}": demo["forest"][f"seconds_paillier_{key_length}"],
            "demo": demo}


def targets(res, headline):
    """``{metric: (target text, met)}`` of a data set's results."""
    out = {"rounds_per_tree": (f"<= {2 * DEPTH} (2 x depth)", res["rounds_per_tree"] <= 2 * DEPTH),
           "rounds_per_tree_plain": (f"<= {2 * DEPTH} (2 x depth)", res["rounds_per_tree_plain"] <= 2 * DEPTH),
           "identical_trees_plain_vs_paillier": ("True", res["identical_trees_plain_vs_paillier"])}
    if res["he_over_plain"] is not None:
        out["he_over_plain"] = (f"<= {TARGET_HE_OVER_PLAIN:g}", res["he_over_plain"] <= TARGET_HE_OVER_PLAIN)
    if headline and res["seconds_per_tree_paillier_2048"] is not None:
        out["seconds_per_tree_paillier_2048"] = (f"<= {TARGET_SECONDS_PER_TREE_2048:g}",
                                                 res["seconds_per_tree_paillier_2048"]
                                                 <= TARGET_SECONDS_PER_TREE_2048)
    return out


def table_rows(res, goals):
    keys = ["seconds_per_tree_plain"]
    keys += [k for k in res if k.startswith("seconds_per_tree_paillier_") and res[k] is not None]
    keys += ["he_key_length", "he_over_plain", "rounds_per_tree", "rounds_per_tree_plain", "max_depth"]
    keys += [k for k in res if k.startswith(("bytes_per_tree_", "label_round_seconds_per_round_"))]
    keys += ["xgboost_hist_seconds_per_tree", "ratio_vs_xgboost_hist", "he_ratio_vs_xgboost_hist",
             "single_process_seconds_per_tree", "accuracy_fedforest", "auc_fedforest", "accuracy_xgboost_hist",
             "auc_xgboost_hist", "max_abs_proba_diff_plain_vs_single_process",
             "max_abs_proba_diff_plain_vs_paillier", "identical_trees_plain_vs_paillier"]
    return [(k, res[k], *goals.get(k, (None, None))) for k in keys]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=20, help="boosting rounds of the plain runs and XGBoost")
    ap.add_argument("--he-rounds", type=int, default=2,
                    help="boosting rounds of the Paillier runs (and of their plain reference)")
    ap.add_argument("--datasets", default="a9a,dense", help="comma-separated: a9a, dense")
    ap.add_argument("--keys", default="1024,2048", help="Paillier key lengths (below 2048: insecure_key)")
    ap.add_argument("--train-repeats", type=int, default=3,
                    help="plain federated trainings, XGBoost fits and BoostClassifier fits in turns (medians)")
    ap.add_argument("--workdir", default=None, help="party files, models and summaries "
                                                    f"(default {os.path.relpath(WORKDIR, ROOT)})")
    ap.add_argument("--out", default=None, help=f"JSON results (default {os.path.relpath(RESULT, ROOT)})")
    ap.add_argument("--smoke", action="store_true",
                    help=f"check the script in seconds: {SMOKE_TRAIN} rows, 2 rounds, a 512-bit key, one turn; "
                         "writes to a temporary folder")
    ap.add_argument("--hidden", action=argparse.BooleanOptionalAction, default=True,
                    help="also train a9a with instance_space = 'hidden' (the headline key)")
    ap.add_argument("--demo", action=argparse.BooleanOptionalAction, default=True,
                    help="also the demo table (426 rows, 15 + 15 columns): boosting and the forest")
    ap.add_argument("--demo-rounds", type=int, default=DEMO_ROUNDS, help="boosting rounds of the demo case")
    ap.add_argument("--demo-trees", type=int, default=DEMO_FOREST_TREES, help="forest trees of the demo case")
    ap.add_argument("--demo-only", action="store_true",
                    help="only the demo case: its figures in the results file are replaced, the rest stays")
    provenance.add_arguments(ap)
    args = ap.parse_args(argv)
    if args.demo_only:
        args.workdir = args.workdir or WORKDIR
        args.out = args.out or RESULT
        prov = provenance.record(args)
        with open(args.out) as fh:
            doc = json.load(fh)
        doc.update(demo_figures(demo_case(args)))
        doc["demo"]["provenance"], doc["demo"]["machine"] = prov, BV.machine_info()
        provenance.write_result(os.path.abspath(args.out), doc)
        BV.log(f"results: {args.out} (demo case only)")
        return 0
    args.datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if set(args.datasets) - {"a9a", "dense"} or not args.datasets:
        ap.error(f"--datasets: a9a and/or dense, not {args.datasets}")
    args.keys = [int(k) for k in args.keys.split(",") if k.strip()]
    if args.smoke:
        tmp = tempfile.mkdtemp(prefix="bench_vertical_boost-smoke-")
        args.rounds, args.he_rounds, args.keys, args.train_repeats = 2, 2, [512], 1
        args.workdir = args.workdir or os.path.join(tmp, "work")
        args.out = args.out or os.path.join(tmp, "bench_vertical_boost.json")
        if os.path.abspath(args.out) == RESULT:
            ap.error("--smoke does not write the results file")
        args.allow_dirty = True          # a smoke run is a check, not a result
    args.workdir = args.workdir or WORKDIR
    args.out = args.out or RESULT
    prov = provenance.record(args)       # refuses uncommitted code unless --allow-dirty
    sizes = {"a9a": (A9A_TRAIN, A9A_TEST), "dense": (DENSE_TRAIN, DENSE_TEST)}
    if args.smoke:
        sizes = {d: (SMOKE_TRAIN, SMOKE_TEST) for d in sizes}

    t_all = time.perf_counter()
    BV.log("warm-up: tiny plain and Paillier-512 jobs, XGBoost and BoostClassifier fits (not timed)")
    warm = os.path.join(args.workdir, "warmup")
    shutil.rmtree(warm, ignore_errors=True)
    X, y, names = a9a_like(400, seed=SEED + 1)
    cut = sum(CARDINALITIES[:SPLIT_ATTRIBUTE])
    write_parties(warm, (X, y), (X[:10], y[:10]), names, [names[:cut], names[cut:]])
    train(warm, "plain", 2, depth=3)
    train(warm, "paillier", 1, privacy="paillier", key_length=512, depth=3)
    xgboost_hist(2, 3).fit(X, y)
    boost_single_process(2, 3).fit(X, y)

    fixed = fixed_cost(args)
    factor_bits = 512 if args.smoke else 2048
    randomness = randomness_per_factor(factor_bits)
    short_factor = randomness[f"randomness_seconds_per_factor_{factor_bits}"]
    BV.log(f"label holder's randomness, {factor_bits}-bit key: short {short_factor * 1e3:.3f} ms per factor "
           f"(target <= {TARGET_FACTOR_SECONDS * 1e3:g} ms at 2048 bits), full "
           f"{randomness[f'randomness_seconds_per_factor_{factor_bits}_full'] * 1e3:.3f} ms")
    results = {}
    for name in args.datasets:
        results[name] = run_dataset(name, args, *sizes[name])
    headline = "a9a" if "a9a" in results else args.datasets[0]
    for name, res in results.items():
        goals = targets(res, name == "a9a")
        res["targets"] = {k: {"target": t, "met": bool(ok)} for k, (t, ok) in goals.items()}
        n_train = res["setup"]["train_rows"]
        BV.log("")
        BV.log(f"vertical boosting, {name}: {n_train:,} x {res['setup']['n_features']}, 2 parties + master, "
               f"depth {DEPTH}, {MAX_BINS} bins; plain {res['rounds']} rounds, Paillier {res['he_rounds']} "
               f"rounds ({', '.join(map(str, args.keys))}-bit keys)")
        BV.print_table(table_rows(res, goals))
        if max(res["cpu_busy_by_others"].values()) > BV.BUSY_WARN:
            BV.log("note: other processes kept the CPU busy (" + ", ".join(
                f"{k} {v:.0%}" for k, v in res["cpu_busy_by_others"].items()) + "): timings are not clean")

    demo = demo_case(args, 512 if args.smoke else 2048) if args.demo else None
    doc = {k: v for k, v in results[headline].items() if k not in ("summaries", "setup")}
    if demo is not None:
        doc.update(demo_figures(demo, 512 if args.smoke else 2048))
    doc.update(randomness)
    if not args.smoke:
        doc["targets"] = dict(doc.get("targets", {}), randomness_seconds_per_factor_2048={
            "target": f"<= {TARGET_FACTOR_SECONDS:g}", "met": bool(short_factor <= TARGET_FACTOR_SECONDS)})
    doc.update({"headline_dataset": headline, **results, "fixed_cost_per_level": fixed,
                "published_peers": PUBLISHED_PEERS,
                "smoke": bool(args.smoke), "provenance": prov, "machine": BV.machine_info(),
                "bench_seconds": time.perf_counter() - t_all})
    doc["machine"]["loadavg_end"] = list(os.getloadavg())
    provenance.write_result(os.path.abspath(args.out), doc)
    BV.log(f"\nresults: {args.out}  (bench total {doc['bench_seconds']:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
