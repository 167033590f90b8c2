"""Job configuration: one table per mode, declarative constraints, refusals naming the owning mode."""
import numbers

import pytest

from fedforest.cli import build_parser, setting_names
from fedforest.constraints import Interval, Options, Paths, check, describe
from fedforest.errors import InputError
from fedforest.federation.config import JOB_PARAMS, resolve
from fedforest.federation.registry import REGISTRY


def _toml(tmp_path, text):
    p = tmp_path / "job.toml"
    p.write_text(text)
    return str(p)


def test_horizontal_job_given_a_vertical_key_is_refused_naming_the_vertical_mode(tmp_path):
    with pytest.raises(InputError, match=r"label_privacy.*mode 'vertical' \(table \[forest\]\).*"
                                         r"mode 'icdta4fl' does not use it"):
        resolve(None, {"mode": "icdta4fl", "label_privacy": "paillier"})
    job = _toml(tmp_path, '[job]\nmode = "icdta4fl"\n[forest]\nlabel_privacy = "paillier"\n')
    with pytest.raises(InputError, match=r"\[forest\].*mode 'vertical'.*runs mode 'icdta4fl'"):
        resolve(job, {})


def test_vertical_job_given_a_horizontal_key_is_refused_naming_the_owner(tmp_path):
    with pytest.raises(InputError, match=r"max_rules.*mode 'icdta4fl' \(table \[icdta4fl\]\).*"
                                         r"mode 'vertical' does not use it"):
        resolve(None, {"max_rules": 10})
    with pytest.raises(InputError, match=r"xgb_trees.*mode 'fedxgbllr'"):
        resolve(_toml(tmp_path, "[forest]\nxgb_trees = 10\n"), {})


def test_key_shared_by_modes_names_every_owner():
    with pytest.raises(InputError) as info:
        resolve(None, {"mode": "fedxgbllr", "filter": "mean"})
    assert "mode 'icdta4fl'" in str(info.value)
    with pytest.raises(InputError) as info:
        resolve(None, {"mode": "federated_id3", "xgb_eta": 0.2})
    assert "fedxgbllr" in str(info.value)


def test_test_data_is_a_horizontal_setting():
    with pytest.raises(InputError, match="test_data: is a setting of horizontal modes; mode 'vertical'"):
        resolve(None, {"test_data": ["a.csv"], "data": ["a.csv"]})
    cfg = resolve(None, {"mode": "local", "test_data": ["a.csv"], "data": ["b.csv"]})
    assert cfg.test_data == ["a.csv"]


def test_unknown_mode_is_refused_listing_the_modes():
    with pytest.raises(InputError) as info:
        resolve(None, {"mode": "no-such-mode"})
    msg = str(info.value)
    assert msg.startswith("mode: unknown mode 'no-such-mode'")
    for name in REGISTRY.names():
        assert name in msg
    with pytest.raises(InputError, match="did you mean 'icdta4fl'"):
        resolve(None, {"mode": "icdta4f1"})


def test_the_same_key_means_each_modes_own_setting(tmp_path):
    """``rounds`` and ``max_depth`` belong to each mode that declares them, with its own default."""
    assert resolve(None, {"mode": "fedxgbllr"}).rounds == 10
    assert resolve(None, {"mode": "icdta4fl"}).max_depth is None
    cfg = resolve(_toml(tmp_path, '[job]\nmode = "fedxgbllr"\n[fedxgbllr]\nmax_depth = 4\nrounds = 2\n'), {})
    assert (cfg.max_depth, cfg.rounds) == (4, 2)
    assert not hasattr(cfg, "label_privacy") and not hasattr(cfg, "filter")


def test_flags_override_the_file(tmp_path):
    job = _toml(tmp_path, '[job]\nmode = "icdta4fl"\n[icdta4fl]\nmax_depth = 4\n')
    assert resolve(job, {"max_depth": 6}).max_depth == 6
    assert resolve(job, {}).max_depth == 4


