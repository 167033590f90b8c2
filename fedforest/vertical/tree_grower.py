"""The master's side of vertical tree growth (:class:`TreeGrower`).

A level costs two exchanges: ``find`` (all parties report their best gain per
open node) and ``partition`` (only winners send row bitmaps); the master
passes the level's partition on to every party in an ``apply`` message as soon
as the winners' bitmaps are in (no reply: the parties reorder their rows while
the master does its own bookkeeping of the level).
Trees grow in batches (:meth:`TreeGrower.grow_batch`): one exchange carries the
``find`` (or ``partition``) messages of every tree of the batch, so a batch of
any size costs two exchanges per level plus one ``commit``.
How splits are chosen is the grower's label channel (:meth:`TreeGrower._choose`):
here the master, which holds the labels in the clear; with Paillier the label
holder (:class:`~fedforest.vertical.paillier.relay.LabelHolderChooses`).
The centralized estimator runs the same two roles in one process
(:class:`~fedforest.vertical.party_splitter.LocalParties`), so both give the
same trees for the same seed."""
import abc
import copy
import types
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import InputError
from ..tree import criterion, partitioner
from ..tree import threads as numba_threads
from ..tree.format import LEAF
from ..tree.importance import node_shares
from ..tree.labels import PlainLabels, class_weight_vector
from ..tree.params import resolve_max_features, resolve_max_samples
from ..tree.growth import (ForestTrees, HIST_CACHE_BYTES_PER_ROW, Nodes, SplitSettings, bootstrap_counts, may_split,
                           tree_rng, unpack_bits)
from .messages import APPLY, BatchReply, COMMIT, FUSED, GROW, Posted, pack_batch, split_fused
from .party_splitter import LocalParties, PartySplitter


class ChannelState(types.SimpleNamespace):
    """A label channel's state of one tree, made by its ``begin_tree`` and
    kept by the grower's per-tree copy (``g.channel_state``)."""


class LabelChannel(abc.ABC):
    """How the master's grower learns a level's splits and passes its
    partition on (the grower's ``channel``): :class:`MasterChooses` with plain
    labels, :class:`~fedforest.vertical.paillier.relay.LabelHolderChooses`
    where the label holder decides.  A channel keeps a tree's state on the
    grower's per-tree copy ``g`` it is handed; the hooks without a body here
    have the defaults below."""

    parallel_steps = True   # trees' steps of a batch may run on parallel threads
    label_party = None      # the label holder's party index where its first message differs

    def keeps_rows(self, g):
        """Whether the master keeps each tree's rows by node."""
        return False

    def begin_tree(self, g, tree, counts, cw):
        """A tree begins: the channel's state of it (a :class:`ChannelState`,
        which the grower keeps as ``g.channel_state``)."""
        return ChannelState()

    @abc.abstractmethod
    def choose(self, g, tree, children, cand, masks, pending):
        """The splits of a level (a generator of exchanges): returns (the nodes
        that split, the winning party of each, what is still pending per
        party, per party the reply that already holds its partition or None)."""

    @abc.abstractmethod
    def partition_msg(self, g, p, split_nodes, won, replies, child_masks):
        """The ``partition`` message of party ``p``, a winner whose partition did not come with the choice."""

    @abc.abstractmethod
    def level_partition(self, g, tree, split_nodes, won, replies):
        """Each party's ``apply`` message of the level (None: it applied the
        level itself), each split's number of left rows and, where the master
        keeps rows, every row's bit."""

    def partitioned(self, g, tree, split_nodes, won, replies):
        """The level's partition went out."""

    def after_split(self, g, split_nodes, lefts, rights):
        """The level's children exist."""

    @abc.abstractmethod
    def master_tree(self, g, tree):
        """The master's finished tree."""

    @abc.abstractmethod
    def importance(self, g, master, p):
        """What party ``p`` stores of the tree for its importances."""


