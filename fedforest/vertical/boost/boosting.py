"""Vertical gradient boosting on the Federated Forest's grower.

Each boosting round grows trees with the same level-wise grower as the forest
(:class:`fedforest.vertical.tree_grower.TreeGrower`, the same parties' split search
and partitions), under the Newton criterion: the per-row statistics are
``(h, g, 0)``, the hessian and gradient of the loss at the current
predictions, a candidate's gain is XGBoost's loss change
``G_l^2/(H_l+lambda) + G_r^2/(H_r+lambda) - G^2/(H+lambda)`` (the number
XGBoost compares ``gamma``, its ``min_split_loss``, with, and reports as a
split's ``gain``) and a leaf's value is ``-learning_rate * G / (H + lambda)``.
Missing values learn their direction at every split (both sides are scored,
as XGBoost's ``hist`` does).  With ``split_method = "exact"`` a value lying
on a split's midpoint goes right, as in XGBoost's ``exact`` method
(:data:`~fedforest.tree.splitter.BELOW_FLOAT32_MIDPOINT`).

Objectives: squared error, binary logistic, and multiclass softmax with one
tree per class per round.  One tree per class (XGBoost's layout) keeps every
tree a single-output tree with three statistics per row, so the grower, the
model format, the one-round prediction and the encrypted statistics need no
second kind of tree; a multi-output tree would carry ``2 K`` statistics per
row and vector leaves.
"""
import math

import numpy as np

from ...errors import InputError
from ...tree.growth import EPSILON, SplitSettings, row_subsample
from ..messages import bad_message, shown
from ..party_splitter import LocalParties, PartySplitter
from ..tree_grower import TreeGrower
from ...tree import criterion
from ...tree.format import NO_CHILD
from ...tree.impurity import NEWTON
from ...tree.labels import RowLabels
from .params import BoostParams

SQUARED_ERROR = "reg:squarederror"
LOGISTIC = "binary:logistic"
SOFTMAX = "multi:softprob"
OBJECTIVES = (SQUARED_ERROR, LOGISTIC, SOFTMAX)
MIN_HESSIAN = 1e-16     # the least hessian of a row (logistic and softmax), as XGBoost keeps it
MIN_LOSS_CHANGE = 1e-6  # a split must reduce the loss by more than this (XGBoost's kRtEps)
MAX_EXACT = 2 ** 53     # integers below this are exact in float64


# --------------------------------------------------------------------------- objectives
def sigmoid(margin):
    return 1.0 / (1.0 + np.exp(-margin))


def softmax(margin):
    z = margin - margin.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def n_outputs(objective, n_classes):
    return n_classes if objective == SOFTMAX else 1


def check_base_score(objective, base_score):
    """``base_score`` is a probability under the logistic loss: refused outside
    (0, 1), as XGBoost refuses it (an end of the interval is an infinite margin)."""
    if objective == LOGISTIC and base_score is not None and not 0.0 < float(base_score) < 1.0:
        raise InputError("base_score", f"must lie in (0, 1) for binary classification (the logistic loss): it "
                                       f"is the starting probability of the positive class, got {base_score!r}")


def base_margin(objective, y, weight, n_classes, base_score=None):
    """The starting margin of every row (one per output): ``base_score`` as
    XGBoost reads it (a probability for the logistic objective), or, when
    None, the constant that minimises the weighted loss."""
    check_base_score(objective, base_score)
    k = n_outputs(objective, n_classes)
    if objective == SQUARED_ERROR:
        b = float(np.average(y, weights=weight)) if base_score is None else float(base_score)
        return np.full(k, b)
    if objective == LOGISTIC:
        p = float(np.average(y, weights=weight)) if base_score is None else float(base_score)
        p = min(max(p, 1e-7), 1.0 - 1e-7)
        return np.full(k, np.log(p / (1.0 - p)))
    # softmax is unchanged by a constant added to every class: the margins start at 0
    return np.zeros(k) if base_score is None else np.full(k, float(base_score))


