"""Names of the two kinds of rules and of the rule aggregation's choices
(:mod:`fedforest.tree.rules`), in a module without numpy so that mode
declarations can list them as setting choices."""

NUMERIC = "numeric"            # intervals lo < x <= hi (binary CART trees)
CATEGORICAL = "categorical"    # equalities x == value (multiway ID3 trees)
BOUNDS = ("loose", "intersect")             # how two numeric conditions on one side merge
OVER_MAX_RULES = ("drop_sets", "coarsen")   # what a merge does beyond its rule budget
# what a leaf adds to the class distribution of the merged rules it is part of: the class
# counts of the training rows behind it, or its class fractions (one vote per tree)
VOTES = ("rows", "fractions")
# how a global tree grown from rules picks its splits: a split that keeps every rule of
# the node whole (each rule in one child) when there is one, or the best split whatever
# rules it cuts (rules spanning it go to every child)
SPLITS = ("whole_first", "any")