class MasterChooses(LabelChannel):
    """The plain label channel: the master holds the labels' statistics and
    chooses every split.  Every party reports its best gain per searched node
    (``find``) and the largest gain wins; the winners send their partition
    bits with the children's label statistics, checked against the
    parents' (the master keeps node sizes, no rows)."""

    def begin_tree(self, g, tree, counts, cw):
        ycls, yw = g.labels.tree_stats(counts, cw)
        return ChannelState(ycls=ycls, yw=yw, child_stats=None)

    def choose(self, g, tree, children, cand, masks, pending):
        """The splits of a level (a generator of exchanges): returns (the nodes
        that split, the winning party index of each, what is still pending per
        party, per party the reply that already holds its partition bits or
        None)."""
        n_parties = len(g.feature_counts)
        none = [None] * n_parties
        nodes, gains, pending = yield from self.search(g, tree, children, cand, masks, pending)
        if not nodes.size:
            return nodes, None, pending, none
        winner = np.argmax(gains, axis=0)           # first maximum: lowest party wins ties
        best = gains[winner, np.arange(nodes.size)]
        do_split = g.takes(best)
        return nodes[do_split], winner[do_split], pending, none

    def importance(self, g, master, p):
        """What party ``p`` learns of the tree for its importances: the share of
        the tree's impurity decrease of every split it owns."""
        return np.where(master["owner"] == p, node_shares(master), 0.0)

    def search(self, g, tree, children, cand, masks, pending):
        """Record the children's statistics, find the best split of every open
        candidate (a generator: yields the ``find`` messages, receives the
        replies).  Returns (searched nodes, gains (n_parties, nodes), what is
        still pending per party for the next message)."""
        self.record_stats(g, tree, children)
        keep = g.searchable(tree, cand)
        nodes = cand[keep]
        if not nodes.size:
            return nodes, None, pending
        # a party that takes no part in the tree (label_holder_first_trees) is asked nothing
        msgs = [None if p in g.absent else
                dict(pending[p], op="find", nodes=nodes, fmask=masks[p][keep], stats=tree.col["stats"][nodes])
                for p in range(len(g.feature_counts))]
        replies = yield msgs
        return nodes, np.vstack([np.full(nodes.size, -np.inf) if r is None else r.take("gain", nodes.size)
                                 for r in replies]), [{} for _ in msgs]

    def partition_msg(self, g, p, split_nodes, won, replies, child_masks):
        return {"op": "partition", "nodes": split_nodes[won[p]]}

    def level_partition(self, g, tree, split_nodes, won, replies):
        """The level's ``apply`` message for every party (the winners' bits
        in one packed bitmap), each split's number of left rows and, where the
        master keeps the rows, every row's bit."""
        packed, n_left = g.collect_bits(tree, split_nodes, won, replies)
        all_bits = None if tree.rows is None else unpack_bits(packed, tree.n_rows(split_nodes))
        msg = {"op": "apply", "split_nodes": split_nodes, "bits": packed}
        return [None if p in g.absent else msg for p in range(len(won))], n_left, all_bits

    def partitioned(self, g, tree, split_nodes, won, replies):
        g.channel_state.child_stats = self.take_child_stats(g, tree, split_nodes, won, replies)

    def record_stats(self, g, tree, nodes):
        """Label statistics of new nodes: the root's from the labels held here,
        children's from the winners' replies when they sent them."""
        s = g.s
        if g.channel_state.child_stats is not None:
            stats, g.channel_state.child_stats = g.channel_state.child_stats, None
            w, imp = criterion.stats_weight_impurity(stats, s.is_classification, s.crit, s.reg_lambda)
        else:
            rows = tree.rows if tree.rows is not None else np.flatnonzero(g.tree_counts).astype(np.int32)
            numba_threads.for_work(rows.shape[0])
            st = g.channel_state
            stats, w, imp, _ = criterion.node_statistics(rows, *tree.bounds(nodes), st.ycls, st.yw,
                                                         s.is_classification, g.labels.n_stats,
                                                         s.crit, s.reg_lambda)
        self.set_stats(tree, nodes, stats, w, imp)

    def take_child_stats(self, g, tree, split_nodes, won, replies):
        """The children's statistics the winners sent, in child order (left,
        right per split node); each pair must add up to its parent's."""
        S = g.labels.n_stats
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
        weights = stats if g.s.is_classification else stats[:, :1]
        if np.any(np.abs(total - parent) > 1e-9 * scale + 1e-12) or np.any(weights < 0):
            raise ValueError("the children's statistics the winners sent do not add up to their parents'")
        return stats

    @staticmethod
    def set_stats(tree, nodes, stats, w, imp):
        c = tree.col
        c["stats"][nodes] = stats
        c["weight"][nodes] = w
        c["impurity"][nodes] = imp

    def master_tree(self, g, tree):
        t = tree.trimmed(["left", "right", "owner", "stats", "weight", "impurity", "count",
                          "feature", "threshold", "missing_left"])
        weight = t["weight"]
        value = g.leaf_values(t["stats"], weight)
        out = {
            "children_left": t["left"], "children_right": t["right"], "owner": t["owner"],
            "value": value, "impurity": t["impurity"], "n_node_samples": t["count"],
            "weighted_n_node_samples": weight,
        }
        if g.s.reveal_splits:
            out.update(feature=t["feature"], threshold=t["threshold"], missing_left=t["missing_left"])
        return out


