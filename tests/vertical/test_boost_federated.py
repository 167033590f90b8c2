"""The federated boosting job (``--mode vertical_boost``) grows the trees the
single-process BoostClassifier / BoostRegressor grows on the pooled columns,
tree for tree, for any column split over 1-4 parties; prediction, early
stopping and resume keep that identity."""
import numpy as np
import pandas as pd
import pytest

from fedforest import BoostClassifier, BoostRegressor, InputError, RemoteError
from fedforest.jobs import run_job
from fedforest.vertical import model_files as model_io

from _util import assert_same_trees, complete_trees, make_table, party_frames, random_groups


def _data(task, n_classes, seed, n=300, n_features=8, nan_share=0.05):
    return make_table(task, n_classes, seed, n, n_features, nan_share)


def _estimator(task, params):
    return (BoostClassifier if task == "classification" else BoostRegressor)(**params)


def _boost(command, frames, **options):
    if command == "train":
        options.setdefault("label_privacy", "plain")
    return run_job(command, frames, mode="vertical_boost", **options)


PAILLIER = dict(label_privacy="paillier", key_length=512, insecure_key=True)


def _without_label(frames):
    return [f.drop(columns=["y"]) if "y" in f else f for f in frames]


def _split(X, y, n_parties, seed, label_party):
    groups = random_groups(X.shape[1], n_parties, np.random.default_rng(seed))
    order = [c for g in groups for c in g]
    offsets = np.concatenate(([0], np.cumsum([len(g) for g in groups])))
    return party_frames(X, y, groups, label_party=label_party), order, offsets


CASES = [
    # task, classes, parties, split method, extra settings
    ("classification", 2, 1, "hist", {}),
    ("classification", 2, 2, "exact", {"subsample": 0.7, "reg_lambda": 3.0}),
    ("classification", 3, 3, "hist", {"colsample_bytree": 0.6, "min_child_weight": 2.0}),
    ("classification", 4, 4, "hist", {"gamma": 0.5, "learning_rate": 0.5}),
    ("regression", 1, 1, "exact", {}),
    ("regression", 1, 2, "hist", {"subsample": 0.8, "colsample_bytree": 0.5, "base_score": 3.0}),
    ("regression", 1, 4, "hist", {"max_depth": 5, "max_bins": 16}),
]


@pytest.mark.parametrize("task,n_classes,n_parties,method,extra", CASES)
def test_federated_boosting_equals_single_process(tmp_path, task, n_classes, n_parties, method, extra):
    seed = 7 * n_parties + n_classes
    X, y = _data(task, n_classes, seed)
    frames, order, offsets = _split(X, y, n_parties, seed, label_party=n_parties - 1)
    params = dict(dict(n_estimators=6, max_depth=3, random_state=seed, split_method=method), **extra)
    md = str(tmp_path / "model")
    s = _boost("train", frames, task=task, label_column="y", model_dir=md, **params)
    k_out = n_classes if n_classes > 2 else 1
    assert s["n_trees"] == 6 * k_out and s["n_rounds"] == 6
    # the trees of a round grow together: two exchanges per level and the commit
    assert s["rounds_per_boosting_round"] <= 2 * params["max_depth"] + 1
    est = _estimator(task, params).fit(X[:, order], y)
    reference = [t for trees in est.estimators_ for t in trees]
    trees = complete_trees(md, n_parties, offsets)
    assert_same_trees(trees, reference)
    assert sum(int((t["children_left"] >= 0).sum()) for t in trees) >= 6   # the trees split

    expected = est.predict_proba(X[:, order]) if task == "classification" else est.predict(X[:, order])
    for how in ("oneshot", "classical"):
        out = _boost("predict", _without_label(frames), model_dir=md, predict_method=how,
                     output=str(tmp_path / f"pred-{how}.csv"))
        values = out["values"] if task == "classification" else out["values"][:, 0]
        assert np.array_equal(values, expected), how
        if how == "oneshot":
            assert out["rounds"] == 1
    if task == "classification":
        assert np.array_equal(out["prediction"], est.predict(X[:, order]))


