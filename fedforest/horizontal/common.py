"""What every horizontal mode shares: clients share columns and hold different rows.

Rank 0 is the server, ranks 1..K the clients; each client reads its own rows
file (features + label, an ID column is optional).

* :func:`server_setup` / :func:`client_setup`: the clients report their
  column names and kinds, classes and (for categorical trees) category
  values; the server checks that the column sets agree and sends back the
  common encoding (class list, per-column categories), so every client codes
  its rows the same way;
* :class:`Encoding`: the common encoding of rows — numeric columns as floats
  (CART, XGBoost), or every column as category codes with a missing value as
  a category of its own (ID3);
* the client-tree job shared by the tree modes (:func:`run_tree_server`,
  :func:`run_tree_client`): set-up, the mode's own rounds, then the final tree
  sent to every client, which evaluates it on its rows and saves it;
* model files (``fedforest-horizontal`` JSON, written atomically) and local
  prediction / explanation of a saved model, which need no MPI job.

See docs/horizontal.md.
"""
import json
import numbers
import os
import time

import numpy as np
import pandas as pd

from ..version import __version__
from ..data.io import read_table
from ..errors import InputError
from ..logs import status
from ..federation import protocol
from ..federation.aggregate import client_metrics
from ..federation.files import atomic_write, replaced_folder, write_summary
from ..federation.metrics import class_scores
from ..federation.registry import get_mode
from ..federation.rounds import Done, serve
from ..tree import format as tree_format
from ..tree.id3 import fit_id3
from ..tree.rules import CATEGORICAL, NUMERIC, leaf_rules
from .declare import CART_DEFAULT_DEPTH, tree_params  # noqa: F401  (tree_params: re-exported)

SERVER = 0
FORMAT = "fedforest-horizontal"
FORMAT_VERSION = 2           # 2: ID3 leaves marked with tree.format.LEAF (version 1: -1), upgraded on load
READABLE_VERSIONS = (1, 2)
MISSING = "NA"               # the category of a missing value (ID3)
MAX_CATEGORIES = 64          # distinct values a column may have in an ID3 job
MIXED = "mixed"              # numeric columns as floats, text columns as codes: what every non-ID3 type does

TRAIN_LOCAL = "train_local"  # server -> client: fit your own tree, send it


def log(cfg, text):
    """A summary line on the server (nothing when ``quiet``; see :mod:`fedforest.logs`)."""
    status(cfg, text)


def check_clients(cfg):
    """The job settings every horizontal mode reads: one data file (and
    optional test file) per client."""
    cfg.check_parties("client")
    if cfg.test_data is not None and len(cfg.test_data) != cfg.n_parties:
        raise InputError("test_data", f"must list one test file per client ({cfg.n_parties}), "
                                      f"got {cfg.test_data!r}")


def check_world(comm, cfg):
    if comm.size - 1 != cfg.n_parties:
        raise InputError("n_parties", f"the job names {cfg.n_parties} clients but runs {comm.size} "
                                      f"ranks; start it with mpiexec -n {cfg.n_parties + 1}")


def check_model_folder(folder, cfg, what):
    """Refuse to replace a model already in ``folder`` unless ``overwrite``."""
    if os.path.isfile(os.path.join(folder, "model.json")) and not cfg.overwrite:
        raise InputError(what, f"{folder!r} already holds a model; use another model_dir or pass --overwrite")


def job_seed(cfg):
    """The job's seed: ``random_state`` when set, else a fresh one drawn from
    the operating system (recorded in the summary, so a run can be repeated)."""
    if cfg.random_state is not None:
        return int(cfg.random_state)
    return int(np.random.SeedSequence().entropy % (2 ** 31))


def server_setup(comm, cfg, tree_type, task="classification"):
    """Server start-up shared by every horizontal mode: world size, handshake,
    the clients' descriptions and the job-wide encoding.  Returns (infos, Encoding)."""
    cfg.check_train()
    check_clients(cfg)
    check_world(comm, cfg)
    check_model_folder(server_dir(cfg.model_dir), cfg, "model_dir")
    comm.reply_timeout = cfg.reply_timeout
    comm.handshake()
    infos = comm.exchange({r: {"op": protocol.LOAD, "tree_type": tree_type, "task": task}
                           for r in comm.clients})
    return infos, agree(infos, tree_type, task)


