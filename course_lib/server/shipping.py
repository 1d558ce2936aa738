"""Sending a function to another process by its source, the way a distributed framework ships a user's code.

A worker process started with ``spawn`` shares nothing with the notebook that started it: not
its variables, not the functions of its other cells. So a function such as a student's
``pack_kv`` travels as text, and the worker rebuilds it. What travels is what the function means
in the notebook, where a helper written in an earlier cell is a global like any other:

- ``function_source(function)`` reads the *definitions* of the cell (or file) that defines the
  function: its import statements, its functions and classes, and its constants (``NAME =`` a
  literal). Other statements of that cell (a ``print``, a quick try on a notebook variable) stay
  home. Then every global name that code reads (found in its bytecode, so local variables and
  attributes do not count) and the cell does not define is looked up in the notebook's namespace
  and travels too, whatever cell defined it: a function or class of the notebook as its own
  source (and, in turn, the globals *it* reads), a module as an import, a library function or
  class as a ``from ... import``, a value as a copy (a literal as written, anything else
  pickled, at most ``MAX_VALUE_BYTES``). A value that cannot be copied to another process (an
  open server, a lock) is refused at once with a ``ShippingError`` that names it. This is what
  cloudpickle does for Dask and Ray, written out as source the worker can show in a traceback.
- ``load_function(name, source)`` runs that text in a fresh namespace (``torch`` and ``math``
  are already imported there) and returns the function.
- ``shipped_copy(function)`` does both in this process: the function exactly as a worker gets it.
  Checks call it (through ``checks.make``, in the student's kernel) to test what the experiment
  will run, not only what the notebook holds.

Every failure is a ``ShippingError`` that names the function and says what to change.
"""

from __future__ import annotations

import ast
import base64
import builtins
import dis
import functools
import linecache
import pickle
import textwrap
import types
from collections.abc import Callable, Iterator

__all__ = ["MAX_VALUE_BYTES", "MissingName", "ShippingError", "function_source", "guarded", "load_function",
           "shipped_copy"]

MAX_VALUE_BYTES = 16 * 2**20
"""The most bytes one notebook value a shipped function reads may take, pickled (a tensor of 4M floats)."""

_PRELOADED = {"torch", "math"}
"""Imported in every worker's namespace before the shipped source runs (see ``load_function``)."""

_HOW_FUNCTIONS_TRAVEL = ("functions reach the workers by their source: a worker runs the imports and definitions "
                         "of the cell that defines {name}, and what {name} reads from the rest of the notebook "
                         "(functions, classes, imports, values) travels with it")


class ShippingError(RuntimeError):
    """A function could not be sent to a worker, or failed there; the message says why and what to do."""


class MissingName(ShippingError):
    """A shipped function used a name that neither its cell nor the notebook defined when it was sent."""


def _kept(node: ast.stmt) -> bool:
    """Definitions travel; statements that do something (calls, loops, prints) stay home."""
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        try:
            ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
        return True
    return False


def _cell_tree(code: types.CodeType, namespace: dict | None, name: str) -> tuple[list[str], ast.Module]:
    """(lines, parsed module) of the cell or file that holds ``code``."""
    lines = linecache.getlines(code.co_filename, namespace)
    if not lines:
        raise ShippingError(f"cannot read the source of {name} to send it to the workers (its file "
                            f"{code.co_filename!r} is not readable); define it in a notebook cell or a .py file")
    text = textwrap.dedent("".join(lines))
    try:
        return text.splitlines(), ast.parse(text)
    except SyntaxError as error:
        raise ShippingError(f"the cell that defines {name} does not parse as Python: {error}") from None


def _node_text(lines: list[str], node: ast.stmt) -> str:
    first = min([node.lineno] + [decorator.lineno for decorator in getattr(node, "decorator_list", [])])
    return "\n".join(lines[first - 1:node.end_lineno])


def _defined_names(nodes: list[ast.stmt]) -> set[str]:
    """Top-level names that ``nodes`` bind: functions, classes, imports (as bound), assigned names."""
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _code_objects(constant)


