"""MPI byte transport (the only module that imports mpi4py).

Sends and receives are non-blocking calls completed in a polling loop, so a
waiting master keeps checking for error reports from any party instead of
blocking forever on a rank that has failed.  The loop spins briefly, then
backs off to short sleeps so oversubscribed ranks leave each other CPU time.
"""
import sys
import time

from mpi4py import MPI

from .base import RawTransport

_SPINS = 200
_MAX_SLEEP = 0.0005


def _wait(test, poll):
    n = 0
    while not test():
        if poll is not None:
            poll()
        n += 1
        if n > _SPINS:
            time.sleep(min(_MAX_SLEEP, 2e-6 * (n - _SPINS)))


class MPITransport(RawTransport):
    def __init__(self, comm=None):
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.aborted = False

    def send_bytes(self, dest, data, tag, poll=None):
        req = self.comm.Isend([data, MPI.BYTE], dest=dest, tag=tag)
        _wait(req.Test, poll)

    def recv_bytes(self, src, tag, poll=None):
        status = MPI.Status()
        _wait(lambda: self.comm.Iprobe(source=src, tag=tag, status=status), poll)
        buf = bytearray(status.Get_count(MPI.BYTE))
        self.comm.Recv([buf, MPI.BYTE], source=status.Get_source(), tag=tag)
        return buf

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


def processor_name():
    return MPI.Get_processor_name()