def gradients(objective, y, margin, weight):
    """Per-row gradient and hessian of the weighted loss, ``(n, outputs)`` each,
    rounded to a power-of-two grid per output (:func:`grid_values`), so that
    every node and bin sum is exact: the same in any order, on any party, in
    the encrypted mode's integer slots, and by histogram subtraction.

    Integer weights multiply the rounded values on a grid sized for the total
    weight, so a row of weight ``k`` adds exactly what ``k`` copies of it add
    (the same trees as the repeated rows); other weights are rounded with
    the values they multiply."""
    return gradient_grid(objective, y, margin, weight)[:2]


def gradient_grid(objective, y, margin, weight):
    """:func:`gradients` and their grid: ``(g, h, q_g, q_h, steps)`` with
    ``g = q_g * steps[:, 0]`` and ``h = q_h * steps[:, 1]`` per output."""
    g, h = _raw_gradients(objective, y, margin, None)
    n = g.shape[0]
    counts = None
    if weight is not None:
        total = float(np.sum(weight))
        if np.all(weight == np.floor(weight)) and total < MAX_EXACT:
            counts, n = weight.astype(np.int64), max(int(total), 1)
        else:
            g, h = g * weight[:, None], h * weight[:, None]
    out = [[], [], [], [], []]
    for k in range(g.shape[1]):
        for j, v in enumerate((g[:, k], h[:, k])):
            rounded, q, step = grid_values(v, n)
            if counts is not None:
                rounded, q = rounded * counts, q * counts
            out[j].append(rounded)
            out[2 + j].append(q)
            out[4].append(step)
    return (np.column_stack(out[0]), np.column_stack(out[1]), np.column_stack(out[2]),
            np.column_stack(out[3]), np.array(out[4]).reshape(-1, 2))


def _raw_gradients(objective, y, margin, weight):
    """The unrounded gradients and hessians."""
    if objective == SQUARED_ERROR:
        g = margin[:, 0] - y
        h = np.ones_like(g)
        g, h = g[:, None], h[:, None]
    elif objective == LOGISTIC:
        p = sigmoid(margin[:, 0])
        g = (p - y)[:, None]
        h = np.maximum(p * (1.0 - p), MIN_HESSIAN)[:, None]
    else:
        p = softmax(margin)
        onehot = np.zeros_like(p)
        onehot[np.arange(y.shape[0]), y.astype(np.int64)] = 1.0
        g = p - onehot
        h = np.maximum(2.0 * p * (1.0 - p), MIN_HESSIAN)
    if weight is not None:
        g = g * weight[:, None]
        h = h * weight[:, None]
    return g, h


def grid_bound(n_rows):
    """The largest grid integer of a gradient or hessian of ``n_rows`` rows:
    a sum of ``n_rows`` of them stays below 2**53."""
    return (MAX_EXACT - 1) // max(int(n_rows), 1)


def grid_values(v, n_rows):
    """``v`` rounded to ``q * step`` with integer ``|q| <= grid_bound(n_rows)``
    and ``step`` a power of two: any sum of the rounded values over at most
    ``n_rows`` rows is exact in float64, whatever the order of the additions,
    and equals the sum of the integers ``q`` (the encrypted mode's slots)
    times ``step``.  The rounding error is at most ``max|v| * n_rows / 2**53``
    (about 1e-11 of the largest gradient at 1e5 rows, far below XGBoost's
    float32 gradients).  Returns ``(rounded values, q, step)``."""
    v = np.asarray(v, dtype=np.float64)
    bound = grid_bound(n_rows)
    top = float(np.max(np.abs(v))) if v.size else 0.0
    step = 1.0 if top == 0.0 else 2.0 ** math.ceil(math.log2(top / bound))
    while top / step > bound:   # guard against log2 rounding
        step *= 2.0
    q = np.rint(v / step)
    return q * step, q.astype(np.int64), step


def loss(objective, y, margin, weight=None):
    """The validation loss early stopping watches: RMSE, log loss or multiclass log loss."""
    w = np.ones(y.shape[0]) if weight is None else weight
    if objective == SQUARED_ERROR:
        return float(np.sqrt(np.average((margin[:, 0] - y) ** 2, weights=w)))
    if objective == LOGISTIC:
        p = np.clip(sigmoid(margin[:, 0]), 1e-15, 1 - 1e-15)
        return float(-np.average(y * np.log(p) + (1 - y) * np.log(1 - p), weights=w))
    p = np.clip(softmax(margin), 1e-15, 1.0)
    return float(-np.average(np.log(p[np.arange(y.shape[0]), y.astype(np.int64)]), weights=w))


