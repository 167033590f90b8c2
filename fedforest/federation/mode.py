"""The mode contract: what an algorithm declares to run under fedforest.

A *mode* is one algorithm (or baseline) runnable with ``--mode <name>``.  Its
declaration (:class:`Mode`) is cheap to import: a name, its family, a one-line
summary, the TOML table that holds its settings and their :class:`Param`
declarations, the tasks it supports, and the module that implements its roles
(imported only when the mode runs).  The implementation module provides:

* ``server_train(comm, cfg)`` and ``client_train(comm, cfg)``: rank 0 and
  ranks 1..K of a training job (required);
* ``server_predict`` / ``client_predict``: prediction as a job over the
  transport (vertical models, which are split across parties);
* ``predict_proba(doc, X)``: prediction with a saved model in one process
  (horizontal models; ``doc`` is the loaded model document);
* ``explain(doc, X_row, raw_row)``: the model (and optionally the rule that
  decided one row) as text;
* ``warm_up(cfg, command)`` (optional): load what a rank of a ``command``
  ("train" or "predict") job with these settings runs, e.g. its numba
  kernels, before the rank's first message (:meth:`Mode.prepare_rank`).
"""
import gc
import importlib
from dataclasses import dataclass, field

from ..constraints import Paths, Texts, describe
from ..data.tasks import CLASSIFICATION, REGRESSION
from ..errors import InputError

VERTICAL = "vertical"
HORIZONTAL = "horizontal"
FAMILIES = (VERTICAL, HORIZONTAL)

ROLES = ("server_train", "client_train", "server_predict", "client_predict", "predict_proba", "explain",
         "warm_up")


@dataclass(frozen=True)
class Param:
    """One setting: its name (also the flag ``--name-with-dashes``), default,
    constraints (see :mod:`fedforest.constraints`) and help text.  ``text``
    marks values that are names or paths (a flag value is then never read as
    a number); ``path`` marks file paths (relative to the config file's
    folder when given there); ``families`` limits a [job] setting to some
    families of modes."""
    name: str
    default: object
    constraints: tuple
    help: str
    text: bool = False
    path: bool = False
    families: tuple = FAMILIES

    @property
    def flag(self):
        return "--" + self.name.replace("_", "-")

    @property
    def is_paths(self):
        return any(isinstance(c, Paths) for c in self.constraints)

    @property
    def is_texts(self):
        return any(isinstance(c, Texts) for c in self.constraints)

    @property
    def is_bool(self):
        return bool in self.constraints and all(c in (bool, None) for c in self.constraints)

    def describe(self):
        return describe(self.constraints)


@dataclass(frozen=True)
class Mode:
    name: str
    family: str
    summary: str
    table: str
    params: tuple
    impl: str
    tasks: tuple = (CLASSIFICATION, REGRESSION)
    check: object = None          # optional cfg -> None, cross-setting checks (raise InputError)
    roles: tuple = ("server_train", "client_train")
    extra: str = None             # the pip extra that installs the packages its implementation needs
    _param_index: dict = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"mode {self.name!r}: family must be one of {FAMILIES}")
        unknown = set(self.roles) - set(ROLES)
        if unknown:
            raise ValueError(f"mode {self.name!r}: unknown roles {sorted(unknown)}")
        object.__setattr__(self, "_param_index", {p.name: p for p in self.params})

    def param(self, name):
        return self._param_index.get(name)

    @property
    def keys(self):
        return list(self._param_index)

    def has(self, role):
        return role in self.roles

    def role(self, name):
        """The function implementing ``name`` (imports the implementation module)."""
        if name not in self.roles:
            raise LookupError(f"mode {self.name!r} has no {name!r} role")
        try:
            module = importlib.import_module(self.impl)
        except ModuleNotFoundError as exc:
            if not exc.name or exc.name.split(".")[0] == "fedforest":
                raise
            how = f"pip install 'fedforest[{self.extra}]'" if self.extra else f"pip install {exc.name}"
            raise InputError("mode", f"mode {self.name!r} needs the Python package {exc.name!r}, which is not "
                                     f"installed: {how}") from None
        return getattr(module, name)

    def prepare_rank(self, cfg, command):
        """Make this process ready to run ``command`` ("train" or "predict") of
        a job of this mode, before its first message: the mode's ``warm_up``
        role loads what the job runs (numba kernels from the cache), then every
        object alive so far (modules, numba's type registries: most of a rank's
        heap, which the job keeps to its end) leaves the garbage collector's
        view, so the job's full collections scan only what the job allocates
        (each took about 0.2 s before).  For processes fedforest starts itself
        (the command line's ranks), never a user's process."""
        if self.has("warm_up"):
            self.role("warm_up")(cfg, command)
        gc.freeze()
        gc.enable()         # the command line starts its job ranks with collection off
