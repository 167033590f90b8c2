"""The big-integer worker processes die with their rank."""
import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_workers_die_when_their_rank_is_killed(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(
        "import os, time\n"
        "from fedforest.crypto.paillier import worker_pool\n"
        "def pid(_):\n"
        "    time.sleep(0.3)\n"
        "    return os.getpid()\n"
        "if __name__ == '__main__':\n"
        "    pool = worker_pool(2)\n"
        "    print(' '.join(map(str, sorted(set(pool.map(pid, range(8)))))), flush=True)\n"
        "    time.sleep(60)\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        workers = [int(p) for p in proc.stdout.readline().split()]
        assert workers and all(_alive(p) for p in workers)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in workers), "a worker outlived its killed rank"
    finally:
        proc.kill()
