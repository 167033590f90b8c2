"""Boosting's model output: the base margin plus every tree's leaf value,
through the objective's link (probabilities, or values)."""
import numpy as np

from ..model_output import ModelOutput
from . import boosting


class BoostOutput(ModelOutput):
    """Tree ``t`` of a round adds to output ``t % n_outputs`` of the margin."""

    def values(self, trees, row_leaves, n_rows, manifest):
        boost = manifest["boost"]
        k_out = boost["n_outputs"]
        margin = np.tile(np.asarray(boost["base_margin"], dtype=np.float64), (n_rows, 1))
        for i, (tree, leaf) in enumerate(zip(trees, row_leaves)):
            margin[:, i % k_out] += tree["value"][leaf, 0]
        return boosting.predict_output(boost["objective"], margin).reshape(n_rows, -1)
