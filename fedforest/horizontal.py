"""Horizontal federated learning: clients share columns and hold different rows.

Rank 0 is the server, ranks 1..K the clients; each client reads its own rows
file (features + label, an ID column is optional).  This module holds what
every horizontal algorithm shares:

* :func:`server_setup` / :func:`client_setup`: the clients report their
  column names and kinds, classes and (for categorical trees) category
  values; the server checks that the column sets agree and sends back the
  common encoding (class list, per-column categories), so every client codes
  its rows the same way;
* :class:`Encoding`: the common encoding of rows — numeric columns as floats
  (CART), or every column as category codes with a missing value as a
  category of its own (ID3);
* model files (``fedforest-horizontal`` JSON, written atomically) and local
  prediction / explanation of a saved global tree, which need no MPI job.

The algorithms are in :mod:`fedforest.icdta4fl` (ICDTA4FL and the local,
centralized and Federated-ID3 baselines).  See docs/horizontal.md.
"""
import importlib
import json
import os

import numpy as np
import pandas as pd

from . import __version__, model_io
from .data.io import read_table
from .errors import InputError
from .tree.id3 import leaf_of, path_conditions
from .tree.rules import CATEGORICAL, NUMERIC, Rule

# mode -> module (under fedforest) holding its ``server_train`` and ``client_train``
ALGORITHMS = {"icdta4fl": "icdta4fl", "local": "icdta4fl", "centralized": "icdta4fl",
              "federated_id3": "icdta4fl", "fedxgbllr": "fedxgbllr"}

FORMAT = "fedforest-horizontal"
FORMAT_VERSION = 1
MISSING = "NA"               # the category of a missing value (ID3)
MAX_CATEGORIES = 64          # distinct values a column may have in an ID3 job


def roles(mode):
    """(server function, client function) of a horizontal mode."""
    if mode not in ALGORITHMS:
        raise InputError("mode", f"must be one of {('vertical',) + tuple(ALGORITHMS)}, got {mode!r}")
    module = importlib.import_module(f"fedforest.{ALGORITHMS[mode]}")
    return module.server_train, module.client_train


def log(cfg, text):
    """A summary line on the server (nothing when ``quiet``)."""
    if not cfg.quiet:
        print(text, flush=True)


def expect(msg, op):
    if msg.get("op") != op:
        raise RuntimeError(f"protocol error: expected {op!r}, got {msg.get('op')!r}")
    return msg


def check_clients(cfg):
    """The job keys every horizontal mode reads: one data file (and optional
    test file) per client, the label column."""
    if not isinstance(cfg.data, list) or not cfg.data:
        raise InputError("data", "must list one data file per client")
    if cfg.n_parties is None:
        cfg.n_parties = cfg.values["n_parties"] = len(cfg.data)
    if len(cfg.data) != cfg.n_parties:
        raise InputError("data", f"lists {len(cfg.data)} files but n_parties is {cfg.n_parties}")
    if cfg.test_data is not None and (not isinstance(cfg.test_data, list)
                                      or len(cfg.test_data) != cfg.n_parties):
        raise InputError("test_data", f"must list one test file per client ({cfg.n_parties}), "
                                      f"got {cfg.test_data!r}")
    if not cfg.label_column:
        raise InputError("label_column", "is required for training")


def check_world(comm, cfg):
    if comm.size - 1 != cfg.n_parties:
        raise InputError("n_parties", f"the job names {cfg.n_parties} clients but runs {comm.size} "
                                      f"ranks; start it with mpiexec -n {cfg.n_parties + 1}")


def server_setup(comm, cfg, tree_type, task="classification"):
    """Server start-up shared by every horizontal mode: world size, handshake,
    the clients' descriptions and the job-wide encoding.  Returns (infos, Encoding)."""
    check_world(comm, cfg)
    comm.reply_timeout = cfg.reply_timeout
    comm.handshake()
    infos = comm.exchange({r: {"op": "load", "tree_type": tree_type, "task": task} for r in comm.clients})
    return infos, agree(infos, tree_type, task)


