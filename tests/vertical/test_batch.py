"""Trees grown in batches: the same forest whatever the batch size, two
exchanges per level for the whole batch, checkpoints and --resume per batch,
and the same forest whatever the number of threads."""
import numpy as np
import pytest
from sklearn.datasets import make_classification, make_regression

from fedforest import ForestClassifier, ForestRegressor, RemoteError
from fedforest.errors import InputError
from fedforest.jobs import run_vertical
from fedforest.tree import growth
from fedforest.vertical import messages
from fedforest.vertical import party_splitter
from fedforest.vertical import tree_grower
from fedforest.tree.params import resolve_n_jobs
from fedforest.vertical import model_files as model_io

from _util import assert_same_trees, complete_trees, party_frames

GROUPS = [[0, 1, 2], [3, 4], [5, 6, 7]]
OFFSETS = [0, 3, 5, 8]


def _data(task, n=400, seed=3):
    if task == "classification":
        X, y = make_classification(n, 8, n_informative=5, n_classes=3, random_state=seed)
    else:
        X, y = make_regression(n, 8, n_informative=5, noise=3.0, random_state=seed)
    rng = np.random.default_rng(seed)
    X = np.round(X, 2)
    X[rng.random(X.shape) < 0.03] = np.nan
    return X, y


@pytest.mark.parametrize("task,extra", [("classification", {"feature_sampling": "node"}),
                                        ("regression", {"feature_sampling": "tree",
                                                        "split_method": "exact"})])
def test_batches_grow_the_same_forest_in_two_rounds_per_level(tmp_path, task, extra):
    X, y = _data(task)
    frames = party_frames(X, y, GROUPS, label_party=1)
    depth, n_trees = 5, 7
    est_cls = ForestClassifier if task == "classification" else ForestRegressor
    ref = est_cls(n_estimators=n_trees, random_state=9, max_depth=depth, tree_batch=1, **extra).fit(X, y)
    rounds = {}
    for batch in (None, 3, 1):
        md = str(tmp_path / f"m{batch}")
        s = run_vertical("train", frames, task=task, label_column="y", model_dir=md,
                         n_estimators=n_trees, random_state=9, max_depth=depth, tree_batch=batch,
                         **extra)
        assert_same_trees(complete_trees(md, 3, OFFSETS), ref.estimators_)
        rounds[batch] = s["rounds_per_forest"]
        assert s["tree_batch"] == (n_trees if batch is None else batch)
    # find + partition per level for the whole batch, plus one commit per batch
    assert rounds[None] <= 2 * depth + 1
    assert rounds[3] <= 3 * (2 * depth + 1)
    assert rounds[1] > rounds[3] > rounds[None]
    # the single-process estimator also grows identical trees in one batch
    whole = est_cls(n_estimators=n_trees, random_state=9, max_depth=depth, **extra).fit(X, y)
    assert_same_trees(whole.estimators_, ref.estimators_)


def test_memory_budget_bounds_the_default_batch():
    per_tree = tree_grower.tree_state_bytes(10 ** 6, 3)
    assert growth.resolve_tree_batch(None, 100, 4096, per_tree) == 100
    small = growth.resolve_tree_batch(None, 100, 64, per_tree)
    assert 1 <= small < 100 and small * per_tree <= 64 * 2 ** 20
    assert growth.resolve_tree_batch(None, 100, 1, per_tree) == 1
    assert growth.resolve_tree_batch(8, 5, 1, per_tree) == 5
    paillier = tree_grower.tree_state_bytes(10 ** 6, 3, True, 2048)
    assert paillier > per_tree


def test_resumed_batch_equals_the_uninterrupted_run(tmp_path, monkeypatch):
    X, y = _data("regression", seed=5)
    frames = party_frames(X, y, GROUPS, label_party=2)
    md = str(tmp_path / "model")
    opts = dict(task="regression", label_column="y", model_dir=md, n_estimators=8,
                random_state=2, max_depth=4, tree_batch=3)
    # party 2 stores one tree of the second batch, then fails
    monkeypatch.setenv("FEDFOREST_FAULT_CRASH", "2:4")
    with pytest.raises(RemoteError) as err:
        run_vertical("train", frames, **opts)
    assert err.value.rank == 2 and "injected failure after 4 trees" in err.value.remote_message
    # the second batch's commit travels with the third batch's first message, which party 2
    # does not answer: the master counts only the first batch, the parties hold more
    master = model_io.read_manifest(model_io.party_dir(md, 0))
    assert master["n_trees"] == 3 and not master["complete"]
    assert model_io.read_manifest(model_io.party_dir(md, 1))["n_trees"] == 6
    assert model_io.read_manifest(model_io.party_dir(md, 2))["n_trees"] == 4
    monkeypatch.delenv("FEDFOREST_FAULT_CRASH")
    s = run_vertical("train", frames, resume=True, **opts)
    assert s["trees_built"] == 5
    ref = ForestRegressor(n_estimators=8, random_state=2, max_depth=4).fit(X, y)
    assert_same_trees(complete_trees(md, 3, OFFSETS), ref.estimators_)


