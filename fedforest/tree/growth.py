"""The core of level-wise tree growth, shared by the centralized estimators and
the federated jobs: the per-node columns of a growing tree (:class:`Nodes`),
the resolved split settings (:class:`SplitSettings`), the decisions that make
a tree a forest tree (:class:`ForestTrees`), and the sizing of batches.  It
knows no message and no label privacy mode: the vertical protocol that
drives growth across parties lives in :mod:`fedforest.vertical`."""

import numpy as np

from . import partitioner
from . import threads as kernel_threads
from .format import LEAF, NO_CHILD
from .binning import MISSING_BIN
from .impurity import NEWTON
from .splitter import BELOW_FLOAT32_MIDPOINT, MIDPOINT
from .params import CRITERION_CODE, resolve_count, resolve_max_features


EPSILON = np.finfo(np.float64).eps


HIST_CACHE_BYTES_PER_ROW = 2
# boosting grows one tree at a time where a forest grows a batch of them, so its kept
# histograms may take this many times the bytes per row (8: at 1e5 rows x 20 columns
# of 255 bins, nodes from about 9,000 rows keep theirs, so nearly every level subtracts)
BOOST_HIST_CACHE_FACTOR = 8


def gain_scale(settings, total_w):
    """The ``w_total`` the split kernels divide gains by: the tree's total
    weight (scikit-learn's weighted impurity decrease), or 1 under the Newton
    criterion, whose gains are then XGBoost's loss changes
    ``G_l^2/(H_l+lambda) + G_r^2/(H_r+lambda) - G^2/(H+lambda)``, the number
    its ``gamma`` (``min_split_loss``) is compared with."""
    return 1.0 if settings.crit == NEWTON else float(total_w)


def min_leaf_weight(settings, total_w):
    """The least weight (hessian sum under the Newton criterion) of a child."""
    return max(settings.min_weight_fraction_leaf * float(total_w), settings.min_child_weight)


def may_split(settings, depth, n_rows):
    """Which nodes may split as far as their depth and row counts tell (no
    labels needed): the same rule on the master and on every party."""
    s = settings
    return ~((depth >= s.max_depth) | (n_rows < s.min_samples_split) | (n_rows < 2 * s.min_samples_leaf))


class SplitSettings:
    """Resolved, picklable settings both roles need for one fit."""

    def __init__(self, params, n_rows, is_classification, n_classes, n_features):
        self.split_method = params.split_method
        self.max_bins = int(params.max_bins)
        self.crit = CRITERION_CODE[params.criterion]
        self.is_classification = bool(is_classification)
        self.n_classes = int(n_classes)
        self.min_samples_leaf = resolve_count(params.min_samples_leaf, n_rows)
        self.min_samples_split = max(resolve_count(params.min_samples_split, n_rows),
                                     2 * self.min_samples_leaf)
        if not isinstance(params.min_samples_split, (int, np.integer)):
            self.min_samples_split = max(2, self.min_samples_split)
        self.max_depth = np.iinfo(np.int32).max if params.max_depth is None else int(params.max_depth)
        self.min_impurity_decrease = float(params.min_impurity_decrease)
        self.min_weight_fraction_leaf = float(params.min_weight_fraction_leaf)
        # gradient boosting (criterion "newton"): L2 penalty on leaf values and the least
        # hessian sum of a child; 0 for forests
        self.reg_lambda = float(getattr(params, "reg_lambda", 0.0))
        self.min_child_weight = float(getattr(params, "min_child_weight", 0.0))
        # where an exact split sends a value on the midpoint of two training values:
        # boosting as XGBoost, forests as scikit-learn
        self.threshold_rule = BELOW_FLOAT32_MIDPOINT if self.crit == NEWTON else MIDPOINT
        self.reveal_splits = False  # winners also send feature and threshold to the master
        # histogram subtraction: a node of at least this many rows keeps its histograms for
        # its children, so the kept histograms of a level hold at most HIST_CACHE_BYTES_PER_ROW
        # per row with MISSING_BIN + 1 bins per feature (a party with fewer bins keeps
        # from fewer rows on: PartySplitter.hist_cache_rows)
        n_stats = self.n_classes if self.is_classification else 3
        factor = BOOST_HIST_CACHE_FACTOR if self.crit == NEWTON else 1
        self.hist_cache_rows = cache_rows(params.max_features, n_features, n_stats,
                                          factor * HIST_CACHE_BYTES_PER_ROW)

    def to_dict(self):
        """Plain values, as the settings travel in a message."""
        return dict(vars(self))



