"""In-process byte transport: every rank is a thread of one process.

It has the interface of the MPI transport and runs the same protocol code,
for unit tests and for single-machine experiments.
"""
import queue
import threading

from .base import Comm, JobAborted, RawTransport


class InProcessNetwork:
    def __init__(self, size):
        self.size = size
        self._queues = {}
        self._lock = threading.Lock()
        self.stopped = threading.Event()
        self.code = None
        # per destination rank: a condition notified on every message it is sent,
        # and the number sent so far (so a waiter never misses one)
        self.arrived = [threading.Condition() for _ in range(size)]
        self.n_arrived = [0] * size

    def queue(self, src, dst, tag):
        q = self._queues.get((src, dst, tag))
        if q is None:
            with self._lock:
                q = self._queues.setdefault((src, dst, tag), queue.Queue())
        return q

    def deliver(self, src, dst, tag, data):
        self.queue(src, dst, tag).put(data)
        cond = self.arrived[dst]
        with cond:
            self.n_arrived[dst] += 1
            cond.notify_all()

    def stop(self, code):
        if self.code is None:
            self.code = code
        self.stopped.set()


class InProcessTransport(RawTransport):
    def __init__(self, network, rank):
        self.net = network
        self.rank = rank
        self.size = network.size

    @property
    def aborted(self):
        return self.net.stopped.is_set()

    def send_bytes(self, dest, data, tag, poll=None):
        if self.aborted:
            raise JobAborted(f"rank {self.rank}: job stopped")
        self.net.deliver(self.rank, dest, tag, bytes(data))

    def recv_bytes(self, src, tag, poll=None):
        sources = range(self.size) if src < 0 else [src]
        while True:
            for s in sources:
                try:
                    return bytearray(self.net.queue(s, self.rank, tag).get(timeout=0.002))
                except queue.Empty:
                    pass
            if poll is not None:
                poll()
            if self.aborted:
                raise JobAborted(f"rank {self.rank}: job stopped")

    def probe(self, src, tag):
        sources = range(self.size) if src < 0 else [src]
        for s in sources:
            if not self.net.queue(s, self.rank, tag).empty():
                return s
        return None

    def recv_any(self, sources, tag, poll=None):
        """As :meth:`RawTransport.recv_any`, sleeping until a message arrives
        (or 10 ms pass, to call ``poll``) instead of polling."""
        cond = self.net.arrived[self.rank]
        while True:
            with cond:
                seen = self.net.n_arrived[self.rank]
            for s in sources:
                if self.probe(s, tag) is not None:
                    return s, self.recv_bytes(s, tag)
            if self.aborted:
                raise JobAborted(f"rank {self.rank}: job stopped")
            if poll is not None:
                poll()
            with cond:
                if self.net.n_arrived[self.rank] == seen:
                    cond.wait(timeout=0.01)

    def abort(self, code):
        self.net.stop(code)


def run_inprocess(n_parties, master_fn, party_fn, tamper=None):
    """Run ``master_fn(comm)`` on rank 0 (this thread) and ``party_fn(comm)`` on
    ranks 1..n_parties (threads).  Returns the master's result; re-raises the
    master's exception (a party's failure reaches it as RemoteError)."""
    from .runner import run_rank
    net = InProcessNetwork(n_parties + 1)
    comms = [Comm(InProcessTransport(net, r), tamper=tamper) for r in range(n_parties + 1)]
    results = {}
    threads = [threading.Thread(target=run_rank, args=(comms[r], master_fn, party_fn, results),
                                daemon=True, name=f"fedforest-rank-{r}")
               for r in range(1, n_parties + 1)]
    for t in threads:
        t.start()
    try:
        out = master_fn(comms[0])
    except BaseException:
        net.stop(1)
        raise
    finally:
        for t in threads:
            t.join(timeout=60)
    return out, comms
