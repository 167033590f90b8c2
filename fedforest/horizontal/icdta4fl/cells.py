"""Merged rules where the clients' rows are (ICDTA4FL with ``min_coverage`` > 0).

The merged rules of kept trees merged with exact conjunctions are the cells
of the trees' common refinement: one leaf per tree.  Most of the Cartesian
product of the leaves is empty when columns are correlated, so instead of
building every compatible combination the server asks each client which
combinations of leaves its rows fall in, and how many rows each holds
(:func:`client_cells`; with ``rule_votes = "rows"`` also those rows counted
with the class fractions of its own tree); the server adds them up
(:func:`pool_cells`) and builds a merged rule for each combination some row
reaches, dropping those that hold fewer than
``min_coverage`` rows in all.  The global tree grown from them then carries
the rows of every node (:func:`node_rows`, :func:`subtree_rows`), and its
rules are shown without the conditions their rows do not need
(:func:`shortened_rules`).

Everything here is plain numpy on the server or on one client; the messages
are built and checked in :mod:`.roles`.
"""
import numpy as np

from ...federation.protocol import ProtocolError
from ...tree import format as tree_format
from ...tree.rules import CATEGORICAL, Rule, RuleArrays, leaf_rules


# ---------------------------------------------------------------------------
# Client: the leaf combinations of its rows
# ---------------------------------------------------------------------------
def leaves_of(tree, X):
    """The node each row of ``X`` ends at in ``tree``, and whether it is a leaf
    (an ID3 row with a category that has no branch stops at an inner node)."""
    nodes = tree_format.apply(tree, np.asarray(X, dtype=np.float64)).astype(np.int64)
    return nodes, np.asarray(tree["feature"])[nodes] < 0


def client_cells(trees, X, own=None):
    """``(cells, counts)``: the distinct combinations of leaves (node ids, one
    column per tree of ``trees``) that this client's rows reach, and how many
    rows reach each.  Rows that end at an inner node of some tree (ID3) are
    in no cell.  With this client's ``own`` tree, also ``votes`` (cells x
    classes): per cell, its rows counted with the class fractions of the node
    each ends at in its own tree (``rule_votes = "rows"``), so each cell's
    votes add up to its rows; returns ``(cells, counts, votes)``."""
    n = np.asarray(X).shape[0]
    cols, ok = [], np.ones(n, dtype=bool)
    for t in trees:
        nodes, leaf = leaves_of(t, X)
        cols.append(nodes)
        ok &= leaf
    C = np.asarray(own["value"]).shape[1] if own is not None else 0
    if not n or not ok.any() or not trees:
        empty = (np.zeros((0, len(trees)), dtype=np.int64), np.zeros(0, dtype=np.int64))
        return empty + ((np.zeros((0, C)),) if own is not None else ())
    cells, inv, counts = np.unique(np.stack(cols, axis=1)[ok], axis=0, return_inverse=True, return_counts=True)
    out = (cells.astype(np.int64), counts.astype(np.int64))
    if own is None:
        return out
    votes = np.zeros((cells.shape[0], C))
    np.add.at(votes, inv.reshape(-1), own_fractions(own, np.asarray(X)[ok]))
    return out + (votes,)


def own_fractions(tree, X):
    """Per row of ``X``, the class fractions of the node it ends at in ``tree``
    (a leaf, or the inner node where an ID3 row's category has no branch)."""
    nodes = tree_format.apply(tree, np.asarray(X, dtype=np.float64)).astype(np.int64)
    frac = np.asarray(tree["value"], dtype=np.float64)[nodes]
    total = frac.sum(axis=1, keepdims=True)
    return np.divide(frac, total, out=np.zeros_like(frac), where=total > 0)


def node_rows(tree, X):
    """Rows of ``X`` ending at each node of ``tree`` (int64, one per node)."""
    nodes = tree_format.apply(tree, np.asarray(X, dtype=np.float64)).astype(np.int64)
    return np.bincount(nodes, minlength=len(tree["feature"])).astype(np.int64)


