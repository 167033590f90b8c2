"""A vertical party's table read in blocks and held column by column.

A party never holds its whole table as text or as a float64 matrix: a CSV or
Parquet file is read block by block (pyarrow's streaming readers, blocks of
:data:`BLOCK_BYTES`, each block's text given back to the system once typed),
each numeric column is copied into chunks of :data:`CHUNK_ROWS` rows in the
narrowest dtype that holds its values exactly (float32 where every value is a
float32, float64 otherwise), the IDs as their UTF-8 bytes (:class:`~fedforest.crypto.ids.IdTexts`).
After ID alignment the party takes its aligned rows column by column
(:class:`AlignedColumns`) and frees each stored column once used, so that a
histogram party ends with one byte per cell.

Columns whose values are not all numbers (text, booleans, a column the job
names categorical, the label when it is not numeric) are read again by the
table reader of :mod:`fedforest.data.io` (its typing and checks) and encoded
there: only those columns, after the block pass.

The values are those :func:`fedforest.data.io.read_table` and
:func:`~fedforest.data.io.encode_features` give (the same parser results,
the same typing, the same checks), and :meth:`ColumnTable.fingerprint` the
same digest as a float64 matrix of them would give.
"""
import hashlib
import json
import os

import numpy as np

from ..crypto.ids import IdTexts
from ..errors import InputError
from . import io

BLOCK_BYTES = 4 << 20          # bytes of CSV text parsed at a time
PARQUET_BATCH_ROWS = 1 << 16
M_MMAP_THRESHOLD = -3          # glibc's mallopt parameter
MMAP_BYTES = 1 << 18           # 256 KiB
FINGERPRINT_ROWS = 1 << 15     # rows of the float64 matrix hashed at a time
CSV_EXTS = (".csv", ".txt", ".tsv")
PARQUET_EXTS = (".parquet", ".pq")


def narrow(values):
    """``values`` (float64) as float32 when that holds every value exactly (NaN included)."""
    as32 = values.astype(np.float32)
    same = as32.astype(np.float64) == values
    if same.all() or (same | np.isnan(values)).all():
        return as32
    return values


#: rows of a numeric column's storage chunk while a table is read (512 KiB or
#: more, above :data:`MMAP_BYTES`: a chunk freed goes back to the system at once)
CHUNK_ROWS = 1 << 17


class _Chunks:
    """A numeric column's values while its table is read, copied block by
    block into chunks of :data:`CHUNK_ROWS` rows: float32 while every block
    is (:func:`narrow`), then float64 (the chunks so far widened).  The
    blocks themselves are freed as they are copied, so the small arrays of
    the block pass are reused, not left between kept ones."""

    def __init__(self):
        self.chunks = []
        self.fill = CHUNK_ROWS      # rows used in the last chunk
        self.dtype = np.dtype(np.float32)
        self.n = 0

    def append(self, values):
        if values.dtype != self.dtype and self.dtype == np.float32:
            self.dtype = np.dtype(np.float64)
            self.chunks = [c.astype(np.float64) for c in self.chunks]
        at = 0
        while at < values.size:
            if self.fill == CHUNK_ROWS:
                self.chunks.append(np.empty(CHUNK_ROWS, dtype=self.dtype))
                self.fill = 0
            k = min(CHUNK_ROWS - self.fill, values.size - at)
            self.chunks[-1][self.fill:self.fill + k] = values[at:at + k]
            self.fill += k
            at += k
        self.n += values.size

    def take(self):
        """The column as one array, each chunk freed once copied."""
        out = np.empty(self.n, dtype=self.dtype)
        at = 0
        self.chunks.reverse()
        while self.chunks:
            chunk = self.chunks.pop()
            k = min(chunk.size, self.n - at)
            out[at:at + k] = chunk[:k]
            at += k
            del chunk
        return out