def test_early_stopping_keeps_the_best_round_as_the_single_process_does(tmp_path):
    X, y = _data("classification", 2, 3, n=400, nan_share=0.0)
    y = np.where(np.random.default_rng(3).random(y.size) < 0.25, 1 - y, y)   # noisy labels overfit
    frames, order, offsets = _split(X, y, 2, 3, label_party=0)
    params = dict(n_estimators=60, max_depth=4, learning_rate=0.8, random_state=1,
                  early_stopping_rounds=3, validation_fraction=0.25)
    md = str(tmp_path / "model")
    s = _boost("train", frames, task="classification", label_column="y", model_dir=md, **params)
    est = BoostClassifier(**params).fit(X[:, order], y)
    assert s["best_iteration"] == est.best_iteration_ < 59
    assert s["n_rounds"] == est.best_iteration_ + 1
    assert np.allclose(s["validation_loss"], est.evals_result_, rtol=0, atol=0)
    assert_same_trees(complete_trees(md, 2, offsets), [t for r in est.estimators_ for t in r])
    # every rank keeps exactly the best round's trees, and the model is complete
    for rank in range(3):
        folder = model_io.party_dir(md, rank)
        manifest = model_io.read_manifest(folder)
        assert manifest["complete"] and manifest["n_trees"] == s["n_trees"]
        kept = len([f for f in (tmp_path / "model" / folder.rsplit("/", 1)[1] / "trees").iterdir()])
        assert kept == s["n_trees"]


@pytest.mark.parametrize("early_stopping,privacy", [(None, "plain"), (50, "plain"), (None, "paillier"),
                                                    (2, "paillier")])
def test_resume_after_a_party_failure_gives_the_uninterrupted_model(tmp_path, monkeypatch, early_stopping,
                                                                   privacy):
    X, y = _data("classification", 3, 4, n=250, nan_share=0.0)
    frames, order, offsets = _split(X, y, 2, 4, label_party=1)
    md = str(tmp_path / "model")
    opts = dict(task="classification", label_column="y", model_dir=md, n_estimators=5, max_depth=3,
                random_state=9, subsample=0.8, early_stopping_rounds=early_stopping,
                **(PAILLIER if privacy == "paillier" else {}))
    monkeypatch.setenv("FEDFOREST_FAULT_CRASH", "2:7")   # party 2 stores 7 trees: two rounds of 3 and one tree
    with pytest.raises(RemoteError) as err:
        _boost("train", frames, **opts)
    assert err.value.rank == 2
    manifest = model_io.read_manifest(model_io.party_dir(md, 0))
    assert manifest["n_trees"] == 6 and not manifest["complete"]
    monkeypatch.delenv("FEDFOREST_FAULT_CRASH")
    s = _boost("train", frames, resume=True, **opts)
    assert s["trees_built"] == 9 - (s["n_rounds"] < 5) * 3 * (5 - s["n_rounds"])
    params = {k: v for k, v in opts.items() if k not in ("task", "label_column", "model_dir") + tuple(PAILLIER)}
    est = BoostClassifier(**params).fit(X[:, order], y)
    assert_same_trees(complete_trees(md, 2, offsets), [t for r in est.estimators_ for t in r])
    if early_stopping:
        # the losses are known where the labels are: the master (plain) or the label holder's own files
        losses = s["validation_loss"] if privacy == "plain" else \
            model_io.read_manifest(model_io.party_dir(md, 2))["validation_loss"]
        assert losses == est.evals_result_


