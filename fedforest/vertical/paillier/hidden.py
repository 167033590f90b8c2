"""Hidden instance space (``instance_space = "hidden"``): the parties without
the labels never learn which rows share a node.

Per level of a tree (see docs/protocol.md, "Hidden instance space"):

1. the **label holder** encrypts, for every row of the tree's sample, the
   row's statistics in the slot of its node among the level's candidate
   nodes (:class:`NodeSlots`: ``per_ciphertext`` nodes share a ciphertext,
   so a row costs ``ceil(candidates / per_ciphertext)`` ciphertexts; a row
   of a node that no longer splits is an encryption of zero, like any other)
   and seals them for each other party;
2. each **other party** (:class:`HiddenSums`) sums those ciphertexts per
   (feature, bin) of its own columns over all the sample's rows, without
   knowing any row's node, and returns the sums sealed to the label holder
   (when few nodes are open, several bins share a ciphertext);
3. the label holder decrypts every node's per-bin sums, chooses the splits
   exactly as in the shared instance space (:meth:`KeyHolder._choose`) and,
   for a split another party won, sends that party only the feature, the bin
   and the missing side (no node); the party answers with that threshold's
   bit for every row of the sample, and only the label holder applies them.

The passive parties thus see no partition, no candidate node and no leaf:
what they learn is the number of levels, the number of ciphertexts per row
(about the number of open nodes), the thresholds of their own columns that
won and how many there were.  The master still sees the tree's shape, the
winners and the sizes of the children, as in the shared instance space.

A passive party's model holds its winning thresholds in the order it gave
them (``hidden_feature``, ``hidden_threshold``, ``hidden_missing_left``);
the label holder's tree names, for each such split, the threshold's number
(``hidden_record``).  Prediction is one round: each passive party sends its
thresholds' bits for every row, sealed to the label holder, which routes
the rows through its trees (:func:`route_hidden`).
"""
import time

import numpy as np

from ...crypto import paillier as P
from ...tree import partitioner
from ...tree.binning import MISSING_BIN
from ...tree.growth import PARTY_COLUMNS, Nodes, may_split, pack_bits, unpack_bits
from ...tree.labels import RowLabels
from ..encrypted_labels import N_SLOTS_BIN, CipherSums, OwnRandomness, ProtocolIntegrityError
from ..messages import bad_message, int_array, shown
from ..tree_grower import ChannelState
from . import sealed as S
from .holder import DECIDE, KeyHolder
from .relay import LabelHolderChooses

SLOTS_OP = "slots"            # master -> label holder: the first level's rows in node slots
SUMS_OP = "hidden_sums"       # master -> other party: sum a level's slotted rows per (feature, bin)
BITS_OP = "hidden_bits"       # master -> a winner: the bits of the thresholds the label holder chose
APPLY_OP = "hidden_apply"     # master -> label holder: the winners' bits; it applies the level

HIDDEN = "hidden"
SHARED = "shared"
INSTANCE_SPACES = (SHARED, HIDDEN)
RECORD_KEYS = ("hidden_feature", "hidden_threshold", "hidden_missing_left")