class ColumnTable:
    """One party's rows: ``ids`` (:class:`IdTexts`), ``y`` (the label column as
    the table reader types it, or None), ``columns`` (feature names),
    ``categories`` (text columns' categories), ``n_unseen`` and one 1-D array
    per feature column (:meth:`column`; :meth:`release` frees one)."""

    def __init__(self, ids, y, columns, arrays, categories, n_unseen=0):
        self.ids = ids
        self.y = y
        self.columns = list(columns)
        self._arrays = list(arrays)
        self.categories = categories
        self.n_unseen = n_unseen
        self.n_rows = len(ids)

    @property
    def shape(self):
        return (self.n_rows, len(self.columns))

    def column(self, j):
        """Column ``j`` as float64 (a copy where it is held as float32)."""
        a = self._arrays[j]
        if a is None:
            raise RuntimeError(f"column {self.columns[j]!r} was released")
        return a.astype(np.float64, copy=False)

    def release(self, j):
        self._arrays[j] = None

    def check_labels(self, what, label_column):
        """Refuse the table for training when a label is missing in any
        spelling (:func:`~fedforest.data.io.check_labels`), naming the
        first rows and their IDs (this party's own: the check runs here)."""
        if self.y is not None:
            io.check_labels(self.y, what, label_column,
                            ids=lambda rows: self.ids.take(np.asarray(rows)).to_numpy())

    @property
    def nbytes(self):
        return sum(a.nbytes for a in self._arrays if a is not None)

    def dtypes(self):
        return [None if a is None else a.dtype for a in self._arrays]

    def dense(self, rows=None, dtype=np.float64):
        """The matrix of ``rows`` (all when None), built column by column."""
        n = self.n_rows if rows is None else len(rows)
        out = np.empty((n, len(self.columns)), dtype=dtype)
        for j in range(len(self.columns)):
            col = self._arrays[j]
            out[:, j] = col if rows is None else col[rows]
        return out

    def fingerprint(self):
        """SHA-256 of the column names, the float64 matrix (row-major), the IDs
        joined by NUL and the labels as text: hashed in blocks of rows, the
        digest of the whole table's bytes."""
        h = hashlib.sha256()
        h.update(json.dumps(self.columns).encode())
        for lo in range(0, self.n_rows, FINGERPRINT_ROWS):
            hi = min(lo + FINGERPRINT_ROWS, self.n_rows)
            block = np.empty((hi - lo, len(self.columns)), dtype=np.float64)
            for j, a in enumerate(self._arrays):
                block[:, j] = a[lo:hi]
            h.update(block.tobytes())
        for lo in range(0, self.n_rows, FINGERPRINT_ROWS):
            hi = min(lo + FINGERPRINT_ROWS, self.n_rows)
            if lo:
                h.update(b"\x00")
            h.update(self.ids.joined(lo, hi))
        if self.y is not None:
            for text in label_text_blocks(np.asarray(self.y)):
                h.update(text)
        return h.hexdigest()


LABEL_TABLE_VALUES = 1 << 16     # integer labels spanning at most this many values: texts made once


def label_text_blocks(y):
    """The bytes of ``y.astype(str)`` (a label column's part of the
    fingerprint), in blocks of :data:`FINGERPRINT_ROWS` rows, every block in
    the whole array's text width.  An integer array's text width is its
    dtype's, whatever the values (no pass to find it), and where its values
    span few integers each value's text is made once and looked up."""
    if not y.size:
        yield y.astype(str).tobytes()
        return
    if y.dtype.kind in "iu":
        width = y[:1].astype(str).dtype.itemsize // 4
        lo, hi = int(y.min()), int(y.max())
        table = None
        if hi - lo < LABEL_TABLE_VALUES:
            table = np.arange(lo, hi + 1, dtype=y.dtype).astype(f"<U{width}")
    else:
        width = max(y[i:i + FINGERPRINT_ROWS].astype(str).dtype.itemsize
                    for i in range(0, y.size, FINGERPRINT_ROWS)) // 4
        table = None
    for i in range(0, y.size, FINGERPRINT_ROWS):
        part = y[i:i + FINGERPRINT_ROWS]
        yield (table[part - y.dtype.type(lo)] if table is not None else part.astype(f"<U{width}")).tobytes()


