"""The transport seen by algorithms: encrypted messages between the master
(rank 0) and the parties (ranks 1..K), with failure propagation.

A message is a dict whose numpy arrays (at any depth) travel as raw buffers
and whose other values (small control data: numbers, text, lists, tuples,
dicts, bytes) go in a data-only JSON header (:func:`encode`); a broadcast is
encoded once.  Every
message is sealed with the AES-256-GCM channel of its (sender, receiver) pair,
established by an X25519 exchange in :meth:`Comm.handshake`.

Failures: an exception on a party is sent to the master on a separate tag
(:meth:`Comm.report_error`); the master checks that tag whenever it waits, so
it raises :class:`~fedforest.errors.RemoteError` naming the rank, with the
remote traceback, instead of hanging.  The runner then stops every rank.
"""
import abc
import json
import math
import os
import re
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
TAG_STOP = 4
MASTER = 0
STOP_ACK_SECONDS = 5.0   # the master waits this long for every party to confirm a stop


class JobAborted(FedForestError):
    """Raised on a rank whose job was stopped because another rank failed."""


class JobStopped(JobAborted):
    """Raised on a party that the master told to stop (:meth:`Comm.stop_parties`):
    the rank ends with exit code ``code``, as the master does."""

    def __init__(self, code):
        super().__init__(f"job stopped with exit code {code}")
        self.code = code


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
    #: a failed job may end with every rank exiting by itself (:meth:`Comm.stop_parties`)
    #: instead of :meth:`abort`: under a batch system the job then ends with the master's code
    cooperative_stop = False

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

    def recv_any(self, sources, tag, poll=None):
        """Receive one message with ``tag`` from whichever of ``sources`` sends
        first; returns ``(source, data)``."""
        n = 0
        while True:
            for s in sources:
                if self.probe(s, tag) is not None:
                    return s, self.recv_bytes(s, tag)
            self.progress()
            if getattr(self, "aborted", False):
                raise JobAborted(f"rank {self.rank}: job stopped")
            n += 1
            if poll is not None and n % 8 == 0:
                poll()
            time.sleep(0.0002 if n < 1000 else 0.001)

    @abc.abstractmethod
    def abort(self, code):
        """Stop every rank of the job with exit code ``code``."""

    def flush(self, poll=None):
        """Complete every send this rank has posted (a no-op where sends complete at once)."""

    def progress(self):
        """Advance posted sends without waiting."""

    def describe(self, rank):
        """How errors name ``rank`` (a network transport adds the participant's name)."""
        return f"rank {rank}"


_ALIGN = 16
_MAGIC = b"FFW1"        # wire format 1: magic, header length, JSON header, aligned array buffers
_MAX_DEPTH = 64         # levels of containers in a message, itself included
_MAX_NDIM = 32
_MAX_DIM = (1 << 31) - 1    # elements along one dimension
_KINDS = "biufcU"       # array dtypes that travel: booleans, numbers, text
_DTYPE_TEXT = re.compile(r"[<>|=]?(?:[biufc]\d{1,2}|U\d{1,9})")


