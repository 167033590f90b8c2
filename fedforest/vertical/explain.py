"""Looking into a vertical model without pooling it.

Each rank's folder holds only that rank's part of the model, so each role
explains what it alone knows.  A forest (``--mode vertical``):

* a party: the importance (mean decrease in impurity) of each of its own
  columns, from the share of its tree's impurity decrease the master sent
  it for every split it owns (:func:`fedforest.tree.importance.party_importances`);
  these are the forest's importances restricted to the party's columns;
* the master: each party's total share (it knows which party owns each split,
  not the feature or the threshold).

A boosted model (``--mode vertical_boost``) shows XGBoost's importance of one
``importance_type`` (:data:`fedforest.tree.importance.IMPORTANCE_TYPES`):

* plain gradients: a party, its own columns' ``get_score`` values from the
  loss reduction and cover of the splits it owns (it summed the gradients
  and hessians of its children itself); the master, the same per party;
* encrypted gradients: the label holder, every party's columns (its own by
  name, the others' by their party and column number) and their shares as
  XGBoost's ``feature_importances_``; another party, its split counts
  (``weight``); the master, nothing (it holds no label statistic).

The decision path of one row needs every party's columns; it runs as a
prediction job with ``explain_row`` (see :func:`path_lines` and
:func:`party_path_lines`); a boosting tree's leaf is shown as its margin
contribution to the output (class) the tree belongs to (:func:`leaf_text`).
"""
import json
import os

import numpy as np

from ..errors import InputError
from ..federation import privacy as label_privacy
from ..tree.format import NO_CHILD
from ..tree.importance import (IMPORTANCE_MEANING, IMPORTANCE_TYPES, normalised, owner_totals,
                               party_importances, split_gain_cover, split_scores)
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


def _boost_splits(trees, key):
    """``(key ids, gain, cover)`` of every split of a party's or the master's
    boosting trees: ``key`` names the array of ids (``feature``, ``owner``);
    gain and cover from the stored ``gain``/``cover`` arrays (a plain party)
    or the node statistics (the master, the label holder)."""
    parts = [], [], []
    for t in trees:
        split = np.flatnonzero(np.asarray(t["children_left"]) != NO_CHILD)
        gain, cover = (t["gain"], t["cover"]) if "gain" in t else split_gain_cover(t)
        for acc, a in zip(parts, (np.asarray(t[key])[split], np.asarray(gain)[split],
                                  np.asarray(cover)[split])):
            acc.append(a)
    if not parts[0]:
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)
    return tuple(np.concatenate(a) for a in parts)


def _check_type(importance_type):
    if importance_type not in IMPORTANCE_TYPES:
        raise InputError("importance_type", f"must be one of {', '.join(map(repr, IMPORTANCE_TYPES))}, "
                                            f"got {importance_type!r}")


def _boosted(m, folder):
    if m.get("mode") != "vertical_boost":
        raise InputError("model", f"{folder!r} holds a forest, not a boosted model")


def party_boost_scores(folder, importance_type="gain"):
    """``(columns, scores)`` of a party folder of a boosted model trained with
    plain gradients: XGBoost's ``get_score(importance_type)`` of each of its
    own columns (0 for a column without a split); not normalised, as the other
    parties' columns are not known here."""
    _check_type(importance_type)
    m, trees = _load(folder)
    _boosted(m, folder)
    if m.get("role") != "party":
        raise InputError("model", f"{folder!r} is not a party's folder")
    if any("gain" not in t or "cover" not in t for t in trees):
        raise InputError("model", f"{folder!r} holds no split gains and covers (a party of a model "
                                  "with encrypted gradients, or trained by an older fedforest): its "
                                  "importances other than the split counts are at the label holder")
    n = len(m["columns"])
    return list(m["columns"]), split_scores(*_boost_splits(trees, "feature"), n, importance_type)