def client_load(comm, cfg, tree_type, task):
    """A client's checks of its settings and world, the handshake and the
    server's ``load`` message, checked for ``tree_type`` and ``task``; returns
    that message (a mode may check more of it)."""
    rank = comm.rank
    cfg.check_train()
    check_clients(cfg)
    check_world(comm, cfg)
    check_model_folder(client_dir(cfg.model_dir, rank), cfg, f"{client_what(rank)} model_dir")
    comm.reply_timeout = cfg.reply_timeout
    comm.handshake()
    msg = protocol.expect(comm.recv(SERVER), protocol.LOAD)
    same_setting("tree_type", field_of(msg, protocol.LOAD, "tree_type"), tree_type)
    same_setting("task", field_of(msg, protocol.LOAD, "task"), task)
    return msg


def client_setup(comm, cfg, tree_type, task="classification"):
    """Client start-up matching :func:`server_setup` (the same ``tree_type`` and
    ``task``, from this client's settings), up to the server's ``setup``
    message.  Returns (setup message, Encoding, X, y, test) where ``test`` is
    ``(X, y)`` of the client's ``test_data`` file or None.  The encoding is
    checked against this client's table; the rest of the set-up is the mode's
    to check."""
    rank = comm.rank
    client_load(comm, cfg, tree_type, task)
    table = ClientTable(cfg.data[rank - 1], rank, cfg.label_column, cfg.id_column, **table_settings(cfg))
    info = table.describe(tree_type, task)
    comm.send(SERVER, info)
    setup = protocol.expect(comm.recv(SERVER), protocol.SETUP)
    enc = message_encoding(protocol.SETUP, field_of(setup, protocol.SETUP, "encoding"), tree_type,
                         "classification" if tree_type == "id3" else task,
                         MAX_CATEGORIES if tree_type == "id3" else None)
    check_categories(protocol.SETUP, enc, info, tree_type == "id3")
    what = client_what(rank)
    X, y = enc.features(table.X, what), enc.labels(table.y, what)
    test = None
    if cfg.test_data:
        tt = ClientTable(cfg.test_data[rank - 1], rank, cfg.label_column, cfg.id_column, **table_settings(cfg))
        test = (enc.features(tt.X, f"{what} test data"), enc.labels(tt.y, f"{what} test data"))
    return setup, enc, X, y, test


def server_dir(model_dir):
    return os.path.join(model_dir, "server")


def client_dir(model_dir, rank):
    return os.path.join(model_dir, f"client-{rank}")


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
        if self.y is not None and self.y.isna().any():
            raise InputError(what, f"{int(self.y.isna().sum())} rows have no label")
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


# ---------------------------------------------------------------------------
# Checks of the server's messages on a client
# ---------------------------------------------------------------------------
# The server holds valid channel keys but is trusted with neither the client's
# memory, its files nor its privacy: every value of an in-job message that
# reaches a kernel, a file, a noise draw or a model is checked against the
# client's own accepted settings (``cfg``) and its own data, or taken from them.
# A malformed value (a tree that is not a tree, an index out of range, an array
# of the wrong shape, a key the protocol never sends) is a ProtocolError naming
# the message and field; a setting the server sends otherwise than this
# client's settings give is an InputError naming the setting.
MAX_SEED = 2 ** 31 - 1       # what job_seed draws when random_state is None
TREE_KEYS = frozenset(("feature", "value") + tree_format.BINARY_KEYS + tree_format.MULTIWAY_KEYS
                      + tuple(tree_format.EXTRA_DTYPES))


def bad_message(op, field, problem):
    """The error of a malformed field of the server's ``op`` message."""
    return protocol.ProtocolError(f"protocol error: the server's {op!r} message has a bad {field!r}: {problem}")


def field_of(msg, op, field):
    """``msg[field]``; ProtocolError when it is missing."""
    if not isinstance(msg, dict) or field not in msg:
        raise bad_message(op, field, "it is missing")
    return msg[field]


def _equal(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return False
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, z) for x, z in zip(a, b))
    if isinstance(a, (dict, list, tuple)) or isinstance(b, (dict, list, tuple)):
        return False
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _shown(v):
    text = repr(v)
    return text if len(text) <= 200 else text[:200] + "..."


