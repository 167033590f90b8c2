"""A malicious server with valid channel keys: every horizontal client checks the
server's in-job messages against its own settings and data.

Each job runs over the in-process transport with rank 0's outgoing messages
passed through an edit of one message (matched on its ``op``, sent to client
1); the job must stop with client 1's clean error (ProtocolError for a bad
message, InputError for a setting that is not the client's) naming the field,
with nothing saved in client 1's folder and nothing written outside the job
folder.  Every crafted message here was accepted (or crashed differently) before
the checks."""
import copy
import json
import os

import numpy as np
import pandas as pd
import pytest

from fedforest.errors import InputError, RemoteError
from fedforest.federation.config import resolve
from fedforest.horizontal.model_files import load_model
from fedforest.transport.inprocess import run_inprocess
from fedforest.tree import format as tree_format
from fedforest.tree.rules import leaf_rules
from fedforest.tree import hoeffding as ht

pytestmark = pytest.mark.timeout(180)


# ---------------------------------------------------------------------------
# Jobs with a hostile server
# ---------------------------------------------------------------------------
def _clients(folder, n=160, k=2, seed=0):
    """Small integer columns (so ID3 takes them too), a text column and a label."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 4, size=(n, 3))
    df = pd.DataFrame({f"x{j}": X[:, j] for j in range(3)})
    df["t"] = rng.choice(["a", "b", "c"], n)
    y = (X[:, 0] >= 2) ^ (df["t"] == "a").to_numpy()
    y ^= rng.random(n) < 0.05
    df["label"] = np.where(y, "yes", "no")
    paths = []
    for r, rows in enumerate(np.array_split(np.arange(n), k), start=1):
        paths.append(str(folder / f"c{r}.csv"))
        df.iloc[rows].to_csv(paths[-1], index=False)
    return paths


def at(op, change, rank=1, nth=1):
    """An edit: the ``nth`` ``op`` message to ``rank`` is a copy that ``change`` edits in place."""
    seen = {"n": 0}

    def edit(dest, msg):
        if dest != rank or msg.get("op") != op:
            return msg
        seen["n"] += 1
        if seen["n"] != nth:
            return msg
        out = copy.deepcopy(msg)
        change(out)
        return out
    return edit


def hostile(paths, edit, **options):
    """Train with rank 0's outgoing messages passed through ``edit(dest, msg)``."""
    options = dict({"progress": False, "quiet": True, "task": "classification", "label_column": "label",
                    "random_state": 0}, **options)
    options["data"] = list(paths)
    spec = resolve(None, options).spec
    server_fn, client_fn = spec.role("server_train"), spec.role("client_train")

    def master(comm):
        send = comm.send

        def bcast(msg):
            for c in comm.clients:
                send(c, edit(c, msg))
            return msg
        comm.send = lambda dest, msg: send(dest, edit(dest, msg))
        comm.bcast = bcast
        return server_fn(comm, resolve(None, options))
    return run_inprocess(len(paths), master, lambda c: client_fn(c, resolve(None, options)))[0]


def _files(folder, skip):
    return {os.path.relpath(os.path.join(d, f), folder): os.path.getsize(os.path.join(d, f))
            for d, _, fs in os.walk(folder) if not d.startswith(skip) for f in fs}


def refused(tmp_path, edit, field, error="ProtocolError", **options):
    """The job stops with client 1's ``error`` naming ``field``; client 1 saved
    nothing and nothing changed outside the job folder."""
    paths = _clients(tmp_path)
    model = tmp_path / "m"
    before = _files(tmp_path, str(model))
    with pytest.raises(RemoteError) as info:
        hostile(paths, edit, model_dir=str(model), **options)
    err = info.value
    assert err.rank == 1, str(err)
    assert err.exc_type == error, str(err)
    assert field in err.remote_message, err.remote_message
    assert not os.path.exists(model / "client-1" / "model.json")
    assert not os.path.exists(model / "client-1" / "rules.npz")
    assert _files(tmp_path, str(model)) == before
    return err


def test_an_honest_job_passes_through_the_harness(tmp_path):
    s = hostile(_clients(tmp_path), lambda dest, msg: msg, mode="icdta4fl", model_dir=str(tmp_path / "m"))
    assert os.path.isfile(os.path.join(s["model_dirs"][1], "rules.npz"))


