"""The label holder's privacy audit of an encrypted job with shared instance
space: how many training labels a party without the labels could name from
the tree structure alone.

In the encrypted modes (``label_privacy = "paillier"``) every other party
receives every level's partition, so it knows which of the trees' rows share
each leaf.  The label holder knows the same leaves and the labels, so it runs
on its own side the two attacks ``experiments/bench_leakage.py`` plays a
curious passive party with, on every tree the other parties saw (the first
``label_holder_first_trees`` trees aside):

1. **declined-leaf union**: a leaf that depth and row counts allowed to split
   (:func:`~fedforest.tree.growth.may_split`, the rule every party applies)
   but that did not split was declined by the label holder (pure, or no
   gain).  Rows sharing such a leaf are joined (connected components over all
   trees); the largest group is named the most frequent class, the second the
   next, and so on; every other row is guessed the most frequent class;
2. **co-occurrence clustering** (ID2Graph, arXiv 2307.10318): the rows'
   co-occurrence graph (weight: the number of trees of more than one leaf in
   which two rows share a leaf), spectral clustering into as many clusters as classes on its largest
   connected component, clusters named by their best assignment to the
   classes (Hungarian); other rows are guessed the most frequent class.

The figure is the better of the two, as a share of the training rows, beside
the share guessing the most frequent class gets.  Both attacks are given the
class frequencies' order and (the clustering) the best naming of its
clusters: an attacker's upper bound, not a lucky guess.

Bounds: the union keeps one component label per row (its pending joins are
folded in once they exceed a few times the rows), so it runs over every row
in O(rows) memory.  The clustering keeps a dense co-occurrence matrix of at
most :data:`SAMPLE_ROWS` rows (4,000: 64 MiB); on a larger table it runs on
that many rows drawn once with a fixed seed (:data:`SAMPLE_SEED`), and its
figure is its share right on those rows.

Classification only: a regression label is no class to name, so for
regression (forest or boosting) the figure is not computed.
"""
import numpy as np

from ..tree.growth import may_split

SAMPLE_ROWS = 4000   # rows of the co-occurrence clustering at most (a dense float32 matrix: 64 MiB)
SAMPLE_SEED = 0      # the seed of the clustering's row sample and of its spectral embedding


def class_order(y):
    """The classes, most frequent first (ties: the lower class first)."""
    classes, counts = np.unique(y, return_counts=True)
    return classes[np.argsort(-counts, kind="stable")]


def leaves_of_tree(left, right):
    """The leaves of a tree's child arrays and each leaf's depth."""
    n = left.shape[0]
    depth = np.zeros(n, dtype=np.int64)
    for i in np.flatnonzero(left >= 0).tolist():     # children come after their parents
        depth[left[i]] = depth[right[i]] = depth[i] + 1
    leaves = np.flatnonzero(left < 0)
    return leaves, depth[leaves]


def _components(n, src, dst):
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    graph = coo_matrix((np.ones(src.size, dtype=np.int8), (src, dst)), shape=(n, n))
    return connected_components(graph, directed=False)[1]


class DeclinedUnion:
    """Attack 1 over trees given one by one: the rows that share a declined
    leaf of any tree, joined (connected components), in O(rows) memory."""

    def __init__(self, n_rows, settings):
        self.n = int(n_rows)
        self.settings = settings
        self.comp = None                  # the component of every row after the folded joins
        self.seen = np.zeros(self.n, dtype=bool)
        self.src, self.dst, self.pending = [], [], 0
        self.n_declined = 0

    def add(self, rows, starts, ends, leaves, depth):
        count = ends[leaves] - starts[leaves]
        declined = leaves[may_split(self.settings, depth, count)]
        for leaf in declined.tolist():
            r = rows[starts[leaf]:ends[leaf]]
            self.n_declined += 1
            self.seen[r] = True
            self.src.append(np.full(r.size - 1, r[0], dtype=np.int64))
            self.dst.append(r[1:].astype(np.int64))
            self.pending += r.size - 1
        if self.pending > 4 * self.n + (1 << 16):
            self._fold()

    def _fold(self):
        if not self.src and self.comp is not None:
            return
        src, dst = list(self.src), list(self.dst)
        if self.comp is not None:
            # every row joined to its component's first row: the joins folded so far
            first = np.full(self.comp.max() + 1, self.n, dtype=np.int64)
            np.minimum.at(first, self.comp, np.arange(self.n))
            src.append(np.arange(self.n, dtype=np.int64))
            dst.append(first[self.comp])
        s = np.concatenate(src) if src else np.empty(0, np.int64)
        d = np.concatenate(dst) if dst else np.empty(0, np.int64)
        self.comp = _components(self.n, s, d)
        self.src, self.dst, self.pending = [], [], 0

    def guess(self, y):
        """Every row's guessed class."""
        order = class_order(y)
        guess = np.full(self.n, order[0], dtype=y.dtype)
        if self.n_declined:
            self._fold()
            comps, sizes = np.unique(self.comp[self.seen], return_counts=True)
            big = comps[np.argsort(-sizes, kind="stable")][:order.size]
            for c, cls in zip(big.tolist(), order.tolist()):
                guess[self.seen & (self.comp == c)] = cls
        return guess


