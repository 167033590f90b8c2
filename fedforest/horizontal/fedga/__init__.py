"""FedGA-Tree: personalized decision trees by a federated genetic algorithm
(horizontal mode ``fedga``), with the paper's baselines as modes of their own:

* ``fedga``: the server evolves a population of tree *structures* (decision
  features only, :mod:`fedforest.tree.structure`); every generation the
  active clients fit thresholds and leaf values of each candidate on their own
  rows and return its fitness on held-out rows; at the end each client picks
  the structure that suits its rows best and refits it (:mod:`.roles`);
* ``fedga_local``: every client keeps a CART tree of its own cross-validated
  depth (the local baseline);
* ``fedga_central``: the clients send their rows; the server fits one CART
  tree of cross-validated depth (the centralized baseline, rows in the clear);
* ``ibm_tree``: one global CART tree grown level by level from class counts
  with Laplace noise (the DP tree of Truex et al. with CART instead of ID3,
  classification only) (:mod:`.baselines`).

See docs/fedga.md.
"""
import numbers

from ...constraints import Interval
from ...data.tasks import CLASSIFICATION
from ...errors import InputError
from ...federation.mode import HORIZONTAL, Mode, Param

DEPTH_LIMIT = 20
CLASSIFICATION_POPULATION, REGRESSION_POPULATION = 20, 40

_DEPTH_RANGE = (
    Param("min_depth", 2, (Interval(int, 1, DEPTH_LIMIT),), "smallest depth the clients' cross-validation tries"),
    Param("max_depth", 15, (Interval(int, 1, DEPTH_LIMIT),), "largest depth the clients' cross-validation tries"),
    Param("cv_folds", 5, (Interval(int, 2, 20),), "folds of the clients' depth cross-validation"),
)
_BINNING = (
    Param("binning", False, (bool,),
          "classification: each client bins its numeric columns into n_bins quantile bins fitted on its "
          "training rows (2 uniform bins when that leaves one), as in the paper's experiments"),
    Param("n_bins", 5, (Interval(int, 2, 1024),), "quantile bins per numeric column when binning"),
)
_SEED = (Param("random_state", None, (None, Interval(int, 0)), "seed of every random draw of the job"),)
_PARTICIPATION = Param(
    "participation", 1.0, (Interval(numbers.Real, 0, 1, closed="right"),),
    "fraction of the clients active in a generation (ibm_tree: in a level), drawn afresh each time; "
    "round(participation * clients) must be at least 1")
_POSITIVE = (Param(
    "positive_class", None, (None, str, Interval(int)),
    "two classes: the class whose F1 is scored (fitness and depth cross-validation where there are any, and "
    "the reported metrics), matched as text as in the evaluate command; None: the minority class of the "
    "label counts pooled over the clients (the one that sorts last on a tie), recorded in the summary. "
    "Must be one of the job's two classes", text=True),)
_EPSILON = Param("epsilon", 1.0, (Interval(numbers.Real, 0, closed="neither"),), "privacy budget of the Laplace noise")

PARAMS = _DEPTH_RANGE + (
    Param("population_size", None, (None, Interval(int, 2, 10_000)),
          "structures in the population (None: 20 for classification, 40 for regression); at least the "
          "number of clients"),
    Param("generations", 100, (Interval(int, 1, 10_000),), "generations of the genetic algorithm"),
    Param("train_ratio", 0.8, (Interval(numbers.Real, 0, 1, closed="right"),),
          "share of each client's rows that fits a candidate; the rest scores it (stratified, seeded)"),
    Param("refit", True, (bool,),
          "last round: each client refits the structure it chose on all its training rows (true), or keeps "
          "the tree it scored, fitted on its train_ratio fit rows (false, Algorithm 1's last step; see "
          "'Imbalanced two-class data' in docs/fedga.md)"),
    Param("leaf_ratio", 0.01, (Interval(numbers.Real, 0, 1, closed="left"),),
          "probability that a slot of a random structure is a leaf (nil)"),
    Param("tournament_size", 3, (Interval(int, 1, 10_000),), "members drawn per tournament"),
    Param("flip_fraction", 0.05, (Interval(numbers.Real, 0, 1),),
          "node flip changes max(1, round(flip_fraction * slots)) slots"),
    Param("swap_fraction", 0.05, (Interval(numbers.Real, 0, 1),),
          "node swap exchanges max(1, round(swap_fraction * slots)) pairs of slots"),
    _PARTICIPATION,
    _EPSILON,
    Param("phi_threshold", 0.25, (Interval(numbers.Real, 0, closed="neither"),),
          "regression, Eq. 1: vote for scoring on all rows when the folds' R^2 vary less than this"),
    Param("theta_threshold", 0.02, (Interval(numbers.Real, 0),),
          "regression, Eq. 1: ... and the depths' R^2 vary more than this"),
    Param("unique_threshold", 0.8, (Interval(numbers.Real, 0, 1),),
          "regression, Eq. 2: vote for elitism when the share of distinct targets exceeds this"),
) + _BINNING + _POSITIVE + _SEED

