"""Single-process estimators running the Federated Forest algorithm on one machine.

They grow exactly the trees a federated run grows with the same seed (same
bootstrap draws, feature subsets, split search and tie-breaking), which makes
them the reference for losslessness and a convenient way to use the algorithm
on pooled data.
"""
import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin

from ...data.validation import CLASSIFICATION, REGRESSION, encode_labels
from ...errors import InputError
from ...constraints import Interval, check
from ...tree.threads import set_threads
from ...tree.params import ForestParams, resolve_n_jobs, validate
from ...tree.growth import SplitSettings, merge_partials, tree_seeds
from ..party_splitter import LocalParties, PartySplitter
from ..tree_grower import TreeGrower
from ...tree.labels import PlainLabels
from ...tree.importance import feature_importances
from ...tree.predict import mean_leaf_values
from ..estimator_base import NotFitted, TableEstimator, check_sample_weight


_RUN_CONSTRAINTS = {"n_jobs": (None, Interval(int, 1), Interval(int, None, -1)),
                    "tree_batch": (None, Interval(int, 1))}


class _BaseForest(TableEstimator):

    def __init__(self, n_estimators=100, *, criterion=None, max_depth=None, min_samples_split=2,
                 min_samples_leaf=1, min_weight_fraction_leaf=0.0, min_impurity_decrease=0.0,
                 max_features="default",
                 bootstrap=True, max_samples=None, random_state=None, class_weight=None,
                 split_method="hist", max_bins=255, feature_sampling="node", n_jobs=-1,
                 tree_batch=None):
        self.n_estimators = n_estimators
        self.criterion = criterion
        self.max_depth = max_depth
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.min_weight_fraction_leaf = min_weight_fraction_leaf
        self.min_impurity_decrease = min_impurity_decrease
        self.max_features = max_features
        self.bootstrap = bootstrap
        self.max_samples = max_samples
        self.random_state = random_state
        self.class_weight = class_weight
        self.split_method = split_method
        self.max_bins = max_bins
        self.feature_sampling = feature_sampling
        self.n_jobs = n_jobs
        self.tree_batch = tree_batch

    def _params(self):
        for name, value in (("n_jobs", self.n_jobs), ("tree_batch", self.tree_batch)):
            check(name, value, _RUN_CONSTRAINTS[name])
        forest = {k: v for k, v in self.get_params().items() if k in ForestParams.names()}
        return validate(ForestParams(**forest), self._task)

    def fit(self, X, y, sample_weight=None):
        """Grow the forest on ``X`` (rows by columns, NaN = missing) and ``y``;
        ``sample_weight`` multiplies each row's bootstrap count (rows of weight
        0 take no part), as in scikit-learn's forests."""
        params = self._params()
        set_threads(resolve_n_jobs(self.n_jobs))
        X, y = self._validate(X, y)
        codes, classes = encode_labels(y, self._task)
        if codes.shape[0] != X.shape[0]:
            raise InputError("y", f"has {codes.shape[0]} labels but X has {X.shape[0]} rows")
        sample_weight = check_sample_weight(sample_weight, X.shape[0])
        is_clf = self._task == CLASSIFICATION
        n_classes = classes.size if is_clf else 1
        labels = PlainLabels(codes, is_clf, n_classes, sample_weight)
        settings = SplitSettings(params, X.shape[0], is_clf, n_classes, X.shape[1])
        splitter = PartySplitter(X, settings, labels)
        grower = TreeGrower(LocalParties([splitter]), labels, params, settings, [X.shape[1]],
                            y_codes=codes if is_clf else None, classes=classes)
        seed = params.random_state if params.random_state is not None else \
            int(np.random.SeedSequence().entropy % (2 ** 63))
        masters = grower.grow_forest(tree_seeds(seed, params.n_estimators), self.tree_batch)
        self.estimators_ = [merge_partials(m, [p], [0]) for m, p in zip(masters, splitter.trees)]
        self.n_features_in_ = X.shape[1]
        self.random_state_ = seed
        self.params_ = params
        if is_clf:
            self.classes_ = classes
            self.n_classes_ = n_classes
        return self

    @property
    def feature_importances_(self):
        """Mean decrease in impurity of each feature, as scikit-learn's forests
        compute it (sums to 1 unless no tree has a split)."""
        self._check_fitted()
        return feature_importances(self.estimators_, self.n_features_in_)

    def _mean_values(self, X):
        self._check_fitted()
        X, _ = self._validate(X)
        set_threads(resolve_n_jobs(self.n_jobs))
        return mean_leaf_values(self.estimators_, X, self.params_.split_method)


class ForestClassifier(ClassifierMixin, _BaseForest):
    """Random forest classifier grown with the Federated Forest algorithm on one machine."""
    _task = CLASSIFICATION

    def predict_proba(self, X):
        return self._mean_values(X)

    def predict(self, X):
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]


class ForestRegressor(RegressorMixin, _BaseForest):
    """Random forest regressor grown with the Federated Forest algorithm on one machine."""
    _task = REGRESSION

    def __init__(self, n_estimators=100, *, criterion=None, max_depth=None, min_samples_split=2,
                 min_samples_leaf=1, min_weight_fraction_leaf=0.0, min_impurity_decrease=0.0,
                 max_features="default",
                 bootstrap=True, max_samples=None, random_state=None,
                 split_method="hist", max_bins=255, feature_sampling="node", n_jobs=-1,
                 tree_batch=None):
        super().__init__(n_estimators, criterion=criterion, max_depth=max_depth,
                         min_samples_split=min_samples_split, min_samples_leaf=min_samples_leaf,
                         min_weight_fraction_leaf=min_weight_fraction_leaf,
                         min_impurity_decrease=min_impurity_decrease, max_features=max_features,
                         bootstrap=bootstrap, max_samples=max_samples, random_state=random_state,
                         split_method=split_method, max_bins=max_bins,
                         feature_sampling=feature_sampling, n_jobs=n_jobs, tree_batch=tree_batch)

    def predict(self, X):
        return self._mean_values(X)[:, 0]
