"""Tree growth with Paillier-encrypted labels (``label_privacy = "paillier"``).

The slot layout of the encrypted statistics and the parties without labels;
the label holder and the master are in :mod:`fedforest.vertical.paillier`
(see docs/protocol.md, "Encrypted labels"):

* the **label holder** (:class:`~.paillier.holder.KeyHolder`) makes
  the key pair, encrypts its rows with its own randomness, scores its own
  features in plaintext, decrypts the other parties' sums and chooses every
  split, with the same kernel arithmetic as the plain mode;
* every **other party** (:class:`CipherSums`, :class:`EncryptedLabels`) holds the labels only
  as ciphertexts and, for the (node, feature) pairs the master asks for, sums
  them into per-bin encrypted histograms (bootstrap multiplicities as scalar
  multiples), leaving out each feature's most frequent bin, and packs many
  bins into one ciphertext;
* the **master** (:class:`~.paillier.relay.LabelHolderChooses`) coordinates and
  relays; it holds no key.

Statistics are exact integers in slots: class counts for classification;
for regression ``(w, w (q + B), w q^2)`` with ``y`` rounded to ``q * step``
(``step`` a power of two chosen so that every sum is exact in float64, see
:func:`regression_grid`); the plain mode grows the same trees on the rounded
targets.  A bin's weight ``w`` travels in plaintext beside its sums, so the
row ciphertexts leave out what it gives (the first class's count, the weight
slot) and every sum travels in as few bits as a sum of that weight can need
(:meth:`EncryptionSpec.sum_widths`): a bin of one row costs one bit of
plaintext in a two-class forest.
"""
import contextlib
import math
import time

import gmpy2
import numpy as np

from ..crypto import paillier as P
from ..errors import InputError
from ..tree.binning import MISSING_BIN
from ..tree import partitioner
from ..tree.growth import PARTY_COLUMNS, Nodes, may_split
from ..tree.labels import RowLabels
from .messages import MASK_DTYPES, bad_message, check_fields, int_array, node_list, shown, sorted_subset
from .party_splitter import OwnSplits
from .paillier import sealed as S