def test_thread_count_does_not_change_the_forest(tmp_path):
    X, y = _data("classification", n=1500, seed=8)
    one = ForestClassifier(n_estimators=6, random_state=4, n_jobs=1).fit(X, y)
    two = ForestClassifier(n_estimators=6, random_state=4, n_jobs=2).fit(X, y)
    assert_same_trees(two.estimators_, one.estimators_)
    assert np.array_equal(one.predict_proba(X), two.predict_proba(X))
    exact1 = ForestRegressor(n_estimators=3, random_state=4, split_method="exact", n_jobs=1).fit(X, y)
    exact2 = ForestRegressor(n_estimators=3, random_state=4, split_method="exact", n_jobs=2).fit(X, y)
    assert_same_trees(exact2.estimators_, exact1.estimators_)
    frames = party_frames(X, y, GROUPS, label_party=0)
    for n_jobs in (1, 2):
        md = str(tmp_path / f"j{n_jobs}")
        s = run_vertical("train", frames, task="classification", label_column="y", model_dir=md,
                         n_estimators=6, random_state=4, n_jobs=n_jobs)
        assert s["n_jobs"] == n_jobs
        assert_same_trees(complete_trees(md, 3, OFFSETS), one.estimators_)


def test_tree_blocks_are_capped_and_do_not_change_the_forest(monkeypatch):
    """A rank runs at most BLOCK_THREADS tree-block threads whatever its
    kernel threads (more only wait for the GIL), and the forest is the same
    with any cap: with blocks of one tree's steps on 2 threads, or on none."""
    from fedforest.tree import threads as numba_threads
    assert [numba_threads.block_threads(n) for n in (1, 2, 4, 16, 128)] == [1, 2, 4, 4, 4]
    X, y = _data("classification", n=900, seed=3)
    runs = []
    for cap in (1, 2):
        monkeypatch.setattr(numba_threads, "BLOCK_THREADS", cap)
        pools = []
        real = tree_grower.ThreadPoolExecutor
        monkeypatch.setattr(tree_grower, "ThreadPoolExecutor",
                            lambda n, **k: pools.append(n) or real(n, **k))
        runs.append(ForestClassifier(n_estimators=8, random_state=1, max_depth=5, n_jobs=2).fit(X, y))
        monkeypatch.setattr(tree_grower, "ThreadPoolExecutor", real)
        assert all(n <= cap for n in pools)
        if cap == 1:
            assert pools == []          # a cap of one: no block threads at all
    assert_same_trees(runs[1].estimators_, runs[0].estimators_)
    assert np.array_equal(runs[0].predict_proba(X), runs[1].predict_proba(X))


@pytest.mark.parametrize("task,extra", [("classification", {"class_weight": "balanced"}),
                                        ("regression", {"split_method": "exact",
                                                        "feature_sampling": "tree"})])
def test_in_process_trees_apart_grow_the_level_wise_forest(monkeypatch, task, extra):
    """With several threads the single-process estimator runs each tree's
    rounds on its own pool thread (no level-wise step across the batch): the
    same trees as the level-wise growth.  (Where numba's threading layer takes
    no concurrent launches, no tree runs on a pool thread.)"""
    from fedforest.tree import threads as numba_threads
    X, y = _data(task, n=700, seed=6)
    est_cls = ForestClassifier if task == "classification" else ForestRegressor
    apart = []
    real = tree_grower.TreeGrower._grow_apart
    monkeypatch.setattr(tree_grower.TreeGrower, "_grow_apart",
                        lambda self, *a, **k: apart.append(1) or real(self, *a, **k))
    got = est_cls(n_estimators=9, random_state=5, max_depth=6, n_jobs=2, **extra).fit(X, y)
    expected = [1] if numba_threads.concurrent_launches_ok() else []
    assert apart == expected
    monkeypatch.setattr(party_splitter.LocalParties, "trees_apart", False)
    ref = est_cls(n_estimators=9, random_state=5, max_depth=6, n_jobs=2, **extra).fit(X, y)
    assert apart == expected
    assert_same_trees(got.estimators_, ref.estimators_)
    assert np.array_equal(got.predict(X), ref.predict(X))


