"""The registry of modes and the mode contract."""
import pytest

from fedforest.errors import InputError
from fedforest.federation.mode import HORIZONTAL, Mode, Param
from fedforest.federation.registry import Registry


def test_builtin_modes_and_their_roles():
    reg = Registry()
    assert set(reg.names()) >= {"vertical", "icdta4fl", "local", "centralized", "federated_id3", "fedxgbllr"}
    for mode in reg.modes():
        assert mode.has("server_train") and mode.has("client_train")
        for role in mode.roles:
            assert callable(mode.role(role)), f"{mode.name}.{role}"
    assert reg.get("vertical").has("server_predict")
    assert reg.get("icdta4fl").has("predict_proba") and not reg.get("icdta4fl").has("server_predict")


def test_tables_are_unique_and_owners_found():
    reg = Registry()
    tables = [m.table for m in reg.modes()]
    assert len(tables) == len(set(tables))
    assert {m.name for m in reg.owners("max_depth")} >= {"vertical", "icdta4fl", "fedxgbllr"}
    assert [m.name for m in reg.owners("label_privacy")] == ["vertical", "vertical_boost"]


def test_register_refuses_duplicates_and_unknown_modes():
    reg = Registry()
    extra = Mode(name="demo_mode", family=HORIZONTAL, table="demo_mode", summary="x",
                 params=(Param("k", 1, (int,), "a key"),), impl="fedforest.horizontal.baselines.roles")
    reg.register(extra)
    assert reg.get("demo_mode") is extra
    with pytest.raises(ValueError, match="declared twice"):
        reg.register(extra)
    with pytest.raises(InputError, match="unknown mode 'nope'"):
        reg.get("nope")
    with pytest.raises(LookupError):
        extra.role("server_predict")


def test_a_mode_whose_package_is_missing_names_the_extra_to_install(monkeypatch):
    import sys
    from fedforest.errors import InputError
    from fedforest.federation.registry import get_mode
    monkeypatch.setitem(sys.modules, "xgboost", None)                 # as if not installed
    monkeypatch.delitem(sys.modules, "fedforest.horizontal.fedxgbllr.roles", raising=False)
    with pytest.raises(InputError, match="mode 'fedxgbllr' needs the Python package 'xgboost', which is not "
                                         "installed: pip install 'fedforest\\[xgboost\\]'"):
        get_mode("fedxgbllr").role("server_train")


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    import sys
    import pandas as pd
    from fedforest.data.io import read_table
    from fedforest.errors import InputError
    pd.DataFrame({"id": ["a"], "x": [1.0]}).to_parquet(tmp_path / "t.parquet")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(InputError, match="reading Parquet needs the package 'pyarrow': pip install "
                                         "'fedforest\\[parquet\\]'"):
        read_table(str(tmp_path / "t.parquet"), "id", "party 1")
