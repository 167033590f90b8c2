"""Names of the messages every horizontal mode exchanges (a message is a dict
whose ``"op"`` is one of these; modes add their own names beside their code)."""
from ..transport.base import ProtocolError, expect  # noqa: F401  (re-exported for the modes)

LOAD = "load"          # server -> client: describe your table (columns, kinds, classes, rows)
SETUP = "setup"        # server -> client: the job-wide encoding and the run settings
FINAL = "final"        # server -> client: the final model; the client evaluates and saves it
