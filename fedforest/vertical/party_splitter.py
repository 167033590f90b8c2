"""A party's side of vertical tree growth (:class:`PartySplitter`): split
search on its own columns, partitions of the nodes it wins, every message of
the master checked first; :class:`LocalParties` runs parties in the
grower's process (the single-process estimators).

One splitter serves every vertical algorithm and privacy mode; two
components make the difference, chosen once when the job starts:

* the **labels** (the algorithm's row statistics, the way scikit-learn's
  ``Criterion`` is plugged into its splitter): the forest's
  :class:`~fedforest.tree.labels.PlainLabels`, boosting's per-round
  gradients, or what a party of an encrypted mode holds of them (row
  ciphertexts; the label holder's integer grid);
* the **label channel** (how the party takes part in a split decision):
  :class:`OwnSplits` (plain labels: it scores its own columns and the master
  takes the best gain), :class:`~.encrypted_labels.CipherSums` (a party
  without the labels in an encrypted mode: encrypted per-bin sums on
  request) or :class:`~.paillier.holder.KeyHolder` (the label holder: it
  scores its own columns, decrypts the others' sums and decides).
"""
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..transport.base import ProtocolError
from ..tree import criterion, partitioner
from ..tree import splitter as split_kernels
from ..tree import threads as numba_threads
from ..tree.format import LEAF, NOT_OWNED
from ..tree.binning import MAX_BINS, MISSING_BIN, default_bins, fit_bins, listed_features, transform_bins
from ..tree.growth import Nodes, PARTY_COLUMNS, gain_scale, min_leaf_weight, pack_bits, unpack_bits
from .messages import (APPLY, COMMIT, COUNT_DTYPES, GROW, MASK_DTYPES, Parties, bad_message, join_replies,
                       node_list, shown, sorted_subset, unpack_batch)


def bin_columns(columns, max_bins, sample_weight=None):
    """Bin edges, bin counts and bin codes (uint8, column-major) of aligned
    columns (:class:`~fedforest.data.columns.AlignedColumns`), taken a few
    at a time (as many as the kernel threads) and freed once binned: the
    float64 values of one group of columns exist at a time.  The same edges
    and codes as :func:`fit_bins` and :func:`transform_bins` of the whole matrix."""
    n_rows, n_features = columns.shape
    edges = np.full((n_features, MAX_BINS), np.inf)
    n_bins = np.ones(n_features, dtype=np.int32)
    codes = np.empty((n_rows, n_features), dtype=np.uint8, order="F")
    group = max(1, numba_threads.threads())
    for lo in range(0, n_features, group):
        hi = min(lo + group, n_features)
        X = np.empty((n_rows, hi - lo), dtype=np.float64, order="F")
        for j in range(lo, hi):
            X[:, j - lo] = columns.take_column(j)
        e, nb = fit_bins(X if sample_weight is None else X[sample_weight > 0], max_bins)
        edges[lo:hi], n_bins[lo:hi] = e, nb
        codes[:, lo:hi] = transform_bins(X, e, nb)
        del X
    return edges, n_bins, codes


