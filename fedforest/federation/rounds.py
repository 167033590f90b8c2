"""The round lifecycle shared by every mode.

A round is the server sending each client a message and collecting one reply
from each (:meth:`~fedforest.transport.base.Comm.exchange`).  :func:`ask`
builds the messages of a round; :func:`serve` is the client side: it answers
the server's messages with the mode's handlers until one of them ends the run.
"""
from dataclasses import dataclass

from .protocol import ProtocolError

SERVER = 0


@dataclass
class Done:
    """Returned by a client handler to end :func:`serve`: ``reply`` (if not
    None) goes to the server, ``value`` is what :func:`serve` returns."""
    value: object = None
    reply: dict = None


def messages(op, clients, common=None, per_client=None):
    """One message per client: ``{"op": op, **common, **per_client[rank]}``."""
    common = common or {}
    per_client = per_client or {}
    return {r: {"op": op, **common, **per_client.get(r, {})} for r in clients}


def ask(comm, op, common=None, per_client=None, clients=None):
    """Server: one round of ``op`` messages to ``clients`` (default all); returns {rank: reply}."""
    clients = comm.clients if clients is None else list(clients)
    return comm.exchange(messages(op, clients, common, per_client))


def serve(comm, handlers, server=SERVER):
    """Client: answer the server's messages until a handler returns :class:`Done`.

    ``handlers`` maps a message name to ``handler(msg)``, which returns the
    reply dict, None (no reply) or :class:`Done`.  A message without a handler
    is a :class:`~fedforest.federation.protocol.ProtocolError`."""
    while True:
        msg = comm.recv(server)
        op = msg.get("op")
        handler = handlers.get(op)
        if handler is None:
            raise ProtocolError(f"protocol error: unexpected message {op!r} (expected one of "
                                f"{', '.join(sorted(handlers))})")
        out = handler(msg)
        if isinstance(out, Done):
            if out.reply is not None:
                comm.send(server, out.reply)
            return out.value
        if out is not None:
            comm.send(server, out)