def dag(C=2):
    """A binary 'tree' whose node 2 has two parents (nodes 0 and 1)."""
    return tree_format.binary([1, 2, -1, -1], [2, 3, -1, -1], [0, 1, -2, -2], [1.5, 1.5, np.nan, np.nan],
                              np.full((4, C), 1.0 / C))


def put(field, value):
    def change(msg):
        msg[field] = value
    return change


# ---------------------------------------------------------------------------
# B11: rules and params written with np.savez
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [
    {"../evil": np.zeros(3)},                        # a zip member named by the server
    {"file": np.zeros(3)},                           # np.savez's own argument
    {"mass": {"pickled": 1}},                        # an object array, pickled into the npz
])
def test_icdta4fl_final_rules_are_checked(tmp_path, bad):
    refused(tmp_path, at("final", lambda m: m["rules"].update(bad)), "rules", mode="icdta4fl")


def test_icdta4fl_final_rules_of_the_wrong_shape(tmp_path):
    def change(m):
        m["rules"]["lo"] = m["rules"]["lo"][:, :1]
    refused(tmp_path, at("final", change), "rules.lo", mode="icdta4fl")


def test_a_mode_without_rules_refuses_rules(tmp_path):
    refused(tmp_path, at("final", put("rules", {"dist": np.zeros((1, 2))})), "rules", mode="centralized")


XGB = dict(mode="fedxgbllr", xgb_trees=4, rounds=2, local_epochs=1, cnn_channels=4, max_depth=2, batch_size=32)


def test_fedxgbllr_final_params_take_no_extra_arrays(tmp_path):
    refused(tmp_path, at("final", lambda m: m["params"].update({"../x": np.zeros(2)})), "params", **XGB)


def test_fedxgbllr_fit_params_have_exact_shapes(tmp_path):
    refused(tmp_path, at("fit", lambda m: m["params"].update(W=np.zeros((4, 3)))), "params.W", **XGB)


# ---------------------------------------------------------------------------
# B3: the mode written into model.json and branched on
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode, options", [
    ("icdta4fl", {}), ("fedga_central", {"cv_folds": 2, "max_depth": 3}),
    ("efdt", {"rounds": 3, "grace_period": 20})])
def test_setup_mode_must_be_the_clients(tmp_path, mode, options):
    other = "fedga_local" if mode == "fedga_central" else "centralized"
    refused(tmp_path, at("setup", put("mode", other)), "mode", error="InputError", mode=mode, **options)


# ---------------------------------------------------------------------------
# A6: trees of messages
# ---------------------------------------------------------------------------
def test_icdta4fl_evaluate_trees_must_be_trees(tmp_path):
    def change(m):
        m["trees"][0] = dag()
    err = refused(tmp_path, at("evaluate", change), "trees[0]", mode="icdta4fl")
    assert "more than one parent" in err.remote_message


def test_icdta4fl_evaluate_trees_split_on_the_clients_columns(tmp_path):
    def change(m):
        m["trees"][1]["feature"][0] = 40
    refused(tmp_path, at("evaluate", change), "trees[1]", mode="icdta4fl")


def test_icdta4fl_evaluate_sends_one_tree_per_client(tmp_path):
    refused(tmp_path, at("evaluate", lambda m: m["trees"].append(m["trees"][0])), "trees", mode="icdta4fl")


@pytest.mark.parametrize("trees", [[7], [], [0, 0], ["0"], [True], 0])
def test_icdta4fl_cover_names_distinct_trees_of_the_job(tmp_path, trees):
    refused(tmp_path, at("cover", put("trees", trees)), "trees", mode="icdta4fl")


@pytest.mark.parametrize("votes,options", [("yes", {}), (1, {}), (True, {"rule_votes": "fractions"})])
def test_icdta4fl_cover_asks_for_class_estimates_only_as_the_client_agreed(tmp_path, votes, options):
    """A client sends its rows' class estimates per cell (its own tree's
    fractions) only when its own rule_votes is "rows"."""
    refused(tmp_path, at("cover", put("votes", votes)), "votes", mode="icdta4fl", **options)