def predict_output(objective, margin):
    """Probabilities (classification) or values (regression) from margins."""
    if objective == SQUARED_ERROR:
        return margin[:, 0]
    if objective == LOGISTIC:
        p = sigmoid(margin[:, 0])
        return np.column_stack((1.0 - p, p))
    return softmax(margin)


def holdout(n_rows, params, seed):
    """Training and validation rows (validation only with early stopping)."""
    if params.early_stopping_rounds is None:
        return np.arange(n_rows), None
    n_valid = int(round(params.validation_fraction * n_rows))
    if not 1 <= n_valid < n_rows:
        raise InputError("validation_fraction", f"holds out {n_valid} of {n_rows} rows; early stopping "
                                                "needs at least one row on each side")
    order = np.random.default_rng([seed, 1]).permutation(n_rows)
    return np.sort(order[n_valid:]), np.sort(order[:n_valid])


class EarlyStopping:
    """The validation loss after every round and the best round so far
    (kept where the labels are: the master in plain mode, the label holder
    with encrypted gradients)."""

    def __init__(self, rounds):
        self.rounds = rounds
        self.history, self.best, self.best_loss = [], None, np.inf

    def add(self, r, loss):
        """Record the loss after round ``r``; True when boosting should stop."""
        self.history.append(float(loss))
        if self.history[-1] < self.best_loss:
            self.best, self.best_loss = r, self.history[-1]
            return False
        return r - self.best >= self.rounds


# --------------------------------------------------------------------------- the grower's side
class GradientLabels(RowLabels):
    """Per-row statistics of one boosting tree: ``(h, g, 0)`` times the row's
    count in the tree's subsample (the label-statistics seam of
    :mod:`fedforest.tree.labels`)."""
    is_classification = False
    n_classes = 1
    n_stats = 3
    sample_weight = None

    def __init__(self, g, h):
        self.g = np.ascontiguousarray(g, dtype=np.float64)
        self.h = np.ascontiguousarray(h, dtype=np.float64)

    @property
    def n_rows(self):
        return self.g.shape[0]

    def begin(self, label_holder):
        """What a tree's first message adds for a party (plain gradients): every
        row's gradient and hessian of the tree's output."""
        return {"grad": self.g, "hess": self.h}

    def tree_stats(self, counts, class_weight):
        c = np.asarray(counts, dtype=np.float64)
        yw = np.column_stack((self.h * c, self.g * c, np.zeros_like(c)))
        return np.zeros(c.shape[0], dtype=np.int32), yw


class RoundGradients(RowLabels):
    """A boosting tree's labels at a party that receives them in plaintext: a
    tree's first message holds, besides the row subsample, every row's
    gradient and hessian of the tree's output (``grad``, ``hess``); the
    per-row statistics are ``(h, g, 0)`` times the row's subsample count."""
    is_classification = False
    n_classes = 1
    n_stats = 3
    sample_weight = None
    begin_keys = ("grad", "hess")
    # gradients and hessians lie on an exact grid (gradient_grid()): every sum, and a
    # parent's histogram minus a child's, is exact, so subtraction changes no bit
    exact_sums = True
    records_splits = True

    def split_records(self, won, n_nodes, settings):
        """What a party stores with its tree beside the structure: the loss
        reduction (``gain``) and the hessian sum (``cover``) of every split it
        owns (0 elsewhere), XGBoost's importance statistics of its own
        columns, from the children's sums it computed for its partitions
        (``won``: (nodes, children's statistics) per level; see
        :func:`split_gain_cover`)."""
        gain, cover = np.zeros(n_nodes), np.zeros(n_nodes)
        for nodes, stats in won:
            gain[nodes], cover[nodes] = split_gain_cover(stats[0::2], stats[1::2], settings.reg_lambda)
        return {"gain": gain, "cover": cover}

    def check_begin(self, msg, n_rows):
        for key in ("grad", "hess"):
            v = msg.get(key)
            if not (isinstance(v, np.ndarray) and v.dtype == np.float64 and v.shape == (n_rows,)
                    and np.all(np.isfinite(v))):
                raise bad_message(f"{key!r} must be {n_rows} finite float64 values (one per aligned "
                                  f"row), got {shown(v)}")
        if np.any(msg["hess"] < 0):
            raise bad_message("'hess' holds negative hessians")
        return {"grad": msg["grad"], "hess": msg["hess"]}

    @staticmethod
    def tree_stats(counts, class_weight, grad, hess):
        return GradientLabels(grad, hess).tree_stats(counts, None)


