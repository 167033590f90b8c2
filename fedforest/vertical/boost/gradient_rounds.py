"""Boosting's labels at the label holder of a job with encrypted gradients
(:class:`GradientRounds`), beside the generic Paillier channel
(:class:`~fedforest.vertical.paillier.holder.KeyHolder`).
"""
import numpy as np

from ...tree.labels import RowLabels
from ..encrypted_labels import OwnRandomness
from ..messages import bad_message, int_value
from ..paillier import sealed as S
from . import boosting as B
from .encrypted_gradients import node_gradient_ints


class GradientRounds(RowLabels):
    """Boosting's labels at the label holder of a job with encrypted
    gradients (the splitter's labels beside the :class:`KeyHolder` channel).  It keeps
    every aligned row's margin (base margin plus the leaf values so far), so
    no margin and no loss ever leaves it: each round it computes the
    gradients of its training rows on the exact grid, encrypts one plaintext
    ``(1, q_g + B, q_h)`` per row and output with its own key and randomness
    (:meth:`gradients`), and with early stopping it scores the validation
    rows and decides when to stop.  A tree's first message names its output."""

    is_classification = False
    n_classes = 1
    n_stats = 3
    sample_weight = None
    begin_keys = ("output",)
    exact_sums = True   # the grid makes every sum exact: subtraction changes no bit

    def __init__(self, spec, private_key, objective, y, train, valid, base, learning_rate, stopping, workers=1):
        self.B = B
        self.spec, self.key = spec, private_key
        self.value_scale = float(learning_rate)
        self.objective, self.y, self.train, self.valid = objective, np.asarray(y, dtype=np.float64), train, valid
        self.margin = np.tile(np.asarray(base, dtype=np.float64), (self.y.shape[0], 1))
        self.k_out = self.margin.shape[1]
        self.stopping = stopping      # an EarlyStopping, or None
        self.workers = int(workers)
        self.round = None             # (g, h, q_g, q_h, steps) of the round being grown
        self.rounds_done = 0          # rounds whose leaf values are in the margins (None: resuming)
        self.values = {}              # tree -> finished tree's node values (for margins)
        self.trees = {}               # tree -> the last round's finished trees (for its leaf sets)
        self.splitter = None
        # the shared instance space: every round's gradients are encrypted once per row for
        # the other parties; the hidden one slots them per level instead (HiddenHolder)
        self.encrypt_rows = True

    def bind(self, splitter):
        """The label holder's splitter (its channel gives the values of trees grown here)."""
        self.splitter = splitter

    # -- the rounds --------------------------------------------------------
    def resume(self, start_round, values, leaves):
        """Margins (and validation losses) after the ``start_round`` stored
        rounds: ``values`` the stored trees' node values, ``leaves`` every
        row's leaf in each of them (from the parties' leaf sets, intersected here)."""
        for r in range(start_round):
            for k in range(self.k_out):
                t = r * self.k_out + k
                self.margin[:, k] += values[t][leaves[t]]
            if self.stopping is not None:
                self.stopping.add(r, self._valid_loss())
        self.rounds_done = start_round

    def _valid_loss(self):
        return self.B.loss(self.objective, self.y[self.valid], self.margin[self.valid])

    def _fold(self, r, leaves):
        """Add round ``r``'s leaf values to the margins: every row's leaf from
        ``leaves`` (the parties' leaf sets intersected here, shape (outputs, rows)), or,
        when the round's sample held every row, from the trees grown here."""
        ids = [r * self.k_out + k for k in range(self.k_out)]
        for k, t in enumerate(ids):
            if leaves is None:
                v = self.splitter.channel.row_values(self.splitter, t)
                if self.valid is not None or np.isnan(v).any():
                    raise bad_message("a round's margins need the rows' leaves ('leaves')")
                self.margin[self.train, k] += v
            else:
                if t not in self.values:
                    raise bad_message(f"'leaves' for tree {t}, which is not stored here")
                value, left = self.values[t]
                if leaves[k].min() < 0 or leaves[k].max() >= value.shape[0] or (left[leaves[k]] >= 0).any():
                    raise bad_message(f"'leaves' names nodes that are not leaves of tree {t}")
                self.margin[:, k] += value[leaves[k]]
        self.rounds_done = r + 1

    def gradients(self, msg):
        """The reply to the master's ``gradients`` message of round ``round``:
        the previous round is folded into the margins first (from the parties'
        sealed leaf sets when they come with it); then, with early stopping, the decision
        to stop (``stop``, ``best``: the best round), else the round's
        encrypted gradients (``blocks``).  ``final``: no round follows; only
        the best round is returned."""
        r = int_value(msg.get("round"), "'round'", self.rounds_done, self.rounds_done + 1)
        leaves = self.round_leaves(msg, r - 1) if r == self.rounds_done + 1 else None
        if r == self.rounds_done + 1:
            self._fold(r - 1, leaves)
            if self.stopping is not None and self.stopping.add(r - 1, self._valid_loss()):
                return {"stop": True, "best": int(self.stopping.best)}
        elif "sealed" in msg:
            raise bad_message("leaf sets for a round that is not the last one grown")
        best = -1 if self.stopping is None or self.stopping.best is None else int(self.stopping.best)
        if msg.get("final") is True:
            self.round = None
            return {"stop": False, "best": best}
        self.round = self.B.gradient_grid(self.objective, self.y[self.train], self.margin[self.train], None)
        if not self.encrypt_rows:
            return {"stop": False, "best": best}
        q_g, q_h = self.round[2], self.round[3]
        plain = [pt for k in range(self.k_out) for pt in self.spec.row_plaintexts(q_g[:, k], q_h[:, k])]
        cts = self._encrypt(plain)
        return {"stop": False, "best": best, "blocks": self.key.public.serialize(cts)}

    _randomness = None   # its randomness for the whole training (workers, if any, started once)
    always_workers = False   # its own file set encrypt_workers: worker processes for every batch

    def _encrypt(self, plain):
        """Encryptions of ``plain`` with fresh randomness of its own key."""
        if self._randomness is None:
            self._randomness = OwnRandomness(self.key, self.workers, self.always_workers)
        return self._randomness.encrypt(plain, None if self.splitter is None else self.splitter.timed)

    def close(self):
        """End its randomness workers."""
        if self._randomness is not None:
            self._randomness.close()
            self._randomness = None

    # -- the trees -----------------------------------------------------------
    def check_begin(self, msg, n_rows):
        if self.round is None:
            raise bad_message("a tree begins before the round's gradients were asked for")
        return {"output": int_value(msg.get("output"), "'output'", 0, self.k_out - 1)}

    def tree_stats(self, counts, class_weight, output):
        return self.B.GradientLabels(self.round[0][:, output], self.round[1][:, output]).tree_stats(counts, None)

    def tree_begin(self, msg):
        k = msg["output"]
        return {"output": k, "grid": (self.round[2][:, k], self.round[3][:, k], self.round[4][k])}

    def node_ints(self, t, rows, starts, ends):
        q_g, q_h, _ = t["grid"]
        return node_gradient_ints(self.spec, q_g, q_h, t["counts"], rows, starts, ends)

    def row_ints(self, t, rows):
        """The slot values ``(w, w (q_g + B), w q_h)`` of each row of ``rows``."""
        q_g, q_h, _ = t["grid"]
        w = t["counts"][rows].astype(np.int64)
        return np.stack((w, w * (q_g[rows].astype(np.int64) + self.spec.bias), w * q_h[rows].astype(np.int64)),
                        axis=1)

    def to_float(self, t, ints):
        return self.spec.to_float(ints, t["grid"][2])

    def committed(self, tree_ids, trees):
        """The finished trees' values, for the margins of the next round."""
        self.values = {t: (tree["value"][:, 0], tree["children_left"]) for t, tree in zip(tree_ids, trees)}
        self.trees = dict(zip(tree_ids, trees))

    #: this party's own packed leaf sets of the last round's trees (or of the stored trees,
    #: resuming); the other parties' come sealed with the next 'gradients' message
    own_leaf_sets = None

    def round_leaves(self, msg, r):
        """Every row's leaf in round ``r``'s trees from the parties' leaf sets
        (the other parties' sealed in ``msg``), or None when none came."""
        if "sealed" not in msg:
            if self.own_leaf_sets is not None:
                raise bad_message(f"the parties' leaf sets of round {r} are missing")
            return None
        ids = [r * self.k_out + k for k in range(self.k_out)]
        if self.own_leaf_sets is None or any(t not in self.trees for t in ids):
            raise bad_message("leaf sets for a round that is not the last one grown")
        own, self.own_leaf_sets = self.own_leaf_sets, None
        return S.leaves_from_sets(self.splitter.channel.sealer, msg, own, [self.trees[t] for t in ids],
                                  self.y.shape[0], (ids[0], S.ROUND_LEAVES))
