"""What a graded notebook may show once hidden checks have called the student's code.

A hidden check hands the student's function inputs the student must not see. While it runs, the
grader shows nothing the student's code prints or raises (``testcells``). That is not enough: the
answer can keep its arguments in a global and print them, raise them, or return them (to be
repeated in a visible check's failure message) in any later cell. So from the moment the first
hidden region of a notebook starts, everything the student's code could shape is withheld from
the graded notebook, and so from the feedback, the results and the report:

- printed text, displays and results are replaced by one note (``WITHHELD_NOTE``);
- an error keeps only what the grader itself knows, in the grader's own words: that a check
  failed, that the cell timed out, that a limit was reached, that the answer is still the stub.
  Its name (beyond those), message and traceback go.

The points are untouched, and the student loses little: the visible tests are the same in the kit,
so ``course check`` shows each of their messages on the student's own machine. What still gets
out is what any grader lets out: a bit or two per cell (passed or not, which kind of failure).
"""

from __future__ import annotations

from autograde.results import FAILED_CHECK_NAMES
from course_lib.runner.limits import KernelLimits
from course_lib.runner.watchdog import limit_message, name_the_limit

__all__ = ["WITHHELD_NOTE", "HiddenChecks", "withhold_cell_outputs", "withhold_death", "withhold_error"]

WITHHELD_NOTE = ("[not shown: hidden checks have called your code earlier in this notebook, so what it prints, "
                 "shows or raises from here on could carry their inputs; `course check` in your kit shows the "
                 "visible tests' own output]\n")
CHECK_FAILED = ("a visible test failed (its message is not shown once hidden checks have called your code; "
                "`course check` on this notebook in your kit shows it)")
STUDENT_RAISED = ("your code raised an exception here (its name, message and traceback are not shown once "
                  "hidden checks have called your code; run this notebook in your kit to see it)")
LIMITS = ("memory", "processes", "cpu", "file", "disk", "notebook")   # KernelLimits' limits with a sentence
KERNEL_STOPPED = ("the kernel died or was stopped while running this cell (how is not shown once hidden checks "
                  "have called your code: an exit code, a signal or a malformed message could carry their inputs); "
                  "the cells after it were not run")
KERNEL_STOPPED_LATE = ("the cell ran past its time limit and the kernel did not stop when interrupted, so it was "
                       "stopped; the cells after it were not run")


class HiddenChecks:
    """Whether a hidden region of this notebook has started (from then on, outputs are withheld)."""

    def __init__(self) -> None:
        self.started = False


def _error(ename: str, evalue: str) -> dict:
    """An error output in the grader's words; its one traceback line is what a notebook page renders."""
    return {"output_type": "error", "ename": ename, "evalue": evalue,
            "traceback": [f"{ename}: {evalue}" if evalue else ename]}


def _limit_named(evalue: str, limits: KernelLimits, names: tuple[str, ...] = LIMITS) -> str | None:
    """The limit sentence an error's message starts with (the grader's words), if any."""
    return next((limit_message(name, limits) for name in names if evalue.startswith(limit_message(name, limits))),
                None)


def withhold_error(output: dict, limits: KernelLimits, *, trusted: bool = False, peak_processes: int = 0) -> dict:
    """An error output reduced to what the grader knows, in its own words.

    ``trusted``: the grader made this output itself (a timeout, a dead kernel), so its text is kept.
    An error a limit caused keeps the limit's sentence (``name_the_limit``), and nothing more.
    """
    if trusted:
        return output
    output = name_the_limit(output, limits, peak_processes)
    ename, evalue = str(output.get("ename", "")), str(output.get("evalue", ""))
    if limit := _limit_named(evalue, limits):
        return _error("Error", limit)
    if ename == "NotImplementedError" and not evalue:
        return _error(ename, "")            # the stub's own signal: "not attempted"
    if ename in FAILED_CHECK_NAMES:
        return _error("CheckFailed", CHECK_FAILED)
    return _error("Error", STUDENT_RAISED)


def withhold_death(reason: str, limits: KernelLimits) -> str:
    """How the kernel ended (the grader's record, ``StudentKernel.ended()``), reduced to what the grader
    knows without the student's help.

    The grader's own sentence about a death still carries what the student's code chose: the exit
    code (``os._exit(41)``), the signal, the text of a malformed message the kernel wrote on the
    channel, how much memory or how many processes it held. Only the limit that stopped it stays,
    in the words the grader writes for that limit (never words taken from the reason).
    """
    if limit := _limit_named(reason, limits, (*LIMITS, "files")):
        return f"{limit}: the kernel was stopped while running this cell; the cells after it were not run"
    if reason.startswith(("the cell ran past its", "the kernel stopped reading")):
        processes = limit_message("processes", limits)
        if f"({processes}:" in reason:   # the watchdog saw it at the process limit: the grader's words
            return f"{processes}: {KERNEL_STOPPED_LATE}"
        return KERNEL_STOPPED_LATE
    return KERNEL_STOPPED


def withhold_cell_outputs(outputs: list[dict], limits: KernelLimits, *, timed_out: bool,
                          timeout: float) -> list[dict]:
    """An answer cell's outputs from the kernel (all of them the student's to shape), withheld.

    Always the same note, whatever the cell printed, showed or raised: whether a cell printed or
    raised, and which kind of error, is itself a bit the answer chooses, and a notebook has enough
    cells to spell out a hidden input one bit a cell. ``timed_out``: the grader interrupted the cell,
    which is then said in the grader's words (a timeout costs the student the cell's whole limit).
    """
    shown = [{"output_type": "stream", "name": "stdout", "text": WITHHELD_NOTE}]
    if timed_out:
        shown.append(_error("CellTimeoutError", f"the cell ran longer than the {timeout:g} s limit and was "
                                                "interrupted"))
    return shown