def master_boost_party_scores(folder, importance_type="gain"):
    """The master of a boosted model with plain gradients: XGBoost's
    ``get_score(importance_type)`` per party, each party's splits taken
    together (index 0 = party 1); the master does not know the features."""
    _check_type(importance_type)
    m, trees = _load(folder)
    _boosted(m, folder)
    if m.get("role") != "master" or label_privacy.of_manifest(m).encrypted:
        raise InputError("model", f"{folder!r} is not the master's folder of a model with plain gradients")
    return split_scores(*_boost_splits(trees, "owner"), int(m["n_parties"]), importance_type)


def holder_boost_scores(folder, importance_type="gain"):
    """The label holder of a boosted model with encrypted gradients: XGBoost's
    ``get_score(importance_type)`` of every column of every party that has a
    split, as ``(names, scores, shares)``: its own columns by name, another
    party's as ``party P column #i`` (the label holder knows which column of
    that party won, not its name); ``shares`` the scores divided by their
    sum, XGBoost's ``feature_importances_``."""
    _check_type(importance_type)
    m, trees = _load(folder)
    _boosted(m, folder)
    if not label_privacy.of_manifest(m).encrypted or not m.get("has_label"):
        raise InputError("model", f"{folder!r} is not the label holder's folder of a model with "
                                  "encrypted gradients")
    own = int(m["rank"]) - 1
    keys, gains, covers = [], [], []
    for t in trees:
        split = np.flatnonzero(np.asarray(t["children_left"]) != NO_CHILD)
        gain, cover = split_gain_cover(t)
        owner = np.asarray(t["owner"])[split]
        local = np.where(owner == own, np.asarray(t["feature"])[split], np.asarray(t["split_feature"])[split])
        keys += list(zip(owner.tolist(), local.tolist()))
        gains.append(gain[split])
        covers.append(cover[split])
    found = sorted(set(keys))
    index = {k: i for i, k in enumerate(found)}
    ids = np.array([index[k] for k in keys], dtype=np.int64)
    gains = np.concatenate(gains) if gains else np.zeros(0)
    covers = np.concatenate(covers) if covers else np.zeros(0)
    scores = split_scores(ids, gains, covers, len(found), importance_type)
    columns = list(m["columns"])
    names = [columns[f] if p == own else f"party {p + 1} column #{f}" for p, f in found]
    return names, scores, normalised(scores)


def _ranked(names, values, top, fmt):
    order = np.argsort(-np.asarray(values[0]), kind="stable")[:top]
    width = max((len(c) for c in names), default=0)
    return [f"  {names[i]:<{width}}  " + "  ".join(fmt(v[i]) for v in values) for i in order]


def _num(v):
    return f"{v:.6g}"


def _describe_boost(folder, m, top, importance_type):
    """The lines of one role folder of a boosted model."""
    kind = f"importance_type '{importance_type}' ({IMPORTANCE_MEANING[importance_type]})"
    encrypted = label_privacy.of_manifest(m).encrypted
    if m.get("role") == "master":
        if encrypted:
            return [f"master ({folder}): {m['n_trees']} trees, {m['task']}; the importances are label "
                    f"statistics held by the label holder (party {m['label_party']})"]
        scores = master_boost_party_scores(folder, importance_type)
        return [f"master ({folder}): {m['n_trees']} trees, {m['task']}; XGBoost's {kind} by party, "
                "each party's splits taken together (the master does not know the features):"] + \
            [f"  party {p + 1}: {_num(v)}" for p, v in enumerate(scores)]
    if encrypted and m.get("has_label"):
        names, scores, shares = holder_boost_scores(folder, importance_type)
        return [f"label holder, party {m['rank']} ({folder}): XGBoost's {kind} of every party's columns "
                "with a split: share (the score divided by the sum, XGBoost's feature_importances_) "
                "and score (get_score's value):"] + _ranked(names, (shares, scores), top, _num)
    if encrypted:
        columns, counts = split_counts(folder)
        return [f"party {m['rank']} ({folder}): splits on its own columns (XGBoost's importance_type "
                "'weight'; the other importance types are label statistics held by the label holder):"] + \
            _ranked(columns, (counts,), top, str)
    columns, scores = party_boost_scores(folder, importance_type)
    return [f"party {m['rank']} ({folder}): XGBoost's {kind} of its own columns (get_score's values; "
            "not divided by their sum, which needs every party's columns):"] + \
        _ranked(columns, (scores,), top, _num)