class NodeSlots:
    """Where a row's statistics sit in the plaintexts of a level: node
    position ``k`` among ``n_cand`` candidates is ciphertext ``k //
    per_ciphertext``, slot ``k % per_ciphertext`` (slot ``i`` starts at bit
    ``i * value_bits``).  A party's sums of a (feature, bin) are then the
    node's sums in the same slots; when one ciphertext holds all the nodes,
    ``groups`` (feature, bin) sums share a ciphertext, the first one highest
    (:meth:`~fedforest.crypto.paillier.PublicKey.pack` with a width of
    ``n_cand * value_bits``)."""

    def __init__(self, spec, with_rows=False):
        self.spec = spec
        # each statistic's slot just wide enough for its sums (the first statistic highest); with
        # ``with_rows`` (rows of other weights than 0 and 1: bootstrap counts) a last slot counts rows
        bounds = stat_bounds(spec) + ((spec.n_total,) if with_rows else ())
        self.with_rows = bool(with_rows)
        self.widths = tuple(P.Slots.width_for(b) for b in bounds)
        self.value_bits = sum(self.widths)
        self.per = (int(spec.key_length) - 1) // self.value_bits
        if self.per < 1:
            raise ProtocolIntegrityError(f"a node's statistics ({self.value_bits} bits) do not fit one plaintext")

    def pack_value(self, stats):
        """One row's (or node's) statistics as the integer of its slot."""
        v = 0
        for x, w in zip(stats, self.widths):
            x = int(x)
            if x < 0 or x >> w:
                raise ProtocolIntegrityError(f"a statistic {x} does not fit its {w}-bit slot")
            v = (v << w) | x
        return v

    def n_ct(self, n_cand):
        return max(1, -(-int(n_cand) // self.per))

    def groups(self, n_cand):
        return max(1, self.per // int(n_cand)) if 0 < n_cand <= self.per else 1

    def row_plaintexts(self, values, pos, n_cand):
        """Row-major plaintexts (``n_ct`` per row) of packed row ``values``
        (ints) at node positions ``pos`` (-1: the row's node does not split:
        zeros)."""
        n_ct = self.n_ct(n_cand)
        out = [0] * (len(values) * n_ct)
        vb, per = self.value_bits, self.per
        for i, (v, k) in enumerate(zip(values, pos.tolist())):
            if k >= 0:
                c, o = divmod(k, per)
                out[i * n_ct + c] = v << (o * vb)
        return out

    def n_sums(self, n_groups, n_cand):
        """Ciphertexts of ``n_groups`` (feature, bin) sums."""
        if self.n_ct(n_cand) > 1:
            return n_groups * self.n_ct(n_cand)
        return -(-n_groups // self.groups(n_cand))

    def unpack(self, plains, n_groups, n_cand):
        """``(n_groups, n_cand, n_stats)`` integer sums from the decrypted
        plaintexts of :meth:`n_sums` ciphertexts (ProtocolIntegrityError
        where a plaintext holds bits beyond its sums)."""
        vb, ns = self.value_bits, len(self.widths)
        n_ct = self.n_ct(n_cand)
        per_pt = self.per if n_ct > 1 else self.groups(n_cand) * n_cand   # values per plaintext
        used = np.full(len(plains), per_pt * vb, dtype=np.int64)           # bits each one may hold
        if n_ct > 1:
            last = n_cand - (n_ct - 1) * self.per
            used.reshape(-1, n_ct)[:, -1] = last * vb
        elif len(plains):
            used[-1] = (n_groups - (len(plains) - 1) * self.groups(n_cand)) * n_cand * vb
        vals = _values(plains, self.widths, per_pt, used, self.spec.key_length)   # (n_pt, per_pt, ns), lowest first
        if n_ct > 1:
            return np.ascontiguousarray(vals.reshape(n_groups, n_ct * self.per, ns)[:, :n_cand])
        k = self.groups(n_cand)
        vals = vals.reshape(len(plains), k, n_cand, ns)
        out = np.empty((n_groups, n_cand, ns), dtype=np.int64)
        for i in range(len(plains)):
            m = min(k, n_groups - i * k)
            # the chunk's first group is the highest: group j sits at position m - 1 - j
            out[i * k:i * k + m] = vals[i, m - 1::-1] if m else vals[i, :0]
        return out


def _values(plains, widths, per_pt, used, key_length):
    """The ``per_pt`` values of each plaintext (the lowest first), each split
    into its statistics of ``widths`` bits (the first statistic highest), as
    int64; a plaintext with a bit set at or above its ``used`` bits (a sum
    that overflowed its slots, or forged) is refused."""
    n_bytes = (int(key_length) + 7) // 8
    vb = sum(widths)
    if not len(plains):
        return np.zeros((0, per_pt, len(widths)), dtype=np.int64)
    raw = np.frombuffer(b"".join(int(p).to_bytes(n_bytes, "little") for p in plains), dtype=np.uint8)
    bits = np.unpackbits(raw.reshape(len(plains), n_bytes), axis=1, bitorder="little")
    high = np.arange(bits.shape[1])[None, :] >= used[:, None]
    if (bits.astype(bool) & high).any():
        raise ProtocolIntegrityError("a decrypted sum overflows its slots; the ciphertexts were altered or "
                                     "made under another key")
    cells = bits[:, :per_pt * vb].reshape(len(plains), per_pt, vb)
    out = np.empty((len(plains), per_pt, len(widths)), dtype=np.int64)
    at = vb
    for s, w in enumerate(widths):
        at -= w
        weights = np.uint64(1) << np.arange(w, dtype=np.uint64)
        out[:, :, s] = (cells[:, :, at:at + w].astype(np.uint64) @ weights).astype(np.int64)
    return out


def stat_bounds(spec):
    """The largest sum over the rows of each statistic of the slot layout ``spec``."""
    own = getattr(spec, "stat_bounds", None)
    if own is not None:
        return tuple(own())
    n = int(spec.n_total)
    if spec.is_classification:
        return (n,) * int(spec.n_classes)
    return (n, 2 * spec.bias * n, spec.bias ** 2 * n)


def layout(spec, sp):
    """The slot layout of a job's levels: a row-count slot where a row may
    weigh more than 1 (the forest's bootstrap counts)."""
    return NodeSlots(spec, with_rows=sp.count_max not in (None, 1))


def _groups_of(Xb, rows, feats, skip):
    """Per feature of ``feats``, the bins with rows of ``rows`` (the
    feature's left-out bin aside, in increasing order), and the positions
    into ``rows`` grouped by (feature, bin): ``(bins, n_bins_listed, index,
    starts)``."""
    bins, listed, runs, starts = [], [], [], []
    at = 0
    for f in feats.tolist():
        b = Xb[rows, f]
        sel = np.flatnonzero(b != skip[f])
        order = sel[np.argsort(b[sel], kind="stable")]
        if order.size:
            bo = b[order]
            first = np.flatnonzero(np.diff(bo.astype(np.int64), prepend=-1))
            bins.append(bo[first].astype(np.uint16))
            listed.append(first.size)
            runs.append(order)
            starts.append(at + first)
            at += order.size
        else:
            listed.append(0)
    index = np.concatenate(runs) if runs else np.empty(0, np.int64)
    starts = np.append(np.concatenate(starts), at) if starts else np.zeros(1, np.int64)
    bins = np.concatenate(bins) if bins else np.empty(0, np.uint16)
    return bins, np.array(listed, dtype=np.int32), index, starts


class HiddenLabels(RowLabels):
    """A boosting tree's (or a forest tree's) labels at a party without them
    in the hidden instance space: nothing comes with the tree's first
    message; the label holder's slotted ciphertexts come every level."""

    n_stats = None
    sample_weight = None


# --------------------------------------------------------------------------- the other parties
class HiddenSums(CipherSums):
    """The label channel of a party without the labels in the hidden
    instance space (see the module's docstring).  Its tree state never
    holds more than the root: it learns no partition."""

    tree_threads = False
    child_stats = False
    extra_ops = frozenset((SUMS_OP, BITS_OP))
    op_keys = {SUMS_OP: ("feats",) + S.IN_KEYS, BITS_OP: S.IN_KEYS, "finish": ("importance",), "apply": ()}
    apply_keys = ()

    def begin(self, sp, msg):
        counts = np.asarray(msg["counts"])
        return {"nodes": Nodes(counts, PARTY_COLUMNS), "counts": counts, "rows": np.flatnonzero(counts),
                "level": 0, "sums_level": 0, "summed": False, "records": []}

    def handle_op(self, sp, msg):
        if msg["op"] == SUMS_OP:
            return self._sums(sp, msg)
        return self._bits(sp, msg)

    def _sums(self, sp, msg):
        t = sp.state
        t["level"] = t["sums_level"]
        t["sums_level"] += 1
        t["summed"] = True
        blobs = S.from_message(msg, self.sealer.n_parties, self.sealer.me)
        if sorted(blobs) != [self.lh]:
            raise bad_message("a 'hidden_sums' must carry the label holder's sealed rows and nothing else")
        pay = self.sealer.open(self.lh, S.SLOTS, sp.tree_id, t["level"], blobs[self.lh])
        n_cand = pay.get("n_cand")
        rows = t["rows"]
        if not (isinstance(n_cand, int) and not isinstance(n_cand, bool) and 1 <= n_cand <= rows.size):
            raise bad_message(f"the label holder's slots name {shown(n_cand)} candidate nodes")
        slots = layout(self.spec, sp)
        n_ct = slots.n_ct(n_cand)
        blocks = pay.get("ct")
        width = self.key.ciphertext_bytes
        if not (isinstance(blocks, np.ndarray) and blocks.dtype == np.uint8
                and blocks.shape == (rows.size * n_ct, width)):
            raise bad_message(f"the label holder's slots must be {rows.size * n_ct} ciphertexts, got {shown(blocks)}")
        feats = int_array(msg.get("feats"), "'feats'")
        if feats.size and (feats.min() < 0 or feats.max() >= sp.n_features or np.any(np.diff(feats) <= 0)):
            raise bad_message(f"'feats' must list features of this party (0 to {sp.n_features - 1}) in "
                              "increasing order")
        t0 = time.perf_counter()
        cts = self.key.deserialize(blocks, "the label holder's slots")
        bins, listed, index, starts = _groups_of(sp.Xb, rows, feats, sp.skip)
        n_groups = int(listed.sum())
        workers = sp.crypto_threads()
        nsq = self.key.nsq
        idx, st = index.tolist(), starts.tolist()
        per_c = [P.group_products(cts[c::n_ct], idx, st, nsq, workers) if n_groups else []
                 for c in range(n_ct)]
        if n_ct > 1:
            sums = [per_c[c][g] for g in range(n_groups) for c in range(n_ct)]
        else:
            k = slots.groups(n_cand)
            width_bits = n_cand * slots.value_bits
            values = per_c[0]
            sums = P.parallel_map(lambda i: self.key.pack(values[i:i + k], width_bits),
                                  range(0, len(values), k), workers)
        sp.timed("party_sums", time.perf_counter() - t0)
        out = {"hist": self.key.serialize(sums), "feats": feats.astype(np.int32), "listed": listed, "bins": bins}
        return S.outgoing([(self.lh, S.SUMS, self.sealer.seal(self.lh, S.SUMS, sp.tree_id, t["level"], out))])

    def _bits(self, sp, msg):
        t = sp.state
        if not t["summed"]:
            raise bad_message("a 'hidden_bits' without the sums of its level, or a second one")
        t["summed"] = False
        blobs = S.from_message(msg, self.sealer.n_parties, self.sealer.me)
        if sorted(blobs) != [self.lh]:
            raise bad_message("a 'hidden_bits' must carry the label holder's sealed decision and nothing else")
        dec = self.sealer.open(self.lh, S.DECISION, sp.tree_id, t["level"], blobs[self.lh])
        arrays = {k: int_array(dec.get(k), f"the decision's {k!r}") for k in ("feature", "bin", "missing_left")}
        feat, b, ml = arrays["feature"], arrays["bin"], arrays["missing_left"]
        if not (feat.shape == b.shape == ml.shape and feat.ndim == 1 and feat.size):
            raise bad_message("the decision's 'feature', 'bin' and 'missing_left' must hold one value per "
                              "threshold (at least one)")
        if feat.min() < 0 or feat.max() >= sp.n_features:
            raise bad_message(f"the decision names features outside this party's columns (0 to {sp.n_features - 1})")
        if b.min() < 0 or np.any(b >= sp.n_bins[feat]):
            raise bad_message("the decision's 'bin' must name a bin of its feature")
        if not np.isin(ml, (0, 1)).all():
            raise bad_message("the decision's 'missing_left' must be 0 or 1")
        rows = t["rows"]
        k, m = feat.size, rows.size
        seg = np.arange(k, dtype=np.int64) * m
        bits = partitioner.partition_bits(sp.Xb, np.tile(rows, k).astype(np.int32), seg, seg + m,
                                          feat.astype(np.int64), b.astype(np.int32), ml.astype(np.uint8),
                                          MISSING_BIN)
        t["records"].append((feat.astype(np.int32), sp.bin_threshold(feat.astype(np.int32), b.astype(np.int32)),
                             ml.astype(np.uint8)))
        pay = {"bits": pack_bits(bits)}
        return S.outgoing([(self.lh, S.BITS, self.sealer.seal(self.lh, S.BITS, sp.tree_id, t["level"], pay))])

    def check_finish(self, sp, msg):
        pass

    def finish(self, sp):
        recs = sp.state["records"]
        if not recs:
            return {"hidden_feature": np.empty(0, np.int32), "hidden_threshold": np.empty(0, np.float64),
                    "hidden_missing_left": np.empty(0, np.uint8)}
        return {"hidden_feature": np.concatenate([r[0] for r in recs]),
                "hidden_threshold": np.concatenate([r[1] for r in recs]),
                "hidden_missing_left": np.concatenate([r[2] for r in recs])}


# --------------------------------------------------------------------------- the label holder
class HiddenHolder(KeyHolder):
    """The label holder's channel in the hidden instance space: it slots its
    rows for the other parties every level, rebuilds every node's
    histograms of their columns from their (feature, bin) sums, decides,
    and applies every level alone."""

    extra_ops = frozenset((SLOTS_OP, DECIDE, APPLY_OP))
    op_keys = dict(KeyHolder.op_keys, **{SLOTS_OP: (), DECIDE: ("cand", "fmask", "pmask") + S.IN_KEYS,
                                         APPLY_OP: S.IN_KEYS})
    apply_keys = ()
    _randomness = None    # its randomness for the whole training (OwnRandomness), made at the first level
    always_workers = False    # its own file set encrypt_workers: worker processes for every level

    def close(self):
        """End its randomness workers."""
        if self._randomness is not None:
            self._randomness.close()
            self._randomness = None

    def node_columns(self):
        return dict(super().node_columns(), hidden_record=(np.int32, -1))

    def begin(self, sp, msg):
        t = super().begin(sp, msg)
        t["sample"] = np.flatnonzero(t["counts"])
        t["slot_cand"] = None      # the candidates the last slots were made for
        t["slotted"] = None        # those of them whose rows have slots (the others are derived)
        t["hstore"] = None         # (party, node, feature) -> the last level's histograms
        t["records"] = {}          # party -> thresholds it gave in this tree
        t["pending_bits"] = None   # (split, winner) waiting for the other winners' bits
        return t

    def handle_op(self, sp, msg):
        t0 = time.perf_counter()
        try:
            op = msg["op"]
            if op == SLOTS_OP:
                if sp.state["slot_cand"] is not None or sp.state["level"]:
                    raise bad_message("the first level's slots are asked for once, at the root")
                return self._slots(sp, np.zeros(1, dtype=np.int32))
            if op == DECIDE:
                return self._decide_hidden(sp, msg)
            return self._apply_hidden(sp, msg)
        finally:
            sp.timed("decision", time.perf_counter() - t0)
            sp.seconds["decryption"] = self.decrypt_seconds

    # -- slots ----------------------------------------------------------------
    def _slots(self, sp, cand):
        """Every sample row's statistics in its node's slot among ``cand``,
        encrypted with fresh randomness and sealed for each other party."""
        t = sp.state
        tree = t["nodes"]
        others = self.others(sp)
        t["slot_cand"] = cand
        t["slotted"] = cand = self._slotted(sp, cand)
        if not cand.size or not others:
            return {}
        slots = layout(self.spec, sp)
        sample = t["sample"]
        pos = np.full(sp.n_rows, -1, dtype=np.int64)
        starts, ends = tree.bounds(cand)
        for k, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
            pos[tree.rows[s:e]] = k
        ints = sp.labels.row_ints(t, sample)
        if slots.with_rows:
            ints = np.hstack((ints, np.ones((sample.size, 1), dtype=np.int64)))
        packed = [slots.pack_value(v) for v in ints.tolist()]
        plain = slots.row_plaintexts(packed, pos[sample], cand.size)
        if self._randomness is None:
            self._randomness = OwnRandomness(self.key, sp.crypto_threads(), self.always_workers)
        cts = self._randomness.encrypt(plain, sp.timed)
        blocks = self.key.public.serialize(cts)
        pay = {"ct": blocks, "n_cand": int(cand.size)}
        return S.outgoing([(q, S.SLOTS, self.sealer.seal(q, S.SLOTS, sp.tree_id, t["level"], pay)) for q in others])

    def _slotted(self, sp, cand):
        """The candidates whose rows get slots: of two sibling candidates only
        the one with fewer rows (the lower id on a tie); the other's
        histograms are its parent's minus its sibling's (the parent's are
        kept from the last level)."""
        t = sp.state
        if t["family"] is None or cand.size < 2:
            return cand
        split_nodes, first = t["family"]
        s, e = t["nodes"].bounds(cand)
        n = dict(zip(cand.tolist(), (e - s).tolist()))
        keep = []
        for j in cand.tolist():
            off = j - int(first)
            sib = j + 1 if off % 2 == 0 else j - 1
            if sib in n and (n[sib] < n[j] or (n[sib] == n[j] and sib < j)):
                continue        # derived from its parent and sibling
            keep.append(j)
        return np.array(keep, dtype=np.int32)

    # -- the decision -----------------------------------------------------------
    def _decide_hidden(self, sp, msg):
        t = sp.state
        if t["decided"] is not None or t["pending_bits"] is not None:
            raise bad_message("a second 'decide' for one level of the tree")
        cand = np.asarray(msg.get("cand"))
        if not (isinstance(msg.get("cand"), np.ndarray) and t["slot_cand"] is not None
                and np.array_equal(cand, t["slot_cand"])):
            raise bad_message("'cand' must be the candidate nodes the label holder slotted this level's rows for")
        cand = cand.astype(np.int32)
        self.find(sp, sp.check_find({"nodes": cand, "fmask": msg.get("fmask")}))
        width = sum(self.feature_counts) - sp.n_features
        pmask = msg.get("pmask")
        if not (isinstance(pmask, np.ndarray) and pmask.dtype in (np.dtype(np.uint8), np.dtype(np.bool_))
                and pmask.shape == (cand.size, width)):
            raise bad_message(f"'pmask' must be a uint8 array of shape ({cand.size}, {width}), got {shown(pmask)}")
        others = self.others(sp)
        if not others and pmask.any():
            raise bad_message(f"'pmask' names other parties' columns in tree {sp.tree_id}, one of the first "
                              f"{self.solo_trees} trees (label_holder_first_trees)")
        tree = t["nodes"]
        c = tree.col
        self.ensure_stats(sp, cand)
        own_nodes, own_gain = t["own_gain"]
        keep = self.kind.searchable(c["impurity"][cand])
        nodes = cand[keep]
        gains = np.full((len(self.feature_counts), nodes.size), -np.inf)
        if own_gain.size:
            gains[self.me] = own_gain[keep]
        store = self._hidden_store(sp, msg, cand, pmask, others)
        split, winner, feat, bins, ml, bits = self._choose(sp, msg, nodes, keep, gains, store)
        reply = {"split": split, "winner": winner}
        passive = [q for q in others if (winner == q).any()]
        if not passive:
            reply.update(self._apply_now(sp, split, winner, {}))
            return reply
        t["pending_bits"] = (split, winner, feat, bins, ml)
        sealed = []
        for q in passive:
            mine = winner == q
            pay = {"feature": feat[mine], "bin": bins[mine], "missing_left": ml[mine]}
            sealed.append((q, S.DECISION, self.sealer.seal(q, S.DECISION, sp.tree_id, t["level"], pay)))
        reply.update(S.outgoing(sealed))
        return reply

    def _hidden_store(self, sp, msg, cand, pmask, others):
        """(party, node, feature) -> (sums, row counts) of every candidate
        and every feature of the other parties that ``pmask`` names."""
        t = sp.state
        c = t["nodes"].col
        blobs = S.from_message(msg, len(self.feature_counts), self.me)
        if sorted(blobs) != others:
            raise bad_message("a 'decide' must carry one sealed sums payload from every other party")
        slots = layout(self.spec, sp)
        ns = self.spec.n_stats
        s_all, e_all = t["nodes"].bounds(t["slotted"])
        n_rows_of = dict(zip(t["slotted"].tolist(), (e_all - s_all).tolist()))
        store = {}
        col = 0
        for p in range(len(self.feature_counts)):
            if p == self.me:
                continue
            k = self.feature_counts[p]
            need = np.flatnonzero(pmask[:, col:col + k].any(axis=0))
            col += k
            if p not in blobs:
                continue
            got = self.sealer.open(p, S.SUMS, sp.tree_id, t["level"], blobs[p])
            feats, listed, bins, hist = (got.get(x) for x in ("feats", "listed", "bins", "hist"))
            for name, a in (("feats", feats), ("listed", listed), ("bins", bins)):
                if not (isinstance(a, np.ndarray) and a.dtype.kind in "iu" and a.ndim == 1):
                    raise bad_message(f"party {p + 1}'s sealed sums hold {shown(a)} as {name!r}")
            if np.any(np.diff(feats) <= 0) or not np.isin(need, feats).all():
                raise bad_message(f"party {p + 1}'s sums are not for the features this level asks")
            if listed.shape != feats.shape or int(listed.sum()) != bins.size or (listed.size and listed.min() < 0):
                raise bad_message(f"party {p + 1}'s sums list their bins wrongly")
            n_bins, skip = self.party_bins[p]
            n_groups = bins.size
            slotted = t["slotted"]
            n_ct = slots.n_sums(n_groups, slotted.size)
            if not (isinstance(hist, np.ndarray) and hist.dtype == np.uint8 and hist.ndim == 2
                    and hist.shape[0] == n_ct):
                raise bad_message(f"party {p + 1}'s sealed sums are not {n_ct} ciphertexts of this key")
            cts = self.key.public.deserialize(hist, f"sums of party {p + 1}") if n_ct else []
            self.decrypted += len(cts)
            t0 = time.perf_counter()
            plain = P.parallel_map(self.key.decrypt, cts, sp.crypto_threads())
            self.decrypt_seconds += time.perf_counter() - t0
            vals = slots.unpack(plain, n_groups, slotted.size)
            at = 0
            for f, n_list in zip(feats.tolist(), listed.tolist()):
                fb = bins[at:at + n_list].astype(np.int64)
                nb = int(n_bins[f])
                ok = (fb < nb) | (fb == MISSING_BIN)
                if not ok.all() or np.any(np.diff(fb) <= 0) or np.any(fb == skip[f]):
                    raise bad_message(f"party {p + 1} listed bins that feature {f} cannot hold")
                for i, j in enumerate(slotted.tolist()):
                    h = np.zeros((N_SLOTS_BIN, ns), dtype=np.int64)
                    h[fb] = vals[at:at + n_list, i, :ns]
                    h[int(skip[f])] = c["ints"][j] - h.sum(axis=0)
                    w = self.spec.weights_of(h)
                    if slots.with_rows:     # the rows per bin (a row weighs at least 1)
                        cnt = np.zeros(N_SLOTS_BIN, dtype=np.int64)
                        cnt[fb] = vals[at:at + n_list, i, ns]
                        cnt[int(skip[f])] = n_rows_of[j] - cnt.sum()
                    else:
                        cnt = w
                    if not self.spec.in_bounds(h) or (cnt < 0).any() or (cnt > w).any() \
                            or np.any((cnt == 0) != (w == 0)):
                        raise ProtocolIntegrityError(f"sums of party {p + 1} are not sums of its rows; the "
                                                     "ciphertexts were altered or made under another key")
                    store[(p, j, f)] = (h, cnt)
                at += n_list
            self._derive(sp, p, np.setdiff1d(cand, t["slotted"]), feats, store)
        t["hstore"] = store
        return store

    def _derive(self, sp, p, nodes, feats, store):
        """Party ``p``'s histograms of ``nodes`` (candidates without slots):
        their parent's (kept from the last level) minus their sibling's."""
        t = sp.state
        if not nodes.size:
            return
        split_nodes, first = t["family"]
        last = t.get("hstore") or {}
        for j in nodes.tolist():
            off = j - int(first)
            parent, sib = int(split_nodes[off // 2]), (j + 1 if off % 2 == 0 else j - 1)
            for f in feats.tolist():
                if (p, parent, f) not in last or (p, sib, f) not in store:
                    raise bad_message(f"party {p + 1}'s feature {f} was not summed for node {parent}, whose "
                                      f"child {j} needs it (the feature masks changed between levels)")
                ph, pw = last[(p, parent, f)]
                sh, sw = store[(p, sib, f)]
                h, w = ph - sh, pw - sw
                if (w < 0).any() or not self.spec.in_bounds(h):
                    raise ProtocolIntegrityError(f"histograms of party {p + 1} are inconsistent between levels")
                store[(p, j, f)] = (h, w)

    # -- the level's partition, here alone -------------------------------------------
    def _apply_hidden(self, sp, msg):
        t = sp.state
        if t["pending_bits"] is None:
            raise bad_message("a 'hidden_apply' without a decision waiting for other parties' bits")
        split, winner, feat, bins, ml = t["pending_bits"]
        t["pending_bits"] = None
        blobs = S.from_message(msg, len(self.feature_counts), self.me)
        passive = sorted(set(winner.tolist()) - {self.me})
        if sorted(blobs) != passive:
            raise bad_message("a 'hidden_apply' must carry sealed bits from every other winner and no one else")
        tree = t["nodes"]
        sample = t["sample"]
        where = np.full(sp.n_rows, -1, dtype=np.int64)
        where[sample] = np.arange(sample.size)
        got = {}
        for q in passive:
            pay = self.sealer.open(q, S.BITS, sp.tree_id, t["level"], blobs[q])
            k = int((winner == q).sum())
            bits = S.check_bits(pay.get("bits"), k * sample.size, f"the threshold bits of party {q + 1}")
            got[q] = unpack_bits(bits, k * sample.size).reshape(k, sample.size)
        per_node = {}
        for q, b in got.items():
            mine = np.flatnonzero(winner == q)
            first = len(t["records"].setdefault(q, []))
            for i, at in enumerate(mine.tolist()):
                j = int(split[at])
                s, e = tree.bounds(np.array([j], dtype=np.int32))
                per_node[j] = b[i, where[tree.rows[int(s[0]):int(e[0])]]]
                tree.col["hidden_record"][j] = first + i
                t["records"][q].append(j)
        return self._apply_now(sp, split, winner, per_node)

    def _apply_now(self, sp, split, winner, per_node):
        """Apply the level (its own bits and the other winners' per node),
        then slot the next level's rows: the reply's ``n_left`` of every
        split and the sealed slots."""
        t = sp.state
        tree = t["nodes"]
        if not split.size:
            t["slot_cand"] = None
            return {"n_left": np.empty(0, dtype=np.int64)}
        starts, ends = tree.bounds(split)
        own = split[winner == self.me]
        os_, oe = tree.bounds(own)
        own_bits = unpack_bits(t["own_bits"], int((oe - os_).sum())) if own.size else np.empty(0, np.uint8)
        parts, at = [], 0
        own_at = {int(j): i for i, j in enumerate(own.tolist())}
        offs = np.concatenate(([0], np.cumsum(oe - os_)))
        for j, w in zip(split.tolist(), winner.tolist()):
            if w == self.me:
                i = own_at[j]
                parts.append(own_bits[offs[i]:offs[i + 1]])
            else:
                parts.append(per_node[j].astype(np.uint8))
        level_bits = np.concatenate(parts).astype(np.uint8)
        n_left = np.array([int(p.sum()) for p in parts], dtype=np.int64)
        packed = pack_bits(level_bits)
        sp.apply_checked({"split_nodes": split}, packed)
        t["decided_winner"] = t["own_bits"] = None
        children = np.arange(tree.n - 2 * split.size, tree.n, dtype=np.int32)
        s, e = tree.bounds(children)
        nxt = children[may_split(sp.settings, t["level"], e - s)]
        reply = {"n_left": n_left}
        reply.update(self._slots(sp, nxt))
        return reply

    def level_bits(self, sp, msg, nodes):
        return None     # never asked: it applies every level itself

    def finish(self, sp):
        out = super().finish(sp)
        tree = sp.state["nodes"]
        out["hidden_record"] = tree.trimmed(["hidden_record"])["hidden_record"]
        return out


# --------------------------------------------------------------------------- the master
class HiddenChooses(LabelHolderChooses):
    """The master's label channel in the hidden instance space: it relays
    the label holder's slotted rows to the other parties, their sums to the
    label holder and, for splits they won, the thresholds and their bits;
    it sends the other parties no node, no partition and no candidate."""

    def begin_tree(self, g, tree, counts, cw):
        return ChannelState(slots=None, n_left=None)

    def after_split(self, g, split_nodes, lefts, rights):
        pass

    def _sealed(self, reply, n_parties, want):
        """The label holder's sealed payloads of a reply, exactly ``want``, by party."""
        lh = self.label_party
        return {q: b for (q, _), b in self._only(S.from_reply(reply, lh, n_parties), lh, want).items()}

    def choose(self, g, tree, children, cand, masks, pending):
        n_parties = len(g.feature_counts)
        lh = self.label_party
        none = [None] * n_parties
        st = g.channel_state
        if not cand.size:
            return cand, None, pending, none
        others = [p for p in range(n_parties) if p != lh]
        want_slots = {(q, S.SLOTS) for q in others}
        if st.slots is None:
            reply = (yield [dict(pending[lh], op=SLOTS_OP) if p == lh else None for p in range(n_parties)])[lh]
            pending[lh] = {}
            st.slots = self._sealed(reply, n_parties, want_slots)
        slots, st.slots = st.slots, None
        sums = {}
        if others:
            # per-tree feature draws: the level's features; per-node draws: all (a derived child may
            # need a feature its parent's level did not)
            per_tree = g.params.feature_sampling == "tree"
            msgs = [dict(pending[p], op=SUMS_OP, feats=(np.flatnonzero(masks[p].any(axis=0)) if per_tree else
                                                        np.arange(masks[p].shape[1])).astype(np.int32),
                         **S.incoming([(lh, slots[p])])) if p in others else None for p in range(n_parties)]
            got = yield msgs
            for p in others:
                sums[p] = self._only(S.from_reply(got[p], p, n_parties), p, {(lh, S.SUMS)})[(lh, S.SUMS)]
                pending[p] = {}
        msg = {**pending[lh], "op": DECIDE, "cand": cand, "fmask": masks[lh],
               "pmask": np.ascontiguousarray(np.hstack([masks[p] for p in others]) if others
                                             else np.zeros((cand.size, 0), dtype=np.uint8)),
               **S.incoming([(p, sums[p]) for p in others])}
        reply = (yield [msg if p == lh else None for p in range(n_parties)])[lh]
        pending[lh] = {}
        split, winner = self.decided(reply, cand, n_parties)
        m = split.size
        passive = sorted(set(winner.tolist()) - {lh})
        if passive:
            decisions = self._sealed(reply, n_parties, {(q, S.DECISION) for q in passive})
            got = yield [{"op": BITS_OP, **S.incoming([(lh, decisions[p])])} if p in passive else None
                         for p in range(n_parties)]
            bits = [(p, self._only(S.from_reply(got[p], p, n_parties), p, {(lh, S.BITS)})[(lh, S.BITS)])
                    for p in passive]
            reply = (yield [{"op": APPLY_OP, **S.incoming(bits)} if p == lh else None
                            for p in range(n_parties)])[lh]
        st.n_left = reply.take("n_left", m)
        # the next level's slots come with the level's partition (none: no child may split)
        parts = S.from_reply(reply, lh, n_parties)
        st.slots = {q: blob for (q, _), blob in self._only(parts, lh, want_slots).items()} if parts else None
        got = [None] * n_parties
        for p in set(winner.tolist()):
            got[p] = True       # every winner's partition is done: no partition message
        return split.astype(np.int32), winner.astype(np.int64), pending, got

    def partition_msg(self, g, p, split_nodes, won, replies, child_masks):
        raise RuntimeError("the hidden instance space asks no party for a partition")

    def level_partition(self, g, tree, split_nodes, won, replies):
        n_parties = len(won)
        n_left = np.asarray(g.channel_state.n_left, dtype=np.int64)
        starts, ends = tree.bounds(split_nodes)
        if n_left.shape != split_nodes.shape or np.any(n_left < 0) or np.any(n_left > ends - starts):
            raise ValueError(f"party {self.label_party + 1} (the label holder) sent more left rows than a node holds")
        for p in range(n_parties):
            if won[p].size:
                tree.col["owner"][split_nodes[won[p]]] = p
        return [None] * n_parties, n_left, None

    def importance(self, g, master, p):
        if p == self.label_party:
            return np.zeros(master["children_left"].shape[0])
        return np.zeros(1)


# --------------------------------------------------------------------------- prediction
def record_bits(X, trees):
    """A passive party's prediction payload in the hidden instance space:
    every threshold's bit for every row, tree after tree (``bits``, packed),
    and the number of thresholds per tree (``n``)."""
    n_rows = X.shape[0]
    parts, counts = [], []
    for t in trees:
        f = np.asarray(t["hidden_feature"], dtype=np.int64)
        thr = np.asarray(t["hidden_threshold"], dtype=np.float64)
        ml = np.asarray(t["hidden_missing_left"], dtype=np.uint8)
        counts.append(f.size)
        for i in range(f.size):
            x = X[:, f[i]]
            left = np.where(np.isnan(x), ml[i] == 1, x <= thr[i])
            parts.append(left.astype(np.uint8))
    bits = np.concatenate(parts) if parts else np.empty(0, np.uint8)
    return {"bits": pack_bits(bits), "n": np.array(counts, dtype=np.int64), "rows": n_rows}


def route_hidden(trees, X, me, others, n_rows):
    """Every row's leaf in each of the label holder's ``trees`` (shape
    ``(len(trees), n_rows)``): its own splits on its columns ``X``, the
    other parties' from their threshold bits (``others``: party -> the
    opened :func:`record_bits` payload)."""
    per = {}
    for q, pay in others.items():
        n = int_array(pay.get("n"), f"party {q + 1}'s threshold counts")
        if n.shape != (len(trees),) or (n.size and n.min() < 0):
            raise bad_message(f"party {q + 1}'s threshold bits do not fit the trees")
        total = int(n.sum()) * n_rows
        bits = S.check_bits(pay.get("bits"), total, f"party {q + 1}'s threshold bits")
        flat = unpack_bits(bits, total).reshape(-1, n_rows) if total else np.empty((0, n_rows), np.uint8)
        starts = np.concatenate(([0], np.cumsum(n)))
        per[q] = (flat, starts)
    out = np.empty((len(trees), n_rows), dtype=np.int64)
    for i, t in enumerate(trees):
        if "hidden_record" not in t or "owner" not in t:
            raise bad_message(f"tree {i} of the label holder's model has no threshold numbers ('hidden_record'): "
                              "not a model of the hidden instance space")
        left, right = t["children_left"], t["children_right"]
        owner, rec = t["owner"], t["hidden_record"]
        feat, thr, ml = t["feature"], t["threshold"], t["missing_left"]
        node = np.zeros(n_rows, dtype=np.int64)
        while True:
            active = left[node] >= 0
            if not active.any():
                break
            idx = np.flatnonzero(active)
            nd = node[idx]
            go = np.zeros(idx.size, dtype=bool)
            for j in np.unique(nd).tolist():
                sel = nd == j
                rows = idx[sel]
                w = int(owner[j])
                if w == me:
                    x = X[rows, int(feat[j])]
                    go[sel] = np.where(np.isnan(x), ml[j] == 1, x <= thr[j])
                else:
                    flat, starts = per[w]
                    r = int(rec[j])
                    if not 0 <= r < starts[i + 1] - starts[i]:
                        raise bad_message(f"tree {i} names a threshold party {w + 1} did not give")
                    go[sel] = flat[starts[i] + r, rows] == 1
            node[idx] = np.where(go, left[nd], right[nd])
        out[i] = node
    return out


def opened_records(sealer, msg, place):
    """The other parties' :func:`record_bits` payloads of a message, opened: party -> payload."""
    blobs = S.from_message(msg, sealer.n_parties, sealer.me)
    others = [p for p in range(sealer.n_parties) if p != sealer.me]
    if sorted(blobs) != others:
        raise bad_message("the parties' threshold bits must come sealed from every other party")
    return {p: sealer.open(p, S.LEAF_SETS, *place, blobs[p]) for p in others}