def same_setting(field, sent, expected):
    """``expected`` (this client's value of a setting); InputError naming
    ``field`` when the server sent another value."""
    if not _equal(sent, expected):
        raise InputError(field, f"the server runs this job with {_shown(sent)}, this client's settings "
                                f"give {_shown(expected)}")
    return expected


def same_settings(msg, op, expected):
    """Every setting of ``expected`` ({field: this client's value}) as the server
    sent it in ``msg``; returns ``expected``."""
    for k, v in expected.items():
        same_setting(k, field_of(msg, op, k), v)
    return dict(expected)


def whole_number(op, field, v, lo, hi):
    """``v`` as an int in ``lo..hi``; ProtocolError otherwise."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not lo <= v <= hi:
        raise bad_message(op, field, f"expected a whole number in {lo}..{hi}, got {_shown(v)}")
    return int(v)


def true_or_false(op, field, v):
    """``v`` as a bool; ProtocolError otherwise."""
    if not isinstance(v, (bool, np.bool_)):
        raise bad_message(op, field, f"expected true or false, got {_shown(v)}")
    return bool(v)


def job_seed_of(msg, op, cfg):
    """The job's seed: ``random_state`` when this client's settings set one."""
    v = field_of(msg, op, "seed")
    if cfg.random_state is not None:
        return same_setting("random_state", v, int(cfg.random_state))
    return whole_number(op, "seed", v, 0, MAX_SEED)


def number_array(op, field, v, kinds="iuf", ndim=None, shape=None, dtype=None):
    """``v`` as a numpy array of numbers (dtype kinds ``kinds``) with ``ndim``
    dimensions or exactly ``shape`` (None: any length), cast to ``dtype``."""
    if not isinstance(v, np.ndarray) or v.dtype.kind not in kinds:
        what = f"{v.dtype} array" if isinstance(v, np.ndarray) else type(v).__name__
        raise bad_message(op, field, f"expected an array of numbers, got a {what}")
    if shape is not None:
        ndim = len(shape)
    if ndim is not None and v.ndim != ndim:
        raise bad_message(op, field, f"expected {ndim} dimensions, got shape {v.shape}")
    if shape is not None and any(s is not None and s != d for s, d in zip(shape, v.shape)):
        raise bad_message(op, field, f"expected shape {tuple('*' if s is None else s for s in shape)}, got {v.shape}")
    if dtype is not None:
        if np.dtype(dtype).kind in "iu" and v.dtype.kind == "f":
            raise bad_message(op, field, "expected whole numbers")
        v = np.ascontiguousarray(v, dtype=dtype)
    return v


def message_tree(op, field, t, n_features, width, tree_type=None, max_depth=None, max_nodes=None):
    """A tree of the server's message, checked (:func:`fedforest.tree.format.check`,
    strict) against this client's columns and classes (``width``: columns of
    ``value``) and the job's limits; ``tree_type`` "cart" allows binary splits
    only, "id3" multiway splits only.  Returns it in the canonical dtypes."""
    if not isinstance(t, dict):
        raise bad_message(op, field, f"expected a tree (a dict of arrays), got {type(t).__name__}")
    unknown = [k for k in t if k not in TREE_KEYS]
    if unknown:
        raise bad_message(op, field, f"the tree has arrays fedforest does not send ({_shown(unknown[:5])})")
    if not all(isinstance(v, np.ndarray) for v in t.values()):
        raise bad_message(op, field, "the tree's arrays must be arrays")
    multi = "child_count" in t
    if tree_type == "cart" and multi:
        raise bad_message(op, field, "a CART tree has binary splits only")
    if tree_type == "id3" and not multi:
        raise bad_message(op, field, "an ID3 tree has multiway splits")
    try:
        out = tree_format.check(t, field, n_features=n_features, width=width, max_nodes=max_nodes,
                                max_depth=max_depth, strict=True)
    except InputError as exc:
        raise bad_message(op, field, exc.problem) from None
    if tree_type == "id3" and np.any(out["children_left"] >= 0):
        raise bad_message(op, field, "an ID3 tree has multiway splits only")
    return out


def check_categories(op, enc, table_info, id3):
    """The server's encoding against this client's description of its table:
    every category this client holds is among the job's, numeric columns are
    numeric (except for ID3, where every column is categorical)."""
    cats = enc.categories
    if cats is None:
        cats = [None] * len(enc.columns)
    if not isinstance(cats, list) or len(cats) != len(enc.columns):
        raise bad_message(op, "encoding", "it needs one category list (or none) per column")
    mine = dict(zip(table_info["columns"], zip(table_info["kinds"], table_info["categories"])))
    for c, job in zip(enc.columns, cats):
        if c not in mine:
            continue                      # Encoding.features names the columns that differ
        kind, own = mine[c]
        if job is None:
            if id3 or kind != "numeric":
                raise bad_message(op, "encoding", f"column {c!r} has no categories")
            continue
        if not (isinstance(job, list) and all(isinstance(v, str) for v in job) and len(set(job)) == len(job)):
            raise bad_message(op, "encoding", f"the categories of column {c!r} are not distinct texts")
        if not id3 and kind == "numeric":
            raise bad_message(op, "encoding", f"column {c!r} is numeric on this client")
        missing = sorted(set(own or ()) - set(job))
        if missing:
            raise bad_message(op, "encoding", f"column {c!r} lacks this client's categories {_shown(missing[:5])}")


def message_encoding(op, d, tree_type, task, max_categories=None):
    """The server's encoding dict as an :class:`Encoding`: the expected tree
    type and task, distinct text columns and classes, a category list (or
    None) per column."""
    if not isinstance(d, dict):
        raise bad_message(op, "encoding", f"expected a dict, got {type(d).__name__}")
    same_setting("tree_type", d.get("tree_type"), tree_type)
    same_setting("task", d.get("task", "classification"), task)
    for key in ("columns", "classes"):
        v = d.get(key)
        if not (isinstance(v, list) and all(isinstance(x, str) for x in v) and len(set(v)) == len(v)):
            raise bad_message(op, "encoding", f"{key!r} must be a list of distinct texts")
    cats = d.get("categories")
    if cats is not None and not (isinstance(cats, list) and len(cats) == len(d["columns"])):
        raise bad_message(op, "encoding", "it needs one category list (or none) per column")
    if max_categories is not None and cats is not None and any(
            isinstance(c, list) and len(c) > max_categories for c in cats):
        raise bad_message(op, "encoding", f"a column has more than {max_categories} categories")
    return Encoding.from_dict(d)


# ---------------------------------------------------------------------------
# The client-tree job of the tree modes (ICDTA4FL, its baselines, Federated-ID3)
# ---------------------------------------------------------------------------
def tree_depth(cfg, enc):
    if cfg.max_depth is not None:
        return int(cfg.max_depth)
    return max(1, len(enc.columns) // 2) if enc.tree_type == "id3" else CART_DEFAULT_DEPTH


def fit_client_tree(X, y, enc, max_depth, seed, criterion="gini"):
    """A client's tree (canonical flat arrays, class columns of the whole job):
    ID3 on category codes, or scikit-learn's CART on numeric columns."""
    C = len(enc.classes)
    if enc.tree_type == "id3":
        return fit_id3(X, y, enc.n_values, C, max_depth=max_depth)
    from sklearn.tree import DecisionTreeClassifier  # a second to import: only where used
    clf = DecisionTreeClassifier(max_depth=max_depth, criterion=criterion, random_state=seed).fit(X, y)
    return tree_format.from_sklearn(clf, C)