def test_icdta4fl_count_tree_is_checked(tmp_path):
    refused(tmp_path, at("count", put("tree", dag())), "tree", mode="icdta4fl", global_max_nodes=3)


def test_icdta4fl_final_tree_has_the_classes_width(tmp_path):
    def change(m):
        m["tree"]["value"] = np.hstack([m["tree"]["value"], m["tree"]["value"]])
    refused(tmp_path, at("final", change), "tree", mode="icdta4fl")


def test_icdta4fl_final_tree_within_global_max_nodes(tmp_path):
    refused(tmp_path, at("final", put("tree", dag())), "tree", mode="icdta4fl", global_max_nodes=3)


def test_final_tree_must_be_a_tree(tmp_path):
    refused(tmp_path, at("final", put("tree", dag())), "tree", mode="centralized")


def test_id3_final_tree_must_be_multiway(tmp_path):
    t = tree_format.binary([1, -1, -1], [2, -1, -1], [0, -2, -2], [1.5, np.nan, np.nan], np.full((3, 2), 0.5))
    refused(tmp_path, at("final", put("tree", t)), "tree", mode="federated_id3")


def test_local_final_carries_no_tree(tmp_path):
    t = tree_format.binary([-1], [-1], [-2], [np.nan], np.array([[1.0, 0.0]]))
    refused(tmp_path, at("final", put("tree", t)), "tree", mode="local")


def test_local_clients_do_not_send_their_rows(tmp_path):
    refused(tmp_path, at("final", put("op", "send_rows")), "send_rows", mode="local")


def test_federated_id3_counts_are_checked(tmp_path):
    def change(m):
        m["features"] = [[0, 7]]
    refused(tmp_path, at("counts", change), "features", mode="federated_id3", tree_type="id3")


IBM = dict(mode="ibm_tree", max_depth=2)


def test_ibm_count_tree_must_be_a_tree(tmp_path):
    refused(tmp_path, at("count", put("tree", dag())), "tree", **IBM)


def test_ibm_final_tree_is_checked(tmp_path):
    def change(m):
        m["tree"]["feature"][0] = 9
        m["tree"]["children_left"][0], m["tree"]["children_right"][0] = 1, 2
    refused(tmp_path, at("final", change), "tree", **IBM)


def test_fedga_central_final_tree_must_be_a_tree(tmp_path):
    refused(tmp_path, at("final", put("tree", dag())), "tree", mode="fedga_central", cv_folds=2, max_depth=3)


# ---------------------------------------------------------------------------
# A7: EFDT tree states
# ---------------------------------------------------------------------------
EFDT = dict(mode="efdt", rounds=3, grace_period=20)


def test_efdt_learn_tree_has_exact_shapes(tmp_path):
    def change(m):
        m["tree"]["counts"] = m["tree"]["counts"][:, :1]     # broadcast over the classes before
    refused(tmp_path, at("learn_chunk", change, nth=2), "tree", **EFDT)


def test_efdt_learn_tree_has_every_array(tmp_path):
    refused(tmp_path, at("learn_chunk", lambda m: m["tree"].pop("nijk"), nth=2), "tree", **EFDT)


def test_efdt_final_tree_has_known_kinds(tmp_path):
    def change(m):
        m["tree"]["kind"][:] = 7
    refused(tmp_path, at("final", change), "tree", **EFDT)


def test_efdt_round_is_the_next(tmp_path):
    refused(tmp_path, at("learn_chunk", put("round", 2), nth=2), "round", **EFDT)


# ---------------------------------------------------------------------------
# A8 / C23-C25: FedGA structures and depths
# ---------------------------------------------------------------------------
FEDGA = dict(mode="fedga", generations=2, max_depth=3, min_depth=1, cv_folds=2, population_size=4)


def test_fedga_genes_are_columns(tmp_path):
    def change(m):
        m["structures"][0, 0] = 4                 # one past the last column
    refused(tmp_path, at("evaluate", change), "structures", **FEDGA)


def test_fedga_structures_have_the_depths_length(tmp_path):
    def change(m):
        m["structures"] = np.zeros((2, 6), dtype=np.int16)
    refused(tmp_path, at("evaluate", change), "structures", **FEDGA)


def test_fedga_depth_within_max_depth(tmp_path):
    refused(tmp_path, at("structure", put("depth", 4)), "depth", **FEDGA)