def test_without_concurrent_kernel_launches_trees_run_in_turn(monkeypatch):
    """Where numba's threading layer cannot take launches from several threads
    (its workqueue fallback), no tree blocks run on threads: same forest."""
    from fedforest.tree import threads as numba_threads
    assert numba_threads.concurrent_launches_ok() in (True, False)
    X, y = _data("classification", n=600, seed=8)
    ref = ForestClassifier(n_estimators=6, random_state=4, n_jobs=2).fit(X, y)
    pools = []
    real_pool = tree_grower.ThreadPoolExecutor
    for module in (tree_grower, party_splitter):   # the grower's tree blocks and the parties'
        monkeypatch.setattr(module, "ThreadPoolExecutor", lambda *a, **k: pools.append(1) or real_pool(*a, **k))
    monkeypatch.setattr(numba_threads, "concurrent_launches_ok", lambda: False)
    got = ForestClassifier(n_estimators=6, random_state=4, n_jobs=2).fit(X, y)
    assert not pools
    assert_same_trees(got.estimators_, ref.estimators_)


def test_n_jobs_follows_the_cores_given(monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert resolve_n_jobs(-1) == 1
    assert resolve_n_jobs(3) == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    assert resolve_n_jobs(None) == 1 and resolve_n_jobs(-2) == 1


@pytest.mark.parametrize("var", ["MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"])
def test_ranks_sharing_a_host_share_its_cores(monkeypatch, var):
    """Unbound ranks of one mpiexec job on a host split its cores; a rank bound
    to fewer cores than the host has keeps its own; an explicit n_jobs is kept."""
    import os
    for v in ("OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert resolve_n_jobs(-1) == 8
    monkeypatch.setenv(var, "3")
    assert resolve_n_jobs(-1) == 2 and resolve_n_jobs(-2) == 1 and resolve_n_jobs(5) == 5
    # work the other ranks wait for (the key holder's encryption factors) takes the whole host
    assert resolve_n_jobs(-1, alone=True) == 8 and resolve_n_jobs(None, alone=True) == 8
    monkeypatch.setenv(var, "16")
    assert resolve_n_jobs(-1) == 1
    monkeypatch.setenv(var, "3")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 3, 4})     # bound by the launcher
    assert resolve_n_jobs(-1) == 3


def test_batches_are_sized_to_checkpoint_in_time():
    # fixed batches
    plan = growth.BatchPlan(3, 100, 300.0, 1.0)
    assert [plan.next_size(r) for r in (10, 7, 4, 1)] == [3, 3, 3, 1]
    # from the estimate: 10 s per tree, a checkpoint every 60 s: six trees, spread evenly
    plan = growth.BatchPlan(None, 100, 60.0, 10.0)
    assert plan.next_size(20) == 5            # 20 trees in four batches of five, not 6+6+6+2
    plan.record(5, 5.0)                       # measured: 1 s per tree
    assert plan.next_size(15) == 15
    # the memory bound caps the batch, whatever the time
    plan = growth.BatchPlan(None, 4, 60.0, 1e-6)
    assert plan.next_size(10) == 4 and plan.next_size(6) == 3
    # a tree slower than the interval: one tree per batch
    assert growth.BatchPlan(None, 100, 60.0, 1e4).next_size(5) == 1
    # the estimate: plain trees are cheap, encrypted ones far dearer, depth caps the levels
    plain = tree_grower.estimated_tree_seconds(10 ** 5, 10, 10)
    assert plain < 1.0 < tree_grower.estimated_tree_seconds(10 ** 5, 10, 10, 2048)
    assert tree_grower.estimated_tree_seconds(10 ** 5, 10, None) > plain


