"""The Paillier label channel on the master's side: coordinator and relay.

Per level of every tree of a batch (see docs/protocol.md, "Encrypted labels"):

1. ``find``: every party without the labels gets the candidate nodes and its
   feature masks, and returns the encrypted per-bin sums of the level's plan
   (:func:`~..encrypted_labels.sum_plan`: the smaller sibling only, where the
   label holder can derive the larger one as parent minus sibling);
2. ``decide``: the label holder gets its own candidates and masks (it scores
   its own columns in plaintext) and those sums, relayed, and answers with
   the nodes that split, their winning parties, the chosen feature and bin of
   the other parties' splits, and the partition bits of its own splits;
3. ``partition`` (only when another party won a split): the winners return
   their partition bits.  Where a single party without the labels won, it
   also gets the label holder's bits and every child's feature mask: it
   applies the level itself and returns the next level's sums with its bits,
   so that level needs no ``find``; with two parties every level is then two
   exchanges.

The master keeps the tree structure, the owner of every split and the
nodes' row counts.  It holds no key, relays ciphertexts it cannot read, and
receives no gain, statistic or leaf value.
"""
import numpy as np

from ..encrypted_labels import hist_layout, needed_pairs, sum_plan
from .holder import DECIDE


class LabelHolderChooses:
    """The label channel of the master's grower (``TreeGrower(channel=...)``)
    when the label holder (party index ``label_party``) holds the key and
    chooses the splits.  ``party_bins``: per party, its features' ``(n_bins,
    skip)`` (None for the label holder); ``spec`` the public slot layout;
    ``public_key`` the label holder's public key.  The tree's state (which
    sums the label holder holds, the families of the last split, the chosen
    splits) lives on the grower's per-tree copy ``g``."""

    parallel_steps = False

    def __init__(self, label_party, party_bins, spec, public_key):
        self.label_party = int(label_party)
        self.party_bins = party_bins
        self.spec = spec
        self.public = public_key

    def keeps_rows(self, g):
        return False    # node sizes only: the label holder keeps the rows by node

    def begin_tree(self, g, tree, counts, cw):
        # per party, the (node, feature) histograms the label holder holds from the last level
        g._held = {p: set() for p in range(len(g.feature_counts))}
        g._family = {}     # child -> (parent, sibling)
        g._ahead = {}      # party -> its partition reply holding the next level's sums
        g._applied = set()     # parties that applied the last level themselves

    def after_split(self, g, split_nodes, lefts, rights):
        for p, left, right in zip(split_nodes.tolist(), lefts.tolist(), rights.tolist()):
            g._family[left] = (p, right)
            g._family[right] = (p, left)

    def partitioned(self, g, tree, split_nodes, won, replies):
        g._ahead = {p: replies[p] for p in g._applied}

    def choose(self, g, tree, children, cand, masks, pending):
        """The splits of a level, chosen by the label holder (see the module's docstring)."""
        n_parties = len(g.feature_counts)
        lh = self.label_party
        none = [None] * n_parties
        ahead, g._ahead, g._applied = g._ahead, {}, set()
        plan = {p: sum_plan(cand, masks[p], g._family, g._held[p], tree.col["count"]) if cand.size
                else ([], []) for p in range(n_parties) if p != lh}
        # the sums that came with a partition are read first (a reply is used up in its exchange)
        sums = {p: self._sums(p, plan[p][0], reply) for p, reply in ahead.items()}
        if not cand.size:      # those parties found no candidate either
            return cand, None, pending, none
        msgs = [None if p == lh or p in ahead else dict(pending[p], op="find", nodes=cand, fmask=masks[p])
                for p in range(n_parties)]
        if any(m is not None for m in msgs):
            got = yield msgs
            sums.update((p, self._sums(p, plan[p][0], r)) for p, r in enumerate(got) if msgs[p] is not None)
            pending = [{} if msgs[p] is not None else pending[p] for p in range(n_parties)]
        # the sums go to the label holder as they came, with what it needs to read them
        parts = {k: [] for k in ("pair_party", "pair_node", "pair_feat", "derive_party", "derive_node",
                                 "derive_feat", "hist", "cnt", "wcnt")}
        for p, (compute, derive) in plan.items():
            for k, v in zip(("cnt", "wcnt", "hist"), sums[p]):
                parts[k].append(v)
            for key, pairs in (("pair", compute), ("derive", derive)):
                arr = np.array(pairs, dtype=np.int32).reshape(-1, 2)
                parts[key + "_party"].append(np.full(arr.shape[0], p, dtype=np.int32))
                parts[key + "_node"].append(arr[:, 0])
                parts[key + "_feat"].append(arr[:, 1])
            g._held[p] = needed_pairs(cand, masks[p])
        width = self.public.ciphertext_bytes
        msg = {**pending[lh], "op": DECIDE, "cand": cand, "fmask": masks[lh],
               "pmask": np.ascontiguousarray(np.hstack([masks[p] for p in plan]) if plan
                                             else np.zeros((cand.size, 0), dtype=np.uint8))}
        for k, arrays in parts.items():
            if k == "hist":
                msg[k] = np.vstack(arrays) if arrays else np.zeros((0, width), dtype=np.uint8)
            else:
                msg[k] = np.concatenate(arrays).astype(np.uint32 if "cnt" in k else np.int32) if arrays \
                    else np.empty(0, dtype=np.int32)
        reply = (yield [msg if p == lh else None for p in range(n_parties)])[lh]
        pending[lh] = {}
        split = reply.take_upto("split", cand.size)
        if split.size and not (np.all(split[1:] > split[:-1]) and np.isin(split, cand).all()):
            raise ValueError(f"party {lh + 1} (the label holder) named splits that are not candidates")
        m = split.size
        winner = reply.take("winner", m)
        if m and (winner.min() < 0 or winner.max() >= n_parties):
            raise ValueError(f"party {lh + 1} (the label holder) named a winner that is no party")
        g._chosen = (split, reply.take("split_feature", m), reply.take("split_bin", m),
                        reply.take("split_missing_left", m))
        # the label holder's own partition bits came with its decision
        own = winner == lh
        n_own = int(sum(e - b for b, e in zip(*tree.bounds(split[own])))) if own.any() else 0
        bits = _Bits(reply.take("bits", (n_own + 7) // 8) if own.any() else np.empty(0, np.uint8))
        got = [bits if p == lh else None for p in range(n_parties)]
        return split.astype(np.int32), winner.astype(np.int64), pending, got

    def _sums(self, p, compute, reply):
        """Party ``p``'s bin counts, bootstrap weights and packed sums of the pairs ``compute``."""
        n_bins, skip = self.party_bins[p]
        feats = [f for _, f in compute]
        n_cnt = int(sum(int(n_bins[f]) + 1 for f in feats))
        cnt = reply.take("cnt", n_cnt)
        wcnt = reply.take("wcnt", n_cnt)
        _, _, n_values = hist_layout(feats, n_bins, skip, np.asarray(cnt, dtype=np.int64))
        return cnt, wcnt, reply.take("hist", self.spec.n_ciphertexts(n_values))

    def partition_msg(self, g, p, split_nodes, won, replies, child_masks):
        nodes, feat, b, ml = g._chosen
        mine = won[p]
        msg = {"op": "partition", "nodes": split_nodes[mine], "feature": feat[mine], "bin": b[mine],
               "missing_left": ml[mine]}
        lh = self.label_party
        if all(not won[q].size for q in range(len(won)) if q not in (p, lh)):
            # the only other winner is the label holder, whose bits came with its decision:
            # this party applies the level itself and sums the next one in its reply
            msg.update(level_nodes=split_nodes, child_fmask=child_masks[p],
                       holder_bits=replies[lh].bits if won[lh].size else np.empty(0, dtype=np.uint8))
            g._applied.add(p)
        return msg

    def applied_itself(self, g, p):
        return p in g._applied

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


class RowCount:
    """The master's view of a forest's labels in the encrypted modes: their number only."""
    is_classification = False
    n_classes = 1
    n_stats = 3
    sample_weight = None

    def __init__(self, n_rows):
        self.n_rows = int(n_rows)


class _Bits:
    """The label holder's partition bits of a level, as a reply to a partition."""

    def __init__(self, bits):
        self.bits = bits

    def __contains__(self, key):
        return False

    def take(self, key, n):
        if key != "bits" or self.bits.shape[0] != n:
            raise ValueError(f"the label holder sent {self.bits.shape[0]} bytes of partition bits; its "
                             f"splits need {n}")
        return self.bits
