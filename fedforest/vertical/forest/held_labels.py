"""The forest's labels at the label holder of an encrypted job.
"""

import numpy as np

from ...tree.labels import RowLabels
from ..encrypted_labels import node_int_stats


class HeldLabels(RowLabels):
    """The forest's labels at the label holder: the plain labels its own
    columns are scored with (``labels``, a
    :class:`~fedforest.tree.labels.PlainLabels`) and their codes on the slot
    grid ``spec`` (the exact integer node statistics)."""

    begin_keys = ()
    value_scale = 1.0

    def __init__(self, labels, codes, spec):
        self.plain = labels
        self.is_classification, self.n_classes = labels.is_classification, labels.n_classes
        self.n_stats, self.sample_weight = labels.n_stats, labels.sample_weight
        self.codes = np.asarray(codes, dtype=np.int64)
        self.spec = spec

    def tree_stats(self, counts, class_weight):
        return self.plain.tree_stats(counts, class_weight)

    def tree_begin(self, msg):
        return {}

    def node_ints(self, t, rows, starts, ends):
        """Exact integer statistics of nodes, in the slot layout."""
        return node_int_stats(self.spec, self.codes, t["counts"], rows, starts, ends)

    def row_ints(self, t, rows):
        """Each row's own statistics in the slot layout: its bootstrap count in
        its class's slot, or ``(w, w (q + B), w q^2)``."""
        w = t["counts"][rows].astype(np.int64)
        q = self.codes[rows]
        if self.spec.is_classification:
            out = np.zeros((rows.size, self.spec.n_stats), dtype=np.int64)
            out[np.arange(rows.size), q] = w
            return out
        return np.stack((w, w * (q + self.spec.bias), w * q * q), axis=1)

    def to_float(self, t, ints):
        """The float statistics the kernels use, from exact slot sums."""
        return self.spec.to_float(ints)
