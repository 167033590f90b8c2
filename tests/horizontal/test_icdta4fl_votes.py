"""ICDTA4FL under label skew: a merged rule's class from the clients' rows
(``rule_votes = "rows"``), not from one vote per tree (``"fractions"``, the
method's text), so a small client's pure leaves cannot outvote a large
client's rows (issue 49)."""
import os

import numpy as np
import pandas as pd
import pytest

from fedforest.cli import main
from fedforest.horizontal.icdta4fl.cells import check_cells, client_cells, pool_cells
from fedforest.jobs import run_horizontal


def _skewed_clients(folder, seed=0):
    """Two clients: a large one (1,600 rows) whose label is 'yes' where x > 90
    and in 12 % of the other rows, so its tree's leaves are mostly impure
    'no' leaves; a small one (60 rows) that is 'yes' except where z <= 0.1, so
    its tree has two pure leaves, the 'yes' one covering 90 % of the space.
    A quarter of each client's rows are its test rows."""
    rng = np.random.default_rng(seed)
    x, z = rng.uniform(0, 100, 1600), rng.uniform(0, 1, 1600)
    y1 = np.where((x > 90) | (rng.random(1600) < 0.12), "yes", "no")
    x2, z2 = rng.uniform(0, 100, 60), rng.uniform(0, 1, 60)
    y2 = np.where(z2 <= 0.1, "no", "yes")
    paths, tests = [], []
    for k, (a, b, y) in enumerate([(x, z, y1), (x2, z2, y2)], start=1):
        df = pd.DataFrame({"x": a.round(2), "z": b.round(3), "label": y})
        cut = len(df) // 4
        tests.append(str(folder / f"c{k}-test.csv"))
        paths.append(str(folder / f"c{k}.csv"))
        df.iloc[:cut].to_csv(tests[-1], index=False)
        df.iloc[cut:].to_csv(paths[-1], index=False)
    return paths, tests


def _train(paths, tests, folder, **opts):
    return run_horizontal(paths, mode="icdta4fl", task="classification", label_column="label", test_data=tests,
                          random_state=0, model_dir=str(folder), overwrite=True, quiet=True, **opts)


def _accuracy(summary, rank):
    metrics = summary["test_metrics"]
    return (metrics[rank] if rank in metrics else metrics[str(rank)])["accuracy"]


@pytest.mark.parametrize("tree_type", ["cart", "id3"])
def test_a_small_clients_pure_leaves_do_not_outvote_a_large_clients_rows(tmp_path, tree_type):
    """At the defaults the global tree stays at or above always-majority on the
    large client's test rows and on the pooled test rows; summing the leaves'
    class fractions (the method's text, and the former behaviour) lets the
    small client's pure 'yes' leaf outvote the large client's 'no' leaves
    almost everywhere, far below always-'no'."""
    paths, tests = _skewed_clients(tmp_path)
    y_big = pd.read_csv(tests[0])["label"].to_numpy()
    y_all = np.concatenate([y_big, pd.read_csv(tests[1])["label"].to_numpy()])
    majority = "no"      # the class of most training rows over both clients
    assert sum((pd.read_csv(p)["label"] == "no").sum() for p in paths) > \
        sum((pd.read_csv(p)["label"] == "yes").sum() for p in paths)
    s = _train(paths, tests, tmp_path / "rows", tree_type=tree_type)
    big, small = _accuracy(s, 1), _accuracy(s, 2)
    pooled = (big * y_big.size + small * (y_all.size - y_big.size)) / y_all.size
    assert big >= np.mean(y_big == majority) + 0.05, (big, s["local_test_accuracys"])
    assert pooled >= np.mean(y_all == majority) + 0.05
    # the large client's rows decide where they are: the global tree is as good as its own tree there
    assert big >= s["local_test_accuracys"][0] - 0.02
    old = _train(paths, tests, tmp_path / "fractions", tree_type=tree_type, rule_votes="fractions")
    assert _accuracy(old, 1) < np.mean(y_big == majority) - 0.3


