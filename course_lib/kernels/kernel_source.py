"""The source text of Triton kernels, taken from code that is read, never run: what a GPU compile gets.

Compiling a kernel for a GPU needs its source and the names it reads: other ``@triton.jit`` functions
and module-level constants. ``kernel_module`` takes them from Python source text (a notebook's code
cells in the order they ran, or a library module's file) and writes one small module that holds
only those definitions:

- each ``@triton.jit`` function, the last top-level definition of its name (a later cell that
  defines the name again wins, as it does in a kernel), its decorators removed;
- each module-level constant a kernel reads, when its value is a plain number, string or
  ``tl.constexpr(...)`` of one (math on such values and ``math.*`` allowed); any other value is
  left out, so the compiler reports the name as it would report a global it cannot use.

Nothing in that module runs code of its author when it is executed: annotations are postponed
(``from __future__ import annotations``), parameter defaults must be plain numbers, and constants
are literals. Kernel bodies are only ever read by Triton's compiler, which turns them into GPU
code, and ``kernel_module`` refuses bodies that could reach past Triton's language into Python
itself: names starting with an underscore, Python's introspection and execution builtins
(``getattr``, ``eval``, ``open``...), and attribute paths that lead from ``tl``, ``triton`` or
``math`` into any module but ``math`` and ``triton.language``. This matters when the source is a
student's: the compile of their kernel runs in a sandbox, and this keeps what runs there to the
compiler. Every module here is standard library; it imports ``triton`` only to resolve attribute
paths.
"""

from __future__ import annotations

import ast
import builtins
import re
import textwrap
import types
from dataclasses import dataclass
from typing import Iterable, Sequence

__all__ = ["KernelModule", "KernelSourceError", "kernel_module", "source_of_objects"]

MODULE_NAMES = {"tl": "triton.language", "triton": "triton", "math": "math"}
"""Names a kernel module may read without defining them, and the modules they stand for."""

KERNEL_BUILTINS = frozenset({"range", "min", "max", "len", "int", "float", "bool", "abs", "print", "isinstance",
                             "tuple", "list", "zip", "enumerate", "round", "pow", "divmod", "reversed", "slice",
                             "True", "False", "None"})
"""Python builtins that Triton's compiler evaluates inside a kernel (on constants) or maps to GPU code."""

EXCEPTIONS = frozenset(name for name in dir(builtins) if isinstance(getattr(builtins, name), type)
                       and issubclass(getattr(builtins, name), BaseException))
"""Exception classes: a kernel may name one (the release's placeholder raises NotImplementedError); the
compiler refuses ``raise`` itself."""

REFUSED_BUILTINS = frozenset(name for name in dir(builtins) if not name.startswith("_")) - KERNEL_BUILTINS - EXCEPTIONS
PREAMBLE = "from __future__ import annotations\nimport math\nimport triton\nimport triton.language as tl\n"
MAGIC_LINE = re.compile(r"^\s*[%!]")


class KernelSourceError(ValueError):
    """Source that cannot become a kernel module: the message names the kernel and the reason."""


@dataclass(frozen=True)
class KernelModule:
    """A module of kernel definitions: its text, and which of its functions are ``@triton.jit`` kernels."""

    text: str
    kernels: tuple[str, ...]
    constants: tuple[str, ...]
    parameters: dict[str, tuple[str, ...]]   # kernel -> its parameters in order
    constexprs: dict[str, tuple[str, ...]]   # kernel -> the parameters annotated tl.constexpr


@dataclass
class _Definitions:
    """The last top-level binding of each name in the source, in the order the source ran."""

    functions: dict[str, tuple[ast.FunctionDef, str]]   # name -> (node, its source text without decorators)
    constants: dict[str, tuple[ast.stmt, str]]
    shadowed: set[str]                                   # bound last by something else (an import, a class...)


def _parse(source: str, label: str) -> ast.Module | None:
    """The cell's syntax tree, IPython's magics blanked; None when it does not parse (it did not run either)."""
    text = "\n".join("" if MAGIC_LINE.match(line) else line for line in source.splitlines())
    try:
        return ast.parse(text, filename=label)
    except SyntaxError:
        return None