def test_a_party_of_another_mode_is_refused_before_any_work(tmp_path):
    from fedforest.transport.inprocess import run_inprocess
    from fedforest.federation.config import resolve
    from fedforest.vertical.boost import roles as boost_roles
    from fedforest.vertical.forest import party

    X, y = _data("regression", 1, 0, n=60)
    frames = party_frames(X, y, [[0, 1, 2, 3], [4, 5, 6, 7]])
    base = dict(task="regression", label_column="y", model_dir=str(tmp_path / "m"), data=frames,
                progress=False, quiet=True)
    boost_cfg = resolve(None, dict(base, mode="vertical_boost"))
    forest_cfg = resolve(None, dict(base, mode="vertical"))
    with pytest.raises(RemoteError, match="master runs mode 'vertical_boost'"):
        run_inprocess(2, lambda c: boost_roles.server_train(c, boost_cfg),
                      lambda c: party.party_train(c, forest_cfg))
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("setting,value,message", [
    ("learning_rate", 0, "learning_rate"),
    ("subsample", 1.5, "subsample"),
    ("max_bins", 300, "max_bins"),
    ("label_privacy", "secret", "label_privacy"),
    ("criterion", "gini", "criterion"),
])
def test_bad_settings_stop_before_any_work(tmp_path, setting, value, message):
    X, y = _data("regression", 1, 0, n=60)
    frames = party_frames(X, y, [[0, 1, 2, 3], [4, 5, 6, 7]])
    with pytest.raises(InputError, match=message):
        _boost("train", frames, task="regression", label_column="y", model_dir=str(tmp_path / "m"),
               **{setting: value})
    assert not (tmp_path / "m").exists()


def _boosted_pair(tmp_path, n_classes, privacies=("plain", "paillier")):
    """A boosted model per label privacy (3 rounds, party 2 holds text labels),
    the frames and the single-process model of the same settings."""
    X, y = _data("classification", n_classes, 5 + n_classes, n=150, nan_share=0.05)
    names = np.array(["No", "Yes", "Maybe"])[:n_classes]
    labels = names[y]
    frames = party_frames(X, labels, [[0, 1, 2, 3], [4, 5, 6, 7]], label_party=1)
    params = dict(n_estimators=3, max_depth=3, random_state=0)
    for privacy in privacies:
        _boost("train", frames, task="classification", label_column="y", model_dir=str(tmp_path / privacy),
               **params, **(PAILLIER if privacy == "paillier" else {}))
    return X, labels, frames, BoostClassifier(**params).fit(X, labels)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_explain_row_prints_each_trees_margin_contribution_to_its_class(tmp_path, capsys, n_classes):
    """A boosting leaf is its contribution to the margin of the class its tree
    belongs to (tree t: class t % K in softmax, the positive class in binary);
    the base margin plus the printed contributions is the model's margin.
    Plain: the master prints them; encrypted: the label holder."""
    X, labels, frames, est = _boosted_pair(tmp_path, n_classes)
    row = 11
    margin = np.atleast_1d(est.decision_function(X[row:row + 1])[0])   # binary: one margin
    k_out = margin.shape[0]
    n_trees = 3 * k_out
    for privacy in ("plain", "paillier"):
        capsys.readouterr()
        _boost("predict", _without_label(frames), model_dir=str(tmp_path / privacy), explain_row=f"row-{row:05d}",
               explain_trees=n_trees, output=str(tmp_path / f"{privacy}.csv"), result_party=2)
        printed = capsys.readouterr().out.splitlines()
        if privacy == "plain":
            lines = [ln for ln in printed if ln.startswith(("tree ", "base margin: "))]
            contributions = [ln.rsplit(" [", 1)[1].rstrip("]") for ln in lines[1:]]
            assert all("value at the label holder" not in ln for ln in printed)
        else:
            lines = [ln[len("[party 2] "):] for ln in printed if ln.startswith("[party 2] base margin: ")
                     or ln.startswith("[party 2] tree ") and ": leaf " in ln]
            contributions = [ln.split(" value ", 1)[1] for ln in lines[1:]]
            master = [ln for ln in printed if ln.startswith("tree ")]
            assert len(master) == n_trees and all("[value at the label holder]" in ln for ln in master)
        assert lines[0].startswith("base margin: ") and len(contributions) == n_trees
        base = [float(part.split(" to ")[0]) for part in lines[0][len("base margin: "):].split(", ")]
        total = np.array(base, dtype=np.float64)
        assert total.shape == (k_out,)
        for t, text in enumerate(contributions):
            value, target = text.split(" to ", 1)
            cls = est.classes_[1] if n_classes == 2 else est.classes_[t % n_classes]
            assert target.startswith(f"the margin of class {cls}"), (privacy, t, text)
            total[t % k_out] += float(value)
        np.testing.assert_allclose(total, margin, rtol=0, atol=1e-8 * (n_trees + 1))


