"""Federated-ID3 (Truex et al., without differential privacy), horizontal mode ``federated_id3``.

The server grows one ID3 tree level by level.  Each round it sends the splits
made at the last level and asks every client for the class counts of its rows
per open node and per (node, feature, category); it sums the counts, takes
the unused feature of highest information gain at each node (one child per
category with rows) and stops a node when it is pure, at ``max_depth``, when
no feature is left or no gain is positive.  One round per level.  Numeric
columns with many values are cut into equal-frequency bins first
(``numeric_bins``).

This module declares the mode; the implementation is in :mod:`.roles`
(imported when the mode runs).
"""
from ...constraints import Interval
from ...data.tasks import CLASSIFICATION
from ...federation.mode import HORIZONTAL, Mode, Param
from ..declare import tree_params

NUMERIC_BINS = 8             # default bins of a numeric column

PARAMS = tree_params(tree_types=("id3",), default_type="id3") + (
    Param("numeric_bins", NUMERIC_BINS, (None, Interval(int, 2, 64)),
          "a numeric column with more distinct values than this (over all clients) is cut into about this "
          "many equal-frequency bins, whose edges the server agrees from the clients' quantile sketches; the "
          "bins are the column's categories (None: no binning; a column with more than 64 distinct values "
          "is then refused)"),
)

MODE = Mode(
    name="federated_id3", family=HORIZONTAL, table="federated_id3",
    summary="Federated-ID3: the server grows one ID3 tree level by level from the clients' class counts",
    params=PARAMS, impl="fedforest.horizontal.federated_id3.roles", tasks=(CLASSIFICATION,),
    roles=("server_train", "client_train", "predict_proba", "explain"))
MODES = (MODE,)
