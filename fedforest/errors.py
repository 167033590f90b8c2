"""Exception types.  Every bad input is an :class:`InputError` whose message reads
``"<what>: <problem>"`` so users see one format everywhere."""


class FedForestError(Exception):
    """Base class of every error raised by fedforest."""


class InputError(FedForestError, ValueError):
    """A bad parameter, configuration, data file or model file."""

    def __init__(self, what, problem):
        self.what = what
        self.problem = problem
        super().__init__(f"{what}: {problem}")


class ChannelError(FedForestError):
    """A message failed authentication: tampered, replayed, reordered or truncated."""

    def __init__(self, sender, receiver, detail):
        self.sender = sender
        self.receiver = receiver
        super().__init__(
            f"message from rank {sender} to rank {receiver} failed authentication "
            f"({detail}); the channel may have been tampered with, the job stops")


class RemoteError(FedForestError):
    """An exception raised on another rank, carried to the master."""

    def __init__(self, rank, exc_type, message, traceback_text):
        self.rank = rank
        self.exc_type = exc_type
        self.remote_message = message
        self.remote_traceback = traceback_text
        super().__init__(f"rank {rank} failed with {exc_type}: {message}\n"
                         f"--- traceback on rank {rank} ---\n{traceback_text}")
