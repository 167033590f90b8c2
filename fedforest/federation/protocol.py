"""Names of the messages every horizontal mode exchanges (a message is a dict
whose ``"op"`` is one of these; modes add their own names beside their code)."""

LOAD = "load"          # server -> client: describe your table (columns, kinds, classes, rows)
SETUP = "setup"        # server -> client: the job-wide encoding and the run settings
FINAL = "final"        # server -> client: the final model; the client evaluates and saves it
DONE = "done"          # server -> client: stop


class ProtocolError(RuntimeError):
    """A message arrived that the protocol does not allow at this point."""


def expect(msg, op):
    """``msg`` if it is an ``op`` message, else ProtocolError."""
    if msg.get("op") != op:
        raise ProtocolError(f"protocol error: expected {op!r}, got {msg.get('op')!r}")
    return msg
