"""Level-wise tree growth shared by the centralized estimator and the federated forest.

Two roles exchange small dict messages of numpy arrays:

* :class:`TreeGrower` (the master) draws the bootstrap sample and the feature
  subsets, picks the winning party of every node, applies pre-pruning and
  stores the tree structure and leaf values;
* :class:`PartySplitter` (a party) owns a block of columns, finds its best split
  for every open node of a level and, for the nodes it wins, keeps the
  threshold and sends the left/right partition as a bitmap.

A level costs two exchanges: ``find`` (all parties report their best gain per
open node) and ``partition`` (only winners send row bitmaps); the partition of
one level travels to every party inside the next level's ``find`` message.
The centralized estimator runs the same two roles in one process
(:class:`LocalParties`), so both give the same trees for the same seed.
"""
import numpy as np

from . import kernels as K
from .binning import fit_bins, transform_bins
from .labels import PlainLabels, class_weight_vector
from ..params import CRITERION_CODE, resolve_count, resolve_max_features, resolve_max_samples

EPSILON = np.finfo(np.float64).eps
LEAF = -1          # children_left/right of a leaf
NOT_OWNED = -1     # partial-tree feature of a split owned by another party
LEAF_FEATURE = -2  # feature of a leaf


class SplitSettings:
    """Resolved, picklable settings both roles need for one fit."""

    def __init__(self, params, n_rows, is_classification, n_classes):
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
        self.reveal_splits = False  # winners also send feature and threshold to the master


def _pack(bits):
    return np.packbits(bits) if bits.size else np.empty(0, dtype=np.uint8)


def _unpack(packed, n):
    return np.unpackbits(packed, count=n) if n else np.empty(0, dtype=np.uint8)


class _Segments:
    """Row indices of a tree's in-bag rows grouped by node (shared by both roles)."""

    def __init__(self, counts):
        self.rows = np.flatnonzero(counts).astype(np.int32)
        self.span = {0: (0, self.rows.shape[0])}
        self.next_id = 1

    def bounds(self, nodes):
        starts = np.fromiter((self.span[n][0] for n in nodes), dtype=np.int64, count=len(nodes))
        ends = np.fromiter((self.span[n][1] for n in nodes), dtype=np.int64, count=len(nodes))
        return starts, ends

    def split(self, nodes, bits):
        """Partition the listed nodes by their concatenated bits; returns the
        (left, right) child ids, allocated in node order."""
        starts, ends = self.bounds(nodes)
        n_left = K.apply_partition(self.rows, starts, ends, bits)
        children = []
        for n, s, e, nl in zip(nodes, starts, ends, n_left):
            left, right = self.next_id, self.next_id + 1
            self.next_id += 2
            self.span[left] = (s, s + nl)
            self.span[right] = (s + nl, e)
            del self.span[n]
            children.append((left, right))
        return children

    def n_rows(self, nodes):
        starts, ends = self.bounds(nodes)
        return int((ends - starts).sum())


