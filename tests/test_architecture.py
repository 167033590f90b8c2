"""Package layering, checked statically: every module under ``fedforest/`` is parsed with
``ast`` (nothing is imported) and each of its imports, including imports inside functions,
is checked against the layers below.

Layers (a module may import the layers listed for it, plus the standard library and
third-party packages):

* core: ``fedforest.transport``, ``fedforest.crypto``, ``fedforest.data``,
  ``fedforest.tree``, ``fedforest.errors``, ``fedforest.constraints``, ``fedforest.version``,
  ``fedforest.logs``, ``fedforest.optional``.  Imports: core.
* federation: ``fedforest.federation`` (mode contract, registry, config, model files,
  metrics, rounds/aggregation).  Imports: core, federation.
* horizontal common: ``fedforest.horizontal`` (its ``__init__``), the shared modules
  ``fedforest.horizontal.setup`` (the start-up every horizontal mode shares),
  ``.encoding`` (clients' tables, the job-wide row encoding), ``.message_checks`` (a
  client's checks of the server's messages), ``.client_tree`` (the client-tree job of the
  tree modes), ``.model_files`` (model files, local prediction and explanation),
  ``.declare`` (the declarations the horizontal modes share) and ``.binned_id3`` (the ID3
  job on binned numeric columns both ID3 modes run).  Imports: core, federation,
  horizontal common.
* vertical common: ``fedforest.vertical`` (its ``__init__``), every module directly
  under it (the job skeleton, the grower, the party splitter, messages, model files, the
  model-output and estimator bases, the shared declarations) and the ``paillier`` package
  (the encrypted modes, generic over the algorithms).  Imports: core, federation,
  vertical common.
* algorithms: every package directly under ``fedforest/vertical/`` but ``paillier``
  (``forest``, ``boost``), and every module or package directly under
  ``fedforest/horizontal/`` other than the shared modules and ``__init__``.  Imports:
  core, federation, the family's common layer (horizontal common for horizontal
  algorithms, vertical common for vertical ones) and the algorithm's own modules.  An
  algorithm never imports another algorithm.
* application: ``fedforest`` (``__init__``), ``fedforest.__main__``, ``fedforest.cli``,
  ``fedforest.jobs``, ``fedforest.demo``.  Imports: anything.

Further rules: a module under ``fedforest/`` that fits no layer is an error; only
``fedforest.transport.mpi`` imports ``mpi4py``; no module imports a private
(underscore) name or private submodule from another module; and an import of a
``fedforest`` module that does not exist is reported.

Declarations are cheap: importing the command line (``fedforest.__main__``,
``fedforest.cli``), the registry or a mode declaration it lists (``BUILTIN``) loads
only the standard library and ``fedforest`` modules.  Only imports that run when a
module is loaded count (not those inside functions, nor fallbacks in ``except``
handlers); they are followed through the package's modules and their parent packages.
Two tests run the real thing in a fresh interpreter: loading every built-in mode, and
``--help`` of the command line, leave numpy, numba, pandas and the like unimported.

Relative imports are resolved to absolute names.  ``from pkg import name`` counts as an
import of ``pkg.name`` when ``pkg/name.py`` or ``pkg/name/`` exists, else of ``pkg``.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Set, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "fedforest"

CORE = "core"
FEDERATION = "federation"
HORIZONTAL_COMMON = "horizontal common"
VERTICAL_COMMON = "vertical common"
ALGORITHM = "algorithm"
APPLICATION = "application"

CORE_ROOTS = ("transport", "crypto", "data", "tree", "errors", "constraints", "version", "logs", "optional")
APPLICATION_MODULES = {PACKAGE} | {f"{PACKAGE}.{m}" for m in ("__main__", "cli", "jobs", "demo")}
HORIZONTAL = f"{PACKAGE}.horizontal"
HORIZONTAL_COMMON_ROOTS = (HORIZONTAL,) + tuple(
    f"{HORIZONTAL}.{m}" for m in ("setup", "encoding", "message_checks", "client_tree", "model_files",
                                  "declare", "binned_id3"))
VERTICAL = f"{PACKAGE}.vertical"
VERTICAL_COMMON_PACKAGES = ("paillier",)   # packages under vertical/ that are not algorithms
MPI_MODULE = f"{PACKAGE}.transport.mpi"
REGISTRY_MODULE = f"{PACKAGE}.federation.registry"
COMMAND_LINE = (f"{PACKAGE}.__main__", f"{PACKAGE}.cli")
# what a cheap import must not load (checked in a fresh interpreter)
HEAVY = ("numpy", "numba", "llvmlite", "pandas", "pyarrow", "scipy", "sklearn")


@dataclass(frozen=True)
class Layer:
    name: str
    unit: str = ""  # for an algorithm: its root module (fedforest.vertical, fedforest.horizontal.x)

    def __str__(self):
        return f"{self.name} {self.unit}" if self.unit else self.name


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    rule: str  # layer | unassigned | mpi4py | private | missing
    message: str

    def __str__(self):
        return f"{self.path}:{self.line}: [{self.rule}] {self.message}"


@dataclass(frozen=True)
class Module:
    name: str
    path: str  # as shown in reports
    source: str
    is_package: bool


def _within(name: str, root: str) -> bool:
    return name == root or name.startswith(root + ".")


def layer_of(name: str) -> Optional[Layer]:
    """The layer of module ``name`` (absolute, inside the package), or None if unassigned."""
    if name in APPLICATION_MODULES:
        return Layer(APPLICATION)
    if any(_within(name, f"{PACKAGE}.{r}") for r in CORE_ROOTS):
        return Layer(CORE)
    if _within(name, f"{PACKAGE}.federation"):
        return Layer(FEDERATION)
    if name == HORIZONTAL or any(_within(name, r) for r in HORIZONTAL_COMMON_ROOTS[1:]):
        return Layer(HORIZONTAL_COMMON)
    if _within(name, VERTICAL):
        parts = name.split(".")
        if len(parts) > 3 and parts[2] not in VERTICAL_COMMON_PACKAGES:
            return Layer(ALGORITHM, ".".join(parts[:3]))      # a module inside an algorithm's package
        if len(parts) == 3 and parts[2] not in VERTICAL_COMMON_PACKAGES and os.path.isdir(
                os.path.join(ROOT, *parts)):
            return Layer(ALGORITHM, name)                      # an algorithm's package itself
        return Layer(VERTICAL_COMMON)
    if name.startswith(HORIZONTAL + "."):
        parts = name.split(".")
        if parts[2] != "__init__":
            return Layer(ALGORITHM, ".".join(parts[:3]))
    return None


def may_import(importer: Layer, target: Layer) -> bool:
    if importer.name == APPLICATION:
        return True
    if target.name == CORE:
        return True
    if importer.name == CORE:
        return False
    if target.name == FEDERATION:
        return True
    if importer.name == FEDERATION:
        return False
    if target.name == VERTICAL_COMMON:
        return importer.name == VERTICAL_COMMON or (
            importer.name == ALGORITHM and importer.unit.startswith(VERTICAL + "."))
    if target.name == HORIZONTAL_COMMON:
        return importer.name == HORIZONTAL_COMMON or (
            importer.name == ALGORITHM and importer.unit.startswith(HORIZONTAL + "."))
    if target.name == ALGORITHM:
        return importer.name == ALGORITHM and importer.unit == target.unit
    return False  # application layer: imported by the application layer only


# ---------------------------------------------------------------------------
# Collecting imports
# ---------------------------------------------------------------------------
def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve_relative(module: Module, level: int, target: Optional[str]) -> str:
    parts = module.name.split(".")
    if not module.is_package:
        parts = parts[:-1]
    if level - 1 > len(parts) - 1:
        raise ValueError(f"{module.path}: relative import beyond the top-level package")
    base = parts[:len(parts) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _version_test(node: ast.AST) -> Optional[bool]:
    """The value of ``if sys.version_info <op> (...)`` on this interpreter, else None."""
    if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and ast.unparse(node.test.left) == "sys.version_info"):
        return None
    return bool(eval(compile(ast.Expression(node.test), "<test>", "eval"), {"sys": sys}))


def _load_time_nodes(tree: ast.AST) -> Iterable[ast.AST]:
    """The nodes that run when a module is loaded on this interpreter: not inside a
    function (or lambda) body, an ``except`` handler (an import fallback) or the branch
    of a ``sys.version_info`` test that this interpreter does not take."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        taken = _version_test(node)
        if taken is not None:
            stack.extend(node.body if taken else node.orelse)
            continue
        stack.extend(child for child in ast.iter_child_nodes(node)
                     if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                               ast.ExceptHandler)))


