"""Reading one party's table and encoding its feature columns.

Supported files: ``.csv`` (``NA``/empty = missing), ``.parquet``, ``.npy``
(structured array with named fields) and ``.npz`` (one array per column).
Feature columns are numeric, boolean or text.  Text columns are
ordinal-encoded per party: categories are sorted and numbered 0..n-1 at
training time and stored in that party's model; at prediction a category not
seen in training is treated as missing.
"""
import os

import numpy as np
import pandas as pd

from ..errors import InputError


def read_table(path, id_column, what, require_id=True):
    """One table as a DataFrame.  The ``id_column`` (if any) is read as text, so
    ``007`` stays ``007``; it must exist unless ``require_id`` is False."""
    if not path:
        raise InputError(what, "no data file given for this party")
    if not os.path.isfile(path):
        raise InputError(what, f"file {path!r} does not exist")
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext in (".csv", ".txt", ".tsv"):
            df = pd.read_csv(path, sep="\t" if ext == ".tsv" else ",",
                             dtype={id_column: str} if id_column else None,
                             na_values=["NA", ""], keep_default_na=False)
        elif ext in (".parquet", ".pq"):
            try:
                import pyarrow  # noqa: F401  (pandas' Parquet engine)
            except ImportError:
                raise InputError(what, f"{path!r}: reading Parquet needs the package 'pyarrow': "
                                       "pip install 'fedforest[parquet]'") from None
            df = pd.read_parquet(path)
        elif ext == ".npy":
            arr = np.load(path, allow_pickle=False)
            if arr.dtype.names is None:
                raise InputError(what, f"{path!r}: a .npy file must hold a structured array with named columns")
            df = pd.DataFrame({n: arr[n] for n in arr.dtype.names})
        elif ext == ".npz":
            with np.load(path, allow_pickle=False) as z:
                df = pd.DataFrame({n: z[n] for n in z.files})
        else:
            raise InputError(what, f"{path!r}: unsupported file type {ext!r} (use .csv, .parquet, .npy or .npz)")
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file
        raise InputError(what, f"cannot read {path!r}: {exc}") from None
    if id_column is not None and id_column in df.columns:
        df[id_column] = df[id_column].map(_id_text, na_action="ignore")
    if require_id and id_column is not None and id_column not in df.columns:
        raise InputError(what, f"{path!r} has no ID column {id_column!r}")
    if df.shape[0] == 0:
        raise InputError(what, f"{path!r} has no rows")
    return df


def _id_text(v):
    """An ID as text (Parquet and NumPy files may hold numeric IDs)."""
    return v if isinstance(v, str) else _number_text(v)


def check_ids(ids, what):
    ids = pd.Series(ids)
    if ids.isna().any():
        raise InputError(what, f"{int(ids.isna().sum())} rows have no ID")
    text = ids.astype(str)
    dup = text.duplicated(keep="first")
    if dup.any():
        first = int(np.flatnonzero(dup.to_numpy())[0])
        raise InputError(what, f"{int(dup.sum())} duplicate IDs (first repeat at data row {first + 1})")
    return text.to_numpy()


def _number_text(v):
    v = v.item() if hasattr(v, "item") else v
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _is_text(col):
    values = col.dropna()
    return all(isinstance(v, str) for v in values)


def encode_features(df, columns, what, categories=None):
    """Float64 matrix of ``columns``; text columns become ordinal codes.

    With ``categories`` (from a trained model) the stored mapping is used and
    unseen categories become NaN.  Returns ``(X, categories, n_unseen)``.
    """
    fit = categories is None
    categories = {} if fit else categories
    X = np.empty((df.shape[0], len(columns)), dtype=np.float64)
    n_unseen = 0
    for j, name in enumerate(columns):
        col = df[name]
        kind = col.dtype.kind
        if name in categories and kind in "iuf":
            # a text column of training whose new values all look like numbers
            col = col.map(_number_text, na_action="ignore").astype(object)
            kind = "O"
        if kind == "O" and col.dropna().map(lambda v: isinstance(v, (bool, np.bool_))).all() \
                and col.notna().any():
            col = col.map(float, na_action="ignore").astype(np.float64)  # booleans with gaps
            kind = "f"
        if kind in "iuf":
            values = col.to_numpy(dtype=np.float64, na_value=np.nan)
            if np.isinf(values).any():
                raise InputError(what, f"column {name!r} contains infinite values")
            if name in categories and not np.isnan(values).all():
                # (an all-empty column reads as numeric: it is simply all missing)
                raise InputError(what, f"column {name!r} was text in training and is numeric now")
        elif kind == "b":
            values = col.to_numpy(dtype=np.float64)
        elif kind in "OUST" or isinstance(col.dtype, pd.CategoricalDtype) or pd.api.types.is_string_dtype(col):
            col = col.astype(object).where(col.notna(), None)
            if not _is_text(col):
                kinds = sorted({type(v).__name__ for v in col.dropna()})
                raise InputError(what, f"column {name!r} cannot be encoded: it mixes value types {kinds}")
            if fit:
                categories[name] = sorted(set(col.dropna()))
            elif name not in categories:
                raise InputError(what, f"column {name!r} was numeric in training and is text now")
            lookup = {c: float(i) for i, c in enumerate(categories[name])}
            mapped = col.map(lambda v: np.nan if v is None else lookup.get(v, -1.0))
            values = mapped.to_numpy(dtype=np.float64, copy=True)
            unseen = values == -1.0
            n_unseen += int(unseen.sum())
            values[unseen] = np.nan
        else:
            raise InputError(what, f"column {name!r} cannot be encoded (dtype {col.dtype})")
        X[:, j] = values
    return X, categories, n_unseen
