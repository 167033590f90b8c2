"""Reading one party's table and encoding its feature columns.

Supported files: ``.csv`` (``NA``/empty = missing), ``.parquet``, ``.npy``
(structured array with named fields) and ``.npz`` (one array per column).
Feature columns are numeric, boolean or text.  Text columns are
ordinal-encoded per party: categories are sorted and numbered 0..n-1 at
training time and stored in that party's model; at prediction a category not
seen in training is treated as missing.

A column is text when any of its values is not a number, unless it looks like
a numeric column with a few stray tokens (:func:`check_mistyped_columns`):
that is an error asking the user to declare the tokens missing (job setting
``na_values``) or the column categorical (``categorical_columns``).
"""
import math
import os
import threading

import numpy as np

from ..errors import InputError


class _Pandas:
    """pandas, imported on first use: a rank that reads no table (the
    vertical master of most jobs) starts without it (~0.4 s of CPU)."""

    def __getattr__(self, name):
        import pandas
        return getattr(pandas, name)


pd = _Pandas()

# the mistyped-column rule (docs/config.md, "How columns are typed")
MAX_STRAY_TOKENS = 3        # at most this many distinct non-numeric values ...
MIN_NUMERIC_SHARE = 0.9     # ... and numbers are >= 90% of the distinct values or of the cells
NA_TEXTS = ("NA", "")       # what a CSV cell means "missing" by default
SEPARATORS = ((";", "semicolon"), ("\t", "tab"), ("|", "pipe"), (",", "comma"))

# numpy parses every .npy header with ast.literal_eval, and CPython 3.11's parser
# is not safe against parallel threads ("SystemError: AST constructor recursion
# depth mismatch"); the parties of an in-process job read their files on threads
_NPY_LOCK = threading.Lock()


def read_npz(path):
    """Every array of an ``.npz`` file (no pickles), read under a process-wide lock."""
    with _NPY_LOCK, np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def read_npy(path):
    """The array of an ``.npy`` file (no pickles), read under the same lock."""
    with _NPY_LOCK:
        return np.load(path, allow_pickle=False)

def read_table(path, id_column, what, require_id=True, na_values=None, categorical_columns=None,
               label_column=None, check_types=True, usecols=None):
    """One table as a DataFrame.  The ``id_column`` (if any) is read as text, so
    ``007`` stays ``007``; it must exist unless ``require_id`` is False.

    ``na_values``: texts that mean "missing" (the job setting of that name);
    ``categorical_columns``: columns read as text whatever they hold;
    ``label_column``: not a feature.  With ``check_types`` a feature column
    of numbers with a few stray tokens is refused (:func:`check_mistyped_columns`).
    ``usecols``: the positions of the columns to read (CSV files only)."""
    na_values = list(na_values or ())
    categorical_columns = list(categorical_columns or ())
    if not path:
        raise InputError(what, "no data file given for this party")
    if not os.path.isfile(path):
        raise InputError(what, f"file {path!r} does not exist")
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext in (".csv", ".txt", ".tsv"):
            sep = "\t" if ext == ".tsv" else ","
            df = pd.read_csv(path, sep=sep, dtype={id_column: str} if id_column else None,
                             na_values=list(NA_TEXTS) + na_values, keep_default_na=False,
                             usecols=usecols)
            _check_separator(df, path, what, sep)
        elif ext in (".parquet", ".pq"):
            try:
                import pyarrow  # noqa: F401  (pandas' Parquet engine)
            except ImportError:
                raise InputError(what, f"{path!r}: reading Parquet needs the package 'pyarrow': "
                                       "pip install 'fedforest[parquet]'") from None
            df = pd.read_parquet(path)
        elif ext == ".npy":
            arr = read_npy(path)
            if arr.dtype.names is None:
                raise InputError(what, f"{path!r}: a .npy file must hold a structured array with named columns")
            df = pd.DataFrame({n: arr[n] for n in arr.dtype.names})
        elif ext == ".npz":
            df = pd.DataFrame(read_npz(path))
        else:
            raise InputError(what, f"{path!r}: unsupported file type {ext!r} (use .csv, .parquet, .npy or .npz)")
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file
        raise InputError(what, f"cannot read {path!r}: {exc}") from None
    if ext not in (".csv", ".txt", ".tsv") and na_values:
        df = _apply_na_values(df, na_values, id_column)
    if id_column is not None and id_column in df.columns and ext not in (".csv", ".txt", ".tsv"):
        # (a CSV's IDs are read as text already)
        df[id_column] = df[id_column].map(_id_text, na_action="ignore")
    if require_id and id_column is not None and id_column not in df.columns:
        raise InputError(what, f"{path!r} has no ID column {id_column!r}")
    if df.shape[0] == 0:
        raise InputError(what, f"{path!r} has no rows")
    for name in categorical_columns:
        if name in df.columns and name not in (id_column, label_column) and df[name].dtype.kind in "iufb":
            df[name] = df[name].map(_number_text, na_action="ignore").astype(object)
    if check_types:
        check_mistyped_columns(df, path, what, id_column,
                               skip={id_column, label_column} | set(categorical_columns))
    return df