def cache_rows(max_features, n_features, n_stats, bytes_per_row):
    """The rows from which a node keeps its histograms (see :class:`SplitSettings`)."""
    k = resolve_max_features(max_features, max(int(n_features), 1))
    per_node = k * (MISSING_BIN + 1) * (8 * n_stats + 4)
    return -(-per_node // bytes_per_row)


def pack_bits(bits):
    return np.packbits(bits) if bits.size else np.empty(0, dtype=np.uint8)


def unpack_bits(packed, n):
    return np.unpackbits(packed, count=n) if n else np.empty(0, dtype=np.uint8)


class Nodes:
    """Per-node columns of one growing tree (the node id is the row) plus the
    in-bag rows grouped by node: node ``n`` owns ``rows[start[n]:end[n]]``.
    Master and parties allocate child ids the same way, so ids agree."""

    def __init__(self, counts, columns, keep_rows=True):
        columns = dict(columns, start=(np.int64, 0), end=(np.int64, 0),
                       left=(np.int32, NO_CHILD), right=(np.int32, NO_CHILD))
        self._spec = columns
        cap = 64
        self.col = {name: np.full((cap,) + tuple(shape), default, dtype=dtype)
                    for name, (dtype, default, *shape) in columns.items()}
        self.n = 1
        # without rows (``keep_rows`` False) only the nodes' sizes are kept: the
        # ranges still say where each node's bits lie in a level's bitmap
        self.rows = np.flatnonzero(counts).astype(np.int32) if keep_rows else None
        self.col["end"][0] = self.rows.shape[0] if keep_rows else np.count_nonzero(counts)

    def _grow(self, count):
        cap = self.col["start"].shape[0]
        if self.n + count <= cap:
            return
        new_cap = max(2 * cap, self.n + count)
        for name, (dtype, default, *shape) in self._spec.items():
            grown = np.full((new_cap,) + tuple(shape), default, dtype=dtype)
            grown[: self.n] = self.col[name][: self.n]
            self.col[name] = grown

    def bounds(self, nodes):
        return self.col["start"][nodes], self.col["end"][nodes]

    def n_rows(self, nodes):
        starts, ends = self.bounds(nodes)
        return int((ends - starts).sum())

    def split(self, nodes, bits, n_left=None):
        """Partition the listed nodes (ascending ids) by their concatenated bits
        (one uint8 per row; without rows, ``n_left``, the left children's
        sizes, is enough); allocates (left, right) child ids in node order
        and returns them."""
        starts, ends = self.bounds(nodes)
        if self.rows is not None:
            kernel_threads.for_work(bits.shape[0])
            n_left = partitioner.apply_partition(self.rows, starts, ends, bits)
        m = nodes.shape[0]
        self._grow(2 * m)
        lefts = np.arange(self.n, self.n + 2 * m, 2, dtype=np.int32)
        rights = lefts + 1
        self.n += 2 * m
        c = self.col
        c["start"][lefts] = starts
        c["end"][lefts] = starts + n_left
        c["start"][rights] = starts + n_left
        c["end"][rights] = ends
        c["left"][nodes] = lefts
        c["right"][nodes] = rights
        return lefts, rights

    def trimmed(self, names):
        return {name: self.col[name][: self.n].copy() for name in names}

    def leaf_of_rows(self, n_rows):
        """The leaf holding each of ``n_rows`` rows (int32; -1 for a row in no
        node: out of the bag), from the grouped rows: the leaves' ranges
        tile them."""
        out = np.full(n_rows, -1, dtype=np.int32)
        if self.rows is None:
            raise ValueError("this tree keeps no rows")
        starts, ends = self.col["start"][: self.n], self.col["end"][: self.n]
        leaves = np.flatnonzero(self.col["left"][: self.n] == NO_CHILD)
        leaves = leaves[np.argsort(starts[leaves], kind="stable")]
        out[self.rows] = np.repeat(leaves.astype(np.int32), ends[leaves] - starts[leaves])
        return out


PARTY_COLUMNS = {"feature": (np.int32, LEAF), "threshold": (np.float64, np.nan),
                  "missing_left": (np.uint8, 0), "cand_feature": (np.int32, -1),
                  "cand_threshold": (np.float64, np.nan), "cand_missing_left": (np.uint8, 0),
                  "cand_bin": (np.int32, 0)}


class ForestTrees:
    """The decisions that make a tree a forest tree, from label statistics:
    which candidate nodes are searched (the impure ones), which best gains
    split, and the node values (class fractions or mean targets).  The grower
    holding the labels plugs it in (boosting trees: :class:`~fedforest.vertical.boost.boosting.BoostTrees`)."""

    def __init__(self, settings):
        self.s = settings

    def searchable(self, impurity):
        return impurity > EPSILON

    def takes(self, best):
        return np.isfinite(best) & (best + EPSILON >= self.s.min_impurity_decrease)

    def leaf_values(self, stats, weight):
        safe = np.where(weight > 0, weight, 1.0)
        if self.s.is_classification:
            return stats / safe[:, None]
        return (stats[:, 1] / safe)[:, None]


def tree_seeds(random_state, n_estimators):
    """One independent seed per tree, so tree ``t`` is the same whether or not
    trees before it were grown in this run (training resumes exactly)."""
    return np.random.SeedSequence(random_state).spawn(n_estimators)


def tree_rng(seed):
    """The random generator of one tree (its seed from :func:`tree_seeds`):
    its first draw is the tree's rows (:func:`bootstrap_counts` or
    :func:`row_subsample`), then its feature draws."""
    return np.random.default_rng(seed)


def bootstrap_counts(rng, n_rows, n_boot, sample_weight=None, bootstrap=True):
    """A forest tree's in-bag count of each of ``n_rows`` rows: ``n_boot``
    draws with replacement (all ones without ``bootstrap``); rows of weight
    zero take no part, as in scikit-learn.  The smallest integer type that
    holds them (uint8 or int32): the counts travel to every party, and each
    party recomputes them from the job's seed (:func:`tree_draws`)."""
    if not bootstrap:
        return (np.ones(n_rows, dtype=np.uint8) if sample_weight is None
                else (sample_weight != 0).astype(np.uint8))
    idx = rng.integers(0, n_rows, n_boot)
    counts = np.bincount(idx, minlength=n_rows)
    if sample_weight is not None:
        counts[sample_weight == 0] = 0
    return counts.astype(np.uint8 if counts.max() < 256 else np.int32)


def row_subsample(rng, n_rows, subsample):
    """A boosting tree's row sample: each of ``n_rows`` rows kept with
    probability ``subsample``, without replacement (uint8 counts 0 or 1)."""
    keep = rng.random(n_rows) < subsample if subsample < 1.0 else np.ones(n_rows, dtype=bool)
    return keep.astype(np.uint8)


def tree_draws(random_state, n_trees, draw):
    """Every tree's rows as a party recomputes them from the job's seed:
    ``draws(t)`` is ``draw(tree_rng(tree_seeds(random_state, n_trees)[t]))``,
    the very draw the grower makes for tree ``t`` (None for a tree number
    outside the job), so a party can refuse counts the master chose itself."""
    seeds = tree_seeds(random_state, n_trees)

    def draws(t):
        if t is None or not 0 <= t < len(seeds):
            return None
        return draw(tree_rng(seeds[t]))
    return draws


def merge_partials(master_tree, partials, offsets):
    """The complete tree as the union of the parties' partial trees (global feature ids)."""
    n = master_tree["children_left"].shape[0]
    feature = np.full(n, LEAF, dtype=np.int32)
    threshold = np.full(n, np.nan)
    missing_left = np.zeros(n, dtype=np.uint8)
    for p, part in enumerate(partials):
        if not (np.array_equal(part["children_left"], master_tree["children_left"])
                and np.array_equal(part["children_right"], master_tree["children_right"])):
            raise ValueError(f"party {p} holds a different tree structure than the master")
        own = part["feature"] >= 0
        feature[own] = part["feature"][own] + offsets[p]
        threshold[own] = part["threshold"][own]
        missing_left[own] = part["missing_left"][own]
    internal = master_tree["children_left"] >= 0
    if np.any(feature[internal] < 0):
        raise ValueError("some split is owned by no party")
    return dict(master_tree, feature=feature, threshold=threshold, missing_left=missing_left)


class BatchPlan:
    """The sizes of the batches of a training run.  A fixed ``tree_batch``
    gives batches of that size.  Without one, each batch is as large as the
    memory bound ``limit`` allows and small enough to end within
    ``interval_seconds`` (so a checkpoint is written at least that often),
    judged by ``estimate`` seconds per tree until trees have been grown and
    by their measured time after; the remaining trees are spread evenly over
    the batches they need.  Batching never changes a tree."""

    def __init__(self, tree_batch, limit, interval_seconds, estimate):
        self.fixed = tree_batch
        self.limit = max(1, int(limit))
        self.interval = float(interval_seconds)
        self.per_tree = float(estimate)
        self.grown, self.seconds = 0, 0.0
        self.sizes = []

    def next_size(self, remaining):
        if self.fixed is not None:
            size = min(int(self.fixed), remaining)
        else:
            per_tree = self.seconds / self.grown if self.grown else self.per_tree
            fit = int(min(self.interval / per_tree, remaining)) if per_tree > 0 else remaining
            size = max(1, min(self.limit, fit, remaining))
            size = -(-remaining // -(-remaining // size))   # even batches, none larger than size
        self.sizes.append(size)
        return size

    def record(self, trees, seconds):
        self.grown += int(trees)
        self.seconds += float(seconds)


def resolve_tree_batch(tree_batch, n_estimators, memory_mb, bytes_per_tree):
    """Trees grown together: ``tree_batch`` if given, else as many as fit
    ``memory_mb`` (at least one, at most the forest)."""
    if tree_batch is not None:
        return max(1, min(int(tree_batch), int(n_estimators)))
    fit = int(memory_mb) * 1024 * 1024 // max(int(bytes_per_tree), 1)
    return max(1, min(int(n_estimators), fit))
