"""The Slurm template runs on a small cluster as submitted (no node or core
count it cannot get), its examples place K+1 tasks on K nodes, and the
opt-in cluster check is valid shell that skips cleanly without Slurm."""
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SBATCH = os.path.join(ROOT, "launch", "fedforest.sbatch")
CHECK = os.path.join(ROOT, "launch", "slurm-check.sh")


def _directives(text):
    out = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH"):
            for key, value in re.findall(r"--([\w-]+)(?:=(\S+))?", line):
                out[key] = value
    return out


def test_the_defaults_fit_one_node_with_few_cores():
    with open(SBATCH) as fh:
        d = _directives(fh.read())
    assert int(d["ntasks"]) == 3                    # 2 parties + the master
    assert "nodes" not in d and "cpus-per-task" not in d and "exclusive" not in d
    assert "overcommit" in d                        # 3 tasks on a node with fewer cores


def test_every_sized_example_asks_one_node_fewer_than_tasks():
    examples = []
    for path in (SBATCH, os.path.join(ROOT, "docs", "slurm.md")):
        with open(path) as fh:
            examples += re.findall(r"sbatch --ntasks=(\d+) --nodes=(\d+)(?: --cpus-per-task=\d+)? "
                                   r"launch/fedforest\.sbatch", fh.read())
    assert len(examples) >= 3
    for ntasks, nodes in examples:
        assert int(nodes) == int(ntasks) - 1


def test_a_rank_that_dies_ends_the_step():
    with open(SBATCH) as fh:
        text = fh.read()
    assert re.search(r"^srun --mpi=pmi2 --kill-on-bad-exit=1 ", text, re.M)


def test_scripts_are_valid_bash():
    subprocess.run(["bash", "-n", SBATCH], check=True)
    subprocess.run(["bash", "-n", CHECK], check=True)


def test_slurm_check_skips_cleanly_without_slurm(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))      # no slurmctld, munged, ... on PATH
    proc = subprocess.run(["/bin/bash", CHECK], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "slurm-check: skipped:" in proc.stdout and "slurm-wlm and munge" in proc.stdout