class PartySplitter:
    """One party's side of tree growth over its own columns ``X`` (float64, NaN = missing)."""

    def __init__(self, X, settings, labels):
        self.settings = settings
        self.labels = labels
        X = np.asarray(X, dtype=np.float64)
        self.n_features = X.shape[1]
        if settings.split_method == "hist":
            self.edges, self.n_bins = fit_bins(X, settings.max_bins)
            self.Xb = transform_bins(X, self.edges, self.n_bins)
            self.X = np.asfortranarray(X)
        else:
            self.edges = self.n_bins = self.Xb = None
            # scikit-learn compares float32 feature values against float64 thresholds
            self.X = np.asfortranarray(X.astype(np.float32).astype(np.float64))
        self.trees = []
        self._tree = None

    # -- message handling -------------------------------------------------
    def handle(self, msg):
        """Process one message from the grower; returns the reply (or None)."""
        if "counts" in msg:
            self._begin(msg)
        if "split_nodes" in msg:
            self._apply(msg)
        op = msg["op"]
        if op == "find":
            return self._find(msg)
        if op == "partition":
            return self._partition(msg)
        if op == "finish":
            self._finish()
            return None
        raise ValueError(f"unknown tree message {op!r}")

    def _begin(self, msg):
        counts = msg["counts"]
        ycls, yw = self.labels.tree_stats(counts, msg["class_weight"])
        self._tree = {
            "seg": _Segments(counts), "ycls": ycls, "yw": yw,
            "total_w": float(yw[:, 0].sum()),
            "left": [LEAF], "right": [LEAF], "feature": [LEAF_FEATURE],
            "threshold": [np.nan], "missing_left": [0], "candidates": {},
        }

    def _find(self, msg):
        t = self._tree
        s = self.settings
        nodes = msg["nodes"]
        starts, ends = t["seg"].bounds(nodes)
        fmask = msg["fmask"]
        args = (t["seg"].rows, starts, ends, fmask, t["ycls"], t["yw"], s.is_classification,
                self.labels.n_stats, s.crit, t["total_w"], s.min_samples_leaf, 0.0)
        if s.split_method == "hist":
            gain, feat, b, ml = K.best_splits_hist(self.Xb, self.n_bins, *args)
            thr = np.where(feat >= 0, self.edges[np.maximum(feat, 0), b], np.nan)
            # the last bin means "all non-missing values left"
            last = (feat >= 0) & (b == self.n_bins[np.maximum(feat, 0)] - 1)
            thr[last] = np.inf
        else:
            gain, feat, thr, ml = K.best_splits_exact(self.X, *args)
        t["candidates"] = {int(n): (int(f), float(h), int(m))
                           for n, f, h, m in zip(nodes, feat, thr, ml) if f >= 0}
        return {"gain": gain}

    def _partition(self, msg):
        t = self._tree
        seg = t["seg"]
        nodes = [int(n) for n in msg["nodes"]]
        chosen = [t["candidates"][n] for n in nodes]
        starts, ends = seg.bounds(nodes)
        bits = K.partition_bits(self.X, seg.rows, starts, ends,
                                np.array([c[0] for c in chosen], dtype=np.int64),
                                np.array([c[1] for c in chosen], dtype=np.float64),
                                np.array([c[2] for c in chosen], dtype=np.uint8))
        for n, (f, thr, ml) in zip(nodes, chosen):
            t["feature"][n] = f
            t["threshold"][n] = thr
            t["missing_left"][n] = ml
        reply = {"bits": _pack(bits)}
        if self.settings.reveal_splits:
            idx = [int(n) for n in msg["nodes"]]
            reply.update(feature=np.array([t["feature"][n] for n in idx], dtype=np.int32),
                         threshold=np.array([t["threshold"][n] for n in idx]),
                         missing_left=np.array([t["missing_left"][n] for n in idx], dtype=np.uint8))
        return reply

    def _apply(self, msg):
        t = self._tree
        nodes = [int(n) for n in msg["split_nodes"]]
        bits = _unpack(msg["bits"], t["seg"].n_rows(nodes))
        for n, (l, r) in zip(nodes, t["seg"].split(nodes, bits)):
            t["left"][n] = l
            t["right"][n] = r
            if t["feature"][n] == LEAF_FEATURE:
                t["feature"][n] = NOT_OWNED
            for _ in (l, r):
                t["left"].append(LEAF)
                t["right"].append(LEAF)
                t["feature"].append(LEAF_FEATURE)
                t["threshold"].append(np.nan)
                t["missing_left"].append(0)

    def _finish(self):
        t = self._tree
        self.trees.append({
            "children_left": np.array(t["left"], dtype=np.int32),
            "children_right": np.array(t["right"], dtype=np.int32),
            "feature": np.array(t["feature"], dtype=np.int32),
            "threshold": np.array(t["threshold"], dtype=np.float64),
            "missing_left": np.array(t["missing_left"], dtype=np.uint8),
        })
        self._tree = None


class LocalParties:
    """Parties living in this process (the centralized estimator)."""

    def __init__(self, splitters):
        self.splitters = splitters
        self.rounds = 0

    def exchange(self, msgs):
        self.rounds += 1
        return [None if m is None else s.handle(m) for s, m in zip(self.splitters, msgs)]

    def broadcast(self, msgs):
        for s, m in zip(self.splitters, msgs):
            s.handle(m)


