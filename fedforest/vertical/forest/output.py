"""The forest's model output: the mean of its trees' leaf values."""
import numpy as np

from ..model_output import ModelOutput


class ForestOutput(ModelOutput):
    """Class fractions (classification) or means (regression), averaged over the trees."""

    def values(self, trees, row_leaves, n_rows, manifest):
        values = np.zeros((n_rows, trees[0]["value"].shape[1]))
        for tree, leaf in zip(trees, row_leaves):
            values += tree["value"][leaf]
        return values / len(trees)