# ---------------------------------------------------------------------------
# Server: the clients' replies, checked
# ---------------------------------------------------------------------------
def bad_reply(rank, op, field, problem):
    """The error of a malformed field of client ``rank``'s reply to ``op``."""
    return ProtocolError(f"protocol error: client {rank}'s {op!r} reply has a bad {field!r}: {problem}")


def reply_array(rank, op, reply, field, ndim, kinds="iu"):
    """``reply[field]`` as an int64 array of ``ndim`` dimensions."""
    if not isinstance(reply, dict) or field not in reply:
        raise bad_reply(rank, op, field, "it is missing")
    v = reply[field]
    if not isinstance(v, np.ndarray) or v.dtype.kind not in kinds:
        what = f"{v.dtype} array" if isinstance(v, np.ndarray) else type(v).__name__
        raise bad_reply(rank, op, field, f"expected an array of whole numbers, got a {what}")
    if v.ndim != ndim:
        raise bad_reply(rank, op, field, f"expected {ndim} dimensions, got shape {v.shape}")
    return v.astype(np.int64)


def check_cells(rank, op, reply, leaf_sets, n_rows, n_classes=None):
    """Client ``rank``'s cells and counts (:func:`client_cells`): one column
    per kept tree holding leaves of that tree, distinct rows, counts of at
    least one row adding up to at most the client's ``n_rows``; with
    ``n_classes``, also its votes: one row per cell of ``n_classes`` finite,
    non-negative numbers adding up to the cell's count.  Returns ``(cells,
    counts)``, or ``(cells, counts, votes)`` with ``n_classes``."""
    keys = ["cells", "counts"] + (["votes"] if n_classes is not None else [])
    if not isinstance(reply, dict) or set(reply) != set(keys):
        got = sorted(map(str, reply)) if isinstance(reply, dict) else type(reply).__name__
        raise bad_reply(rank, op, "reply", f"expected the arrays {keys}, got {str(got)[:200]}")
    cells = reply_array(rank, op, reply, "cells", 2)
    counts = reply_array(rank, op, reply, "counts", 1)
    U, T = cells.shape
    if T != len(leaf_sets):
        raise bad_reply(rank, op, "cells", f"expected one column per kept tree ({len(leaf_sets)}), got {T}")
    if counts.shape != (U,):
        raise bad_reply(rank, op, "counts", f"expected one count per cell ({U}), got shape {counts.shape}")
    if U and (counts.min() < 1 or int(counts.sum()) > n_rows):
        raise bad_reply(rank, op, "counts", f"expected counts of at least 1 adding up to at most the client's "
                                            f"{n_rows} rows")
    for t, leaves in enumerate(leaf_sets):
        if U and not np.isin(cells[:, t], leaves).all():
            raise bad_reply(rank, op, "cells", f"column {t} names nodes that are not leaves of its tree")
    if U and np.unique(cells, axis=0).shape[0] != U:
        raise bad_reply(rank, op, "cells", "a combination of leaves is listed twice")
    if n_classes is None:
        return cells, counts
    votes = reply.get("votes")
    if not isinstance(votes, np.ndarray) or votes.dtype.kind not in "iuf" or votes.shape != (U, n_classes):
        what = f"shape {votes.shape}" if isinstance(votes, np.ndarray) else type(votes).__name__
        raise bad_reply(rank, op, "votes", f"expected numbers, one row of {n_classes} per cell ({U}), got {what}")
    votes = votes.astype(np.float64)
    if U and (not np.isfinite(votes).all() or votes.min() < 0
              or not np.allclose(votes.sum(axis=1), counts, rtol=1e-9, atol=1e-6)):
        raise bad_reply(rank, op, "votes", "expected non-negative numbers adding up to each cell's count")
    return cells, counts, votes