# a partition's fields for applying the level and summing the next one at once
AHEAD_KEYS = ("level_nodes", "child_fmask")
MAX_EXACT = 2 ** 53  # integers below this are exact in float64
N_SLOTS_BIN = MISSING_BIN + 1
#: the highest bits of a plaintext of packed sums stay free: a ciphertext altered or
#: made under another key decrypts to a uniform number, which shows bits there
#: (and is refused) but for a chance of 2**-64, however narrow the sums below
SPARE_BITS = 64


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
        """Bits of a full statistics vector (``n_stats`` slots of ``width`` bits)."""
        return self.width * self.n_stats

    # -- the row plaintexts and per-bin sums of the shared instance space ---------
    # A row plaintext holds ``n_slots`` slots of ``width`` bits: the statistics but the
    # first (the first class's count, or the weight), which the label holder derives from
    # the bin's weight; every sum then travels in :meth:`sum_widths` bits.
    @property
    def n_slots(self):
        """Slots of a row plaintext: the classes but the first, or ``(q + B, q**2)``."""
        return max(self.n_classes - 1, 1) if self.is_classification else 2

    @property
    def first_implied(self):
        """Whether the first statistic is left out of the row plaintexts (derived
        from a bin's weight): always but for a single class."""
        return not self.is_classification or self.n_classes > 1

    @property
    def top_bound(self):
        """The largest value of a row's highest slot at weight 1."""
        return 1 if self.is_classification else 2 * self.bias

    def row_plaintexts(self, codes):
        """One plaintext per row: a one-hot slot of its class (none for the
        first class), or ``(q + bias, q**2)``."""
        if self.is_classification:
            if not self.first_implied:
                return [gmpy2.mpz(1)] * len(codes)
            unit = [gmpy2.mpz(0)] + [gmpy2.mpz(1) << (self.width * (self.n_classes - 1 - k))
                                     for k in range(1, self.n_classes)]
            return [unit[int(c)] for c in codes]
        return [self.slots.pack_plain((int(q) + self.bias, int(q) * int(q))) for q in codes]

    def sum_widths(self, weights):
        """Bits each sum of rows of total bootstrap weight ``weights`` travels in:
        full slots below, the highest slot as wide as ``top_bound * w`` needs."""
        low = (self.n_slots - 1) * self.width
        top = self.top_bound
        return [max(1, low + (top * int(w)).bit_length()) for w in weights]

    def sum_runs(self, widths):
        """Where each ciphertext's values begin (then the end): runs of
        consecutive values, each as long as ``key_length - 1 - SPARE_BITS``
        bits allow (a value wider than that alone)."""
        cap = self.key_length - 1 - SPARE_BITS
        starts, used = [0], 0
        for i, w in enumerate(widths):
            if used + w > cap and used:
                starts.append(i)
                used = 0
            used += w
        if not widths:
            return [0]
        starts.append(len(widths))
        return starts

    def split_sums(self, plaintexts, widths, runs):
        """The slot values ``(k, n_slots)`` of the sums in ``plaintexts`` (one
        per run of :meth:`sum_runs`); InputError when a plaintext holds more
        bits than its values."""
        n_slots, width = self.n_slots, self.width
        out = np.zeros((len(widths), n_slots), dtype=np.int64)
        low_mask = (1 << width) - 1
        for r, pt in enumerate(plaintexts):
            pt = int(pt)
            for i in range(runs[r + 1] - 1, runs[r] - 1, -1):
                w = widths[i]
                v = pt & ((1 << w) - 1)
                pt >>= w
                for s in range(n_slots - 1, 0, -1):
                    out[i, s] = v & low_mask
                    v >>= width
                out[i, 0] = v
            if pt:
                raise InputError("slot value", "a decrypted value overflows its slots")
        return out

    def full_sums(self, slot_values, weights):
        """The ``(k, n_stats)`` statistics of sums from their slot values and weights."""
        slot_values = np.asarray(slot_values, dtype=np.int64).reshape(-1, self.n_slots)
        weights = np.asarray(weights, dtype=np.int64)
        if not self.first_implied:
            return slot_values.copy()
        out = np.empty((slot_values.shape[0], self.n_stats), dtype=np.int64)
        out[:, 1:] = slot_values
        out[:, 0] = weights - slot_values.sum(axis=1) if self.is_classification else weights
        return out

    def sum_plaintexts(self, values):
        """Plaintexts of the (k, n_stats) statistics ``values`` as their sums travel
        (the widths of their weights), with the widths and runs."""
        values = np.asarray(values, dtype=np.int64).reshape(-1, self.n_stats)
        weights = self.weights_of(values)
        widths = self.sum_widths(weights)
        runs = self.sum_runs(widths)
        slots = values[:, 1:] if self.first_implied else values
        out = []
        for r in range(len(runs) - 1):
            acc = 0
            for i in range(runs[r], runs[r + 1]):
                v = 0
                for x in slots[i].tolist():
                    v = (v << self.width) | x
                acc = (acc << widths[i]) | v
            out.append(gmpy2.mpz(acc))
        return out, widths, runs

    # -- full statistics vectors (fixed slots) ---------------------------------
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


def sent_bins(cnt):
    """The bin slots of one (node, feature) pair whose sums travel, from its
    row counts per bin slot: every bin with rows but the one with the most
    rows (the lowest on ties), which the label holder derives from the
    node's total; and that left-out bin (-1: no rows)."""
    full = np.flatnonzero(cnt)
    if not full.size:
        return full, -1
    skip = int(full[np.argmax(cnt[full])])
    return full[full != skip], skip


def hist_layout(feats, n_bins, cnt_all):
    """The encrypted sums a party sends for the (node, feature) pairs of the
    features ``feats``: per pair (its row counts per bin slot, the bins whose
    sums are sent, the left-out bin: :func:`sent_bins`), and the number of
    sums in all.  ``cnt_all`` holds the pairs' row counts back to back
    (``n_bins`` of the feature, then the missing bin)."""
    nb = n_bins[np.asarray(feats, dtype=np.int64)].astype(np.int64) if len(feats) else np.empty(0, np.int64)
    seg = np.concatenate(([0], np.cumsum(nb + 1)))
    if cnt_all.shape[0] != seg[-1]:
        raise bad_message(f"the bin counts hold {cnt_all.shape[0]} entries, the pairs need {int(seg[-1])}")
    layout, n_values = [], 0
    for i in range(len(feats)):
        cnt = bin_counts(cnt_all[seg[i]:seg[i + 1]].astype(np.int64), int(nb[i]))
        inc, skip = sent_bins(cnt)
        layout.append((cnt, inc, skip))
        n_values += inc.size
    return seg, layout, n_values