def check_label_holder_first(n_trees, feature_counts, party):
    """``label_holder_first_trees`` needs columns at the label holder (party index ``party``)."""
    if n_trees and feature_counts[party] == 0:
        raise InputError("label_holder_first_trees", f"party {party + 1}, which holds the labels, holds no "
                                                     "feature column to split on")


class TreeGrower:
    """The master's side of tree growth.

    ``parties`` provides ``exchange(list_of_msgs) -> list_of_replies`` (one
    round; None: no message for that party); ``feature_counts`` gives
    each party's number of columns, in party order (the global feature order).
    Two components are plugged in: the tree kind (``kind_class``: forest or
    boosting trees) and the label channel (``channel``: who chooses the splits).
    """

    @property
    def parallel_steps(self):
        """Whether the trees' steps of a batch may run on parallel threads."""
        return self.channel.parallel_steps

    def _keeps_rows(self):
        """Whether the master keeps each tree's rows by node."""
        return self.channel.keeps_rows(self)

    kind_class = ForestTrees
    # label_holder_first_trees: trees below ``solo_trees`` split on the columns of party index
    # ``solo_party`` (the label holder) alone, and the other parties take no part in them
    # (``absent``, set on a tree's copy): they get no message of the tree but its shape at the commit
    solo_trees = 0
    solo_party = None
    absent = frozenset()

    def __init__(self, parties, labels, params, settings, feature_counts, y_codes=None,
                 classes=None, channel=None):
        self.kind = self.kind_class(settings)
        # how a level's splits are chosen: by the master from the parties' gains (plain
        # labels), or by the label holder (paillier.relay.LabelHolderChooses)
        self.channel = channel or MasterChooses()
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

    def label_holder_first(self, n_trees, party):
        """The first ``n_trees`` trees split on party index ``party``'s columns
        alone; no other party takes part in them (``label_holder_first_trees``)."""
        check_label_holder_first(n_trees, self.feature_counts, party)
        self.solo_trees, self.solo_party = int(n_trees), int(party)

    def _feature_range(self):
        """The columns a tree draws its features from: ``(first, end, how many)``."""
        if self.absent:
            lo, hi = (int(x) for x in self.offsets[self.solo_party:self.solo_party + 2])
            return lo, hi, resolve_max_features(self.params.max_features, hi - lo)
        return 0, self.n_features, self.k_features

    # -- random draws -----------------------------------------------------
    def _draw_counts(self, rng):
        # the very draw every party of a job recomputes to check the tree's counts
        return bootstrap_counts(rng, self.n_rows, self.n_boot, self.labels.sample_weight,
                                self.params.bootstrap)

    def _draw_features(self, rng):
        lo, hi, k = self._feature_range()
        mask = np.zeros(self.n_features, dtype=np.uint8)
        mask[lo + rng.choice(hi - lo, k, replace=False)] = 1
        return mask

    def _masks(self, rng, tree_mask, n_nodes):
        """Per-party (n_nodes, n_party_features) masks for one level."""
        if self.params.feature_sampling == "tree":
            full = np.broadcast_to(tree_mask, (n_nodes, self.n_features))
        else:
            # an independent uniform k-subset per node: the k smallest of uniform keys
            lo, hi, k = self._feature_range()
            keys = rng.random((n_nodes, hi - lo))
            chosen = np.argpartition(keys, k - 1, axis=1)[:, :k]
            full = np.zeros((n_nodes, self.n_features), dtype=np.uint8)
            np.put_along_axis(full[:, lo:hi], chosen, 1, axis=1)
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

    def grow_batch(self, seeds, first=0, labels=None, on_round=None):
        """:meth:`grow_batch_fused` with its own commit exchange: returns the
        master's trees and the parties' replies to the commit."""
        trees, commit = self.grow_batch_fused(seeds, first, labels, on_round=on_round)
        return trees, self.parties.exchange(commit)

    def grow_batch_fused(self, seeds, first=0, labels=None, carry=None, on_carried=None, on_round=None):
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
        previous batch is counted before this one goes on).  ``on_round()`` is
        called after every exchange (a progress bar that moves every level).
        Returns the master's trees and this batch's commit messages (not sent)."""
        n_parties = len(self.feature_counts)
        runs, asks, trees, finish = {}, {}, {}, {}
        for i, seed in enumerate(seeds):
            # each tree grows on a shallow copy holding that tree's state
            run = copy.copy(self)
            if labels is not None:
                run.labels = labels[i]
            if first + i < self.solo_trees:
                run.absent = frozenset(p for p in range(n_parties) if p != self.solo_party)
            runs[first + i] = run._steps(seed)

        def advance(t, replies):
            try:
                asks[t] = runs[t].send(replies)
            except StopIteration as stop:
                trees[t], finish[t] = stop.value

        # many small per-tree steps run faster as tree blocks on threads running
        # single-threaded kernels (they release the GIL) than as parallel launches
        threads = numba_threads.threads()
        blocks = numba_threads.block_threads(threads)
        pool = None
        if self.parallel_steps and len(runs) >= 2 * blocks and blocks > 1 \
                and numba_threads.concurrent_launches_ok():
            pool = ThreadPoolExecutor(blocks, initializer=numba_threads.set_threads,
                                      initargs=(1,))

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
            if pool is not None and self.parties.trees_apart:
                self._grow_apart(runs, trees, finish, pool, n_parties)
                carried = None
            else:
                carried = self._grow_rounds(runs, asks, advance_all, n_parties, carry, on_carried, on_round)
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

    def _grow_rounds(self, runs, asks, advance_all, n_parties, carry=None, on_carried=None, on_round=None):
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
            if on_round is not None:
                on_round()
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
        rng = tree_rng(seed)
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
        self.tree_counts = counts
        self.channel_state = self.channel.begin_tree(self, tree, counts, cw)
        n_parties = len(self.feature_counts)
        children = np.zeros(1, dtype=np.int32)
        pending = [{} if p in self.absent else self._begin_message(counts, cw, p) for p in range(n_parties)]
        # the feature draws depend only on label-free facts, so every label mode draws alike:
        # a mask for every child of a level's splits, drawn as soon as the splits are chosen
        all_masks = self._masks(rng, tree_mask, 1)
        while True:
            tree.col["count"][children] = np.diff(np.vstack(tree.bounds(children)), axis=0)[0]
            may = self._may_split(tree, children)
            cand = children[may]
            masks = [m[may] for m in all_masks] if cand.size else None
            split_nodes, winner, pending, replies = yield from self.channel.choose(self, tree, children, cand,
                                                                                   masks, pending)
            if not split_nodes.size:
                break
            all_masks = self._masks(rng, tree_mask, 2 * split_nodes.size)
            won = [np.flatnonzero(winner == p) for p in range(n_parties)]  # positions in split_nodes
            # winners whose bits did not come with the choice are asked for them
            msgs = [self.channel.partition_msg(self, p, split_nodes, won, replies, all_masks)
                    if won[p].size and replies[p] is None else None for p in range(n_parties)]
            if any(m is not None for m in msgs):
                got = yield msgs
                replies = [r if m is None else g for r, m, g in zip(replies, msgs, got)]
            applies, n_left, all_bits = self.channel.level_partition(self, tree, split_nodes, won, replies)
            # every party reorders its rows by the level's partition now (but one that
            # did so itself), while the master goes on with its own steps
            yield Posted(applies)
            self.channel.partitioned(self, tree, split_nodes, won, replies)
            lefts, rights = tree.split(split_nodes, all_bits, n_left)
            self.channel.after_split(self, split_nodes, lefts, rights)
            children = np.empty(2 * lefts.size, dtype=np.int32)
            children[0::2] = lefts
            children[1::2] = rights
            tree.col["depth"][children] = np.repeat(tree.col["depth"][split_nodes] + 1, 2)
            pending = [{} for _ in range(n_parties)]
        master = self._master_tree(tree)
        for p in range(n_parties):
            if p in self.absent:
                # it took no part: the tree's shape is all it stores (no split of its own)
                pending[p] = {"shape_left": master["children_left"], "shape_right": master["children_right"]}
            else:
                pending[p]["importance"] = self.channel.importance(self, master, p)
        return master, pending

    # -- the kind of tree (a component: forest trees here, boosting trees in vertical.boosting)
    def _begin_message(self, counts, cw, party):
        """What party ``party`` (index) needs to begin a tree: its draws and class
        weights, and what the tree's labels add (boosting: the gradients, or
        their ciphertexts; the label holder: the tree's output)."""
        msg = {"counts": counts, "class_weight": cw}
        msg.update(self.labels.begin(party == self.channel.label_party))
        return msg

    def searchable(self, tree, cand):
        return self.kind.searchable(tree.col["impurity"][cand])

    def takes(self, best):
        return self.kind.takes(best)

    def leaf_values(self, stats, weight):
        return self.kind.leaf_values(stats, weight)

    # -- shared steps -----------------------------------------------------
    def _may_split(self, tree, nodes):
        """Nodes that may split as far as depth and row counts tell (no labels needed)."""
        return may_split(self.s, tree.col["depth"][nodes], tree.col["count"][nodes])

    def collect_bits(self, tree, split_nodes, won, replies):
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

    def _master_tree(self, tree):
        return self.channel.master_tree(self, tree)


