"""Single-process gradient boosting on the Federated Forest's grower.

:class:`BoostClassifier` and :class:`BoostRegressor` run the vertical
boosting algorithm (:mod:`fedforest.vertical.boost.boosting`) on pooled columns in
one process: the same grower, parties' split search, subsample and column
draws as the federated mode, so they are its reference for losslessness.
Settings are named as XGBoost's scikit-learn estimators name them.
"""
import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin

from ...constraints import Interval, Options, check
from ...data.validation import CLASSIFICATION, REGRESSION, encode_labels
from ...tree.growth import SplitSettings, merge_partials, tree_seeds
from ..party_splitter import LocalParties, PartySplitter
from ...tree.format import node_values
from ...tree.importance import IMPORTANCE_TYPES, boost_feature_importances
from ...tree.params import resolve_n_jobs
from ...tree.predict import prepare_X
from ...tree.threads import set_threads
from . import boosting as B
from .params import CONSTRAINTS as BOOST_CONSTRAINTS
from ..estimator_base import TableEstimator, check_sample_weight

CONSTRAINTS = dict(BOOST_CONSTRAINTS, n_jobs=(None, Interval(int, 1), Interval(int, None, -1)),
                   importance_type=(Options(*IMPORTANCE_TYPES),))


class _BaseBoost(TableEstimator):
    _regressor = "BoostRegressor"

    def __init__(self, n_estimators=100, *, learning_rate=0.3, max_depth=6, min_child_weight=1.0,
                 reg_lambda=1.0, gamma=0.0, subsample=1.0, colsample_bytree=1.0, max_bins=255,
                 base_score=None, early_stopping_rounds=None, validation_fraction=0.1, random_state=None,
                 split_method="hist", n_jobs=-1, importance_type="gain"):
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.min_child_weight = min_child_weight
        self.reg_lambda = reg_lambda
        self.gamma = gamma
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.max_bins = max_bins
        self.base_score = base_score
        self.early_stopping_rounds = early_stopping_rounds
        self.validation_fraction = validation_fraction
        self.random_state = random_state
        self.split_method = split_method
        self.n_jobs = n_jobs
        self.importance_type = importance_type

    def _params(self):
        values = self.get_params()
        for name, constraints in CONSTRAINTS.items():
            check(name, values[name], constraints)
        return B.BoostParams(**{k: values[k] for k in B.BoostParams.names()})

    def fit(self, X, y, sample_weight=None):
        """Boost on ``X`` (rows by columns, NaN = missing) and ``y``;
        ``sample_weight`` multiplies each row's gradient and hessian.  With
        ``early_stopping_rounds``, a ``validation_fraction`` of the rows is
        held out and boosting stops once its loss has not improved for that
        many rounds; the model keeps the rounds up to the best one."""
        params = self._params()
        set_threads(resolve_n_jobs(self.n_jobs))
        X, y = self._validate(X, y)
        codes, classes = encode_labels(y, self._task)
        weight = check_sample_weight(sample_weight, X.shape[0])
        if self._task == CLASSIFICATION:
            objective = B.LOGISTIC if classes.size == 2 else B.SOFTMAX
            target = codes.astype(np.float64)
        else:
            objective, target = B.SQUARED_ERROR, np.asarray(codes, dtype=np.float64)
        seed = params.random_state if params.random_state is not None else \
            int(np.random.SeedSequence().entropy % (2 ** 63))
        train, valid = B.holdout(X.shape[0], params, seed)
        rounds, base, best, history = boost(X, target, weight, objective, classes.size if
                                            self._task == CLASSIFICATION else 1, params, seed, train, valid)
        self.estimators_ = rounds
        self.base_margin_ = base
        self.objective_ = objective
        self.best_iteration_ = best
        self.evals_result_ = history
        self.n_features_in_ = X.shape[1]
        self.random_state_ = seed
        self.params_ = params
        if self._task == CLASSIFICATION:
            self.classes_ = classes
            self.n_classes_ = classes.size
        return self

    @property
    def feature_importances_(self):
        """XGBoost's scikit-learn ``feature_importances_``: per feature, the
        ``importance_type`` score of ``Booster.get_score`` over every split of
        every tree (``gain``: mean loss reduction of its splits, ``total_gain``:
        their sum, ``weight``: the number of splits, ``cover``/``total_cover``:
        mean/summed hessian sum of the split nodes), divided by the sum over
        the features (all zeros when no tree splits)."""
        self._check_fitted()
        check("importance_type", self.importance_type, CONSTRAINTS["importance_type"])
        trees = [t for trees in self.estimators_ for t in trees]
        return boost_feature_importances(trees, self.n_features_in_, self.importance_type)

    def _margins(self, X):
        """The margins, ``(n_rows, outputs)``: the base margin plus every tree's leaf value."""
        self._check_fitted()
        X, _ = self._validate(X)
        set_threads(resolve_n_jobs(self.n_jobs))
        return margins(self.estimators_, self.base_margin_, X, self.params_.split_method)

    def _output(self, X):
        margin = self._margins(X)
        return B.predict_output(self.objective_, margin)


