"""Running a notebook's test cells in the grader, against the student's objects in their kernel.

A test cell's code (with its hidden tests) is compiled and run here, in the grader's process,
where the reference implementations and the checks live. Before it runs, every name it reads but
does not define itself is looked up in the student's kernel: an answer function arrives as a
handle (``RemoteObject``) whose calls run the student's code over there; plain values arrive as
copies. Each test cell looks its names up again, as a notebook's cell would read them: a function
the student defined again in a cell between two test cells is the new one in the second (the
grader once kept the first lookup for the whole notebook, and failed a cell that ``course check``
passed). A name an earlier test cell bound itself stays the test code's. ``checks.make`` and
``checks.share`` are pointed at this kernel while the cell runs.

The cell's outputs are what a kernel would have produced: one stdout stream (what the checks
printed here and what the student's code printed there, in order, its head and tail kept within
the printed-output limit) and, if the cell failed, an error whose traceback is the student's own
(the grader's frames and the test code never appear).

Hidden tests (between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``) call the student's
code with inputs the student must not see, so while they run nothing printed reaches the cell's
output (one line, written whether or not anything was printed, says that output during hidden
checks is not shown), a failing check shows one fixed sentence instead of its message (a check's
message names the call, so the hidden config, and the expected value, so the answer for it: only
an ``assert`` of the test code itself keeps its words), and an error raised there keeps neither its
message, its traceback nor (beyond NotImplementedError and MemoryError) its name when the
student's code made it: what the student's code could put in them is what it was given.
Once a notebook's first hidden region has started, the rest of that cell and of the notebook shows
only what the grader knows (``withhold``): the answer may have kept the hidden inputs to print later.
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

from autograde.grader_limits import cell_cpu_budget, grader_memory_sentence
from autograde.preprocessors import HIDDEN_BEGIN, HIDDEN_END
from autograde.results import GRADER_OUT_OF_MEMORY, student_error_name
from autograde.withhold import WITHHELD_NOTE, HiddenChecks, withhold_error
from course_lib.checks import _HIDDEN_CHECK, _PLATFORM_BUILDER, _SHARER, _URL_SHARER
from course_lib.runner.bounded import HIDDEN_OUTPUT_NOTE, TextKeeper
from course_lib.runner.channel import StudentError, from_kernel
from course_lib.runner.limits import KernelLimits
from course_lib.runner.student import CellTimeout, StudentKernel

__all__ = ["free_names", "mark_hidden_regions", "run_test_cell", "strip_magics"]

HIDDEN_SWITCH = "__course_hidden_checks__"
KERNEL_NAMES = "__course_kernel_names__"   # in a notebook's namespace: the names looked up in the kernel, and what came

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


def mark_hidden_regions(source: str) -> tuple[str, bool]:
    """``source`` with each hidden-test marker replaced by a call that says where hidden tests start
    and end (``__course_hidden_checks__(True)`` / ``(False)``, at the marker's indentation), and whether
    it has any. A marker the code around it makes unusable as a statement turns the whole cell hidden.
    """
    if HIDDEN_BEGIN not in source:
        return source, False
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        indent = line[:len(line) - len(stripped)]
        if stripped.startswith(HIDDEN_BEGIN):
            line = f"{indent}{HIDDEN_SWITCH}(True)"
        elif stripped.startswith(HIDDEN_END):
            line = f"{indent}{HIDDEN_SWITCH}(False)"
        lines.append(line)
    marked = "\n".join(lines)
    try:
        ast.parse(marked)
    except SyntaxError:
        return f"{HIDDEN_SWITCH}(True)\n{source}", True
    return marked, True


class _Output(io.TextIOBase):
    """One ordered text stream for the cell: the grader's prints and the student's relayed ones.

    It stands in for sys.stdout and sys.stderr, so it answers what libraries ask a stream (uvicorn's
    logging asks ``isatty()``; a check's server may log from another thread). It keeps the head and
    tail of what is written (``limit`` bytes). While hidden tests run it keeps nothing but one line
    saying that output during hidden checks is not shown, and once they have started (``withheld``)
    one line saying that later output is not shown either.
    """

    def __init__(self, limit: int, *, withheld: bool = False) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._keeper = TextKeeper(limit)
        self._hidden = False
        self.withheld = False
        self._noted: set[str] = set()
        if withheld:
            self.withhold()

    # The notes are written when hiding starts, whether or not anything is printed then: a note that
    # appeared only when the student's code printed would be a bit the answer sets (print or not).
    def _note(self, note: str) -> None:
        if note not in self._noted:
            self._noted.add(note)
            self._keeper.write(note)

    @property
    def hidden(self) -> bool:
        return self._hidden

    @hidden.setter
    def hidden(self, on: bool) -> None:
        with self._lock:
            self._hidden = bool(on)
            if on:
                self._note(HIDDEN_OUTPUT_NOTE)
                self.withheld = True

    def withhold(self) -> None:
        with self._lock:
            self.withheld = True
            self._note(WITHHELD_NOTE)

    def write(self, text: str) -> int:
        with self._lock:
            if not self._hidden and not self.withheld:
                self._keeper.write(text)
            return len(text) if isinstance(text, str) else 0

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def text(self) -> str:
        with self._lock:
            return self._keeper.text()


class _Alarm:
    """The grader's record that its own alarm stopped the cell (never inferred from an exception's class)."""

    def __init__(self) -> None:
        self.fired = False


@contextlib.contextmanager
def _alarm(seconds: float, record: _Alarm):
    """Stop runaway grader-side code (a loop driven by a student's answers) with SIGALRM."""
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def on_alarm(signum, frame):
        record.fired = True
        raise CellTimeout("the test ran past its time limit")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _chain(error: BaseException):
    """``error`` and the exceptions it came from (causes and contexts), each once."""
    seen = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _from_student(error: BaseException) -> bool:
    """Whether ``error``, or an exception it came from, was raised by the student's code in the kernel."""
    return any(from_kernel(current) for current in _chain(error))


def _raised_in_kernel(error: BaseException) -> bool:
    """Whether ``error`` itself (not an exception it came from) was raised by the student's code in the kernel."""
    return from_kernel(error)


def _out_of_grader_memory(error: BaseException) -> bool:
    """Whether a check's own allocation failed here, in the grader (not the student's, rebuilt from the kernel)."""
    return any((isinstance(current, MemoryError)
                or (isinstance(current, RuntimeError) and "can't allocate memory" in str(current)[:500]))
               and not from_kernel(current) for current in _chain(error))


# The only names of the student's errors a hidden check shows: the stub's and a limit's (each a bit
# the answer could choose, like passing or failing). Any other name would be a word from a list of
# sixty the answer picks with the hidden input (``[ValueError, KeyError, ...][x % 64]``).
HIDDEN_ERROR_NAMES = ("NotImplementedError", "MemoryError")
HIDDEN_CHECK_FAILED = ("a hidden check failed (what it called your code with, what it expected and its message are "
                       "not shown: run the visible tests and your own examples, including edge cases, to find it)")
HIDDEN_CHECK_ERROR = ("a hidden check could not finish with what your code returned (its message is not shown: it "
                      "could carry the hidden inputs)")


def _hidden_error_output(error: BaseException) -> dict:
    """An error raised by the student's code in a hidden check: no message, and a name only from a short list."""
    name = getattr(error, "remote_type", None) or (error.ename if isinstance(error, StudentError)
                                                   else type(error).__name__)
    shown = name if name in HIDDEN_ERROR_NAMES and not isinstance(error, StudentError) else "an exception"
    evalue = (f"your code raised {shown} during a hidden check (the message and traceback of errors in hidden "
              "checks are not shown: run the visible tests and your own examples to find it)")
    ename = shown if shown != "an exception" else "Error"
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}


def _grader_verdict(error: BaseException, kernel: StudentKernel, timeout: float, alarm: _Alarm,
                    limits: KernelLimits) -> dict | None:
    """The cell's error output when the grader itself ended the cell, from its own records, or None.

    The kernel ended (``kernel.ended()``: the grader's record of a death, a broken channel, a kernel
    process gone), the cell ran out of time (the grader interrupted the kernel, or its own alarm
    fired), or a check passed the grader's memory limit. Whatever exception the check let through (a
    check may wrap a KernelDied in its own CheckFailed), and whatever the kernel sent (a class named
    KernelDied, a message shaped like a limit), the verdict is the grader's record, in its words.
    """
    death = kernel.ended()
    if death is not None:
        return {"output_type": "error", "ename": "KernelDied", "evalue": death, "traceback": [death]}
    if alarm.fired or kernel.timed_out:
        return {"output_type": "error", "ename": "CellTimeoutError",
                "evalue": f"the cell ran longer than the {timeout:g} s limit and was interrupted", "traceback": []}
    if _out_of_grader_memory(error):
        sentence = grader_memory_sentence(limits)
        return {"output_type": "error", "ename": GRADER_OUT_OF_MEMORY, "evalue": sentence, "traceback": [sentence]}
    return None


def _error_output(error: BaseException, kernel: StudentKernel, timeout: float, *, hidden: bool = False) -> dict:
    """The cell's error output when the grader did not end the cell: the exception's name and message,
    and the student's own traceback; an error of the student's code bears the name it gave, made
    distinct from the grader's verdicts (``student_error_name``)."""
    # An assert of the test code keeps its message (the instructor wrote it); an AssertionError the
    # student's code raised is the student's message, which may spell out the hidden inputs.
    own_assert = type(error) is AssertionError and not _raised_in_kernel(error)   # the test code's assert
    if hidden and not own_assert:
        if _from_student(error):
            return _hidden_error_output(error)
        # A check's message is written for a visible test: it names the call (the hidden config) and the
        # expected value (the answer for the hidden input); another error of the check's code may quote
        # what the answer returned. Only an assert of the test code keeps its own words.
        failed = isinstance(error, AssertionError)
        ename, evalue = ("CheckFailed", HIDDEN_CHECK_FAILED) if failed else ("Error", HIDDEN_CHECK_ERROR)
        return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}
    ename = error.ename if isinstance(error, StudentError) else type(error).__name__
    evalue = str(error)
    if isinstance(error, StudentError) and evalue.startswith(f"{ename}: "):
        evalue = evalue[len(ename) + 2:]
    if _raised_in_kernel(error):
        ename = student_error_name(ename)
    traceback_lines = []
    student_traceback = "" if hidden else _student_traceback(error)
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


