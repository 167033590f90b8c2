"""Looking into a vertical model without pooling it.

Each rank's folder holds only that rank's part of the forest, so each role
explains what it alone knows:

* a party: the importance (mean decrease in impurity) of each of its own
  columns, from the share of its tree's impurity decrease the master sent
  it for every split it owns (:func:`fedforest.tree.importance.party_importances`);
  these are the forest's importances restricted to the party's columns;
* the master: each party's total share (it knows which party owns each split,
  not the feature or the threshold).

The decision path of one row needs every party's columns; it runs as a
prediction job with ``explain_row`` (see :func:`path_lines` and
:func:`party_path_lines`).
"""
import json
import os

import numpy as np

from ..errors import InputError
from ..tree.format import NO_CHILD
from ..tree.importance import owner_totals, party_importances
from . import model_files


def role_folders(model_dir):
    """The vertical role folders at ``model_dir``: the folder itself when it
    is one (``master`` or ``party-N``), else its ``master``/``party-N``
    subfolders; [] when there is none."""
    if os.path.isfile(os.path.join(model_dir, model_files.MANIFEST)):
        return [model_dir] if _is_vertical(model_dir) else []
    if not os.path.isdir(model_dir):
        return []
    subs = sorted((d for d in os.listdir(model_dir)
                   if d == "master" or (d.startswith("party-") and d[6:].isdigit())),
                  key=lambda d: -1 if d == "master" else int(d[6:]))
    return [os.path.join(model_dir, d) for d in subs
            if os.path.isfile(os.path.join(model_dir, d, model_files.MANIFEST))]


def _is_vertical(folder):
    try:
        with open(os.path.join(folder, model_files.MANIFEST), "rb") as fh:
            return json.load(fh).get("format") == model_files.FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _load(folder):
    m = model_files.read_manifest(folder)
    if not m.get("complete"):
        raise InputError("model", f"{folder!r} holds an unfinished training checkpoint "
                                  f"({m.get('n_trees')} of {m.get('n_estimators')} trees)")
    return m, model_files.read_trees(folder, m["n_trees"])


def party_feature_importances(folder):
    """``(columns, importances)`` of a party folder."""
    m, trees = _load(folder)
    if m.get("role") != "party":
        raise InputError("model", f"{folder!r} is not a party's folder")
    if any("importance" not in t for t in trees):
        raise InputError("model", f"{folder!r} was trained by a fedforest that did not record "
                                  "importances; train again to get them")
    return list(m["columns"]), party_importances(trees, len(m["columns"]))


def master_party_totals(folder):
    """Each party's share of the forest's impurity decrease (index 0 = party 1)."""
    m, trees = _load(folder)
    if m.get("role") != "master":
        raise InputError("model", f"{folder!r} is not the master's folder")
    return owner_totals(trees, int(m["n_parties"]))


def split_counts(folder):
    """``(columns, splits)`` of a party folder: how many splits use each of its
    columns (XGBoost's ``weight`` importance; no label statistic needed)."""
    m, trees = _load(folder)
    n = len(m["columns"])
    counts = np.zeros(n, dtype=np.int64)
    for t in trees:
        f = np.asarray(t["feature"])
        counts += np.bincount(f[f >= 0], minlength=n)
    return list(m["columns"]), counts


def holder_party_totals(folder):
    """With encrypted labels, the label holder's view: each party's share of
    the forest's impurity decrease (it holds every split's share)."""
    m, trees = _load(folder)
    return owner_totals(trees, int(m["n_parties"]))


