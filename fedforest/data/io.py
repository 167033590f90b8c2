"""Reading one party's table and encoding its feature columns.

Supported files: ``.csv`` (``NA``/empty = missing), ``.parquet``, ``.npy``
(structured array with named fields) and ``.npz`` (one array per column).
Feature columns are numeric, boolean or text.  Text columns are
ordinal-encoded per party: categories are sorted and numbered 0..n-1 at
training time and stored in that party's model; at prediction a category not
seen in training is treated as missing.

A column is text when any of its values is not a number, unless it is
mostly numbers (:func:`check_mistyped_columns`): that is an error naming its
non-numeric values and asking the user to declare them missing (job setting
``na_values``) or the column categorical (``categorical_columns``).

A label cell is missing when it is empty or spelled as pandas spells a
missing value by default (``nan``, ``NaN``, ``NA``, ``null``, ...:
:data:`LABEL_NA_TEXTS`) or as one of the job's ``na_values``: the table
reader makes it missing, and training refuses it (:func:`check_labels`),
never reading it as a class.
"""
import json
import math
import os
import sys
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

# the mistyped-column rule (docs/config.md, "How columns are typed"): a text column is
# mostly numbers when numbers are at least half of its non-missing cells, or at
# least 90% of its distinct non-missing values (a numeric column whose gaps are
# mostly marked by a token)
MIN_NUMBER_CELLS = 0.5
MIN_NUMBER_VALUES = 0.9
SHOWN_TOKENS = 10           # the non-numeric values a refusal lists (the most frequent)
SHOWN_ROWS = 5              # the rows a refusal names
NA_TEXTS = ("NA", "")       # what a CSV cell means "missing" by default
#: what a label cell means "missing" besides the job's na_values: pandas'
#: default missing-value texts (``pandas.read_csv``'s ``keep_default_na``)
LABEL_NA_TEXTS = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
                  "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null")
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
    ``label_column``: not a feature; its cells missing in any spelling are
    missing (:func:`labels_with_gaps`).  With ``check_types`` a text feature
    column that is mostly numbers is refused (:func:`check_mistyped_columns`).
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
    if label_column is not None and label_column in df.columns:
        df[label_column] = labels_with_gaps(df[label_column], na_values)
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


def label_missing(values, na_values=()):
    """Which cells of a label column (a Series or an array) are missing: no
    value, NaN, or a text of :data:`LABEL_NA_TEXTS` or ``na_values``."""
    col = values if isinstance(values, pd.Series) else pd.Series(np.asarray(values), copy=False)
    missing = col.isna().to_numpy(dtype=bool, copy=True)
    if col.dtype.kind in "OUS" or pd.api.types.is_string_dtype(col):
        missing |= col.isin(set(LABEL_NA_TEXTS) | {str(t) for t in na_values}).to_numpy(dtype=bool)
    return missing


def labels_with_gaps(col, na_values=()):
    """A label column (Series) whose cells missing in any spelling
    (:func:`label_missing`) hold no value; a column then holding only
    numbers is numeric, as a CSV reader types it."""
    hit = label_missing(col, na_values) & col.notna().to_numpy(dtype=bool)
    if not hit.any():
        return col
    col = col.astype(object).where(~hit, None)
    rest = col.dropna()
    if len(rest) and all(_is_number(v) for v in rest):
        col = pd.to_numeric(col.map(lambda v: v if v is None else float(v)))
    return col