@contextlib.contextmanager
def gil_free():
    """gmpy2's arithmetic on big numbers releases the GIL on this thread
    while the block runs (a tree handled on one of a party's tree threads
    then runs beside the others)."""
    ctx = gmpy2.get_context()
    before = ctx.allow_release_gil
    ctx.allow_release_gil = True
    try:
        yield
    finally:
        ctx.allow_release_gil = before


#: shifts of at most this many bits are squarings in Python (a modular power
#: costs about two squarings more: the Montgomery form in and out)
SQUARINGS_BELOW = 12


def pack_sums(key, values, widths, runs, workers=1):
    """One ciphertext per run of :meth:`EncryptionSpec.sum_runs`: the
    ciphertexts ``values`` in slots of ``widths`` bits, the first highest
    (Horner: shift by the next value's width, then add), the runs on
    ``workers`` threads."""
    nsq = key.nsq
    powers = {w: gmpy2.mpz(1) << w for w in set(widths) if w > SQUARINGS_BELOW}

    def run(r):
        a, b = runs[r], runs[r + 1]
        acc = values[a]
        for i in range(a + 1, b):
            w = widths[i]
            if w > SQUARINGS_BELOW:
                acc = gmpy2.powmod(acc, powers[w], nsq)
            else:
                for _ in range(w):
                    acc = acc * acc % nsq
            acc = acc * values[i] % nsq
        return acc

    return P.parallel_map(run, range(len(runs) - 1), workers)


# ---------------------------------------------------------------------------
# Label encryption (the label holder, once per training)
# ---------------------------------------------------------------------------
def _encrypt_chunk(n, plaintexts):
    key = P.PublicKey(n)
    return [int(c) for c in key.encrypt_many(plaintexts)]