_WARM = set()


def warm_up(split_method, is_classification=True):
    """Load (or compile) the growth kernels for this process on a tiny problem,
    so the first real tree does not pay for it (once per process and kind)."""
    if (split_method, bool(is_classification)) in _WARM:
        return
    from ..tree.params import ForestParams, validate
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
    _warm_up_beside_growth()
    _WARM.add((split_method, bool(is_classification)))


_WARM_BESIDE = []


def _warm_up_beside_growth():
    """Load (or compile) the kernels a vertical job runs beside the plain
    growth, on empty inputs of the types the job passes: the label holder's
    split choice from decrypted histograms and a passive party's partition
    bits (encrypted labels), and the ID hashes of reading a table.  Without
    them every rank of a first job would compile these itself."""
    if _WARM_BESIDE:
        return
    from ..data.text_hash import text_hashes
    from ..tree import splitter
    from ..tree.binning import MISSING_BIN
    i32, i64 = np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
    text_hashes(np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.int64))
    partitioner.partition_bits(np.zeros((2, 2), dtype=np.uint8, order="F"), i32, i64, i64, i64, i32,
                               np.zeros(0, dtype=np.uint8), MISSING_BIN)
    splitter.best_splits_from_hists(np.zeros((0, MISSING_BIN + 1, 2)), np.zeros((0, MISSING_BIN + 1), dtype=np.int64),
                                    i32, i32, i32, np.zeros((0, 2)), i64, True, 2, 0, 0.0, 0.0, 1, 0.0)
    _WARM_BESIDE.append(True)


def tree_state_bytes(n_rows, n_stats, encrypted=False, key_length=None):
    """Bytes one growing tree holds on the busiest rank (the row index, the
    bootstrap counts, the per-row label statistics, the partition scratch, two
    levels of kept histograms and, with encrypted labels, the powers of the
    ciphertexts of rows drawn more than once, about a quarter of them)."""
    per_row = 4 + 4 + 4 + 8 * n_stats + 2 * HIST_CACHE_BYTES_PER_ROW
    if encrypted:
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
