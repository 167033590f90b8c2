"""The Slurm template places K+1 tasks on K nodes: the master beside party 1,
not on a node of its own; the examples in the template and docs/slurm.md agree."""
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SBATCH = os.path.join(ROOT, "launch", "fedforest.sbatch")


def _directives(text):
    out = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH"):
            for key, value in re.findall(r"--([\w-]+)=(\S+)", line):
                out[key] = value
    return out


def test_the_master_shares_a_node_with_party_1():
    with open(SBATCH) as fh:
        d = _directives(fh.read())
    assert int(d["nodes"]) == int(d["ntasks"]) - 1
    assert "ntasks-per-node" not in d and "exclusive" not in d


def test_every_sbatch_example_asks_one_node_fewer_than_tasks():
    examples = []
    for path in (SBATCH, os.path.join(ROOT, "docs", "slurm.md")):
        with open(path) as fh:
            examples += re.findall(r"sbatch --ntasks=(\d+) --nodes=(\d+) launch/fedforest\.sbatch", fh.read())
    assert len(examples) >= 2
    for ntasks, nodes in examples:
        assert int(nodes) == int(ntasks) - 1


def test_template_is_valid_bash():
    subprocess.run(["bash", "-n", SBATCH], check=True)