def check_labels(y, what, label_column, ids=None, na_values=()):
    """Refuse training labels that are missing in any spelling
    (:func:`label_missing`: empty, ``nan``, ``NaN``, ``NA``, ``null``, ...,
    or one of ``na_values``), all counted together, naming the first rows
    (data row numbers, 1 = the first row after the header).  Their IDs
    (``ids``: the IDs, or a function of row positions giving them) are
    printed here (:func:`say_row_ids`), not put in the error, which a party
    sends to the master.  A missing label is never a class."""
    missing = label_missing(y, na_values)
    n = int(missing.sum())
    if not n:
        return
    rows = np.flatnonzero(missing)[:SHOWN_ROWS]
    if ids is not None:
        say_row_ids(what, f"label column {label_column!r}, no label", rows,
                    ids(rows) if callable(ids) else [ids[r] for r in rows])
    raise InputError(what, f"label column {label_column!r}: {n} row{'s' if n > 1 else ''} "
                           f"{'have' if n > 1 else 'has'} no label ({_at_rows(rows, n, ids is not None)}); "
                           "a label cell that is empty, NA, nan, NaN, null, None, N/A or another of "
                           "pandas' missing-value texts, or one of na_values, is missing, never a class: "
                           f"give {'these rows their labels' if n > 1 else 'this row its label'} or remove "
                           f"{'them' if n > 1 else 'it'}")


def _at_rows(rows, n, with_ids):
    """"at data rows 4, 18" (the first :data:`SHOWN_ROWS` of ``n`` rows, 1 =
    the first row after the header), and where their IDs are."""
    plural = "s" if n > 1 else ""
    more = ", ..." if n > len(rows) else ""
    text = f"{'first ' if more else ''}at data row{plural} {', '.join(str(r + 1) for r in rows)}{more}"
    if with_ids:
        text += f"; {'their IDs are' if len(rows) > 1 else 'its ID is'} printed where the file was read"
    return text


def say_row_ids(what, about, rows, ids, stream=None):
    """Print the IDs of the data rows an error names (``rows``: positions,
    ``ids``: their IDs) on this process's own standard error.  A party's
    IDs stay with it: its error message, which it sends to the master,
    names data rows only."""
    print(f"{what}: IDs of data row{'s' if len(rows) > 1 else ''} {', '.join(str(r + 1) for r in rows)} "
          f"({about}): {', '.join(repr(str(i)) for i in ids)} (printed only here, where the file was read)",
          file=stream or sys.stderr, flush=True)


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


NUMBER_TEXT = r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"   # a number as a CSV reader reads one


def _value_kinds(col):
    """What the mistyped-column rule counts in a column: ``(tokens, cells
    of each token, number cells, non-missing cells, distinct numbers,
    distinct non-missing values)``, tokens being the distinct non-missing
    values that are not numbers (:func:`_is_number`).  A column of texts is
    classified by pyarrow (:data:`NUMBER_TEXT`, then finiteness): no Python
    call per cell or per number; other values one by one."""
    import pyarrow as pa
    import pyarrow.compute as pc
    texts = _text_array(col)
    if texts is None:
        counts = col.dropna().value_counts()
        distinct = counts.index.to_numpy(dtype=object)
        counts = counts.to_numpy(dtype=np.int64)
        number = np.array([_is_number(v) for v in distinct], dtype=bool)
        tokens = distinct[~number].tolist()
    else:
        found = pc.value_counts(texts.drop_null() if texts.null_count else texts)
        distinct, counts = found.field("values"), found.field("counts").to_numpy().astype(np.int64)
        number = pc.match_substring_regex(distinct, NUMBER_TEXT).to_numpy(zero_copy_only=False).astype(bool)
        if number.any():
            at = pa.array(np.flatnonzero(number))
            try:
                values = pc.cast(pc.utf8_trim_whitespace(distinct.take(at)), pa.float64())
                number[at.to_numpy()] = np.isfinite(values.to_numpy(zero_copy_only=False))   # 1e999: no number
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                number[at.to_numpy()] = [_is_number(v) for v in distinct.take(at).to_pylist()]
        tokens = distinct.filter(pa.array(~number)).to_pylist()
    n_numbers = int(number.sum())
    return tokens, counts[~number], int(counts[number].sum()), int(counts.sum()), n_numbers, number.size


