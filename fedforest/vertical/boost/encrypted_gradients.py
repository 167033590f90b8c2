"""Boosting trees with Paillier-encrypted gradients (``vertical_boost`` with
``label_privacy = "paillier"``): the slot layout of the gradients and the
parties without labels.

* the **label holder** (:class:`~.paillier.holder.GradientRounds`) keeps
  the key and the margins, encrypts every round's gradients on the exact
  grid (:func:`~.boosting.gradient_grid`) as one plaintext ``(q_g + B,
  q_h)`` per training row and output, and decides every split;
* every **other party** (:class:`EncryptedGradients` with the forest's
  channel :class:`~.encrypted_labels.CipherSums`) receives a tree's row
  ciphertexts with the tree's first message and, for the (node, feature)
  pairs asked for, returns encrypted per-bin sums;
* the **master** relays (:class:`~.paillier.relay.LabelHolderChooses`, with
  :class:`EncryptedRound` as a tree's labels).
"""
import gmpy2
import numpy as np

from ...crypto import paillier as P
from ...errors import InputError
from ...tree.labels import RowLabels
from ..messages import bad_message, shown
from . import boosting as B
from ..encrypted_labels import EncryptionSpec

GRADIENTS = "gradients"   # master -> label holder: a round begins; reply: its encrypted gradients (or stop)


class GradientSpec(EncryptionSpec):
    """Slot layout of encrypted gradients: per row and output the statistics
    ``(1, q_g + B, q_h)`` with ``B = grid_bound(n_total)``, so that every slot
    is non-negative and every sum over at most ``n_total`` rows fits
    ``width`` bits (the sums of ``q_g + B`` stay below ``2 B n_total < 2**54``).
    A row's ciphertext holds the last two (:meth:`row_plaintexts`); a sum of
    weight ``w`` travels in ``width + bits(2 B w)`` bits."""

    def __init__(self, n_total, key_length, slot_bits=None):
        self.is_classification = False
        self.n_classes = 1
        self.n_total = int(n_total)
        self.key_length = int(key_length)
        self.step = 1.0
        self.bias = B.grid_bound(self.n_total)
        self.n_stats = 3
        max_sum = 2 * self.bias * self.n_total
        self.width = int(slot_bits) if slot_bits else P.Slots.width_for(max_sum)
        self.slots = P.Slots(self.width, self.key_length)
        self.slots.check_capacity(max_sum, "slot_bits")
        self.per_ciphertext = self.slots.per_plaintext // self.n_stats
        if self.per_ciphertext < 1:
            raise InputError("slot_bits", f"three statistics of {self.width} bits do not fit one "
                                          f"{self.key_length}-bit plaintext")

    def row_plaintexts(self, q_g, q_h):
        """One plaintext ``(q_g + B, q_h)`` per row: the weight slot of the
        statistics ``(1, q_g + B, q_h)`` stays out (every sum's weight travels
        in plaintext beside it, see :meth:`EncryptionSpec.sum_widths`)."""
        b, w = self.bias, self.width
        return [gmpy2.mpz(int(g) + b) << w | int(h) for g, h in zip(q_g.tolist(), q_h.tolist())]

    def to_float(self, ints, steps=(1.0, 1.0)):
        """``(H, G, 0)`` statistics (as the Newton kernels hold them) from exact slot sums."""
        ints = np.asarray(ints, dtype=np.int64)
        out = np.zeros(ints.shape, dtype=np.float64)
        out[..., 0] = ints[..., 2].astype(np.float64) * steps[1]
        out[..., 1] = (ints[..., 1] - self.bias * ints[..., 0]).astype(np.float64) * steps[0]
        return out

    def weights_of(self, ints):
        return np.asarray(ints, dtype=np.int64)[..., 0]

    def stat_bounds(self):
        """The largest sum of each statistic ``(w, w (q_g + B), w q_h)`` over the rows."""
        return (self.n_total, 2 * self.bias * self.n_total, self.bias * self.n_total)

    def in_bounds(self, ints):
        """Non-negative slots, gradients within ``[0, 2 B w]`` and hessians within ``[0, B w]``."""
        ints = np.asarray(ints, dtype=np.int64)
        w = ints[..., 0]
        return bool((ints >= 0).all() and np.all(ints[..., 1] <= 2 * self.bias * w)
                    and np.all(ints[..., 2] <= self.bias * w))


def node_gradient_ints(spec, q_g, q_h, counts, rows, starts, ends):
    """Exact slot sums ``(w, sum w (q_g + B), sum w q_h)`` of nodes."""
    out = np.zeros((starts.shape[0], 3), dtype=np.int64)
    w_all = counts.astype(np.int64)
    for j in range(starts.shape[0]):
        r = rows[starts[j]:ends[j]]
        w = w_all[r]
        out[j] = (w.sum(), (w * (q_g[r] + spec.bias)).sum(), (w * q_h[r]).sum())
    return out


# --------------------------------------------------------------------------- the other parties
class EncryptedGradients(RowLabels):
    """A boosting tree's labels at a party without them
    (:class:`~.encrypted_labels.CipherSums` is its channel): the label holder's
    row ciphertexts of the tree's output come with the tree's first message
    (``grad_ct``)."""

    n_stats = None
    sample_weight = None
    begin_keys = ("grad_ct",)

    def __init__(self, public_key):
        self.key = public_key

    def check_begin(self, msg, n_rows):
        blocks = msg.get("grad_ct")
        if not (isinstance(blocks, np.ndarray) and blocks.dtype == np.uint8 and blocks.ndim == 2
                and blocks.shape[0] == n_rows):
            raise bad_message(f"'grad_ct' must be {n_rows} ciphertexts (one per training row), "
                              f"got {shown(blocks)}")
        return {"grad_ct": self.key.deserialize(blocks, "encrypted gradients")}

    @staticmethod
    def ciphertexts(counts, cts):
        return [cts[r] if counts[r] else None for r in range(counts.shape[0])]   # counts are 0 or 1


# --------------------------------------------------------------------------- the master
class EncryptedRound(RowLabels):
    """A boosting tree's labels as the master knows them in the encrypted mode:
    its output and the label holder's ciphertexts of that output (byte
    blocks, to relay to the other parties with the tree's first message)."""
    is_classification = False
    n_classes = 1
    n_stats = 3
    sample_weight = None

    def __init__(self, output, blocks):
        self.output, self.blocks = int(output), blocks

    def begin(self, label_holder):
        """What a tree's first message adds: its output for the label holder,
        the row ciphertexts for every other party."""
        if label_holder:
            return {"output": self.output}
        # the hidden instance space sends no row ciphertexts with the tree (they come per level)
        return {} if self.blocks is None else {"grad_ct": self.blocks}