def test_a_short_checkpoint_interval_checkpoints_every_tree_and_grows_the_same_forest(tmp_path):
    X, y = _data("classification", n=200)
    frames = party_frames(X, y, GROUPS)
    opts = dict(task="classification", label_column="y", n_estimators=4, random_state=1, max_depth=3)
    one = run_vertical("train", frames, model_dir=str(tmp_path / "one"), **opts)
    each = run_vertical("train", frames, model_dir=str(tmp_path / "each"), checkpoint_minutes=1e-9, **opts)
    assert one["batches"] == [4] and each["batches"] == [1, 1, 1, 1]
    assert each["rounds_per_forest"] > one["rounds_per_forest"]
    assert_same_trees(complete_trees(str(tmp_path / "each"), 3, OFFSETS),
                      complete_trees(str(tmp_path / "one"), 3, OFFSETS))


@pytest.mark.parametrize("name,value", [("tree_batch", 0), ("n_jobs", 0), ("batch_memory_mb", 0),
                                        ("checkpoint_minutes", 0)])
def test_bad_batch_settings(tmp_path, name, value):
    X, y = _data("classification", n=60)
    frames = party_frames(X, y, GROUPS)
    with pytest.raises(InputError, match=f"{name}: must be"):
        run_vertical("train", frames, task="classification", label_column="y",
                     model_dir=str(tmp_path / "m"), n_estimators=2, **{name: value})
    assert not (tmp_path / "m").exists()
    if name not in ("batch_memory_mb", "checkpoint_minutes"):
        with pytest.raises(InputError, match=f"{name}: must be"):
            ForestClassifier(n_estimators=2, **{name: value}).fit(X, y)


def test_batch_reply_cuts_each_trees_part_and_refuses_wrong_counts():
    replies = [{"gain": np.array([1.0, 2.0]), "bits": np.array([7], np.uint8)},
               {"gain": np.array([3.0])},
               {"gain": np.array([4.0, 5.0, 6.0]), "bits": np.array([1, 2], np.uint8)}]
    msg = messages.join_replies(replies)
    view = messages.BatchReply(msg, 0, [4, 7, 9])
    np.testing.assert_array_equal(view.part(9).take("gain", 3), [4.0, 5.0, 6.0])
    np.testing.assert_array_equal(view.part(4).take("gain", 2), [1.0, 2.0])
    assert "bits" not in view.part(7) or view.part(7).parts["bits"].size == 0
    with pytest.raises(ValueError, match="sent 1 'gain' entries for a tree that expects 2"):
        view.part(7).take("gain", 2)
    view.part(4).take("bits", 1)
    with pytest.raises(ValueError, match="no tree asked for"):
        view.check_used()       # tree 9's bits were never taken
    bad = dict(msg, **{"len.gain": np.array([2, 1, 2])})     # counts do not add up
    with pytest.raises(ValueError, match="do not match"):
        messages.BatchReply(bad, 1, [4, 7, 9])
    with pytest.raises(ValueError, match="do not match"):
        messages.BatchReply(msg, 1, [4, 7])                   # a tree too many in the reply
    lone = messages.BatchReply(messages.join_replies([{"gain": np.array([1.0])}]), 0, [3]).part(3)
    assert lone.take("bits", 0).size == 0                   # nothing expected, nothing sent
    with pytest.raises(ValueError, match="sent 0 'bits' entries"):
        messages.BatchReply(messages.join_replies([{"gain": np.array([1.0])}]), 0, [3]).part(3).take("bits", 2)
    with pytest.raises(ValueError, match="not an array of entries"):
        messages.BatchReply({"gain": np.float64(1.0), "len.gain": np.array([1])}, 0, [3])


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_children_statistics_that_do_not_add_up_are_refused(tmp_path, monkeypatch, task):
    """The master takes a split's children statistics from the winner and keeps
    no rows; statistics that do not sum to the parent's stop the job."""
    X, y = _data(task)
    frames = party_frames(X, y, GROUPS, label_party=1)
    orig = party_splitter.PartySplitter.partition

    def inflate(self, msg):
        reply = orig(self, msg)
        reply["stats"] = reply["stats"] * 1.01
        return reply

    monkeypatch.setattr(party_splitter.PartySplitter, "partition", inflate)
    with pytest.raises(ValueError, match="do not add up to their parents"):
        run_vertical("train", frames, task=task, label_column="y", model_dir=str(tmp_path / "m"),
                     n_estimators=2, random_state=1, max_depth=3)
    assert not (tmp_path / "m").exists() or not any((tmp_path / "m").rglob("*.npz"))