def tree_proba(tree, X):
    """Class distributions of the rows of ``X`` in a canonical tree."""
    return tree_format.node_values(tree, np.asarray(X, dtype=np.float64))


class TreeJob:
    """What the server's part of a tree mode sees: the config, the encoding,
    the clients' row counts, the depth and seed, and the summary to fill."""

    def __init__(self, cfg, enc, infos, max_depth, seed, summary):
        self.cfg, self.enc, self.infos = cfg, enc, infos
        self.max_depth, self.seed, self.summary = max_depth, seed, summary


def run_tree_server(comm, cfg, build):
    """Server of a tree mode: set-up, then ``build(comm, job)`` (the mode's own
    rounds) returns ``(tree, rules)`` — the global tree (None: every client
    keeps its own) and the merged rules to send back (may be empty) — then the
    final round, the summary and the server's model file."""
    t0 = time.perf_counter()
    clients = comm.clients
    tree_type = cfg.tree_type
    infos, enc = server_setup(comm, cfg, tree_type)
    max_depth = tree_depth(cfg, enc)
    seed = job_seed(cfg)
    comm.bcast({"op": protocol.SETUP, "encoding": enc.to_dict(), "max_depth": max_depth, "seed": seed,
                "mode": cfg.mode, "criterion": cfg.criterion or "gini"})
    rows = {r: infos[r]["n_rows"] for r in clients}
    log(cfg, f"{cfg.mode}: {len(clients)} clients, {sum(rows.values())} rows "
              f"({', '.join(f'client {r}: {rows[r]}' for r in clients)}), {enc.tree_type}, "
              f"max_depth {max_depth}")
    summary = {"mode": cfg.mode, "tree_type": enc.tree_type, "n_clients": len(clients),
               "rows": rows, "max_depth": max_depth, "random_state": seed}
    return grow_and_save(comm, cfg, build, TreeJob(cfg, enc, infos, max_depth, seed, summary), t0,
                         lambda tree, kept: {"mode": cfg.mode, "encoding": enc.to_dict(),
                                             "label_column": cfg.label_column, "tree": tree, "summary": kept})


