"""The transport seen by algorithms: encrypted messages between the master
(rank 0) and the parties (ranks 1..K), with failure propagation.

A message is a dict whose numpy-array values travel as raw buffers and whose
other values (small control data) are pickled into a short header.  Every
message is sealed with the AES-256-GCM channel of its (sender, receiver) pair,
established by an X25519 exchange in :meth:`Comm.handshake`.

Failures: an exception on a party is sent to the master on a separate tag
(:meth:`Comm.report_error`); the master checks that tag whenever it waits, so
it raises :class:`~fedforest.errors.RemoteError` naming the rank, with the
remote traceback, instead of hanging.  The runner then stops every rank.
"""
import abc
import json
import os
import pickle
import struct
import time
import traceback

import numpy as np

from ..crypto.channel import SecureChannel
from ..crypto.keys import KeyPair, pair_keys
from ..errors import ChannelError, FedForestError, RemoteError

TAG_DATA = 1
TAG_ERROR = 2
TAG_KEYS = 3
MASTER = 0


class JobAborted(FedForestError):
    """Raised on a rank whose job was stopped because another rank failed."""


class ProtocolError(RuntimeError):
    """A message arrived that the protocol does not allow at this point."""


def expect(msg, op):
    """``msg`` if its ``"op"`` is ``op``, else :class:`ProtocolError`."""
    if msg.get("op") != op:
        raise ProtocolError(f"protocol error: expected {op!r}, got {msg.get('op')!r}")
    return msg


class RawTransport(abc.ABC):
    """Byte transport between ranks (implemented over MPI and in-process)."""
    rank = 0
    size = 1

    @abc.abstractmethod
    def send_bytes(self, dest, data, tag, poll=None):
        """Send one message; while waiting, call ``poll()`` now and then."""

    @abc.abstractmethod
    def recv_bytes(self, src, tag, poll=None):
        """Receive one message; while waiting, call ``poll()`` now and then
        (it may raise to stop waiting)."""

    @abc.abstractmethod
    def probe(self, src, tag):
        """The source rank of a waiting message from ``src`` (-1: any) with ``tag``, or None."""

    @abc.abstractmethod
    def abort(self, code):
        """Stop every rank of the job with exit code ``code``."""

    def flush(self, poll=None):
        """Complete every send this rank has posted (a no-op where sends complete at once)."""

    def progress(self):
        """Advance posted sends without waiting."""


_ALIGN = 16


