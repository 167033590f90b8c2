"""Boosting trees with Paillier-encrypted gradients (``vertical_boost`` with
``label_privacy = "paillier"``), on the forest's encrypted-label growers.

Roles (see docs/protocol.md, "Encrypted gradients"):

* the **label holder** (:class:`GradientHolderSplitter`) computes every
  round's gradients and hessians from its labels and the margins the master
  sends, rounds them to the exact grid (:func:`~.boosting.gradient_grid`),
  encrypts one plaintext ``(1, q_g + B, q_h)`` per training row and output
  under the master's key, scores its own columns in plaintext and sends the
  new nodes' statistics encrypted every level;
* every **other party** (:class:`EncryptedGradientSplitter`) receives a
  tree's row ciphertexts with the tree's first message and, for the (node,
  feature) pairs asked for, returns encrypted per-bin sums (the forest's
  :class:`~.encrypted_labels.EncryptedHistSplitter`);
* the **master** (:class:`PaillierBoostGrower`) holds the private key,
  decrypts sums only, rebuilds the left-out bins and the larger children by
  subtraction, checks every sum against the plaintext row counts, and
  evaluates splits with the plain mode's kernel arithmetic: the sums are
  exact integers on the same grid as the plain mode's gradients, so both
  modes grow the same trees.
"""
import numpy as np

from ..crypto import paillier as P
from ..errors import InputError
from ..tree.builder import PARTY_COLUMNS, Nodes, PartySplitter, bad_message, int_value, shown
from . import boosting as B
from .encrypted_labels import (EncryptedHistSplitter, EncryptionSpec, LabelHolderSplitter, PaillierGrower,
                               ProtocolIntegrityError, encrypt_rows)

GRADIENTS = "gradients"   # master -> label holder: margins; reply: encrypted gradients, losses


class GradientSpec(EncryptionSpec):
    """Slot layout of encrypted gradients: per row and output three slots
    ``(1, q_g + B, q_h)`` with ``B = grid_bound(n_total)``, so that every slot
    is non-negative and every sum over at most ``n_total`` rows fits
    ``width`` bits (the sums of ``q_g + B`` stay below ``2 B n_total < 2**54``)."""

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
        b = self.bias
        return [self.slots.pack_plain((1, int(g) + b, int(h))) for g, h in zip(q_g.tolist(), q_h.tolist())]

    def to_float(self, ints, steps=(1.0, 1.0)):
        """``(H, G, 0)`` statistics (as the Newton kernels hold them) from exact slot sums."""
        ints = np.asarray(ints, dtype=np.int64)
        out = np.zeros(ints.shape, dtype=np.float64)
        out[..., 0] = ints[..., 2].astype(np.float64) * steps[1]
        out[..., 1] = (ints[..., 1] - self.bias * ints[..., 0]).astype(np.float64) * steps[0]
        return out

    def weights_of(self, ints):
        return np.asarray(ints, dtype=np.int64)[..., 0]

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


# --------------------------------------------------------------------------- the label holder
class GradientHolderSplitter(LabelHolderSplitter):
    """The label holder: it alone computes gradients; every round it encrypts
    them for the other parties (:meth:`encrypt_round`), scores its own columns
    in plaintext, and sends node statistics encrypted."""

    begin_keys = ("counts", "class_weight", "output")

    def __init__(self, X, settings, spec, public_key, objective, y, train, valid):
        n = train.size
        super().__init__(X[train], settings, B.GradientLabels(np.zeros(n), np.ones(n)), np.zeros(n, np.int64),
                         spec, public_key)
        self.objective, self.y, self.train, self.valid = objective, y, train, valid
        self.round = None   # (g, h, q_g, q_h, steps) of the current round

    def encrypt_round(self, msg, n_outputs, factors=None, workers=1):
        """Reply to the master's ``gradients`` message: the validation loss at
        each margin sent (when asked), then, at the last margin, the round's
        gradients encrypted (one ciphertext per training row and output) and
        their grid steps."""
        margins = msg.get("margins")
        n_rows = self.y.shape[0]
        if not (isinstance(margins, np.ndarray) and margins.dtype == np.float64 and margins.ndim == 3
                and margins.shape[1:] == (n_rows, n_outputs) and margins.shape[0] >= 1
                and np.all(np.isfinite(margins))):
            raise bad_message(f"'margins' must be finite float64 margins of shape (k, {n_rows}, {n_outputs}), "
                              f"got {shown(margins)}")
        reply = {"valid_loss": np.array([B.loss(self.objective, self.y[self.valid], m[self.valid])
                                         for m in margins] if msg.get("losses") and self.valid is not None
                                        else [], dtype=np.float64)}
        if not msg.get("encrypt"):
            return reply
        margin = margins[-1]
        self.round = B.gradient_grid(self.objective, self.y[self.train], margin[self.train], None)
        q_g, q_h, steps = self.round[2], self.round[3], self.round[4]
        plain = [pt for k in range(n_outputs) for pt in self.spec.row_plaintexts(q_g[:, k], q_h[:, k])]
        cts = encrypt_rows(self.key, plain, workers, factors)
        reply.update(blocks=self.key.serialize(cts), steps=steps, fingerprint=self.key.fingerprint)
        return reply

    def _check_begin(self, msg):
        begin = PartySplitter._check_begin(self, msg)
        if self.round is None:
            raise bad_message("a tree begins before the round's gradients were asked for")
        k = int_value(msg.get("output"), "'output'", 0, self.round[0].shape[1] - 1)
        return dict(begin, output=k)

    def _statistics(self, msg):
        k = msg["output"]
        return B.GradientLabels(self.round[0][:, k], self.round[1][:, k]).tree_stats(msg["counts"], None)

    def _begin(self, msg):
        super()._begin(msg)
        self._tree["output"] = msg["output"]

    def _node_ints(self, rows, starts, ends):
        k = self._tree["output"]
        return node_gradient_ints(self.spec, self.round[2][:, k], self.round[3][:, k], self._tree["counts"],
                                  rows, starts, ends)