def grow_and_save(comm, cfg, build, job, t0, model_doc):
    """The rounds of a tree job after its set-up: ``build(comm, job)`` grows the
    global tree, the final round hands it (and the merged rules) to every client,
    the summary gathers the clients' metrics, and the server writes its model
    file ``model_doc(tree, summary)``.  Returns the summary."""
    clients, summary = comm.clients, job.summary
    rounds0, bytes0 = comm.rounds, comm.bytes_sent
    tree, rules = build(comm, job)
    final = comm.exchange({r: {"op": protocol.FINAL, "tree": tree, "rules": rules} for r in clients})
    summary["rounds"] = comm.rounds - rounds0
    summary["bytes_sent_by_server"] = comm.bytes_sent - bytes0
    summary["bytes_sent_by_clients"] = {r: final[r]["bytes_sent"] for r in clients}
    for key in ("train", "test"):
        if final[clients[0]].get(key):
            per = {r: final[r][key] for r in clients}
            summary[f"{key}_metrics"] = per
            for m, v in client_metrics(per).items():
                summary[f"{key}_{m}"] = v
    summary["model_dirs"] = {r: final[r]["model_dir"] for r in clients}
    if tree is not None:
        folder = server_dir(cfg.model_dir)
        with replaced_folder(folder) as stage:
            save_model(stage, model_doc(tree, {k: v for k, v in summary.items() if k != "model_dirs"}))
        summary["model_dirs"][0] = os.path.join(folder, "model.json")
    summary["seconds"] = time.perf_counter() - t0
    if "test_accuracy" in summary or "train_accuracy" in summary:
        which = "test" if "test_accuracy" in summary else "train"
        log(cfg, f"{cfg.mode}: mean client {which} accuracy {summary[f'{which}_accuracy']:.4f}, "
                  f"macro-F1 {summary[f'{which}_f1']:.4f} ({summary['rounds']} rounds, "
                  f"{summary['seconds']:.2f}s)")
    write_summary(cfg.summary_json, summary)
    return summary


def tree_setup(setup, cfg, enc):
    """A tree mode's ``setup`` message checked against this client's settings:
    the values of this client's own settings (mode, depth, criterion, seed)."""
    op = protocol.SETUP
    out = same_settings(setup, op, {"mode": cfg.mode, "max_depth": tree_depth(cfg, enc),
                                     "criterion": cfg.criterion or "gini"})
    out["seed"] = job_seed_of(setup, op, cfg)
    return out


class ClientTree:
    """What a tree mode's client handlers see: its rows, encoding and set-up
    (the set-up as this client's settings give it, see :func:`tree_setup`)."""

    def __init__(self, comm, cfg, setup, enc, X, y, test):
        self.comm, self.cfg, self.enc = comm, cfg, enc
        self.setup = tree_setup(setup, cfg, enc)
        self.X, self.y, self.test = X, y, test
        self.own = None

    @property
    def n_features(self):
        return len(self.enc.columns)

    @property
    def n_classes(self):
        return len(self.enc.classes)

    def tree(self, op, field, tree, max_depth=None, max_nodes=None):
        """A tree of the server's ``op`` message, checked against this client's
        columns, classes and tree type (see :func:`message_tree`)."""
        return message_tree(op, field, tree, self.n_features, self.n_classes, self.enc.tree_type,
                          max_depth=max_depth, max_nodes=max_nodes)

    def own_tree(self, rows=None):
        """This client's own tree (fitted once, on its ``rows`` when given)."""
        if self.own is None:
            s = self.setup
            X, y = (self.X, self.y) if rows is None else (self.X[rows], self.y[rows])
            self.own = fit_client_tree(X, y, self.enc, s["max_depth"], s["seed"] + self.comm.rank, s["criterion"])
        return self.own