def _aligned(n):
    return -(-n // _ALIGN) * _ALIGN


def encode(msg):
    """Serialize a message dict: small pickled header + raw array buffers, each
    starting at a 16-byte aligned offset."""
    arrays = []
    ctl = {}
    for k, v in msg.items():
        if isinstance(v, np.ndarray):
            arrays.append((k, np.ascontiguousarray(v)))
        else:
            ctl[k] = v
    header = pickle.dumps((ctl, [(k, a.dtype.str, a.shape) for k, a in arrays]), protocol=5)
    off = _aligned(8 + len(header))
    total = off + sum(_aligned(a.nbytes) for _, a in arrays)
    out = bytearray(total)
    struct.pack_into("<Q", out, 0, len(header))
    out[8:8 + len(header)] = header
    view = memoryview(out)
    for _, a in arrays:
        n = a.nbytes
        view[off:off + n] = a.reshape(-1).view(np.uint8)
        off += _aligned(n)
    return out


def decode(data):
    """Inverse of :func:`encode`; arrays are views into ``data`` (a writable
    buffer whose start is suitably aligned) when possible, else copies."""
    (hlen,) = struct.unpack_from("<Q", data, 0)
    ctl, specs = pickle.loads(data[8:8 + hlen])
    off = _aligned(8 + hlen)
    msg = dict(ctl)
    for k, dt, shape in specs:
        dtype = np.dtype(dt)
        count = int(np.prod(shape)) if shape else 1
        arr = np.frombuffer(data, dtype=dtype, count=count, offset=off).reshape(shape)
        if not (arr.flags.writeable and arr.flags.aligned):
            arr = arr.copy()
        msg[k] = arr
        off += _aligned(count * dtype.itemsize)
    return msg


class Comm:
    """Encrypted, failure-aware messaging for one rank."""

    def __init__(self, raw, tamper=None):
        self.raw = raw
        self.rank = raw.rank
        self.size = raw.size
        self.channels = {}
        self.error_channels = {}
        self.bytes_sent = 0
        self.messages_sent = 0
        self.rounds = 0
        self.reply_timeout = None  # master: seconds to wait for one message (None: no limit)
        # fault injection for tests: (src, dst, message_number) whose ciphertext gets one bit flipped
        self._tamper = tamper if tamper is not None else _tamper_from_env()

    @property
    def is_master(self):
        return self.rank == MASTER

    @property
    def clients(self):
        return list(range(1, self.size))

    # -- start-up -------------------------------------------------------------
    def handshake(self):
        """X25519 exchange between the master and every party; derive channel keys."""
        kp = KeyPair()
        if self.is_master:
            for c in self.clients:
                self.raw.send_bytes(c, kp.public, TAG_KEYS)
            for c in self.clients:
                peer = self.raw.recv_bytes(c, TAG_KEYS, poll=self._poll_errors)
                self._add_channel(kp, c, peer)
        else:
            peer = self.raw.recv_bytes(MASTER, TAG_KEYS)
            self.raw.send_bytes(MASTER, kp.public, TAG_KEYS)
            self._add_channel(kp, MASTER, peer)

    def _add_channel(self, kp, peer_rank, peer_public):
        send_key, recv_key = pair_keys(kp, peer_public, self.rank, peer_rank)
        self.channels[peer_rank] = SecureChannel(self.rank, peer_rank, send_key, recv_key)
        # error reports use their own keys and counters: they may overtake data messages
        send_key, recv_key = pair_keys(kp, peer_public, self.rank, peer_rank, b"error")
        self.error_channels[peer_rank] = SecureChannel(self.rank, peer_rank, send_key, recv_key)

    # -- point to point -------------------------------------------------------
    def send(self, dest, msg):
        ct = self.channels[dest].seal(encode(msg))
        if self._tamper and self._tamper == (self.rank, dest, self.channels[dest].sent - 1):
            ct = bytearray(ct)
            ct[len(ct) // 2] ^= 0x01
        self.bytes_sent += len(ct)
        self.messages_sent += 1
        self.raw.send_bytes(dest, ct, TAG_DATA, poll=self._poll_errors if self.is_master else None)

    def recv(self, src):
        poll = None
        if self.is_master:
            poll = self._poll_errors
            if self.reply_timeout:
                deadline = time.monotonic() + self.reply_timeout

                def poll():
                    self._poll_errors()
                    if time.monotonic() > deadline:
                        raise FedForestError(f"rank {src} sent nothing for {self.reply_timeout:g} s "
                                             "(reply_timeout); it may be stuck")
        data = self.raw.recv_bytes(src, TAG_DATA, poll=poll)
        return decode(self.channels[src].open(data))

    # -- collectives driven by the master --------------------------------------
    def bcast(self, msg):
        """Master: send the same message to every party.  Party: receive it."""
        if self.is_master:
            for c in self.clients:
                self.send(c, msg)
            return msg
        return self.recv(MASTER)

    def scatter(self, msgs):
        """Master: send ``msgs[rank]`` to each listed party."""
        for c, m in msgs.items():
            self.send(c, m)

    def gather(self, ranks=None):
        """Master: one reply from each listed party (default all), as {rank: msg}."""
        ranks = self.clients if ranks is None else list(ranks)
        self.rounds += 1
        return {c: self.recv(c) for c in ranks}

    def gather_each(self, ranks=None):
        """Master: like :meth:`gather` (one round), but yields ``(rank, msg)`` as
        each reply arrives, so work on early replies overlaps later transfers."""
        ranks = self.clients if ranks is None else list(ranks)
        self.rounds += 1
        for c in ranks:
            yield c, self.recv(c)

    def exchange(self, msgs):
        """Master: one round — send each listed party its message, collect the replies."""
        self.scatter(msgs)
        return self.gather(list(msgs))

    # -- failures --------------------------------------------------------------
    def _poll_errors(self):
        src = self.raw.probe(-1, TAG_ERROR)
        if src is None:
            return
        data = self.raw.recv_bytes(src, TAG_ERROR)
        ch = self.error_channels.get(src)
        try:
            # JSON, not pickle: a report may arrive before the channel keys exist
            payload = json.loads(bytes(ch.open(data) if ch else data).decode("utf-8"))
        except (ChannelError, ValueError):
            payload = {"type": "ChannelError", "message": "error report failed authentication",
                       "traceback": ""}
        raise RemoteError(src, payload["type"], payload["message"], payload["traceback"])

    def report_error(self, exc):
        """Party: send an exception to the master (sealed when a channel exists)."""
        payload = json.dumps({
            "type": type(exc).__name__, "message": str(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        }).encode("utf-8")
        ch = self.error_channels.get(MASTER)
        data = ch.seal(payload) if ch else payload
        self.raw.send_bytes(MASTER, data, TAG_ERROR)

    def wait_for_stop(self, timeout=120.0):
        """Party after reporting an error: wait for the master to stop the job."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.raw.progress()  # the report itself may still be in flight
            time.sleep(0.01)
            if getattr(self.raw, "aborted", False):
                return
        self.raw.abort(1)


def _tamper_from_env():
    spec = os.environ.get("FEDFOREST_FAULT_TAMPER")
    if not spec:
        return None
    src, dst, n = (int(x) for x in spec.split(":"))
    return (src, dst, n)
