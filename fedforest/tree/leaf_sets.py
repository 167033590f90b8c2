"""The one-round federated prediction on compact row sets: each party's
per-leaf row sets of its partial tree (:func:`partial_leaf_sets`) and their
intersection on the master (:func:`intersect_leaf_sets`).  Complete trees are
walked by :func:`fedforest.tree.format.apply`."""
import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def partial_leaf_sets(X, children_left, children_right, feature, threshold, missing_left,
                      leaves, index_bytes):
    """Per-leaf row sets of one partial tree (paper Algorithm 3), in compact form.

    ``feature[node] >= 0`` marks a split this party owns (local column index);
    ``-1`` a split owned elsewhere, where rows follow both branches; ``-2`` a
    leaf.  ``set_of_leaf[k]`` is -1 when no ancestor of ``leaves[k]`` is owned
    here (its row set is "all rows") and otherwise the number of its row set
    (sets are numbered in the order the walk below meets them).
    Leaves below the same child of an owned split, with no owned split in
    between, share one row set, stored once.

    Each set is stored like a Roaring bitmap container, whichever is smaller:
    as its row indices (``index_bytes`` each on the wire) or as bitmap words
    (bit ``i % 64`` of word ``i // 64`` for row ``i``).  Returns
    ``(set_of_leaf, is_dense, counts, rows, dense)``: per set the container
    kind and row count, the index lists concatenated (in no particular order
    within a set) and the dense sets' words stacked.

    The tree is walked depth first with the list of rows that can reach each
    node: an owned split partitions its list, another party's split hands the
    same list on; the walk stops where no owned split lies below.
    """
    n = X.shape[0]
    n_nodes = children_left.shape[0]
    nw = (n + 63) // 64
    # anchor[node]: the child of an owned split that the node hangs below with
    # no owned split in between (-1: no owned ancestor).  Parents come first.
    anchor = np.full(n_nodes, -1, dtype=np.int64)
    depth = np.zeros(n_nodes, dtype=np.int64)
    for node in range(n_nodes):
        l = children_left[node]
        if l < 0:
            continue
        r = children_right[node]
        if feature[node] >= 0:
            anchor[l] = l
            anchor[r] = r
        else:
            anchor[l] = anchor[node]
            anchor[r] = anchor[node]
        depth[l] = depth[node] + 1
        depth[r] = depth[node] + 1
    n_leaves = leaves.shape[0]
    set_of_leaf = np.full(n_leaves, -1, dtype=np.int32)
    # anchors holding some leaf's set; sets are numbered in the order the walk meets them
    slot = np.full(n_nodes, -1, dtype=np.int64)
    n_sets = 0
    for k in range(n_leaves):
        a = anchor[leaves[k]]
        if a >= 0 and slot[a] == -1:
            slot[a] = -2
            n_sets += 1
    is_dense = np.zeros(n_sets, dtype=np.uint8)
    counts = np.zeros(n_sets, dtype=np.int64)
    rows = np.empty(0, dtype=np.uint32)
    words = np.zeros((0, nw), dtype=np.uint64)
    if n_sets == 0:
        return set_of_leaf, is_dense, counts, rows, words
    rows = np.empty(max(4 * n, 16), dtype=np.uint32)
    n_rows_out = 0
    n_dense = 0
    next_set = 0
    words = np.zeros((max(1, n_sets // 4), nw), dtype=np.uint64)
    # the walk is needed only where an owned split lies in the subtree
    owned_below = np.zeros(n_nodes, dtype=np.uint8)
    max_depth = 0
    for node in range(n_nodes - 1, -1, -1):
        l = children_left[node]
        if l >= 0 and (feature[node] >= 0 or owned_below[l] == 1
                       or owned_below[children_right[node]] == 1):
            owned_below[node] = 1
        if depth[node] > max_depth:
            max_depth = depth[node]
    # row lists live in one buffer used as a stack: each owned split on the
    # current path adds at most n entries
    buf = np.empty(n * (max_depth + 2), dtype=np.int32)
    for i in range(n):
        buf[i] = i
    cap = 2 * max_depth + 4
    st_node = np.empty(cap, dtype=np.int64)
    st_s = np.empty(cap, dtype=np.int64)
    st_e = np.empty(cap, dtype=np.int64)
    st_top = np.empty(cap, dtype=np.int64)
    st_node[0] = 0
    st_s[0] = 0
    st_e[0] = n
    st_top[0] = n
    sp = 1
    one = np.uint64(1)
    while sp > 0:
        sp -= 1
        node = st_node[sp]
        s = st_s[sp]
        e = st_e[sp]
        top = st_top[sp]
        if slot[node] == -2:
            k = next_set
            slot[node] = k
            next_set += 1
            c = e - s
            counts[k] = c
            if c * index_bytes >= nw * 8:
                is_dense[k] = 1
                if n_dense == words.shape[0]:
                    grown = np.zeros((2 * n_dense, nw), dtype=np.uint64)
                    for d in range(n_dense):
                        for w in range(nw):
                            grown[d, w] = words[d, w]
                    words = grown
                for i in range(s, e):
                    r = buf[i]
                    words[n_dense, r >> 6] |= one << np.uint64(r & 63)
                n_dense += 1
            else:
                if n_rows_out + c > rows.shape[0]:
                    grown_rows = np.empty(2 * (n_rows_out + c), dtype=np.uint32)
                    for i in range(n_rows_out):
                        grown_rows[i] = rows[i]
                    rows = grown_rows
                for i in range(s, e):
                    rows[n_rows_out] = buf[i]
                    n_rows_out += 1
        l = children_left[node]
        if l < 0 or owned_below[node] == 0:
            continue
        r_child = children_right[node]
        f = feature[node]
        if f < 0:
            # not ours: both children see the same rows
            for c in (r_child, l):
                if owned_below[c] == 1:
                    st_node[sp] = c
                    st_s[sp] = s
                    st_e[sp] = e
                    st_top[sp] = top
                    sp += 1
            continue
        thr = threshold[node]
        ml = missing_left[node] == 1
        # one pass: left rows fill the new area from its start, right rows from its end
        new_top = top + (e - s)
        li = top
        ri = new_top - 1
        for i in range(s, e):
            row = buf[i]
            v = X[row, f]
            if (ml if np.isnan(v) else v <= thr):
                buf[li] = row
                li += 1
            else:
                buf[ri] = row
                ri -= 1
        nl = li - top
        st_node[sp] = r_child
        st_s[sp] = top + nl
        st_e[sp] = new_top
        st_top[sp] = new_top
        sp += 1
        st_node[sp] = l
        st_s[sp] = top
        st_e[sp] = top + nl
        st_top[sp] = new_top
        sp += 1
    for k in range(n_leaves):
        a = anchor[leaves[k]]
        if a >= 0:
            set_of_leaf[k] = slot[a]
    out_rows = rows[:n_rows_out].copy()
    out_dense = words[:n_dense].copy()
    return set_of_leaf, is_dense, counts, out_rows, out_dense


@njit(cache=True, nogil=True)
def intersect_leaf_sets(n_rows, set_id, is_dense, counts, row_start, rows, dense_row, dense,
                        n_leaves):
    """Master side of Algorithm 4 on compact row sets (see :func:`partial_leaf_sets`).

    ``set_id[p, k]`` is the global number of party ``p``'s row set of leaf
    ``k`` (-1: all rows); for each global set, ``is_dense``/``counts`` give its
    container, ``rows[row_start[s]: row_start[s] + counts[s]]`` its row
    indices (sparse sets) and ``dense[dense_row[s]]`` its bitmap words (dense
    sets).  Returns the leaf position of every row, or -1 where a row did not
    land in exactly one leaf.
    """
    n_parties = set_id.shape[0]
    nw = (n_rows + 63) // 64
    out = np.full(n_rows, -1, dtype=np.int32)
    hits = np.zeros(n_rows, dtype=np.int32)
    seen = np.zeros(n_rows, dtype=np.int32)
    stamp = np.zeros(n_rows, dtype=np.int64)
    acc = np.empty(nw, dtype=np.uint64)
    one = np.uint64(1)
    for k in range(n_leaves):
        # the smallest sparse set drives the scan; the others are counted or bit-tested
        best = -1
        n_sparse = 0
        for p in range(n_parties):
            s = set_id[p, k]
            if s >= 0 and is_dense[s] == 0:
                n_sparse += 1
                if best < 0 or counts[s] < counts[best]:
                    best = s
        if best < 0:
            acc[:] = ~np.uint64(0)
            for p in range(n_parties):
                s = set_id[p, k]
                if s >= 0:
                    for w in range(nw):
                        acc[w] &= dense[dense_row[s], w]
            for w in range(nw):
                a = acc[w]
                if a == 0:
                    continue
                base = w * 64
                top = min(64, n_rows - base)
                for b in range(top):
                    if (a >> np.uint64(b)) & one:
                        out[base + b] = k
                        hits[base + b] += 1
            continue
        tag = k + 1
        for p in range(n_parties):
            s = set_id[p, k]
            if s >= 0 and is_dense[s] == 0:
                for i in range(row_start[s], row_start[s] + counts[s]):
                    r = np.int64(rows[i])
                    if stamp[r] != tag:
                        stamp[r] = tag
                        seen[r] = 0
                    seen[r] += 1
        for i in range(row_start[best], row_start[best] + counts[best]):
            r = np.int64(rows[i])
            if seen[r] != n_sparse:
                continue
            ok = True
            for p in range(n_parties):
                s = set_id[p, k]
                if s >= 0 and is_dense[s] == 1:
                    if not (dense[dense_row[s], r >> 6] >> np.uint64(r & 63)) & one:
                        ok = False
                        break
            if ok:
                out[r] = k
                hits[r] += 1
    for i in range(n_rows):
        if hits[i] != 1:
            out[i] = -1
    return out
