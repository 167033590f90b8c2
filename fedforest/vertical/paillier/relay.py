"""The Paillier label channel on the master's side: coordinator and relay.

Per level of every tree of a batch (see docs/protocol.md, "Encrypted labels"):

1. ``find``: every party without the labels gets the candidate nodes and its
   feature masks, and returns the encrypted per-bin sums of the level's plan
   (:func:`~..encrypted_labels.sum_plan`: the smaller sibling only, where the
   label holder can derive the larger one as parent minus sibling), with
   their row counts and bootstrap weights, sealed for the label holder;
2. ``decide``: the label holder gets its own candidates and masks (it scores
   its own columns in plaintext) and those sealed sums, relayed, and answers
   with the nodes that split, their winning parties and its own splits'
   numbers of left rows; its decision (the other parties' features and bins,
   its own partition bits) goes sealed to every other party;
3. ``partition`` (only when another party won a split): the winners get the
   decision and return their splits' numbers of left rows, and their bits
   sealed for every other party.  Where a single party without the labels
   won, it also gets every child's feature mask: it applies the level
   itself and returns the next level's sealed sums with its bits, so that
   level needs no ``find``; with two parties every level is then two
   exchanges;
4. ``apply`` (posted): every other party gets the level's split nodes and
   winners with the sealed decision and bits it needs.

The master keeps the tree structure, the owner of every split and the
nodes' row counts.  It holds no key, relays payloads it can neither read nor
alter (:mod:`.sealed`), and receives no row, gain, statistic or leaf value.
"""
import numpy as np

from ...tree.labels import RowLabels
from ..encrypted_labels import needed_pairs, sum_plan
from . import sealed as S
from ..tree_grower import ChannelState, LabelChannel
from .holder import DECIDE