def test_boosted_importances_are_xgboosts_where_each_rank_can_know_them(tmp_path, capsys):
    """Plain gradients: each party's get_score of its own columns and the
    master's per party are the single-process model's; encrypted gradients:
    the label holder holds every column's (and XGBoost's normalised
    feature_importances_), the other party its split counts, the master none."""
    from fedforest.cli import main
    from fedforest.tree.importance import IMPORTANCE_TYPES, boost_split_table, split_scores
    from fedforest.vertical import explain
    X, labels, frames, est = _boosted_pair(tmp_path, 3)
    trees = [t for r in est.estimators_ for t in r]
    feature, gain, cover = boost_split_table(trees)
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]
    for kind in IMPORTANCE_TYPES:
        ref = split_scores(feature, gain, cover, 8, kind)
        for p, cols in enumerate(groups):
            names, got = explain.party_boost_scores(str(tmp_path / "plain" / f"party-{p + 1}"), kind)
            assert names == [f"f{c}" for c in cols]
            np.testing.assert_allclose(got, ref[cols], rtol=1e-12, atol=0)
        owner = np.where(feature < 4, 0, 1)
        np.testing.assert_allclose(explain.master_boost_party_scores(str(tmp_path / "plain" / "master"), kind),
                                   split_scores(owner, gain, cover, 2, kind), rtol=1e-12)
        names, scores, shares = explain.holder_boost_scores(str(tmp_path / "paillier" / "party-2"), kind)
        # the label holder's own columns by name, party 1's by number
        column = [c for n in names for c in ([int(n[1:])] if n.startswith("f") else [int(n.split("#")[1])])]
        assert len(set(column)) == len(column) == np.count_nonzero(ref)
        np.testing.assert_allclose(scores, ref[column], rtol=1e-12)
        est.set_params(importance_type=kind)
        np.testing.assert_allclose(shares, est.feature_importances_[column], rtol=1e-12)
        assert est.feature_importances_[np.setdiff1d(np.arange(8), column)].sum() == 0
    _, counts = explain.split_counts(str(tmp_path / "paillier" / "party-1"))
    np.testing.assert_array_equal(counts, split_scores(feature, gain, cover, 8, "weight")[:4])
    with pytest.raises(InputError, match="label holder"):
        explain.party_boost_scores(str(tmp_path / "paillier" / "party-1"))
    # the encrypted master's folder holds no label statistic, and the text says where they are
    master_tree = model_io.read_trees(str(tmp_path / "paillier" / "master"), 1)[0]
    assert not {"value", "impurity", "weighted_n_node_samples"} & set(master_tree)
    assert all(np.asarray(a).dtype.kind != "f" for a in master_tree.values())
    text = explain.describe(str(tmp_path / "paillier"), importance_type="total_cover")
    assert "held by the label holder (party 2)" in text and "'total_cover'" in text and "party 1 column #" in text
    capsys.readouterr()
    assert main(["explain", "--model-dir", str(tmp_path / "plain"), "--importance-type", "weight"]) == 0
    out = capsys.readouterr().out
    assert out.count("importance_type 'weight'") == 3
    assert main(["explain", "--model-dir", str(tmp_path / "plain"), "--importance-type", "gini"]) == 2
    assert "importance_type" in capsys.readouterr().err


def test_importance_type_is_refused_for_a_forest(tmp_path):
    from fedforest.jobs import run_vertical
    from fedforest.vertical import explain
    X, y = _data("classification", 2, 1, n=80, nan_share=0.0)
    frames = party_frames(X, y, [[0, 1, 2, 3], [4, 5, 6, 7]])
    run_vertical("train", frames, task="classification", label_column="y", model_dir=str(tmp_path / "f"),
                 n_estimators=2, max_depth=2, random_state=0)
    with pytest.raises(InputError, match="importance_type.*forest"):
        explain.describe(str(tmp_path / "f"), importance_type="gain")
    assert "mean decrease in impurity" in explain.describe(str(tmp_path / "f"))