def _global_reads(source: str) -> set[str]:
    """Names ``source`` reads as globals when it runs (LOAD_GLOBAL, LOAD_NAME), in any function or class."""
    names: set[str] = set()
    for code in _code_objects(compile(source, "<shipped>", "exec")):
        names.update(instruction.argval for instruction in dis.get_instructions(code)
                     if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(instruction.argval, str))
    return names


def _own_cell(function: Callable, name: str) -> tuple[str, set[str]]:
    """(source, names it defines): the definitions of the cell or file that defines ``function``."""
    lines, tree = _cell_tree(function.__code__, getattr(function, "__globals__", None), name)
    kept = [node for node in tree.body if _kept(node)]
    defines = any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name for node in kept)
    if not defines:
        raise ShippingError(f"{name} must be defined with def at the top level of its cell to be sent to the "
                            f"workers (" + _HOW_FUNCTIONS_TRAVEL.format(name=name) + ")")
    return "\n\n".join(_node_text(lines, node) for node in kept) + "\n", _defined_names(kept)


def _definition_source(value: Callable | type, name: str) -> str:
    """The ``def`` or ``class`` statement of a notebook function or class, from the cell that holds it."""
    if isinstance(value, type):
        methods = [member for member in vars(value).values() if isinstance(member, types.FunctionType)]
        if not methods:
            raise ShippingError(f"cannot find the source of the class {name} (it has no methods to locate it by)")
        code, namespace, wanted = methods[0].__code__, methods[0].__globals__, ast.ClassDef
    else:
        code, namespace, wanted = value.__code__, value.__globals__, (ast.FunctionDef, ast.AsyncFunctionDef)
    lines, tree = _cell_tree(code, namespace, name)
    for node in tree.body:
        if isinstance(node, wanted) and node.name == value.__name__:
            return _node_text(lines, node)
    raise ShippingError(f"{name} is not defined at the top level of its cell, so it cannot be sent to a worker")