def client_setup(comm, cfg):
    """Client start-up matching :func:`server_setup`, up to the server's
    ``setup`` message.  Returns (setup message, Encoding, X, y, test) where
    ``test`` is ``(X, y)`` of the client's ``test_data`` file or None."""
    rank = comm.rank
    check_world(comm, cfg)
    comm.reply_timeout = cfg.reply_timeout
    comm.handshake()
    msg = expect(comm.recv(0), "load")
    table = ClientTable(cfg.data[rank - 1], rank, cfg.label_column, cfg.id_column)
    comm.send(0, table.describe(msg["tree_type"], msg["task"]))
    setup = expect(comm.recv(0), "setup")
    enc = Encoding.from_dict(setup["encoding"])
    what = _what(rank)
    X, y = enc.features(table.X, what), enc.labels(table.y, what)
    test = None
    if cfg.test_data:
        tt = ClientTable(cfg.test_data[rank - 1], rank, cfg.label_column, cfg.id_column)
        test = (enc.features(tt.X, f"{what} test data"), enc.labels(tt.y, f"{what} test data"))
    return setup, enc, X, y, test


def server_dir(model_dir):
    return os.path.join(model_dir, "server")


def client_dir(model_dir, rank):
    return os.path.join(model_dir, f"client-{rank}")


def _what(rank):
    return f"client {rank}"


def _text(v):
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


class ClientTable:
    """One client's rows: features (DataFrame) and labels."""

    def __init__(self, path, rank, label_column, id_column, need_label=True):
        what = _what(rank)
        df = read_table(path, None, what)
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
            classes = sorted({_text(v) for v in self.y})
        out = {"n_rows": int(self.X.shape[0]), "columns": list(self.X.columns), "kinds": kinds,
               "classes": classes}
        if tree_type == "id3":
            out["categories"] = [sorted({_text(v) for v in self.X[c].dropna()})
                                 + ([MISSING] if self.X[c].isna().any() else []) for c in self.X.columns]
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
        text = [_text(v) for v in y]
        unknown = sorted({t for t in text if t not in codes})
        if unknown:
            raise InputError(what, f"labels {unknown[:5]} are not among the job's classes {self.classes}")
        return np.array([codes[t] for t in text], dtype=np.int64)

    def features(self, X, what):
        """Rows as floats (CART) or category codes (ID3; an unseen category is
        coded -1 and handled by prediction as "no branch")."""
        missing = [c for c in self.columns if c not in X.columns]
        extra = [c for c in X.columns if c not in self.columns]
        if missing or extra:
            raise InputError(what, f"column set differs from the job's: missing {missing}, unexpected {extra}")
        X = X[self.columns]
        if self.tree_type == "xgboost":  # numeric; missing values allowed, XGBoost learns where they go
            try:
                out = X.to_numpy(dtype=np.float64)
            except (TypeError, ValueError):
                raise InputError(what, "XGBoost needs numeric columns") from None
            if np.isinf(out).any():
                cols = [c for c, bad in zip(self.columns, np.isinf(out).any(axis=0)) if bad]
                raise InputError(what, f"infinite values in {cols[:5]}")
            return out
        if self.tree_type == "cart":
            try:
                out = X.to_numpy(dtype=np.float64)
            except (TypeError, ValueError):
                raise InputError(what, "tree_type 'cart' needs numeric columns") from None
            if np.isnan(out).any():
                cols = [c for c, bad in zip(self.columns, np.isnan(out).any(axis=0)) if bad]
                raise InputError(what, f"missing values in {cols[:5]}: tree_type 'cart' needs complete "
                                       "numeric columns (impute them, or use tree_type 'id3')")
            return out
        out = np.empty(X.shape, dtype=np.int64)
        for j, (c, cats) in enumerate(zip(self.columns, self.categories)):
            index = {v: i for i, v in enumerate(cats)}
            col = X[c]
            text = [MISSING if pd.isna(v) else _text(v) for v in col]
            out[:, j] = [index.get(t, -1) for t in text]
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
            raise InputError(_what(r), f"has other columns than client {ranks[0]}: missing {missing}, "
                                       f"unexpected {extra}")
    columns = first["columns"]
    classes = sorted({c for r in ranks for c in infos[r]["classes"]})
    if task == "classification" and len(classes) < 2:
        raise InputError("labels", f"all clients together have only the class(es) {classes}; "
                                   "a classifier needs at least two")
    if tree_type in ("cart", "xgboost"):
        text = sorted({c for r in ranks for c, k in zip(infos[r]["columns"], infos[r]["kinds"])
                       if k == "text"})
        if text:
            raise InputError("tree_type", f"{tree_type!r} needs numeric columns; text columns: {text[:5]} "
                                          "(encode them as numbers" + (", or use tree_type 'id3')"
                                                                      if tree_type == "cart" else ")"))
        return Encoding(tree_type, columns, classes, task=task)
    categories = []
    for c in columns:
        values = set()
        for r in ranks:
            values |= set(infos[r]["categories"][infos[r]["columns"].index(c)])
        if len(values) > MAX_CATEGORIES:
            raise InputError("tree_type", f"column {c!r} has {len(values)} distinct values; 'id3' takes "
                                          f"at most {MAX_CATEGORIES} per column (discretize it, or use "
                                          "tree_type 'cart')")
        categories.append(sorted(values - {MISSING}) + ([MISSING] if MISSING in values else []))
    return Encoding("id3", columns, classes, categories)


