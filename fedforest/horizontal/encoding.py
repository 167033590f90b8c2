"""Clients' tables and the job-wide encoding of their rows (horizontal modes).

* :class:`ClientTable`: one client's rows file (features + label, an ID column
  is optional) and its description for the server: column names and kinds,
  classes and the category values of text columns (every column for ID3),
  never row values;
* :func:`agree`: the server's checks of the clients' descriptions (the column
  sets agree, the kinds match) and the common encoding it sends back;
* :class:`Encoding`: that encoding of rows, so every client codes its rows the
  same way — numeric columns as floats (CART, XGBoost), or every column as
  category codes with a missing value as a category of its own (ID3).

The handshake that carries them is :mod:`fedforest.horizontal.setup`'s.
"""
import numpy as np
import pandas as pd

from ..data.io import check_labels, read_table
from ..errors import InputError
from ..tree.rules import CATEGORICAL, NUMERIC


MISSING = "NA"               # the category of a missing value (ID3)
MAX_CATEGORIES = 64          # distinct values a column may have in an ID3 job
MIXED = "mixed"              # numeric columns as floats, text columns as codes: what every non-ID3 type does


def client_what(rank):
    return f"client {rank}"


def text_of(v):
    """A value as the text every client agrees on (1.0 and 1 are both "1")."""
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


def distinct_texts(col):
    """The distinct non-missing values of a column as texts (:func:`text_of`)."""
    return {text_of(v) for v in pd.unique(col.dropna())}


def category_codes(col, index, unseen):
    """Codes of a column's values in ``index`` (text -> code); a missing value
    takes the code of :data:`MISSING`, a value not in ``index`` ``unseen``.
    Vectorised: each distinct value is looked up once."""
    codes, uniques = pd.factorize(col, use_na_sentinel=True)
    lookup = np.array([index.get(text_of(u), unseen) for u in uniques] + [index.get(MISSING, unseen)])
    return lookup[codes]          # the sentinel -1 picks the last entry: missing


def table_settings(cfg):
    """How a job's tables are read: its ``na_values`` and ``categorical_columns``."""
    return {"na_values": cfg.na_values, "categorical_columns": cfg.categorical_columns}


class ClientTable:
    """One client's rows: features (DataFrame) and labels."""

    def __init__(self, path, rank, label_column, id_column, need_label=True, categorical_columns=None,
                 na_values=None):
        what = client_what(rank)
        df = read_table(path, id_column, what, require_id=False, categorical_columns=categorical_columns,
                        na_values=na_values, label_column=label_column)
        df.columns = [str(c) for c in df.columns]
        if need_label and label_column not in df.columns:
            raise InputError(what, f"{path!r} has no label column {label_column!r}")
        self.ids = df[id_column].astype(str).to_numpy() if id_column in df.columns else None
        self.y = df[label_column] if label_column in df.columns else None
        if self.y is not None:
            check_labels(self.y, what, label_column, ids=self.ids, na_values=na_values or ())
        self.X = df[[c for c in df.columns if c not in (label_column, id_column)]]
        if self.X.shape[1] == 0:
            raise InputError(what, f"{path!r} has no feature columns")

    def describe(self, tree_type, task="classification"):
        """What the server needs to agree on an encoding (no row values; for
        regression not even the label values)."""
        kinds = ["numeric" if pd.api.types.is_numeric_dtype(self.X[c]) or pd.api.types.is_bool_dtype(self.X[c])
                 else "text" for c in self.X.columns]
        classes = []
        if self.y is not None and task == "classification":
            classes = sorted({text_of(v) for v in self.y})
        out = {"n_rows": int(self.X.shape[0]), "columns": list(self.X.columns), "kinds": kinds,
               "classes": classes}
        # the category values of text columns (every column for ID3): the server
        # numbers them once for the whole job
        out["categories"] = [None if tree_type != "id3" and k == "numeric"
                             else sorted(distinct_texts(self.X[c]))
                             + ([MISSING] if self.X[c].isna().any() else [])
                             for c, k in zip(self.X.columns, kinds)]
        return out