def _check_separator(df, path, what, sep):
    """A CSV file read as one column whose header holds another separator."""
    if df.shape[1] != 1:
        return
    header = str(df.columns[0])
    for char, name in SEPARATORS:
        if char != sep and char in header:
            expected = "tab-separated (.tsv)" if sep == "\t" else "comma-separated"
            raise InputError(what, f"{path!r} has a single column {header[:60]!r}: its values look "
                                   f"separated by {name}s ({char!r}), but fedforest reads {expected} "
                                   f"files; save it with {'tabs' if sep == chr(9) else 'commas'} "
                                   "between the values")


def _apply_na_values(df, na_values, id_column):
    """``na_values`` in a Parquet or NumPy table: matching text cells become
    missing, and a text column then holding only numbers becomes numeric (as
    a CSV reader makes it)."""
    tokens = set(na_values)
    for name in df.columns:
        col = df[name]
        if name == id_column or not (col.dtype.kind == "O" or pd.api.types.is_string_dtype(col)):
            continue
        hit = col.map(lambda v: isinstance(v, str) and v in tokens).to_numpy(dtype=bool)
        if not hit.any():
            continue
        col = col.astype(object).where(~hit, None)
        rest = col.dropna()
        if len(rest) and all(_is_number(v) for v in rest):
            col = pd.to_numeric(col.map(lambda v: v if v is None else float(v)))
        df[name] = col
    return df


def _is_number(v):
    """A value that reads as a finite number (a number, or a text such as "12" or "-0.5")."""
    if isinstance(v, (bool, np.bool_)):
        return False
    if isinstance(v, (int, float, np.integer, np.floating)):
        return math.isfinite(float(v))
    if isinstance(v, str) and "_" not in v:       # float() reads "1_000"; a CSV reader does not
        try:
            return math.isfinite(float(v))
        except ValueError:
            return False
    return False


def check_mistyped_columns(df, path, what, id_column=None, skip=()):
    """Refuse a column of numbers with a few stray tokens, which would
    otherwise silently become a text column (its numbers sorted as texts).

    A text column is refused when, among its non-missing values, at most
    :data:`MAX_STRAY_TOKENS` distinct values are not numbers, and the numbers
    make up at least :data:`MIN_NUMERIC_SHARE` of its distinct values or of
    its cells.  The error names the file, the column, the tokens and the first
    rows holding them, and the two ways out: ``na_values`` or
    ``categorical_columns``."""
    for name in df.columns:
        if name in skip:
            continue
        col = df[name]
        if not (col.dtype.kind == "O" or pd.api.types.is_string_dtype(col)):
            continue
        values = col.dropna()
        if values.empty:
            continue
        distinct = pd.unique(values)
        if len(distinct) < 2:
            continue
        tokens = []
        for v in distinct:          # stops at the first token too many (a text column)
            if not _is_number(v):
                tokens.append(v)
                if len(tokens) > MAX_STRAY_TOKENS:
                    break
        n_numbers = len(distinct) - len(tokens)
        if not tokens or len(tokens) > MAX_STRAY_TOKENS or n_numbers == 0:
            continue
        token_set = set(tokens)
        is_token = values.isin(token_set).to_numpy(dtype=bool)
        cell_share = 1.0 - is_token.sum() / len(values)
        if n_numbers / len(distinct) < MIN_NUMERIC_SHARE and cell_share < MIN_NUMERIC_SHARE:
            continue
        raise InputError(what, _mistyped_message(df, path, name, tokens, values.index[is_token], id_column))