def encrypt_rows(public_key, plaintexts, workers=1, factors=None):
    """Encrypt every row's plaintext with fresh randomness: ready-made
    factors (the label holder's, made with the CRT) ``r^n mod n²`` when given (one per row), else drawn
    here, with ``workers`` > 1 local processes."""
    if factors is not None:
        return public_key.encrypt_with(plaintexts, factors, "randomness from the master")
    if workers <= 1 or len(plaintexts) < 2 * workers:
        return public_key.encrypt_many(plaintexts)
    ints = [int(v) for v in plaintexts]
    size = -(-len(ints) // workers)
    chunks = [ints[i:i + size] for i in range(0, len(ints), size)]
    with P.worker_pool(workers) as pool:
        parts = pool.map(_encrypt_chunk, [int(public_key.n)] * len(chunks), chunks)
        return [gmpy2.mpz(c) for part in parts for c in part]


#: a batch of fewer fresh factors than this is made in the rank itself: worker
#: processes, started for a batch and building their tables, cost about two
#: seconds, a factor about 0.1 ms (a boosting round of a small table then pays
#: for its rows, not for the workers)
LOCAL_FACTORS = 20_000


def encrypt_own(private_key, plaintexts, workers, timed=None):
    """Encryptions of ``plaintexts`` under the label holder's own key, each with
    fresh randomness made from the key's factorisation (the CRT, in
    ``workers`` processes, or in this one for fewer than
    :data:`LOCAL_FACTORS`).  ``timed(stage, seconds)``, when given, learns
    the seconds of the two stages (``randomness``, ``encryption``)."""
    t0 = time.perf_counter()
    factors = private_key.randomness(len(plaintexts), workers if len(plaintexts) >= LOCAL_FACTORS else 1)
    t1 = time.perf_counter()
    cts = private_key.public.encrypt_with(plaintexts, factors)
    if timed is not None:
        timed("randomness", t1 - t0)
        timed("encryption", time.perf_counter() - t1)
    return cts


class OwnRandomness:
    """The label holder's fresh encryption factors for a whole training:
    batches of fewer than :data:`LOCAL_FACTORS` made in its own rank (unless
    ``always_workers``: its own file set ``encrypt_workers``), larger ones in
    ``workers`` processes started at the first such batch and kept (their
    tables are built once).  :meth:`close` ends them."""

    def __init__(self, private_key, workers, always_workers=False):
        self.key, self.workers = private_key, max(1, int(workers))
        self.local_below = 0 if always_workers else LOCAL_FACTORS
        self._local = self._pool = None

    def factors(self, count):
        if count < self.local_below or self.workers == 1:
            if self._local is None:
                self._local = P.RandomnessMaker(self.key, 1)
            return self._local.take(count)
        if self._pool is None:
            self._pool = P.RandomnessMaker(self.key, self.workers)
        return self._pool.take(count)

    def encrypt(self, plaintexts, timed=None):
        """Encryptions of ``plaintexts`` with fresh factors (``timed(stage, seconds)``
        learns the seconds of ``randomness`` and ``encryption``)."""
        t0 = time.perf_counter()
        factors = self.factors(len(plaintexts))
        t1 = time.perf_counter()
        cts = self.key.public.encrypt_with(plaintexts, factors)
        if timed is not None:
            timed("randomness", t1 - t0)
            timed("encryption", time.perf_counter() - t1)
        return cts

    def close(self):
        for maker in (self._local, self._pool):
            if maker is not None:
                maker.close()
        self._local = self._pool = None


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


def sum_plan(cand, mask, family, held, count):
    """Which per-bin sums of a party a level needs: its (node, feature) pairs
    of the candidate nodes ``cand`` under ``mask`` (one row per candidate,
    one column per feature of the party).  A pair whose parent's histogram
    the label holder holds from the last level (``held``: a set of (node,
    feature)) and whose sibling has fewer rows (the lower id on a tie) is
    derived there as parent minus sibling; the sibling's is computed instead.
    ``family`` maps a child to (parent, sibling); ``count`` gives a node's
    rows.  Returns (the pairs to compute, those to derive), each sorted.  The
    master and the party compute the plan alike, from the same facts."""
    compute, derive = set(), []
    for j, row in zip(cand.tolist(), mask):
        fam = family.get(j)
        for f in np.flatnonzero(row).tolist():
            if fam is not None and (fam[0], f) in held:
                sib = fam[1]
                if count[sib] < count[j] or (count[sib] == count[j] and sib < j):
                    derive.append((j, f))
                    compute.add((sib, f))
                    continue
            compute.add((j, f))
    return sorted(compute), sorted(derive)


def needed_pairs(cand, mask):
    """Every (node, feature) pair of a level's candidates under ``mask``."""
    return {(j, int(f)) for j, row in zip(cand.tolist(), mask) for f in np.flatnonzero(row)}


class EncryptedLabels(RowLabels):
    """The forest's labels at a party without them: one ciphertext per aligned
    row (the label holder's encryption, relayed at set-up); a tree's rows are
    its ciphertexts raised to the bootstrap counts."""

    n_stats = None
    sample_weight = None

    def __init__(self, labels_ct, public_key):
        self.enc = labels_ct
        # doubled rows are the commonest bootstrap multiplicity above one: their
        # squares are computed once, not per tree
        nsq = public_key.nsq
        self.nsq = nsq
        self.enc2 = [c * c % nsq for c in labels_ct]

    def ciphertexts(self, counts):
        nsq = self.nsq
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
        return wc


class CipherSums(OwnSplits):
    """The label channel of a party without the labels in an encrypted mode:
    for the (node, feature) pairs the master asks for, it sums its rows'
    ciphertexts into per-bin encrypted histograms (leaving out each
    feature's most frequent bin, packing many bins into one ciphertext), and
    it partitions on the splits the label holder chose from them.  Its
    ``labels`` give a tree's row ciphertexts (:class:`EncryptedLabels`, or a
    boosting round's from the tree's first message).

    What it tells another party travels sealed for that party
    (:mod:`.paillier.sealed`, ``sealer``): its sums, row counts and weights
    for the label holder (party index ``label_party``), its partition bits
    for every other party; the label holder's decision reaches it sealed.
    The master relays them and sees only their sizes and each split's
    number of left rows."""

    # the trees of a large batch (a forest's) are summed on parallel threads, each tree's
    # arithmetic on its own thread; a batch of a tree or a few (boosting's) uses the party's
    # threads within the tree (P.group_products, pack_sums): the same ciphertexts either way
    tree_threads = True
    child_stats = False   # no plain labels here
    # a partition may also hold the level's other splits and the masks of every child: the
    # party then applies the level itself and sums the next level at once (docs/protocol.md)
    op_keys = {"find": ("nodes", "fmask"),
               "partition": ("nodes", "decision") + AHEAD_KEYS,
               "finish": ("importance",), "apply": ()}
    apply_keys = ("split_nodes", "winners") + S.IN_KEYS

    def __init__(self, spec, public_key, sealer, label_party):
        self.spec = spec
        self.key = public_key
        self.sealer = sealer
        self.lh = int(label_party)

    def attach(self, sp):
        if sp.settings.split_method != "hist":
            raise InputError("split_method", "encrypted labels need split_method = 'hist'")
        # each feature's most frequent bin is left out and derived by the label holder
        sp.skip = np.array([np.bincount(sp.Xb[:, f], minlength=N_SLOTS_BIN).argmax()
                            for f in range(sp.n_features)], dtype=np.int32)

    def begin(self, sp, msg):
        counts = np.asarray(msg["counts"])
        wc = sp.labels.ciphertexts(counts, *(msg[k] for k in sp.labels.begin_keys))
        return {"nodes": Nodes(counts, PARTY_COLUMNS), "counts": counts, "wc": wc, "family": None,
                "held": set(), "level": 0, "decision": None, "own_bits": None}

    def check_find(self, sp, msg):
        """A ``find``: open leaves and a feature mask of this party's columns
        (the plain mode's; no statistics)."""
        if "stats" in msg:
            raise bad_message("a 'find' of a party without the labels holds no 'stats'")
        return sp.check_find(msg)

    def find(self, sp, msg):
        """The encrypted per-bin sums of this level's plan (:func:`sum_plan`),
        sealed for the label holder."""
        return S.outgoing(self._sealed_sums(sp, msg))

    def _sealed_sums(self, sp, msg):
        t = sp.state
        tree = t["nodes"]
        nodes, mask = msg["nodes"], msg["fmask"]
        family = {}
        if t["family"] is not None:
            split_nodes, first = t["family"]
            for i, parent in enumerate(split_nodes.tolist()):
                left = int(first) + 2 * i
                family[left], family[left + 1] = (parent, left + 1), (parent, left)
        starts, ends = tree.bounds(np.arange(tree.n, dtype=np.int32))
        compute, _ = sum_plan(nodes, mask, family, t["held"], ends - starts)
        t["held"] = needed_pairs(nodes, mask)
        pairs = np.array(compute, dtype=np.int64).reshape(-1, 2)
        t0 = time.perf_counter()
        out = self.sums(sp, pairs[:, 0], pairs[:, 1])
        sp.timed("party_sums", time.perf_counter() - t0)
        return [(self.lh, S.SUMS, self.sealer.seal(self.lh, S.SUMS, sp.tree_id, t["level"], out))]

    def check_partition(self, sp, msg):
        """A ``partition`` of open leaves on the splits the label holder chose
        (its sealed decision): one of this party's features, one of its bins
        and a missing-value side per node."""
        t = sp.state
        if t["partitioned"] is not None:
            raise bad_message("a second 'partition' for one level of the tree")
        nodes = node_list(msg.get("nodes"), "'nodes'", t["open_ids"])
        out = self._decided(sp, dict(msg, nodes=nodes))
        feat, b, ml = out["feature"], out["bin"], out["missing_left"]
        if nodes.size:
            if feat.min() < 0 or feat.max() >= sp.n_features:
                raise bad_message(f"'feature' must name features of this party (0 to "
                                  f"{sp.n_features - 1})")
            if b.min() < 0 or np.any(b >= sp.n_bins[feat.astype(np.int64)]):
                raise bad_message("'bin' must name a bin of its feature (0 to its number of bins - 1)")
            if not np.isin(ml, (0, 1)).all():
                raise bad_message("'missing_left' must be 0 or 1")
        t["partitioned"] = nodes
        if any(k in msg for k in AHEAD_KEYS):
            out.update(self._check_ahead(sp, msg, t["decision"]))
        return out

    def _decided(self, sp, msg):
        """The partition message with this party's splits from the label
        holder's sealed decision (kept for the level's apply)."""
        nodes = np.asarray(msg["nodes"])
        dec = S.open_decision(sp, self.sealer, self.lh, msg.get("decision"))
        if not np.array_equal(dec["split"][dec["winner"] == self.sealer.me], nodes):
            raise bad_message("'nodes' are not the splits the label holder gave this party")
        arrays = {k: int_array(dec.get(k), f"the decision's {k!r}") for k in ("feature", "bin", "missing_left")}
        for k, a in arrays.items():
            if a.shape != (nodes.size,):
                raise bad_message(f"the decision's {k!r} must hold one value per node ({nodes.size}), got "
                                  f"{shown(a)}")
        sp.state["decision"] = dec
        return dict(msg, feature=arrays["feature"].astype(np.int32), bin=arrays["bin"].astype(np.int32),
                    missing_left=arrays["missing_left"].astype(np.uint8))

    def _check_ahead(self, sp, msg, dec):
        """The fields of a partition that applies the level here: all the
        level's split nodes (the label holder's decision, which only this
        party and the label holder won) and a mask per child."""
        if any(k not in msg for k in AHEAD_KEYS):
            raise bad_message(f"{', '.join(map(repr, AHEAD_KEYS))} travel together")
        level = node_list(msg["level_nodes"], "'level_nodes'", sp.state["open_ids"])
        if not np.array_equal(level, dec["split"]):
            raise bad_message("'level_nodes' are not the splits the label holder decided")
        if not np.isin(dec["winner"], (self.sealer.me, self.lh)).all():
            raise bad_message("a partition that applies its level while other parties won splits")
        fmask = msg["child_fmask"]
        shape = (2 * level.size, sp.n_features)
        if not (isinstance(fmask, np.ndarray) and fmask.dtype in MASK_DTYPES and fmask.shape == shape):
            raise bad_message(f"'child_fmask' must be a uint8 or bool array of shape {shape}, got {shown(fmask)}")
        return {"level_nodes": level, "child_fmask": np.ascontiguousarray(fmask, dtype=np.uint8)}

    def partition(self, sp, msg):
        """Partition on the split the label holder chose from this party's
        encrypted histograms; the bits go sealed to every other party, their
        number of left rows per node to the master.  With the level's other
        splits (``level_nodes``, the label holder's) and every child's feature
        mask (``child_fmask``), apply the whole level here and sum the next
        one's candidates in the same reply: the master then needs no ``find``
        of this party for that level."""
        if not sp.checked:      # the grower is in this process: the decision is read here
            msg = self._decided(sp, msg)
        t = sp.state
        c = t["nodes"].col
        nodes = msg["nodes"]
        c["cand_feature"][nodes] = msg["feature"]
        c["cand_threshold"][nodes] = sp.bin_threshold(msg["feature"], msg["bin"])
        c["cand_bin"][nodes] = msg["bin"]
        c["cand_missing_left"][nodes] = msg["missing_left"]
        bits = sp.partition(msg)["bits"]
        t["own_bits"] = bits
        starts, ends = t["nodes"].bounds(nodes)
        me, level = self.sealer.me, t["level"]
        payload = {"nodes": nodes, "bits": bits}
        sealed = [(q, S.BITS, self.sealer.seal(q, S.BITS, sp.tree_id, level, payload))
                  for q in range(self.sealer.n_parties) if q != me]
        reply = {"n_left": S.n_left_of(bits, ends - starts)}
        if "child_fmask" not in msg:
            reply.update(S.outgoing(sealed))
            return reply
        level_nodes = msg["level_nodes"]
        tree = t["nodes"]
        dec = t["decision"]
        packed = S.assemble_bits(sp, self.sealer, level_nodes, dec["winner"], {me: bits, self.lh: dec["bits"]}, {})
        t["decision"] = t["own_bits"] = None
        if sp.checked:
            sp.apply_checked({"split_nodes": level_nodes}, packed)
        else:
            sp.apply_level({"split_nodes": level_nodes, "bits": packed})
        children = np.arange(tree.n - 2 * level_nodes.size, tree.n, dtype=np.int32)
        s, e = tree.bounds(children)
        may = may_split(sp.settings, t["level"], e - s)
        find = {"nodes": children[may], "fmask": np.ascontiguousarray(msg["child_fmask"][may])}
        if sp.checked:
            t["searched"] = find["nodes"]
        reply.update(S.outgoing(sealed + self._sealed_sums(sp, find)))
        return reply

    def level_bits(self, sp, msg, nodes):
        """The level's partition bits from the label holder's sealed decision
        (here since the partition if this party won a split, else in the
        apply) and the other winners' sealed bits, each checked against the
        master's plain ``split_nodes`` and ``winners``."""
        t = sp.state
        blobs = S.from_message(msg, self.sealer.n_parties, self.sealer.me)
        dec = t["decision"]
        if dec is None:
            if self.lh not in blobs:
                raise bad_message("an 'apply' without the label holder's sealed decision")
            dec = S.open_decision(sp, self.sealer, self.lh, blobs.pop(self.lh))
        elif self.lh in blobs:
            raise bad_message("a second decision of the label holder for one level")
        winners = int_array(msg.get("winners"), "'winners'")
        if not (np.array_equal(dec["split"], nodes) and np.array_equal(dec["winner"], winners)):
            raise bad_message("'split_nodes' and 'winners' are not the label holder's decision")
        trusted = {self.lh: dec["bits"]}
        if t["own_bits"] is not None:
            trusted[self.sealer.me] = t["own_bits"]
        elif (winners == self.sealer.me).any():
            raise bad_message("'winners' names this party for splits it did not partition")
        t["decision"] = t["own_bits"] = None
        return S.assemble_bits(sp, self.sealer, nodes, dec["winner"], trusted, blobs)

    def sums(self, sp, pair_node, pair_feat):
        """Encrypted per-bin sums of the (node, feature) pairs, the left-out bin
        of each (:func:`sent_bins`) aside, each in as many bits as its weight
        needs and packed (:meth:`EncryptionSpec.sum_widths`); with each bin's
        row count and bootstrap weight.  The products and the packing run on
        the party's threads (``n_jobs``; the same ciphertexts for any number)."""
        with gil_free():
            return self._sums(sp, pair_node, pair_feat)

    def _sums(self, sp, pair_node, pair_feat):
        tree = sp.state["nodes"]
        counts = sp.state["counts"]
        wc = sp.state["wc"]
        nsq = self.key.nsq
        cnt_parts, wcnt_parts, runs, group_starts, weights = [], [], [], [], []
        at = 0
        lo, hi = tree.bounds(np.asarray(pair_node, dtype=np.int32))
        for s, e, f in zip(lo.tolist(), hi.tolist(), pair_feat.tolist()):
            rows = tree.rows[s:e]
            b = sp.Xb[rows, f]
            nb = int(sp.n_bins[f])
            cnt = np.bincount(b, minlength=N_SLOTS_BIN)
            wcnt = np.bincount(b, weights=counts[rows], minlength=N_SLOTS_BIN)
            cnt_parts.append(np.append(cnt[:nb], cnt[MISSING_BIN]))
            wcnt_parts.append(np.append(wcnt[:nb], wcnt[MISSING_BIN]))
            inc, skip = sent_bins(cnt)
            sel = b != skip
            order = np.argsort(b[sel], kind="stable")
            if order.size:
                runs.append(rows[sel][order])
                group_starts.append(at + np.flatnonzero(np.diff(b[sel][order], prepend=-1)))
                at += order.size
                weights.append(wcnt[inc])
        index = np.concatenate(runs) if runs else np.empty(0, np.int64)
        starts = np.append(np.concatenate(group_starts), at) if runs else np.zeros(1, np.int64)
        workers = sp.crypto_threads()
        values = P.group_products(wc, index.tolist(), starts.tolist(), nsq, workers)
        widths = self.spec.sum_widths(np.concatenate(weights).tolist() if weights else [])
        packed = pack_sums(self.key, values, widths, self.spec.sum_runs(widths), workers)
        return {"hist": self.key.serialize(packed),
                "cnt": np.concatenate(cnt_parts).astype(np.uint32) if cnt_parts else np.empty(0, np.uint32),
                "wcnt": np.concatenate(wcnt_parts).astype(np.uint32) if wcnt_parts else np.empty(0, np.uint32)}