def _is_jit(decorator: ast.expr) -> bool:
    """``@triton.jit``, ``@jit`` or ``@triton.jit(...)``."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Attribute):
        return target.attr == "jit" and isinstance(target.value, ast.Name) and target.value.id == "triton"
    return isinstance(target, ast.Name) and target.id == "jit"


def _collect(sources: Sequence[str]) -> _Definitions:
    found = _Definitions({}, {}, set())
    for index, source in enumerate(sources):
        tree = _parse(source, f"<cell {index + 1}>")
        if tree is None:
            continue
        lines = source.splitlines()
        for node in tree.body:
            for name in _bound_names(node):
                found.functions.pop(name, None)
                found.constants.pop(name, None)
                found.shadowed.add(name)
            if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list):
                found.shadowed.discard(node.name)
                found.functions[node.name] = (node, "\n".join(lines[node.lineno - 1:node.end_lineno]))
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and _constant_target(node) is not None:
                name = _constant_target(node)
                found.shadowed.discard(name)
                found.constants[name] = (node, "\n".join(lines[node.lineno - 1:node.end_lineno]))
    return found


def _bound_names(node: ast.stmt) -> set[str]:
    """Top-level names a statement binds (a def of any kind, a class, an import, an assignment...)."""
    names: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names.add(node.name)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    else:
        for child in ast.walk(node):
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                names.add(child.id)
    return names


def _constant_target(node: ast.Assign | ast.AnnAssign) -> str | None:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if len(targets) == 1 and isinstance(targets[0], ast.Name) and node.value is not None:
        return targets[0].id
    return None


def _is_literal(node: ast.expr) -> bool:
    """A number, string, bool or None; arithmetic on them; ``math.<name>`` and ``math.<f>(...)`` of them;
    ``tl.constexpr(...)`` (or ``triton.language.constexpr(...)``) of one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float, bool, str, type(None)))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _is_literal(node.operand)
    if isinstance(node, ast.BinOp):
        return _is_literal(node.left) and _is_literal(node.right)
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name) and node.value.id == "math" and not node.attr.startswith("_")
    if isinstance(node, ast.Call) and not node.keywords:
        function = ast.unparse(node.func)
        if function in ("tl.constexpr", "triton.language.constexpr") or (
                function.startswith("math.") and function.count(".") == 1 and not function.startswith("math._")):
            return all(_is_literal(argument) for argument in node.args)
    return False


def _local_names(function: ast.FunctionDef) -> set[str]:
    names = {argument.arg for argument in _arguments(function)}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
    return names


def _read_names(function: ast.FunctionDef) -> list[str]:
    """Global names the body reads, in order of first use."""
    local = _local_names(function)
    seen: dict[str, None] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local:
            seen.setdefault(node.id)
    return list(seen)


def _attribute_path(node: ast.Attribute) -> list[str] | None:
    """``["tl", "math", "exp"]`` for ``tl.math.exp``; None when the chain does not start at a name."""
    parts: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    if not isinstance(current, ast.Name):
        return None
    return [current.id, *reversed(parts)]


def _module_allowed(module: types.ModuleType) -> bool:
    name = module.__name__
    return name == "math" or name == "triton.language" or name.startswith("triton.language.")


def _check_module_path(path: list[str], kernel: str, line: int) -> None:
    """Refuse ``tl.core.builtins.exec`` and the like: every module on the path must be Triton's language or math."""
    import importlib

    value: object = importlib.import_module(MODULE_NAMES[path[0]])
    walked = [path[0]]
    for part in path[1:]:
        walked.append(part)
        try:
            value = getattr(value, part)
        except AttributeError:
            return  # the compiler reports the missing name itself
        if isinstance(value, types.ModuleType) and not _module_allowed(value):
            raise KernelSourceError(
                f"{kernel}, line {line}: {'.'.join(walked)} is the module {value.__name__}; a kernel may use "
                "Triton's language (tl.*) and math, nothing else of Python")


def _check_body(function: ast.FunctionDef) -> None:
    """Refuse what could make the compiler run Python instead of translating the kernel (module docstring)."""
    kernel = function.name
    local = _local_names(function)
    for node in ast.walk(function):
        line = getattr(node, "lineno", function.lineno) - function.lineno + 1
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise KernelSourceError(f"{kernel}, line {line}: .{node.attr}: a kernel may not use names that start "
                                    "with an underscore")
        if isinstance(node, ast.Name) and node.id not in local and (
                node.id.startswith("__") or node.id in REFUSED_BUILTINS):
            raise KernelSourceError(f"{kernel}, line {line}: {node.id} is Python, not Triton: a GPU kernel cannot "
                                    "call it")
        if isinstance(node, ast.Attribute):
            path = _attribute_path(node)
            if path and path[0] in MODULE_NAMES and path[0] not in local:
                _check_module_path(path, kernel, line)
    defaults = function.args.defaults + [d for d in function.args.kw_defaults if d is not None]
    for default in defaults:
        if not (isinstance(default, ast.Constant) or (isinstance(default, ast.UnaryOp)
                                                      and isinstance(default.operand, ast.Constant))):
            raise KernelSourceError(f"{kernel}: a parameter's default must be a plain number or string, got "
                                    f"{ast.unparse(default)[:80]}")


