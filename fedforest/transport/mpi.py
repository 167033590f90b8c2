"""MPI byte transport (the only module that imports mpi4py).

Sends and receives are non-blocking calls completed in a polling loop, so a
waiting master keeps checking for error reports from any party instead of
blocking forever on a rank that has failed.  A send returns as soon as it is
posted (MPI keeps messages between two ranks in order); pending sends are
completed by later waits and by :meth:`MPITransport.flush`, so a rank never
stalls on a peer that has not yet been scheduled to match a larger message.  While waiting, a rank
sleeps between polls (ranks are often oversubscribed: a busy-waiting master
would steal a core from a computing party), except while replies come in
quick round trips, when it yields the CPU between polls instead (see
:class:`_Pace`).
"""
import os
import sys
import time

from mpi4py import MPI

from .base import RawTransport

_QUICK = 0.002          # a wait shorter than this: the peers answer in round trips ...
_YIELD_SECONDS = 0.05   # ... so the next wait polls with sched_yield for up to this long
_SLEEP = 0.00005        # first sleep; it doubles up to _MAX_SLEEP while nothing arrives
_MAX_SLEEP = 0.001
_POLL_EVERY = 32        # check for error reports every this many polls


class _Pace:
    """How long the last wait of a transport took: a rank whose messages come
    quickly (node-by-node prediction, thousands of short round trips) keeps
    polling with ``sched_yield``; a rank whose last wait took longer than
    :data:`_QUICK` (training levels) sleeps between polls from the start and
    leaves the cores to computing ranks, which matters on oversubscribed
    nodes: yielding still burns the CPU when a core is free, and the job's
    CPU time with it.  A sleep starts at 50 µs and doubles up to 1 ms, so a
    reply is seen at most ~1 ms late."""

    def __init__(self):
        self.last = 0.0


def _wait(test, poll, pace=None):
    if test():
        return
    n = 0
    start = time.monotonic()
    window = _YIELD_SECONDS if pace is None or pace.last < _QUICK else 0.0
    sleep = _SLEEP
    while not test():
        n += 1
        if poll is not None and n % _POLL_EVERY == 0:
            poll()
        if n < 16:
            continue
        if time.monotonic() - start < window:
            os.sched_yield()
        else:
            time.sleep(sleep)
            sleep = min(2 * sleep, _MAX_SLEEP)
    if pace is not None:
        pace.last = time.monotonic() - start


class MPITransport(RawTransport):
    cooperative_stop = True   # a failed job ends with every rank's own exit (Comm.stop_parties)

    def __init__(self, comm=None):
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.aborted = False
        self._pace = _Pace()
        self._pending = []  # (request, buffer) of posted sends not yet complete

    def progress(self):
        self._progress()

    def _progress(self):
        if self._pending:
            self._pending = [(req, buf) for req, buf in self._pending if not req.Test()]
        return not self._pending

    def send_bytes(self, dest, data, tag, poll=None):
        req = self.comm.Isend([data, MPI.BYTE], dest=dest, tag=tag)
        if not req.Test():
            self._pending.append((req, data))  # the buffer must live until completion
        if len(self._pending) > 64:
            _wait(lambda: len(self._pending) <= 64 or self._progress(), poll)

    def flush(self, poll=None):
        _wait(self._progress, poll)

    def recv_bytes(self, src, tag, poll=None):
        status = MPI.Status()

        def ready():
            self._progress()
            return self.comm.Iprobe(source=src, tag=tag, status=status)

        _wait(ready, poll, self._pace)
        buf = bytearray(status.Get_count(MPI.BYTE))
        self.comm.Recv([buf, MPI.BYTE], source=status.Get_source(), tag=tag)
        return buf

    def recv_any(self, sources, tag, poll=None):
        status = MPI.Status()
        found = []

        def ready():
            self._progress()
            for s in sources:
                if self.comm.Iprobe(source=s, tag=tag, status=status):
                    found.append(s)
                    return True
            return False

        _wait(ready, poll, self._pace)
        buf = bytearray(status.Get_count(MPI.BYTE))
        self.comm.Recv([buf, MPI.BYTE], source=found[0], tag=tag)
        return found[0], buf

    def probe(self, src, tag):
        status = MPI.Status()
        source = MPI.ANY_SOURCE if src < 0 else src
        if self.comm.Iprobe(source=source, tag=tag, status=status):
            return status.Get_source()
        return None

    def abort(self, code):
        sys.stdout.flush()
        sys.stderr.flush()
        self.comm.Abort(code)


def world_transport():
    return MPITransport(MPI.COMM_WORLD)
