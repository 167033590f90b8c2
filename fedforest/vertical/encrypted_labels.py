"""Tree growth with Paillier-encrypted labels (``label_privacy = "paillier"``).

Roles (see docs/protocol.md, "Encrypted labels"):

* the **label holder** (:class:`LabelHolderSplitter`) scores its own features
  in plaintext like a plain party and, every level, sends the statistics of
  the new nodes encrypted under the master's key;
* every **other party** (:class:`EncryptedHistSplitter`) holds the labels only
  as ciphertexts and, for the (node, feature) pairs the master asks for, sums
  them into per-bin encrypted histograms (bootstrap multiplicities as scalar
  multiples), leaving out each feature's most frequent bin, and packs many
  bins into one ciphertext;
* the **master** (:class:`PaillierGrower`) holds the private key, decrypts,
  rebuilds full histograms (the left-out bin from the node total, the larger
  child's histogram as parent minus smaller child), checks them against the
  plaintext row counts, and evaluates candidates with the same kernel
  arithmetic as the plain mode, so both modes grow the same trees.

Statistics are exact integers in slots: class counts for classification;
for regression ``(w, w (q + B), w q^2)`` with ``y`` rounded to ``q * step``
(``step`` a power of two chosen so that every sum is exact in float64, see
:func:`regression_grid`); the plain mode grows the same trees on the rounded
targets.
"""
import math
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import gmpy2
import numpy as np

from ..crypto import paillier as P
from ..errors import InputError
from ..tree import criterion, splitter
from ..tree.binning import MISSING_BIN
from ..tree.builder import (PARTY_COLUMNS, Nodes, PartySplitter, TreeGrower, bad_message, check_fields,
                            gain_scale, int_array, min_leaf_weight, node_list, shown)

MAX_EXACT = 2 ** 53  # integers below this are exact in float64
N_SLOTS_BIN = MISSING_BIN + 1


class ProtocolIntegrityError(RuntimeError):
    """Decrypted statistics contradict the plaintext row counts: ciphertexts
    were altered, or made under another key."""


