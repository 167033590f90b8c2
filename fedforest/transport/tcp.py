"""TCP byte transport with TLS 1.3: each participant is its own process, on
its own machine.

The topology is the one of every fedforest job, a star: the master (rank 0)
listens, each party connects to it, and parties never talk to each other.
One connection per party carries frames of ``(tag, payload)``:

    tag: 4 bytes, big endian | length: 8 bytes, big endian | payload

Tags below :data:`TAG_CONTROL` are the transport's users' (the ``Comm`` data,
error and key tags, the job start-up); the transport itself uses a few above
it (abort, goodbye).  Payloads are what ``Comm`` hands over: already sealed
by the end-to-end AES-GCM channel of the (master, party) pair, so TLS adds
the authentication of both ends (pinned certificates, see
:mod:`fedforest.crypto.identity`) and protects the frame headers.

All connections of a process are driven by one event loop in a background
thread (``asyncio`` streams over ``ssl``): TLS state is touched by that
thread only, one reader task per connection feeds per-(source, tag) queues,
and the algorithm's thread sends by handing frames to the loop and waiting
until they are written out (backpressure) while calling its ``poll``.

Faults: a connection that ends or breaks marks its peer lost with the reason;
a receive from a lost peer (with nothing left queued from it) raises
:class:`PeerLost` naming the participant.  Kernel TCP keep-alives find a
peer whose machine or network went away; a peer that is alive but silent
is named by the master's ``reply_timeout`` (``Comm``).  :meth:`abort` sends
every peer an abort frame, so each of them stops at once.
"""
import asyncio
import collections
import errno
import json
import logging
import os
import socket
import ssl
import struct
import threading
import time

from ..crypto.identity import fingerprint
from ..errors import FedForestError
from ..version import __version__
from .base import JobAborted, RawTransport

HEADER = struct.Struct("!IQ")
TAG_CONTROL = 0xFFFF0000
TAG_ABORT = TAG_CONTROL + 1     # payload: the exit code (4 bytes)
TAG_BYE = TAG_CONTROL + 2       # the sender has finished and closes the connection
TAG_HELLO = TAG_CONTROL + 3     # party -> master, first frame: {"name", "version"} (JSON)
TAG_REFUSED = TAG_CONTROL + 4   # master -> party: why its connection is refused (text)
HANDSHAKE_SECONDS = 20          # a connecting peer must finish TLS and say hello within this
STREAM_BUFFER = 1 << 24         # bytes a reader buffers before pausing the socket (large frames)
START_FRAME = 1 << 20          # the largest frame before a job is agreed (hello, job message, refusal)
DEFAULT_MAX_FRAME = 2 << 30     # the largest frame of a running job unless max_message_mb says otherwise
_WAIT = 0.02                    # seconds between polls while waiting
KEEPALIVE = (10, 5, 3)          # idle seconds, interval, probes: a dead host is found in ~25 s


class PeerLost(FedForestError):
    """A participant disconnected or was stopped in the middle of a job."""


class FrameTooLarge(ConnectionError):
    """A peer announced a frame above the receiver's limit."""

    def __init__(self, n, limit):
        super().__init__(f"sent a message of {n} bytes, above this process's limit of {limit} bytes "
                         "(max_message_mb in [network]); connection closed")


def _quiet_eof_note(record):
    # asyncio notes at WARNING that a stream reader's end-of-file answer means
    # nothing under TLS: true, and no concern of the user's
    return not str(record.msg).startswith("returning true from eof_received()")


logging.getLogger("asyncio").addFilter(_quiet_eof_note)