class AlignedColumns:
    """The aligned rows of a :class:`ColumnTable` (``rows``: table row numbers in
    the job's order), handed out column by column (:meth:`take_column`);
    ``X[rows]`` selects further (boosting's training rows)."""

    def __init__(self, table, rows):
        self.table = table
        self.rows = np.asarray(rows, dtype=np.int64)
        self.shape = (self.rows.size, len(table.columns))

    def __getitem__(self, rows):
        return AlignedColumns(self.table, self.rows[rows])

    def take_column(self, j, release=True):
        """Column ``j`` of the aligned rows (float64); the stored column is freed
        unless ``release`` is False."""
        a = self.table._arrays[j]
        if a is None:
            raise RuntimeError(f"column {self.table.columns[j]!r} was released")
        out = a[self.rows].astype(np.float64, copy=False)
        if release:
            self.table.release(j)
        return out

    def dense(self, dtype=np.float64, release=True, order="C"):
        """The aligned matrix in ``dtype``, built column by column (each stored
        column freed once copied unless ``release`` is False)."""
        out = np.empty(self.shape, dtype=dtype, order=order)
        for j in range(self.shape[1]):
            out[:, j] = self.take_column(j, release)
        return out


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------
def read_columns(path, id_column, what, label_column=None, na_values=None, categorical_columns=None,
                 columns=None, categories=None, block_bytes=None):
    """One party's table from ``path`` as a :class:`ColumnTable` (CSV and
    Parquet read in blocks; NumPy files and DataFrames through the table reader).

    ``columns``/``categories``: a trained model's (prediction): the file must
    hold exactly those feature columns, text columns are encoded with the
    stored categories.  Refuses what :func:`~fedforest.data.io.read_table`
    refuses, with the same messages."""
    na_values = list(na_values or ())
    categorical_columns = list(categorical_columns or ())
    if not isinstance(path, str):
        return from_frame(path, id_column, what, label_column, columns, categories)
    if not path:
        raise InputError(what, "no data file given for this party")
    if not os.path.isfile(path):
        raise InputError(what, f"file {path!r} does not exist")
    ext = os.path.splitext(path)[1].lower()
    if ext in CSV_EXTS:
        reader = _CsvBlocks(path, what, ext, id_column, na_values, block_bytes or BLOCK_BYTES)
    elif ext in PARQUET_EXTS:
        reader = _ParquetBlocks(path, what, id_column)
    else:
        df = io.read_table(path, id_column, what, na_values=na_values,
                           categorical_columns=categorical_columns, label_column=label_column)
        return from_frame(df, id_column, what, label_column, columns, categories)
    try:
        return _read_blocks(reader, path, id_column, what, label_column, na_values, categorical_columns,
                            columns, categories)
    finally:
        release_arrow_memory()


def release_arrow_memory():
    """Give pyarrow's freed blocks back to the system (its allocator keeps
    them for reuse: the parsed text blocks of a whole read otherwise stay
    resident)."""
    import pyarrow as pa
    pa.default_memory_pool().release_unused()


def return_large_frees():
    """Have the C allocator serve blocks of :data:`MMAP_BYTES` or more from
    (and return them to) the system at once: glibc's default raises that
    threshold as large blocks are freed, so the columns a party frees while
    binning would stay resident and later ones be carved from its heap.  A
    no-op where the C library has no ``mallopt`` (not glibc); returns
    whether it was set."""
    import ctypes
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES))


