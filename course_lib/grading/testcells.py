"""Running a notebook's test cells in the grader, against the student's objects in their kernel.

A test cell's code (with its hidden tests) is compiled and run here, in the grader's process,
where the reference implementations and the checks live. Before it runs, every name it reads but
does not define itself is looked up in the student's kernel: an answer function arrives as a
handle (``RemoteObject``) whose calls run the student's code over there; plain values arrive as
copies. ``checks.make`` and ``checks.share`` are pointed at this kernel while the cell runs.

The cell's outputs are what a kernel would have produced: one stdout stream (what the checks
printed here and what the student's code printed there, in order) and, if the cell failed, an
error whose traceback is the student's own (the grader's frames and the test code never appear).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import signal
import threading
import warnings
from typing import Any

from course_lib.checks import _PLATFORM_BUILDER, _SHARER, _URL_SHARER
from course_lib.grading.channel import ChannelClosed, ProtocolError, StudentError
from course_lib.grading.student import CellTimeout, KernelDied, StudentKernel

__all__ = ["free_names", "run_test_cell", "strip_magics"]

GRADER_GRACE_S = 15  # the grader's own code gets this long past the cell's limit before it is stopped


def strip_magics(source: str) -> str:
    """IPython magics and shell escapes (``%matplotlib inline``, ``!ls``) have no meaning in the grader."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def free_names(tree: ast.AST) -> list[str]:
    """Names the code reads but never binds anywhere (assignment, import, def, argument, loop target)."""
    bound: set[str] = set()
    read: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                read.append(node.id)
            else:
                bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
    seen: dict[str, None] = {}
    for name in read:
        if name not in bound and not hasattr(builtins, name):
            seen.setdefault(name)
    return list(seen)


class _Output:
    """One ordered text stream for the cell: the grader's prints and the student's relayed ones."""

    def __init__(self) -> None:
        self.buffer = io.StringIO()

    def write(self, text: str) -> int:
        return self.buffer.write(text)

    def flush(self) -> None:
        pass

    def text(self) -> str:
        return self.buffer.getvalue()


@contextlib.contextmanager
def _alarm(seconds: float):
    """Stop runaway grader-side code (a loop driven by a student's answers) with SIGALRM."""
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def on_alarm(signum, frame):
        raise CellTimeout("the test ran past its time limit")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _error_output(error: BaseException, kernel: StudentKernel, timeout: float) -> dict:
    """The cell's error output: the exception's name and message, and the student's own traceback."""
    if isinstance(error, (ChannelClosed, ProtocolError)):
        error = KernelDied(kernel._death_reason(error))
    if isinstance(error, StudentError) and error.ename == "KeyboardInterrupt" and kernel.timed_out:
        error = CellTimeout()
    if isinstance(error, CellTimeout):
        return {"output_type": "error", "ename": "CellTimeoutError",
                "evalue": f"the cell ran longer than the {timeout:g} s limit and was interrupted", "traceback": []}
    if isinstance(error, KernelDied):
        return {"output_type": "error", "ename": "KernelDied", "evalue": str(error), "traceback": [str(error)]}
    ename = error.ename if isinstance(error, StudentError) else type(error).__name__
    evalue = str(error)
    if isinstance(error, StudentError) and evalue.startswith(f"{ename}: "):
        evalue = evalue[len(ename) + 2:]
    traceback_lines = []
    student_traceback = _student_traceback(error)
    if student_traceback:
        traceback_lines.append(student_traceback)
    traceback_lines.append(f"{ename}: {evalue}")
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": traceback_lines}


def _student_traceback(error: BaseException) -> str:
    """The traceback of the student's code behind ``error`` (the first cause that came from the kernel)."""
    seen = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        remote = getattr(current, "remote_traceback", "")
        if remote:
            return "Traceback in your code:\n" + remote.rstrip()
        current = current.__cause__ or current.__context__
    return ""


def run_test_cell(source: str, kernel: StudentKernel, namespace: dict[str, Any], *, timeout: float,
                  label: str = "test cell") -> list[dict]:
    """Run a test cell's code here against ``kernel``; returns the cell's nbformat outputs.

    ``namespace`` is shared by the notebook's test cells (a name one test cell defines is visible
    to the next, as in a kernel); names it lacks are looked up in the student's kernel.
    """
    output = _Output()
    try:
        tree = ast.parse(strip_magics(source), filename=label)
        code = compile(tree, label, "exec")
    except SyntaxError as error:  # the instructor's test cell: a bug in the course, reported as such
        return [{"output_type": "error", "ename": "SyntaxError", "evalue": f"in the test cell: {error}",
                 "traceback": []}]
    namespace.setdefault("__name__", "__main__")
    namespace.setdefault("__builtins__", builtins)
    kernel.output_sink = output.write
    kernel.set_deadline(timeout)
    builder = _PLATFORM_BUILDER.set(kernel.build)
    sharer = _SHARER.set(kernel.share)
    url_sharer = _URL_SHARER.set(kernel.expose_url)
    outputs: list[dict] = []
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output), \
                warnings.catch_warnings(), _alarm(timeout + GRADER_GRACE_S):
            warnings.simplefilter("default")
            for name in free_names(tree):
                if name in namespace:
                    continue
                try:
                    namespace[name] = kernel.lookup(name)
                except NameError:
                    pass  # the cell will raise NameError itself, where it uses the name
            exec(code, namespace)
    except BaseException as error:  # noqa: BLE001 - every failure of the cell becomes its error output
        if isinstance(error, (KeyboardInterrupt, SystemExit)) and not isinstance(error, CellTimeout):
            raise
        outputs.append(_error_output(error, kernel, timeout))
    finally:
        _PLATFORM_BUILDER.reset(builder)
        _SHARER.reset(sharer)
        _URL_SHARER.reset(url_sharer)
        kernel.output_sink = None
    text = output.text()
    return ([{"output_type": "stream", "name": "stdout", "text": text}] if text else []) + outputs