class PartySplitter:
    """One party's side of tree growth over its own columns ``X`` (float64, NaN = missing).

    Every message is checked against what the party knows before a kernel
    sees it (the kernels do no bounds checks): node ids must be open leaves
    of the tree, arrays must have the party's row and column counts, and the
    messages of a tree must come in the order of growth
    (:class:`~fedforest.transport.base.ProtocolError` otherwise)."""

    checked = True        # check every message (off only where the grower is in this process)
    # label_holder_first_trees: the trees below ``solo_trees`` are the label holder's alone; a
    # party that does not grow them (``grows_solo`` False) gets only their shape at the commit
    solo_trees = 0
    grows_solo = False
    # the keys of a tree's first message (with the labels' own) and of the
    # partition of the last level (any op); the channel gives those per op
    begin_keys = ("counts", "class_weight")
    apply_keys = ("split_nodes", "bits")

    def __init__(self, X, settings, labels, channel=None):
        self.settings = settings
        self.labels = labels
        self.channel = OwnSplits() if channel is None else channel
        self.op_keys = self.channel.op_keys
        self.apply_keys = self.channel.apply_keys
        self.begin_keys = PartySplitter.begin_keys + tuple(labels.begin_keys)
        self._keys_of_op = {}
        columns = X if hasattr(X, "take_column") else None     # a party's aligned columns
        if columns is None:
            X = np.asarray(X, dtype=np.float64)
        self.n_rows, self.n_features = X.shape
        # what a job's party also checks (None: not checked): the in-bag draws every
        # tree's counts sum to, the largest count of one row, whether class weights apply
        self.count_total = None
        self.count_max = None
        self.class_weighted = None
        # a job's party recomputes every tree's draws from the job's seed
        # (:func:`~fedforest.tree.growth.tree_draws`: tree number -> its counts; None: not checked)
        self.draws = None
        if settings.split_method == "hist":
            # one byte per value: the bin codes are all the growth needs
            # rows of weight zero take no part, not even in the bin edges
            sw = labels.sample_weight
            if columns is None:
                self.edges, self.n_bins = fit_bins(X if sw is None else X[sw > 0], settings.max_bins)
                self.Xb = transform_bins(X, self.edges, self.n_bins)
            else:
                self.edges, self.n_bins, self.Xb = bin_columns(columns, settings.max_bins, sw)
            self.X = None
            # a feature's bin holding most rows: histograms with exact sums skip its rows,
            # and where it holds nearly all, the others are listed per row
            self.default_bin, share = default_bins(self.Xb)
            listed = listed_features(share, self.n_rows)
            self.row_entries = split_kernels.row_entries(self.Xb, self.default_bin, listed) \
                if listed.any() else None
            # kept histograms are compact (a feature's bins and its missing bin), so with
            # at most b bins per feature a node keeps them from b / (MISSING_BIN + 1) of
            # the settings' rows on, within the same bytes per row
            widest = int(self.n_bins.max()) + 1 if self.n_bins.size else MISSING_BIN + 1
            self.hist_cache_rows = -(-settings.hist_cache_rows * widest // (MISSING_BIN + 1))
        else:
            self.edges = self.n_bins = self.Xb = self.default_bin = self.row_entries = None
            # scikit-learn compares float32 feature values against float64 thresholds
            if columns is None:
                self.X = np.asfortranarray(X, dtype=np.float32)
            else:
                self.X = columns.dense(np.float32, order="F")
        self.trees = []
        self.tree_ids = []
        self._current = threading.local()
        self._states = {}
        # seconds of the encrypted modes' stages on this party (party sums, decryption, the
        # decision, randomness, encryption), written to its own manifest only
        self.seconds = {}
        self.channel.attach(self)

    # -- message handling -------------------------------------------------
    # the tree being handled, per thread (trees of a batch may be handled in parallel)
    _tree = property(lambda self: getattr(self._current, "tree", None),
                     lambda self, tree: setattr(self._current, "tree", tree))
    #: the number of the tree being handled (on this thread)
    tree_id = property(lambda self: getattr(self._current, "tree_id", None))
    #: the state of the tree being handled (on this thread): a dict of what this party and
    #: its channel keep of the tree (its nodes and rows, the open leaves, the level, ...)
    state = property(lambda self: self._tree)

    def state_of(self, t):
        """The state of tree ``t`` of the batch being grown (None: not growing here)."""
        return self._states.get(t)

    def handle_batch(self, msg):
        """Process a :func:`pack_batch` message of several trees; returns the
        packed replies.  After a ``commit`` the batch's trees are in
        :attr:`trees` (numbers in :attr:`tree_ids`), in tree order.

        With enough trees (and :attr:`tree_threads`), the trees are handled
        in blocks on a few threads (:func:`~fedforest.tree.threads.block_threads`),
        each running single-threaded kernels: a level of a large batch then
        costs no parallel launch per tree.  Replies are
        joined in tree order."""
        op = msg.get("op")
        if op not in (GROW, COMMIT, APPLY):
            raise bad_message(f"unexpected batch message {op!r}")
        items = sorted(unpack_batch(msg).items())
        if self.checked:
            for t, sub in items:
                sub_op = sub.get("op")
                # a commit holds finish messages only, an apply batch apply messages only
                if (sub_op == "finish") != (op == COMMIT) or (sub_op == "apply") != (op == APPLY):
                    raise bad_message(f"tree {t}: a {op!r} message holds a {sub_op!r} message")
            if op == COMMIT:
                open_trees = sorted(set(self._states) - {t for t, _ in items})
                if open_trees:
                    raise bad_message(f"the commit leaves trees {open_trees} unfinished")
        n_threads = numba_threads.threads()
        blocks = numba_threads.block_threads(n_threads)
        if self.channel.tree_threads and blocks > 1 and len(items) >= 2 * blocks \
                and msg["op"] != COMMIT and numba_threads.concurrent_launches_ok():
            with ThreadPoolExecutor(blocks, initializer=numba_threads.set_threads,
                                    initargs=(1,)) as pool:
                done = list(pool.map(self._handle_tree, items))
        else:
            done = [self._handle_tree(item) for item in items]
        replies = []
        for (t, sub), (state, reply) in zip(items, done):
            if sub["op"] == "finish":
                self.tree_ids.append(t)
                self.trees.append(state)
            else:
                self._states[t] = state
            if reply is not None:
                replies.append(reply)
        if op == COMMIT:
            self.channel.committed(self)
        return join_replies(replies)

    def _handle_tree(self, item):
        """One tree's message, on this thread: returns (its new state or, when it
        finished, its arrays; the reply)."""
        t, sub = item
        self._tree = self._states.pop(t, None)
        self._current.tree_id = t
        try:
            reply = self.handle(sub)
        except ProtocolError as exc:
            raise ProtocolError(f"{exc} (tree {t})") from None
        state = self._finished if sub["op"] == "finish" else self._tree
        self._tree = None
        return state, reply

    def _allowed_keys(self, op):
        """The keys a tree's ``op`` message may hold (built once per op)."""
        cache = self._keys_of_op
        if op not in cache:
            cache[op] = frozenset(self.op_keys[op]) | frozenset(self.begin_keys) | frozenset(self.apply_keys) \
                | {"op"}
        return cache[op]

    def handle(self, msg):
        """Process one message from the grower; returns the reply (or None)."""
        op = msg.get("op")
        if not self.checked:        # the grower runs in this process (the single-process estimators)
            if self._tree is None:
                self._begin(msg)
                self._tree.update(level=0)
            if "split_nodes" in msg:
                self.apply_level({"split_nodes": msg["split_nodes"],
                             "bits": self.channel.level_bits(self, msg, msg["split_nodes"])})
            if op == "find":
                return self.channel.find(self, msg)
            if op == "partition":
                return self.channel.partition(self, msg)
            if op in self.channel.extra_ops:      # the label holder's decision
                return self.channel.handle_op(self, msg)
            if op == "apply":
                return None
            self._tree["importance"] = msg["importance"]
            self._finish()
            return None
        if self.tree_id is not None and self.tree_id < self.solo_trees and not self.grows_solo:
            return self._shape_only(msg)
        if op not in self.op_keys:
            raise bad_message(f"unknown tree message {op!r}")
        allowed = self._allowed_keys(op)
        extra = sorted(str(k) for k in msg if k not in allowed)
        if extra:
            raise bad_message(f"a {op!r} message may not hold {', '.join(map(repr, extra))}")
        if self._tree is None:
            self._begin(self._check_begin(msg))
            # growth state: the open leaves (the root, then the children of the last
            # split), their depth, the nodes searched and partitioned at this level
            self._tree.update(open=np.zeros(1, dtype=np.int32), open_ids=range(1), level=0, searched=None,
                              partitioned=None)
        elif any(k in msg for k in self.begin_keys):
            raise bad_message(f"{', '.join(map(repr, self.begin_keys))} for a tree that has begun")
        if op == "apply" or any(k in msg for k in self.apply_keys if k not in self.op_keys[op]):
            self.apply_checked(msg)
        if op == "apply":
            return None
        if op == "find":
            return self.channel.find(self, self.channel.check_find(self, msg))
        if op == "partition":
            return self.channel.partition(self, self.channel.check_partition(self, msg))
        if op in self.channel.extra_ops:
            return self.channel.handle_op(self, msg)
        self.channel.check_finish(self, msg)
        self._tree["importance"] = self._check_finish(msg)
        self._finish()
        return None

    # -- checks of the grower's messages ------------------------------------
    def _check_begin(self, msg):
        """The bootstrap counts and class weights of a tree's first message."""
        if any(k not in msg for k in self.begin_keys):
            raise bad_message(f"the first message of a tree must hold {', '.join(map(repr, self.begin_keys))}")
        counts = msg["counts"]
        if not (isinstance(counts, np.ndarray) and counts.dtype in COUNT_DTYPES
                and counts.shape == (self.n_rows,)):
            raise bad_message(f"'counts' must be a uint8 or int32 array of {self.n_rows} counts (one "
                              f"per aligned row), got {shown(counts)}")
        if counts.size and counts.min() < 0:
            raise bad_message("'counts' holds negative counts")
        if self.count_max is not None and counts.size and counts.max() > self.count_max:
            raise bad_message(f"'counts' holds a count above {self.count_max}")
        if self.count_total is not None and int(counts.sum(dtype=np.int64)) != self.count_total:
            raise bad_message(f"'counts' sum to {int(counts.sum(dtype=np.int64))}, not to the "
                              f"{self.count_total} draws of a tree")
        if self.draws is not None:
            # the master draws nothing it chose: the counts must be the tree's own draws
            want = self.draws(self.tree_id)
            if want is None or not np.array_equal(counts, want):
                raise bad_message("'counts' are not the tree's draws from the job's seed")
        cw = msg["class_weight"]
        s = self.settings
        sizes = (0, s.n_classes) if s.is_classification else (0,)
        if self.class_weighted is not None:
            sizes = (s.n_classes,) if self.class_weighted else (0,)
        if not (isinstance(cw, np.ndarray) and cw.dtype == np.float64 and cw.ndim == 1
                and cw.size in sizes):
            raise bad_message(f"'class_weight' must be a float64 array of "
                              f"{' or '.join(map(str, sizes))} weights, got {shown(cw)}")
        if not np.all(np.isfinite(cw) & (cw >= 0)):
            raise bad_message("'class_weight' holds weights that are negative or not finite")
        begin = {"counts": counts, "class_weight": cw}
        if len(self.begin_keys) > len(PartySplitter.begin_keys):
            begin.update(self.labels.check_begin(msg, self.n_rows))
        return begin

    def apply_checked(self, msg, bits=None):
        """Apply the last level's partition (``split_nodes``, ``bits``) after
        checking it: open leaves this party may split (depth, row counts, its
        own partitioned nodes among them), one bit per row, and children of at
        least ``min_samples_leaf`` rows.  The children become the open leaves.
        ``bits``: the level's bits where the channel already assembled them
        (else the channel takes them from the message)."""
        t = self._tree
        s = self.settings
        if bits is None and any(k not in msg for k in self.apply_keys):
            raise bad_message(f"{', '.join(map(repr, self.apply_keys))} travel together")
        self.channel.check_apply(self, msg)
        nodes = node_list(msg["split_nodes"], "'split_nodes'", t["open_ids"])
        tree = t["nodes"]
        if nodes.size and t["level"] >= s.max_depth:
            raise bad_message(f"'split_nodes' splits nodes at depth {t['level']}; max_depth is "
                              f"{s.max_depth}")
        starts, ends = tree.bounds(nodes)
        least = s.min_samples_split          # at least 2 * min_samples_leaf (SplitSettings)
        if ((ends - starts) < least).any():
            raise bad_message(f"'split_nodes' names a node of fewer than {least} rows, which is "
                              "never split")
        n = int((ends - starts).sum())
        if bits is None:
            bits = self.channel.level_bits(self, msg, nodes)
        if not (isinstance(bits, np.ndarray) and bits.dtype == np.uint8
                and bits.shape == ((n + 7) // 8,)):
            raise bad_message(f"'bits' must be {(n + 7) // 8} uint8 bytes (a bit for each of the {n} "
                              f"rows of the split nodes), got {shown(bits)}")
        mine = t["partitioned"]
        if mine is not None and not sorted_subset(mine, nodes):
            raise bad_message("'split_nodes' leaves out nodes this party partitioned")
        first = tree.n
        self.apply_level({"split_nodes": nodes, "bits": bits})
        children = np.arange(first, tree.n, dtype=np.int32)
        starts, ends = tree.bounds(children)
        if ((ends - starts) < s.min_samples_leaf).any():
            raise bad_message(f"'bits' leave a child of fewer than {s.min_samples_leaf} rows "
                              "(min_samples_leaf)")
        t.update(open=children, open_ids=range(first, tree.n), searched=None, partitioned=None)

    def check_find(self, msg):
        """A ``find``: open leaves and a feature mask of this party's columns."""
        t = self._tree
        if t["searched"] is not None:
            raise bad_message("a second 'find' for one level of the tree")
        nodes = node_list(msg.get("nodes"), "'nodes'", t["open_ids"])
        fmask = msg.get("fmask")
        if not (isinstance(fmask, np.ndarray) and fmask.dtype in MASK_DTYPES
                and fmask.shape == (nodes.size, self.n_features)):
            raise bad_message(f"'fmask' must be a uint8 or bool array of shape ({nodes.size}, "
                              f"{self.n_features}), got {shown(fmask)}")
        t["searched"] = nodes
        out = dict(msg, nodes=nodes, fmask=np.ascontiguousarray(fmask, dtype=np.uint8))
        if "stats" in msg:
            stats = msg["stats"]
            shape = (nodes.size, self.labels.n_stats)
            if not (isinstance(stats, np.ndarray) and stats.dtype == np.float64 and stats.shape == shape
                    and np.all(np.isfinite(stats))):
                raise bad_message(f"'stats' must be a float64 array of shape {shape} (finite label "
                                  f"statistics of the nodes), got {shown(stats)}")
        return out

    def check_partition(self, msg):
        """A ``partition``: nodes this party searched at this level and found a split for."""
        t = self._tree
        if t["searched"] is None or t["partitioned"] is not None:
            raise bad_message("a 'partition' without a 'find' of its level, or a second one")
        # among the open leaves, only those searched at this level that found a split
        # have a candidate feature (new leaves start without one)
        nodes = node_list(msg.get("nodes"), "'nodes'", t["open_ids"])
        if (t["nodes"].col["cand_feature"][nodes] < 0).any():
            raise bad_message("'nodes' names a node this party did not search or found no split for")
        t["partitioned"] = nodes
        return dict(msg, nodes=nodes)

    def _check_finish(self, msg):
        """A ``finish``: the tree's importance shares, one per node."""
        t = self._tree
        if t["partitioned"] is not None and t["partitioned"].size:
            raise bad_message("'finish' before the partition of the last level was applied")
        imp = msg.get("importance")
        n = t["nodes"].n
        if not (isinstance(imp, np.ndarray) and imp.dtype == np.float64 and imp.shape == (n,)
                and np.all(np.isfinite(imp))):
            raise bad_message(f"'importance' must be {n} finite float64 values (one per node), "
                              f"got {shown(imp)}")
        return imp

    def _shape_only(self, msg):
        """A tree of the first ``solo_trees`` (label_holder_first_trees), which
        the label holder grows alone: this party takes no part in it, so the
        only message of it that it takes is the commit's ``finish`` with the
        tree's shape (stored with no split of its own, for prediction)."""
        op = msg.get("op")
        if op != "finish" or set(msg) != {"op", "shape_left", "shape_right"}:
            raise bad_message(f"tree {self.tree_id} is one of the first {self.solo_trees} trees "
                              f"(label_holder_first_trees), which the label holder grows alone; this "
                              f"party takes no part in them, but got a {str(op)[:40]!r} message with "
                              f"{', '.join(sorted(map(repr, map(str, msg)))[:8])}")
        left, right = check_shape(msg["shape_left"], msg["shape_right"], self.n_rows, self.settings.max_depth)
        n = left.shape[0]
        out = {"children_left": left, "children_right": right,
               "feature": np.where(left >= 0, NOT_OWNED, LEAF).astype(np.int32),
               "threshold": np.full(n, np.nan), "missing_left": np.zeros(n, dtype=np.uint8),
               "importance": np.zeros(n)}
        if self.labels.records_splits:
            out.update(self.labels.split_records((), n, self.settings))
        self._current.finished = out
        self._tree = None
        return None

    def _begin(self, msg):
        self._tree = self.channel.begin(self, msg)

    def plain_tree(self, msg, columns=PARTY_COLUMNS):
        """A tree's state where the labels are known here in plaintext: its
        per-row statistics from its first message."""
        counts = msg["counts"]
        ycls, yw = self.labels.tree_stats(msg["counts"], msg["class_weight"],
                                          *(msg[k] for k in self.labels.begin_keys))
        total_w = float(yw[:, 0].sum())
        # histograms are derived by subtraction only where that is exact: integer
        # statistics (class counts under integer row weights) sum alike in any
        # order; boosting's gradient grid makes every sum exact
        exact = self.labels.exact_sums or (
            self.settings.is_classification and total_w < 2.0 ** 53 and bool(np.all(yw == np.floor(yw))))
        return {"nodes": Nodes(counts, columns), "ycls": ycls, "yw": yw, "counts": counts,
                "total_w": total_w, "subtract": exact, "hists": None, "family": None}

    def score(self, msg):
        """The best split of each node in ``msg["nodes"]`` over this party's
        columns (plaintext labels); the candidates are kept for a partition."""
        t = self._tree
        s = self.settings
        tree = t["nodes"]
        nodes = msg["nodes"]
        if self.n_features == 0:  # a party holding only the label never wins a split
            return {"gain": np.full(nodes.shape[0], -np.inf)}
        starts, ends = tree.bounds(nodes)
        args = (tree.rows, starts, ends, msg["fmask"], t["ycls"], t["yw"], s.is_classification,
                self.labels.n_stats, s.crit, s.reg_lambda, gain_scale(s, t["total_w"]), s.min_samples_leaf,
                min_leaf_weight(s, t["total_w"]))
        # the nodes' weights and impurities: from the statistics the grower sent (the same
        # sums over the same rows), else from the rows here
        known = criterion.stats_weight_impurity(msg["stats"], s.is_classification, s.crit, s.reg_lambda) \
            if "stats" in msg else split_kernels.NO_NODE_STATS
        c = tree.col
        widest = int(msg["fmask"].sum(axis=1).max(initial=0))
        numba_threads.for_work(int((ends - starts).sum()) * max(1, widest))
        if s.split_method == "hist":
            sub = self._subtraction(nodes, starts, ends)
            gain, feat, b, ml, index, hist, cnt = split_kernels.best_splits_hist(
                self.Xb, self.n_bins, *args, *sub, *known,
                default_bin=self.default_bin if t["subtract"] else None,
                row_entries=self.row_entries if t["subtract"] else None, exact_sums=t["subtract"])
            if t["subtract"]:
                kept = sub[-1].astype(bool)
                t["hists"] = (nodes[kept], index[kept], hist, cnt)
            thr = self.bin_threshold(feat, b)
            c["cand_bin"][nodes] = b
        else:
            gain, feat, thr, ml = split_kernels.best_splits_exact(self.X, *args, *known, s.threshold_rule)
        c["cand_feature"][nodes] = feat
        c["cand_threshold"][nodes] = thr
        c["cand_missing_left"][nodes] = ml
        return {"gain": gain}

    def _subtraction(self, nodes, starts, ends):
        """The histogram subtraction arguments of :func:`split_kernels.best_splits_hist`:
        a node whose parent kept its histograms and whose sibling has fewer rows
        (the lower id on a tie) derives them as parent minus sibling; nodes of
        at least :attr:`hist_cache_rows` rows keep theirs for the next level."""
        t = self._tree
        none = split_kernels.no_subtraction(nodes.shape[0], self.labels.n_stats)
        if not t["subtract"]:
            return none
        keep = ((ends - starts) >= self.hist_cache_rows).astype(np.uint8)
        cached, t["hists"] = t["hists"], None   # the parents' level is used up by this one
        if cached is None or t["family"] is None or not cached[0].size:
            return none[:-1] + (keep,)
        cached_nodes, index, hist, cnt = cached
        split_nodes, first_child = t["family"]
        # children come in (left, right) id pairs, in the order of the split nodes
        offset = nodes - first_child
        parent = split_nodes[offset // 2]
        sibling = np.where(offset % 2 == 0, nodes + 1, nodes - 1).astype(nodes.dtype)
        sib_starts, sib_ends = t["nodes"].bounds(sibling)
        n_sib, n_own = sib_ends - sib_starts, ends - starts
        at = np.minimum(np.searchsorted(cached_nodes, parent), cached_nodes.shape[0] - 1)
        use = (cached_nodes[at] == parent) & ((n_sib < n_own) | ((n_sib == n_own) & (sibling < nodes)))
        return (sib_starts, sib_ends, np.where(use, at, -1), index, hist, cnt, keep)

    def bin_threshold(self, feat, b):
        """Thresholds of histogram candidates (feature -1: none)."""
        f0 = np.maximum(feat, 0)
        thr = np.where(feat >= 0, self.edges[f0, b], np.nan)
        # the last bin means "all non-missing values left"
        thr[(feat >= 0) & (b == self.n_bins[f0] - 1)] = np.inf
        return thr

    def partition(self, msg):
        """Partition ``msg["nodes"]`` on their kept candidates: the bits (and
        with plain labels the children's statistics) for the master."""
        tree = self._tree["nodes"]
        c = tree.col
        nodes = msg["nodes"]
        feat = c["cand_feature"][nodes]
        thr = c["cand_threshold"][nodes]
        ml = c["cand_missing_left"][nodes]
        starts, ends = tree.bounds(nodes)
        X, cut, missing = (self.Xb, c["cand_bin"][nodes], MISSING_BIN) if self.Xb is not None \
            else (self.X, thr, np.nan)
        reply = {}
        numba_threads.for_work(int((ends - starts).sum()))
        if self.channel.child_stats:
            s = self.settings
            bits, reply["stats"] = partitioner.partition_stats(
                X, tree.rows, starts, ends, feat.astype(np.int64), cut, ml, missing, self._tree["ycls"],
                self._tree["yw"], s.is_classification, self.labels.n_stats)
        else:
            bits = partitioner.partition_bits(X, tree.rows, starts, ends, feat.astype(np.int64), cut, ml,
                                              missing)
        c["feature"][nodes] = feat
        c["threshold"][nodes] = thr
        c["missing_left"][nodes] = ml
        if "stats" in reply and self.labels.records_splits:
            self._tree.setdefault("won", []).append((np.asarray(nodes), reply["stats"]))
        reply["bits"] = pack_bits(bits)
        if self.settings.reveal_splits:
            reply.update(feature=feat, threshold=thr, missing_left=ml)
        return reply

    def apply_level(self, msg):
        tree = self._tree["nodes"]
        nodes = msg["split_nodes"]
        lefts, _ = tree.split(nodes, unpack_bits(msg["bits"], tree.n_rows(nodes)))
        self._tree["family"] = (nodes, lefts[0] if lefts.size else 0)
        self._tree["level"] += 1
        feature = tree.col["feature"]
        feature[nodes] = np.where(feature[nodes] == LEAF, NOT_OWNED, feature[nodes])
        self.channel.applied(self, nodes)

    #: whether a finished tree's arrays also hold ``leaf_of_row`` (the leaf of
    #: each row, -1 out of the bag): a single-process loop that needs the
    #: training rows' leaves takes them from the growth instead of a walk
    keep_leaf_rows = False

    def _finish(self):
        extra = self.channel.finish(self)
        if self.keep_leaf_rows:
            extra["leaf_of_row"] = self._tree["nodes"].leaf_of_rows(self.n_rows)
        t = self._tree["nodes"].trimmed(["left", "right", "feature", "threshold", "missing_left"])
        if self.labels.records_splits:   # what the algorithm keeps of the splits it won
            extra.update(self.labels.split_records(self._tree.get("won", ()), t["left"].shape[0], self.settings))
        self._current.finished = dict({"children_left": t["left"], "children_right": t["right"],
                                       "feature": t["feature"], "threshold": t["threshold"],
                                       "missing_left": t["missing_left"],
                                       "importance": np.asarray(self._tree["importance"], dtype=np.float64)},
                                      **extra)
        self._tree = None

    @property
    def _finished(self):
        return self._current.finished

    #: threads of this rank's homomorphic arithmetic (set by the party's role from its own
    #: settings); None: the kernel threads
    crypto_workers = None

    def crypto_threads(self):
        """Threads of this rank's homomorphic sums and decryptions: the other
        ranks wait for them, so the role gives them every core of the rank
        (``encrypt_workers``, else ``n_jobs`` counted as if alone on the host)."""
        return self.crypto_workers or numba_threads.threads()

    def timed(self, stage, seconds):
        """Add ``seconds`` to the time of ``stage`` (see :attr:`seconds`)."""
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds


def check_shape(left, right, n_rows, max_depth):
    """A tree's shape as the grower allocates node ids (children in (left,
    right) pairs of increasing ids, each node but the root some node's child),
    of at most ``2 n_rows - 1`` nodes and depth ``max_depth``: its child arrays (int32)."""
    ok = all(isinstance(a, np.ndarray) and a.dtype.kind == "i" and a.ndim == 1 for a in (left, right))
    n = left.shape[0] if ok else 0
    if not (ok and right.shape == (n,) and 1 <= n <= max(1, 2 * n_rows - 1)):
        raise bad_message(f"'shape_left' and 'shape_right' must be a tree's child ids (at most "
                          f"{2 * n_rows - 1} nodes), got {shown(left)} and {shown(right)}")
    left, right = left.astype(np.int32), right.astype(np.int32)
    inner = np.flatnonzero(left >= 0)
    leaf = left < 0
    children = left[inner]
    if not (np.all(right[leaf] == left[leaf]) and np.all(left[leaf] == -1)
            and np.all(right[inner] == children + 1) and np.array_equal(children, 1 + 2 * np.arange(inner.size))
            and np.all(children > inner) and 2 * inner.size + 1 == n):
        raise bad_message("'shape_left' and 'shape_right' are not a tree grown level by level")
    depth = np.zeros(n, dtype=np.int64)
    for i in inner.tolist():      # children come after their parents
        depth[left[i]] = depth[right[i]] = depth[i] + 1
    if depth.max() > max_depth:
        raise bad_message(f"the tree's shape is deeper than max_depth ({max_depth})")
    return left, right


class OwnSplits:
    """The label channel of a party that knows the labels in plaintext
    (``label_privacy = "plain"``): it scores its own columns and returns the
    best gain per node; the master compares the parties' gains and asks the
    winner to partition, which sends the children's statistics with the bits
    (the master then keeps no rows of its own).

    A channel's hooks (the encrypted modes' channels have the same):
    ``attach`` (once, when the splitter is made), ``begin`` (a tree's state),
    ``check_find``/``find``, ``check_partition``/``partition``,
    ``check_apply``/``applied`` (around a level's partition),
    ``check_finish``/``finish`` (extra arrays of a finished tree),
    ``committed`` (after a batch's commit) and ``handle_op`` for its
    ``extra_ops``."""

    tree_threads = True   # trees of a batch may be handled on parallel threads
    child_stats = True
    extra_ops = frozenset()
    # the keys of a level's partition (in an ``apply`` or with any tree message)
    apply_keys = ("split_nodes", "bits")
    # the keys a tree's message may hold besides "op", per op
    op_keys = {"find": ("nodes", "fmask", "stats"), "partition": ("nodes",), "finish": ("importance",),
               "apply": ()}

    def attach(self, sp):
        pass

    def begin(self, sp, msg):
        return sp.plain_tree(msg)

    def check_find(self, sp, msg):
        return sp.check_find(msg)

    def find(self, sp, msg):
        return sp.score(msg)

    def check_partition(self, sp, msg):
        return sp.check_partition(msg)

    def partition(self, sp, msg):
        return sp.partition(msg)

    def check_apply(self, sp, msg):
        pass

    def level_bits(self, sp, msg, nodes):
        """The level's partition bits (one per row of the split ``nodes``) of an apply message."""
        return msg["bits"]

    def applied(self, sp, nodes):
        pass

    def check_finish(self, sp, msg):
        pass

    def finish(self, sp):
        return {}

    def committed(self, sp):
        pass


class LocalParties(Parties):
    """Parties living in this process (the centralized estimator).  An
    exchange costs no round trip here, so a batch's trees need not keep in
    step: :meth:`TreeGrower.grow_batch_fused` lets each tree run all its
    rounds on a pool thread (``trees_apart``)."""

    trees_apart = True

    def __init__(self, splitters):
        self.splitters = splitters
        for sp in splitters:
            sp.checked = False      # their grower is this process: nothing to check

    def exchange(self, msgs):
        return [None if m is None else s.handle_batch(m) for s, m in zip(self.splitters, msgs)]

    def post(self, msgs):
        for s, m in zip(self.splitters, msgs):
            if m is not None:
                s.handle_batch(m)