def check_node_rows(rank, op, reply, n_nodes, n_rows):
    """Client ``rank``'s rows per node of the global tree: one count per node,
    none negative, adding up to the client's ``n_rows``."""
    if not isinstance(reply, dict) or set(reply) != {"rows"}:
        got = sorted(map(str, reply)) if isinstance(reply, dict) else type(reply).__name__
        raise bad_reply(rank, op, "reply", f"expected the array ['rows'], got {str(got)[:200]}")
    rows = reply_array(rank, op, reply, "rows", 1)
    if rows.shape != (n_nodes,):
        raise bad_reply(rank, op, "rows", f"expected one count per node ({n_nodes}), got shape {rows.shape}")
    if rows.size and (rows.min() < 0 or int(rows.sum()) != n_rows):
        raise bad_reply(rank, op, "rows", f"expected counts of at least 0 adding up to the client's {n_rows} rows")
    return rows


def pool_cells(parts):
    """The cells of every client (``[(cells, counts)]``, or ``[(cells, counts,
    votes)]``) as one set: distinct combinations and their summed counts (and
    summed votes)."""
    cells = np.concatenate([p[0] for p in parts])
    counts = np.concatenate([p[1] for p in parts])
    votes = np.concatenate([p[2] for p in parts]) if all(len(p) > 2 for p in parts) else None
    if not cells.shape[0]:
        return (cells, counts) + ((votes,) if votes is not None else ())
    uniq, inv = np.unique(cells, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    out = (uniq, np.bincount(inv, weights=counts, minlength=uniq.shape[0]).astype(np.int64))
    if votes is None:
        return out
    pooled = np.zeros((uniq.shape[0], votes.shape[1]))
    np.add.at(pooled, inv, votes)
    return out + (pooled,)


def subtree_rows(tree, ends):
    """Rows reaching each node, from the rows ending at each node (children
    after their parent, as every tree fedforest grows)."""
    n = len(tree["feature"])
    parent = np.full(n, -1, dtype=np.int64)
    left = np.asarray(tree.get("children_left", np.full(n, -1)))
    right = np.asarray(tree.get("children_right", np.full(n, -1)))
    for kids in (left, right):
        has = kids >= 0
        parent[kids[has]] = np.flatnonzero(has)
    if "child_node" in tree:
        start, count = np.asarray(tree["child_start"]), np.asarray(tree["child_count"])
        for p in np.flatnonzero(count > 0):
            parent[np.asarray(tree["child_node"])[start[p]:start[p] + count[p]]] = p
    out = np.asarray(ends, dtype=np.int64).copy()
    for node in range(n - 1, 0, -1):
        if parent[node] >= 0:
            out[parent[node]] += out[node]
    return out


# ---------------------------------------------------------------------------
# Server: merged rules of the covered cells
# ---------------------------------------------------------------------------
def positions(cells, leaf_sets):
    """Cells as positions in each tree's leaf list (instead of node ids)."""
    out = np.empty_like(cells)
    for t, leaves in enumerate(leaf_sets):
        out[:, t] = np.searchsorted(leaves, cells[:, t])
    return out


def group(keys, counts):
    """Distinct rows of ``keys``, the index of each input row among them, and their summed counts."""
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    return uniq, inv, np.bincount(inv, weights=counts, minlength=uniq.shape[0]).astype(np.int64)


def refine(pos, counts, max_rules, over_max_rules):
    """Which tree refines which cell: ``(use, merged_sets, capped)`` where
    ``use[i, t]`` is the leaf position of cell ``i`` in tree ``t``, or -1 where
    tree ``t`` does not refine it.  Within ``max_rules`` cells every tree
    refines every cell; above it, ``"drop_sets"`` merges the first trees only
    (as many as fit; at least one) and ``"coarsen"`` refines the cells of most
    rows first and leaves the others as they are."""
    U, T = pos.shape
    if over_max_rules == "drop_sets":
        for m in range(T, 0, -1):
            if m == 1 or np.unique(pos[:, :m], axis=0).shape[0] <= max_rules:
                use = np.full_like(pos, -1)
                use[:, :m] = pos[:, :m]
                return use, m, m < T
    use = np.full_like(pos, -1)
    use[:, 0] = pos[:, 0]
    capped = False
    for t in range(1, T):
        cand = use.copy()
        cand[:, t] = pos[:, t]
        kids, kid_of, _ = group(cand, counts)
        if kids.shape[0] <= max_rules:
            use = cand
            continue
        capped = True
        cur, cur_of, cur_rows = group(use, counts)
        n_kids = np.bincount(np.unique(np.stack([cur_of, kid_of], axis=1), axis=0)[:, 0], minlength=cur.shape[0])
        order = np.argsort(-cur_rows, kind="stable")
        extra = np.cumsum(n_kids[order] - 1)
        refined = np.zeros(cur.shape[0], dtype=bool)
        refined[order[cur.shape[0] + extra <= max_rules]] = True
        use = np.where(refined[cur_of][:, None], cand, use)
    return use, T, capped


def cell_arrays(use, leaf_arrays, bounds, n_classes):
    """The merged rule of every cell (rows of ``use``) as :class:`RuleArrays`:
    the conjunction of its leaves' conditions (``bounds``: see
    :func:`fedforest.tree.rules.merge`), the sum of their class distributions."""
    R = use.shape[0]
    kind = leaf_arrays[0].kind
    F = (leaf_arrays[0].cond if kind == CATEGORICAL else leaf_arrays[0].cond[0]).shape[1]
    dist = np.zeros((R, n_classes))
    support = np.zeros(R)
    if kind == CATEGORICAL:
        val = np.full((R, F), -1, dtype=np.int64)
    else:
        lo, hi = np.full((R, F), -np.inf), np.full((R, F), np.inf)
    for t, la in enumerate(leaf_arrays):
        sel = np.flatnonzero(use[:, t] >= 0)
        idx = use[sel, t]
        dist[sel] += la.dist[idx]
        if kind == CATEGORICAL:
            val[sel] = np.where(val[sel] < 0, la.cond[idx], val[sel])
            continue
        a, b = lo[sel], hi[sel]
        c, d = la.cond[0][idx], la.cond[1][idx]
        if bounds == "intersect":
            lo[sel], hi[sel] = np.maximum(a, c), np.minimum(b, d)
        else:  # the less restrictive bound where both bound a side, else the one bound
            lo[sel] = np.where(np.isfinite(a) & np.isfinite(c), np.minimum(a, c), np.maximum(a, c))
            hi[sel] = np.where(np.isfinite(b) & np.isfinite(d), np.maximum(b, d), np.minimum(b, d))
    cond = val if kind == CATEGORICAL else (lo, hi)
    return RuleArrays(kind, cond, dist, support)


def _overlap(kind, box, others, f=slice(None)):
    """Per box of ``others`` (and feature, or only feature ``f``): whether
    ``box`` and that box overlap there."""
    if kind == CATEGORICAL:
        a, b = box[f], others[:, f]
        return (a < 0) | (b < 0) | (a == b)
    (lo, hi), (olo, ohi) = box, others
    return np.maximum(lo[f], olo[:, f]) < np.minimum(hi[f], ohi[:, f])


def drop_implied(boxes, obstacles, own):
    """Leave out of each box of ``boxes`` the conditions its rows do not need,
    in place: a condition goes when no box of ``obstacles`` (the places rows
    may lie, the box's own place ``own[i]`` excepted, -1 for none) lies where
    the box's other conditions hold and it does not.  Every row satisfying a
    shortened box then lies in its own place.  Returns the number of
    conditions left out."""
    kind = boxes.kind
    removed = 0
    for i in range(len(boxes)):
        keep = np.ones(len(obstacles), dtype=bool)
        if own[i] >= 0:
            keep[own[i]] = False
        if kind == CATEGORICAL:
            box, others = boxes.cond[i], obstacles.cond[keep]
            features = np.flatnonzero(box >= 0)
        else:
            box, others = (boxes.cond[0][i], boxes.cond[1][i]), (obstacles.cond[0][keep], obstacles.cond[1][keep])
            features = np.flatnonzero(np.isfinite(box[0]) | np.isfinite(box[1]))
        ov = _overlap(kind, box, others)
        fails = (~ov).sum(axis=1)
        for f in features:
            alone = (fails == 1) & ~ov[:, f]       # boxes kept apart from this one by feature f alone
            if kind == CATEGORICAL:
                if alone.any():
                    continue
                box[f] = -1
                removed += 1
            else:
                for side in (0, 1):
                    bound = box[side][f]
                    if not np.isfinite(bound):
                        continue
                    # below the lower bound (side 0) or above the upper bound (side 1)
                    beyond = others[1][alone, f] <= bound if side == 0 else others[0][alone, f] >= bound
                    if beyond.any():
                        continue
                    box[side][f] = -np.inf if side == 0 else np.inf
                    removed += 1
            ov[:, f] = _overlap(kind, box, others, f)
            fails = (~ov).sum(axis=1)
    return removed


def node_boxes(tree, kind):
    """The conditions on the path to every node of ``tree`` (:class:`Rule`
    conditions, as :func:`fedforest.tree.rules.leaf_rules` reads them): a list
    with one dict per node."""
    feature, left, right, threshold, _, start, count, cval, cnode = tree_format.walk_arrays(tree)
    out = [None] * len(feature)
    stack = [(0, {})]
    while stack:
        node, cond = stack.pop()
        out[node] = cond
        f = int(feature[node])
        if count.shape[0] and count[node] > 0:
            s = int(start[node])
            for k in range(s, s + int(count[node])):
                code, child = int(cval[k]), int(cnode[k])
                if out[child] is None and cond.get(f, code) == code:
                    stack.append((child, {**cond, f: code}))
        elif left[node] >= 0:
            t = float(threshold[node])
            lo, hi = cond.get(f, (-np.inf, np.inf))
            stack.append((int(left[node]), {**cond, f: (lo, min(hi, t))}))
            stack.append((int(right[node]), {**cond, f: (max(lo, t), hi)}))
    return out


def shortened_rules(tree, kind, n_features):
    """The leaf rules of a global tree that carries ``n_node_samples`` (the
    clients' rows reaching each node), each without the conditions its rows
    do not need: a condition is left out when no other leaf the rows reach
    (nor an inner node where rows stop, ID3) lies where the rule's other
    conditions hold and it does not.  So the rows satisfying a shortened rule
    are exactly its leaf's rows, and two shortened rules overlap only where
    no row was.  A leaf no row reaches keeps its path.  Returns ``({leaf: Rule}, conditions left out)``."""
    rules = leaf_rules(tree, kind)
    if "n_node_samples" not in tree or not rules:
        return rules, 0
    rows = np.asarray(tree["n_node_samples"], dtype=np.int64)
    boxes = node_boxes(tree, kind)
    ends = rows.copy()
    feature, left, right, _, _, start, count, _, cnode = tree_format.walk_arrays(tree)
    for n in range(len(feature)):
        kids = ([int(left[n]), int(right[n])] if left[n] >= 0 else
                [int(c) for c in cnode[int(start[n]):int(start[n]) + int(count[n])]] if count.shape[0] else [])
        ends[n] -= sum(rows[k] for k in set(kids))
    places = [n for n in range(len(feature)) if ends[n] > 0 and boxes[n] is not None]
    leaves = [n for n in rules if rows[n] > 0]        # a leaf no row reaches keeps its path
    if not leaves:
        return rules, 0
    at = {n: i for i, n in enumerate(places)}
    dummy = np.zeros(1)
    obstacles = RuleArrays.from_rules([Rule(boxes[n], dummy, kind=kind) for n in places], n_features)
    shaped = RuleArrays.from_rules([rules[n] for n in leaves], n_features)
    removed = drop_implied(shaped, obstacles, np.array([at.get(n, -1) for n in leaves], dtype=np.int64)) \
        if len(obstacles) else 0
    short = shaped.rules()
    for n, r in zip(leaves, short):
        rules[n] = Rule(r.conditions, rules[n].dist, rules[n].support, kind, rules[n].mass)
    return rules, removed