# ---------------------------------------------------------------------------
# Trees of either kind: prediction and rules
# ---------------------------------------------------------------------------
def predict_proba(tree, X, tree_type):
    if tree_type == "id3":
        return tree["value"][leaf_of(tree, X)]
    return tree["value"][binary_leaf_of(tree, X)]


def binary_leaf_of(tree, X):
    cl, cr, feat, thr = tree["children_left"], tree["children_right"], tree["feature"], tree["threshold"]
    out = np.zeros(X.shape[0], dtype=np.int64)
    for i, x in enumerate(X):
        n = 0
        while cl[n] >= 0:
            n = cl[n] if x[feat[n]] <= thr[n] else cr[n]
        out[i] = n
    return out


def leaf_rules(tree, tree_type):
    """{leaf node: Rule} of a tree (the rules a global tree decides with)."""
    if tree_type == "id3":
        paths = path_conditions(tree)
        return {n: Rule(paths[n], tree["value"][n], float(tree["support"][n]), CATEGORICAL)
                for n in range(len(tree["feature"])) if tree["feature"][n] < 0}
    out = {}
    stack = [(0, {})]
    cl, cr, feat, thr = tree["children_left"], tree["children_right"], tree["feature"], tree["threshold"]
    while stack:
        n, cond = stack.pop()
        if cl[n] < 0:
            out[n] = Rule(cond, tree["value"][n], 0.0, NUMERIC)
            continue
        f, t = int(feat[n]), float(thr[n])
        lo, hi = cond.get(f, (-np.inf, np.inf))
        stack.append((int(cr[n]), {**cond, f: (max(lo, t), hi)}))
        stack.append((int(cl[n]), {**cond, f: (lo, min(hi, t))}))
    return out


def rule_text(rule, enc):
    """A rule in the job's column names and category values."""
    text = rule.text(names=enc.columns, categories=enc.categories, joiner=" AND ", empty="always")
    return f"IF {text} THEN {enc.classes[int(np.argmax(rule.dist))]}"


# ---------------------------------------------------------------------------
# Model files
# ---------------------------------------------------------------------------
def _jsonable(tree):
    return {k: np.asarray(v).tolist() for k, v in tree.items()}


def _arrays(tree):
    out = {}
    for k, v in tree.items():
        a = np.asarray(v)
        out[k] = a.astype(np.float64) if k in ("value", "threshold", "support") else a.astype(np.int64)
    return out


def save_model(folder, doc):
    """Write ``folder/model.json`` atomically (tree arrays as lists)."""
    doc = dict(doc, format=FORMAT, format_version=FORMAT_VERSION, fedforest_version=__version__,
               tree=_jsonable(doc["tree"]))
    data = json.dumps(doc, indent=1, sort_keys=True, default=float).encode()
    os.makedirs(folder, exist_ok=True)
    model_io._atomic_write(os.path.join(folder, "model.json"), lambda fh: fh.write(data))
    return os.path.join(folder, "model.json")