def describe(model_dir, top=None):
    """Text: what each role folder at ``model_dir`` knows of the importances."""
    folders = role_folders(model_dir)
    if not folders:
        raise InputError("model_dir", f"{model_dir!r} holds no vertical model")
    out = []
    for folder in folders:
        m = model_files.read_manifest(folder)
        encrypted = m.get("label_privacy") == "paillier"
        if encrypted and m.get("role") == "master":
            out.append(f"master ({folder}): {m['n_trees']} trees, {m['task']}; the importances are label "
                       f"statistics held by the label holder (party {m['label_party']})")
            continue
        if encrypted and not m.get("has_label"):
            columns, counts = split_counts(folder)
            out.append(f"party {m['rank']} ({folder}): splits on its own columns (the importances are label "
                       "statistics held by the label holder):")
            order = np.argsort(-counts, kind="stable")[:top]
            width = max((len(c) for c in columns), default=0)
            out += [f"  {columns[i]:<{width}}  {counts[i]}" for i in order]
            continue
        if encrypted:
            totals = holder_party_totals(folder)
            out.append(f"label holder, party {m['rank']} ({folder}): share of the impurity decrease by party:")
            out += [f"  party {p + 1}: {v:.4f}" for p, v in enumerate(totals)]
        if m.get("role") == "master":
            totals = master_party_totals(folder)
            out.append(f"master ({folder}): {m['n_trees']} trees, {m['task']}; share of the "
                       "impurity decrease by party (the master does not know the features):")
            out += [f"  party {p + 1}: {v:.4f}" for p, v in enumerate(totals)]
        else:
            columns, imp = party_feature_importances(folder)
            out.append(f"party {m['rank']} ({folder}): importance of its own columns (mean decrease "
                       f"in impurity, share of the whole forest; total {imp.sum():.4f}):")
            order = np.argsort(-imp, kind="stable")
            if top is not None:
                order = order[:top]
            width = max((len(c) for c in columns), default=0)
            out += [f"  {columns[i]:<{width}}  {imp[i]:.4f}" for i in order]
    return "\n".join(out)


def tree_path(tree, leaf):
    """Node ids from the root to ``leaf`` in a tree given by its children arrays."""
    left = np.asarray(tree["children_left"])
    right = np.asarray(tree["children_right"])
    parent = np.full(left.shape[0], -1, dtype=np.int64)
    split = np.flatnonzero(left != NO_CHILD)
    parent[left[split]] = split
    parent[right[split]] = split
    path = [int(leaf)]
    while parent[path[-1]] >= 0:
        path.append(int(parent[path[-1]]))
    return path[::-1]


def path_lines(trees, leaves, classes, n_show):
    """The master's view of a row's decision paths: for each of the first
    ``n_show`` trees, the owner of every split on the path and the leaf's value."""
    lines = []
    for t, (tree, leaf) in enumerate(zip(trees[:n_show], leaves[:n_show])):
        path = tree_path(tree, leaf)
        steps = [f"node {n} (party {int(tree['owner'][n]) + 1})" for n in path[:-1]]
        if "value" not in tree:   # encrypted labels: the label holder prints the leaf values
            lines.append(f"tree {t}: " + " -> ".join(steps + [f"leaf {leaf} [value at the label holder]"]))
            continue
        value = tree["value"][leaf]
        if classes is not None:
            shown = ", ".join(f"{c}: {v:.3f}" for c, v in zip(classes, value))
        else:
            shown = f"{value[0]:.6g}"
        lines.append(f"tree {t}: " + " -> ".join(steps + [f"leaf {leaf} [{shown}]"]))
    return lines


def party_path_lines(trees, steps, x, columns, categories):
    """A party's part of a row's decision paths: ``steps`` holds
    ``(tree, node, child)`` for the splits it owns on the paths, ``child`` the
    node the row went to; ``x`` is the row's encoded values of its columns.  A
    split of a text column (``categories``: column name -> its categories, in
    code order) is shown as the categories on the row's side, not as a code
    threshold."""
    lines = []
    for t, a, b in steps:
        tree = trees[t]
        f = int(tree["feature"][a])
        if f < 0:
            raise InputError("path", f"node {a} of tree {t} is not this party's split")
        name = columns[f]
        value = x[f]
        side = "<=" if b == int(tree["children_left"][a]) else ">"
        thr = float(tree["threshold"][a])
        if np.isnan(value):
            shown = f"{name} is missing -> {'left' if side == '<=' else 'right'}"
        elif name in (categories or {}):
            # a text column is split on its category codes: name the categories on the row's side
            cats = list(categories[name])
            code = int(value)
            label = cats[code] if 0 <= code < len(cats) else code
            sent = [str(c) for k, c in enumerate(cats) if (k <= thr) == (side == "<=")]
            shown = f"{name} = {label!r}: {name} in {{{', '.join(sent)}}}"
        else:
            shown = f"{name} = {value:g} {side} {thr:g}"
        lines.append(f"tree {t}, node {a}: {shown}")
    return lines