def _is_literal(value: object) -> bool:
    try:
        return ast.literal_eval(repr(value)) == value and type(ast.literal_eval(repr(value))) is type(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


class _Globals:
    """The notebook globals a shipped function reads, gathered as source: imports, values, definitions."""

    def __init__(self, shipped: str) -> None:
        self.shipped = shipped
        self.imports: dict[str, str] = {}
        self.values: dict[str, str] = {}
        self.definitions: dict[str, str] = {}

    def gather(self, source: str, defined: set[str], namespace: dict) -> None:
        """Add every global ``source`` reads that it does not define, looked up in ``namespace``."""
        for name in sorted(_global_reads(source) - defined - _PRELOADED - set(dir(builtins))):
            if name in self.imports or name in self.values or name in self.definitions or name not in namespace:
                continue  # already gathered, or undefined in the notebook too (a NameError there as well)
            self._add(name, namespace[name], namespace)

    def _add(self, name: str, value: object, namespace: dict) -> None:
        notebook = namespace.get("__name__")
        if isinstance(value, types.ModuleType):
            module = value.__name__
            self.imports[name] = f"import {module}" if module == name else f"import {module} as {name}"
        elif isinstance(value, (types.FunctionType, type)) and getattr(value, "__module__", None) == notebook:
            self.definitions[name] = ""  # placeholder first: a recursive helper must not be gathered twice
            text = _definition_source(value, name)
            if value.__name__ != name:
                text += f"\n{name} = {value.__name__}"
            self.gather(text, {name, value.__name__}, getattr(value, "__globals__", namespace))
            self.definitions[name] = text
        elif (callable(value) and isinstance(getattr(value, "__module__", None), str)
              and "<" not in getattr(value, "__qualname__", "<")):
            qualname = value.__qualname__
            self.imports[name] = (f"from {value.__module__} import {qualname}" if qualname == name
                                  else f"from {value.__module__} import {qualname} as {name}")
        elif _is_literal(value):
            self.values[name] = f"{name} = {value!r}"
        else:
            self.values[name] = f"{name} = _shipped_value({self._pickled(name, value)!r})"

    def _pickled(self, name: str, value: object) -> str:
        try:
            data = pickle.dumps(value)
        except Exception as error:  # noqa: BLE001 - any object may refuse to be pickled, each in its own way
            raise ShippingError(f"{self.shipped} reads the notebook variable {name}, a {type(value).__name__}, which "
                                f"cannot be copied to a worker process ({type(error).__name__}: {error}); pass what "
                                f"it needs as an argument, or compute it inside the function") from None
        if len(data) > MAX_VALUE_BYTES:
            raise ShippingError(f"{self.shipped} reads the notebook variable {name}, a {type(value).__name__} of "
                                f"{len(data) / 2**20:.0f} MiB, more than the {MAX_VALUE_BYTES // 2**20} MiB a "
                                f"value may take to a worker; compute it inside the function instead")
        return base64.b64encode(data).decode("ascii")

    def source(self) -> str:
        blocks = [*self.imports.values(), *self.values.values(), *self.definitions.values()]
        if not blocks:
            return ""
        return "# Read from the notebook's other cells:\n" + "\n\n".join(blocks) + "\n\n# The function's own cell:\n"


def function_source(function: Callable) -> tuple[str, str]:
    """(name, source): the function's cell definitions and the notebook globals they read, to run in a worker.

    Raises ShippingError when the function's source cannot be read (a lambda, a built-in, a
    function made by ``exec`` without a file), when its cell does not define it at the top level,
    or when a notebook value it reads cannot be copied to another process.
    """
    name = getattr(function, "__name__", None)
    code = getattr(function, "__code__", None)
    if not isinstance(name, str) or code is None or name == "<lambda>":
        raise ShippingError(f"cannot send {function!r} to a worker: it must be a function defined with def "
                            f"(its source is what travels)")
    own, defined = _own_cell(function, name)
    found = _Globals(name)
    found.gather(own, defined, getattr(function, "__globals__", {}))
    return name, found.source() + own


def _shipped_value(encoded: str) -> object:
    """A notebook value that ``function_source`` pickled into the shipped source."""
    return pickle.loads(base64.b64decode(encoded))  # noqa: S301 - the sender's own values, in its own worker


def load_function(name: str, source: str) -> Callable:
    """Run ``source`` in a fresh namespace and return its function ``name`` (ShippingError if that fails)."""
    import math

    import torch

    namespace = {"torch": torch, "math": math, "_shipped_value": _shipped_value, "__name__": f"shipped_{name}",
                 "__builtins__": __builtins__}
    filename = f"<{name}, as shipped to a worker>"
    # Registered so a traceback from the worker shows the lines that ran there.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    try:
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the course's own or the student's code
    except Exception as error:
        raise ShippingError(f"the cell that defines {name} failed when a worker ran it: {type(error).__name__}: "
                            f"{error} (" + _HOW_FUNCTIONS_TRAVEL.format(name=name) + ")") from None
    function = namespace.get(name)
    if not callable(function):
        raise ShippingError(f"the source sent for {name} does not define it")
    return function


def shipped_copy(function: Callable) -> Callable:
    """``function`` rebuilt from its source in a fresh namespace: what a worker process will call."""
    return guarded(load_function(*function_source(function)), function.__name__, "a worker")


def guarded(function: Callable, name: str, where: str) -> Callable:
    """``function`` whose exceptions become a ShippingError naming it, where it ran, and how functions travel.

    NotImplementedError (an exercise not written yet) passes through unchanged.
    """

    @functools.wraps(function)
    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except NotImplementedError:
            raise  # not written yet: the caller says so in its own words
        except Exception as error:
            message = f"your {name} raised {type(error).__name__}: {error} in {where}"
            if isinstance(error, NameError):
                raise MissingName(f"{message} (" + _HOW_FUNCTIONS_TRAVEL.format(name=name) + "; this name was not "
                                  "defined in the notebook when the function was sent)") from error
            raise ShippingError(message) from error

    return call
