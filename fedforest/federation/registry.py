"""The registry of modes.

Built-in modes are listed here by the module that declares them (a module
with a ``MODES`` tuple of :class:`~fedforest.federation.mode.Mode`); further
modes can be added by installed packages through the ``fedforest.modes``
entry-point group (each entry point names such a module).  Declarations are
cheap to import; an algorithm's implementation is imported only when its mode
runs.
"""
import difflib
import importlib
from importlib import metadata

from ..errors import InputError
from .mode import Mode

BUILTIN = (
    "fedforest.vertical.forest",
    "fedforest.vertical.boost",
    "fedforest.horizontal.icdta4fl",
    "fedforest.horizontal.baselines",
    "fedforest.horizontal.federated_id3",
    "fedforest.horizontal.fedxgbllr",
    "fedforest.horizontal.efdt",
    "fedforest.horizontal.fedga",
)
ENTRY_POINT_GROUP = "fedforest.modes"


class Registry:
    def __init__(self, modules=BUILTIN, entry_points=True):
        self._modules = list(modules)
        self._entry_points = entry_points
        self._modes = None

    def _load(self):
        if self._modes is not None:
            return self._modes
        modes = {}
        sources = list(self._modules)
        if self._entry_points:
            sources += [ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)]
        for name in sources:
            for mode in importlib.import_module(name).MODES:
                self._add(modes, mode)
        self._modes = modes
        return modes

    @staticmethod
    def _add(modes, mode):
        if not isinstance(mode, Mode):
            raise TypeError(f"{mode!r} is not a Mode")
        if mode.name in modes:
            raise ValueError(f"mode {mode.name!r} is declared twice")
        if any(m.table == mode.table for m in modes.values()):
            raise ValueError(f"mode {mode.name!r}: table [{mode.table}] is taken")
        modes[mode.name] = mode

    def register(self, mode):
        self._add(self._load(), mode)

    def names(self):
        return list(self._load())

    def modes(self):
        return list(self._load().values())

    def get(self, name):
        modes = self._load()
        if name not in modes:
            near = difflib.get_close_matches(str(name), list(modes), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise InputError("mode", f"unknown mode {name!r}{hint} (modes: {', '.join(modes)})")
        return modes[name]

    def by_table(self, table):
        for m in self._load().values():
            if m.table == table:
                return m
        return None

    def owners(self, key):
        """The modes that declare setting ``key``."""
        return [m for m in self._load().values() if m.param(key) is not None]


REGISTRY = Registry()


def get_mode(name):
    return REGISTRY.get(name)