def _feature_names(names, id_column, label, columns, what):
    present = [c for c in names if c not in (id_column, label)]
    if columns is None:
        return present
    missing = [c for c in columns if c not in names]
    extra = [c for c in present if c not in columns]
    if missing or extra:
        raise InputError(what, f"column set differs from the model's: missing {missing}, "
                               f"unexpected {extra}")
    return list(columns)


def _check_frame_ids(df, id_column, what):
    if id_column not in df.columns:
        raise InputError(what, f"the data has no ID column {id_column!r}")
    if df.shape[0] == 0:
        raise InputError(what, "the data has no rows")


def from_frame(df, id_column, what, label_column=None, columns=None, categories=None):
    """A :class:`ColumnTable` of a DataFrame (the table reader's, or a job's in memory)."""
    df = df.copy()
    df.columns = [str(c) for c in df.columns]
    _check_frame_ids(df, id_column, what)
    ids = IdTexts.from_texts(io.check_ids(df[id_column], what))
    label = label_column if label_column in df.columns else None
    y = io.labels_with_gaps(df[label]).to_numpy() if label else None
    names = _feature_names(list(df.columns), id_column, label, columns, what)
    arrays, cats, n_unseen = [], {} if categories is None else categories, 0
    for name in names:
        X, got, unseen = io.encode_features(df, [name], what, categories)
        if categories is None:
            cats.update(got)
        n_unseen += unseen
        arrays.append(narrow(X[:, 0]))
        del df[name]
    if columns is None and not names and label is None:
        raise InputError(what, "holds neither feature columns nor the label: nothing to contribute")
    return ColumnTable(ids, y, names, arrays, cats, n_unseen)


def _read_blocks(reader, path, id_column, what, label_column, na_values, categorical_columns,
                 columns, categories):
    import pyarrow as pa

    names = reader.names
    if id_column not in names:
        raise InputError(what, f"{path!r} has no ID column {id_column!r}")
    label = label_column if label_column in names else None
    features = _feature_names(names, id_column, label, columns, what)
    known_text = set(categorical_columns) | set(categories or ())
    # per feature column: its numeric values so far, or None once it needs the table reader
    numeric = {name: (_Chunks() if name not in known_text else None) for name in features}
    id_blocks, label_blocks, n_rows = [], [], 0
    for batch in reader.batches():
        n_rows += batch.num_rows
        id_blocks.append(batch.column(names.index(id_column)))
        if label is not None:
            label_blocks.append(batch.column(names.index(label)))
        for name in features:
            stored = numeric[name]
            if stored is None:
                continue
            values = reader.numbers(batch.column(names.index(name)))
            if values is None:
                numeric[name] = None
                continue
            if np.isinf(values).any():
                raise InputError(what, f"column {name!r} contains infinite values")
            stored.append(narrow(values))
            del values
        del batch
        release_arrow_memory()      # the batch's text, so that the next one reuses no retained pages
    if n_rows == 0:
        raise InputError(what, f"{path!r} has no rows")
    ids = reader.ids(id_blocks, what)       # empties id_blocks: each block freed once copied
    y, label_again = None, False
    if label is not None:
        y = reader.labels(pa.chunked_array(label_blocks, type=label_blocks[0].type))
        label_again = y is None
        del label_blocks
    again = [n for n in features if numeric[n] is None] + ([label] if label_again else [])
    arrays = {}
    for name in features:
        if numeric[name] is not None:
            arrays[name] = numeric.pop(name).take()
    cats, n_unseen = ({} if categories is None else categories), 0
    if again:
        # the columns the block pass does not type: the table reader's typing, checks and encoding
        df = reader.frame(again, na_values, categorical_columns, label, id_column)
        if label_again:
            y = df[label].to_numpy()
        for name in again:
            if name == label:
                continue
            X, got, unseen = io.encode_features(df, [name], what, categories)
            if categories is None:
                cats.update(got)
            n_unseen += unseen
            arrays[name] = narrow(X[:, 0])
            del df[name]
        del df
    if columns is None and not features and label is None:
        raise InputError(what, "holds neither feature columns nor the label: nothing to contribute")
    return ColumnTable(ids, y, features, [arrays[n] for n in features], cats, n_unseen)


