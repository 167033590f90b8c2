"""Every tree's draws are the job seed's, checked by every party: the master
sends the job's seed (``random_state``) with the setup message, and each party
recomputes a tree's bootstrap counts (forest) or row subsample (boosting) from
``tree_seeds(seed, n_trees)[t]`` with the grower's own function before it
takes the tree's first message.  A master that chooses a tree's rows (all of
its draws on two rows: the root then splits only where their labels differ,
one label-equality bit per tree read from the splits it sees) stops the job.
Honest runs keep their draws bit for bit (the lossless, batch, resume,
encrypted and federated boosting tests)."""
import numpy as np
import pytest

from fedforest.errors import RemoteError
from fedforest.jobs import run_vertical
from fedforest.tree import growth
from fedforest.vertical import protocol
from fedforest.vertical import model_files as model_io

from test_hostile_master_messages import OPTS, PAILLIER, _boost_frames, _frames, hostile, refused

DRAWS = "'counts' are not the tree's draws from the job's seed"
BOOST = dict(mode="vertical_boost", n_estimators=3, max_depth=3)


def chosen_draws(monkeypatch, change, tree=0, n_rows=None):
    """A hostile master that chooses tree ``tree``'s rows: its grower draws as
    usual, then replaces that tree's counts by ``change(counts)`` and grows the
    tree on them (so its own messages agree with each other, as a master's
    that means to read the splits would; the bench's ``ChosenDraws``).  Only
    the master runs a grower in a federated job; draws of another size than
    the job's ``n_rows`` (a warm-up's) are left alone."""
    from fedforest.vertical.boost.boosting import BoostGrower
    from fedforest.vertical.tree_grower import TreeGrower
    seen = {"n": 0}
    for cls in (TreeGrower, BoostGrower):
        orig = cls.__dict__["_draw_counts"]

        def draw(g, rng, orig=orig):
            counts = orig(g, rng)
            if n_rows is not None and counts.size != n_rows:
                return counts
            seen["n"] += 1
            return change(counts.copy()) if seen["n"] == tree + 1 else counts
        monkeypatch.setattr(cls, "_draw_counts", draw)
    return seen