def save_rules(folder, rules):
    """The merged rule set of an ICDTA4FL job as ``folder/rules.npz`` (written atomically)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "rules.npz")
    model_io._atomic_write(path, lambda fh: np.savez(fh, **rules))
    return path


def model_file(model_dir):
    """The model file of a job folder (server copy first) or of a client folder."""
    for cand in (os.path.join(model_dir, "server", "model.json"), os.path.join(model_dir, "model.json")):
        if os.path.isfile(cand):
            return cand
    clients = sorted(d for d in os.listdir(model_dir) if d.startswith("client-")) \
        if os.path.isdir(model_dir) else []
    for d in clients:
        cand = os.path.join(model_dir, d, "model.json")
        if os.path.isfile(cand):
            return cand
    raise InputError("model_dir", f"{model_dir!r} holds no horizontal model (model.json)")


def load_model(model_dir):
    path = model_file(model_dir)
    try:
        with open(path) as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        raise InputError("model_dir", f"cannot read {path!r}: {exc}") from None
    if doc.get("format") != FORMAT:
        raise InputError("model_dir", f"{path!r} is not a {FORMAT} model (format {doc.get('format')!r})")
    if doc.get("format_version") != FORMAT_VERSION:
        raise InputError("model_dir", f"{path!r} has format version {doc.get('format_version')}; this "
                                      f"fedforest reads version {FORMAT_VERSION}")
    doc["folder"] = os.path.dirname(path)
    if "tree" in doc:
        doc["tree"] = _arrays(doc["tree"])
    doc["encoding"] = Encoding.from_dict(doc["encoding"])
    return doc


def _proba(doc, X):
    if doc["mode"] == "fedxgbllr":
        from .fedxgbllr import predict_proba as xgb_proba
        return xgb_proba(dict(doc, encoding=doc["encoding"].to_dict()), doc["folder"], X)
    return predict_proba(doc["tree"], X, doc["encoding"].tree_type)


def predict_file(model_dir, data, output, label_column=None, id_column="id"):
    """Predict one rows file with a saved horizontal model; writes ``output``."""
    doc = load_model(model_dir)
    enc = doc["encoding"]
    table = ClientTable(data, 0, label_column or doc["label_column"], id_column, need_label=False)
    X = enc.features(table.X, "data")
    proba = _proba(doc, X)
    df = pd.DataFrame({id_column: table.ids if table.ids is not None else np.arange(X.shape[0])})
    if enc.task == "regression":
        df["prediction"] = proba
    else:
        df["prediction"] = np.array(enc.classes, dtype=object)[proba.argmax(axis=1)]
        for k, c in enumerate(enc.classes):
            df[f"proba_{c}"] = proba[:, k]
    path = os.path.abspath(output)
    model_io._atomic_write(path, lambda fh: fh.write(df.to_csv(index=False).encode()))
    n_unseen = int((X < 0).sum()) if enc.tree_type == "id3" else 0
    return {"path": path, "n_rows": X.shape[0], "n_unseen": n_unseen,
            "prediction": df["prediction"].to_numpy()}


def explain(model_dir, data=None, row=None, id_column="id"):
    """Text: the global tree as rules; with ``data`` and ``row``, the rule that decided that row."""
    doc = load_model(model_dir)
    enc = doc["encoding"]
    if doc["mode"] == "fedxgbllr":
        from .fedxgbllr import explain_text
        return explain_text(dict(doc, encoding=enc.to_dict()), doc["folder"])
    rules = leaf_rules(doc["tree"], enc.tree_type)
    lines = [f"{doc['mode']} model ({enc.tree_type}, {len(rules)} rules, classes {enc.classes}):"]
    order = sorted(rules)
    for k, n in enumerate(order, start=1):
        lines.append(f"  rule {k}: {rule_text(rules[n], enc)}")
    if data is not None and row is not None:
        table = ClientTable(data, 0, doc["label_column"], id_column, need_label=False)
        if not 0 <= row < table.X.shape[0]:
            raise InputError("row", f"must be in 0..{table.X.shape[0] - 1}, got {row}")
        X = enc.features(table.X.iloc[[row]], "data")
        leaf = (leaf_of(doc["tree"], X) if enc.tree_type == "id3" else binary_leaf_of(doc["tree"], X))[0]
        raw = table.X.iloc[row]

        def shown(features):
            return ", ".join(f"{enc.columns[f]}={_text(raw[enc.columns[f]])}" for f in sorted(features))
        if leaf in rules:
            lines.append(f"row {row} ({shown(rules[leaf].conditions) or 'no conditions'}) is decided by "
                         f"rule {order.index(leaf) + 1}: {rule_text(rules[leaf], enc)}")
        else:  # an ID3 node without a branch for the row's category
            f = int(doc["tree"]["feature"][leaf])
            lines.append(f"row {row} ({shown([f])}) has a category with no branch at an inner node; "
                         f"it takes that node's class {enc.classes[int(np.argmax(doc['tree']['value'][leaf]))]}")
    return "\n".join(lines)
