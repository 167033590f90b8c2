"""Label statistics: the seam between label privacy modes and split search.

The split kernels only see per-row statistics ``(ycls, yw)`` produced by a
label-statistics object for each tree (see :mod:`fedforest.tree.criterion`).
:class:`PlainLabels` computes them from labels held in the clear; a private
mode replaces it by an object with the same ``tree_stats`` method whose
statistics are encrypted, together with a split finder that evaluates
encrypted histograms at the label holder, which holds the key.
"""
import numpy as np

from ..errors import InputError


def _class_text(value):
    """A class label's text form; integral numbers without a decimal part
    (so the TOML key "1" matches the class 1 or 1.0)."""
    value = value.item() if hasattr(value, "item") else value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class RowLabels:
    """What growth asks of a tree's labels, with every optional hook's
    default, so that no caller probes for one.  A labels object gives the
    per-row statistics of a tree (``tree_stats``, ``n_stats``,
    ``is_classification``, ``n_classes``, ``n_rows``) and may declare:

    * ``sample_weight``: per-row weights multiplying the draws (None: none);
    * ``begin_keys``: the fields of a tree's first message a party's labels
      read (a boosting round's gradients, their ciphertexts, the output);
    * ``exact_sums``: every sum is an exact integer on a grid (histogram
      subtraction then changes no bit);
    * ``records_splits``: a party keeps statistics of the splits it won
      (``split_records``);
    * ``begin(label_holder)``: what a tree's first message adds on the
      master's side (for the label holder or another party);
    * ``bind(splitter)``, ``committed(tree_ids, trees)``: the party's
      splitter, once; the trees of a batch, once stored."""

    sample_weight = None
    begin_keys = ()
    exact_sums = False
    records_splits = False

    def begin(self, label_holder):
        return {}

    def bind(self, splitter):
        pass

    def committed(self, tree_ids, trees):
        pass

    def split_records(self, won, n_nodes, settings):
        return {}


class PlainLabels(RowLabels):
    """Labels in the clear (``label_privacy = "plain"``).

    ``y`` holds class codes 0..C-1 (classification) or float targets
    (regression).
    """

    def __init__(self, y, is_classification, n_classes, sample_weight=None):
        self.is_classification = bool(is_classification)
        self.n_classes = int(n_classes)
        if self.is_classification:
            self.y = np.ascontiguousarray(y, dtype=np.int32)
        else:
            self.y = np.ascontiguousarray(y, dtype=np.float64)
        # per-row weights multiplying the bootstrap counts (None: all ones)
        self.sample_weight = None if sample_weight is None else \
            np.ascontiguousarray(sample_weight, dtype=np.float64)

    @property
    def n_rows(self):
        return self.y.shape[0]

    @property
    def n_stats(self):
        return self.n_classes if self.is_classification else 3

    def tree_stats(self, counts, class_weight):
        """Per-row statistics of one tree from its bootstrap counts and the
        per-class weights (an empty array means no class weighting)."""
        if self.is_classification:
            # float64 weights in every task and mode, so the split and partition
            # kernels compile for one type of statistics (each type is a compile
            # of its own: twice the warm-up)
            w = np.asarray(counts).astype(np.float64)
            if class_weight.size:
                w = w * class_weight[self.y]
            if self.sample_weight is not None:
                w = w * self.sample_weight
            return self.y, w.reshape(-1, 1)
        w = counts.astype(np.float64)
        if self.sample_weight is not None:
            w = w * self.sample_weight
        y = self.y
        return np.zeros(y.shape[0], dtype=np.int32), np.column_stack((w, w * y, w * y * y))


def class_weight_vector(class_weight, y, counts, n_classes, classes):
    """Per-class weight multipliers of one tree, as scikit-learn's forests apply them.
    Returns an empty array when no class weighting is requested."""
    if class_weight is None:
        return np.empty(0)
    if isinstance(class_weight, dict):
        vec = np.ones(n_classes)
        names = [_class_text(c) for c in classes]
        for key, weight in class_weight.items():
            if _class_text(key) not in names:
                raise InputError("class_weight", f"key {key!r} matches no class; the classes are "
                                                 f"{names}")
            vec[names.index(_class_text(key))] = float(weight)
        return vec
    if class_weight == "balanced":
        freq = np.bincount(y, minlength=n_classes).astype(np.float64)
        n = y.shape[0]
    else:  # balanced_subsample: frequencies within the bootstrap sample
        freq = np.bincount(y, weights=counts, minlength=n_classes)
        n = counts.sum()
    vec = np.zeros(n_classes)
    nz = freq > 0
    vec[nz] = n / (np.count_nonzero(nz) * freq[nz])
    return vec
