"""Threads of the parallel kernels: how many this thread's kernels may use,
how many one call gets for its work, and whether several Python threads may
launch parallel kernels at once (tree blocks).  No result of any kernel
depends on the number of threads.

A parallel kernel call pays for waking its threads (tens of microseconds
each, far more on a busy machine), so a call gets one thread per
:data:`WORK_PER_THREAD` units of work (row visits: a row in one column's
histogram, a row partitioned), up to the threads :func:`set_threads` allows:
a small job runs as it would with ``n_jobs = 1``, a big one on every core it
is given."""
import threading

import numba
import numpy as np
from numba import njit, prange

#: row visits that pay for one more thread of a kernel call
WORK_PER_THREAD = 1 << 16

_allowed = threading.local()


def set_threads(n):
    """Allow ``n`` threads (at most numba's pool) in this thread's parallel kernels; returns it."""
    n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    _allowed.n = n
    return n


def for_work(units):
    """Set the threads of this thread's next kernel calls for ``units`` row
    visits: one per :data:`WORK_PER_THREAD`, at least one, at most
    :func:`threads`.  Returns the number set."""
    n = max(1, min(threads(), int(units) // WORK_PER_THREAD))
    if n != numba.get_num_threads():
        numba.set_num_threads(n)
    return n


def prange_only():
    """numba's ``parallel=`` for the kernels: only their ``prange`` loops run in
    parallel.  numba's default also turns every array expression and allocation
    (``np.full``, ``a[mask]``, ``x < 0``) into a parallel loop of its own, each
    compiled as a separate function: in the split kernels those small
    allocations were most of the compile time and none of the run time.  A new
    dict each call (numba consumes it)."""
    return {"prange": True, "reduction": True, "comprehension": False, "inplace_binop": False,
            "setitem": False, "numpy": False, "stencil": False, "fusion": False}


@njit(cache=True, parallel=prange_only())
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


#: Python threads that handle the trees of a batch at once (tree blocks), each
#: running single-threaded kernels.  A tree's steps hold the GIL for part of
#: their time (message building, node bookkeeping), so beyond a few block
#: threads more only wait for it.  On a 16-core node a 100,000-row forest
#: (100 trees, depth 10, one process) trained in 2.54-2.64 s with a block
#: thread per core, 2.32 s with 4 blocks of 4 kernel threads each (parallel
#: launches from every block cost more than they gave) and 1.90 s with 4
#: single-threaded blocks, as fast as ``n_jobs = 4`` (1.79-2.01 s).
BLOCK_THREADS = 4


def block_threads(n):
    """How many tree-block threads a rank allowed ``n`` kernel threads runs."""
    return max(1, min(int(n), BLOCK_THREADS))


def threads():
    """The number of threads this thread's parallel kernels may use (what
    :func:`set_threads` allowed; numba's current setting where it was never called)."""
    n = getattr(_allowed, "n", None)
    return numba.get_num_threads() if n is None else n