def test_merged_rules_hold_the_estimated_classes_of_their_rows(tmp_path, capsys):
    """rules.npz: with the default votes each merged rule's class distribution
    is an estimate of its rows' classes, adding up to its rows plus the one
    row's worth of the merged trees' equal vote; with 'fractions' it adds up
    to the number of merged trees.  explain prints each rule's rows, their
    share and the share of its class in the votes."""
    from fedforest.horizontal.icdta4fl.roles import PRIOR_ROWS
    paths, tests = _skewed_clients(tmp_path)
    s = _train(paths, tests, tmp_path / "m", tree_type="cart")
    assert s["rule_votes"] == "rows"
    with np.load(os.path.join(s["model_dirs"][1], "rules.npz")) as z:
        assert PRIOR_ROWS == 1.0 and np.allclose(z["dist"].sum(axis=1), z["support"] + PRIOR_ROWS)
        assert z["support"].sum() == sum(len(pd.read_csv(p)) for p in paths)
    old = _train(paths, tests, tmp_path / "f", tree_type="cart", rule_votes="fractions")
    with np.load(os.path.join(old["model_dirs"][1], "rules.npz")) as z:
        assert np.allclose(z["dist"].sum(axis=1), len(old["merged_trees"]))
    assert main(["explain", "--model-dir", str(tmp_path / "m"), "--data", tests[0], "--row", "0"]) == 0
    text = capsys.readouterr().out
    assert "the share of the rule's class in the kept trees' votes" in text.splitlines()[0]
    rules = [ln for ln in text.splitlines() if ln.startswith("  rule ")]
    assert rules
    for line in rules:
        cls = line.split(" THEN ")[1].split()[0]
        assert line.endswith(f" % {cls}]"), line       # [N rows, P %; vote V % <the rule's class>]
        vote = float(line.rsplit("vote ", 1)[1].split(" %")[0])
        assert 50 <= vote <= 100


def test_each_client_counts_its_rows_in_a_cell_with_its_own_tree():
    """cover with votes: per cell, a client's rows counted with the class
    fractions of the leaf each reaches in its own tree (kept by the filter or
    not), adding up to the cell's rows; the server adds every client's up."""
    from fedforest.tree import format as tree_format
    # a kept tree splitting x0 at 0.5, and the client's own tree splitting x1 at 0.5
    kept = tree_format.binary([1, -1, -1], [2, -1, -1], [0, -2, -2], [0.5, -2, -2],
                              np.array([[0.5, 0.5], [0.6, 0.4], [0.3, 0.7]]))
    own = tree_format.binary([1, -1, -1], [2, -1, -1], [1, -2, -2], [0.5, -2, -2],
                             np.array([[0.5, 0.5], [0.9, 0.1], [0.0, 1.0]]))
    X = np.array([[0.1, 0.2], [0.2, 0.9], [0.3, 0.8], [0.9, 0.1]])
    cells, counts, votes = client_cells([kept], X, own=own)
    assert cells.tolist() == [[1], [2]] and counts.tolist() == [3, 1]
    # left cell: one row at (0.9, 0.1), two at (0, 1); right cell: one row at (0.9, 0.1)
    assert np.allclose(votes, [[0.9, 2.1], [0.9, 0.1]])
    assert np.allclose(votes.sum(axis=1), counts)
    assert [a.tolist() for a in client_cells([kept], X)] == [cells.tolist(), counts.tolist()]
    leaves = [np.array([1, 2])]
    mine = check_cells(1, "cover", {"cells": cells, "counts": counts, "votes": votes}, leaves, 4, n_classes=2)
    other = (np.array([[2]]), np.array([5]), np.array([[1.0, 4.0]]))
    pooled_cells, pooled_counts, pooled_votes = pool_cells([mine, other])
    assert pooled_cells.tolist() == [[1], [2]] and pooled_counts.tolist() == [3, 6]
    assert np.allclose(pooled_votes, [[0.9, 2.1], [1.9, 4.1]])
    # votes that do not add up to the cell's rows, or are missing, are refused
    from fedforest.federation.protocol import ProtocolError
    with pytest.raises(ProtocolError, match="bad 'votes'"):
        check_cells(1, "cover", {"cells": cells, "counts": counts, "votes": votes * 2}, leaves, 4, n_classes=2)
    with pytest.raises(ProtocolError, match="bad 'votes'"):
        check_cells(1, "cover", {"cells": cells, "counts": counts, "votes": -votes}, leaves, 4, n_classes=2)
    with pytest.raises(ProtocolError, match="bad 'reply'"):
        check_cells(1, "cover", {"cells": cells, "counts": counts}, leaves, 4, n_classes=2)


def test_the_largest_clients_rows_vote_with_its_own_tree_when_the_filter_drops_it(tmp_path):
    """A client whose tree the filter leaves out still counts its rows with its
    own tree: keeping only the best scored tree (the small client's), the
    global tree is made of its rules, but the large client's rows decide
    their class: no worse than always-'no' on the large client's rows, where
    the small client's fractions alone are far below it."""
    paths, tests = _skewed_clients(tmp_path)
    only_best = dict(tree_type="cart", filter="percentile", filter_percentile=100, filter_min_trees=1)
    s = _train(paths, tests, tmp_path / "drop", **only_best)
    assert s["kept_trees"] == [2]                       # the large client's tree was left out
    majority = np.mean(pd.read_csv(tests[0])["label"].to_numpy() == "no")
    assert _accuracy(s, 1) >= majority
    old = _train(paths, tests, tmp_path / "fractions", rule_votes="fractions", **only_best)
    assert old["kept_trees"] == [2] and _accuracy(old, 1) < majority - 0.3