def global_tree(client):
    """The limits of the final tree of a tree mode that grows one: the job's depth."""
    return {"max_depth": client.setup["max_depth"]}


def no_rules(client, rules):
    """The final ``rules`` of a mode that sends none: empty."""
    if rules is not None and not (isinstance(rules, dict) and not rules):
        raise bad_message(protocol.FINAL, "rules", "this mode sends no rules")
    return {}


def run_tree_client(comm, cfg, handlers=None, final_tree=global_tree, final_rules=no_rules):
    """Client of a tree mode: set-up, then the mode's ``handlers`` (``{message
    name: handler(client, msg)}``; no other message is answered), until the final tree
    arrives: it is evaluated on this client's rows (and test file) and saved.

    ``final_tree(client)`` gives the limits of the final tree (keywords of
    :meth:`ClientTree.tree`), or None when every client keeps its own tree (the
    server then sends none); ``final_rules(client, rules)`` checks the final
    rules and returns what to save (nothing when empty)."""
    client = ClientTree(comm, cfg, *client_setup(comm, cfg, cfg.tree_type))
    return serve_client_tree(comm, cfg, client, handlers, final_tree, final_rules,
                             lambda tree, reply: {"mode": cfg.mode, "encoding": client.enc.to_dict(),
                                                  "label_column": cfg.label_column, "tree": tree,
                                                  "client": comm.rank, "metrics": reply})


def serve_client_tree(comm, cfg, client, handlers, final_tree, final_rules, model_doc):
    """The rounds of a tree client after its set-up (see :func:`run_tree_client`):
    the mode's ``handlers`` until the final tree, which is scored on the
    client's rows (and test file) and saved as ``model_doc(tree, metrics)``."""
    rank = comm.rank
    bytes0 = comm.bytes_sent

    def final(msg):
        limits = final_tree(client)
        sent = field_of(msg, protocol.FINAL, "tree")
        if limits is None:
            if sent is not None:
                raise bad_message(protocol.FINAL, "tree", f"every client keeps its own tree in mode {cfg.mode!r}")
            tree = client.own_tree()
        else:
            tree = client.tree(protocol.FINAL, "tree", sent, **limits)
        rules = final_rules(client, msg.get("rules"))
        reply = {"train": class_scores(client.y, tree_proba(tree, client.X))}
        if client.test is not None:
            reply["test"] = class_scores(client.test[1], tree_proba(tree, client.test[0]))
        folder = client_dir(cfg.model_dir, rank)
        with replaced_folder(folder) as stage:
            if rules:
                save_rules(stage, rules)
            save_model(stage, model_doc(tree, reply))
        reply.update(model_dir=folder, bytes_sent=comm.bytes_sent - bytes0)
        return Done(folder, reply)

    table = {protocol.FINAL: final}     # a mode that shares its own tree (icdta4fl) handles train_local
    for op, handler in (handlers or {}).items():
        table[op] = (lambda h: lambda msg: h(client, msg))(handler)
    return serve(comm, table)


def predict_proba(doc, X):
    """Prediction with a saved tree model (the tree modes' ``predict_proba`` role)."""
    return tree_proba(doc["tree"], X)


def rule_text(rule, enc):
    """A rule in the job's column names and category values."""
    text = rule.text(names=enc.columns, categories=enc.categories, joiner=" AND ", empty="always")
    return f"IF {text} THEN {enc.classes[int(np.argmax(rule.dist))]}"


def covered(rows, n):
    """A rule's coverage as ``explain`` prints it (``rows``: per node, or None)."""
    if rows is None:
        return ""
    total = max(1, int(rows[0]))
    return f"  [{int(rows[n])} rows, {100 * int(rows[n]) / total:.1f} %]"


