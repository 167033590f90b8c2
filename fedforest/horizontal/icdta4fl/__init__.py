"""ICDTA4FL: rule aggregation of the clients' trees into one global tree (horizontal mode ``icdta4fl``).

Each client trains a local tree (CART with scikit-learn, or ID3) and sends
it; the server sends all trees to every client, which evaluates the other
clients' trees on its rows (accuracy, macro-F1); the server drops trees whose
mean score over the other clients does not reach the filter (mean of the
scores by default, median or a percentile), turns the kept trees into rules,
merges the rule sets (by default only the combinations of leaves the clients'
rows reach, as the clients count them: ``min_coverage``; 0: the Cartesian
product of the method) and grows the global tree from the
merged rules (see docs/horizontal.md for the choices where the method's text
and its published code differ: ``merge_bounds``, ``rule_weight``; and
``rule_votes``: by default a merged rule's class comes from its rows, which
each client counts with its own tree's class fractions, not from one vote per
tree).  The clients count their rows at every node of the
global tree (``n_node_samples``, printed per rule by ``explain``).  The final
tree and the merged rules go back to every client,
which evaluates the tree on its rows (and its ``test_data`` file) and saves it.

This module declares the mode; the implementation is in :mod:`.roles`
(imported when the mode runs).
"""
import numbers

from ...constraints import MAX_DEPTH, Interval, Options
from ...data.tasks import CLASSIFICATION
from ...federation.mode import HORIZONTAL, Mode, Param
from ...tree.rule_kinds import BOUNDS, OVER_MAX_RULES, SPLITS, VOTES
from ..declare import tree_params

FILTERS = ("mean", "median", "percentile", "none")
NUMERIC_BINS = 8             # default bins of a numeric column in an ID3 job
RULE_WEIGHTS = ("mass", "none")

PARAMS = tree_params() + (
    Param("filter", "mean", (Options(*FILTERS),),
          "tree filter: keep trees whose mean score on the other clients reaches the mean, median or a "
          "percentile of all trees' scores, or keep every tree ('none')", text=True),
    Param("filter_min_trees", 2, (Interval(int, 1),),
          "the filter keeps at least this many trees, the best scored (1: the method's text; with "
          "two clients its mean filter then keeps one tree and nothing is aggregated)"),
    Param("filter_percentile", 75.0, (Interval(numbers.Real, 0, 100),),
          "percentile of the 'percentile' filter"),
    Param("filter_metric", "accuracy", (Options("accuracy", "f1"),),
          "score the filter compares: 'accuracy' or 'f1' (macro)", text=True),
    Param("validation_fraction", 0.0, (Interval(numbers.Real, 0, 1, closed="left"),),
          "share of each client's rows held out of its tree to score the other clients' trees "
          "(0: trees are fitted on all rows and score the others on all rows)"),
    Param("merge_bounds", "intersect", (Options(*BOUNDS),),
          "CART rules bounding one feature on the same side: keep the more restrictive bound "
          "('intersect': the exact conjunction) or the less restrictive ('loose', the method's text)",
          text=True),
    Param("rule_votes", "rows", (Options(*VOTES),),
          "a merged rule's class distribution: its rows, each client counting its rows there with the class "
          "fractions of its own tree ('rows'; with min_coverage = 0, each leaf's class fractions times its "
          "rows), or the kept leaves' class fractions added up ('fractions', the method's text: one vote per "
          "tree, so a small client's pure leaves can outvote a large client's rows)", text=True),
    Param("rule_weight", "mass", (Options(*RULE_WEIGHTS),),
          "CART global tree: weigh each merged rule by its share of rows ('mass': the share of the counted "
          "rows it holds; with min_coverage = 0, estimated as the product of its leaves' row shares) in the "
          "split gain and leaf values, or count every rule once ('none', the method's text)", text=True),
    Param("min_coverage", 1, (Interval(int, 0, 1_000_000_000),),
          "merged rules where the clients' rows are: each client counts its rows in every combination of "
          "the kept trees' leaves that they reach, and combinations holding fewer than this many rows of all "
          "clients are no merged rules (1: only combinations no row reaches are left out; 0: every compatible "
          "combination, uncounted, as the method's text)"),
    Param("max_rules", 10000, (Interval(int, 1, 1_000_000),),
          "cap on merged rules (min_coverage > 0: on the leaf combinations the rows reach; 0: at each "
          "merge step; see over_max_rules)"),
    Param("over_max_rules", "drop_sets", (Options(*OVER_MAX_RULES),),
          "when merging the next tree's rules would exceed max_rules: 'drop_sets' leaves that tree and "
          "the lower scored ones out (trees merge best score first); 'coarsen' merges it but leaves the "
          "rules of least rows (or estimated mass) unrefined", text=True),
    Param("numeric_bins", NUMERIC_BINS, (None, Interval(int, 2, 64)),
          "ID3: a numeric column with more distinct values than this (over all clients) is cut into about "
          "this many equal-frequency bins, whose edges the server agrees from the clients' quantile "
          "sketches; the bins are the column's categories (None: no binning; a column with more than 64 "
          "distinct values is then refused)"),
    Param("global_max_depth", None, (None, Interval(int, 1, MAX_DEPTH)),
          "depth of the global tree (None: ID3, the client trees' depth; CART, no limit but "
          "global_max_nodes, as the method's published code; the method's text uses the client depth)"),
    Param("global_splits", "whole_first", (Options(*SPLITS),),
          "global tree: split where no merged rule of the node straddles the split whenever such a split "
          "exists ('whole_first': every rule goes to one child, so the tree has at most one leaf per merged "
          "rule), or take the best split whatever rules it cuts ('any', the method's text: cut rules are "
          "copied into every child)", text=True),
    Param("global_max_nodes", 2000, (Interval(int, 1, 1_000_000),),
          "node budget of the global tree (CART: grown best first; ID3: breadth first); with "
          "global_splits = 'whole_first' the tree rarely needs more than twice the merged rules"),
)

MODE = Mode(
    name="icdta4fl", family=HORIZONTAL, table="icdta4fl",
    summary="ICDTA4FL: client trees filtered by cross-evaluation, merged as rules into one global tree",
    params=PARAMS, impl="fedforest.horizontal.icdta4fl.roles", tasks=(CLASSIFICATION,),
    roles=("server_train", "client_train", "predict_proba", "explain"))
MODES = (MODE,)