# --------------------------------------------------------------------------- the other parties
class EncryptedGradientSplitter(EncryptedHistSplitter):
    """A party without the labels: a tree's row ciphertexts come with its
    first message (``grad_ct``), per-bin encrypted sums go back on request."""

    begin_keys = ("counts", "class_weight", "grad_ct")

    def __init__(self, X, settings, spec, public_key):
        super().__init__(X, settings, [], spec, public_key)

    def _check_begin(self, msg):
        begin = PartySplitter._check_begin(self, msg)
        blocks = msg.get("grad_ct")
        if not (isinstance(blocks, np.ndarray) and blocks.dtype == np.uint8 and blocks.ndim == 2
                and blocks.shape[0] == self.n_rows):
            raise bad_message(f"'grad_ct' must be {self.n_rows} ciphertexts (one per training row), "
                              f"got {shown(blocks)}")
        return dict(begin, grad_ct=self.key.deserialize(blocks, "encrypted gradients"))

    def _begin(self, msg):
        counts = np.asarray(msg["counts"])
        cts = msg["grad_ct"]
        wc = [cts[r] if counts[r] else None for r in range(counts.shape[0])]   # counts are 0 or 1
        self._tree = {"nodes": Nodes(counts, PARTY_COLUMNS), "counts": counts, "wc": wc}


# --------------------------------------------------------------------------- the key holder
class EncryptedRound:
    """A boosting tree's labels as the master knows them in the encrypted mode:
    its output, the label holder's ciphertexts of that output (byte blocks, to
    relay) and the grid steps that turn decrypted sums into ``(H, G)``."""
    is_classification = False
    n_classes = 1
    n_stats = 3

    def __init__(self, output, blocks, steps):
        self.output, self.blocks, self.steps = int(output), blocks, (float(steps[0]), float(steps[1]))


def check_steps(steps, n_outputs):
    """The grid steps of a round: positive powers of two, two per output."""
    if not (isinstance(steps, np.ndarray) and steps.dtype == np.float64 and steps.shape == (n_outputs, 2)
            and np.all(np.isfinite(steps)) and np.all(steps > 0)
            and np.all(np.frexp(steps)[0] == 0.5)):
        raise ProtocolIntegrityError(f"the label holder's grid steps must be {n_outputs} x 2 powers of two, "
                                     f"got {shown(steps)}")
    return steps


class PaillierBoostGrower(B.BoostGrower, PaillierGrower):
    """The master's side of a boosting tree with encrypted gradients: the
    forest's encrypted-label grower (decryption, subtraction, integrity
    checks) with the boosting tree's draws, searched nodes, split test and
    leaf values.  A tree's first message gives the label holder the tree's
    output and every other party the ciphertexts of that output."""

    def _begin_message(self, counts, cw, party):
        msg = {"counts": counts, "class_weight": cw}
        if party == self.label_party:
            msg["output"] = self.labels.output
        else:
            msg["grad_ct"] = self.labels.blocks
        return msg

    def _to_float(self, ints):
        return self.spec.to_float(ints, self.labels.steps)