ENCRYPTED_CASES = [
    # task, classes, parties, label party, extra settings
    ("classification", 2, 1, 0, {}),
    ("classification", 2, 2, 1, {"subsample": 0.7}),
    ("classification", 3, 3, 0, {"colsample_bytree": 0.6}),
    ("regression", 1, 2, 0, {"early_stopping_rounds": 2, "validation_fraction": 0.2}),
    ("regression", 1, 4, 2, {"max_bins": 16, "gamma": 1.0}),
]


@pytest.mark.parametrize("task,n_classes,n_parties,label_party,extra", ENCRYPTED_CASES)
def test_encrypted_gradients_grow_the_plain_and_single_process_trees(tmp_path, task, n_classes, n_parties,
                                                                     label_party, extra):
    seed = 5 * n_parties + n_classes
    X, y = _data(task, n_classes, seed, n=200)
    frames, order, offsets = _split(X, y, n_parties, seed, label_party=label_party)
    params = dict(dict(n_estimators=4, max_depth=3, random_state=seed), **extra)
    opts = dict(task=task, label_column="y", **params)
    enc = _boost("train", frames, model_dir=str(tmp_path / "enc"), **PAILLIER, **opts)
    plain = _boost("train", frames, model_dir=str(tmp_path / "plain"), **opts)
    assert enc["label_privacy"] == "paillier" and enc["key_length"] == 512
    assert enc["paillier_key_holder"] == "label_holder"
    assert enc["n_trees"] == plain["n_trees"] and enc["best_iteration"] == plain["best_iteration"]
    trees = complete_trees(str(tmp_path / "enc"), n_parties, offsets)
    assert_same_trees(trees, complete_trees(str(tmp_path / "plain"), n_parties, offsets))
    est = _estimator(task, params).fit(X[:, order], y)
    assert_same_trees(trees, [t for r in est.estimators_ for t in r])
    # the label holder holds the leaf values: it writes the predictions
    out = _boost("predict", _without_label(frames), model_dir=str(tmp_path / "enc"),
                 output=str(tmp_path / "p.csv"), result_party=label_party + 1)
    assert "values" not in out
    written = pd.read_csv(out["output"])
    expected = est.predict_proba(X[:, order]) if task == "classification" else est.predict(X[:, order])
    got = written[[c for c in written.columns if c.startswith("proba_")]].to_numpy() \
        if task == "classification" else written["prediction"].to_numpy()
    assert np.allclose(got, expected, rtol=0, atol=1e-15)


def test_encrypted_mode_refuses_short_keys_and_exact_splits_before_any_work(tmp_path):
    X, y = _data("regression", 1, 0, n=60)
    frames = party_frames(X, y, [[0, 1, 2, 3], [4, 5, 6, 7]])
    for bad, message in [(dict(label_privacy="paillier", key_length=512), "key_length"),
                         (dict(PAILLIER, split_method="exact"), "split_method")]:
        with pytest.raises(InputError, match=message):
            _boost("train", frames, task="regression", label_column="y", model_dir=str(tmp_path / "m"), **bad)
    assert not (tmp_path / "m").exists()


def _exchanges(monkeypatch, leaf_replies=None):
    """Every exchange of the master's growth, as the ops of its messages;
    ``leaf_replies`` (a list) gets, per exchange, whether a reply carried leaf sets."""
    from fedforest.vertical import messages
    from fedforest.vertical import common
    seen = []
    orig = common.RemoteParties.exchange

    def exchange(self, msgs):
        ops = set()
        for m in msgs:
            if m is None:
                continue
            ops.add(m["op"])
            for part in ("commit", "grow"):
                if isinstance(m.get(part), dict):
                    ops |= {v for k, v in m[part].items() if k.endswith(".op")}
            ops |= {v for k, v in m.items() if isinstance(k, str) and k.endswith(".op")}
        seen.append(ops)
        replies = orig(self, msgs)
        if leaf_replies is not None:
            parts = [p for r in replies if isinstance(r, dict) for p in (r, r.get("commit"))
                     if isinstance(p, dict)]
            # leaf sets: in the clear for the master (plain), sealed for the label holder (paillier)
            leaf_replies.append(any(str(k).startswith("leaf.") or (k == "sealed" and "n_trees" in p)
                                    for p in parts for k in p))
        return replies
    monkeypatch.setattr(common.RemoteParties, "exchange", exchange)
    return seen, messages


