"""Declarative constraints on parameter values.

A parameter's constraints are a tuple of the forms below; a value is valid
when it satisfies at least one of them (so ``(None, Interval(int, 1))`` reads
"None or an int >= 1").  :func:`check` raises :class:`~fedforest.errors.InputError`
with one message format everywhere: ``"<name>: must be <description>, got <value>"``.

* ``None``: the value None;
* ``bool``: true or false (a bool is never accepted as a number);
* ``str``: any text;
* :class:`Interval`: an int or real number in a range;
* :class:`Options`: one of a fixed set of texts;
* :class:`Paths`: a list of file paths (non-empty texts);
* :class:`Texts`: a list of texts (names, tokens).
"""
import math
import numbers

from .errors import InputError

# upper bounds on the counts that size a job's memory and work, the same in
# every mode (a job file or a network job message above them is refused)
MAX_TREES = 100_000
MAX_DEPTH = 64


class Interval:
    """A number of ``kind`` (``int``; ``float``, a real that is not an int, as
    scikit-learn's fractions; or ``numbers.Real``, any real number) between ``low`` and ``high`` (None: unbounded); ``closed`` in
    ``"both"``, ``"left"``, ``"right"``, ``"neither"``."""

    def __init__(self, kind, low=None, high=None, closed="both"):
        if kind not in (int, float, numbers.Real):
            raise ValueError("Interval kind must be int, float or numbers.Real")
        self.kind, self.low, self.high, self.closed = kind, low, high, closed

    def accepts(self, v):
        if isinstance(v, bool):
            return False
        if self.kind is int:
            if not isinstance(v, numbers.Integral):
                return False
        elif not isinstance(v, numbers.Real) or (isinstance(v, float) and math.isnan(v)):
            return False
        elif self.kind is float and isinstance(v, numbers.Integral):
            return False
        if self.low is not None:
            if v < self.low or (v == self.low and self.closed in ("right", "neither")):
                return False
        if self.high is not None:
            if v > self.high or (v == self.high and self.closed in ("left", "neither")):
                return False
        return True

    def describe(self):
        what = {int: "an int", float: "a float"}.get(self.kind, "a number")
        lo_open = self.closed in ("right", "neither")
        hi_open = self.closed in ("left", "neither")
        low, high = (v if v is None or isinstance(v, int) else f"{v:g}" for v in (self.low, self.high))
        if self.low is not None and self.high is not None:
            return f"{what} in {'(' if lo_open else '['}{low}, {high}{')' if hi_open else ']'}"
        if self.low is not None:
            return f"{what} {'>' if lo_open else '>='} {low}"
        if self.high is not None:
            return f"{what} {'<' if hi_open else '<='} {high}"
        return what


class Options:
    """One of a fixed set of texts."""

    def __init__(self, *values):
        self.values = tuple(values)

    def accepts(self, v):
        return isinstance(v, str) and v in self.values

    def describe(self):
        if len(self.values) == 1:
            return repr(self.values[0])
        return "one of " + ", ".join(repr(v) for v in self.values)


class Paths:
    """A non-empty list of file paths (in-process jobs may pass tables, objects
    with ``columns``, in their place)."""

    def accepts(self, v):
        return isinstance(v, list) and len(v) > 0 and all(
            isinstance(p, str) or hasattr(p, "columns") for p in v)

    def check_entries(self, name, v, who="party"):
        """InputError naming the first empty entry of an accepted list (entry
        ``i`` belongs to rank ``i``)."""
        for i, p in enumerate(v, start=1):
            if isinstance(p, str) and not p.strip():
                raise InputError(name, f"no data file given for {who} {i} (entry {i} is empty)")

    def describe(self):
        return "a list of file paths"


class Texts:
    """A list of texts (possibly empty; an entry may be empty, e.g. a token)."""

    def accepts(self, v):
        return isinstance(v, list) and all(isinstance(t, str) for t in v)

    def describe(self):
        return "a list of texts"


def _accepts(c, v):
    if c is None:
        return v is None
    if c is bool:
        return isinstance(v, bool)
    if c is str:
        return isinstance(v, str)
    if isinstance(c, dict) or c is dict:
        return isinstance(v, dict)
    return c.accepts(v)


def _describe(c):
    if c is None:
        return "None"
    if c is bool:
        return "true or false"
    if c is str:
        return "a text"
    if c is dict:
        return "a table"
    return c.describe()


def describe(constraints):
    """The constraints as text: ``"none or an int >= 1"``."""
    parts = [_describe(c) for c in constraints]
    if len(parts) <= 2:
        return " or ".join(parts)
    return ", ".join(parts[:-1]) + " or " + parts[-1]


def satisfied(value, constraints):
    return any(_accepts(c, value) for c in constraints)


def show(value, limit=80):
    """A short text for a value in an error message (tables are not printed)."""
    if hasattr(value, "columns"):
        return "<table>"
    if isinstance(value, list):
        text = "[" + ", ".join(show(v, limit) for v in value) + "]"
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check(name, value, constraints):
    """Raise InputError naming ``name`` unless ``value`` meets one of ``constraints``."""
    if not satisfied(value, constraints):
        raise InputError(name, f"must be {describe(constraints)}, got {show(value)}")
    for c in constraints:
        if isinstance(c, Paths) and c.accepts(value):
            c.check_entries(name, value)
    return value
