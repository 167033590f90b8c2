"""Level-wise tree growth shared by the centralized estimator and the federated forest.

Two roles exchange small dict messages of numpy arrays:

* :class:`TreeGrower` (the master) draws the bootstrap sample and the feature
  subsets, picks the winning party of every node, applies pre-pruning and
  stores the tree structure and leaf values;
* :class:`PartySplitter` (a party) owns a block of columns, finds its best split
  for every open node of a level and, for the nodes it wins, keeps the
  threshold and sends the left/right partition as a bitmap.

A level costs two exchanges: ``find`` (all parties report their best gain per
open node) and ``partition`` (only winners send row bitmaps); the master
passes the level's partition on to every party in an ``apply`` message as soon
as the winners' bitmaps are in (no reply: the parties reorder their rows while
the master does its own bookkeeping of the level).
Trees grow in batches (:meth:`TreeGrower.grow_batch`): one exchange carries the
``find`` (or ``partition``) messages of every tree of the batch, so a batch of
any size costs two exchanges per level plus one ``commit``.
The centralized estimator runs the same two roles in one process
(:class:`LocalParties`), so both give the same trees for the same seed.
"""
import copy
import numbers
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..transport.base import ProtocolError
from . import criterion, partitioner, splitter
from . import threads as numba_threads
from .format import LEAF, NO_CHILD, NOT_OWNED
from .binning import MISSING_BIN, fit_bins, transform_bins
from .importance import node_shares
from .impurity import NEWTON
from .labels import PlainLabels, class_weight_vector
from .params import CRITERION_CODE, resolve_count, resolve_max_features, resolve_max_samples

EPSILON = np.finfo(np.float64).eps
GROW = "grow"        # master -> party: the find/partition messages of several trees
COMMIT = "commit"    # master -> party: last partitions of a batch; store its trees
FUSED = "commit_grow"  # master -> party: the previous batch's commit, then this batch's first grow
APPLY = "apply"      # master -> party: the last level's partitions of several trees; no reply


class Posted:
    """What a tree's growth steps yield for a one-way message (per party, or
    None): the grower sends it on and goes on without waiting for a reply."""

    def __init__(self, msgs):
        self.msgs = msgs


def pack_batch(op, items):
    """One message holding the sub-messages ``items`` (``(tree, dict)`` pairs)
    as flat ``"<tree>.<key>"`` entries, plus the tree numbers."""
    msg = {"op": op, "trees": np.array([t for t, _ in items], dtype=np.int64)}
    for t, sub in items:
        for k, v in sub.items():
            msg[f"{t}.{k}"] = v
    return msg


def split_fused(replies, grow):
    """The replies to a :data:`FUSED` exchange: (the commit replies, the grow
    replies); a party that got no grow part answered the commit alone."""
    commits, grows = [], []
    for p, (reply, g) in enumerate(zip(replies, grow)):
        if g is None:
            commits.append(reply)
            grows.append(None)
            continue
        if not (isinstance(reply, dict) and isinstance(reply.get("commit"), dict)
                and isinstance(reply.get("grow"), dict)):
            raise ProtocolError(f"protocol error: party {p + 1} answered a commit and grow message "
                                "without its 'commit' and 'grow' parts")
        commits.append(reply["commit"])
        grows.append(reply["grow"])
    return commits, grows


def join_replies(replies):
    """One party's replies to the trees of a batch (in tree order) as one
    message: per key, the trees' arrays back to back along the first axis,
    and under ``"len.<key>"`` each tree's number of entries (0 when a tree's
    reply lacks the key)."""
    keys = []
    for reply in replies:
        keys += [k for k in reply if k not in keys]
    out = {}
    for k in keys:
        arrays = [np.asarray(r[k]) for r in replies if k in r]
        out[k] = np.concatenate(arrays)
        out["len." + k] = np.array([np.shape(r[k])[0] if k in r else 0 for r in replies], dtype=np.int64)
    return out


class TreeReply:
    """One tree's part of a party's batch reply: ``take(key, n)`` returns the
    tree's ``n`` entries of ``key`` and checks that the party sent exactly that many."""

    def __init__(self, parts, party):
        self.parts = parts
        self.party = party
        self.taken = set()

    def __contains__(self, key):
        return key in self.parts

    def take(self, key, n):
        arr = self.parts.get(key, np.empty(0))
        got = arr.shape[0]
        if got != n or key in self.taken:
            raise ValueError(f"party {self.party + 1} sent {got} {key!r} entries for a tree that "
                             f"expects {n}")
        self.taken.add(key)
        return arr

    def take_upto(self, key, n):
        """The tree's entries of ``key``, however many (at most ``n``)."""
        arr = self.parts.get(key, np.empty(0))
        if arr.shape[0] > n or key in self.taken:
            raise ValueError(f"party {self.party + 1} sent {arr.shape[0]} {key!r} entries for a tree "
                             f"that expects at most {n}")
        self.taken.add(key)
        return arr

    def check_used(self):
        for key, arr in self.parts.items():
            if key not in self.taken and arr.shape[0]:
                raise ValueError(f"party {self.party + 1} sent {key!r} entries no tree asked for")


class BatchReply:
    """A party's :func:`join_replies` message cut into the parts of the
    batch's trees (``trees``: the trees the party was asked about, in order)."""

    def __init__(self, msg, party, trees):
        self.party = party
        n = len(trees)
        cuts = {}
        for key, arr in msg.items():
            if key in ("op", "trees", "n_trees") or key.startswith("len."):
                continue
            if np.ndim(arr) < 1:
                raise ValueError(f"party {party + 1} sent {key!r} that is not an array of entries")
            lengths = np.asarray(msg.get("len." + key, ()), dtype=np.int64)
            if lengths.shape != (n,) or np.any(lengths < 0) or lengths.sum() != np.shape(arr)[0]:
                raise ValueError(f"party {party + 1} sent {key!r} entries that do not match the "
                                 f"batch's {n} trees")
            cuts[key] = (arr, np.concatenate(([0], np.cumsum(lengths))))
        self.tree_parts = {t: TreeReply({k: a[c[i]:c[i + 1]] for k, (a, c) in cuts.items()}, party)
                           for i, t in enumerate(trees)}

    def part(self, tree):
        return self.tree_parts[tree]

    def check_used(self):
        for part in self.tree_parts.values():
            part.check_used()


