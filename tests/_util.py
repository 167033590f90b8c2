"""Shared helpers for the vertical-forest tests."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd

from fedforest.vertical import model_files as model_io
from fedforest.tree.growth import merge_partials

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.dirname(sys.executable)
TREE_KEYS = ("children_left", "children_right", "feature", "threshold", "missing_left", "value")


def job_message(mode="vertical", command="train", table=None, label_column="y", **changes):
    """A well-formed network job message of a well-behaved master (its mode's
    settings ``table``), then ``changes`` (a key set to ``...`` is removed)."""
    from fedforest.federation.config import resolve
    from fedforest.federation.network import shared_settings
    from fedforest.version import __version__
    table = table or {"n_estimators": 3, "max_depth": 3}
    cfg = resolve(None, dict(mode=mode, task="classification", label_column=label_column, data=["a"], **table))
    settings = shared_settings(cfg)
    for k, v in changes.items():
        if v is ...:
            settings.pop(k, None)
        else:
            settings[k] = v
    return {"op": "job", "command": command, "version": __version__, "mode": mode, "rank": 1, "size": 2,
            "names": ["master", "p1"], "settings": settings}


def make_table(task, n_classes, seed, n=300, n_features=9, nan_share=0.05):
    """A synthetic table with ties (values rounded) and missing cells."""
    from sklearn.datasets import make_classification, make_regression
    if task == "classification":
        X, y = make_classification(n, n_features, n_informative=5, n_classes=n_classes,
                                   n_clusters_per_class=1, random_state=seed)
    else:
        X, y = make_regression(n, n_features, n_informative=5, noise=5.0, random_state=seed)
    rng = np.random.default_rng(seed)
    X = np.round(X, 2)  # ties in values exercise the tie rules
    X[rng.random(X.shape) < nan_share] = np.nan
    return X, y


def party_frames(X, y, groups, label_party=0, ids=None, label="y"):
    """One DataFrame per party: id + its columns (+ the label on ``label_party``)."""
    ids = [f"row-{i:05d}" for i in range(X.shape[0])] if ids is None else ids
    frames = []
    for p, cols in enumerate(groups):
        d = pd.DataFrame({f"f{c}": X[:, c] for c in cols})
        d.insert(0, "id", ids)
        if p == label_party:
            d[label] = y
        frames.append(d)
    return frames


def complete_trees(model_dir, n_parties, offsets):
    """The complete trees as the union of the master's and parties' saved partial
    trees (with encrypted labels the leaf values come from the label holder's)."""
    mdir = model_io.party_dir(model_dir, 0)
    manifest = model_io.read_manifest(mdir)
    n = manifest["n_trees"]
    master = model_io.read_trees(mdir, n)
    parts = [model_io.read_trees(model_io.party_dir(model_dir, r), n) for r in range(1, n_parties + 1)]
    if "value" not in master[0]:
        holder = parts[manifest["label_party"] - 1]
        master = [dict(m, value=h["value"]) for m, h in zip(master, holder)]
    return [merge_partials(master[t], [p[t] for p in parts], offsets) for t in range(n)]


def assert_same_trees(trees, reference):
    assert len(trees) == len(reference)
    for t, (a, b) in enumerate(zip(trees, reference)):
        for k in TREE_KEYS:
            assert np.array_equal(a[k], b[k], equal_nan=True), f"tree {t}: {k} differs"


def random_groups(n_features, n_parties, rng):
    """A random split of the columns into ``n_parties`` non-empty groups (random order inside)."""
    perm = rng.permutation(n_features)
    cuts = np.sort(rng.choice(np.arange(1, n_features), n_parties - 1, replace=False))
    return [list(g) for g in np.split(perm, cuts)]


def find_mpiexec():
    """The ``mpiexec`` beside the running interpreter (the one the mpi4py/mpich wheels
    install), else the first on ``PATH``; a clear error if there is none."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("mpiexec")
    if found:
        return found
    raise RuntimeError(f"no mpiexec found: neither {beside} nor one on PATH; install an MPI "
                       "(e.g. `pip install mpich` in this environment) to run the MPI tests")


def mpirun(n_ranks, args, timeout=240, env=None, cwd=ROOT):
    """Run ``python -m fedforest <args>`` under mpiexec (see ``find_mpiexec``); returns
    CompletedProcess."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    cmd = [find_mpiexec(), "-n", str(n_ranks), sys.executable, "-m", "fedforest"] + list(args)
    return subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


def write_job(folder, frames, task, n_estimators=4, fmt="csv", extra="", forest=""):
    """Party files + a job TOML in ``folder``; returns the TOML path."""
    paths = []
    for p, f in enumerate(frames, start=1):
        path = os.path.join(folder, f"party{p}.{fmt}")
        if fmt == "csv":
            f.to_csv(path, index=False)
        elif fmt == "parquet":
            f.to_parquet(path)
        elif fmt == "npz":
            np.savez(path, **{c: (f[c].to_numpy().astype(str) if pd.api.types.is_string_dtype(f[c])
                                  else f[c].to_numpy()) for c in f.columns})
        paths.append(os.path.basename(path))
    toml = os.path.join(folder, "job.toml")
    with open(toml, "w") as fh:
        fh.write(f'[job]\ntask = "{task}"\ndata = {paths!r}\nlabel_column = "y"\n'
                 f'model_dir = "model"\nprogress = false\n{extra}\n'
                 f'[forest]\nn_estimators = {n_estimators}\nrandom_state = 7\n{forest}'.replace("'", '"'))
    return toml


def client_files(df, folder, n_clients, order=None, test_name="t{k}.csv", keep=None):
    """Deal the rows of ``df`` (in ``order``, default file order) to
    ``n_clients`` horizontal clients in contiguous shares; ``keep(k, part)``
    may drop some of client ``k``'s rows.  Each client's first 75 % go to
    ``c<k>.csv`` in ``folder``, the rest to its test file (``test_name``).
    Returns the training and test paths."""
    paths, tests = [], []
    rows_of = np.arange(len(df)) if order is None else order
    for k, rows in enumerate(np.array_split(rows_of, n_clients), start=1):
        part = df.iloc[rows]
        if keep is not None:
            part = keep(k, part)
        cut = int(len(part) * 0.75)
        paths.append(str(folder / f"c{k}.csv"))
        tests.append(str(folder / test_name.format(k=k)))
        part.iloc[:cut].to_csv(paths[-1], index=False)
        part.iloc[cut:].to_csv(tests[-1], index=False)
    return paths, tests