def explain(doc, X=None, raw=None, row=None, rules=None, rows=None):
    """The saved tree as rules; with one encoded row ``X`` (and its raw values
    ``raw``), the rule that decided it (the tree modes' ``explain`` role).
    A mode may pass the ``rules`` to show per leaf (default: the tree's paths)
    and ``rows``, the training rows reaching each node, printed per rule."""
    enc = doc["encoding"]
    kind = CATEGORICAL if enc.tree_type == "id3" else NUMERIC
    rules = leaf_rules(doc["tree"], kind) if rules is None else rules
    lines = [f"{doc['mode']} model ({enc.tree_type}, {len(rules)} rules, classes {enc.classes}"
             + ("; [rows of the clients' training data that reach the rule]" if rows is not None else "") + "):"]
    order = sorted(rules)
    for k, n in enumerate(order, start=1):
        lines.append(f"  rule {k}: {rule_text(rules[n], enc)}{covered(rows, n)}")
    if X is not None:
        leaf = int(tree_format.apply(doc["tree"], np.asarray(X, dtype=np.float64))[0])

        def shown(features):
            return ", ".join(f"{enc.columns[f]}={text_of(raw[enc.columns[f]])}" for f in sorted(features))
        if leaf in rules:
            lines.append(f"row {row} ({shown(rules[leaf].conditions) or 'no conditions'}) is decided by "
                         f"rule {order.index(leaf) + 1}: {rule_text(rules[leaf], enc)}")
        else:  # an ID3 node without a branch for the row's category
            f = int(doc["tree"]["feature"][leaf])
            lines.append(f"row {row} ({shown([f])}) has a category with no branch at an inner node; "
                         f"it takes that node's class {enc.classes[int(np.argmax(doc['tree']['value'][leaf]))]}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Model files
# ---------------------------------------------------------------------------
def _jsonable(tree):
    return {k: np.asarray(v).tolist() for k, v in tree.items()}


_FLOAT_KEYS = ("value", "threshold", "support")


def _arrays(tree):
    out = {}
    for k, v in tree.items():
        a = np.asarray(v)
        out[k] = a.astype(np.float64) if k in _FLOAT_KEYS else a.astype(np.int64)
    return out


def write_model_doc(folder, doc):
    """Write ``folder/model.json`` atomically with the format header."""
    doc = dict(doc, format=FORMAT, format_version=FORMAT_VERSION, fedforest_version=__version__)
    data = json.dumps(doc, indent=1, sort_keys=True, default=float).encode()
    path = os.path.join(folder, "model.json")
    atomic_write(path, lambda fh: fh.write(data))
    return path


def save_model(folder, doc):
    """A tree model: ``folder/model.json`` (tree arrays as lists), written atomically."""
    return write_model_doc(folder, dict(doc, tree=_jsonable(doc["tree"])))


RULE_KEYS = ("dist", "support", "mass", "val", "lo", "hi")


def save_rules(folder, rules):
    """The merged rule set of an ICDTA4FL job as ``folder/rules.npz`` (written
    atomically): arrays of numbers under the names of :data:`RULE_KEYS` only."""
    if any(k not in RULE_KEYS for k in rules) or any(
            not isinstance(v, np.ndarray) or v.dtype.kind not in "biuf" for v in rules.values()):
        raise ValueError("rules must be arrays of numbers named among " + ", ".join(RULE_KEYS))
    path = os.path.join(folder, "rules.npz")
    atomic_write(path, lambda fh: np.savez(fh, **{k: rules[k] for k in RULE_KEYS if k in rules}))
    return path


def client_folders(model_dir):
    """The client folders of a job folder that hold a model, in rank order."""
    if not os.path.isdir(model_dir):
        return []
    found = [d for d in os.listdir(model_dir) if d.startswith("client-") and d[7:].isdigit()
             and os.path.isfile(os.path.join(model_dir, d, "model.json"))]
    return [os.path.join(model_dir, d) for d in sorted(found, key=lambda d: int(d[7:]))]


def model_file(model_dir):
    """The model file of a job folder (the server's global model) or of one
    client's folder.  A job whose clients keep their own models (no global
    model) is refused with the client folders to use instead."""
    for cand in (os.path.join(model_dir, "server", "model.json"), os.path.join(model_dir, "model.json")):
        if os.path.isfile(cand):
            return cand
    clients = client_folders(model_dir)
    if clients:
        raise InputError("model_dir", f"{model_dir!r} holds no global model: each client keeps its own "
                                      f"({len(clients)} client folders); predict with one client's model, "
                                      f"e.g. --model-dir {clients[0]}")
    raise InputError("model_dir", f"{model_dir!r} holds no horizontal model (model.json)")


def load_model(model_dir):
    """The model document of a horizontal model folder, with ``folder``, the
    :class:`Encoding` and (tree modes) the canonical tree arrays."""
    path = model_file(model_dir)
    try:
        with open(path) as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        raise InputError("model_dir", f"cannot read {path!r}: {exc}") from None
    except RecursionError:
        raise InputError("model_dir", f"cannot read {path!r}: nested too deeply") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        fmt = doc.get("format") if isinstance(doc, dict) else None
        raise InputError("model_dir", f"{path!r} is not a {FORMAT} model (format {fmt!r})")
    if doc.get("format_version") not in READABLE_VERSIONS:
        raise InputError("model_dir", f"{path!r} has format version {doc.get('format_version')}; this "
                                      f"fedforest reads versions {', '.join(map(str, READABLE_VERSIONS))}")
    doc["folder"] = os.path.dirname(path)
    if "tree" in doc:
        if not isinstance(doc["tree"], dict):
            raise InputError("model_dir", f"{path!r} holds a tree that is not a dict of arrays")
        try:
            tree = _arrays(doc["tree"])
        except (TypeError, ValueError, OverflowError) as exc:
            raise InputError("model_dir", f"{path!r} holds a tree array that is not a list of numbers "
                                          f"({exc})") from None
        if doc["format_version"] == 1:
            tree = tree_format.upgrade_v1(tree)
        tree_format.check(tree, f"model {path!r}")
        doc["tree"] = tree
    doc["encoding"] = Encoding.from_dict(doc["encoding"])
    return doc


def _mode_of(doc):
    mode = get_mode(doc.get("mode"))
    if not (mode.has("predict_proba") and mode.has("explain")):
        raise InputError("model_dir", f"mode {mode.name!r} models are not predicted locally")
    return mode


def _text_columns(enc):
    """The columns a model codes as categories: read as text at prediction."""
    return [c for c, cats in zip(enc.columns, enc.categories or [None] * len(enc.columns)) if cats is not None]


def predict_file(model_dir, data, output, label_column=None, id_column="id", na_values=None):
    """Predict one rows file with a saved horizontal model; writes ``output``."""
    doc = load_model(model_dir)
    enc = doc["encoding"]
    table = ClientTable(data, 0, label_column or doc["label_column"], id_column, need_label=False,
                        categorical_columns=_text_columns(enc), na_values=na_values)
    X = enc.features(table.X, "data")
    proba = _mode_of(doc).role("predict_proba")(doc, X)
    df = pd.DataFrame({id_column: table.ids if table.ids is not None else np.arange(X.shape[0])})
    if enc.task == "regression":
        df["prediction"] = proba
    else:
        df["prediction"] = np.array(enc.classes, dtype=object)[proba.argmax(axis=1)]
        for k, c in enumerate(enc.classes):
            df[f"proba_{c}"] = proba[:, k]
    path = os.path.abspath(output)
    atomic_write(path, lambda fh: fh.write(df.to_csv(index=False).encode()))
    n_unseen = int((X < 0).sum()) if enc.tree_type == "id3" else 0
    return {"path": path, "n_rows": X.shape[0], "n_unseen": n_unseen,
            "prediction": df["prediction"].to_numpy()}


def explain_model(model_dir, data=None, row=None, id_column="id"):
    """Text: the saved model; with ``data`` and ``row``, the rule that decided that row."""
    doc = load_model(model_dir)
    enc = doc["encoding"]
    X = raw = None
    if data is not None and row is not None:
        table = ClientTable(data, 0, doc["label_column"], id_column, need_label=False,
                            categorical_columns=_text_columns(enc))
        if not 0 <= row < table.X.shape[0]:
            raise InputError("row", f"must be in 0..{table.X.shape[0] - 1}, got {row}")
        X = enc.features(table.X.iloc[[row]], "data")
        raw = table.X.iloc[row]
    return _mode_of(doc).role("explain")(doc, X, raw, row)
