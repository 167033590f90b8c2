"""Transports: MPI for real jobs, in-process threads for tests.  Only
:mod:`fedforest.transport.mpi` imports mpi4py."""
from .base import Comm, JobAborted
from .inprocess import run_inprocess

__all__ = ["Comm", "JobAborted", "run_inprocess"]