class Cooccurrence:
    """Attack 2 over trees given one by one: the co-occurrence counts of the
    sampled rows (at most :data:`SAMPLE_ROWS`, drawn with :data:`SAMPLE_SEED`),
    clustered at the end."""

    def __init__(self, n_rows, sample_rows=SAMPLE_ROWS, seed=SAMPLE_SEED):
        n = int(n_rows)
        self.seed = seed
        if n <= sample_rows:
            self.sample = np.arange(n)
        else:
            self.sample = np.sort(np.random.default_rng(seed).choice(n, sample_rows, replace=False))
        self.at = np.full(n, -1, dtype=np.int64)
        self.at[self.sample] = np.arange(self.sample.size)
        self.w = None
        self.trees = 0

    def add(self, rows, starts, ends, leaves):
        if self.w is None:
            self.w = np.zeros((self.sample.size, self.sample.size), dtype=np.float32)
        if leaves.size < 2:     # a tree of one leaf: no row shares it with fewer than all
            return
        self.trees += 1
        for leaf in leaves.tolist():
            p = self.at[rows[starts[leaf]:ends[leaf]]]
            p = p[p >= 0]
            if p.size > 1:
                self.w[np.ix_(p, p)] += 1.0

    def guess(self, y):
        """The guessed class of every sampled row (``y``: the sampled rows' labels)."""
        from scipy.optimize import linear_sum_assignment
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import connected_components
        from sklearn.cluster import SpectralClustering
        order = class_order(y)
        guess = np.full(y.shape[0], order[0], dtype=y.dtype)
        if self.w is None:
            return guess
        w = csr_matrix(self.w.astype(np.float64))
        w.setdiag(0)
        w.eliminate_zeros()
        if not w.nnz:
            return guess
        _, comp = connected_components(w, directed=False)
        main = np.bincount(comp).argmax()
        keep = np.flatnonzero((comp == main) & (np.asarray(w.sum(axis=1)).ravel() > 0))
        if keep.size <= order.size:
            return guess
        sub = w[keep][:, keep]
        labels = SpectralClustering(n_clusters=order.size, affinity="precomputed", random_state=self.seed,
                                    assign_labels="cluster_qr").fit_predict(sub)
        classes = np.sort(order)
        codes = np.searchsorted(classes, y[keep])
        conf = np.zeros((order.size, order.size))
        np.add.at(conf, (labels, codes), 1)
        ci, cj = linear_sum_assignment(-conf)
        mapping = np.empty(order.size, dtype=np.int64)
        mapping[ci] = cj
        guess[keep] = classes[mapping[labels]]
        return guess


