"""Checks of the server's messages on a client (every horizontal mode).

The server holds valid channel keys but is trusted with neither the client's
memory, its files nor its privacy: every value of an in-job message that
reaches a kernel, a file, a noise draw or a model is checked against the
client's own accepted settings (``cfg``) and its own data, or taken from them.
A malformed value (a tree that is not a tree, an index out of range, an array
of the wrong shape, a key the protocol never sends) is a ProtocolError naming
the message and field; a setting the server sends otherwise than this
client's settings give is an InputError naming the setting.
"""
import numbers

import numpy as np

from ..errors import InputError
from ..federation import protocol
from ..tree import format as tree_format
from .encoding import Encoding


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
