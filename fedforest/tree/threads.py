"""Threads of the parallel kernels: how many this thread's kernels use, and
whether several Python threads may launch parallel kernels at once (tree
blocks).  No result of any kernel depends on the number of threads."""
import numba
import numpy as np
from numba import njit, prange


def set_threads(n):
    """Use ``n`` threads (at most numba's pool) in this thread's parallel kernels; returns it."""
    n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    return n


@njit(cache=True, parallel=True)
def _touch(n):
    out = np.zeros(n)
    for i in prange(n):
        out[i] = i
    return out


def concurrent_launches_ok():
    """Whether parallel kernels may run from several Python threads at once:
    numba's omp and tbb threading layers allow it, its workqueue fallback (no
    OpenMP runtime, no TBB) aborts the process.  Tree blocks on threads are
    used only when this holds."""
    try:
        layer = numba.threading_layer()
    except ValueError:      # no parallel kernel has run in this process yet
        _touch(2)
        layer = numba.threading_layer()
    return layer != "workqueue"


def threads():
    """The number of threads this thread's parallel kernels use."""
    return numba.get_num_threads()
