"""Declarations the horizontal modes share: the settings of the client-tree
modes.  Cheap to import (no numpy): the registry imports every mode's
declaration to list it, and an implementation only when its mode runs."""
from ..constraints import MAX_DEPTH, Interval, Options
from ..federation.mode import Param

CART_DEFAULT_DEPTH = 5


def tree_params(tree_types=("cart", "id3"), default_type="cart"):
    """The settings of a client-tree mode."""
    return (
        Param("tree_type", default_type, (Options(*tree_types),),
              "'cart' (numeric columns, scikit-learn's CART) or 'id3' (categorical columns)"
              if len(tree_types) > 1 else f"{tree_types[0]!r} (the only kind this mode grows)", text=True),
        Param("max_depth", None, (None, Interval(int, 1, MAX_DEPTH)),
              f"depth of the trees (None: {CART_DEFAULT_DEPTH} for CART, half the columns for ID3)"),
        Param("criterion", None, (None, Options("gini", "entropy")),
              "split quality of CART client trees (None: 'gini')", text=True),
        Param("random_state", None, (None, Interval(int, 0)), "seed of the client trees"),
    )