BASELINE_PARAMS = _DEPTH_RANGE + _BINNING + _POSITIVE + _SEED

IBM_PARAMS = (
    Param("max_depth", 6, (Interval(int, 1, DEPTH_LIMIT),), "depth of the global tree"),
    _EPSILON,
    _PARTICIPATION,
    Param("n_bins", 5, (Interval(int, 2, 1024),), "quantile bins per numeric column (always binned)"),
) + _POSITIVE + _SEED


def n_active(participation, n_clients):
    """Clients active in a generation: ``participation * n_clients`` rounded half up."""
    import math
    return int(math.floor(participation * n_clients + 0.5 + 1e-9))


def _check(cfg):
    if cfg.data is not None and cfg.n_parties is None:
        cfg.set("n_parties", len(cfg.data))
    if cfg.values.get("positive_class") is not None and cfg.task == "regression":
        raise InputError("positive_class", "applies to classification with two classes, not to regression")
    lo = cfg.values.get("min_depth")
    if lo is not None and lo > cfg.max_depth:
        raise InputError("min_depth", f"must be at most max_depth ({cfg.max_depth}), got {lo}")
    if cfg.n_parties is None:
        return
    if "participation" in cfg.values and n_active(cfg.participation, cfg.n_parties) < 1:
        raise InputError("participation", f"must leave at least one active client of {cfg.n_parties}, "
                                          f"got {cfg.participation}")
    size = cfg.values.get("population_size", 0)
    if size is None:          # the default of the task
        size = {"classification": CLASSIFICATION_POPULATION, "regression": REGRESSION_POPULATION}.get(cfg.task)
    if size and size < cfg.n_parties:
        raise InputError("population_size", f"must be at least the number of clients ({cfg.n_parties}), "
                                             f"got {size}")


_ROLES = ("server_train", "client_train", "predict_proba", "explain")


def _mode(name, summary, params, impl, tasks=None):
    extra = {"tasks": tasks} if tasks else {}
    return Mode(name=name, family=HORIZONTAL, table=name, summary=summary, params=params,
                impl=f"fedforest.horizontal.fedga.{impl}", check=_check, roles=_ROLES, **extra)


FEDGA = _mode("fedga", "FedGA-Tree: a federated genetic algorithm evolves tree structures; each client fits "
                       "and keeps its own tree", PARAMS, "roles")
LOCAL = _mode("fedga_local", "FedGA-Tree baseline: every client keeps a CART tree of its own cross-validated "
                             "depth", BASELINE_PARAMS, "baselines")
CENTRAL = _mode("fedga_central", "FedGA-Tree baseline: one CART tree of cross-validated depth on all clients' "
                                 "rows (moves every row and label in the clear)", BASELINE_PARAMS, "baselines")
IBM = _mode("ibm_tree", "DP tree of Truex et al. (CART variant): one global tree from class counts with "
                        "Laplace noise", IBM_PARAMS, "baselines", tasks=(CLASSIFICATION,))
MODES = (FEDGA, LOCAL, CENTRAL, IBM)
