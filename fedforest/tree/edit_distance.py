"""Distances between sequences and between ordered trees.

* :func:`levenshtein`: edit distance of two integer sequences (FedGA-Tree
  compares structures by their pre-order feature lists,
  :func:`fedforest.tree.structure.preorder_distance`);
* :func:`zhang_shasha`: the tree edit distance of two ordered labelled trees
  (insert, delete and rename a node at unit cost), on the postorder arrays of
  :func:`postorder_arrays` (federated EFDT compares client trees with it,
  :func:`fedforest.tree.hoeffding.tree_edit_distances`).
"""
import numpy as np
from numba import njit


@njit(cache=True)
def levenshtein(a, b):
    """Levenshtein distance between two int sequences (unit costs)."""
    n, m = a.shape[0], b.shape[0]
    prev = np.arange(m + 1)
    cur = np.empty(m + 1, dtype=prev.dtype)
    for i in range(1, n + 1):
        cur[0] = i
        for j in range(1, m + 1):
            c = prev[j - 1] + (0 if a[i - 1] == b[j - 1] else 1)
            if prev[j] + 1 < c:
                c = prev[j] + 1
            if cur[j - 1] + 1 < c:
                c = cur[j - 1] + 1
            cur[j] = c
        prev, cur = cur, prev
    return prev[m]


def postorder_arrays(labels, children, label_ids):
    """Postorder arrays of the tree rooted at node 0 for :func:`zhang_shasha`:
    label ids (``labels[i]`` is node ``i``'s label, numbered through the shared
    ``label_ids`` dict so two trees use the same ids), leftmost leaf descendants
    and key roots.  ``children(i)`` lists node ``i``'s children in order."""
    lab, lml = [], []

    def rec(i):                       # recursive: the trees compared are shallow
        first_leaf = None
        for x in children(i):
            leftmost = rec(int(x))
            if first_leaf is None:
                first_leaf = leftmost
        me = len(lab)
        lab.append(label_ids.setdefault(labels[i], len(label_ids)))
        lml.append(me if first_leaf is None else first_leaf)
        return lml[me]
    rec(0)
    lml = np.array(lml, dtype=np.int64)
    last = {}
    for i, l in enumerate(lml):
        last[int(l)] = i
    keyroots = np.array(sorted(last.values()), dtype=np.int64)
    return np.array(lab, dtype=np.int64), lml, keyroots


@njit(cache=True)
def zhang_shasha(l1, lml1, kr1, l2, lml2, kr2):
    """Zhang-Shasha tree edit distance with unit insert, delete and rename costs
    between two ordered trees given in postorder: label ids, the leftmost leaf
    descendant of each node and the key roots (see :func:`postorder_arrays`)."""
    n1, n2 = l1.shape[0], l2.shape[0]
    td = np.zeros((n1, n2))
    fd = np.zeros((n1 + 1, n2 + 1))
    for a in range(kr1.shape[0]):
        i = kr1[a]
        for b in range(kr2.shape[0]):
            j = kr2[b]
            li, lj = lml1[i], lml2[j]
            m, n = i - li + 2, j - lj + 2
            fd[0, 0] = 0.0
            for x in range(1, m):
                fd[x, 0] = fd[x - 1, 0] + 1.0
            for y in range(1, n):
                fd[0, y] = fd[0, y - 1] + 1.0
            for x in range(1, m):
                ii = li + x - 1
                for y in range(1, n):
                    jj = lj + y - 1
                    if lml1[ii] == li and lml2[jj] == lj:
                        cost = 0.0 if l1[ii] == l2[jj] else 1.0
                        v = min(fd[x - 1, y] + 1.0, fd[x, y - 1] + 1.0, fd[x - 1, y - 1] + cost)
                        fd[x, y] = v
                        td[ii, jj] = v
                    else:
                        p, q = lml1[ii] - li, lml2[jj] - lj
                        fd[x, y] = min(fd[x - 1, y] + 1.0, fd[x, y - 1] + 1.0, fd[p, q] + td[ii, jj])
    return td[n1 - 1, n2 - 1]
