"""Claims: what a notebook's text says a measurement shows, checked against this run's numbers.

A chapter's experiment is its argument. When the text says "past the knee, p99 explodes", the
notebook states that as a claim right under the plot, as a function of the numbers just measured::

    from course_lib.claims import claim

    claim("p99 at 1.5x capacity is at least 3x the p99 at 0.5x capacity",
          p99[1.5] >= 3 * p99[0.5],
          measured=f"{p99[1.5]:.2f} s against {p99[0.5]:.2f} s",
          otherwise="the machine was busy while the low-load point ran (close other programs and run again)")

The cell prints whether the claim held in this run, with the numbers, and, when it did not, the
likely reason. A claim never fails a cell and never costs points: it tells a student whether their
run shows what the text describes, or why it may not.

A claim that this machine cannot test (a GPU timing on a laptop without a GPU) is stated with
``skip_claim(statement, reason)``: the cell says the claim is skipped and why, instead of keeping
quiet about it.

``benchmarks/claims.py`` runs the notebooks many times on a busy machine and counts, per claim,
how often it held: each claim appends one JSON line to the file that ``COURSE_CLAIMS_LOG`` names
(nothing is written when it is unset).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Union

__all__ = ["CLAIMS_LOG_ENVIRONMENT", "Claim", "claim", "skip_claim"]

CLAIMS_LOG_ENVIRONMENT = "COURSE_CLAIMS_LOG"
"""Environment variable: a file to which every claim appends one JSON line (for ``benchmarks/claims.py``)."""

Condition = Union[bool, Callable[[], bool]]


@dataclass(frozen=True)
class Claim:
    """One claim and how it came out in this run.

    ``held`` is None when the condition could not be evaluated (it raised: say, a measurement is
    missing because an exercise is not done yet), or when the claim was skipped on purpose
    (``skipped`` says why: this machine cannot make the measurement).
    """

    statement: str
    held: bool | None
    measured: str = ""
    otherwise: str = ""
    error: str = ""
    skipped: str = ""
    printed: bool = field(default=False, repr=False, compare=False)

    def line(self) -> str:
        """The one-line verdict a notebook prints."""
        if self.skipped:
            return f"\u2013 Claim skipped in this run: {self.statement}. Why: {self.skipped}."
        numbers = f" (measured: {self.measured})" if self.measured else ""
        if self.held:
            return f"\u2714 Claim held in this run: {self.statement}{numbers}."
        if self.held is None:
            return f"? Claim not checked: {self.statement}: {self.error}."
        reason = f" Likely reason: {self.otherwise}." if self.otherwise else ""
        return f"\u2718 Claim did not hold in this run: {self.statement}{numbers}.{reason}"

    def __repr__(self) -> str:
        return self.line()

    def _ipython_display_(self) -> None:
        # A cell that ends with ``claim(...)`` would show the verdict a second time under the printed one.
        if not self.printed:
            from IPython.display import HTML, display

            display(HTML(self._repr_html_()))

    def _repr_html_(self) -> str:
        from html import escape

        colour = {True: "#1a7f37", False: "#b35900", None: "#57606a"}[None if self.skipped else self.held]
        return f'<div style="color:{colour};font-family:monospace">{escape(self.line())}</div>'


def _evaluate(condition: Condition) -> tuple[bool | None, str]:
    try:
        value = condition() if callable(condition) else condition
    except Exception as error:  # a claim never fails the cell: it says why it could not be checked
        return None, f"{type(error).__name__}: {error}"
    return bool(value), ""


def _log(result: Claim) -> None:
    path = os.environ.get(CLAIMS_LOG_ENVIRONMENT)
    if not path:
        return
    record = {key: value for key, value in asdict(result).items() if key != "printed"}
    record |= {"time": time.time(), "notebook": os.environ.get("COURSE_CLAIMS_NOTEBOOK", "")}
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(record) + "\n")


def claim(statement: str, held: Condition, *, measured: str = "", otherwise: str = "",
          show: bool = True) -> Claim:
    """Check one claim of the text against this run's numbers and print the verdict (never raises).

    Args:
        statement: the claim in the words of the text, e.g. "continuous batching finishes the
            queue sooner than static batching". It names the claim in ``benchmarks/claims.py``.
        held: whether it held: a bool, or a function of no arguments returning one (evaluated
            here; if it raises, the claim is reported as not checked, with the error).
        measured: the numbers behind the verdict, e.g. "2.31 tokens/s against 1.70".
        otherwise: the likely reason when it does not hold, e.g. "the machine was busy (close
            other programs and run the cell again)".
        show: print the verdict (True) or only return it.

    Returns:
        The Claim, whose ``held`` is True, False or None (not checked).
    """
    if not isinstance(statement, str) or not statement.strip():
        raise ValueError(f"statement must be a non-empty string saying what the text claims, got {statement!r}")
    verdict, error = _evaluate(held)
    result = Claim(statement.strip(), verdict, measured, otherwise, error, printed=show)
    _log(result)
    if show:
        print(result.line())
    return result


def skip_claim(statement: str, reason: str, *, show: bool = True) -> Claim:
    """Say that a claim of the text is not checked in this run, and why (never raises).

    Args:
        statement: the claim in the words of the text, as ``claim`` would state it.
        reason: why this run cannot check it, e.g. "needs a GPU: the interpreter's timings say
            nothing about one". ``benchmarks/claims.py`` lists skipped claims apart, never as failures.
        show: print the line (True) or only return it.
    """
    if not isinstance(statement, str) or not statement.strip():
        raise ValueError(f"statement must be a non-empty string saying what the text claims, got {statement!r}")
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"reason must say why the claim is skipped, got {reason!r}")
    result = Claim(statement.strip(), None, skipped=reason.strip(), printed=show)
    _log(result)
    if show:
        print(result.line())
    return result
