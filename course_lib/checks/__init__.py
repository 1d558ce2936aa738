"""What the notebooks' test cells call: a student's object checked against the reference.

Every check either returns quietly or raises ``CheckFailed`` whose message says what was
checked, what was expected, what came back and a hint, because that message is the feedback a
student reads. A check that can only run on a GPU raises ``NeedsGPU``; the grader reports it as
"skipped: needs a GPU" instead of a failure.

Shared helpers for the lab check modules:

- ``call_student(function, name, *args)`` calls a student's function (on copies of the arguments)
  and turns a crash into a CheckFailed that names the call and the error;
- ``one_thread()`` runs torch on one thread inside a ``with`` block, for checks made of many tiny
  operations;
- ``fail``, ``check``, ``expect_equal``, ``expect_close`` raise the house-format feedback;
- ``require_own_implementation`` refuses an answer that re-exports the course's reference, or
  wraps it: a friendly hint in the student kit, and when grading the grader asks the student's
  kernel where the code behind the answer comes from (``origin_facts``: the submission or the
  library) and judges the answer here;
- ``hidden_check()`` is True while a hidden test runs (when grading): ``fail`` then leaves out what
  the student's code returned, and ``call_student`` the message of its exception, since what the
  student's code puts there may be the hidden inputs it was given;
- ``make(factory, *args)`` builds a platform object *next to the student's code*: locally it is
  ``factory(*args)``; when grading, the student's kernel builds it from its own edition of the
  library and the check gets a handle (see course_lib.runner.channel). Use it for anything the
  student's code will hold or call (a model for their generate loop, an engine around their parts);
- ``share(obj, *methods)`` lends a check's own object to the student's code with only the named
  methods callable (a model whose forward the check counts, say): locally the object itself;
  when grading, the student's kernel gets a handle whose calls run here, in the grader, so what the
  check measures through it cannot be forged by the student's code;
- ``student_url(url)`` is the address at which the student's code reaches a server the check runs
  on 127.0.0.1 (when grading, the kernel has a network of its own; this opens a relay for that one
  port and nothing else);
- ``is_remote(obj)`` tells a handle to an object in the student's kernel from a local object;
- ``smollm2()`` is SmolLM2-135M-Instruct and its tokenizer, loaded once per process (test cells
  take the model from here, never from a notebook variable).

How checks run when a notebook is graded: the test cell runs in the grader's process, with the
student's names bound to handles of the objects in the student's kernel. Calling a handle runs the
student's code in the kernel; arguments and results cross as plain data (None, bools, numbers,
strings, bytes, lists, tuples, dicts, sets, tensors, numpy arrays, course_lib enums) or as handles
to the student's objects. So a check must not test a student object's class (``isinstance`` on a
handle is False), must not expect a list it read from a student object to stay live, and must pass
the student's code only plain data, handles it got from the student, or objects built with ``make``.

The checks for each concept live in ``course_lib.checks.<concept>`` (e.g. ``tokenization``,
``paging``); a notebook imports the one it needs, usually as ``checks``.
"""

from __future__ import annotations

import copy
import math
import re
import reprlib
import types
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable

__all__ = [
    "CheckFailed",
    "DEFAULT_CRASH_HINT",
    "NeedsGPU",
    "answer_of",
    "call_methods",
    "call_student",
    "check",
    "expect_equal",
    "expect_close",
    "fail",
    "attributes",
    "hidden_check",
    "origin_facts",
    "is_remote",
    "type_name",
    "make",
    "share",
    "smollm2",
    "student_url",
    "one_thread",
    "where_it_raised",
    "require_gpu",
    "require_own_implementation",
    "short_repr",
]

_repr = reprlib.Repr()
_repr.maxstring = 120
_repr.maxother = 120
_repr.maxlist = _repr.maxtuple = 12
_repr.maxdict = 8


def short_repr(value: Any) -> str:
    """A repr that stays readable in feedback (long lists and strings are elided)."""
    return _repr.repr(value)


class CheckFailed(AssertionError):
    """A student's answer did not match the reference. The message is the feedback."""


class NeedsGPU(Exception):
    """Raised by a check that can only run on a CUDA GPU; graders report it as skipped."""


# Set by the grader while the hidden tests of a test cell run.
_HIDDEN_CHECK: ContextVar[bool] = ContextVar("course_hidden_check", default=False)
HIDDEN_VALUE = "(not shown for a hidden check)"


def hidden_check() -> bool:
    """True while the grader runs a test cell's hidden tests (see the module docstring)."""
    return _HIDDEN_CHECK.get()