def _take_chunks(blocks):
    """The arrays of the list ``blocks`` as one chunked array; the list emptied."""
    import pyarrow as pa
    col = pa.chunked_array(blocks, type=blocks[0].type)
    blocks.clear()
    return col


def _ids_from_arrow(blocks, what):
    """Checked IDs (no missing, no repeats) as :class:`IdTexts`, from a
    list of pyarrow string arrays (emptied as copied); the messages of
    :func:`~fedforest.data.io.check_ids`."""
    missing = sum(b.null_count for b in blocks)
    if missing:
        raise InputError(what, f"{missing} rows have no ID")
    ids = IdTexts.from_arrow_blocks(blocks)
    if _repeats(ids):
        io.check_ids(io.pd.Series(ids.to_numpy(), dtype=object), what)   # names the first repeat
    return ids


def _repeats(ids):
    """Whether an ID repeats: a 64-bit hash of every ID sorted and
    neighbours compared (8 bytes per row, no hash set, no sort of texts);
    only where two hashes are equal are the texts sorted and compared."""
    import pyarrow.compute as pc
    from .text_hash import text_hashes
    n = len(ids)
    if n < 2:
        return False
    hashes = np.sort(text_hashes(ids.data, ids.offsets))
    if not np.any(hashes[1:] == hashes[:-1]):
        return False
    del hashes
    texts = ids.to_arrow()
    ordered = texts.take(pc.sort_indices(texts))
    return bool(pc.any(pc.equal(ordered.slice(1), ordered.slice(0, n - 1))).as_py())