def unpack_batch(msg):
    """Inverse of :func:`pack_batch` (without ``op``): ``{tree: sub-message}``;
    ProtocolError for tree numbers that are not distinct and increasing, or
    a key that names no tree of the message."""
    trees = int_array(msg.get("trees"), "'trees'")
    if trees.size and (trees.min() < 0 or np.any(trees[1:] <= trees[:-1])):
        raise bad_message("'trees' must list distinct tree numbers in increasing order")
    out = {int(t): {} for t in trees}
    for key, v in msg.items():
        if key in ("op", "trees"):
            continue
        m = _TREE_KEY.fullmatch(key) if isinstance(key, str) else None
        if m is None or int(m.group(1)) not in out:
            raise bad_message(f"key {str(key)[:60]!r} names no tree of the message")
        out[int(m.group(1))][m.group(2)] = v
    return out


# -- checks of received messages (a party trusts no value it cannot check) ----
_TREE_KEY = re.compile(r"(0|[1-9][0-9]{0,8})\.([a-z_]{1,40})")
COUNT_DTYPES = (np.dtype(np.uint8), np.dtype(np.int32))   # bootstrap counts as the grower sends them
MASK_DTYPES = (np.dtype(np.uint8), np.dtype(np.bool_))


def bad_message(text):
    """The error of a message the protocol does not allow at this point."""
    return ProtocolError(f"protocol error: {text}")


def shown(value):
    """A short description of a received value, for error messages."""
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    return f"{type(value).__name__} {str(value)[:40]!r}"