def describe(model_dir, top=None, importance_type=None):
    """Text: what each role folder at ``model_dir`` knows of the importances.
    ``importance_type`` (boosted models only; None: ``'gain'``, as XGBoost's
    scikit-learn estimators) picks XGBoost's importance shown; a forest shows
    the mean decrease in impurity."""
    folders = role_folders(model_dir)
    if not folders:
        raise InputError("model_dir", f"{model_dir!r} holds no vertical model")
    if importance_type is not None:
        _check_type(importance_type)
    out = []
    for folder in folders:
        m = model_files.read_manifest(folder)
        if m.get("mode") == "vertical_boost":
            out += _describe_boost(folder, m, top, importance_type or "gain")
            continue
        if importance_type is not None:
            raise InputError("importance_type", f"applies to boosted models; {folder!r} holds a forest, "
                                                "whose importances are the mean decrease in impurity")
        encrypted = label_privacy.of_manifest(m).encrypted
        if encrypted and m.get("role") == "master":
            out.append(f"master ({folder}): {m['n_trees']} trees, {m['task']}; the importances are label "
                       f"statistics held by the label holder (party {m['label_party']})")
            continue
        if encrypted and not m.get("has_label"):
            columns, counts = split_counts(folder)
            out.append(f"party {m['rank']} ({folder}): splits on its own columns (the importances are label "
                       "statistics held by the label holder):")
            out += _ranked(columns, (counts,), top, str)
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
            out += _ranked(columns, (imp,), top, lambda v: f"{v:.4f}")
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


def leaf_text(t, value, classes, boost):
    """What leaf ``value`` of tree ``t`` means.  A forest: the class fractions
    (``classes``) or the mean target.  A boosted model (``boost``, the model's
    ``boost`` table): the leaf's contribution to the margin of the output tree
    ``t`` belongs to (output ``t % n_outputs``): the positive class (the
    second) of a binary model, class ``t % n_outputs`` of a softmax one, the
    prediction itself in regression."""
    value = np.asarray(value, dtype=np.float64).reshape(-1)
    if boost is None:
        if classes is not None:
            return ", ".join(f"{c}: {v:.3f}" for c, v in zip(classes, value))
        return f"{value[0]:.6g}"
    return f"{value[0]:+.9g} to {_output_name(t % int(boost['n_outputs']), classes)}"


def _output_name(k, classes):
    if classes is None:
        return "the prediction"
    if len(classes) == 2:
        return f"the margin of class {classes[1]} (the positive class)"
    return f"the margin of class {classes[k]}"


def base_margin_line(classes, boost):
    """The base margin of a boosted model (plain gradients: the master's
    manifest; encrypted: the label holder's), one value per output."""
    base = [float(b) for b in boost["base_margin"]]
    shown = ", ".join(f"{b:+.9g} to {_output_name(k, classes)}" for k, b in enumerate(base))
    return f"base margin: {shown}"


def path_lines(trees, leaves, classes, n_show, boost=None):
    """The master's view of a row's decision paths: for each of the first
    ``n_show`` trees, the owner of every split on the path and the leaf's value
    (:func:`leaf_text`; ``boost``: the model's ``boost`` table, after the base
    margin's line)."""
    lines = []
    if boost is not None and "base_margin" in boost:
        lines.append(base_margin_line(classes, boost))
    for t, (tree, leaf) in enumerate(zip(trees[:n_show], leaves[:n_show])):
        path = tree_path(tree, leaf)
        steps = [f"node {n} (party {int(tree['owner'][n]) + 1})" for n in path[:-1]]
        if "value" not in tree:   # encrypted labels: the label holder prints the leaf values
            lines.append(f"tree {t}: " + " -> ".join(steps + [f"leaf {leaf} [value at the label holder]"]))
            continue
        shown = leaf_text(t, tree["value"][leaf], classes, boost)
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