def kernel_module(sources: Sequence[str], names: Iterable[str]) -> KernelModule:
    """The kernel module for the kernels ``names``, from ``sources`` read in order (see the module docstring).

    Raises ``KernelSourceError`` when a named kernel has no ``@triton.jit`` definition in the sources,
    or when a kernel it needs reaches past Triton's language.
    """
    found = _collect(sources)
    wanted = list(dict.fromkeys(names))
    kernels: list[str] = []
    constants: list[str] = []
    todo = list(wanted)
    while todo:
        name = todo.pop(0)
        if name in kernels:
            continue
        if name not in found.functions:
            rebound = name in found.shadowed or name in found.constants
            why = ("is bound last by something else than a @triton.jit function" if rebound
                   else "has no @triton.jit definition at the top level of a code cell")
            raise KernelSourceError(f"{name} {why}: the GPU compile reads the kernel's source as you wrote it")
        node, _ = found.functions[name]
        _check_body(node)
        kernels.append(name)
        for read in _read_names(node):
            if read in found.functions and read not in kernels:
                todo.append(read)
            elif read in found.constants and read not in constants and _is_literal(found.constants[read][0].value):
                constants.append(read)
    parts = [PREAMBLE]
    parts += [found.constants[name][1] for name in constants]
    parts += [textwrap.dedent(found.functions[name][1]) for name in kernels]
    parameters = {name: tuple(a.arg for a in _arguments(found.functions[name][0])) for name in kernels}
    constexprs = {name: tuple(a.arg for a in _arguments(found.functions[name][0])
                              if a.annotation is not None and "constexpr" in ast.unparse(a.annotation))
                  for name in kernels}
    return KernelModule("\n\n".join(parts) + "\n", tuple(kernels), tuple(constants), parameters, constexprs)


def _arguments(function: ast.FunctionDef) -> list[ast.arg]:
    arguments = function.args
    return [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]


def source_of_objects(kernels: dict[str, object]) -> list[str]:
    """Source cells for live ``@triton.jit`` objects (the interpreter's or the compiler's), for a local check:
    each kernel's definition, the jit functions and plain constants it reads from its globals.

    A student's own notebook, checked on their own machine: the objects are theirs, so reading their
    source and globals is what they would compile on a GPU.
    """
    import inspect

    cells: list[str] = []
    done: set[str] = set()
    todo = list(kernels.items())
    while todo:
        name, obj = todo.pop(0)
        if name in done:
            continue
        done.add(name)
        function = getattr(obj, "fn", None)
        if not isinstance(function, types.FunctionType):
            continue
        try:
            text = textwrap.dedent(inspect.getsource(function))
        except (OSError, TypeError):
            continue
        tree = _parse(text, name)
        if tree is None or not tree.body or not isinstance(tree.body[0], ast.FunctionDef):
            continue
        node = tree.body[0]
        body = "\n".join(text.splitlines()[node.lineno - 1:])
        if node.name != name:   # an alias (add_kernel = my_kernel): compile it under the name the check asks for
            body = body.replace(f"def {node.name}(", f"def {name}(", 1)
        cells.append(f"@triton.jit\n{body}")
        for read in _read_names(node):
            if read in function.__globals__ and read not in done and read not in MODULE_NAMES:
                value = function.__globals__[read]
                if isinstance(getattr(value, "fn", None), types.FunctionType):
                    todo.append((read, value))
                else:
                    constant = _constant_text(read, value)
                    if constant:
                        cells.append(constant)
                        done.add(read)
    return cells


def _constant_text(name: str, value: object) -> str | None:
    """``NAME = 3`` (or ``NAME = tl.constexpr(3)``) for a plain constant; None for anything else."""
    plain = (int, float, bool, str, type(None))
    if isinstance(value, plain):
        return f"{name} = {value!r}"
    inner = getattr(value, "value", None)
    if type(value).__name__ == "constexpr" and isinstance(inner, plain):
        return f"{name} = tl.constexpr({inner!r})"
    return None
