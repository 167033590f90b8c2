"""Horizontal model files, and what needs no MPI job: a job's folders
(``server/``, ``client-<rank>/``), ``fedforest-horizontal`` JSON model files
(written atomically) and rule files, loading a saved model, and local
prediction / explanation of one (the tree modes' ``predict_proba`` and
``explain`` roles; :func:`predict_file` and :func:`explain_model` for any mode
that has them).

See docs/model-format.md.
"""
import json
import os

import numpy as np
import pandas as pd

from ..version import __version__
from ..errors import InputError
from ..federation.files import atomic_write
from ..federation.registry import get_mode
from ..tree import format as tree_format
from ..tree.rules import CATEGORICAL, NUMERIC, leaf_rules
from .encoding import ClientTable, Encoding, text_of


FORMAT = "fedforest-horizontal"
FORMAT_VERSION = 2           # 2: ID3 leaves marked with tree.format.LEAF (version 1: -1), upgraded on load
READABLE_VERSIONS = (1, 2)


# ---------------------------------------------------------------------------
# A job's folders
# ---------------------------------------------------------------------------
def server_dir(model_dir):
    return os.path.join(model_dir, "server")


def client_dir(model_dir, rank):
    return os.path.join(model_dir, f"client-{rank}")


def check_model_folder(folder, cfg, what):
    """Refuse to replace a model already in ``folder`` unless ``overwrite``."""
    if os.path.isfile(os.path.join(folder, "model.json")) and not cfg.overwrite:
        raise InputError(what, f"{folder!r} already holds a model; use another model_dir or pass --overwrite")


# ---------------------------------------------------------------------------
# Tree models: prediction and explanation
# ---------------------------------------------------------------------------
def tree_proba(tree, X):
    """Class distributions of the rows of ``X`` in a canonical tree."""
    return tree_format.node_values(tree, np.asarray(X, dtype=np.float64))


def predict_proba(doc, X):
    """Prediction with a saved tree model (the tree modes' ``predict_proba`` role)."""
    return tree_proba(doc["tree"], X)


def rule_text(rule, enc):
    """A rule in the job's column names and category values."""
    text = rule.text(names=enc.columns, categories=enc.categories, joiner=" AND ", empty="always")
    return f"IF {text} THEN {enc.classes[int(np.argmax(rule.dist))]}"


#: what :func:`covered` prints, for the header of ``explain``
COVERED = ("rows of the clients' training data that reach the rule, their share of all rows; "
           "the share of the rule's class in the kept trees' votes")


def covered(rows, n, dist=None, classes=None):
    """A rule's coverage as ``explain`` prints it (``rows``: per node, or None):
    the rows reaching leaf ``n`` and their share of all rows; with the leaf's
    class distribution ``dist`` (the votes it holds) and the job's ``classes``,
    the share of the rule's class in it (``[703 rows, 18.7 %; vote 91 % no]``)."""
    if rows is None:
        return ""
    total = max(1, int(rows[0]))
    text = f"{int(rows[n])} rows, {100 * int(rows[n]) / total:.1f} %"
    if dist is not None and classes is not None:
        dist = np.asarray(dist, dtype=np.float64)
        c, s = int(np.argmax(dist)), float(dist.sum())
        if s > 0:
            text += f"; vote {100 * dist[c] / s:.0f} % {classes[c]}"
    return f"  [{text}]"


def explain(doc, X=None, raw=None, row=None, rules=None, rows=None):
    """The saved tree as rules; with one encoded row ``X`` (and its raw values
    ``raw``), the rule that decided it (the tree modes' ``explain`` role).
    A mode may pass the ``rules`` to show per leaf (default: the tree's paths)
    and ``rows``, the training rows reaching each node, printed per rule."""
    enc = doc["encoding"]
    kind = CATEGORICAL if enc.tree_type == "id3" else NUMERIC
    rules = leaf_rules(doc["tree"], kind) if rules is None else rules
    lines = [f"{doc['mode']} model ({enc.tree_type}, {len(rules)} rules, classes {enc.classes}"
             + (f"; [{COVERED}]" if rows is not None else "") + "):"]
    order = sorted(rules)
    for k, n in enumerate(order, start=1):
        lines.append(f"  rule {k}: {rule_text(rules[n], enc)}{covered(rows, n, rules[n].dist, enc.classes)}")
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


# ---------------------------------------------------------------------------
# Local prediction and explanation of a model folder
# ---------------------------------------------------------------------------
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