def split_gain_cover(left, right, reg_lambda):
    """Loss reduction and cover of splits from their children's ``(H, G, 0)``
    sums (rows of ``left`` and ``right``): the node's weighted impurity minus
    its children's, as :func:`fedforest.tree.importance.split_gain_cover`
    computes it from a tree's stored ``impurity`` and
    ``weighted_n_node_samples`` (the same arithmetic, so the same numbers)."""
    left = np.ascontiguousarray(left, dtype=np.float64)
    right = np.ascontiguousarray(right, dtype=np.float64)
    w = [criterion.stats_weight_impurity(s, False, NEWTON, float(reg_lambda)) for s in (left + right, left, right)]
    (wn, imp_n), (wl, imp_l), (wr, imp_r) = w
    return wn * imp_n - wl * imp_l - wr * imp_r, wn


class BoostTrees:
    """The decisions that make a tree a boosting tree (the forest's
    :class:`~fedforest.tree.growth.ForestTrees` component): every node that
    may split is searched (a node's impurity says nothing under the Newton
    criterion); a split is made when its loss change is more than
    ``MIN_LOSS_CHANGE`` and at least ``gamma``, tested as the split is found
    (XGBoost's ``hist`` method); leaves hold ``-G / (H + lambda)``."""

    def __init__(self, settings):
        self.s = settings

    def searchable(self, impurity):
        return np.ones(impurity.shape[0], dtype=bool)

    def takes(self, best):
        return np.isfinite(best) & (best > MIN_LOSS_CHANGE) & (best + EPSILON >= self.s.min_impurity_decrease)

    def leaf_values(self, stats, weight):
        return (-stats[:, 1] / (stats[:, 0] + self.s.reg_lambda))[:, None]


class BoostGrower(TreeGrower):
    """The forest's grower for boosting trees: a row subsample without
    replacement (each row kept with probability ``subsample``) instead of the
    bootstrap, and the boosting tree's decisions (:class:`BoostTrees`)."""

    kind_class = BoostTrees

    def _draw_counts(self, rng):
        # the very draw every party of a job recomputes to check the tree's counts
        return row_subsample(rng, self.n_rows, self.params.subsample)


    # the master keeps each tree's leaf of every grown row (under "row_leaf"), so it
    # can update the margins of those rows without asking the parties
    record_row_leaves = False

    def _keeps_rows(self):
        return self.record_row_leaves or super()._keeps_rows()

    def _master_tree(self, tree):
        out = super()._master_tree(tree)
        if self.record_row_leaves:
            leaves = np.flatnonzero(tree.col["left"][:tree.n] == NO_CHILD)
            starts, ends = tree.bounds(leaves)
            order = np.argsort(starts, kind="stable")   # the leaves' row ranges tile tree.rows
            at = np.full(self.n_rows, -1, dtype=np.int64)
            at[tree.rows] = np.repeat(leaves[order], (ends - starts)[order])
            out["row_leaf"] = at
        return out



_WARM = set()


def warm_up(split_method):
    """Load (or compile) the boosting growth kernels (the Newton criterion) for
    this process on a tiny problem (once per process and split method)."""
    if split_method in _WARM:
        return
    X = np.array([[0.0, 1.0], [1.0, np.nan], [2.0, 0.0], [3.0, 1.0]])
    params = BoostParams(n_estimators=1, max_depth=2, min_child_weight=0.0,
                         split_method=split_method).grower_params()
    settings = SplitSettings(params, 4, False, 1, 2)
    labels = GradientLabels(np.array([-1.0, -0.5, 0.5, 1.0]), np.ones(4))
    BoostGrower(LocalParties([PartySplitter(X, settings, RoundGradients())]), labels, params, settings, [2]).grow(0)
    _WARM.add(split_method)