class Encoding:
    """The job-wide encoding of rows (sent by the server to every client)."""

    def __init__(self, tree_type, columns, classes, categories=None, task="classification"):
        self.tree_type = tree_type
        self.columns = list(columns)
        self.classes = list(classes)
        self.categories = categories
        self.task = task

    def to_dict(self):
        return {"tree_type": self.tree_type, "columns": self.columns, "classes": self.classes,
                "categories": self.categories, "task": self.task}

    @classmethod
    def from_dict(cls, d):
        return cls(d["tree_type"], d["columns"], d["classes"], d.get("categories"),
                   d.get("task", "classification"))

    @property
    def kind(self):
        return CATEGORICAL if self.tree_type == "id3" else NUMERIC

    @property
    def n_values(self):
        return [len(c) for c in self.categories] if self.categories else None

    def labels(self, y, what):
        if self.task == "regression":
            try:
                values = pd.to_numeric(pd.Series(y)).to_numpy(dtype=np.float64)
            except (TypeError, ValueError):
                raise InputError(what, "regression labels must be numeric") from None
            if not np.isfinite(values).all():
                raise InputError(what, "regression labels must be finite numbers")
            return values
        codes = {c: i for i, c in enumerate(self.classes)}
        text = [text_of(v) for v in y]
        unknown = sorted({t for t in text if t not in codes})
        if unknown:
            raise InputError(what, f"labels {unknown[:5]} are not among the job's classes {self.classes}")
        return np.array([codes[t] for t in text], dtype=np.int64)

    def features(self, X, what):
        """Rows as a matrix in the job's encoding.

        ID3: every column as category codes (int64; a category unseen in
        training is coded -1 and handled by prediction as "no branch").
        Other tree types: numeric columns as floats, text columns as the codes
        of the job's sorted categories (float64; an unseen category is NaN and
        follows a split's missing-value direction).  CART needs complete numeric
        columns; XGBoost learns where missing values go."""
        missing = [c for c in self.columns if c not in X.columns]
        extra = [c for c in X.columns if c not in self.columns]
        if missing or extra:
            raise InputError(what, f"column set differs from the job's: missing {missing}, unexpected {extra}")
        X = X[self.columns]
        categories = self.categories or [None] * len(self.columns)
        if self.tree_type == "id3":
            out = np.empty(X.shape, dtype=np.int64)
            for j, (c, cats) in enumerate(zip(self.columns, categories)):
                out[:, j] = category_codes(X[c], {v: i for i, v in enumerate(cats)}, -1)
            return out
        out = np.empty(X.shape, dtype=np.float64)
        for j, (c, cats) in enumerate(zip(self.columns, categories)):
            col = X[c]
            if cats is not None:
                out[:, j] = category_codes(col, {v: float(i) for i, v in enumerate(cats)}, np.nan)
                continue
            values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
            bad = np.isnan(values) & col.notna().to_numpy()
            if bad.any():
                raise InputError(what, f"column {c!r} is numeric in this job but holds text such as "
                                       f"{text_of(col[bad].iloc[0])!r}")
            if np.isinf(values).any():
                raise InputError(what, f"column {c!r} holds infinite values")
            if np.isnan(values).any() and self.tree_type != "xgboost":
                # a mode that fixes its trees (MIXED: FedGA-Tree) offers no tree_type to switch to
                trees, way = (("this mode's trees", "impute them first") if self.tree_type == MIXED
                              else (f"the {self.tree_type!r} trees", "impute them, or use tree_type 'id3'"))
                raise InputError(what, f"column {c!r} has missing values: {trees} need complete numeric "
                                       f"columns ({way})")
            out[:, j] = values
        return out


def agree(infos, tree_type, task="classification"):
    """The server's checks of the clients' descriptions; returns the Encoding."""
    ranks = sorted(infos)
    first = infos[ranks[0]]
    for r in ranks[1:]:
        cols = infos[r]["columns"]
        if set(cols) != set(first["columns"]):
            missing = [c for c in first["columns"] if c not in cols]
            extra = [c for c in cols if c not in first["columns"]]
            raise InputError(client_what(r), f"has other columns than client {ranks[0]}: missing {missing}, "
                                       f"unexpected {extra}")
    columns = first["columns"]
    n_rows = sum(n for n in (infos[r].get("n_rows") for r in ranks) if isinstance(n, int))
    if n_rows < 2:
        raise InputError("data", f"the clients' tables hold {n_rows} row{'' if n_rows == 1 else 's'} in all; "
                                 "training needs at least 2 rows")
    classes = sorted({c for r in ranks for c in infos[r]["classes"]})
    if task == "classification" and len(classes) < 2:
        raise InputError("labels", f"all clients together have only the class(es) {classes}; "
                                   "a classifier needs at least two")
    categories = []
    for c in columns:
        kinds = {infos[r]["kinds"][infos[r]["columns"].index(c)] for r in ranks}
        if tree_type != "id3":
            if len(kinds) > 1:
                raise InputError("data", f"column {c!r} is numeric on some clients and text on others")
            if kinds == {"numeric"}:
                categories.append(None)
                continue
        values = set()
        for r in ranks:
            values |= set(infos[r]["categories"][infos[r]["columns"].index(c)])
        if tree_type == "id3" and len(values) > MAX_CATEGORIES:
            raise InputError("tree_type", f"column {c!r} has {len(values)} distinct values; 'id3' takes "
                                          f"at most {MAX_CATEGORIES} per column (bin it into at most "
                                          f"{MAX_CATEGORIES} ranges, or use tree_type 'cart')")
        categories.append(sorted(values - {MISSING}) + ([MISSING] if MISSING in values else []))
    return Encoding(tree_type, columns, classes, categories,
                    task="classification" if tree_type == "id3" else task)
