"""The numba cache serves every kernel a job needs: once ``fedforest warm-up``
has run, a new process compiles nothing (a cache entry that can never hit
makes every rank of every job recompile and the cache folder grow)."""
import json
import subprocess
import sys

from _util import ROOT

PROBE = """
import importlib, json, numba
from fedforest.cli import main
main(["warm-up"])
misses = {}
for name in ("fedforest.tree.criterion", "fedforest.tree.splitter", "fedforest.tree.partitioner",
             "fedforest.tree.leaf_sets", "fedforest.tree.binning", "fedforest.tree.threads",
             "fedforest.tree.impurity", "fedforest.tree.format"):
    mod = importlib.import_module(name)
    for attr, obj in vars(mod).items():
        if isinstance(obj, numba.core.registry.CPUDispatcher) and obj.stats.cache_misses:
            misses[f"{name}.{attr}"] = [str(sig) for sig in obj.stats.cache_misses]
print(json.dumps(misses))
"""


def _warm_up_misses():
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_second_process_compiles_nothing_warm_up_covers():
    _warm_up_misses()                 # fills the cache where it is not yet (a fresh clone's make venv did it)
    assert _warm_up_misses() == {}