@pytest.mark.parametrize("options, match", [
    ({"max_depth": True}, r"max_depth: must be None or an int in \[1, 64\], got True"),
    ({"random_state": True}, r"random_state: must be None or an int >= 0, got True"),
    ({"n_estimators": 2.5}, r"n_estimators: must be an int in \[1, 100000\]"),
    ({"mode": "icdta4fl", "filter_percentile": 120}, r"filter_percentile: must be a number in \[0, 100\]"),
    ({"mode": "icdta4fl", "tree_type": "xgboost"}, r"tree_type: must be one of 'cart', 'id3'"),
    ({"mode": "fedxgbllr", "cnn_lr": 0}, r"cnn_lr: must be"),
    ({"reply_timeout": 0}, r"reply_timeout: must be None or a number > 0"),
    ({"progress": 1}, r"progress: must be None or true or false, got 1"),
    ({"data": []}, r"data: must be None or a list of file paths"),
])
def test_values_are_checked_against_their_constraints(options, match):
    with pytest.raises(InputError, match=match):
        resolve(None, options)


def test_constraints_describe_and_check():
    cons = (None, Interval(int, 1), Interval(float, 0, 1, closed="right"))
    assert describe(cons) == "None, an int >= 1 or a float in (0, 1]"
    for ok in (None, 1, 7, 0.5, 1.0):
        check("x", ok, cons)
    for bad in (0, True, 1.5, 0.0, "3", float("nan")):
        with pytest.raises(InputError, match=r"^x: must be None, an int >= 1 or a float in \(0, 1\], got "):
            check("x", bad, cons)
    check("r", 3, (Interval(numbers.Real, 0, closed="neither"),))
    check("o", "b", (Options("a", "b"),))
    check("p", ["a.csv", "b.csv"], (Paths(),))
    with pytest.raises(InputError):
        check("p", ["a.csv", ""], (Paths(),))


def test_every_mode_declares_help_and_valid_defaults():
    for mode in REGISTRY.modes():
        assert mode.summary and mode.table
        for p in mode.params:
            assert p.help, f"{mode.name}.{p.name} has no help"
            if p.default is not None or None in p.constraints:
                check(f"{mode.name}.{p.name}", p.default, p.constraints)
    for p in JOB_PARAMS:
        assert p.help


def test_help_documents_every_option_and_lists_the_modes():
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices
    for command in ("train", "predict"):
        p = sub[command]
        text = p.format_help()
        flags = {a.dest: a for a in p._actions}
        for name in setting_names():
            assert name in flags, f"--{name} missing from {command}"
            assert flags[name].help, f"--{name} has no help"
        for a in p._actions:
            assert a.help, f"{a.option_strings} has no help"
        for mode in REGISTRY.names():
            assert mode in text
    for name, p in sub.items():
        for a in p._actions:
            assert a.help, f"{name} {a.option_strings} has no help"


@pytest.mark.parametrize("mode,table,own", [("vertical_boost", "forest", "boost"), ("vertical", "boost", "forest")])
def test_the_other_vertical_modes_table_is_refused_saying_which_table_to_use(tmp_path, mode, table, own):
    job = _toml(tmp_path, f'[job]\nmode = "{mode}"\n[{table}]\nmax_depth = 3\n')
    with pytest.raises(InputError, match=rf"config \[{table}\]: holds settings of mode .*runs mode '{mode}', "
                                         rf"whose settings go in \[{own}\]: rename the table \[{own}\]"):
        resolve(job, {})
    # renamed, the same file is taken
    renamed = _toml(tmp_path, f'[job]\nmode = "{mode}"\ndata = ["a.csv", "b.csv"]\n[{own}]\nmax_depth = 3\n')
    assert resolve(renamed, {}).max_depth == 3


def test_help_points_to_what_each_rank_learns():
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices
    for text in (parser.format_help(), sub["train"].format_help(), sub["serve"].format_help()):
        flat = " ".join(text.split())
        assert "docs/protocol.md" in flat and '"What each role learns"' in flat and '"What each rank learns"' in flat