def int_value(value, name, lo, hi):
    """``value`` as an int if it is an integer in ``[lo, hi]``, else ProtocolError naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or not lo <= value <= hi:
        raise bad_message(f"{name} must be an integer in [{lo}, {hi}], got {shown(value)}")
    return int(value)


def int_array(value, name, ndim=1):
    """``value`` if it is an integer array of ``ndim`` dimensions, else ProtocolError naming ``name``."""
    if not (isinstance(value, np.ndarray) and value.dtype.kind in "iu" and value.ndim == ndim):
        raise bad_message(f"{name} must be a {ndim}-D array of integers, got {shown(value)}")
    return value


def index_array(value, name, n):
    """A 1-D integer array whose values all lie in ``[0, n)``, as int64."""
    a = int_array(value, name)
    if a.size and (a.min() < 0 or a.max() >= n):
        raise bad_message(f"{name} holds values outside [0, {n})")
    return np.asarray(a, dtype=np.int64)


def sorted_subset(a, b):
    """Whether every value of ``a`` is in ``b`` (both sorted; far cheaper than
    ``np.isin`` on the small arrays of one level)."""
    if not a.size:
        return True
    at = np.searchsorted(b, a)
    return at[-1] < b.size and bool((b[at] == a).all())


def node_list(value, name, allowed):
    """Node ids drawn from ``allowed`` (a sorted array of distinct ids, or a
    ``range``), distinct and increasing, as int32."""
    a = int_array(value, name)
    if a.size:
        if (a[1:] <= a[:-1]).any():
            raise bad_message(f"{name} must list distinct nodes in increasing order")
        inside = (allowed.start <= a[0] and a[-1] < allowed.stop) if isinstance(allowed, range) \
            else sorted_subset(a, allowed)
        if not inside:
            raise bad_message(f"{name} names nodes that are not open leaves of the tree")
    return np.asarray(a, dtype=np.int32)


def check_fields(values, expected, what, skip=()):
    """ProtocolError naming the first field of the received table ``values``
    that differs from this party's own ``expected`` (same fields, same types,
    equal values; fields in ``skip`` are checked by the caller)."""
    if not isinstance(values, dict):
        raise bad_message(f"{what} must be a table, got {shown(values)}")
    if set(values) != set(expected):
        raise bad_message(f"{what} has the fields {sorted(map(str, values))}, expected {sorted(expected)}")
    for k, v in expected.items():
        got = values[k]
        if k not in skip and not (type(got) is type(v) and got == v):
            raise bad_message(f"{what} field {k!r} is {shown(got)}; this party's own settings give {v!r}")


HIST_CACHE_BYTES_PER_ROW = 2


def gain_scale(settings, total_w):
    """The ``w_total`` the split kernels divide gains by: the tree's total
    weight (scikit-learn's weighted impurity decrease), or 2 under the Newton
    criterion, whose gains are then XGBoost's loss reductions."""
    return 2.0 if settings.crit == NEWTON else float(total_w)


def min_leaf_weight(settings, total_w):
    """The least weight (hessian sum under the Newton criterion) of a child."""
    return max(settings.min_weight_fraction_leaf * float(total_w), settings.min_child_weight)


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
        self.reveal_splits = False  # winners also send feature and threshold to the master
        # histogram subtraction: a node of at least this many rows keeps its histograms for
        # its children, so the kept histograms of a level hold at most HIST_CACHE_BYTES_PER_ROW
        # per row
        n_stats = self.n_classes if self.is_classification else 3
        self.hist_cache_rows = cache_rows(params.max_features, n_features, n_stats)

    def to_dict(self):
        """Plain values, as the settings travel in a message."""
        return dict(vars(self))

    @classmethod
    def accept(cls, values, params, n_rows, is_classification, n_classes, n_features, reveal_splits):
        """A party's settings: its own, built from ``params`` and what it knows
        (``n_features``: its own columns; ``reveal_splits``: its own consent),
        once the master's ``values`` are found equal (ProtocolError naming the
        first field that differs).  Only ``hist_cache_rows`` depends on the
        other parties' columns: the master's value is taken when it is at least
        the bound this party's columns give (a larger one keeps fewer histograms)."""
        at_least = max(int(n_features), 1)
        if isinstance(params.max_features, numbers.Integral):
            at_least = max(at_least, int(params.max_features))   # the master has that many
        own = cls(params, n_rows, is_classification, n_classes, at_least)
        own.reveal_splits = bool(reveal_splits)
        check_fields(values, own.to_dict(), "'settings'", skip=("hist_cache_rows",))
        got = values["hist_cache_rows"]
        if isinstance(got, bool) or not isinstance(got, int) or not got >= own.hist_cache_rows:
            raise bad_message(f"'settings' field 'hist_cache_rows' is {shown(got)}; this party's "
                              f"columns need at least {own.hist_cache_rows}")
        # a node never holds more rows than there are: larger values all keep nothing
        own.hist_cache_rows = min(got, int(n_rows) + 1)
        return own


def cache_rows(max_features, n_features, n_stats):
    """The rows from which a node keeps its histograms (see :class:`SplitSettings`)."""
    k = resolve_max_features(max_features, max(int(n_features), 1))
    per_node = k * (MISSING_BIN + 1) * (8 * n_stats + 4)
    return -(-per_node // HIST_CACHE_BYTES_PER_ROW)


def _pack(bits):
    return np.packbits(bits) if bits.size else np.empty(0, dtype=np.uint8)


def _unpack(packed, n):
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


PARTY_COLUMNS = {"feature": (np.int32, LEAF), "threshold": (np.float64, np.nan),
                  "missing_left": (np.uint8, 0), "cand_feature": (np.int32, -1),
                  "cand_threshold": (np.float64, np.nan), "cand_missing_left": (np.uint8, 0),
                  "cand_bin": (np.int32, 0)}


class PartySplitter:
    """One party's side of tree growth over its own columns ``X`` (float64, NaN = missing).

    Every message is checked against what the party knows before a kernel
    sees it (the kernels do no bounds checks): node ids must be open leaves
    of the tree, arrays must have the party's row and column counts, and the
    messages of a tree must come in the order of growth
    (:class:`~fedforest.transport.base.ProtocolError` otherwise)."""

    tree_threads = True   # trees of a batch may be handled on parallel threads
    # the winner of a split sends its children's label statistics with the
    # partition bits (the master then keeps no rows of its own); parties
    # without plain labels do not
    child_stats = True
    checked = True        # check every message (off only where the grower is in this process)
    # the keys a tree's message may hold besides "op": per op, then those of a tree's
    # first message and of the partition of the last level (any op)
    op_keys = {"find": ("nodes", "fmask", "stats"), "partition": ("nodes",), "finish": ("importance",),
               "apply": ()}
    begin_keys = ("counts", "class_weight")
    apply_keys = ("split_nodes", "bits")

    def __init__(self, X, settings, labels):
        self.settings = settings
        self.labels = labels
        X = np.asarray(X, dtype=np.float64)
        self.n_rows, self.n_features = X.shape
        # what a job's party also checks (None: not checked): the in-bag draws every
        # tree's counts sum to, the largest count of one row, whether class weights apply
        self.count_total = None
        self.count_max = None
        self.class_weighted = None
        if settings.split_method == "hist":
            # one byte per value: the bin codes are all the growth needs
            # rows of weight zero take no part, not even in the bin edges
            sw = getattr(labels, "sample_weight", None)
            self.edges, self.n_bins = fit_bins(X if sw is None else X[sw > 0], settings.max_bins)
            self.Xb = transform_bins(X, self.edges, self.n_bins)
            self.X = None
        else:
            self.edges = self.n_bins = self.Xb = None
            # scikit-learn compares float32 feature values against float64 thresholds
            self.X = np.asfortranarray(X, dtype=np.float32)
        self.trees = []
        self.tree_ids = []
        self._current = threading.local()
        self._states = {}

    # -- message handling -------------------------------------------------
    # the tree being handled, per thread (trees of a batch may be handled in parallel)
    _tree = property(lambda self: getattr(self._current, "tree", None),
                     lambda self, tree: setattr(self._current, "tree", tree))

    def handle_batch(self, msg):
        """Process a :func:`pack_batch` message of several trees; returns the
        packed replies.  After a ``commit`` the batch's trees are in
        :attr:`trees` (numbers in :attr:`tree_ids`), in tree order.

        With more trees than kernel threads (and :attr:`tree_threads`), the
        trees are handled in blocks on that many threads, each running
        single-threaded kernels: a level of a large batch then costs no
        parallel launch per tree.  Replies are joined in tree order."""
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
        if self.tree_threads and n_threads > 1 and len(items) >= 2 * n_threads \
                and msg["op"] != COMMIT and numba_threads.concurrent_launches_ok():
            with ThreadPoolExecutor(n_threads, initializer=numba_threads.set_threads,
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
        return join_replies(replies)

    def _handle_tree(self, item):
        """One tree's message, on this thread: returns (its new state or, when it
        finished, its arrays; the reply)."""
        t, sub = item
        self._tree = self._states.pop(t, None)
        try:
            reply = self.handle(sub)
        except ProtocolError as exc:
            raise ProtocolError(f"{exc} (tree {t})") from None
        state = self._finished if sub["op"] == "finish" else self._tree
        self._tree = None
        return state, reply

    @classmethod
    def _allowed_keys(cls, op):
        """The keys a tree's ``op`` message may hold (built once per class and op)."""
        cache = cls.__dict__.get("_keys_of_op")
        if cache is None:
            cache = {}
            setattr(cls, "_keys_of_op", cache)
        if op not in cache:
            cache[op] = frozenset(cls.op_keys[op]) | frozenset(cls.begin_keys) | frozenset(cls.apply_keys) | {"op"}
        return cache[op]

    def handle(self, msg):
        """Process one message from the grower; returns the reply (or None)."""
        op = msg.get("op")
        if not self.checked:        # the grower runs in this process (the single-process estimators)
            if self._tree is None:
                self._begin(msg)
            if "split_nodes" in msg:
                self._apply(msg)
            if op == "find":
                return self._find(msg)
            if op == "partition":
                return self._partition(msg)
            if op == "apply":
                return None
            self._tree["importance"] = msg["importance"]
            self._finish()
            return None
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
        if any(k in msg for k in self.apply_keys) or op == "apply":
            self._apply_checked(msg)
        if op == "apply":
            return None
        if op == "find":
            return self._find(self._check_find(msg))
        if op == "partition":
            return self._partition(self._check_partition(msg))
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
        return {"counts": counts, "class_weight": cw}

    def _apply_checked(self, msg):
        """Apply the last level's partition (``split_nodes``, ``bits``) after
        checking it: open leaves this party may split (depth, row counts, its
        own partitioned nodes among them), one bit per row, and children of at
        least ``min_samples_leaf`` rows.  The children become the open leaves."""
        t = self._tree
        s = self.settings
        if any(k not in msg for k in self.apply_keys):
            raise bad_message("'split_nodes' and 'bits' travel together")
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
        bits = msg["bits"]
        if not (isinstance(bits, np.ndarray) and bits.dtype == np.uint8
                and bits.shape == ((n + 7) // 8,)):
            raise bad_message(f"'bits' must be {(n + 7) // 8} uint8 bytes (a bit for each of the {n} "
                              f"rows of the split nodes), got {shown(bits)}")
        mine = t["partitioned"]
        if mine is not None and not sorted_subset(mine, nodes):
            raise bad_message("'split_nodes' leaves out nodes this party partitioned")
        first = tree.n
        self._apply({"split_nodes": nodes, "bits": bits})
        children = np.arange(first, tree.n, dtype=np.int32)
        starts, ends = tree.bounds(children)
        if ((ends - starts) < s.min_samples_leaf).any():
            raise bad_message(f"'bits' leave a child of fewer than {s.min_samples_leaf} rows "
                              "(min_samples_leaf)")
        t.update(open=children, open_ids=range(first, tree.n), level=t["level"] + 1, searched=None,
                 partitioned=None)

    def _check_find(self, msg):
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

    def _check_partition(self, msg):
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

    def _begin(self, msg):
        counts = msg["counts"]
        ycls, yw = self._statistics(msg)
        total_w = float(yw[:, 0].sum())
        # histograms are derived by subtraction only where that is exact: integer
        # statistics (class counts under integer row weights) sum alike in any order
        exact = self.settings.is_classification and total_w < 2.0 ** 53 \
            and bool(np.all(yw == np.floor(yw)))
        self._tree = {"nodes": Nodes(counts, PARTY_COLUMNS), "ycls": ycls, "yw": yw,
                      "total_w": total_w, "subtract": exact, "hists": None, "family": None}

    def _statistics(self, msg):
        """Per-row statistics ``(ycls, yw)`` of a tree from its first message."""
        return self.labels.tree_stats(msg["counts"], msg["class_weight"])

    def _find(self, msg):
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
            if "stats" in msg else splitter.NO_NODE_STATS
        c = tree.col
        if s.split_method == "hist":
            sub = self._subtraction(nodes, starts, ends)
            gain, feat, b, ml, index, hist, cnt = splitter.best_splits_hist(self.Xb, self.n_bins,
                                                                           *args, *sub, *known)
            if t["subtract"]:
                kept = sub[-1].astype(bool)
                t["hists"] = (nodes[kept], index[kept], hist, cnt)
            thr = self.bin_threshold(feat, b)
            c["cand_bin"][nodes] = b
        else:
            gain, feat, thr, ml = splitter.best_splits_exact(self.X, *args, *known)
        c["cand_feature"][nodes] = feat
        c["cand_threshold"][nodes] = thr
        c["cand_missing_left"][nodes] = ml
        return {"gain": gain}

    def _subtraction(self, nodes, starts, ends):
        """The histogram subtraction arguments of :func:`splitter.best_splits_hist`:
        a node whose parent kept its histograms and whose sibling has fewer rows
        (the lower id on a tie) derives them as parent minus sibling; nodes of
        at least ``hist_cache_rows`` rows keep theirs for the next level."""
        t = self._tree
        none = splitter.no_subtraction(nodes.shape[0], self.labels.n_stats)
        if not t["subtract"]:
            return none
        keep = ((ends - starts) >= self.settings.hist_cache_rows).astype(np.uint8)
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

    def _partition(self, msg):
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
        if self.child_stats:
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
        reply["bits"] = _pack(bits)
        if self.settings.reveal_splits:
            reply.update(feature=feat, threshold=thr, missing_left=ml)
        return reply

    def _apply(self, msg):
        tree = self._tree["nodes"]
        nodes = msg["split_nodes"]
        lefts, _ = tree.split(nodes, _unpack(msg["bits"], tree.n_rows(nodes)))
        self._tree["family"] = (nodes, lefts[0] if lefts.size else 0)
        feature = tree.col["feature"]
        feature[nodes] = np.where(feature[nodes] == LEAF, NOT_OWNED, feature[nodes])

    def _finish(self):
        t = self._tree["nodes"].trimmed(["left", "right", "feature", "threshold", "missing_left"])
        self._current.finished = {"children_left": t["left"], "children_right": t["right"],
                                  "feature": t["feature"], "threshold": t["threshold"],
                                  "missing_left": t["missing_left"],
                                  "importance": np.asarray(self._tree["importance"], dtype=np.float64)}
        self._tree = None

    @property
    def _finished(self):
        return self._current.finished


class LocalParties:
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


class ForestTrees:
    """The decisions that make a tree a forest tree, from label statistics:
    which candidate nodes are searched (the impure ones), which best gains
    split, and the node values (class fractions or mean targets).  The grower
    holding the labels plugs it in (boosting trees: :class:`~fedforest.vertical.boosting.BoostTrees`)."""

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


class TreeGrower:
    """The master's side of tree growth.

    ``parties`` provides ``exchange(list_of_msgs) -> list_of_replies`` (one
    round; None: no message for that party); ``feature_counts`` gives
    each party's number of columns, in party order (the global feature order).
    """

    parallel_steps = True   # trees' steps of a batch may run on parallel threads
    # the children's label statistics come from the winners of their parents'
    # splits (PartySplitter.child_stats), checked against the parents'; the
    # master then keeps node sizes only, no rows
    stats_from_winners = True

    def _keeps_rows(self):
        """Whether the master keeps each tree's rows by node (its statistics or
        its leaves of every row need them)."""
        return not self.stats_from_winners

    kind_class = ForestTrees

    def __init__(self, parties, labels, params, settings, feature_counts, y_codes=None,
                 classes=None):
        self.kind = self.kind_class(settings)
        self.parties = parties
        self.labels = labels
        self.params = params
        self.s = settings
        self.feature_counts = list(feature_counts)
        self.offsets = np.concatenate(([0], np.cumsum(self.feature_counts)))
        self.n_features = int(self.offsets[-1])
        self.k_features = resolve_max_features(params.max_features, self.n_features)
        self.n_rows = labels.n_rows
        self.n_boot = resolve_max_samples(params.max_samples, self.n_rows)
        self.y_codes = y_codes
        self.classes = classes

    # -- random draws -----------------------------------------------------
    def _draw_counts(self, rng):
        if not self.params.bootstrap:
            sw = getattr(self.labels, "sample_weight", None)
            return np.ones(self.n_rows, dtype=np.uint8) if sw is None else (sw != 0).astype(np.uint8)
        idx = rng.integers(0, self.n_rows, self.n_boot)
        counts = np.bincount(idx, minlength=self.n_rows)
        sw = getattr(self.labels, "sample_weight", None)
        if sw is not None:
            counts[sw == 0] = 0   # rows of weight zero take no part, as in scikit-learn
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
    def grow(self, seed):
        """Grow one tree; returns the master's tree (structure, owners, leaf values)."""
        return self.grow_batch([seed])[0][0]

    def grow_forest(self, seeds, tree_batch=None):
        """Grow every tree of ``seeds`` in batches of ``tree_batch`` (None: all at once)."""
        batch = len(seeds) if tree_batch is None else max(1, int(tree_batch))
        out = []
        for b0 in range(0, len(seeds), batch):
            out += self.grow_batch(seeds[b0:b0 + batch], first=b0)[0]
        return out

    def grow_batch(self, seeds, first=0, labels=None):
        """:meth:`grow_batch_fused` with its own commit exchange: returns the
        master's trees and the parties' replies to the commit."""
        trees, commit = self.grow_batch_fused(seeds, first, labels)
        return trees, self.parties.exchange(commit)

    def grow_batch_fused(self, seeds, first=0, labels=None, carry=None, on_carried=None):
        """Grow one tree per seed together, level by level: every round carries
        the messages of every tree of the batch (one ``find`` and one
        ``partition`` exchange per level for the whole batch), and a last
        ``commit`` round hands each party the final partitions.  Tree ``first + i``
        draws from ``seeds[i]`` alone, so the trees do not depend on the batching.
        ``labels`` (optional): one label-statistics object per tree, in place
        of the grower's (the trees of a boosting round).  ``carry``: the
        previous batch's commit messages (one per party), sent with this
        batch's first exchange (one round fewer per batch); ``on_carried``
        receives the parties' replies to it as soon as they arrive (so the
        previous batch is counted before this one goes on).
        Returns the master's trees and this batch's commit messages (not sent)."""
        n_parties = len(self.feature_counts)
        runs, asks, trees, finish = {}, {}, {}, {}
        for i, seed in enumerate(seeds):
            # each tree grows on a shallow copy holding that tree's state
            run = copy.copy(self)
            if labels is not None:
                run.labels = labels[i]
            runs[first + i] = run._steps(seed)

        def advance(t, replies):
            try:
                asks[t] = runs[t].send(replies)
            except StopIteration as stop:
                trees[t], finish[t] = stop.value

        # many small per-tree steps run faster as tree blocks on threads running
        # single-threaded kernels (they release the GIL) than as parallel launches
        threads = numba_threads.threads()
        pool = None
        if self.parallel_steps and len(runs) >= 2 * threads and threads > 1 \
                and numba_threads.concurrent_launches_ok():
            pool = ThreadPoolExecutor(threads, initializer=numba_threads.set_threads, initargs=(1,))

        def advance_all(items):
            if pool is not None:
                for _ in pool.map(lambda item: advance(*item), items):
                    pass
                return
            # without a pool, many trees' small steps still run best on one kernel thread each
            numba_threads.set_threads(1 if len(runs) >= 2 * threads else threads)
            try:
                for item in items:
                    advance(*item)
            finally:
                numba_threads.set_threads(threads)

        try:
            if pool is not None and getattr(self.parties, "trees_apart", False):
                self._grow_apart(runs, trees, finish, pool, n_parties)
                carried = None
            else:
                carried = self._grow_rounds(runs, asks, advance_all, n_parties, carry, on_carried)
        finally:
            if pool is not None:
                pool.shutdown()
        if carry is not None and carried is None:   # no grow exchange carried it
            carried = self.parties.exchange(carry)
            if on_carried is not None:
                on_carried(carried)
        order = sorted(trees)
        commit = [pack_batch(COMMIT, [(t, dict(finish[t][p], op="finish")) for t in order])
                  for p in range(n_parties)]
        return [trees[t] for t in order], commit

    def _grow_rounds(self, runs, asks, advance_all, n_parties, carry=None, on_carried=None):
        """Start every tree's steps, then exchange rounds until all trees are
        done; ``carry`` (commit messages) goes with the first exchange.
        Returns the replies to ``carry`` (None when there was no exchange)."""
        advance_all([(t, None) for t in runs])
        carried = None
        while asks:
            current, asks_now = sorted(asks), dict(asks)
            asks.clear()
            msgs = [pack_batch(GROW, [(t, asks_now[t][p]) for t in current
                                      if asks_now[t][p] is not None]) for p in range(n_parties)]
            grow = [m if len(m) > 2 else None for m in msgs]
            if carry is None:
                replies = self.parties.exchange(grow)
            else:
                sent = [c if g is None else {"op": FUSED, "commit": c, "grow": g} for c, g in zip(carry, grow)]
                carried, replies = split_fused(self.parties.exchange(sent), grow)
                carry = None
                if on_carried is not None:
                    on_carried(carried)
            views = [None if r is None else
                     BatchReply(r, p, [t for t in current if asks_now[t][p] is not None])
                     for p, r in enumerate(replies)]
            advance_all([(t, [views[p].part(t) if asks_now[t][p] is not None else None
                              for p in range(n_parties)]) for t in current])
            posted = sorted(t for t, ask in asks.items() if isinstance(ask, Posted))
            if posted:
                # one-way messages (the level's partitions) go out at once, then those trees go on
                out = {t: asks.pop(t).msgs for t in posted}
                msgs = [pack_batch(APPLY, [(t, out[t][p]) for t in posted if out[t][p] is not None])
                        for p in range(n_parties)]
                self.parties.post([m if len(m) > 2 else None for m in msgs])
                advance_all([(t, None) for t in posted])
            for v in views:
                if v is not None:
                    v.check_used()
        return carried

    def _grow_apart(self, runs, trees, finish, pool, n_parties):
        """In-process parties: every tree runs all its rounds on a pool thread,
        its master steps and its parties' work one after the other, so one
        tree's Python steps overlap another's kernels (which release the GIL)
        instead of every level waiting for the whole batch.  Each tree sees
        the same messages as in :meth:`_grow_rounds`: the same trees."""
        def run(t):
            steps, replies = runs[t], None
            while True:
                try:
                    ask = steps.send(replies)
                    while isinstance(ask, Posted):
                        self.parties.post([None if m is None else pack_batch(APPLY, [(t, m)])
                                           for m in ask.msgs])
                        ask = steps.send(None)
                except StopIteration as stop:
                    trees[t], finish[t] = stop.value
                    ask = None
                for r in replies or ():
                    if r is not None:
                        r.check_used()
                if ask is None:
                    return
                got = self.parties.exchange([None if ask[p] is None else pack_batch(GROW, [(t, ask[p])])
                                             for p in range(n_parties)])
                replies = [None if ask[p] is None else BatchReply(got[p], p, [t]).part(t)
                           for p in range(n_parties)]

        for _ in pool.map(run, sorted(runs)):
            pass

    def _steps(self, seed):
        """One tree's growth as a generator: it yields the per-party messages of
        each exchange and receives the replies; returns the master's tree and
        what each party still has to apply."""
        rng = np.random.default_rng(seed)
        counts = self._draw_counts(rng)
        cw = (class_weight_vector(self.params.class_weight, self.y_codes, counts,
                                  self.labels.n_classes, self.classes)
              if self.labels.is_classification else np.empty(0))
        tree_mask = self._draw_features(rng) if self.params.feature_sampling == "tree" else None
        tree = Nodes(counts, {
            "owner": (np.int32, -1), "depth": (np.int64, 0),
            "stats": (np.float64, 0.0, self.labels.n_stats),
            "weight": (np.float64, 0.0), "impurity": (np.float64, 0.0), "count": (np.int64, 0),
            "feature": (np.int32, LEAF), "threshold": (np.float64, np.nan),
            "missing_left": (np.uint8, 0)}, keep_rows=self._keeps_rows())
        self._tree_counts = counts
        self._child_stats = None
        self._begin_tree(tree, counts, cw)
        n_parties = len(self.feature_counts)
        children = np.zeros(1, dtype=np.int32)
        pending = [self._begin_message(counts, cw, p) for p in range(n_parties)]
        while True:
            tree.col["count"][children] = np.diff(np.vstack(tree.bounds(children)), axis=0)[0]
            cand = children[self._may_split(tree, children)]
            # the feature draws depend only on label-free facts, so every label mode draws alike
            masks = self._masks(rng, tree_mask, cand.size) if cand.size else None
            split_nodes, winner, pending, replies = yield from self._choose(tree, children, cand, masks,
                                                                            pending)
            if not split_nodes.size:
                break
            won = [np.flatnonzero(winner == p) for p in range(n_parties)]  # positions in split_nodes
            # winners whose bits did not come with the choice are asked for them
            msgs = [self._partition_msg(p, split_nodes, won[p]) if won[p].size and replies[p] is None
                    else None for p in range(n_parties)]
            if any(m is not None for m in msgs):
                got = yield msgs
                replies = [r if m is None else g for r, m, g in zip(replies, msgs, got)]
            packed, n_left = self._collect_bits(tree, split_nodes, won, replies)
            # every party reorders its rows by the level's partition now, while the
            # master goes on with its own steps
            yield Posted([{"op": "apply", "split_nodes": split_nodes, "bits": packed}
                          for _ in range(n_parties)])
            if self.stats_from_winners:
                self._child_stats = self._take_child_stats(tree, split_nodes, won, replies)
            all_bits = None if tree.rows is None else _unpack(packed, tree.n_rows(split_nodes))
            lefts, rights = tree.split(split_nodes, all_bits, n_left)
            self._after_split(split_nodes, lefts, rights)
            children = np.empty(2 * lefts.size, dtype=np.int32)
            children[0::2] = lefts
            children[1::2] = rights
            tree.col["depth"][children] = np.repeat(tree.col["depth"][split_nodes] + 1, 2)
            pending = [{} for _ in range(n_parties)]
        master = self._master_tree(tree)
        for p in range(n_parties):
            pending[p]["importance"] = self._importance(master, p)
        return master, pending

    def _choose(self, tree, children, cand, masks, pending):
        """The splits of a level (a generator of exchanges): returns (the nodes
        that split, the winning party index of each, what is still pending per
        party, per party the reply that already holds its partition bits or
        None).  Here the master chooses: every party reports its best gain per
        searched node (``find``) and the largest gain wins."""
        n_parties = len(self.feature_counts)
        none = [None] * n_parties
        nodes, gains, pending = yield from self._search(tree, children, cand, masks, pending)
        if not nodes.size:
            return nodes, None, pending, none
        winner = np.argmax(gains, axis=0)           # first maximum: lowest party wins ties
        best = gains[winner, np.arange(nodes.size)]
        do_split = self._takes(best)
        return nodes[do_split], winner[do_split], pending, none

    def _importance(self, master, p):
        """What party ``p`` learns of the tree for its importances: the share of
        the tree's impurity decrease of every split it owns."""
        return np.where(master["owner"] == p, node_shares(master), 0.0)

    # -- hooks of a label mode --------------------------------------------
    def _begin_tree(self, tree, counts, cw):
        self._ycls, self._yw = self.labels.tree_stats(counts, cw)

    def _search(self, tree, children, cand, masks, pending):
        """Record the children's statistics, find the best split of every open
        candidate (a generator: yields the ``find`` messages, receives the
        replies).  Returns (searched nodes, gains (n_parties, nodes), what is
        still pending per party for the next message)."""
        self._record_stats(tree, children)
        keep = self._searchable(tree, cand)
        nodes = cand[keep]
        if not nodes.size:
            return nodes, None, pending
        extra = {"stats": tree.col["stats"][nodes]} if self.stats_from_winners else {}
        msgs = [dict(pending[p], op="find", nodes=nodes, fmask=masks[p][keep], **extra)
                for p in range(len(self.feature_counts))]
        replies = yield msgs
        return nodes, np.vstack([r.take("gain", nodes.size) for r in replies]), [{} for _ in msgs]

    def _partition_msg(self, p, split_nodes, won):
        return {"op": "partition", "nodes": split_nodes[won]}

    def _after_split(self, split_nodes, lefts, rights):
        pass

    # -- the kind of tree (a component: forest trees here, boosting trees in vertical.boosting)
    def _begin_message(self, counts, cw, party):
        """What party ``party`` (index) needs to begin a tree: its draws and class weights."""
        return {"counts": counts, "class_weight": cw}

    def _searchable(self, tree, cand):
        return self.kind.searchable(tree.col["impurity"][cand])

    def _takes(self, best):
        return self.kind.takes(best)

    def _leaf_values(self, stats, weight):
        return self.kind.leaf_values(stats, weight)

    # -- shared steps -----------------------------------------------------
    def _may_split(self, tree, nodes):
        """Nodes that may split as far as depth and row counts tell (no labels needed)."""
        c = tree.col
        s = self.s
        cnt = c["count"][nodes]
        return ~((c["depth"][nodes] >= s.max_depth) | (cnt < s.min_samples_split)
                 | (cnt < 2 * s.min_samples_leaf))

    def _collect_bits(self, tree, split_nodes, won, replies):
        """The winners' partition bits placed at their nodes' places in one
        packed bitmap of the level; returns it and each split node's number of
        left rows (the 1 bits of its segment)."""
        starts, ends = tree.bounds(split_nodes)
        lengths = ends - starts
        offsets = np.cumsum(lengths) - lengths
        packed = np.zeros((int(lengths.sum()) + 7) // 8, dtype=np.uint8)
        n_left = np.empty(split_nodes.size, dtype=np.int64)
        c = tree.col
        for p in range(len(won)):
            if not won[p].size:
                continue
            mine = split_nodes[won[p]]
            own_len = lengths[won[p]]
            total = int(own_len.sum())
            rep = replies[p]
            # this party's bits hold its nodes back to back; a padding bit must be 0
            src = rep.take("bits", (total + 7) // 8)
            if total % 8 and src[-1] & (0xFF >> (total % 8)):
                raise ValueError(f"party {p + 1} sent partition bits beyond its rows")
            n_left[won[p]] = partitioner.place_bits(src, own_len, offsets[won[p]], packed)
            c["owner"][mine] = p
            if "feature" in rep:
                c["feature"][mine] = rep.take("feature", mine.size) + int(self.offsets[p])
                c["threshold"][mine] = rep.take("threshold", mine.size)
                c["missing_left"][mine] = rep.take("missing_left", mine.size)
        return packed, n_left

    def _record_stats(self, tree, nodes):
        """Label statistics of new nodes: the root's from the labels held here,
        children's from the winners' replies when they sent them."""
        s = self.s
        if self._child_stats is not None:
            stats, self._child_stats = self._child_stats, None
            w, imp = criterion.stats_weight_impurity(stats, s.is_classification, s.crit, s.reg_lambda)
        else:
            rows = tree.rows if tree.rows is not None else np.flatnonzero(self._tree_counts).astype(np.int32)
            stats, w, imp, _ = criterion.node_statistics(rows, *tree.bounds(nodes), self._ycls, self._yw,
                                                         s.is_classification, self.labels.n_stats,
                                                         s.crit, s.reg_lambda)
        self._set_stats(tree, nodes, stats, w, imp)

    def _take_child_stats(self, tree, split_nodes, won, replies):
        """The children's statistics the winners sent, in child order (left,
        right per split node); each pair must add up to its parent's."""
        S = self.labels.n_stats
        stats = np.empty((2 * split_nodes.size, S))
        for p in range(len(won)):
            if not won[p].size:
                continue
            got = replies[p].take("stats", 2 * won[p].size)
            if not (got.dtype == np.float64 and got.shape == (2 * won[p].size, S)
                    and np.all(np.isfinite(got))):
                raise ValueError(f"party {p + 1} sent 'stats' that are not {2 * won[p].size} rows of "
                                 f"{S} finite float64 values")
            at = np.repeat(2 * won[p], 2)
            at[1::2] += 1
            stats[at] = got
        parent = tree.col["stats"][split_nodes]
        total = stats[0::2] + stats[1::2]
        scale = np.abs(stats[0::2]) + np.abs(stats[1::2])
        weights = stats if self.s.is_classification else stats[:, :1]
        if np.any(np.abs(total - parent) > 1e-9 * scale + 1e-12) or np.any(weights < 0):
            raise ValueError("the children's statistics the winners sent do not add up to their parents'")
        return stats

    @staticmethod
    def _set_stats(tree, nodes, stats, w, imp):
        c = tree.col
        c["stats"][nodes] = stats
        c["weight"][nodes] = w
        c["impurity"][nodes] = imp

    def _master_tree(self, tree):
        t = tree.trimmed(["left", "right", "owner", "stats", "weight", "impurity", "count",
                          "feature", "threshold", "missing_left"])
        weight = t["weight"]
        value = self._leaf_values(t["stats"], weight)
        out = {
            "children_left": t["left"], "children_right": t["right"], "owner": t["owner"],
            "value": value, "impurity": t["impurity"], "n_node_samples": t["count"],
            "weighted_n_node_samples": weight,
        }
        if self.s.reveal_splits:
            out.update(feature=t["feature"], threshold=t["threshold"], missing_left=t["missing_left"])
        return out


_WARM = set()


def warm_up(split_method, is_classification=True):
    """Load (or compile) the growth kernels for this process on a tiny problem,
    so the first real tree does not pay for it (once per process and kind)."""
    if (split_method, bool(is_classification)) in _WARM:
        return
    from .params import ForestParams, validate
    task = "classification" if is_classification else "regression"
    params = validate(ForestParams(n_estimators=1, split_method=split_method, max_features=None,
                                   bootstrap=False), task)
    X = np.array([[0.0, 1.0], [1.0, np.nan], [2.0, 0.0], [3.0, 1.0]])
    y = np.array([0, 0, 1, 1]) if is_classification else np.array([0.0, 0.5, 1.0, 2.0])
    labels = PlainLabels(y, is_classification, 2 if is_classification else 1)
    settings = SplitSettings(params, 4, is_classification, labels.n_classes, 2)
    splitter = PartySplitter(X, settings, labels)
    TreeGrower(LocalParties([splitter]), labels, params, settings, [2],
               y_codes=labels.y if is_classification else None, classes=np.arange(2)).grow(0)
    _WARM.add((split_method, bool(is_classification)))


def tree_seeds(random_state, n_estimators):
    """One independent seed per tree, so tree ``t`` is the same whether or not
    trees before it were grown in this run (training resumes exactly)."""
    return np.random.SeedSequence(random_state).spawn(n_estimators)


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


def tree_state_bytes(n_rows, n_stats, label_privacy="plain", key_length=None):
    """Bytes one growing tree holds on the busiest rank (the row index, the
    bootstrap counts, the per-row label statistics, the partition scratch, two
    levels of kept histograms and, with encrypted labels, the powers of the
    ciphertexts of rows drawn more than once, about a quarter of them)."""
    per_row = 4 + 4 + 4 + 8 * n_stats + 2 * HIST_CACHE_BYTES_PER_ROW
    if label_privacy == "paillier":
        per_row += 8 + (2 * int(key_length or 2048) // 8 + 64) // 4
    return int(n_rows) * per_row + 64 * 1024


# seconds per row x feature x level of one tree on the busiest party, on the
# slow side of what the kernels take (plain statistics), and per encrypted
# row x feature x level with a 2048-bit key (cost grows with the square of the key)
PLAIN_SECONDS_PER_CELL = 20e-9
PAILLIER_SECONDS_PER_CELL = 4e-6


def estimated_tree_seconds(n_rows, max_party_features, max_depth, key_length=None):
    """A conservative guess of one tree's growth time, before any is grown."""
    levels = max(1, int(np.ceil(np.log2(max(int(n_rows), 2)))))
    if max_depth is not None:
        levels = min(levels, int(max_depth))
    cells = float(n_rows) * max(int(max_party_features), 1) * levels
    if key_length is None:
        return cells * PLAIN_SECONDS_PER_CELL
    return cells * PAILLIER_SECONDS_PER_CELL * (int(key_length) / 2048.0) ** 2


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