class BoostClassifier(ClassifierMixin, _BaseBoost):
    """Gradient-boosted trees (binary logistic, or softmax with one tree per
    class per round) grown with the vertical grower on one machine."""
    _task = CLASSIFICATION

    def decision_function(self, X):
        """The margins (log-odds of ``classes_[1]`` for two classes, shape
        ``(n_rows,)``; one column per class for more), as scikit-learn's classifiers give them."""
        margin = self._margins(X)
        return margin[:, 0] if self.objective_ == B.LOGISTIC else margin

    def predict_proba(self, X):
        return self._output(X)

    def predict(self, X):
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]


class BoostRegressor(RegressorMixin, _BaseBoost):
    """Gradient-boosted regression trees (squared error) grown with the vertical grower on one machine."""
    _task = REGRESSION

    def predict(self, X):
        return self._output(X)


def margins(rounds, base, X, split_method):
    """Base margin plus the leaf values of every round's trees (tree ``k`` of a
    round adds to output ``k``)."""
    Xp = prepare_X(X, split_method)
    out = np.tile(np.asarray(base, dtype=np.float64), (Xp.shape[0], 1))
    for trees in rounds:
        for k, tree in enumerate(trees):
            out[:, k] += node_values(tree, Xp)[:, 0]
    return out


def boost(X, target, weight, objective, n_classes, params, seed, train, valid):
    """The boosting loop on pooled columns; returns the rounds' trees (each a
    list of one tree per output, leaf values already scaled by the learning
    rate), the base margin, the best round and the validation history.
    Training rows of weight zero take no part, not even in the bin edges or
    thresholds (as in the forest): a weight of zero is the row left out."""
    if weight is not None:
        train = train[weight[train] > 0]
    Xt, yt = X[train], target[train]
    wt = None if weight is None else weight[train]
    k_out = B.n_outputs(objective, n_classes)
    base = B.base_margin(objective, yt, np.ones(yt.shape[0]) if wt is None else wt, n_classes,
                         params.base_score)
    gparams = params.grower_params()
    settings = SplitSettings(gparams, Xt.shape[0], False, 1, Xt.shape[1])
    splitter = PartySplitter(Xt, settings, B.RoundGradients())
    splitter.keep_leaf_rows = True     # the training rows' leaves, for their margins
    start = B.GradientLabels(np.zeros(Xt.shape[0]), np.ones(Xt.shape[0]))   # each round brings its own
    grower = B.BoostGrower(LocalParties([splitter]), start, gparams, settings, [Xt.shape[1]])
    seeds = tree_seeds(seed, params.n_estimators * k_out)
    margin = np.tile(base, (Xt.shape[0], 1))
    Xp = prepare_X(Xt, params.split_method)
    if valid is not None:
        Xv = prepare_X(X[valid], params.split_method)
        yv = target[valid]
        wv = None if weight is None else weight[valid]
        vmargin = np.tile(base, (Xv.shape[0], 1))
    rounds, history, best, best_loss = [], [], None, np.inf
    for r in range(params.n_estimators):
        g, h = B.gradients(objective, yt, margin, wt)
        # the round's trees (one per output) grow together, level by level
        masters, _ = grower.grow_batch(seeds[r * k_out:(r + 1) * k_out], first=r * k_out,
                                       labels=[B.GradientLabels(g[:, k], h[:, k]) for k in range(k_out)])
        partials = list(splitter.trees)
        splitter.trees.clear()
        splitter.tree_ids.clear()
        trees = []
        for k in range(k_out):
            leaf = partials[k].pop("leaf_of_row", None)
            tree = merge_partials(masters[k], [partials[k]], [0])
            tree["value"] = tree["value"] * params.learning_rate
            if leaf is not None and leaf.min() >= 0:    # every row grew with the tree: its leaf is known
                margin[:, k] += np.asarray(tree["value"])[leaf, 0]
            else:
                margin[:, k] += node_values(tree, Xp)[:, 0]
            if valid is not None:
                vmargin[:, k] += node_values(tree, Xv)[:, 0]
            trees.append(tree)
        rounds.append(trees)
        if valid is None:
            continue
        history.append(B.loss(objective, yv, vmargin, wv))
        if history[-1] < best_loss:
            best, best_loss = r, history[-1]
        elif r - best >= params.early_stopping_rounds:
            break
    if valid is not None:
        rounds = rounds[:best + 1]
    return rounds, base, best, history