@pytest.mark.parametrize("privacy", ["plain", "paillier"])
def test_each_round_commit_travels_with_the_next_rounds_first_message(tmp_path, monkeypatch, privacy):
    """Without a validation share or a subsample the margins come from the trees'
    own partitions: a round costs two exchanges per level (Paillier: the label
    holder's decision is a third where another party won a split), and only
    the last round has a commit of its own.  The trees stay the single-process ones."""
    X, y = _data("classification", 2, 21, n=300)
    frames, order, offsets = _split(X, y, 2, 21, label_party=1)
    depth, n_rounds = 3, 5
    opts = dict(task="classification", label_column="y", n_estimators=n_rounds, max_depth=depth,
                random_state=21, learning_rate=0.5)
    extra = PAILLIER if privacy == "paillier" else {}
    leafy = []
    seen, messages = _exchanges(monkeypatch, leafy)
    s = _boost("train", frames, model_dir=str(tmp_path / "m"), **extra, **opts)
    assert s["n_trees"] == n_rounds
    assert len(leafy) == len(seen) and not any(leafy)   # the rows' leaves come from the growth: no leaf sets
    commits_alone = [ops for ops in seen if ops == {messages.COMMIT, "finish"}]
    assert len(commits_alone) == 1
    per_level = 2 if privacy == "plain" else 3
    assert s["rounds_total"] <= n_rounds * per_level * depth + 1 + (n_rounds if privacy == "paillier" else 0)
    assert sum(messages.FUSED in ops for ops in seen) == n_rounds - 1
    est = BoostClassifier(n_estimators=n_rounds, max_depth=depth, random_state=21, learning_rate=0.5)
    assert_same_trees(complete_trees(str(tmp_path / "m"), 2, offsets),
                      [t for r in est.fit(X[:, order], y).estimators_ for t in r])
    # with a subsample the parties' leaf sets are needed: a commit exchange per round
    seen.clear()
    leafy.clear()
    _boost("train", frames, model_dir=str(tmp_path / "sub"), subsample=0.8, **extra, **opts)
    assert len([ops for ops in seen if ops == {messages.COMMIT, "finish"}]) == n_rounds
    assert sum(leafy) == n_rounds       # each commit's replies carry the round's leaf sets


@pytest.mark.parametrize("mode,privacy", [("vertical_boost", "plain"), ("vertical_boost", "paillier"),
                                          ("vertical", "plain")])
def test_classification_of_a_continuous_label_is_refused_before_any_work(tmp_path, mode, privacy):
    X, y = _data("regression", 1, 0, n=60)
    frames = party_frames(X, y, [[0, 1, 2, 3], [4, 5, 6, 7]])
    extra = PAILLIER if privacy == "paillier" else {"label_privacy": "plain"}
    with pytest.raises((InputError, RemoteError), match=r"label column 'y': is continuous .*use regression"):
        run_job("train", frames, mode=mode, task="classification", label_column="y",
                model_dir=str(tmp_path / "m"), **extra)
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("privacy", ["plain", "paillier"])
def test_base_score_outside_0_1_is_refused_for_binary_classification(tmp_path, privacy):
    X, y = _data("classification", 2, 0, n=60)
    frames = party_frames(X, y, [[0, 1, 2, 3], [4, 5, 6, 7]])
    extra = PAILLIER if privacy == "paillier" else {}
    with pytest.raises((InputError, RemoteError), match=r"base_score: must lie in \(0, 1\) for binary"):
        _boost("train", frames, task="classification", label_column="y", model_dir=str(tmp_path / "m"),
               base_score=2.0, **extra)
    assert not (tmp_path / "m").exists()
