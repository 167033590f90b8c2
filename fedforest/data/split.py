"""Splitting one table into per-party files by columns (for trials and tests)."""
import os

import numpy as np

from ..errors import InputError
from .io import read_table


def split_columns(columns, n_parties, rng):
    """Random disjoint column groups, as equal in size as possible."""
    if n_parties < 1:
        raise InputError("parties", f"must be >= 1, got {n_parties}")
    if len(columns) < n_parties:
        raise InputError("parties", f"{n_parties} parties but only {len(columns)} feature columns: "
                                    "some party would get an empty partition")
    order = rng.permutation(len(columns))
    return [sorted((columns[i] for i in part), key=columns.index)
            for part in np.array_split(order, n_parties)]


def split_file(path, n_parties, id_column, label_column, out_dir, label_party=1, test_size=0.0, seed=0,
               na_values=None, categorical_columns=None):
    df = read_table(path, id_column, "input", require_id=False, na_values=na_values,
                    categorical_columns=categorical_columns, label_column=label_column)
    if label_column not in df.columns:
        raise InputError("input", f"{path!r} has no label column {label_column!r}")
    if id_column not in df.columns:
        df.insert(0, id_column, [str(i) for i in range(1, len(df) + 1)])
    if not 1 <= label_party <= n_parties:
        raise InputError("label_party", f"must be in 1..{n_parties}, got {label_party}")
    rng = np.random.default_rng(seed)
    features = [c for c in df.columns if c not in (id_column, label_column)]
    groups = split_columns(features, n_parties, rng)
    parts = {"train": df}
    if test_size:
        if not 0 < test_size < 1:
            raise InputError("test_size", f"must be in (0, 1), got {test_size}")
        test = rng.random(len(df)) < test_size
        parts = {"train": df[~test], "test": df[test]}
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name, frame in parts.items():
        for p, cols in enumerate(groups, start=1):
            keep = [id_column] + cols + ([label_column] if p == label_party else [])
            dest = os.path.join(out_dir, f"{name}-party{p}.csv")
            frame[keep].to_csv(dest, index=False)
            paths.append(dest)
    return paths


def split_rows_file(path, n_clients, label_column, out_dir, scheme="iid", alpha=0.5, test_size=0.0,
                    seed=0, id_column="id", na_values=None, categorical_columns=None):
    """Per-client row files ``client<k>.csv`` (and ``client<k>-test.csv`` with
    a random ``test_size`` share of each client's rows) from one table.  Every
    file keeps the ``id_column`` (created from row numbers 1..n when the table
    lacks it), so predictions can be joined with the true labels."""
    from .partition import dirichlet_partition, iid_partition
    df = read_table(path, id_column, "input", require_id=False, na_values=na_values,
                    categorical_columns=categorical_columns, label_column=label_column)
    if label_column not in df.columns:
        raise InputError("input", f"{path!r} has no label column {label_column!r}")
    if id_column not in df.columns:
        df.insert(0, id_column, [str(i) for i in range(1, len(df) + 1)])
    if test_size and not 0 < test_size < 1:
        raise InputError("test_size", f"must be in (0, 1), got {test_size}")
    y = df[label_column].astype(str).to_numpy()
    parts = (iid_partition(y, n_clients, seed) if scheme == "iid"
             else dirichlet_partition(y, n_clients, alpha, seed))
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for k, rows in enumerate(parts, start=1):
        test = np.zeros(rows.size, dtype=bool)
        if test_size:
            test[rng.permutation(rows.size)[:max(1, int(round(test_size * rows.size)))]] = True
        train_path = os.path.join(out_dir, f"client{k}.csv")
        df.iloc[rows[~test]].to_csv(train_path, index=False)
        paths.append(train_path)
        if test_size:
            test_path = os.path.join(out_dir, f"client{k}-test.csv")
            df.iloc[rows[test]].to_csv(test_path, index=False)
            paths.append(test_path)
    return paths