def _on_two_rows(c):
    """Every draw of the tree on two rows (the sum kept; the largest count within bounds)."""
    total = int(c.sum(dtype=np.int64))
    out = np.zeros_like(c)
    out[0], out[7] = (total // 2, total - total // 2) if c.max() > 1 else (1, 1)
    return out


def _permuted(c):
    """The honest counts moved by one row: the same sum, the same largest count."""
    out = np.roll(c, 1)
    assert not np.array_equal(out, c)
    return out


def _refused_draws(tmp_path, monkeypatch, change, tree=0, n_rows=120, **options):
    seen = chosen_draws(monkeypatch, change, tree, n_rows)
    err = refused(tmp_path, "'counts'", **options)
    assert seen["n"] > tree
    assert DRAWS in err.remote_message and f"(tree {tree})" in err.remote_message, err.remote_message
    return err


# (a), (b): a forest's bootstrap draws on two rows of the master's choosing
@pytest.mark.parametrize("privacy", [PAILLIER, {"label_privacy": "plain"}], ids=["paillier", "plain"])
@pytest.mark.parametrize("tree", [0, 1])
def test_a_forest_trees_draws_on_two_chosen_rows_are_refused(tmp_path, monkeypatch, privacy, tree):
    _refused_draws(tmp_path, monkeypatch, _on_two_rows, tree=tree, **privacy)


# (c): boosting's row subsample replaced by two rows (no total to check against)
@pytest.mark.parametrize("privacy", [PAILLIER, {"label_privacy": "plain"}], ids=["paillier", "plain"])
def test_a_boosting_subsample_of_two_chosen_rows_is_refused(tmp_path, monkeypatch, privacy):
    _refused_draws(tmp_path, monkeypatch, _on_two_rows, n_rows=150, frames=_boost_frames(), subsample=0.5,
                   **dict(BOOST, **privacy))


# (d): a permutation passes the sum and largest-count checks, not the draw check
@pytest.mark.parametrize("mode,options", [
    ("vertical", PAILLIER),
    ("vertical", {"label_privacy": "plain", "tree_batch": 1}),
    ("vertical_boost", dict(PAILLIER, subsample=0.5)),
])
def test_a_permutation_of_the_honest_draws_is_refused(tmp_path, monkeypatch, mode, options):
    extra = dict(BOOST, frames=_boost_frames(), n_rows=150) if mode == "vertical_boost" else {}
    _refused_draws(tmp_path, monkeypatch, _permuted, tree=1, **dict(extra, **options))


# (e): the job's seed is the party's own random_state where it sets one
@pytest.mark.parametrize("mode", ["vertical", "vertical_boost"])
def test_a_seed_other_than_the_partys_own_random_state_is_refused(tmp_path, monkeypatch, mode):
    hostile(monkeypatch, protocol.SETUP, lambda m, d: dict(m, random_state=OPTS["random_state"] + 1))
    extra = dict(BOOST, frames=_boost_frames(), **PAILLIER) if mode == "vertical_boost" else PAILLIER
    err = refused(tmp_path, "'random_state'", **extra)
    assert f"must be this party's {OPTS['random_state']}" in err.remote_message


@pytest.mark.parametrize("value", [None, -1, True, 2.5, "3"])
def test_the_jobs_seed_is_a_seed(tmp_path, monkeypatch, value):
    hostile(monkeypatch, protocol.SETUP, lambda m, d: dict(m, random_state=value))
    refused(tmp_path, "'random_state'", **dict(OPTS, random_state=None))


def test_a_master_that_draws_from_another_seed_than_it_sends_is_refused(tmp_path, monkeypatch):
    """Without a random_state of its own a party takes the master's seed, and
    then the draws of that seed only."""
    hostile(monkeypatch, protocol.SETUP, lambda m, d: dict(m, random_state=m["random_state"] + 1))
    err = refused(tmp_path, "'counts'", **dict(OPTS, random_state=None))
    assert DRAWS in err.remote_message


def test_a_resumed_run_draws_from_the_seed_of_the_checkpoint(tmp_path, monkeypatch):
    """The seed a party stored with its trees is the one a resumed run must send."""
    md = str(tmp_path / "m")
    opts = dict(OPTS, random_state=None, n_estimators=4)
    monkeypatch.setenv("FEDFOREST_FAULT_CRASH", "1:2")
    with pytest.raises(RemoteError):
        run_vertical("train", _frames(), model_dir=md, **opts)
    monkeypatch.delenv("FEDFOREST_FAULT_CRASH")
    seed = model_io.read_manifest(model_io.party_dir(md, 1))["random_state_used"]
    assert model_io.read_manifest(model_io.party_dir(md, 0))["random_state_used"] == seed
    hostile(monkeypatch, protocol.SETUP, lambda m, d: dict(m, random_state=seed + 1))
    with pytest.raises(RemoteError) as err:
        run_vertical("train", _frames(), model_dir=md, resume=True, **opts)
    assert "'random_state' differs from the seed of this party's checkpoint" in err.value.remote_message


def test_every_party_checks_every_trees_draws(tmp_path, monkeypatch):
    """An honest job: each party recomputes each tree's draws once (batches and
    a resumed run number the trees of the forest: tree t draws from seed t)."""
    calls = []
    orig = growth.tree_draws

    def spy(random_state, n_trees, draw):
        draws = orig(random_state, n_trees, draw)
        return lambda t: (calls.append(t), draws(t))[1]
    monkeypatch.setattr(growth, "tree_draws", spy)
    md = str(tmp_path / "m")
    monkeypatch.setenv("FEDFOREST_FAULT_CRASH", "1:2")
    with pytest.raises(RemoteError):
        run_vertical("train", _frames(), model_dir=md, **dict(OPTS, n_estimators=5))
    monkeypatch.delenv("FEDFOREST_FAULT_CRASH")
    calls.clear()
    s = run_vertical("train", _frames(), model_dir=md, resume=True, tree_batch=2, **dict(OPTS, n_estimators=5))
    assert s["trees_built"] == 3 and s["batches"] == [2, 1]
    assert sorted(calls) == [2, 2, 3, 3, 4, 4]      # two parties, trees 2 to 4


def test_the_grower_and_the_parties_draw_alike():
    """The draws a party recomputes are the grower's (one function of the tree's generator)."""
    from fedforest.tree.params import ForestParams, validate
    from fedforest.tree.labels import PlainLabels
    from fedforest.vertical.tree_grower import TreeGrower
    params = validate(ForestParams(n_estimators=3, max_samples=0.7, random_state=11), "classification")
    y = np.arange(50) % 2
    grower = TreeGrower(None, PlainLabels(y, True, 2), params, None, [2, 2])
    seeds = growth.tree_seeds(11, 3)
    draws = growth.tree_draws(11, 3, lambda rng: growth.bootstrap_counts(rng, 50, 35))
    for t in range(3):
        want = grower._draw_counts(growth.tree_rng(seeds[t]))
        assert want.dtype == draws(t).dtype and np.array_equal(want, draws(t)) and want.sum() == 35
    assert draws(3) is None and draws(None) is None
    sub = growth.tree_draws(11, 3, lambda rng: growth.row_subsample(rng, 50, 0.5))
    assert set(np.unique(sub(0))) == {0, 1} and not np.array_equal(sub(0), sub(1))
