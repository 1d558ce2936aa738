"""Sending a function to another process by its source, the way a distributed framework ships a user's code.

A worker process started with ``spawn`` shares nothing with the notebook that started it: not
its variables, not the functions of its other cells. So a function such as a student's
``pack_kv`` travels as text, and the worker rebuilds it:

- ``function_source(function)`` reads the *definitions* of the cell (or file) that defines the
  function: its import statements, its functions and classes, and its constants (``NAME =`` a
  literal). Other statements of that cell (a ``print``, a quick try on a notebook variable) stay
  home. A helper defined in the same cell travels with the function; a helper defined in another
  cell does not, and the worker reports it at once (see ``load_function`` and ``guarded``).
- ``load_function(name, source)`` runs that text in a fresh namespace (``torch`` and ``math``
  are already imported there) and returns the function.
- ``shipped_copy(function)`` does both in this process: the function exactly as a worker gets it.
  Checks call it (through ``checks.make``, in the student's kernel) to test what the experiment
  will run, not only what the notebook holds.

Every failure is a ``ShippingError`` that names the function and says what to change.
"""

from __future__ import annotations

import ast
import functools
import linecache
import textwrap
from collections.abc import Callable

__all__ = ["MissingName", "ShippingError", "function_source", "guarded", "load_function", "shipped_copy"]

_HOW_FUNCTIONS_TRAVEL = ("functions reach the workers by their source: a worker runs the imports and definitions "
                         "(functions, classes, constants) of the cell that defines {name}, and nothing else of the "
                         "notebook, so whatever {name} uses must be defined or imported in that same cell")


class ShippingError(RuntimeError):
    """A function could not be sent to a worker, or failed there; the message says why and what to do."""


class MissingName(ShippingError):
    """A shipped function used a name its cell does not define (a helper left in another cell)."""


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


def function_source(function: Callable) -> tuple[str, str]:
    """(name, source): the definitions of the cell or file that defines ``function``, to run in a worker.

    Raises ShippingError when the function's source cannot be read (a lambda, a built-in, a
    function made by ``exec`` without a file) or when its cell does not define it at the top level.
    """
    name = getattr(function, "__name__", None)
    code = getattr(function, "__code__", None)
    if not isinstance(name, str) or code is None or name == "<lambda>":
        raise ShippingError(f"cannot send {function!r} to a worker: it must be a function defined with def "
                            f"(its source is what travels)")
    lines = linecache.getlines(code.co_filename, getattr(function, "__globals__", None))
    if not lines:
        raise ShippingError(f"cannot read the source of {name} to send it to the workers (its file "
                            f"{code.co_filename!r} is not readable); define it in a notebook cell or a .py file")
    text = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        raise ShippingError(f"the cell that defines {name} does not parse as Python: {error}") from None
    kept = [node for node in tree.body if _kept(node)]
    defines = any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name for node in kept)
    if not defines:
        raise ShippingError(f"{name} must be defined with def at the top level of its cell to be sent to the "
                            f"workers (" + _HOW_FUNCTIONS_TRAVEL.format(name=name) + ")")
    text_lines = text.splitlines()
    pieces = []
    for node in kept:
        first = min([node.lineno] + [decorator.lineno for decorator in getattr(node, "decorator_list", [])])
        pieces.append("\n".join(text_lines[first - 1:node.end_lineno]))
    return name, "\n\n".join(pieces) + "\n"


def load_function(name: str, source: str) -> Callable:
    """Run ``source`` in a fresh namespace and return its function ``name`` (ShippingError if that fails)."""
    import math

    import torch

    namespace = {"torch": torch, "math": math, "__name__": f"shipped_{name}", "__builtins__": __builtins__}
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
                raise MissingName(f"{message} (" + _HOW_FUNCTIONS_TRAVEL.format(name=name) + ")") from error
            raise ShippingError(message) from error

    return call