class TreeGrower:
    """The master's side of tree growth.

    ``parties`` provides ``exchange(list_of_msgs) -> list_of_replies`` (one
    round) and ``broadcast(list_of_msgs)`` (one way); ``feature_counts`` gives
    each party's number of columns, in party order (the global feature order).
    """

    def __init__(self, parties, labels, params, settings, feature_counts, y_codes=None,
                 classes=None):
        self.parties = parties
        self.labels = labels
        self.params = params
        self.s = settings
        self.feature_counts = list(feature_counts)
        self.offsets = np.concatenate(([0], np.cumsum(self.feature_counts)))
        self.n_features = int(self.offsets[-1])
        self.k_features = resolve_max_features(params.max_features, self.n_features)
        self.n_rows = labels.y.shape[0]
        self.n_boot = resolve_max_samples(params.max_samples, self.n_rows)
        self.y_codes = y_codes
        self.classes = classes

    # -- random draws -----------------------------------------------------
    def _draw_counts(self, rng):
        if not self.params.bootstrap:
            return np.ones(self.n_rows, dtype=np.uint8)
        idx = rng.integers(0, self.n_rows, self.n_boot)
        counts = np.bincount(idx, minlength=self.n_rows)
        # the smallest integer type that holds them: the counts travel to every party
        return counts.astype(np.uint8 if counts.max() < 256 else np.int32)

    def _draw_features(self, rng):
        mask = np.zeros(self.n_features, dtype=np.uint8)
        mask[rng.choice(self.n_features, self.k_features, replace=False)] = 1
        return mask

    def _masks(self, rng, tree_mask, n_nodes):
        """Per-party (n_nodes, n_party_features) masks for one level."""
        if self.params.feature_sampling == "tree":
            full = np.broadcast_to(tree_mask, (n_nodes, self.n_features))
        else:
            # an independent uniform k-subset per node: the k smallest of uniform keys
            keys = rng.random((n_nodes, self.n_features))
            chosen = np.argpartition(keys, self.k_features - 1, axis=1)[:, :self.k_features]
            full = np.zeros((n_nodes, self.n_features), dtype=np.uint8)
            np.put_along_axis(full, chosen, 1, axis=1)
        return [np.ascontiguousarray(full[:, self.offsets[p]:self.offsets[p + 1]])
                for p in range(len(self.feature_counts))]

    # -- growth -----------------------------------------------------------
    def _is_leaf(self, depth, count, imp):
        s = self.s
        return (depth >= s.max_depth or count < s.min_samples_split
                or count < 2 * s.min_samples_leaf or imp <= EPSILON)

    def grow(self, seed):
        """Grow one tree; returns the master's tree (structure, owners, leaf values)."""
        rng = np.random.default_rng(seed)
        counts = self._draw_counts(rng)
        cw = (class_weight_vector(self.params.class_weight, self.y_codes, counts,
                                  self.labels.n_classes, self.classes)
              if self.labels.is_classification else np.empty(0))
        tree_mask = self._draw_features(rng) if self.params.feature_sampling == "tree" else None
        ycls, yw = self.labels.tree_stats(counts, cw)
        seg = _Segments(counts)
        n_parties = len(self.feature_counts)
        S = self.labels.n_stats
        stats, w, imp, cnt = K.node_statistics(seg.rows, *seg.bounds([0]), ycls, yw,
                                               self.s.is_classification, S, self.s.crit)
        nodes = {"left": [LEAF], "right": [LEAF], "owner": [-1], "depth": [0],
                 "stats": [stats[0]], "weight": [w[0]], "impurity": [imp[0]], "count": [cnt[0]],
                 "feature": [LEAF_FEATURE], "threshold": [np.nan], "missing_left": [0]}
        open_nodes = [] if self._is_leaf(0, cnt[0], imp[0]) else [0]
        pending = {"counts": counts, "class_weight": cw}
        while open_nodes:
            m = len(open_nodes)
            nodes_arr = np.array(open_nodes, dtype=np.int32)
            masks = self._masks(rng, tree_mask, m)
            msgs = [dict(pending, op="find", nodes=nodes_arr, fmask=masks[p]) for p in range(n_parties)]
            replies = self.parties.exchange(msgs)
            gains = np.vstack([r["gain"] for r in replies]) if n_parties else np.full((1, m), -np.inf)
            winner = np.argmax(gains, axis=0)           # first maximum: lowest party wins ties
            best = gains[winner, np.arange(m)]
            do_split = np.isfinite(best) & (best + EPSILON >= self.s.min_impurity_decrease)
            split_nodes = [n for n, d in zip(open_nodes, do_split) if d]
            if not split_nodes:
                pending = {}
                break
            won = [[] for _ in range(n_parties)]
            for n, p, d in zip(open_nodes, winner, do_split):
                if d:
                    won[p].append(n)
            msgs = [{"op": "partition", "nodes": np.array(won[p], dtype=np.int32)} if won[p] else None
                    for p in range(n_parties)]
            replies = self.parties.exchange(msgs)
            node_bits = {}
            for p in range(n_parties):
                if not won[p]:
                    continue
                bits = _unpack(replies[p]["bits"], seg.n_rows(won[p]))
                off = 0
                for n in won[p]:
                    s_, e_ = seg.span[n]
                    node_bits[n] = bits[off: off + e_ - s_]
                    off += e_ - s_
                    nodes["owner"][n] = p
                if "feature" in replies[p]:
                    for n, f, h, ml in zip(won[p], replies[p]["feature"], replies[p]["threshold"],
                                           replies[p]["missing_left"]):
                        nodes["feature"][n] = int(f) + int(self.offsets[p])
                        nodes["threshold"][n] = float(h)
                        nodes["missing_left"][n] = int(ml)
            all_bits = np.concatenate([node_bits[n] for n in split_nodes])
            children = seg.split(split_nodes, all_bits)
            child_ids = [c for pair in children for c in pair]
            stats, w, imp, cnt = K.node_statistics(seg.rows, *seg.bounds(child_ids), ycls, yw,
                                                   self.s.is_classification, S, self.s.crit)
            open_nodes = []
            for n, (l, r) in zip(split_nodes, children):
                nodes["left"][n] = l
                nodes["right"][n] = r
            for k, c in enumerate(child_ids):
                parent_depth = nodes["depth"][split_nodes[k // 2]]
                for key, val in (("left", LEAF), ("right", LEAF), ("owner", -1),
                                 ("depth", parent_depth + 1), ("stats", stats[k]),
                                 ("weight", w[k]), ("impurity", imp[k]), ("count", cnt[k]),
                                 ("feature", LEAF_FEATURE), ("threshold", np.nan), ("missing_left", 0)):
                    nodes[key].append(val)
                if not self._is_leaf(parent_depth + 1, cnt[k], imp[k]):
                    open_nodes.append(c)
            pending = {"split_nodes": np.array(split_nodes, dtype=np.int32), "bits": _pack(all_bits)}
        self.parties.broadcast([dict(pending, op="finish") for _ in range(n_parties)])
        return self._master_tree(nodes)

    def _master_tree(self, nodes):
        stats = np.array(nodes["stats"])
        weight = np.array(nodes["weight"])
        if self.s.is_classification:
            value = stats / np.where(weight > 0, weight, 1.0)[:, None]
        else:
            value = (stats[:, 1] / np.where(weight > 0, weight, 1.0))[:, None]
        tree = {
            "children_left": np.array(nodes["left"], dtype=np.int32),
            "children_right": np.array(nodes["right"], dtype=np.int32),
            "owner": np.array(nodes["owner"], dtype=np.int32),
            "value": value,
            "impurity": np.array(nodes["impurity"]),
            "n_node_samples": np.array(nodes["count"], dtype=np.int64),
            "weighted_n_node_samples": weight,
        }
        if self.s.reveal_splits:
            tree.update(feature=np.array(nodes["feature"], dtype=np.int32),
                        threshold=np.array(nodes["threshold"]),
                        missing_left=np.array(nodes["missing_left"], dtype=np.uint8))
        return tree


def warm_up(split_method, is_classification=True):
    """Load (or compile) the growth kernels for this process on a tiny problem,
    so the first real tree does not pay for it."""
    from ..params import ForestParams, validate
    task = "classification" if is_classification else "regression"
    params = validate(ForestParams(n_estimators=1, split_method=split_method, max_features=None,
                                   bootstrap=False), task)
    X = np.array([[0.0, 1.0], [1.0, np.nan], [2.0, 0.0], [3.0, 1.0]])
    y = np.array([0, 0, 1, 1]) if is_classification else np.array([0.0, 0.5, 1.0, 2.0])
    labels = PlainLabels(y, is_classification, 2 if is_classification else 1)
    settings = SplitSettings(params, 4, is_classification, labels.n_classes)
    splitter = PartySplitter(X, settings, labels)
    TreeGrower(LocalParties([splitter]), labels, params, settings, [2],
               y_codes=labels.y if is_classification else None, classes=np.arange(2)).grow(0)


def tree_seeds(random_state, n_estimators):
    """One independent seed per tree, so tree ``t`` is the same whether or not
    trees before it were grown in this run (training resumes exactly)."""
    return np.random.SeedSequence(random_state).spawn(n_estimators)


def merge_partials(master_tree, partials, offsets):
    """The complete tree as the union of the parties' partial trees (global feature ids)."""
    n = master_tree["children_left"].shape[0]
    feature = np.full(n, LEAF_FEATURE, dtype=np.int32)
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
