"""Every experiment and benchmark script answers --help without running, and
names where its results come from."""
import glob
import os
import subprocess
import sys

import pytest

from _util import ROOT

SCRIPTS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "experiments", "*.py"))
                 if not os.path.basename(p).startswith("_") and os.path.basename(p) != "provenance.py")


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_describes_the_script_and_runs_nothing(script, tmp_path):
    before = set(os.listdir(os.path.join(ROOT, "experiments", "results")))
    proc = subprocess.run([sys.executable, os.path.join("experiments", script), "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:") and len(proc.stdout.splitlines()) > 3
    assert set(os.listdir(os.path.join(ROOT, "experiments", "results"))) == before


def test_results_are_refused_from_uncommitted_code(tmp_path, monkeypatch):
    sys.path.insert(0, os.path.join(ROOT, "experiments"))
    import provenance
    monkeypatch.setattr(provenance, "git_state", lambda: ("0123456789abcdef", True))
    with pytest.raises(SystemExit, match="uncommitted changes.*0123456789ab.*--allow-dirty"):
        provenance.record(None)

    class Args:
        allow_dirty = True
    got = provenance.record(Args())
    assert got["git_commit"] == "0123456789abcdef" and got["fedforest_uncommitted_changes"] is True
    monkeypatch.setattr(provenance, "git_state", lambda: ("fedcba9876543210", False))
    assert provenance.record(None)["fedforest_uncommitted_changes"] is False


def test_readme_figures_agree_with_the_committed_results():
    proc = subprocess.run([sys.executable, os.path.join("experiments", "readme_figures.py"), "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(os.path.join(ROOT, "README.md")) as fh:
        block = fh.read().split("<!-- figures:begin -->")[1].split("<!-- figures:end -->")[0]
    assert block.count("\n| ") >= 8          # the figures are there, not an empty table