def _mistyped_message(df, path, name, tokens, token_index, id_column):
    tokens = sorted(tokens, key=str)
    shown = ", ".join(repr(t) for t in tokens)
    positions = [df.index.get_loc(i) for i in token_index[:5]]
    plural = "s" if len(token_index) > 1 else ""
    more = ", ..." if len(token_index) > 5 else ""
    where = f"{'first ' if more else ''}at data row{plural} {', '.join(str(p + 1) for p in positions)}{more}"
    if id_column is not None and id_column in df.columns:
        ids = ", ".join(repr(str(df[id_column].iloc[p])) for p in positions)
        where += f"; ID{plural} {ids}{more}"
    listed = ", ".join(f'"{t}"' for t in tokens)
    return (f"{path!r}: column {name!r} holds numbers and {len(tokens)} non-numeric "
            f"value{'s' if len(tokens) > 1 else ''} {shown} ({where}); read as text its "
            f"numbers would be sorted as texts.  If {'these mark' if len(tokens) > 1 else 'it marks'} "
            f"missing values, set na_values = [{listed}] in the [job] table (or --na-values); if the "
            f"column is categorical, list it in categorical_columns = [\"{name}\"] "
            f"(or --categorical-columns)")


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


def _all_booleans(col):
    """Every non-missing value a boolean (at least one), as a column of
    booleans with gaps holds; the first value decides most columns."""
    values = col.dropna()
    if values.empty or not isinstance(values.iloc[0], (bool, np.bool_)):
        return False
    return bool(values.map(lambda v: isinstance(v, (bool, np.bool_))).all())


def _text_array(col):
    """A text column as a pyarrow string array (missing: null), or None when a
    value is not a text.  No Python object per cell is made."""
    import pyarrow as pa
    try:
        if isinstance(col.dtype, pd.CategoricalDtype):
            col = col.astype(object)
        return pa.array(col, type=pa.string(), from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return None


def encode_categories(texts):
    """The categories of a text column (pyarrow strings): its distinct
    texts, sorted as Python sorts them (by code point)."""
    import pyarrow.compute as pc
    return sorted(pc.unique(texts).drop_null().to_pylist())


def encode_texts(texts, categories):
    """Ordinal codes (float64) of a text column in ``categories`` (missing and
    unseen texts: NaN) and the number of unseen texts."""
    import pyarrow as pa
    import pyarrow.compute as pc
    codes = pc.index_in(texts, value_set=pa.array(list(categories), type=pa.string()))
    values = codes.to_numpy(zero_copy_only=False).astype(np.float64)   # nulls: NaN
    return values, int(codes.null_count - texts.null_count)


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
        if kind == "O" and _all_booleans(col):
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
            texts = _text_array(col)
            if texts is None:
                col = col.astype(object).where(col.notna(), None)
                kinds = sorted({type(v).__name__ for v in col.dropna()})
                raise InputError(what, f"column {name!r} cannot be encoded: it mixes value types {kinds}")
            if fit:
                categories[name] = encode_categories(texts)
            elif name not in categories:
                raise InputError(what, f"column {name!r} was numeric in training and is text now")
            values, unseen = encode_texts(texts, categories[name])
            n_unseen += unseen
        else:
            raise InputError(what, f"column {name!r} cannot be encoded (dtype {col.dtype})")
        X[:, j] = values
    return X, categories, n_unseen