def mostly_numbers(n_number_cells, n_cells, n_number_values, n_values):
    """The mistyped-column rule: numbers make up at least
    :data:`MIN_NUMBER_CELLS` of the non-missing cells or at least
    :data:`MIN_NUMBER_VALUES` of the distinct non-missing values."""
    return n_number_cells >= MIN_NUMBER_CELLS * n_cells or n_number_values >= MIN_NUMBER_VALUES * n_values


def check_mistyped_columns(df, path, what, id_column=None, skip=()):
    """Refuse a text column that is mostly numbers (:func:`mostly_numbers`),
    which would otherwise silently become a text column (its numbers sorted
    as texts), whatever the number of its non-numeric values.

    The error names the file, the column, its non-numeric values (the most
    frequent :data:`SHOWN_TOKENS`, with the rows holding each), the first
    rows holding them, and the two ways out: ``na_values`` (the values mark
    missing cells) or ``categorical_columns`` (the column is categories)."""
    for name in df.columns:
        if name in skip:
            continue
        col = df[name]
        if not (col.dtype.kind == "O" or pd.api.types.is_string_dtype(col)):
            continue
        tokens, token_cells, number_cells, cells, numbers, n_values = _value_kinds(col)
        if n_values < 2 or not tokens or not numbers:
            continue
        if mostly_numbers(number_cells, cells, numbers, n_values):
            raise InputError(what, _mistyped_message(df, path, what, name, tokens, token_cells, number_cells,
                                                     cells, id_column))


def _token_rows(col, tokens):
    """The positions of the cells of ``col`` that hold one of ``tokens``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    texts = _text_array(col)
    if texts is not None and all(isinstance(t, str) for t in tokens):
        hit = pc.is_in(texts, value_set=pa.array(list(tokens), type=pa.string()))
        return np.flatnonzero(hit.fill_null(False).to_numpy(zero_copy_only=False))
    return np.flatnonzero(col.isin(set(tokens)).to_numpy(dtype=bool))


def _mistyped_message(df, path, what, name, tokens, token_counts, n_number_cells, n_cells, id_column):
    order = sorted(range(len(tokens)), key=lambda i: (-token_counts[i], str(tokens[i])))
    tokens, token_counts = [tokens[i] for i in order], [int(token_counts[i]) for i in order]
    n_tokens, n_token_cells = len(tokens), sum(token_counts)
    shown = tokens[:SHOWN_TOKENS]
    each = ", ".join(f"{t!r} in {c} row{'s' if c > 1 else ''}" for t, c in zip(shown, token_counts))
    if n_tokens > len(shown):
        rest = n_token_cells - sum(token_counts[:len(shown)])
        each += f" and {n_tokens - len(shown)} more in {rest} row{'s' if rest > 1 else ''}"
    rows = _token_rows(df[name], shown if n_tokens == len(shown) else tokens)[:SHOWN_ROWS]
    with_ids = id_column is not None and id_column in df.columns
    if with_ids:
        say_row_ids(what, f"{path!r}, column {name!r}, non-numeric values", rows,
                    [df[id_column].iloc[r] for r in rows])
    where = _at_rows(rows, n_token_cells, with_ids)
    if n_tokens == len(shown):
        listed = ", ".join(json.dumps(str(t)) for t in tokens)
        na = f"set na_values = [{listed}]"
    else:
        na = f"list all {n_tokens} of them in na_values"
    plural = n_tokens > 1
    return (f"{path!r}: column {name!r} holds numbers ({n_number_cells} of its {n_cells} non-missing "
            f"cells) and {n_tokens} non-numeric value{'s' if plural else ''}: {each} ({where}); read "
            f"as text its numbers would be sorted as texts.  If {'these mark' if plural else 'it marks'} "
            f"missing values, {na} in the [job] table (or --na-values); if the column is categorical, "
            f"list it in categorical_columns = [{json.dumps(str(name))}] (or --categorical-columns)")


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