def fail(what: str, *, expected: Any = None, got: Any = None, hint: str | None = None,
         show_values: bool = True) -> None:
    """Raise CheckFailed with the house format: what, expected, got, hint (got left out in a hidden check)."""
    lines = [what]
    if show_values:
        lines.append(f"  expected: {short_repr(expected)}")
        lines.append(f"  got:      {HIDDEN_VALUE if hidden_check() else short_repr(got)}")
    if hint:
        lines.append(f"  hint: {hint}")
    raise CheckFailed("\n".join(lines))


def check(condition: bool, what: str, *, hint: str | None = None) -> None:
    """Raise CheckFailed with ``what`` (and the hint) unless ``condition`` holds."""
    if not condition:
        fail(what, hint=hint, show_values=False)


def expect_equal(got: Any, expected: Any, what: str, *, hint: str | None = None) -> None:
    """Fail unless ``got == expected`` (with the values shown)."""
    try:
        equal = bool(got == expected)
    except Exception:  # e.g. comparing a tensor with a list: not equal, say so clearly
        equal = False
    if not equal:
        fail(what, expected=expected, got=got, hint=hint)


def expect_close(got: float, expected: float, what: str, *, rel: float = 1e-6, abs_: float = 0.0,
                 hint: str | None = None) -> None:
    """Fail unless ``got`` is a number within the given relative/absolute tolerance of ``expected``."""
    try:
        ok = math.isclose(float(got), float(expected), rel_tol=rel, abs_tol=abs_)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        fail(f"{what} (tolerance: relative {rel:g}, absolute {abs_:g})", expected=expected, got=got, hint=hint)


DEFAULT_CRASH_HINT = "look at the line named under where, and at what your code gave it there."

# Where the frames of a notebook's own code come from: a cell run by ipykernel (or an older IPython),
# or an earlier chapter's answer cell run by course_lib.chapters.answers_from.
_NOTEBOOK_FILE = re.compile(r"(?:/ipykernel_\d+/\d+\.py|<ipython-input-[^>]*>|<[^<>]*\.ipynb: answer cell '[^']*'>)$")
_FRAME_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>\S+)\n(?P<code>[^\n]*)',
                         re.MULTILINE)


def where_it_raised(error: BaseException) -> str:
    """One sentence on where in the student's own code ``error`` was raised, for feedback that shows no
    traceback (``course check``, the grader's pages): "It raised in your `encode`, line 7 of its cell:
    `...`". Read from the traceback (the local one, or the one a graded kernel sent along). Not in a
    hidden check: there the traceback is the student's kernel's word, which could carry the hidden inputs."""
    if hidden_check():
        return "(not shown for a hidden check) run the visible tests, and inputs of your own, in JupyterLab."
    frame = _innermost_notebook_frame(error)
    if frame is None:
        return ("It raised outside your notebook's cells (in a library call your answer made): run the test cell in "
                "JupyterLab, where the traceback under it leads from your answer to that call.")
    name, line, code, cell = frame
    where = f"your `{name[:80]}`" if name not in ("<module>", "") else "your cell"
    origin = f" of {cell[:120]}" if cell else " of its cell"
    code = code.strip() if len(code.strip()) <= 160 else code.strip()[:157] + "..."
    return f"It raised in {where}, line {line}{origin}" + (f": `{code}`." if code else ".")


def _innermost_notebook_frame(error: BaseException) -> tuple[str, int, str, str] | None:
    """(function, line, code, which earlier chapter's cell or "") of the innermost frame in notebook code."""
    import traceback

    frames: list[tuple[str, int, str, str]] = []
    remote = getattr(error, "remote_traceback", None)
    if isinstance(remote, str) and remote:
        for match in _FRAME_LINE.finditer(remote):
            frames.append((match["file"], int(match["line"]), match["name"], match["code"]))
    else:
        frames = [(frame.filename, frame.lineno or 0, frame.name, frame.line or "")
                  for frame in traceback.extract_tb(error.__traceback__)]
    for filename, line, name, code in reversed(frames):
        if _NOTEBOOK_FILE.search(filename):
            cell = filename.strip("<>") if filename.startswith("<") and ".ipynb" in filename else ""
            return name, line, code, cell
    return None