def regression_grid(y, n_total):
    """Round regression targets to ``q * step`` with integer ``q`` and ``step``
    a power of two, fine enough that ``n_total * q**2 < 2**53``: every weighted
    sum of ``q`` and ``q**2`` over at most ``n_total`` draws is then exact in
    float64 (and in the encrypted slots).  Returns ``(q, step, bias)`` where
    ``bias`` bounds ``|q|``."""
    y = np.asarray(y, dtype=np.float64)
    q_max = math.isqrt((MAX_EXACT - 1) // max(int(n_total), 1))
    top = float(np.max(np.abs(y))) if y.size else 0.0
    if top == 0.0:
        step = 1.0
    else:
        step = 2.0 ** math.ceil(math.log2(top / q_max))
        while top / step > q_max:  # guard against log2 rounding
            step *= 2.0
    q = np.rint(y / step).astype(np.int64)
    return q, step, int(q_max)


def rounded_targets(y, n_total):
    """The regression targets the encrypted mode effectively trains on."""
    q, step, _ = regression_grid(y, n_total)
    return q * step


# the fields of a slot layout in a message: (types, bounds)
SPEC_FIELDS = {"is_classification": ((bool,), None, None), "n_classes": ((int,), 1, 1 << 16),
               "n_total": ((int,), 1, 1 << 40), "key_length": ((int,), 256, 16_384),
               "step": ((float,), 0.0, math.inf), "bias": ((int,), 0, MAX_EXACT),
               "n_stats": ((int,), 1, 1 << 16), "width": ((int,), 1, 16_384),
               "per_ciphertext": ((int,), 1, 16_384)}


def party_spec(values, is_classification, n_classes, n_total, key_length, slot_bits):
    """The slot layout a party without the labels builds itself for one fit,
    once the master's ``values`` are found to describe it (ProtocolError naming
    the first field that differs).  Only the regression ``step`` depends on the
    labels: it is taken from ``values`` when it is a power of two."""
    step, bias = 1.0, 0
    if not is_classification:
        step = values.get("step") if isinstance(values, dict) else None
        if not (isinstance(step, float) and math.isfinite(step) and step > 0
                and math.frexp(step)[0] == 0.5):
            raise bad_message(f"slot layout field 'step' must be a power of two, got {shown(step)}")
        bias = math.isqrt((MAX_EXACT - 1) // max(int(n_total), 1))
    own = EncryptionSpec(is_classification, n_classes, n_total, key_length, slot_bits, step=step,
                         bias=bias)
    check_fields(values, own.to_dict(), "the slot layout")
    return own


class EncryptionSpec:
    """Slot layout of the encrypted statistics of one training (picklable).

    Every row value, node total and histogram bin is ``n_stats`` slots of
    ``width`` bits; ``per_ciphertext`` such values share one ciphertext."""

    def __init__(self, is_classification, n_classes, n_total, key_length, slot_bits=None,
                 step=1.0, bias=0):
        self.is_classification = bool(is_classification)
        self.n_classes = int(n_classes)
        self.n_total = int(n_total)
        self.key_length = int(key_length)
        self.step = float(step)
        self.bias = int(bias)
        self.n_stats = self.n_classes if self.is_classification else 3
        if self.is_classification:
            max_sum = self.n_total
        else:
            max_sum = max(self.n_total * 2 * self.bias, self.n_total * self.bias ** 2, self.n_total)
        self.width = int(slot_bits) if slot_bits else P.Slots.width_for(max_sum)
        self.slots = P.Slots(self.width, self.key_length)
        self.slots.check_capacity(max_sum, "slot_bits")
        self.per_ciphertext = self.slots.per_plaintext // self.n_stats
        if self.per_ciphertext < 1:
            raise InputError("classes", f"{self.n_stats} statistics of {self.width} bits do not fit "
                                        f"one {self.key_length}-bit plaintext")

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "slots"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.slots = P.Slots(self.width, self.key_length)

    def to_dict(self):
        """Plain values, as the layout travels in a message."""
        return self.__getstate__()

    @classmethod
    def from_dict(cls, values):
        """The layout a message describes, rebuilt from its defining fields;
        ProtocolError when a field is malformed or a derived one (slots,
        statistics, values per ciphertext) disagrees with the rebuilt layout."""
        if not isinstance(values, dict) or set(values) != set(SPEC_FIELDS):
            raise bad_message(f"the slot layout must be a table of the fields {list(SPEC_FIELDS)}, "
                              f"got {shown(values)}")
        for k, (kinds, lo, hi) in SPEC_FIELDS.items():
            v = values[k]
            if type(v) not in kinds or (lo is not None and not lo <= v <= hi):
                raise bad_message(f"slot layout field {k!r} is {shown(v)}")
        try:
            out = cls(values["is_classification"], values["n_classes"], values["n_total"],
                      values["key_length"], values["width"], step=values["step"], bias=values["bias"])
        except InputError as exc:
            raise bad_message(f"the slot layout does not fit: {exc}") from None
        check_fields(values, out.to_dict(), "the slot layout")
        return out

    @property
    def value_bits(self):
        return self.width * self.n_stats

    def row_plaintexts(self, codes):
        """One plaintext per row: a one-hot class slot, or ``(1, q + bias, q**2)``."""
        if self.is_classification:
            return P.one_hot_plaintexts(codes, self.n_classes, self.slots)
        return [self.slots.pack_plain((1, int(q) + self.bias, int(q) * int(q))) for q in codes]

    def pack_values(self, values):
        """Plaintexts holding the (k, n_stats) integer array ``values``, in order."""
        values = np.asarray(values, dtype=np.int64).reshape(-1, self.n_stats)
        return [self.slots.pack_plain(values[i:i + self.per_ciphertext].ravel().tolist())
                for i in range(0, values.shape[0], self.per_ciphertext)]

    def unpack_values(self, plaintexts, n_values):
        """Inverse of :meth:`pack_values` (also of a Horner pack of value ciphertexts)."""
        out = np.empty((n_values, self.n_stats), dtype=np.int64)
        for i, pt in enumerate(plaintexts):
            k = min(self.per_ciphertext, n_values - i * self.per_ciphertext)
            out[i * self.per_ciphertext: i * self.per_ciphertext + k] = np.array(
                self.slots.unpack(pt, k * self.n_stats), dtype=np.int64).reshape(k, self.n_stats)
        return out

    def n_ciphertexts(self, n_values):
        return -(-n_values // self.per_ciphertext)

    def to_float(self, ints):
        """Float statistics (as the plain kernels hold them) from exact slot sums."""
        ints = np.asarray(ints, dtype=np.int64)
        if self.is_classification:
            return ints.astype(np.float64)
        out = np.empty(ints.shape, dtype=np.float64)
        out[..., 0] = ints[..., 0]
        out[..., 1] = (ints[..., 1] - self.bias * ints[..., 0]).astype(np.float64) * self.step
        out[..., 2] = ints[..., 2].astype(np.float64) * (self.step * self.step)
        return out

    def in_bounds(self, ints):
        """Whether every slot of the sums ``ints`` lies where sums of rows can:
        non-negative, and (regression) the target slots within ``[0, 2 B w]``
        and ``[0, B**2 w]`` for ``w`` rows."""
        ints = np.asarray(ints, dtype=np.int64)
        if (ints < 0).any():
            return False
        if self.is_classification:
            return True
        w = ints[..., 0]
        return bool(np.all(ints[..., 1] <= 2 * self.bias * w) and np.all(ints[..., 2] <= self.bias ** 2 * w))

    def weights_of(self, ints):
        """Bootstrap weight of each value (sum of classes, or the weight slot)."""
        ints = np.asarray(ints, dtype=np.int64)
        return ints.sum(axis=-1) if self.is_classification else ints[..., 0]


def bin_counts(seg, nb):
    """Per-bin values of one (node, feature) pair as they travel (``nb`` bins,
    then the missing bin) spread over the ``MISSING_BIN + 1`` bin slots."""
    out = np.zeros(N_SLOTS_BIN, dtype=np.int64)
    out[:nb] = seg[:nb]
    out[MISSING_BIN] = seg[nb]
    return out


def hist_layout(feats, n_bins, skip, cnt_all):
    """The encrypted sums a party sends for the (node, feature) pairs of the
    features ``feats``: per pair (its row counts per bin slot, the bins whose
    sums are sent: every bin with rows but the feature's most frequent one),
    and the number of sums in all.  ``cnt_all`` holds the pairs' row counts
    back to back (``n_bins`` of the feature, then the missing bin)."""
    nb = n_bins[np.asarray(feats, dtype=np.int64)].astype(np.int64) if len(feats) else np.empty(0, np.int64)
    seg = np.concatenate(([0], np.cumsum(nb + 1)))
    if cnt_all.shape[0] != seg[-1]:
        raise bad_message(f"the bin counts hold {cnt_all.shape[0]} entries, the pairs need {int(seg[-1])}")
    layout, n_values = [], 0
    slots = np.arange(N_SLOTS_BIN)
    for i, f in enumerate(feats):
        cnt = bin_counts(cnt_all[seg[i]:seg[i + 1]].astype(np.int64), int(nb[i]))
        inc = np.flatnonzero((cnt > 0) & (slots != skip[f]))
        layout.append((cnt, inc))
        n_values += inc.size
    return seg, layout, n_values


# ---------------------------------------------------------------------------
# Label encryption (the label holder, once per training)
# ---------------------------------------------------------------------------
def _encrypt_chunk(n, plaintexts):
    key = P.PublicKey(n)
    return [int(c) for c in key.encrypt_many(plaintexts)]


def encrypt_rows(public_key, plaintexts, workers=1, factors=None):
    """Encrypt every row's plaintext with fresh randomness: the key holder's
    ready-made factors ``r^n mod n²`` when given (one per row), else drawn
    here, with ``workers`` > 1 local processes."""
    if factors is not None:
        return public_key.encrypt_with(plaintexts, factors, "randomness from the master")
    if workers <= 1 or len(plaintexts) < 2 * workers:
        return public_key.encrypt_many(plaintexts)
    ints = [int(v) for v in plaintexts]
    size = -(-len(ints) // workers)
    chunks = [ints[i:i + size] for i in range(0, len(ints), size)]
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        parts = pool.map(_encrypt_chunk, [int(public_key.n)] * len(chunks), chunks)
        return [gmpy2.mpz(c) for part in parts for c in part]


def node_int_stats(spec, codes, counts, rows, starts, ends):
    """Exact integer statistics of nodes: class counts, or (w, w (q+B), w q^2)."""
    out = np.zeros((starts.shape[0], spec.n_stats), dtype=np.int64)
    w_all = counts.astype(np.int64)
    for j in range(starts.shape[0]):
        r = rows[starts[j]:ends[j]]
        w = w_all[r]
        if spec.is_classification:
            out[j] = np.bincount(codes[r], weights=w, minlength=spec.n_stats).astype(np.int64)
        else:
            q = codes[r]
            out[j] = (w.sum(), (w * (q + spec.bias)).sum(), (w * q * q).sum())
    return out


class LabelHolderSplitter(PartySplitter):
    """The label holder: plaintext scoring of its own features, encrypted node statistics."""

    tree_threads = False  # the encryption holds the GIL: threads would not help
    child_stats = False   # the key holder checks statistics it decrypts against its own

    def __init__(self, X, settings, labels, codes, spec, public_key):
        super().__init__(X, settings, labels)
        self.codes = np.asarray(codes, dtype=np.int64)
        self.spec = spec
        self.key = public_key

    op_keys = dict(PartySplitter.op_keys, find=("nodes", "fmask", "stat_nodes"))

    def _begin(self, msg):
        super()._begin(msg)
        self._tree["counts"] = msg["counts"]

    def _check_find(self, msg):
        """A ``find`` also asks the statistics of every open leaf (``stat_nodes``)."""
        stat = int_array(msg.get("stat_nodes"), "'stat_nodes'")
        if not np.array_equal(stat, self._tree["open"]):
            raise bad_message("'stat_nodes' must list the open leaves of the tree")
        return dict(super()._check_find(msg), stat_nodes=self._tree["open"])

    def _find(self, msg):
        nodes = msg["nodes"]
        reply = super()._find(msg) if nodes.size else {"gain": np.empty(0)}
        tree = self._tree["nodes"]
        ints = self._node_ints(tree.rows, *tree.bounds(msg["stat_nodes"]))
        reply["stats"] = self.key.serialize(self.key.encrypt_many(self.spec.pack_values(ints)))
        return reply

    def _node_ints(self, rows, starts, ends):
        """The exact integer statistics of nodes, in the slot layout."""
        return node_int_stats(self.spec, self.codes, self._tree["counts"], rows, starts, ends)


class EncryptedHistSplitter(PartySplitter):
    """A party without the labels: encrypted per-bin histograms on request."""

    tree_threads = False  # the homomorphic sums hold the GIL: threads would not help
    child_stats = False   # no plain labels here
    op_keys = dict(PartySplitter.op_keys, find=("pair_node", "pair_feat"),
                   partition=("nodes", "feature", "bin", "missing_left"))

    def __init__(self, X, settings, labels_ct, spec, public_key):
        if settings.split_method != "hist":
            raise InputError("split_method", "encrypted labels need split_method = 'hist'")
        super().__init__(X, settings, None)
        self.spec = spec
        self.key = public_key
        self.enc = labels_ct
        # doubled rows are the commonest bootstrap multiplicity above one: their
        # squares are computed once, not per tree
        nsq = public_key.nsq
        self.enc2 = [c * c % nsq for c in labels_ct]
        # each feature's most frequent bin is left out and derived by the key holder
        self.skip = np.array([np.bincount(self.Xb[:, f], minlength=N_SLOTS_BIN).argmax()
                              for f in range(self.n_features)], dtype=np.int32)

    def _begin(self, msg):
        counts = np.asarray(msg["counts"])
        nsq = self.key.nsq
        wc = [None] * counts.shape[0]
        enc, enc2 = self.enc, self.enc2
        for r in np.flatnonzero(counts).tolist():
            k = int(counts[r])
            if k == 1:
                wc[r] = enc[r]
            elif k == 2:
                wc[r] = enc2[r]
            elif k == 3:
                wc[r] = enc2[r] * enc[r] % nsq
            else:
                wc[r] = P.gmpy2.powmod(enc[r], k, nsq)
        self._tree = {"nodes": Nodes(counts, PARTY_COLUMNS), "counts": counts, "wc": wc}

    def _check_find(self, msg):
        """A ``find``: distinct (open leaf, own feature) pairs, sorted by node then feature."""
        t = self._tree
        if t["searched"] is not None:
            raise bad_message("a second 'find' for one level of the tree")
        node = int_array(msg.get("pair_node"), "'pair_node'")
        feat = int_array(msg.get("pair_feat"), "'pair_feat'")
        if node.shape != feat.shape:
            raise bad_message("'pair_node' and 'pair_feat' differ in length")
        if node.size:
            if node[0] < t["open_ids"].start or node[-1] >= t["open_ids"].stop:   # node is sorted (below)
                raise bad_message("'pair_node' names nodes that are not open leaves of the tree")
            if feat.min() < 0 or feat.max() >= self.n_features:
                raise bad_message(f"'pair_feat' must name features of this party (0 to "
                                  f"{self.n_features - 1})")
            key = node.astype(np.int64) * self.n_features + feat.astype(np.int64)
            if np.any(key[1:] <= key[:-1]):
                raise bad_message("the (node, feature) pairs must be distinct, sorted by node then feature")
        t["searched"] = np.unique(node).astype(np.int32)
        return dict(msg, pair_node=node.astype(np.int64), pair_feat=feat.astype(np.int64))

    def _check_partition(self, msg):
        """A ``partition`` of open leaves on splits the key holder chose: one of this
        party's features, one of its bins and a missing-value side per node."""
        t = self._tree
        if t["partitioned"] is not None:
            raise bad_message("a second 'partition' for one level of the tree")
        nodes = node_list(msg.get("nodes"), "'nodes'", t["open_ids"])
        m = nodes.size
        arrays = {k: int_array(msg.get(k), repr(k)) for k in ("feature", "bin", "missing_left")}
        for k, a in arrays.items():
            if a.shape != (m,):
                raise bad_message(f"{k!r} must hold one value per node ({m}), got {shown(a)}")
        feat, b, ml = arrays["feature"], arrays["bin"], arrays["missing_left"]
        if m:
            if feat.min() < 0 or feat.max() >= self.n_features:
                raise bad_message(f"'feature' must name features of this party (0 to "
                                  f"{self.n_features - 1})")
            if b.min() < 0 or np.any(b >= self.n_bins[feat.astype(np.int64)]):
                raise bad_message("'bin' must name a bin of its feature (0 to its number of bins - 1)")
            if not np.isin(ml, (0, 1)).all():
                raise bad_message("'missing_left' must be 0 or 1")
        t["partitioned"] = nodes
        return dict(msg, nodes=nodes, feature=feat.astype(np.int32), bin=b.astype(np.int32),
                    missing_left=ml.astype(np.uint8))

    def _partition(self, msg):
        """Partition on the split the key holder chose from this party's encrypted histograms."""
        c = self._tree["nodes"].col
        nodes = msg["nodes"]
        c["cand_feature"][nodes] = msg["feature"]
        c["cand_threshold"][nodes] = self.bin_threshold(msg["feature"], msg["bin"])
        c["cand_bin"][nodes] = msg["bin"]
        c["cand_missing_left"][nodes] = msg["missing_left"]
        return super()._partition(msg)

    def _find(self, msg):
        tree = self._tree["nodes"]
        counts = self._tree["counts"]
        wc = self._tree["wc"]
        nsq = self.key.nsq
        values, cnt_parts, wcnt_parts = [], [], []
        for node, f in zip(msg["pair_node"].tolist(), msg["pair_feat"].tolist()):
            s, e = tree.bounds(np.array([node]))
            rows = tree.rows[int(s[0]):int(e[0])]
            b = self.Xb[rows, f]
            nb = int(self.n_bins[f])
            cnt = np.bincount(b, minlength=N_SLOTS_BIN)
            wcnt = np.bincount(b, weights=counts[rows], minlength=N_SLOTS_BIN)
            cnt_parts.append(np.append(cnt[:nb], cnt[MISSING_BIN]))
            wcnt_parts.append(np.append(wcnt[:nb], wcnt[MISSING_BIN]))
            sel = b != self.skip[f]
            rs = rows[sel]
            order = np.argsort(b[sel], kind="stable")
            rs = rs[order]
            cuts = np.flatnonzero(np.diff(b[sel][order])) + 1
            for group in np.split(rs, cuts) if rs.size else ():
                it = iter(group.tolist())
                acc = wc[next(it)]
                for r in it:
                    acc = acc * wc[r] % nsq
                values.append(acc)
        bits = self.spec.value_bits
        per = self.spec.per_ciphertext
        packed = [self.key.pack(values[i:i + per], bits) for i in range(0, len(values), per)]
        return {"hist": self.key.serialize(packed),
                "cnt": np.concatenate(cnt_parts).astype(np.uint32) if cnt_parts else np.empty(0, np.uint32),
                "wcnt": np.concatenate(wcnt_parts).astype(np.uint32) if wcnt_parts else np.empty(0, np.uint32)}


# ---------------------------------------------------------------------------
# The key holder
# ---------------------------------------------------------------------------
class LabelInfo:
    """What the key holder knows of the labels: their kind and shape, not values."""

    def __init__(self, is_classification, n_classes, n_rows):
        self.is_classification = bool(is_classification)
        self.n_classes = int(n_classes)
        self.n_rows = int(n_rows)

    @property
    def n_stats(self):
        return self.n_classes if self.is_classification else 3


class PaillierGrower(TreeGrower):
    """The master's side with encrypted labels: it decrypts, it never sees labels per row.

    ``party_bins``: per party, ``(n_bins, skip_bin)`` arrays of its features, or
    None for the label holder (party index ``label_party``)."""

    parallel_steps = False   # decryption counters and key use stay on one thread
    stats_from_winners = False   # statistics come from decrypted sums, checked against the rows here

    def __init__(self, parties, info, params, settings, feature_counts, private_key, spec,
                 label_party, party_bins):
        super().__init__(parties, info, params, settings, feature_counts)
        self.key = private_key
        self.spec = spec
        self.label_party = label_party
        self.party_bins = party_bins
        self._tally = {"decrypted": 0}   # shared by the per-tree copies of a batch

    @property
    def decrypted(self):
        """Ciphertexts decrypted so far."""
        return self._tally["decrypted"]

    def _begin_tree(self, tree, counts, cw):
        self._counts = counts.astype(np.int64)
        self._store = {}     # (party, node, feature) -> (hist ints, cnt) of the last level
        self._family = {}    # child -> (parent, sibling)
        self._chosen = {}

    def _after_split(self, split_nodes, lefts, rights):
        for p, left, right in zip(split_nodes.tolist(), lefts.tolist(), rights.tolist()):
            self._family[left] = (p, right)
            self._family[right] = (p, left)

    def _to_float(self, ints):
        """Float statistics of decrypted slot sums (the tree's label mode may rescale them)."""
        return self.spec.to_float(ints)

    def _decrypt(self, blocks, n_values, what):
        cts = self.key.public.deserialize(blocks, what)
        if len(cts) != self.spec.n_ciphertexts(n_values):
            raise ProtocolIntegrityError(f"{what}: {len(cts)} ciphertexts for {n_values} values")
        self._tally["decrypted"] += len(cts)
        try:
            return self.spec.unpack_values([self.key.decrypt(c) for c in cts], n_values)
        except InputError:
            raise ProtocolIntegrityError(f"{what}: a decrypted value overflows its slots; the "
                                         "ciphertexts were altered or made under another key") from None

    def _requests(self, tree, p, cand, mask):
        """(node, feature) pairs party ``p`` must compute, and those derived here
        as parent minus sibling."""
        c = tree.col
        need = [(int(j), int(f)) for j, row in zip(cand.tolist(), mask) for f in np.flatnonzero(row)]
        compute, derive = set(), []
        for j, f in need:
            fam = self._family.get(j)
            if fam is not None and (p, fam[0], f) in self._store:
                sib = fam[1]
                smaller = (c["count"][sib] < c["count"][j]) or (c["count"][sib] == c["count"][j] and sib < j)
                if smaller:
                    derive.append((j, f))
                    compute.add((sib, f))
                    continue
            compute.add((j, f))
        return sorted(compute), derive

    def _search(self, tree, children, cand, masks, pending):
        n_parties = len(self.feature_counts)
        lh = self.label_party
        msgs = [None] * n_parties
        empty_mask = np.zeros((0, self.feature_counts[lh]), dtype=np.uint8)
        msgs[lh] = dict(pending[lh], op="find", nodes=cand, stat_nodes=children,
                        fmask=masks[lh] if cand.size else empty_mask)
        plan = {}
        if cand.size:
            for p in range(n_parties):
                if p == lh:
                    continue
                compute, derive = self._requests(tree, p, cand, masks[p])
                plan[p] = (compute, derive)
                arr = np.array(compute, dtype=np.int32).reshape(-1, 2)
                msgs[p] = dict(pending[p], op="find", pair_node=arr[:, 0].copy(), pair_feat=arr[:, 1].copy())
        replies = yield msgs
        pending = [{} if msgs[p] is not None else pending[p] for p in range(n_parties)]
        # node statistics from the label holder
        ints = self._decrypt(replies[lh].take("stats", self.spec.n_ciphertexts(children.size)),
                             children.size, f"node statistics of party {lh + 1}")
        starts, ends = tree.bounds(children)
        expected = np.array([self._counts[tree.rows[s:e]].sum() for s, e in zip(starts, ends)])
        if not np.array_equal(self.spec.weights_of(ints), expected):
            raise ProtocolIntegrityError(f"node statistics of party {lh + 1} do not match the "
                                         "bootstrap weights; the ciphertexts were altered or made "
                                         "under another key")
        stats = self._to_float(ints)
        w, imp = criterion.stats_weight_impurity(stats, self.s.is_classification, self.s.crit,
                                                 self.s.reg_lambda)
        self._set_stats(tree, children, stats, w, imp)
        node_ints = dict(zip(children.tolist(), ints))
        if not cand.size:
            self._store = {}
            return cand, None, pending
        keep = self._searchable(tree, cand)
        nodes = cand[keep]
        gains = np.full((n_parties, nodes.size), -np.inf)
        gains[lh] = replies[lh].take("gain", cand.size)[keep]
        store = {}
        for p, (compute, derive) in plan.items():
            self._decode_hists(p, compute, replies[p], node_ints, store)
            for j, f in derive:
                parent, sib = self._family[j]
                ph, pc = self._store[(p, parent, f)]
                sh, sc = store[(p, sib, f)]
                h, cn = ph - sh, pc - sc
                if (cn < 0).any() or (self.spec.weights_of(h) < 0).any():
                    raise ProtocolIntegrityError(f"histograms of party {p + 1} are inconsistent "
                                                 "between levels")
                store[(p, j, f)] = (h, cn)
            gains[p] = self._evaluate(p, tree, nodes, masks[p][keep], store)
        self._store = store
        return nodes, gains, pending

    def _decode_hists(self, p, compute, reply, node_ints, store):
        n_bins, skip = self.party_bins[p]
        nb = n_bins[[f for _, f in compute]].astype(np.int64)
        seg = np.concatenate(([0], np.cumsum(nb + 1)))
        cnt_all = reply.take("cnt", int(seg[-1])).astype(np.int64)
        wcnt_all = reply.take("wcnt", int(seg[-1])).astype(np.int64)
        if cnt_all.shape[0] != seg[-1] or wcnt_all.shape[0] != seg[-1]:
            raise ProtocolIntegrityError(f"party {p + 1} sent bin counts of the wrong size")
        layout = []
        for i, (j, f) in enumerate(compute):
            cnt = np.zeros(N_SLOTS_BIN, dtype=np.int64)
            wcnt = np.zeros(N_SLOTS_BIN, dtype=np.int64)
            k = int(nb[i])
            cnt[:k], cnt[MISSING_BIN] = cnt_all[seg[i]:seg[i] + k], cnt_all[seg[i] + k]
            wcnt[:k], wcnt[MISSING_BIN] = wcnt_all[seg[i]:seg[i] + k], wcnt_all[seg[i] + k]
            inc = np.flatnonzero((cnt > 0) & (np.arange(N_SLOTS_BIN) != skip[f]))
            layout.append((cnt, wcnt, inc))
        n_values = sum(inc.size for _, _, inc in layout)
        values = self._decrypt(reply.take("hist", self.spec.n_ciphertexts(n_values)), n_values, f"histograms of party {p + 1}")
        pos = 0
        for (j, f), (cnt, wcnt, inc) in zip(compute, layout):
            h = np.zeros((N_SLOTS_BIN, self.spec.n_stats), dtype=np.int64)
            h[inc] = values[pos:pos + inc.size]
            pos += inc.size
            s = int(skip[f])
            h[s] = node_ints[j] - h.sum(axis=0)  # every requested node is a child of this level
            w = self.spec.weights_of(h)
            if not (np.array_equal(w, wcnt) and (h >= 0).all() and not h[w == 0].any()):
                raise ProtocolIntegrityError(f"histograms of party {p + 1} do not match its row "
                                             "counts; the ciphertexts were altered or made under "
                                             "another key")
            store[(p, j, f)] = (h, cnt)

    def _evaluate(self, p, tree, nodes, mask, store):
        pairs = [(i, int(f)) for i, row in enumerate(mask) for f in np.flatnonzero(row)]
        n_bins, _ = self.party_bins[p]
        if not pairs:
            self._chosen[p] = (nodes, np.full(nodes.size, -1, np.int32), np.zeros(nodes.size, np.int32),
                               np.zeros(nodes.size, np.uint8))
            return np.full(nodes.size, -np.inf)
        hists = np.empty((len(pairs), N_SLOTS_BIN, self.spec.n_stats))
        cnts = np.empty((len(pairs), N_SLOTS_BIN), dtype=np.int64)
        for k, (i, f) in enumerate(pairs):
            h, cn = store[(p, int(nodes[i]), f)]
            hists[k] = self._to_float(h)
            cnts[k] = cn
        pn = np.array([i for i, _ in pairs], dtype=np.int32)
        pf = np.array([f for _, f in pairs], dtype=np.int32)
        c = tree.col
        gain, feat, b, ml = splitter.best_splits_from_hists(
            hists, cnts, pn, pf, n_bins[pf].astype(np.int32), c["stats"][nodes], c["count"][nodes],
            self.s.is_classification, self.labels.n_stats, self.s.crit, self.s.reg_lambda,
            gain_scale(self.s, self._counts.sum()), self.s.min_samples_leaf,
            min_leaf_weight(self.s, self._counts.sum()))
        self._chosen[p] = (nodes, feat, b, ml)
        return gain

    def _partition_msg(self, p, split_nodes, won):
        msg = super()._partition_msg(p, split_nodes, won)
        if p != self.label_party:
            nodes, feat, b, ml = self._chosen[p]
            at = np.searchsorted(nodes, split_nodes[won])
            msg.update(feature=feat[at], bin=b[at], missing_left=ml[at])
        return msg