def imports_of(module: Module, existing: Set[str],
               load_time: bool = False) -> Iterable[Tuple[int, str, Optional[str]]]:
    """Yield ``(line, imported module, private name or None)`` for every import in ``module``
    (with ``load_time``, only those that run when the module is loaded).

    ``existing`` is the set of module and package names of the package; it decides whether
    ``from pkg import name`` imports the submodule ``pkg.name`` or a name from ``pkg``.
    """
    tree = ast.parse(module.source, filename=module.path)
    for node in (_load_time_nodes(tree) if load_time else ast.walk(tree)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            source = (_resolve_relative(module, node.level, node.module) if node.level
                      else node.module)
            for alias in node.names:
                private = alias.name if _is_private(alias.name) and source != module.name else None
                sub = f"{source}.{alias.name}"
                if alias.name != "*" and sub in existing:
                    yield node.lineno, sub, private
                else:
                    yield node.lineno, source, private


# ---------------------------------------------------------------------------
# The checker
# ---------------------------------------------------------------------------
def known_names(modules: Iterable[Module]) -> Set[str]:
    """Every module name and every package (directory) name that holds one."""
    names = set()
    for m in modules:
        parts = m.name.split(".")
        names.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return names


def check_modules(modules: List[Module]) -> List[Violation]:
    existing = known_names(modules)
    violations = []
    for module in modules:
        importer = layer_of(module.name)
        if importer is None:
            violations.append(Violation(
                module.path, 1, "unassigned",
                f"unassigned module {module.name}: say which layer it belongs to "
                "(core, federation, horizontal common, algorithm or application)"))
        for line, target, private in imports_of(module, existing):
            def report(rule, message):
                violations.append(Violation(module.path, line, rule, message))

            if private is not None:
                report("private", f"{module.name} imports the private name {private!r} "
                                  f"({target})")
            if _within(target, "mpi4py") and module.name != MPI_MODULE:
                report("mpi4py", f"{module.name} imports {target}; only {MPI_MODULE} may "
                                 "import mpi4py")
            if not _within(target, PACKAGE) or importer is None:
                continue
            if target not in existing:
                report("missing", f"{module.name} imports {target}, which is not a module "
                                  f"of the package")
                continue
            imported = layer_of(target)
            if imported is None:
                report("layer", f"{module.name} ({importer}) imports the unassigned "
                                f"module {target}")
            elif not may_import(importer, imported):
                report("layer", f"{module.name} ({importer}) may not import {target} "
                                f"({imported})")
    return sorted(set(violations), key=lambda v: (v.path, v.line, v.rule, v.message))


def builtin_declarations(modules: List[Module]) -> List[str]:
    """The registry's ``BUILTIN`` tuple: the modules that declare the built-in modes."""
    registry = next(m for m in modules if m.name == REGISTRY_MODULE)
    for node in ast.parse(registry.source, filename=registry.path).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "BUILTIN"
                                                for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{registry.path} has no BUILTIN tuple")


def check_cheap_imports(modules: List[Module], roots: Iterable[str]) -> List[Violation]:
    """Rule ``cheap``: importing any of ``roots`` loads only the standard library and
    ``fedforest`` modules (followed through their load-time imports and parent packages)."""
    existing = known_names(modules)
    by_name = {m.name: m for m in modules}
    violations = []
    via = {}                      # module -> the root whose import loads it
    todo = []

    def reach(name, root):
        parts = name.split(".")
        for i in range(1, len(parts) + 1):   # a module's parent packages load first
            n = ".".join(parts[:i])
            if n in by_name and n not in via:
                via[n] = root
                todo.append(n)

    for root in roots:
        reach(root, root)
    while todo:
        module = by_name[todo.pop()]
        for line, target, _ in imports_of(module, existing, load_time=True):
            if _within(target, PACKAGE):
                reach(target, via[module.name])
            elif target.split(".")[0] not in sys.stdlib_module_names:
                violations.append(Violation(
                    module.path, line, "cheap",
                    f"{module.name} imports {target} when it is loaded (importing {via[module.name]} "
                    "loads it); a declaration imports only the standard library and fedforest's "
                    "cheap modules: import it inside a function or in the implementation module"))
    return sorted(set(violations), key=lambda v: (v.path, v.line, v.rule, v.message))


def package_modules(root: str = ROOT, package: str = PACKAGE) -> List[Module]:
    """Every ``.py`` file under ``root/package`` as a Module (nothing is imported)."""
    modules = []
    top = os.path.join(root, package)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        rel = os.path.relpath(dirpath, root)
        parts = rel.split(os.sep)
        for filename in sorted(filenames):
            if not filename.endswith(".py"):
                continue
            path = os.path.join(dirpath, filename)
            stem = filename[:-3]
            is_package = stem == "__init__"
            name = ".".join(parts if is_package else parts + [stem])
            with open(path, encoding="utf-8") as fh:
                source = fh.read()
            modules.append(Module(name, os.path.relpath(path, root).replace(os.sep, "/"),
                                  source, is_package))
    return modules


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------
def test_architecture_layers_are_respected():
    modules = package_modules()
    assert len(modules) > 20, f"only {len(modules)} modules found under {PACKAGE}/"
    violations = check_modules(modules)
    assert not violations, (f"{len(violations)} architecture violation(s):\n"
                            + "\n".join(str(v) for v in violations))


def _fake(files: Dict[str, str]) -> List[Module]:
    modules = []
    for path, source in files.items():
        parts = path[:-3].split("/")
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules.append(Module(name, path, source, is_package))
    return modules


FAKE_BASE = {
    "fedforest/__init__.py": "from .errors import InputError\n__version__ = '1'\n",
    "fedforest/cli.py": "from .vertical import master\nfrom .horizontal import baselines\n",
    "fedforest/errors.py": "class InputError(Exception):\n    pass\n",
    "fedforest/constraints.py": "from .errors import InputError\n",
    "fedforest/transport/__init__.py": "",
    "fedforest/transport/mpi.py": "from mpi4py import MPI\nfrom . import base\n",
    "fedforest/transport/base.py": "import numpy\n",
    "fedforest/tree/__init__.py": "",
    "fedforest/tree/rules.py": "def _entropy():\n    pass\n",
    "fedforest/tree/kernels.py": "from .rules import Rule\n",
    "fedforest/data/io.py": "from ..errors import InputError\n",
    "fedforest/federation/__init__.py": "from .registry import REGISTRY\n",
    "fedforest/federation/registry.py": "from ..tree import kernels\nfrom ..data.io import read\n",
    "fedforest/federation/mode.py": "from dataclasses import dataclass\nfrom ..errors import InputError\n",
    "fedforest/horizontal/__init__.py": "from .setup import Client\n",
    "fedforest/horizontal/setup.py": (
        "from ..federation import registry\nfrom ..tree import rules\nfrom .declare import tree_params\n"),
    "fedforest/horizontal/declare.py": "from ..constraints import Interval\nfrom ..federation.mode import Param\n",
    "fedforest/horizontal/baselines/__init__.py": (
        "from ..declare import tree_params\nfrom ...federation.mode import Mode\n"),
    "fedforest/horizontal/baselines/roles.py": (
        "from .. import setup\nfrom fedforest.horizontal import Client\n"
        "from ...federation.registry import REGISTRY\nfrom . import PARAMS\n"),
    "fedforest/horizontal/fedxgbllr/__init__.py": "from .roles import run\n",
    "fedforest/horizontal/fedxgbllr/roles.py": (
        "from . import cnn\nfrom ..setup import Client\nfrom ...tree.kernels import njit\n"),
    "fedforest/horizontal/fedxgbllr/cnn.py": "import numpy as np\n",
    "fedforest/vertical/__init__.py": "from .master import train\n",
    "fedforest/vertical/master.py": "from . import party\nfrom ..crypto import paillier\n",
    "fedforest/vertical/party.py": "from ..federation import registry\n",
    "fedforest/crypto/paillier.py": "import phe\n",
}


def test_architecture_checker_accepts_a_clean_package():
    assert check_modules(_fake(FAKE_BASE)) == []


def _found(extra: Dict[str, str]) -> Set[Tuple[str, int, str]]:
    return {(v.path, v.line, v.rule) for v in check_modules(_fake({**FAKE_BASE, **extra}))}


def test_architecture_checker_reports_each_kind_of_violation():
    cases = [
        # core importing an algorithm, federation and the application layer
        ({"fedforest/tree/fake.py": "import os\nfrom ..vertical import master\n"},
         ("fedforest/tree/fake.py", 2, "layer")),
        ({"fedforest/data/fake.py": "import fedforest.federation.registry\n"},
         ("fedforest/data/fake.py", 1, "layer")),
        ({"fedforest/crypto/fake.py": "from .. import __version__\n"},
         ("fedforest/crypto/fake.py", 1, "layer")),
        # federation importing horizontal common; horizontal common importing an algorithm
        ({"fedforest/federation/fake.py": "from ..horizontal.setup import x\n"},
         ("fedforest/federation/fake.py", 1, "layer")),
        ({"fedforest/horizontal/setup.py": "def f():\n    from .baselines import run\n"},
         ("fedforest/horizontal/setup.py", 2, "layer")),
        ({"fedforest/horizontal/declare.py": "from .baselines import roles\n"},
         ("fedforest/horizontal/declare.py", 1, "layer")),
        # an algorithm importing another algorithm: ``from pkg import submodule`` form,
        # inside a function, from a sub-package, and the vertical one importing horizontal
        ({"fedforest/horizontal/fedga.py": "from fedforest.horizontal import baselines\n"},
         ("fedforest/horizontal/fedga.py", 1, "layer")),
        ({"fedforest/horizontal/efdt.py": "def f():\n    from .fedxgbllr import roles\n"},
         ("fedforest/horizontal/efdt.py", 2, "layer")),
        ({"fedforest/horizontal/fedxgbllr/cnn.py": "from .. import baselines\n"},
         ("fedforest/horizontal/fedxgbllr/cnn.py", 1, "layer")),
        ({"fedforest/horizontal/fedxgbllr/roles.py": "from ..baselines import PARAMS\n"},
         ("fedforest/horizontal/fedxgbllr/roles.py", 1, "layer")),
        ({"fedforest/vertical/party.py": "from ..horizontal import setup\n"},
         ("fedforest/vertical/party.py", 1, "layer")),
        # the vertical algorithms: one importing the other; the shared core importing one
        ({"fedforest/vertical/boost/__init__.py": "", "fedforest/vertical/boost/roles.py": "",
          "fedforest/vertical/forest/__init__.py": "", "fedforest/vertical/forest/master.py":
              "from ..boost import roles\n"},
         ("fedforest/vertical/forest/master.py", 1, "layer")),
        ({"fedforest/vertical/forest/__init__.py": "", "fedforest/vertical/forest/output.py": "",
          "fedforest/vertical/job_master.py": "import os\nfrom .forest import output\n"},
         ("fedforest/vertical/job_master.py", 2, "layer")),
        # private names and private submodules of another module
        ({"fedforest/tree/kernels.py": "from .rules import _entropy\n"},
         ("fedforest/tree/kernels.py", 1, "private")),
        ({"fedforest/tree/_impl.py": "", "fedforest/tree/predict.py": "from . import _impl\n"},
         ("fedforest/tree/predict.py", 1, "private")),
        ({"fedforest/vertical/master.py": "def f():\n    from fedforest.tree.rules import _entropy\n"},
         ("fedforest/vertical/master.py", 2, "private")),
        # mpi4py outside fedforest.transport.mpi (even in the application layer)
        ({"fedforest/transport/runner.py": "def f():\n    from mpi4py import MPI\n"},
         ("fedforest/transport/runner.py", 2, "mpi4py")),
        ({"fedforest/cli.py": "import mpi4py.futures\n"}, ("fedforest/cli.py", 1, "mpi4py")),
        # a top-level module that fits no layer; importing it; importing a missing module
        ({"fedforest/helpers.py": "import os\n"}, ("fedforest/helpers.py", 1, "unassigned")),
        ({"fedforest/helpers.py": "", "fedforest/tree/fake.py": "from ..helpers import f\n"},
         ("fedforest/tree/fake.py", 1, "layer")),
        ({"fedforest/tree/fake.py": "from ..model_io import read\n"},
         ("fedforest/tree/fake.py", 1, "missing")),
    ]
    missed = []
    for extra, expected in cases:
        found = _found(extra)
        if expected not in found:
            missed.append(f"{expected} not reported for {extra}; found {sorted(found)}")
    assert not missed, "\n".join(missed)


def test_architecture_checker_resolves_imports():
    modules = _fake(FAKE_BASE)
    existing = known_names(modules)
    by_name = {m.name: m for m in modules}

    def targets(name, source, is_package=False):
        return [t for _, t, _ in imports_of(Module(name, "x.py", source, is_package), existing)]

    # ``from pkg import name``: the submodule if it exists, else the package
    assert targets("fedforest.horizontal.baselines.roles", "from .. import setup") == \
        ["fedforest.horizontal.setup"]
    assert targets("fedforest.horizontal.baselines.roles", "from fedforest.horizontal import Client") == \
        ["fedforest.horizontal"]
    assert targets("fedforest.horizontal.baselines.roles", "from . import PARAMS") == \
        ["fedforest.horizontal.baselines"]
    assert targets("fedforest.horizontal.baselines", "from . import roles", is_package=True) == \
        ["fedforest.horizontal.baselines.roles"]
    # relative imports from a module, a package __init__ and a nested package
    assert targets("fedforest.tree.kernels", "from ..data import io") == ["fedforest.data.io"]
    assert targets("fedforest.vertical", "from .master import train", is_package=True) == \
        ["fedforest.vertical.master"]
    assert targets("fedforest.horizontal.fedxgbllr.roles", "from ...tree.kernels import njit") == \
        ["fedforest.tree.kernels"]
    assert targets("fedforest.horizontal.fedxgbllr.roles", "from .. import setup") == \
        ["fedforest.horizontal.setup"]
    # layers
    assert layer_of("fedforest.horizontal.efdt") == Layer(ALGORITHM, "fedforest.horizontal.efdt")
    assert layer_of("fedforest.horizontal.fedxgbllr.cnn") == \
        Layer(ALGORITHM, "fedforest.horizontal.fedxgbllr")
    assert layer_of("fedforest.horizontal") == Layer(HORIZONTAL_COMMON)
    assert layer_of("fedforest.horizontal.declare") == Layer(HORIZONTAL_COMMON)
    assert layer_of("fedforest.horizontal.model_files") == Layer(HORIZONTAL_COMMON)
    assert layer_of("fedforest.horizontal.baselines.roles") == \
        Layer(ALGORITHM, "fedforest.horizontal.baselines")
    assert layer_of("fedforest.helpers") is None
    assert "fedforest.horizontal.fedxgbllr.cnn" in by_name


# ---------------------------------------------------------------------------
# Cheap declarations
# ---------------------------------------------------------------------------
def test_declarations_and_the_command_line_import_only_cheap_modules():
    modules = package_modules()
    declarations = builtin_declarations(modules)
    assert len(declarations) >= 7, declarations
    violations = check_cheap_imports(modules, [REGISTRY_MODULE, *COMMAND_LINE, *declarations])
    assert not violations, (f"{len(violations)} import(s) that make declarations slow:\n"
                            + "\n".join(str(v) for v in violations))


def test_cheap_import_checker_follows_load_time_imports():
    def found(extra):
        return {(v.path, v.line, v.rule)
                for v in check_cheap_imports(_fake({**FAKE_BASE, **extra}), ["fedforest.horizontal.baselines"])}

    assert found({}) == set()
    declaration = "fedforest/horizontal/baselines/__init__.py"
    # directly, through a fedforest module, through a parent package, in a class body
    assert found({declaration: "import os\nimport numpy as np\n"}) == {(declaration, 2, "cheap")}
    assert found({"fedforest/horizontal/declare.py": "from ..transport import base\n"}) == \
        {("fedforest/transport/base.py", 1, "cheap")}
    assert found({"fedforest/horizontal/__init__.py": "from pandas import DataFrame\n"}) == \
        {("fedforest/horizontal/__init__.py", 1, "cheap")}
    assert found({declaration: "class A:\n    import numba\n"}) == {(declaration, 2, "cheap")}
    # not at load time: inside a function, a fallback in an except handler; the implementation
    assert found({declaration: "def f():\n    import numpy\n"}) == set()
    assert found({declaration: "try:\n    import tomllib\nexcept ImportError:\n    import tomli\n"}) == set()
    assert found({declaration: "import sys\nif sys.version_info >= (3,):\n    import tomllib\n"
                               "else:\n    import tomli\n"}) == set()
    assert found({declaration: "import sys\nif sys.version_info < (3,):\n    import tomllib\n"
                               "else:\n    import tomli\n"}) == {(declaration, 5, "cheap")}
    assert found({"fedforest/horizontal/baselines/roles.py": "import numpy\n"}) == set()


def _fresh_python(*args):
    """Run a fresh interpreter in the project root; its stdout and stderr."""
    out = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout, out.stderr


def test_loading_every_builtin_mode_imports_no_heavy_package():
    stdout, _ = _fresh_python("-c", (
        "import sys\n"
        "from fedforest.federation.registry import REGISTRY\n"
        "modes = REGISTRY.modes()\n"
        f"print(len(modes), *[m for m in {HEAVY!r} if m in sys.modules])\n"))
    n_modes, *loaded = stdout.split()
    assert int(n_modes) >= 7
    assert loaded == []


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["predict", "--help"], ["modes"],
                                  ["evaluate", "--help"]])
def test_light_commands_import_no_heavy_package(argv):
    _, stderr = _fresh_python("-X", "importtime", "-m", PACKAGE, *argv)
    imported = {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
                if line.startswith("import time:") and line.count("|") == 2}
    assert f"{PACKAGE}.cli" in imported
    assert sorted(m for m in imported if m.split(".")[0] in HEAVY) == []