def call_student(function: Callable, name: str, /, *args: Any, copy_args: bool = True, show_args: bool = True,
                 hints: Mapping[type[BaseException], str] | None = None, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` for a student's function; a crash becomes readable feedback.

    The function gets deep copies of the arguments (``copy_args=False`` passes them as they are:
    for objects the check must see changed, such as the student's own allocator, or a tensor
    whose in-place change the check looks for). NotImplementedError passes through unchanged
    (it means "not written yet") and so does CheckFailed (already feedback). Any other exception
    becomes a CheckFailed that names the call, ``name(argument reprs)`` or just ``name`` when
    ``show_args=False`` (for a ``name`` that already describes the call), and the error; the
    original exception stays attached (``from error``), so the traceback still points into the
    answer. The hint is ``hints``' entry for the error's type or its nearest base class that has
    one, else DEFAULT_CRASH_HINT.
    """
    arguments, keywords = (copy.deepcopy(args), copy.deepcopy(kwargs)) if copy_args else (args, kwargs)
    try:
        if not copy_args and is_remote(function):  # graded: bring in-place changes back from the kernel
            return function._call_in_place(arguments, keywords)
        return function(*arguments, **keywords)
    except (NotImplementedError, CheckFailed):
        raise
    except Exception as error:
        raise _crash_feedback(error, _describe_call(name, args, kwargs) if show_args else name, hints) from error


def _crash_feedback(error: Exception, call: str, hints: Mapping[type[BaseException], str] | None) -> CheckFailed:
    message = HIDDEN_VALUE if hidden_check() else error
    return CheckFailed(f"{call} raised {type(error).__name__}: {message}\n  where: {where_it_raised(error)}\n"
                       f"  hint: {_crash_hint(error, hints or {})}")


def answer_of(result: tuple[str, Any], call: str, *, hints: Mapping[type[BaseException], str] | None = None) -> Any:
    """The value of one ``call_methods`` result; an error becomes feedback exactly as in ``call_student``
    (``call`` describes the call; NotImplementedError and CheckFailed pass through)."""
    status, value = result
    if status == "value":
        return value
    if isinstance(value, (NotImplementedError, CheckFailed)):
        raise value
    raise _crash_feedback(value, call, hints) from value


def _describe_call(name: str, args: tuple, kwargs: dict[str, Any]) -> str:
    if hidden_check():   # the arguments are the hidden inputs
        return f"{name}(<the hidden check's inputs>)"
    shown = [short_repr(argument) for argument in args]
    shown += [f"{key}={short_repr(value)}" for key, value in kwargs.items()]
    return f"{name}({', '.join(shown)})"


def _crash_hint(error: Exception, hints: Mapping[type[BaseException], str]) -> str:
    for error_type in type(error).__mro__:  # the most specific type first
        if error_type in hints:
            return hints[error_type]
    return DEFAULT_CRASH_HINT


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread inside the block (the previous count is restored).

    A check made of hundreds of tiny operations (tiled attention, a decode step on a small model)
    gains nothing from threads; on a busy machine each operation waits for torch's thread pool,
    which can make the check ten times slower than on one thread.
    """
    import torch  # here, not at the top: the pure-Python checks need not load torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# Set by the grader while a test cell runs: builds a platform object in the student's kernel.
_PLATFORM_BUILDER: ContextVar[Callable[..., Any] | None] = ContextVar("course_platform_builder", default=None)


def make(factory: Callable, /, *args: Any, **kwargs: Any) -> Any:
    """``factory(*args, **kwargs)`` built where the student's code runs (see the module docstring).

    ``factory`` must be a class or function of ``course_lib`` that the student edition also has
    (a platform part, not a locked reference): the kernel imports it by name.
    """
    builder = _PLATFORM_BUILDER.get()
    if builder is None:
        return factory(*args, **kwargs)
    return builder(factory, args, kwargs)


# Set by the grader while a test cell runs: opens a relay from the kernel's loopback to a check's server.
_URL_SHARER: ContextVar[Callable[[str], str] | None] = ContextVar("course_url_sharer", default=None)


def student_url(url: str) -> str:
    """``url`` (http://127.0.0.1:PORT...) as the student's code can reach it (see the module docstring)."""
    sharer = _URL_SHARER.get()
    return url if sharer is None else sharer(url)


# Set by the grader while a test cell runs: wraps a check's object so the kernel can call the named methods.
_SHARER: ContextVar[Callable[..., Any] | None] = ContextVar("course_sharer", default=None)


def share(obj: Any, /, *methods: str) -> Any:
    """``obj`` for the student's code, with only ``methods`` callable (see the module docstring).

    Use ``"__call__"`` for a callable object. Attributes are not shared: give the student's code
    plain values as arguments instead.
    """
    if not methods:
        raise ValueError("share needs at least one method name, e.g. share(model, '__call__')")
    sharer = _SHARER.get()
    return obj if sharer is None else sharer(obj, methods)


def smollm2():
    """(model, tokenizer): SmolLM2-135M-Instruct in fp32 on the CPU, loaded once per process."""
    from course_lib.model import load_smollm2

    return _cached_smollm2(load_smollm2)


_SMOLLM2: list = []


def _cached_smollm2(loader):
    if not _SMOLLM2:
        _SMOLLM2.append(loader())
    return _SMOLLM2[0]


def call_methods(obj: Any, calls: Sequence[tuple[str, tuple | None]]) -> list[tuple[str, Any]]:
    """Read or call several members of a student's object, in order: ``obj.name(*args)`` for each
    ``(name, args)``, or the attribute ``obj.name`` when ``args`` is None.

    Returns one ``(status, value)`` per call: ``("value", result)``, ``("missing", AttributeError)``
    when the member could not be read, or ``("error", exception)`` when the call raised (the
    exception is returned, not raised, so the check decides what it means). NotImplementedError
    comes back as an error like any other. While a notebook is graded and ``obj`` lives in the
    student's kernel, all the calls travel as one request: a check that reads the whole state
    after every operation (a free count and every block table) costs one round trip, not ten.
    """
    calls = [(str(name), None if args is None else tuple(args)) for name, args in calls]
    if is_remote(obj):
        return object.__getattribute__(obj, "_call_methods")(calls)
    results: list[tuple[str, Any]] = []
    for name, args in calls:
        try:
            member = getattr(obj, name)
        except Exception as error:  # noqa: BLE001 - returned to the check, which decides
            results.append(("missing" if isinstance(error, AttributeError) else "error", error))
            continue
        try:
            results.append(("value", member if args is None else member(*args)))
        except Exception as error:  # noqa: BLE001 - returned to the check, which decides
            results.append(("error", error))
    return results


def is_remote(obj: Any) -> bool:
    """True for a handle to an object in the student's kernel (only while a notebook is graded)."""
    return bool(getattr(type(obj), "__course_remote__", False))


def type_name(obj: Any) -> str:
    """``module.qualname`` of ``obj``'s class, also for a handle to an object in the student's kernel."""
    if is_remote(obj):
        return str(object.__getattribute__(obj, "_info").get("type", ""))
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def attributes(obj: Any) -> dict:
    """``vars(obj)`` (empty when it has none), also for an object in the student's kernel.

    Across the channel the values arrive as plain data or as handles, so a check can look inside a
    student's object without the object leaving the kernel.
    """
    if is_remote(obj):
        try:
            value = object.__getattribute__(obj, "_request")("getattr", "__dict__")
        except Exception:  # noqa: BLE001 - an object without attributes, or one that refuses: nothing to see
            return {}
        return value if isinstance(value, dict) else {}
    return dict(getattr(obj, "__dict__", {}) or {})


def require_gpu(what: str = "this check") -> None:
    """Raise NeedsGPU unless a CUDA device is present."""
    import torch

    if not torch.cuda.is_available():
        raise NeedsGPU(f"skipped: needs a GPU ({what} runs only on a CUDA device)")


def _defined_in_course_lib(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module == "course_lib" or module.startswith("course_lib.")


def require_own_implementation(obj: Callable | type, name: str) -> None:
    """Fail when the student's ``obj`` is (or only wraps) the course's reference implementation.

    Catches ``from course_lib.x import f as my_f``, ``functools.partial`` of a reference, one-line
    wrappers that call a reference function or class (a global name, a closure variable, or an
    attribute of a ``course_lib`` module such as ``tokenizer.merge_pair``), and callable objects or
    classes whose methods do. Reference names are those lab check modules register with
    ``register_reference_names``; other course helpers stay allowed. When grading, ``obj`` is a
    handle: the student's kernel reports where its code comes from (``origin_facts``) and the
    judgement is made here.
    """
    if obj is None:
        fail(f"{name} is None", hint=f"define {name} in the answer cell above and run that cell.",
             show_values=False)
    if is_remote(obj):
        try:
            facts = object.__getattribute__(obj, "_request")("origin")
        except Exception:  # noqa: BLE001 - a kernel that cannot say is judged by its results alone
            return
    else:
        facts = origin_facts(obj)
    _judge_origin(facts, name)


_MAX_UNWRAP = 8


def _unwrapped(obj: Any) -> list[Any]:
    """``obj`` and what it stands for: a partial's function, a bound method's function, a wrapper's
    ``__wrapped__``, a callable object's class."""
    import functools

    found, todo = [], [obj]
    while todo and len(found) < _MAX_UNWRAP:
        current = todo.pop()
        if any(current is seen for seen in found):
            continue
        found.append(current)
        if isinstance(current, functools.partial):
            todo.append(current.func)
        inner = getattr(current, "__func__", None) if isinstance(current, types.MethodType) else None
        if inner is not None:
            todo.append(inner)
        wrapped = current.__dict__.get("__wrapped__") if isinstance(getattr(current, "__dict__", None), dict) else None
        if wrapped is not None:
            todo.append(wrapped)
        if not isinstance(current, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                                    functools.partial, types.ModuleType)) and callable(current):
            todo.append(type(current))
    return found


def _describe_target(target: Any) -> dict:
    if isinstance(target, types.ModuleType):
        return {"kind": "module", "module": str(target.__name__)}
    module = getattr(target, "__module__", None)
    return {"kind": "object", "module": module if isinstance(module, str) else "",
            "name": str(getattr(target, "__name__", "") or "")[:200]}


def origin_facts(obj: Any) -> dict:
    """Where the code behind ``obj`` comes from, as plain data (run in the student's kernel when grading).

    ``library``: ``obj`` (or what it wraps) is defined in course_lib; ``functions``: for each plain
    function it is or holds (a class's methods), the names its code reads and what each one is in
    its globals or closure (a course_lib module, a course_lib object, something else, missing).
    """
    facts: dict[str, Any] = {"library": [], "functions": []}
    functions: list[Any] = []
    for target in _unwrapped(obj):
        if _defined_in_course_lib(target) or (isinstance(target, type) and _defined_in_course_lib(target)):
            facts["library"].append(f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}")
            continue
        if isinstance(target, types.FunctionType):
            functions.append(target)
        elif isinstance(target, type):
            functions.extend(member for member in vars(target).values() if isinstance(member, types.FunctionType))
    for function in functions[:64]:
        code = function.__code__
        namespace = dict(function.__globals__)
        for free_name, cell in zip(code.co_freevars, function.__closure__ or ()):
            try:
                namespace[free_name] = cell.cell_contents
            except ValueError:  # a closure variable not assigned yet
                continue
        references = {}
        for referenced in sorted(_names_in_code(code) | set(code.co_freevars))[:500]:
            if referenced not in namespace:
                references[referenced] = {"kind": "missing"}
                continue
            target = namespace[referenced]
            if isinstance(target, types.ModuleType) or _defined_in_course_lib(target):
                references[referenced] = _describe_target(target)
            else:
                references[referenced] = {"kind": "other"}
        facts["functions"].append({"name": str(function.__qualname__)[:200], "references": references})
    return facts


def _judge_origin(facts: Any, name: str) -> None:
    """Fail for an answer whose origin facts show the course's reference behind it."""
    if not isinstance(facts, dict):
        return
    library = [str(item) for item in facts.get("library") or [] if isinstance(item, str)]
    if library:
        fail(f"{name} is the course's reference implementation ({library[0][:200]}), not your own code.",
             hint="write the function yourself in the answer cell; re-exporting the reference earns no points.",
             show_values=False)
    hint = "write the logic yourself; calling the reference earns no points."
    for function in facts.get("functions") or []:
        references = function.get("references") if isinstance(function, dict) else None
        if not isinstance(references, dict):
            continue
        uses_course_module = False
        for referenced, target in references.items():
            if not isinstance(target, dict):
                continue
            module = str(target.get("module", ""))
            if target.get("kind") == "module":
                uses_course_module |= module.startswith("course_lib")
            elif target.get("kind") == "object" and _is_reference_name(module, str(target.get("name", ""))):
                fail(f"{name} calls the course's reference {module}.{target.get('name')}.", hint=hint,
                     show_values=False)
        if not uses_course_module:
            continue
        for referenced in sorted(set(references) & _REFERENCE_NAMES):
            target = references[referenced]
            if not isinstance(target, dict) or target.get("kind") == "missing" or (
                    target.get("kind") == "object" and _is_reference_name(str(target.get("module", "")),
                                                                          str(target.get("name", "")))):
                fail(f"{name} reaches the course's reference {referenced!r} through a course_lib module.", hint=hint,
                     show_values=False)


def _is_reference_name(module: str, name: str) -> bool:
    return (module == "course_lib" or module.startswith("course_lib.")) and name in _REFERENCE_NAMES


def _is_reference(target: object) -> bool:
    return _defined_in_course_lib(target) and getattr(target, "__name__", "") in _REFERENCE_NAMES


def _names_in_code(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names_in_code(const)
    return names


# Reference objects whose use inside an answer means "re-exported the solution". Lab check
# modules register theirs with ``register_reference_names``.
_REFERENCE_NAMES: set[str] = set()


def register_reference_names(*names: str) -> None:
    _REFERENCE_NAMES.update(names)