def _aligned(n):
    return -(-n // _ALIGN) * _ALIGN


class WireError(ProtocolError):
    """A message that is not a valid fedforest message."""


def _to_header(v, arrays):
    """A value as JSON data: arrays become references to buffers, containers
    and bytes become tagged lists (a JSON list in the header is always a tag)."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.ndarray):
        if not _plain(v.dtype):
            raise WireError(f"an array of dtype {v.dtype} cannot travel as a buffer")
        arrays.append(v if v.flags.c_contiguous else np.ascontiguousarray(v))  # keeps 0-d
        return ["A", len(arrays) - 1]
    if isinstance(v, dict):
        return ["D", [[_to_header(k, arrays), _to_header(x, arrays)] for k, x in v.items()]]
    if isinstance(v, list):
        return ["L", [_to_header(x, arrays) for x in v]]
    if isinstance(v, tuple):
        return ["T", [_to_header(x, arrays) for x in v]]
    if isinstance(v, (bytes, bytearray, memoryview)):
        arrays.append(np.frombuffer(bytes(v), dtype=np.uint8))
        return ["B", len(arrays) - 1]
    raise WireError(f"a value of type {type(v).__name__} cannot travel in a message")


def _from_header(v, arrays, used, depth=0):
    if not isinstance(v, list):
        if isinstance(v, dict):
            raise WireError("malformed header")
        return v
    if len(v) != 2 or not isinstance(v[0], str):
        raise WireError("malformed header")
    tag, body = v
    if tag in ("A", "B"):
        if type(body) is not int or not 0 <= body < len(arrays) or body in used:
            raise WireError("malformed array reference")
        used.add(body)  # each buffer is referenced once: no copies beyond the message size
        return arrays[body] if tag == "A" else arrays[body].tobytes()
    if not isinstance(body, list):
        raise WireError("malformed header")
    if depth >= _MAX_DEPTH:
        raise WireError(f"message nested deeper than {_MAX_DEPTH} levels")
    if tag == "L":
        return [_from_header(x, arrays, used, depth + 1) for x in body]
    if tag == "T":
        return tuple(_from_header(x, arrays, used, depth + 1) for x in body)
    if tag == "D":
        out = {}
        for item in body:
            if not isinstance(item, list) or len(item) != 2:
                raise WireError("malformed header")
            key = _from_header(item[0], arrays, used, depth + 1)
            if not isinstance(key, (str, int, float, bool, bytes, tuple)) and key is not None:
                raise WireError("malformed dict key")
            if isinstance(key, tuple):      # the one key type that may hold something unhashable
                try:
                    hash(key)
                except TypeError:
                    raise WireError("malformed dict key") from None
            out[key] = _from_header(item[1], arrays, used, depth + 1)
        return out
    raise WireError(f"unknown value tag {tag!r}")


def encode(msg):
    """Serialize a message: a data-only JSON header (values, containers, and
    for each array its dtype and shape) followed by the raw array buffers, each
    at a 16-byte aligned offset.  Nothing in a message can make the receiver
    run code (no pickle)."""
    arrays = []
    body = _to_header(msg, arrays)
    specs = [[a.dtype.str, list(a.shape)] for a in arrays]
    header = json.dumps([body, specs], separators=(",", ":"), allow_nan=True).encode("utf-8")
    off = _aligned(12 + len(header))
    total = off + sum(_aligned(a.nbytes) for a in arrays)
    out = bytearray(total)
    out[:4] = _MAGIC
    struct.pack_into("<Q", out, 4, len(header))
    out[12:12 + len(header)] = header
    view = memoryview(out)
    for a in arrays:
        n = a.nbytes
        view[off:off + n] = a.reshape(-1).view(np.uint8)
        off += _aligned(n)
    return out


def _plain(dtype):
    """Whether arrays of ``dtype`` travel: numbers, booleans and text, no fields or sub-arrays."""
    return (dtype.kind in _KINDS and dtype.itemsize > 0 and dtype.fields is None
            and dtype.subdtype is None)


def _dtype(text):
    if not isinstance(text, str):
        raise WireError("malformed array dtype")
    dtype = _DTYPES.get(text)
    if dtype is not None:
        return dtype
    if not _DTYPE_TEXT.fullmatch(text):
        raise WireError(f"array dtype {text[:40]!r} is not plain data")
    try:
        dtype = np.dtype(text)
    except (TypeError, ValueError, OverflowError):
        raise WireError(f"unknown array dtype {text!r}") from None
    if not _plain(dtype):
        raise WireError(f"array dtype {text!r} is not plain data")
    if len(_DTYPES) < 256:
        _DTYPES[text] = dtype
    return dtype


_DTYPES = {}            # dtype texts already accepted (a job sends a handful, thousands of times)
_INTP_MAX = int(np.iinfo(np.intp).max)


def _shape(spec, dtype):
    shape = spec[1]
    if not (isinstance(shape, list) and len(shape) <= _MAX_NDIM
            and all(type(d) is int and d >= 0 for d in shape)):
        raise WireError("malformed array shape")
    # an empty array may not declare huge dimensions either (a receiver sizes other arrays by them)
    if any(d > _MAX_DIM for d in shape):
        raise WireError("array dimension too large")
    # numpy needs the product of the non-zero dimensions, in bytes, to fit an intp
    if math.prod(d or 1 for d in shape) * dtype.itemsize > _INTP_MAX:
        raise WireError("array shape too large")
    return tuple(shape)


def decode(data):
    """Inverse of :func:`encode`; arrays are views into ``data`` (a writable
    buffer whose start is suitably aligned) when possible, else copies.  A
    malformed message raises :class:`WireError`."""
    if len(data) < 12 or bytes(data[:4]) != _MAGIC:
        raise WireError("not a fedforest message (wrong magic)")
    (hlen,) = struct.unpack_from("<Q", data, 4)
    if 12 + hlen > len(data):
        raise WireError("truncated message header")
    try:
        header = json.loads(bytes(data[12:12 + hlen]).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, TypeError, RecursionError):
        raise WireError("malformed message header") from None
    if not (isinstance(header, list) and len(header) == 2 and isinstance(header[1], list)):
        raise WireError("malformed message header")
    body, specs = header
    off = _aligned(12 + hlen)
    arrays = []
    for spec in specs:
        if not (isinstance(spec, list) and len(spec) == 2):
            raise WireError("malformed array spec")
        dtype = _dtype(spec[0])
        shape = _shape(spec, dtype)
        count = math.prod(shape)
        nbytes = count * dtype.itemsize
        if off + nbytes > len(data):
            raise WireError("truncated message body")
        if dtype.kind == "U" and nbytes:
            codes = np.frombuffer(data, dtype=np.dtype("u4").newbyteorder(dtype.byteorder),
                                  count=nbytes // 4, offset=off)
            if codes.max() > 0x10FFFF:  # numpy would build broken str objects from them
                raise WireError("text array holds invalid characters")
        try:
            arr = np.frombuffer(data, dtype=dtype, count=count, offset=off).reshape(shape)
        except (ValueError, TypeError):
            raise WireError("malformed array") from None
        if not (arr.flags.writeable and arr.flags.aligned):
            arr = arr.copy()
        arrays.append(arr)
        off += _aligned(nbytes)
    used = set()
    msg = _from_header(body, arrays, used)
    if len(used) != len(arrays):
        raise WireError("an array of the message is never referenced")
    if not isinstance(msg, dict):
        raise WireError("a message must be a dict")
    return msg


class Comm:
    """Encrypted, failure-aware messaging for one rank."""

    def __init__(self, raw, tamper=None):
        self.raw = raw
        self.rank = raw.rank
        self.size = raw.size
        self.channels = {}
        self.error_channels = {}
        # party -> party payloads relayed by the master (crypto.channel.PeerSeal per other
        # party; set up with the ID alignment, data.alignment.party_align)
        self.peers = {}
        self.bytes_sent = 0
        self.messages_sent = 0
        # sealed data bytes per peer rank, as they went over the wire (run summaries report them)
        self.bytes_sent_to = {}
        self.bytes_received_from = {}
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
        self._send_encoded(dest, encode(msg))

    def _send_encoded(self, dest, data):
        ct = self.channels[dest].seal(data)
        if self._tamper and self._tamper == (self.rank, dest, self.channels[dest].sent - 1):
            ct = bytearray(ct)
            ct[len(ct) // 2] ^= 0x01
        self.bytes_sent += len(ct)
        self.messages_sent += 1
        self.bytes_sent_to[dest] = self.bytes_sent_to.get(dest, 0) + len(ct)
        self.raw.send_bytes(dest, ct, TAG_DATA, poll=self._poll_errors if self.is_master else None)

    def _waiting_poll(self, sources):
        """What a waiting rank checks now and then: the master, error reports
        and its ``reply_timeout`` (naming the silent ranks); a party, whether
        the master told it to stop."""
        if not self.is_master:
            return self._poll_stop if self.raw.cooperative_stop else None
        if not self.reply_timeout:
            return self._poll_errors
        deadline = time.monotonic() + self.reply_timeout

        def poll():
            self._poll_errors()
            if time.monotonic() > deadline:
                who = ", ".join(self.raw.describe(r) for r in sources)
                raise FedForestError(f"{who} sent nothing for {self.reply_timeout:g} s "
                                     "(reply_timeout); it may be stuck")
        return poll

    def _open(self, src, data):
        self.bytes_received_from[src] = self.bytes_received_from.get(src, 0) + len(data)
        try:
            return decode(self.channels[src].open(data))
        except ProtocolError as exc:
            raise ProtocolError(f"rank {src} sent a malformed message: {exc}") from None

    def recv(self, src):
        data = self.raw.recv_bytes(src, TAG_DATA, poll=self._waiting_poll([src]))
        return self._open(src, data)

    # -- collectives driven by the master --------------------------------------
    def bcast(self, msg):
        """Master: send the same message to every party.  Party: receive it."""
        if self.is_master:
            data = encode(msg)          # encoded once, sealed with each party's own channel key
            for c in self.clients:
                self._send_encoded(c, data)
            return msg
        return self.recv(MASTER)

    def scatter(self, msgs):
        """Master: send ``msgs[rank]`` to each listed party."""
        for c, m in msgs.items():
            self.send(c, m)

    def gather(self, ranks=None):
        """Master: one reply from each listed party (default all), as {rank: msg}
        in rank order; replies are taken in the order they arrive, so a slow
        party does not hold up receiving (and decrypting) the others."""
        ranks = self.clients if ranks is None else list(ranks)
        self.rounds += 1
        pending = list(ranks)
        got = {}
        while pending:
            src, data = self.raw.recv_any(pending, TAG_DATA, poll=self._waiting_poll(pending))
            pending.remove(src)
            got[src] = self._open(src, data)
        return {c: got[c] for c in ranks}

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
            text = ch.open(data) if ch else data
        except ChannelError:
            raise RemoteError(src, "ChannelError", "error report failed authentication", "") from None
        try:
            # JSON, not pickle: a report may arrive before the channel keys exist
            payload = json.loads(bytes(text).decode("utf-8"))
        except (ValueError, RecursionError):
            payload = None
        if not (isinstance(payload, dict)
                and all(isinstance(payload.get(k), str) for k, _ in _REPORT_FIELDS)
                and _TYPE_NAME.fullmatch(payload["type"])):
            raise RemoteError(src, "ProtocolError",
                              f"{self.raw.describe(src)} sent a malformed error report", "")
        raise RemoteError(src, *(_clip(payload[k], n) for k, n in _REPORT_FIELDS))

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
        """Party after reporting an error: wait for the master to stop the job
        (:class:`JobStopped` when it says so)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.raw.progress()  # the report itself may still be in flight
            time.sleep(0.01)
            if getattr(self.raw, "aborted", False):
                return
            if self.raw.cooperative_stop:
                self._poll_stop()
        self.raw.abort(1)

    # -- a stop every rank takes part in ---------------------------------------
    def _poll_stop(self):
        """Party: if the master sent a stop, drain what the master sent that was
        not received, confirm, complete this rank's own sends and raise
        :class:`JobStopped` with the master's exit code."""
        if self.raw.probe(MASTER, TAG_STOP) is None:
            return
        data = bytes(self.raw.recv_bytes(MASTER, TAG_STOP))
        code = struct.unpack("<i", data)[0] if len(data) == 4 else 1
        self._drain([MASTER], (TAG_DATA,))
        self.raw.send_bytes(MASTER, b"stop", TAG_STOP)
        self._flush_for(STOP_ACK_SECONDS)
        raise JobStopped(code if 1 <= code <= 255 else 1)

    def _drain(self, sources, tags):
        """Receive and drop every message from ``sources`` with ``tags`` that is waiting."""
        for tag in tags:
            for src in sources:
                while self.raw.probe(src, tag) is not None:
                    self.raw.recv_bytes(src, tag)

    def _flush_for(self, seconds):
        """Complete this rank's posted sends, giving up after ``seconds``."""
        deadline = time.monotonic() + seconds

        def give_up():
            if time.monotonic() > deadline:
                raise TimeoutError
        try:
            self.raw.flush(poll=give_up)
            return True
        except TimeoutError:
            return False

    def stop_parties(self, code):
        """Master: tell every party to end with exit code ``code`` and wait up
        to :data:`STOP_ACK_SECONDS` for each to confirm, receiving (and
        dropping) what the parties still send meanwhile.  True when every
        party confirmed: the ranks then exit by themselves, so a batch system
        sees the job's own exit code; False when a party did not answer (busy
        in a kernel, or gone): the caller then aborts the job."""
        parties = self.clients
        for c in parties:
            self.raw.send_bytes(c, struct.pack("<i", int(code)), TAG_STOP)
        deadline = time.monotonic() + STOP_ACK_SECONDS
        waiting = set(parties)
        while waiting and time.monotonic() < deadline:
            self.raw.progress()
            self._drain(parties, (TAG_DATA, TAG_ERROR))
            for c in sorted(waiting):
                if self.raw.probe(c, TAG_STOP) is not None:
                    self.raw.recv_bytes(c, TAG_STOP)
                    waiting.discard(c)
            if waiting:
                time.sleep(0.002)
        if waiting:
            return False
        self._drain(parties, (TAG_DATA, TAG_ERROR))
        return self._flush_for(max(0.5, deadline - time.monotonic()))


_REPORT_FIELDS = (("type", 200), ("message", 10_000), ("traceback", 100_000))  # characters kept
_TYPE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")   # an exception's name: no line breaks to forge log lines


def _clip(text, limit):
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters cut]"


def _tamper_from_env():
    spec = os.environ.get("FEDFOREST_FAULT_TAMPER")
    if not spec:
        return None
    src, dst, n = (int(x) for x in spec.split(":"))
    return (src, dst, n)