def test_fedga_final_population_has_population_size(tmp_path):
    def change(m):
        m["population"] = np.concatenate([m["population"], m["population"][:1]])
    refused(tmp_path, at("final", change), "population", **FEDGA)


def test_fedga_classification_scores_on_validation_rows(tmp_path):
    refused(tmp_path, at("evaluate", put("use_all", True)), "use_all", **FEDGA)


# ---------------------------------------------------------------------------
# B4 / B6 / C14-C22: settings the server sends must be the client's own
# ---------------------------------------------------------------------------
def test_efdt_settings_are_the_clients(tmp_path):
    refused(tmp_path, at("setup", lambda m: m["settings"].update(grace_period=1)), "settings",
            error="InputError", **EFDT)


def test_efdt_setup_rounds_are_the_clients(tmp_path):
    refused(tmp_path, at("setup", put("rounds", 2)), "rounds", error="InputError", **EFDT)


def test_efdt_load_n_bins_is_the_clients(tmp_path):
    refused(tmp_path, at("load", put("n_bins", 1000)), "n_bins", error="InputError", **EFDT)


def test_efdt_edges_are_checked(tmp_path):
    def change(m):
        m["edges"][0] = np.arange(100.0)
    refused(tmp_path, at("setup", change), "edges", **EFDT)


@pytest.mark.parametrize("field, value", [("tree_type", "id3"), ("task", "regression")])
def test_load_tree_type_and_task_are_the_clients(tmp_path, field, value):
    refused(tmp_path, at("load", put(field, value)), field, error="InputError", mode="icdta4fl")


def test_setup_encoding_covers_the_clients_categories(tmp_path):
    def change(m):
        m["encoding"]["categories"][3] = ["a", "b"]
    refused(tmp_path, at("setup", change), "encoding", mode="icdta4fl")


def test_tree_setup_depth_is_the_clients(tmp_path):
    refused(tmp_path, at("setup", put("max_depth", 9)), "max_depth", error="InputError", mode="icdta4fl")


@pytest.mark.parametrize("field, value", [("trees_per_client", 1000), ("epochs", 50), ("max_depth", 12)])
def test_fedxgbllr_setup_is_the_clients(tmp_path, field, value):
    refused(tmp_path, at("setup", put(field, value)), field, error="InputError", **XGB)


def test_fedxgbllr_fit_takes_one_ensemble_per_client(tmp_path):
    refused(tmp_path, at("fit", lambda m: m["ensembles"].append(m["ensembles"][0])), "ensembles", **XGB)


@pytest.mark.parametrize("field, value", [("n_bins", 3), ("max_depth", 4), ("cv_folds", 3), ("min_depth", 2)])
def test_fedga_setup_is_the_clients(tmp_path, field, value):
    refused(tmp_path, at("setup", put(field, value)), field, error="InputError", **FEDGA)


# ---------------------------------------------------------------------------
# Privacy: the noise of the clients' answers comes from their own settings
# ---------------------------------------------------------------------------
def test_fedga_epsilon_is_the_clients(tmp_path):
    refused(tmp_path, at("setup", put("epsilon", 1e12)), "epsilon", error="InputError", **FEDGA)


@pytest.mark.parametrize("field, value", [("scale", 1e-12), ("shares", 1000), ("n_codes", 1)])
def test_ibm_noise_is_the_clients(tmp_path, field, value):
    refused(tmp_path, at("count", put(field, value)), field, error="InputError", **IBM)


def test_ibm_frontier_is_leaves(tmp_path):
    refused(tmp_path, at("count", put("frontier", np.array([0, 0]))), "frontier", **IBM)