class LabelAudit:
    """The label holder's audit (see the module's docstring): ``y`` the class
    of every row the trees grow on (the training rows, in the splitter's row
    order), ``settings`` the job's split settings (``may_split``)."""

    def __init__(self, y, settings, sample_rows=SAMPLE_ROWS, seed=SAMPLE_SEED):
        self.y = np.asarray(y)
        self.union = DeclinedUnion(self.y.shape[0], settings)
        self.cooc = Cooccurrence(self.y.shape[0], sample_rows, seed)
        self.trees = 0

    def add_tree(self, rows, starts, ends, left, right):
        """A finished tree the other parties saw: its in-bag ``rows`` grouped by
        node (node ``j`` holds ``rows[starts[j]:ends[j]]``) and its child arrays."""
        leaves, depth = leaves_of_tree(np.asarray(left), np.asarray(right))
        self.union.add(rows, starts, ends, leaves, depth)
        self.cooc.add(rows, starts, ends, leaves)
        self.trees += 1

    def result(self):
        """The figures: ``passive_labels_recovered_fraction`` (the better
        attack), ``majority_baseline_fraction``, each attack's own, the trees
        audited, the rows and the clustering's sampled rows."""
        y = self.y
        n = y.shape[0]
        majority = float(np.mean(y == class_order(y)[0])) if n else 0.0
        union = float(np.mean(self.union.guess(y) == y)) if n else 0.0
        ys = y[self.cooc.sample]
        cluster = float(np.mean(self.cooc.guess(ys) == ys)) if n else 0.0
        return {"passive_labels_recovered_fraction": max(union, cluster),
                "majority_baseline_fraction": majority,
                "declined_leaf_union_fraction": union, "cooccurrence_clustering_fraction": cluster,
                "trees_audited": self.trees, "rows": int(n), "clustering_rows": int(self.cooc.sample.size)}


def sentence(fraction, majority):
    """The audit's line: 'a party without the labels could name X % ...'."""
    return (f"a party without the labels could name {100 * fraction:.1f} % of the training labels from the "
            f"tree structure (guessing the majority class: {100 * majority:.1f} %)")


# -- in a job ------------------------------------------------------------------
AUDIT = "privacy_audit"    # its key in the summary, the manifests and the label holder's 'done' reply
TOLD = ("passive_labels_recovered_fraction", "majority_baseline_fraction")   # what the master learns
NOT_COMPUTED = "not computed for regression"
NOT_RUN_HIDDEN = "not run: instance_space = 'hidden' shows the other parties no partition"


def _not_run(cfg):
    """Why a job has no audit figure (None: it has one)."""
    if getattr(cfg, "instance_space", "shared") == "hidden":
        return NOT_RUN_HIDDEN
    return NOT_COMPUTED if cfg.task != "classification" else None


def holder_done(cfg, audit):
    """The label holder's ``on_done`` of :func:`~.job_party.serve_growth`:
    its manifest keeps every figure of the audit (None: a regression job,
    not computed); the master gets the two fractions of :data:`TOLD` only."""
    from ..logs import status

    def done():
        if audit is None:
            return {AUDIT: {"note": _not_run(cfg) or NOT_COMPUTED}}, {AUDIT: {k: None for k in TOLD}}
        res = audit.result()
        status(cfg, "privacy audit: " + sentence(*(res[k] for k in TOLD)))
        return {AUDIT: res}, {AUDIT: {k: res[k] for k in TOLD}}
    return done


def master_received(cfg, ack, label_party, first_trees):
    """The master: the label holder's two figures from its reply to ``done``
    (checked), with ``label_holder_first_trees``, for the summary and the
    manifest; logged."""
    from .common import log
    from .encrypted_labels import ProtocolIntegrityError
    from .messages import shown
    got = ack.get(AUDIT)
    note = _not_run(cfg)
    regression = note is not None
    if not (isinstance(got, dict) and set(got) == set(TOLD) and all(
            v is None if regression else isinstance(v, float) and 0.0 <= v <= 1.0 for v in got.values())):
        raise ProtocolIntegrityError(f"party {label_party} (the label holder) sent {shown(got)} as its privacy "
                                     f"audit, not {' and '.join(TOLD)} (fractions; None for regression)")
    out = dict(got, label_holder_first_trees=int(first_trees))
    if regression:
        out["note"] = note
        log(cfg, f"privacy audit: {note}")
    else:
        log(cfg, f"privacy audit (party {label_party}, the label holder): " + sentence(*(got[k] for k in TOLD)))
    return out


def add_to_manifest(folder, value):
    """The master's stored manifest, with the audit's figures added."""
    from . import model_files
    model_files.write_manifest(folder, dict(model_files.read_manifest(folder, "master model"), **{AUDIT: value}))