class EventLoop:
    """An asyncio loop in a daemon thread; coroutines are submitted from other threads."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fedforest-tcp", daemon=True)
        self.thread.start()

    def submit(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro, timeout=None):
        return self.submit(coro).result(timeout)

    def stop(self):
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)


def set_keepalive(sock):
    """Kernel keep-alive probes on a connected socket (where the platform has them)."""
    if sock is None:
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    idle, interval, count = KEEPALIVE
    for opt, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval), ("TCP_KEEPCNT", count)):
        if hasattr(socket, opt):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def split_address(text, what):
    """``host:port`` (``[v6]:port`` for IPv6) as (host, port)."""
    from ..errors import InputError
    if not isinstance(text, str) or ":" not in text:
        raise InputError(what, f"must be 'host:port', got {text!r}")
    host, _, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not port.isdigit() or not 0 <= int(port) <= 65535 or not host:
        raise InputError(what, f"must be 'host:port' with a port in 0..65535, got {text!r}")
    return host, int(port)


class Connection:
    """One TLS connection to a peer (used from the loop thread only)."""

    def __init__(self, reader, writer, name, address):
        self.reader = reader
        self.writer = writer
        self.name = name
        self.address = address

    async def write(self, tag, data):
        self.writer.write(HEADER.pack(tag, len(data)))
        if len(data):
            self.writer.write(data)
        await self.writer.drain()

    async def read(self, limit=START_FRAME):
        """One frame; a frame announced above ``limit`` bytes ends the
        connection before anything of it is buffered."""
        tag, n = HEADER.unpack(await self.reader.readexactly(HEADER.size))
        if n > limit:
            raise FrameTooLarge(n, limit)
        return tag, (await self.reader.readexactly(n) if n else b"")

    async def close(self):
        try:
            self.writer.close()
            await asyncio.wait_for(self.writer.wait_closed(), 2)
        except (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError):
            pass


def _reason(exc):
    if isinstance(exc, FrameTooLarge):
        return str(exc)
    if isinstance(exc, asyncio.IncompleteReadError):
        return "closed the connection"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return "dropped the connection (reset)"
    return f"connection broke ({type(exc).__name__}: {exc})" if str(exc) else \
        f"connection broke ({type(exc).__name__})"


class TCPTransport(RawTransport):
    """:class:`RawTransport` over a set of established :class:`Connection`\\ s.

    ``rank``/``size`` may be assigned after construction (a party learns them
    from the master's job message); ``names[r]`` names rank ``r`` in errors.
    ``max_frame``: the largest frame a peer may send; small until the job is
    agreed, then the job's limit (set by :mod:`fedforest.federation.network`)."""

    def __init__(self, loop, rank, size, connections, names):
        self.ev = loop
        self.rank = rank
        self.size = size
        self.conns = dict(connections)          # rank -> Connection
        self.names = dict(names)
        self.aborted = False
        self.abort_code = None
        self.lost = {}                          # rank -> reason
        self.max_frame = START_FRAME
        self.finished = set()                   # ranks that said goodbye
        self._queues = collections.defaultdict(collections.deque)
        self._cond = threading.Condition()
        self._pending = []                      # futures of writes not yet complete
        self._drop_after = _drop_fault()
        self._readers = [loop.submit(self._read_loop(r, c)) for r, c in self.conns.items()]

    # -- naming ----------------------------------------------------------------
    def describe(self, rank):
        name = self.names.get(rank)
        if rank == 0:
            return f"the master ({name})" if name else "the master"
        return f"party {name!r} (rank {rank})" if name else f"rank {rank}"

    # -- receiving (loop thread) ---------------------------------------------------
    async def _read_loop(self, rank, conn):
        count = 0
        try:
            while True:
                tag, data = await conn.read(self.max_frame)
                if tag == TAG_ABORT:
                    code = struct.unpack("!i", data)[0] if len(data) == 4 else 1
                    self._peer_stopped(rank, code)
                    return
                if tag == TAG_REFUSED:
                    self._mark_lost(rank, "refused this connection: " + data.decode("utf-8", "replace"))
                    return
                if tag == TAG_BYE:
                    with self._cond:
                        self.finished.add(rank)
                        self._cond.notify_all()
                    continue
                count += 1
                if self._drop_after is not None and count >= self._drop_after:
                    os._exit(9)     # fault injection: this process vanishes mid-job
                with self._cond:
                    self._queues[(rank, tag)].append(data)
                    self._cond.notify_all()
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ssl.SSLError) as exc:
            self._mark_lost(rank, _reason(exc))
        except asyncio.CancelledError:
            pass

    def _mark_lost(self, rank, reason):
        with self._cond:
            if rank not in self.lost:
                self.lost[rank] = reason
            if rank == 0 and self.rank != 0 and 0 not in self.finished:
                self.aborted = True          # a party without its master has no job left
            self._cond.notify_all()

    def _peer_stopped(self, rank, code):
        with self._cond:
            if rank == 0:
                self.aborted = True
                self.abort_code = code
                self.lost[0] = f"stopped the job (exit code {code})"
            else:
                self.lost[rank] = f"stopped (exit code {code})"
            self._cond.notify_all()

    def _lost_error(self, rank):
        reason = self.lost[rank]
        if self.rank == 0 and rank != 0 and not reason.startswith("stopped"):
            conn = self.conns.get(rank)
            host = conn.address.rpartition(":")[0] if conn is not None and conn.address else None
            where = f" on host {host}" if host else ""
            return PeerLost(f"{self.describe(rank)}{where} {reason} during the job: its process died or "
                            "was stopped, or its machine or network went away")
        return PeerLost(f"{self.describe(rank)} {reason}")

    # -- RawTransport --------------------------------------------------------------
    def _take(self, sources, tag):
        for s in sources:
            q = self._queues.get((s, tag))
            if q:
                return s, q.popleft()
        return None

    def _wait_for(self, sources, tag, poll):
        while True:
            with self._cond:
                got = self._take(sources, tag)
                if got is None:
                    self._cond.wait(_WAIT)
                    got = self._take(sources, tag)
            if got is not None:
                return got
            if poll is not None:
                poll()
            if self.aborted:
                if self.rank != 0 and 0 in self.lost and self.abort_code is None:
                    raise JobAborted(f"{self.describe(0)} {self.lost[0]}")
                raise JobAborted(f"rank {self.rank}: job stopped")
            for s in sources:
                if s in self.lost and not self._queues.get((s, tag)):
                    if poll is not None:
                        poll()          # an error report that came just before the end wins
                    raise self._lost_error(s)

    def recv_bytes(self, src, tag, poll=None):
        sources = [r for r in self.conns] if src < 0 else [src]
        return self._wait_for(sources, tag, poll)[1]

    def recv_any(self, sources, tag, poll=None):
        return self._wait_for(list(sources), tag, poll)

    def probe(self, src, tag):
        sources = list(self.conns) if src < 0 else [src]
        with self._cond:
            for s in sources:
                if self._queues.get((s, tag)):
                    return s
        return None

    def send_bytes(self, dest, data, tag, poll=None):
        if self.aborted:
            raise JobAborted(f"rank {self.rank}: job stopped")
        if dest in self.lost:
            raise self._lost_error(dest)
        fut = self.ev.submit(self.conns[dest].write(tag, data))
        self._pending.append((dest, fut))
        self._settle(poll, limit=8)

    def _settle(self, poll, limit=0):
        """Wait until at most ``limit`` writes are pending (calling ``poll``);
        a write to a peer that went away raises :class:`PeerLost` naming it."""
        while True:
            for dest, f in [p for p in self._pending if p[1].done()]:
                self._pending.remove((dest, f))
                exc = f.exception()
                if exc is not None and not self.aborted:
                    self._mark_lost(dest, _reason(exc))
                    raise self._lost_error(dest)
            if len(self._pending) <= limit:
                return
            if poll is not None:
                poll()
            if self.aborted:
                raise JobAborted(f"rank {self.rank}: job stopped")
            with self._cond:
                lost = [d for d, _ in self._pending if d in self.lost]
            if lost:
                raise self._lost_error(lost[0])
            time.sleep(_WAIT / 10)

    def flush(self, poll=None):
        self._settle(poll, limit=0)

    def progress(self):
        self._pending = [p for p in self._pending if not p[1].done() or p[1].exception() is not None]

    def abort(self, code):
        """Tell every connected peer to stop (exit code ``code``), then close."""
        self.aborted = True
        if self.abort_code is None:
            self.abort_code = code
        payload = struct.pack("!i", int(code))
        futs = [self.ev.submit(c.write(TAG_ABORT, payload)) for r, c in self.conns.items()
                if r not in self.lost]
        for f in futs:
            try:
                f.result(timeout=5)
            except Exception:  # noqa: BLE001 - a peer already gone needs no telling
                pass
        self.close()

    def finish(self, timeout=30.0):
        """End of a job: send every peer a goodbye and wait (up to ``timeout``)
        for theirs or for them to close, so no frame is cut off; then close."""
        try:
            self.flush()
        except (PeerLost, JobAborted):
            pass
        for r, c in self.conns.items():
            if r not in self.lost:
                try:
                    self.ev.run(c.write(TAG_BYE, b""), timeout=5)
                except Exception:  # noqa: BLE001
                    pass
        deadline = time.monotonic() + timeout
        with self._cond:
            while time.monotonic() < deadline and any(
                    r not in self.finished and r not in self.lost for r in self.conns):
                self._cond.wait(_WAIT * 5)
        self.close()

    def close(self):
        for f in self._readers:
            f.cancel()
        for c in self.conns.values():
            try:
                self.ev.run(c.close(), timeout=5)
            except Exception:  # noqa: BLE001
                pass
        self.ev.stop()