# ---------------------------------------------------------------------------
# Model files and the checks themselves
# ---------------------------------------------------------------------------
def test_a_deeply_nested_model_file_is_an_input_error(tmp_path):
    (tmp_path / "model.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(InputError, match="model_dir"):
        load_model(str(tmp_path))


def test_a_model_file_with_a_shared_subtree_is_refused(tmp_path):
    doc = {"format": "fedforest-horizontal", "format_version": 2, "mode": "centralized",
           "tree": {k: np.asarray(v).tolist() for k, v in dag().items()},
           "encoding": {"tree_type": "cart", "columns": ["a", "b"], "classes": ["n", "y"]}}
    (tmp_path / "model.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match="more than one parent"):
        load_model(str(tmp_path))


def test_check_refuses_shared_and_overlapping_children():
    with pytest.raises(InputError, match="more than one parent"):
        tree_format.check(dag(), "t")
    same = tree_format.binary([1, -1], [1, -1], [0, -2], [0.5, np.nan], np.ones((2, 1)))
    with pytest.raises(InputError, match="same child on both sides"):
        tree_format.check(same, "t")
    # every split lists the same single child entry: more children than entries
    n = 50
    t = tree_format.multiway([0] * (n - 1) + [-2], [0] * n, [1] * (n - 1) + [0], [0], [n - 1], np.ones((n, 1)))
    with pytest.raises(InputError, match="more children than"):
        tree_format.check(t, "t")


def test_check_limits():
    t = tree_format.binary([1, -1, -1], [2, -1, -1], [0, -2, -2], [0.5, np.nan, np.nan], np.ones((3, 2)))
    assert tree_format.check(t, "t", n_features=1, width=2, max_nodes=3, max_depth=1, strict=True)
    for kw, text in ((dict(n_features=0), "columns"), (dict(width=3), "columns, expected 3"),
                     (dict(max_nodes=2), "nodes"), (dict(max_depth=0), "deep")):
        with pytest.raises(InputError, match=text):
            tree_format.check(t, "t", **kw)
    orphan = tree_format.binary([-1, -1], [-1, -1], [-2, -2], [np.nan, np.nan], np.ones((2, 2)))
    tree_format.check(orphan, "t")
    with pytest.raises(InputError, match="hang from the root"):
        tree_format.check(orphan, "t", strict=True)


@pytest.mark.timeout(60)
def test_leaf_rules_visit_a_repeated_child_once():
    """A chain as EFDT exports "value vs the rest" splits: split i sends code 0 to
    a leaf, codes 1 and 2 to the next split (listed twice): 24 splits, 2**24
    paths when every listing is followed."""
    k = 24
    feature, start, count, cval, cnode = [], [], [], [], []
    for j in range(k):
        i = 2 * j
        feature += [j, -2]
        start += [len(cval), 0]
        count += [3, 0]
        cval += [0, 1, 2]
        cnode += [i + 1, i + 2, i + 2]
    feature.append(-2)
    start.append(0)
    count.append(0)
    t = tree_format.check(tree_format.multiway(feature, start, count, cval, cnode, np.ones((2 * k + 1, 1))), "t")
    assert len(leaf_rules(t, "categorical")) == k + 1


def _honest_state():
    schema = ht.Schema([3, 4], [False, True])
    rng = np.random.default_rng(0)
    codes = np.column_stack([rng.integers(0, 3, 400), rng.integers(0, 4, 400)])
    y = (codes[:, 0] == 1).astype(np.int64)
    m = ht.EFDT(schema, 2, grace_period=20, tau=0.5).learn(codes, y)
    return m.state(deltas=False), schema


def test_check_state_takes_an_honest_state_and_refuses_crafted_ones():
    st, schema = _honest_state()
    assert st["feature"].shape[0] > 1
    out = ht.check_state(st, schema, 2, "t", binary_split=False)
    assert set(out) == set(ht.STATE_KEYS)
    for key, change in (("child", lambda s: s["child"].__setitem__(0, 0)),
                        ("feature", lambda s: s["feature"].__setitem__(0, 5)),
                        ("kind", lambda s: s["kind"].__setitem__(0, 9)),
                        ("n_children", lambda s: s["n_children"].__setitem__(0, 7)),
                        ("depth", lambda s: s["depth"].__setitem__(1, 5)),
                        ("counts", lambda s: s.__setitem__("counts", s["counts"][:1])),
                        ("seen", lambda s: s["seen"].__setitem__(0, np.nan))):
        s = {k: v.copy() for k, v in st.items()}
        change(s)
        with pytest.raises(InputError):
            ht.check_state(s, schema, 2, "t", binary_split=False)
    with pytest.raises(InputError, match="deeper"):
        ht.check_state(st, schema, 2, "t", max_depth=0)