class _CsvBlocks:
    """A CSV file read in blocks, every cell as text (or null for the
    missing-value texts); the header and its names as the table reader reads them."""

    def __init__(self, path, what, ext, id_column, na_values, block_bytes):
        self.path, self.what = path, what
        self.sep = "\t" if ext == ".tsv" else ","
        self.na = list(io.NA_TEXTS) + list(na_values)
        # a label cell also means "missing" in pandas' other spellings (nan, NaN, null, ...)
        self.label_na = sorted(set(io.LABEL_NA_TEXTS) - set(self.na))
        self.id_column = id_column
        try:
            head = io.pd.read_csv(path, sep=self.sep, nrows=0)
        except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file
            raise InputError(what, f"cannot read {path!r}: {exc}") from None
        io._check_separator(head, path, what, self.sep)
        self.names = [str(c) for c in head.columns]
        self.block_bytes = int(block_bytes)

    def batches(self):
        import pyarrow as pa
        from pyarrow import csv
        opts = dict(read_options=csv.ReadOptions(column_names=self.names, skip_rows=1,
                                                 block_size=self.block_bytes),
                    parse_options=csv.ParseOptions(delimiter=self.sep),
                    convert_options=csv.ConvertOptions(
                        column_types={n: pa.string() for n in self.names}, null_values=self.na,
                        strings_can_be_null=True, quoted_strings_can_be_null=True))
        try:
            reader = csv.open_csv(self.path, **opts)
            for batch in reader:
                yield batch
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(self.what, f"cannot read {self.path!r}: {exc}") from None

    @staticmethod
    def numbers(col):
        """A block of texts as float64 (missing: NaN), or None where a text is
        not a number as the table reader parses numbers."""
        import pyarrow as pa
        import pyarrow.compute as pc
        try:
            values = pc.cast(col, pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        out = values.to_numpy(zero_copy_only=False)
        if values.null_count != np.isnan(out).sum():
            return None     # 'nan' spelled out: text to the table reader
        # numpy's own copy: the block's pyarrow buffers are freed with the block
        return out if out.flags.owndata else out.copy()

    def labels(self, col):
        """The label column as the table reader types it: int64 when every
        value is an integer, float64 when every value is a number (missing:
        NaN); None (read it again) otherwise."""
        import pyarrow as pa
        import pyarrow.compute as pc
        gaps = pc.is_in(col, value_set=pa.array(self.label_na, type=pa.string()))
        if pc.any(gaps).as_py():
            col = pc.if_else(gaps, pa.scalar(None, type=pa.string()), col)
        if col.null_count == 0:
            try:
                return pc.cast(col, pa.int64()).to_numpy()
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
        out = self.numbers(col)
        if out is None or np.isinf(out).any():
            return None
        return out

    def ids(self, blocks, what):
        return _ids_from_arrow(blocks, what)

    def frame(self, names, na_values, categorical_columns, label, id_column):
        """The table reader's DataFrame of ``names`` (and the IDs, which its
        messages quote)."""
        wanted = [n for n in self.names if n in set(names) | {id_column}]
        df = io.read_table(self.path, id_column, self.what, na_values=na_values,
                           categorical_columns=categorical_columns, label_column=label,
                           usecols=[self.names.index(n) for n in wanted])
        df.columns = wanted
        return df


class _ParquetBlocks:
    """A Parquet file read in row batches; numeric and boolean columns typed
    from the file, every other column left to the table reader."""

    def __init__(self, path, what, id_column):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise InputError(what, f"{path!r}: reading Parquet needs the package 'pyarrow': "
                                   "pip install 'fedforest[parquet]'") from None
        self.path, self.what = path, what
        try:
            self.file = pq.ParquetFile(path)
            self.names = [str(n) for n in self.file.schema_arrow.names]
        except Exception as exc:  # noqa: BLE001
            raise InputError(what, f"cannot read {path!r}: {exc}") from None

    def batches(self):
        try:
            yield from self.file.iter_batches(batch_size=PARQUET_BATCH_ROWS)
        except Exception as exc:  # noqa: BLE001
            raise InputError(self.what, f"cannot read {self.path!r}: {exc}") from None

    @staticmethod
    def numbers(col):
        import pyarrow as pa
        t = col.type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
            return None
        if pa.types.is_boolean(t) and col.null_count:
            return None          # booleans with gaps: as the table reader encodes them
        out = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
        return out if out.flags.owndata else out.copy()

    def labels(self, col):
        import pyarrow as pa
        t = col.type
        if pa.types.is_integer(t) or pa.types.is_floating(t):
            return col.to_pandas().to_numpy()
        return None

    def ids(self, blocks, what):
        import pyarrow as pa
        col = _take_chunks(blocks)
        if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
            if pa.types.is_integer(col.type):
                col = col.cast(pa.string())
            else:   # other IDs in their text form, as the table reader writes them
                texts = [None if v is None else io._id_text(v) for v in col.to_pylist()]
                col = pa.chunked_array([pa.array(texts, type=pa.string())])
        blocks = list(col.chunks)
        del col
        return _ids_from_arrow(blocks, what)

    def frame(self, names, na_values, categorical_columns, label, id_column):
        import pyarrow as pa
        wanted = [n for n in self.names if n in set(names) | {id_column}]
        table = self.file.read(columns=wanted)
        df = table.to_pandas()
        del table
        if na_values:
            df = io._apply_na_values(df, na_values, id_column)
        if label in df.columns:
            df[label] = io.labels_with_gaps(df[label], na_values)
        if id_column in df.columns:
            df[id_column] = df[id_column].map(io._id_text, na_action="ignore")
        for name in categorical_columns:
            if name in df.columns and name not in (id_column, label) and df[name].dtype.kind in "iufb":
                df[name] = df[name].map(io._number_text, na_action="ignore").astype(object)
        io.check_mistyped_columns(df, self.path, self.what, id_column,
                                  skip={id_column, label} | set(categorical_columns))
        del pa
        return df


# ---------------------------------------------------------------------------
# Memory: what a party's table needs, checked before it is read
# ---------------------------------------------------------------------------
BYTES_PER_CELL = 9            # a stored column (float64 at most) and its bin codes
BYTES_PER_ROW = 128           # an ID's bytes and offset, its digest, position, label, one tree's row state
FIXED_BYTES = 256 << 20       # blocks being parsed, a group of columns being binned, the kernels
SAMPLE_BYTES = 1 << 20


def estimate_shape(path):
    """``(rows, columns, exact)`` of a table file from its header and first
    MiB (CSV: rows from the bytes per line of the sample), its metadata
    (Parquet) or its size (NumPy: 8 bytes per value, one column); ``exact``
    says whether the row count is known.  None where it cannot be read
    (the reader then names the problem)."""
    if not isinstance(path, str) or not os.path.isfile(path):
        return None
    ext = os.path.splitext(path)[1].lower()
    size = os.path.getsize(path)
    try:
        if ext in CSV_EXTS:
            with open(path, "rb") as fh:
                sample = fh.read(SAMPLE_BYTES)
            lines = sample.split(b"\n")
            header, body = lines[0], lines[1:-1] if len(sample) == SAMPLE_BYTES else lines[1:]
            body = [b for b in body if b.strip()]
            n_cols = header.count(b"\t" if ext == ".tsv" else b",") + 1
            if not body:
                return 0, n_cols, True
            per_line = sum(len(b) + 1 for b in body) / len(body)
            exact = len(sample) < SAMPLE_BYTES
            return (len(body) if exact else int((size - len(header)) / per_line) + 1), n_cols, exact
        if ext in PARQUET_EXTS:
            import pyarrow.parquet as pq
            meta = pq.ParquetFile(path).metadata
            return meta.num_rows, meta.num_columns, True
    except Exception:  # noqa: BLE001 - the reader reports a bad file
        return None
    return size // 8, 1, False


def available_mb():
    """Memory available to this process now, in MiB (Linux MemAvailable;
    None where it cannot be read)."""
    try:
        with open("/proc/meminfo") as fh:
            info = dict(line.split(":", 1) for line in fh)
        return int(info["MemAvailable"].split()[0]) / 1024.0
    except (OSError, KeyError, ValueError):
        return None


def table_bytes(n_rows, n_columns):
    """A party's memory for a table of ``n_rows`` x ``n_columns`` (every column
    a feature, the ID and label included): the estimate the refusal quotes."""
    return n_rows * (BYTES_PER_CELL * n_columns + BYTES_PER_ROW) + FIXED_BYTES


def check_memory(what, need_bytes, memory_mb, detail):
    """Refuse (InputError) when ``need_bytes`` exceeds ``memory_mb`` (None:
    the memory available now).  ``detail``: how the estimate was made."""
    limit, source = (memory_mb, "memory_mb") if memory_mb is not None else (available_mb(), "available memory")
    if limit is None:
        return
    need_mb = need_bytes / 2 ** 20
    if need_mb > limit:
        raise InputError(what, f"the job needs about {need_mb:,.0f} MiB on this rank ({detail}), more "
                               f"than its {limit:,.0f} MiB ({source}); give the rank more memory (and set "
                               "memory_mb), or split the table over more parties or hosts")


def check_table_memory(path, what, memory_mb):
    """A party's check before it reads its table (see :func:`table_bytes`)."""
    shape = estimate_shape(path)
    if shape is None:
        return
    n_rows, n_cols, exact = shape
    detail = (f"{'' if exact else 'about '}{n_rows:,} rows x {n_cols} columns of {path!r}: "
              f"{BYTES_PER_CELL} bytes per cell + {BYTES_PER_ROW} per row + {FIXED_BYTES >> 20} MiB")
    check_memory(what, table_bytes(n_rows, n_cols), memory_mb, detail)