class Party:
    """What the master knows of one party: its name, pinned fingerprint and
    (optionally) the hosts it may connect from."""

    def __init__(self, name, fingerprint, hosts=None):
        self.name = name
        self.fingerprint = fingerprint
        self.hosts = hosts


def resolve_hosts(host):
    """The IP addresses ``host`` resolves to (empty when it does not)."""
    try:
        return {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return set()


class ListenFailed(OSError):
    """The master cannot listen on its address (port in use, no such local
    address, a port below 1024 without privileges): bad input, one line."""


# pinned certificates are trusted by their fingerprint, not by their validity
# period (OpenSSL's X509_V_FLAG_NO_CHECK_TIME; the parties do not check the
# master's dates either)
_NO_CHECK_TIME = 0x200000


class JoinFailed(FedForestError):
    """Not every party joined the job (each missing one is named)."""


class ClosedAtHello(JoinFailed):
    """The master closed the connection as the party introduced itself."""


async def _refuse(conn, text, refused):
    refused.append(f"{conn.address}: {text}")
    try:
        await asyncio.wait_for(conn.write(TAG_REFUSED, text.encode("utf-8")), 5)
    except Exception:  # noqa: BLE001 - the refused peer may be gone already
        pass
    await conn.close()


async def _accept(host, port, ctx, parties, timeout, log, bound):
    """Master: accept one authenticated connection per party; fail naming
    the missing ones after ``timeout`` seconds, or at once when a party's
    connection is refused for a reason it will not get over by retrying
    (its pin of the master, its name, address or version).  The parties
    already accepted are then told why the job cannot start."""
    by_fp = {p.fingerprint: (rank, p) for rank, p in enumerate(parties, start=1)}
    conns, refused, final = {}, [], []
    everyone = asyncio.Event()

    async def refuse_party(conn, text):
        log(f"refused {conn.address}: {text}")
        await _refuse(conn, text, refused)
        final.append(text)
        everyone.set()

    async def on_connect(reader, writer):
        peer = writer.get_extra_info("peername") or ("?", 0)
        address = f"{peer[0]}:{peer[1]}"
        conn = Connection(reader, writer, None, address)
        try:
            # no await before this call: the TLS layer must take over before the first read
            await writer.start_tls(ctx, ssl_handshake_timeout=HANDSHAKE_SECONDS)
        except Exception as exc:  # noqa: BLE001 - any handshake failure refuses the peer
            text = getattr(exc, "verify_message", None) or str(exc) or type(exc).__name__
            refused.append(f"{address}: TLS handshake failed ({text}); its certificate is not one "
                           "the job file pins")
            log(f"refused {address}: TLS handshake failed ({text})")
            await conn.close()
            return
        set_keepalive(writer.get_extra_info("socket"))
        fp = fingerprint(writer.get_extra_info("ssl_object").getpeercert(True))
        if fp not in by_fp:
            await _refuse(conn, f"certificate {fp} is not pinned in the job file", refused)
            return
        rank, party = by_fp[fp]
        conn.name = party.name
        try:
            tag, data = await asyncio.wait_for(conn.read(), HANDSHAKE_SECONDS)
            hello = json.loads(data.decode("utf-8")) if tag == TAG_HELLO else None
        except (asyncio.TimeoutError, ValueError, OSError, ConnectionError, asyncio.IncompleteReadError,
                ssl.SSLError):
            hello = None
        if not isinstance(hello, dict):
            await refuse_party(conn, f"party {party.name!r} closed the connection without its hello (does "
                                     "its file pin this master's fingerprint?)")
            return
        if hello.get("name") != party.name:
            await refuse_party(conn, f"the certificate pinned for party {party.name!r} was presented by a "
                                     f"process calling itself {hello.get('name')!r}")
            return
        if party.hosts is not None and peer[0] not in party.hosts:
            await refuse_party(conn, f"party {party.name!r} connected from {peer[0]}, which is not its "
                                     "address in the job file")
            return
        if hello.get("version") != __version__:
            await refuse_party(conn, f"party {party.name!r} runs fedforest {hello.get('version')}, the "
                                     f"master {__version__}; both must run the same version")
            return
        if rank in conns:
            await _refuse(conn, f"party {party.name!r} is already connected", refused)
            return
        conns[rank] = conn
        log(f"party {party.name!r} (rank {rank}) joined from {address}")
        if len(conns) == len(parties):
            everyone.set()

    try:
        server = await asyncio.start_server(on_connect, host, port, limit=STREAM_BUFFER)
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        if exc.errno == errno.EADDRINUSE:
            why += " (another process, an earlier serve perhaps, holds it: stop it or pick another port)"
        raise ListenFailed(exc.errno, f"network.listen: cannot listen on {host}:{port}: {why}") from None
    bound.append(server.sockets[0].getsockname()[:2])
    try:
        try:
            await asyncio.wait_for(everyone.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        if len(conns) == len(parties) and not final:
            return conns
        missing = [f"{p.name!r} (rank {r})" for r, p in enumerate(parties, start=1) if r not in conns]
        if final:
            text = "the job cannot start: " + "; ".join(final)
        else:
            text = f"part{'ies' if len(missing) > 1 else 'y'} {', '.join(missing)} did not join within " \
                   f"{timeout:g} s (connect_timeout)"
            if refused:
                text += "; refused connections: " + "; ".join(refused)
        for c in conns.values():    # they did nothing wrong: tell them what did go wrong
            told = text if final else f"the job cannot start: {text}"
            await _refuse(c, told + f" (nothing is wrong with party {c.name!r})", [])
        raise JoinFailed(text)
    finally:
        server.close()


def accept_parties(listen, ctx, parties, master_name, timeout, log=lambda text: None, on_listen=None):
    """Master: listen on ``listen`` = (host, port) until every party of
    ``parties`` (a list of :class:`Party`, in rank order) has connected with
    its pinned certificate; returns the master's :class:`TCPTransport`."""
    ev = EventLoop()
    bound = []
    ctx.verify_flags = ctx.verify_flags | _NO_CHECK_TIME
    fut = ev.submit(_accept(listen[0], listen[1], ctx, parties, timeout, log, bound))
    while not bound and not fut.done():
        time.sleep(0.01)
    if bound and on_listen is not None:
        on_listen(bound[0])
    try:
        conns = fut.result()
    except BaseException:
        ev.stop()
        raise
    names = {0: master_name}
    names.update({r: p.name for r, p in enumerate(parties, start=1)})
    return TCPTransport(ev, 0, len(parties) + 1, conns, names)


async def _connect(host, port, ctx, pinned, name, timeout):
    deadline = time.monotonic() + timeout
    while True:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=ctx, server_hostname=host, limit=STREAM_BUFFER,
                                        ssl_handshake_timeout=HANDSHAKE_SECONDS),
                max(1.0, deadline - time.monotonic()))
            break
        except (ConnectionRefusedError, asyncio.TimeoutError, OSError) as exc:
            if time.monotonic() >= deadline:
                raise JoinFailed(f"cannot reach the master at {host}:{port} within {timeout:g} s "
                                 f"(connect_timeout): {exc or type(exc).__name__}") from None
            await asyncio.sleep(0.25)
    conn = Connection(reader, writer, "master", f"{host}:{port}")
    set_keepalive(writer.get_extra_info("socket"))
    fp = fingerprint(writer.get_extra_info("ssl_object").getpeercert(True))
    if fp != pinned:
        await conn.close()
        raise JoinFailed(f"the master at {host}:{port} presented certificate {fp}, but this party's "
                         f"file pins {pinned}: refused (not the agreed master, or its key changed)")
    try:
        await conn.write(TAG_HELLO, json.dumps({"name": name, "version": __version__}).encode("utf-8"))
    except (OSError, ConnectionError, ssl.SSLError) as exc:
        await conn.close()
        raise ClosedAtHello(f"the master ({host}:{port}) {_reason(exc)}") from None
    return conn


def connect_master(address, ctx, pinned, name, timeout):
    """Party: connect to the master at ``address`` = (host, port), check its
    certificate against the pinned fingerprint and introduce itself as
    ``name``; returns the party's :class:`TCPTransport` (rank and size are
    set when the master's job message arrives)."""
    ev = EventLoop()
    try:
        conn = ev.run(_connect(address[0], address[1], ctx, pinned, name, timeout))
    except BaseException:
        ev.stop()
        raise
    return TCPTransport(ev, -1, 0, {0: conn}, {0: f"{address[0]}:{address[1]}"})


def _drop_fault():
    """Fault injection for tests: FEDFOREST_FAULT_DROP=<n> makes this process
    exit abruptly when its n-th message arrives (a party that vanishes)."""
    spec = os.environ.get("FEDFOREST_FAULT_DROP")
    return int(spec) if spec else None