class LabelHolderChooses(LabelChannel):
    """The label channel of the master's grower (``TreeGrower(channel=...)``)
    when the label holder (party index ``label_party``) holds the key and
    chooses the splits.  ``spec`` the public slot layout;
    ``public_key`` the label holder's public key.  The tree's state (which
    sums the label holder holds, the families of the last split, the sealed
    decisions) is the :class:`~..tree_grower.ChannelState` it makes per tree."""

    parallel_steps = False

    def __init__(self, label_party, spec, public_key):
        self.label_party = int(label_party)
        self.spec = spec
        self.public = public_key

    def begin_tree(self, g, tree, counts, cw):
        return ChannelState(
            held={p: set() for p in range(len(g.feature_counts))},  # per party, the (node, feature)
            # histograms the label holder holds from the last level
            family={},      # child -> (parent, sibling)
            ahead={},       # party -> its sealed sums of the next level, sent with its partition bits
            applied=set(),  # parties that applied the last level themselves
            decisions={})   # party -> the label holder's sealed decision of this level for it

    def after_split(self, g, split_nodes, lefts, rights):
        for p, left, right in zip(split_nodes.tolist(), lefts.tolist(), rights.tolist()):
            g.channel_state.family[left] = (p, right)
            g.channel_state.family[right] = (p, left)

    def choose(self, g, tree, children, cand, masks, pending):
        """The splits of a level, chosen by the label holder (see the module's docstring)."""
        n_parties = len(g.feature_counts)
        lh = self.label_party
        none = [None] * n_parties
        sums, g.channel_state.ahead, g.channel_state.applied = g.channel_state.ahead, {}, set()
        if not cand.size:      # those parties found no candidate either
            return cand, None, pending, none
        # a party that takes no part in the tree (label_holder_first_trees) sums nothing
        plan = {p: sum_plan(cand, masks[p], g.channel_state.family, g.channel_state.held[p], tree.col["count"])
                for p in range(n_parties) if p != lh and p not in g.absent}
        msgs = [None if p == lh or p in sums or p in g.absent else
                dict(pending[p], op="find", nodes=cand, fmask=masks[p]) for p in range(n_parties)]
        if any(m is not None for m in msgs):
            got = yield msgs
            for p, r in enumerate(got):
                if msgs[p] is not None:
                    sums[p] = self._only(S.from_reply(r, p, n_parties), p, {(lh, S.SUMS)})[(lh, S.SUMS)]
            pending = [{} if msgs[p] is not None else pending[p] for p in range(n_parties)]
        # the sealed sums go to the label holder as they came, with the plan to read them
        parts = {k: [] for k in ("pair_party", "pair_node", "pair_feat", "derive_party", "derive_node",
                                 "derive_feat")}
        for p, (compute, derive) in plan.items():
            for key, pairs in (("pair", compute), ("derive", derive)):
                arr = np.array(pairs, dtype=np.int32).reshape(-1, 2)
                parts[key + "_party"].append(np.full(arr.shape[0], p, dtype=np.int32))
                parts[key + "_node"].append(arr[:, 0])
                parts[key + "_feat"].append(arr[:, 1])
            g.channel_state.held[p] = needed_pairs(cand, masks[p])
        msg = {**pending[lh], "op": DECIDE, "cand": cand, "fmask": masks[lh],
               "pmask": np.ascontiguousarray(np.hstack([masks[p] for p in range(n_parties) if p != lh])
                                             if n_parties > 1 else np.zeros((cand.size, 0), dtype=np.uint8)),
               **S.incoming([(p, sums[p]) for p in plan])}
        for k, arrays in parts.items():
            msg[k] = np.concatenate(arrays).astype(np.int32) if arrays else np.empty(0, dtype=np.int32)
        reply = (yield [msg if p == lh else None for p in range(n_parties)])[lh]
        pending[lh] = {}
        split, winner = self.decided(reply, cand, n_parties)
        m = split.size
        n_left = reply.take("n_left", int((winner == lh).sum()))
        want = {(q, S.DECISION) for q in range(n_parties) if q != lh and q not in g.absent} if m else set()
        sealed = self._only(S.from_reply(reply, lh, n_parties), lh, want)
        g.channel_state.decisions = {q: b for (q, _), b in sealed.items()}
        # the label holder's own splits came partitioned with its decision
        got = [_Partitioned(n_left) if p == lh else None for p in range(n_parties)]
        return split.astype(np.int32), winner.astype(np.int64), pending, got

    def decided(self, reply, cand, n_parties):
        """The label holder's split nodes (candidates, increasing) and their
        winners (parties) from its reply to ``decide``."""
        lh = self.label_party
        split = reply.take_upto("split", cand.size)
        if split.size and not (np.all(split[1:] > split[:-1]) and np.isin(split, cand).all()):
            raise ValueError(f"party {lh + 1} (the label holder) named splits that are not candidates")
        winner = reply.take("winner", split.size)
        if split.size and (winner.min() < 0 or winner.max() >= n_parties):
            raise ValueError(f"party {lh + 1} (the label holder) named a winner that is no party")
        return split, winner

    @staticmethod
    def _only(parts, p, want):
        """A reply's sealed payloads, which must be exactly ``want`` ((to, field) pairs)."""
        if set(parts) != set(want):
            raise ValueError(f"party {p + 1} sent sealed payloads {sorted(parts)}; this step takes "
                             f"{sorted(want)}")
        return parts

    def partition_msg(self, g, p, split_nodes, won, replies, child_masks):
        msg = {"op": "partition", "nodes": split_nodes[won[p]], "decision": g.channel_state.decisions.pop(p)}
        lh = self.label_party
        if all(not won[q].size for q in range(len(won)) if q not in (p, lh)):
            # the only other winner is the label holder, whose bits came with its decision:
            # this party applies the level itself and sums the next one in its reply
            msg.update(level_nodes=split_nodes, child_fmask=child_masks[p])
            g.channel_state.applied.add(p)
        return msg

    def level_partition(self, g, tree, split_nodes, won, replies):
        """Each split's number of left rows (from its winner) and each party's
        ``apply`` message: the split nodes and winners in the clear, the sealed
        decision (where the party got none with a partition) and the other
        winners' sealed bits.  A party that applied the level itself gets none."""
        n_parties, lh = len(won), self.label_party
        n_left = np.empty(split_nodes.size, dtype=np.int64)
        winners = np.empty(split_nodes.size, dtype=np.int32)
        starts, ends = tree.bounds(split_nodes)
        bits_for = {q: [] for q in range(n_parties)}
        for p in range(n_parties):
            if not won[p].size:
                continue
            winners[won[p]] = p
            tree.col["owner"][split_nodes[won[p]]] = p
            if p == lh:
                n_left[won[p]] = replies[p].n_left
                continue
            rep = replies[p]
            n_left[won[p]] = rep.take("n_left", won[p].size)
            want = {(q, S.BITS) for q in range(n_parties) if q != p}
            if p in g.channel_state.applied:
                want.add((lh, S.SUMS))
            parts = self._only(S.from_reply(rep, p, n_parties), p, want)
            if p in g.channel_state.applied:
                g.channel_state.ahead[p] = parts.pop((lh, S.SUMS))
            for (q, _), blob in parts.items():
                bits_for[q].append((p, blob))
        if np.any(n_left < 0) or np.any(n_left > ends - starts):
            raise ValueError("a winner sent more left rows than its node holds")
        msgs = []
        for q in range(n_parties):
            if q in g.channel_state.applied or q in g.absent:
                msgs.append(None)
                continue
            items = list(bits_for[q])
            if q in g.channel_state.decisions:
                items.append((lh, g.channel_state.decisions.pop(q)))
            msgs.append({"op": "apply", "split_nodes": split_nodes, "winners": winners, **S.incoming(items)})
        if g.channel_state.decisions:
            raise ValueError("the label holder sealed decisions for parties the level does not reach")
        return msgs, n_left, None

    def master_tree(self, g, tree):
        t = tree.trimmed(["left", "right", "owner", "count", "feature", "threshold", "missing_left"])
        out = {"children_left": t["left"], "children_right": t["right"], "owner": t["owner"],
               "n_node_samples": t["count"]}
        if g.s.reveal_splits:
            out.update(feature=t["feature"], threshold=t["threshold"], missing_left=t["missing_left"])
        return out

    def importance(self, g, master, p):
        # the shares of the impurity decrease are label statistics: they stay with the label holder
        return np.zeros(master["children_left"].shape[0])


class RowCount(RowLabels):
    """The master's view of a forest's labels in the encrypted modes: their number only."""
    is_classification = False
    n_classes = 1
    n_stats = 3
    sample_weight = None

    def __init__(self, n_rows):
        self.n_rows = int(n_rows)


class _Partitioned:
    """The label holder's own splits of a level, partitioned with its decision:
    their numbers of left rows."""

    def __init__(self, n_left):
        self.n_left = n_left