def _look_up(names: list[str], kernel: StudentKernel, namespace: dict[str, Any], looked_up: dict[str, Any]) -> None:
    """Bind ``names`` in ``namespace`` to what the kernel holds now, except those the test code bound itself."""
    for name in names:
        if name == HIDDEN_SWITCH or (name in namespace and name not in looked_up):
            continue
        try:
            namespace[name] = looked_up[name] = kernel.lookup(name)
        except NameError:   # the cell will raise NameError itself, where it uses the name
            namespace.pop(name, None)
            looked_up.pop(name, None)


def run_test_cell(source: str, kernel: StudentKernel, namespace: dict[str, Any], *, timeout: float,
                  label: str = "test cell", limits: KernelLimits | None = None,
                  hidden_checks: HiddenChecks | None = None, on_error=None) -> list[dict]:
    """Run a test cell's code here against ``kernel``; returns the cell's nbformat outputs.

    ``namespace`` is shared by the notebook's test cells (a name one test cell defines is visible
    to the next, as in a kernel); names it lacks are looked up in the student's kernel.
    ``hidden_checks`` is the notebook's: once a hidden region has started, in this cell or an
    earlier one, the cell's later output and its error are withheld (``withhold``).
    ``on_error(error)`` sees the cell's exception before anything is withheld: the instructor's
    record of the lost point (``lost_points``), never shown to the student.
    """
    limits = limits or kernel.limits
    hidden_checks = hidden_checks or HiddenChecks()
    output = _Output(limits.stream, withheld=hidden_checks.started)
    marked, _ = mark_hidden_regions(strip_magics(source))
    try:
        tree = ast.parse(marked, filename=label)
        code = compile(tree, label, "exec")
    except SyntaxError as error:  # the instructor's test cell: a bug in the course, reported as such
        return [{"output_type": "error", "ename": "SyntaxError", "evalue": f"in the test cell: {error}",
                 "traceback": []}]
    namespace.setdefault("__name__", "__main__")
    namespace.setdefault("__builtins__", builtins)
    looked_up: dict[str, Any] = namespace.setdefault(KERNEL_NAMES, {})
    hidden_token = [None]

    def switch_hidden(on: bool) -> None:
        if on and not output.hidden:
            output.hidden = True
        elif not on and output.hidden:
            output.hidden = False
            output.withhold()     # what the rest of the cell prints could carry the hidden inputs too
        if on:
            hidden_checks.started = True
        if hidden_token[0] is not None:
            _HIDDEN_CHECK.reset(hidden_token[0])
            hidden_token[0] = None
        if on:
            hidden_token[0] = _HIDDEN_CHECK.set(True)

    namespace[HIDDEN_SWITCH] = switch_hidden
    kernel.output_sink = output.write
    kernel.set_deadline(timeout)
    builder = _PLATFORM_BUILDER.set(kernel.build)
    sharer = _SHARER.set(kernel.share)
    url_sharer = _URL_SHARER.set(kernel.expose_url)
    outputs: list[dict] = []
    alarm = _Alarm()
    wall_s = timeout + GRADER_GRACE_S
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output), \
                warnings.catch_warnings(), _alarm(wall_s, alarm), cell_cpu_budget(limits, wall_s):
            warnings.simplefilter("default")
            _look_up(free_names(tree), kernel, namespace, looked_up)
            exec(code, namespace)
    except BaseException as error:  # noqa: BLE001 - every failure of the cell becomes its error output
        if isinstance(error, (KeyboardInterrupt, SystemExit)) and not isinstance(error, CellTimeout):
            raise
        if on_error is not None:
            with contextlib.suppress(Exception):   # the instructor's record never changes a grade
                on_error(error)
        verdict = _grader_verdict(error, kernel, timeout, alarm, limits)
        shown = verdict or _error_output(error, kernel, timeout, hidden=output.hidden)
        if output.withheld and not output.hidden:
            watchdog = getattr(kernel, "watchdog", None)
            peak = watchdog.peak.processes if watchdog is not None else 0
            shown = withhold_error(shown, limits, trusted=verdict is not None, peak_processes=peak)
        outputs.append(shown)
    finally:
        for name, value in list(looked_up.items()):   # a name the test code bound again is its own from now on
            if namespace.get(name, looked_up) is not value:
                del looked_up[name]
        switch_hidden(False)
        namespace.pop(HIDDEN_SWITCH, None)
        _PLATFORM_BUILDER.reset(builder)
        _SHARER.reset(sharer)
        _URL_SHARER.reset(url_sharer)
        kernel.output_sink = None
    text = output.text()
    return ([{"output_type": "stream", "name": "stdout", "text": text}] if text else []) + outputs
