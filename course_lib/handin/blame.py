"""Which of the student's answers a failing cell's error comes from (for ``course check``).

A worked example or an experiment that runs the student's code can fail because of that code, long
after its visible tests passed: a ``pack_kv`` that calls a helper of its own cell passes its tests
and then dies in the worker process the experiment ships it to. ``course check`` must say so against
the answer ("your `pack_kv` raised NameError in ..."), not call it an unfinished exercise. The
evidence, strongest first:

1. **the traceback**: IPython names every frame of notebook code ``Cell In[7], line 5, in pack_kv``;
   the execution count says which cell that is. The innermost frame in an answer cell is the
   answer that raised (and, when that answer is still the release's ``raise NotImplementedError()``,
   the exercise is not written yet);
2. **the error message**: an error that crossed a process boundary (a worker, a server) has no
   frames of the notebook, but its message usually names the function (``pack_kv``) or the
   missing name; a name that one answer cell defines points at that answer;
3. **the cell's source**: otherwise the cell is a worked example that failed on its own terms, and
   the answers it runs are listed as context, never blamed.

A ``NotImplementedError`` raised by the student edition's stubs (the message says "is your
exercise in ... once Lab X is past due") means the course's own code reached a locked reference:
that is reported as such, since it is never the student's fault.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

__all__ = ["AnswerCells", "CellError", "blame"]

ANSI = re.compile(r"\x1b\[[0-9;]*m")
FRAME = re.compile(r"^Cell In\[(\d+)\], line (\d+)(?:, in ([\w.<>]+))?", re.MULTILINE)
LIBRARY_STUB = "is your exercise in"   # course_lib.exercises.stub_message

ANSWER, NOT_WRITTEN, LOCKED, EXAMPLE = "your answer", "not written yet", "locked in this kit", "worked example"


@dataclass
class CellError:
    """A cell (not a test cell) that raised, and what it is blamed on."""

    cell: str                 # how the report names the cell: its first line
    ename: str
    evalue: str
    kind: str                 # ANSWER, NOT_WRITTEN, LOCKED or EXAMPLE
    answer: str | None = None     # grade_id of the answer cell blamed
    function: str | None = None   # the name of that answer the error came from
    uses: tuple[str, ...] = ()    # answer names the failing cell uses (context for EXAMPLE)
    evidence: str = ""            # how ANSWER was found: "traceback" or "message"

    def text(self) -> str:
        message = _short(self.evalue)
        error = f"{self.ename}: {message}" if message else self.ename
        if self.kind == ANSWER and self.evidence == "message":
            return f"{self.cell} raised {error}, which names your `{self.function}` (answer cell '{self.answer}')"
        if self.kind == ANSWER:
            return f"your `{self.function}` (answer cell '{self.answer}') raised {error}, in {self.cell}"
        if self.kind == NOT_WRITTEN:
            return f"{self.cell} needs your `{self.function}` (answer cell '{self.answer}'), not written yet"
        if self.kind == LOCKED:
            return f"{self.cell} stopped at a part of the course library this kit does not ship yet: {message}"
        uses = f" (it runs your {', '.join(f'`{name}`' for name in self.uses)})" if self.uses else ""
        return f"{self.cell} raised {error}{uses}"

    def to_dict(self) -> dict:
        return {"cell": self.cell, "ename": self.ename, "evalue": self.evalue, "kind": self.kind,
                "answer": self.answer, "function": self.function, "uses": list(self.uses), "evidence": self.evidence,
                "text": self.text()}


def _short(evalue: str, lines: int = 3, width: int = 300) -> str:
    kept = [line.rstrip() for line in str(evalue).strip().splitlines() if line.strip()][:lines]
    text = " / ".join(kept)
    return text if len(text) <= width else text[:width - 3] + "..."


def defined_names(source: str) -> list[str]:
    """Top-level names a cell defines: functions, classes, assigned names (empty on a syntax error)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [target.id for target in targets if isinstance(target, ast.Name)]
    return names


class AnswerCells:
    """What the run knows of the answer cells: their execution counts, names and release state."""

    def __init__(self) -> None:
        self.by_count: dict[int, str] = {}       # execution count -> answer grade_id
        self.names: dict[str, str] = {}          # name an answer cell defines -> its grade_id
        self.unchanged: set[str] = set()         # answer cells still as released

    def ran(self, grade_id: str, source: str, execution_count: int | None, *, unchanged: bool) -> None:
        if execution_count is not None:
            self.by_count[execution_count] = grade_id
        for name in defined_names(source):
            self.names.setdefault(name, grade_id)
        if unchanged:
            self.unchanged.add(grade_id)


def _frames(traceback: list[str]) -> list[tuple[int, str | None]]:
    """(execution count, function) of every notebook frame, outermost first."""
    text = ANSI.sub("", "\n".join(traceback))
    return [(int(count), function) for count, _, function in FRAME.findall(text)]


def blame(error: dict, cell_name: str, cell_source: str, answers: AnswerCells) -> CellError:
    """What the error output ``error`` of the cell named ``cell_name`` is blamed on (module docstring)."""
    ename, evalue = str(error.get("ename", "Error")), str(error.get("evalue", ""))
    uses = tuple(name for name in answers.names if re.search(rf"\b{re.escape(name)}\b", cell_source))
    if LIBRARY_STUB in evalue:
        return CellError(cell_name, ename, evalue, LOCKED, uses=uses)
    in_answers = [(count, function) for count, function in _frames(error.get("traceback") or [])
                  if count in answers.by_count]
    if in_answers:
        count, function = in_answers[-1]
        grade_id = answers.by_count[count]
        function = function if function and function != "<module>" else grade_id
        bare_placeholder = ename == "NotImplementedError" and (grade_id in answers.unchanged or
                                                               "is not written yet" in evalue or not evalue.strip())
        return CellError(cell_name, ename, evalue, NOT_WRITTEN if bare_placeholder else ANSWER, grade_id, function,
                         uses, "traceback")
    # Names of two letters or fewer (x, f) would match any message by accident.
    mentioned = [name for name in answers.names if len(name) > 2 and re.search(rf"\b{re.escape(name)}\b", evalue)]
    if mentioned:
        return CellError(cell_name, ename, evalue, ANSWER, answers.names[mentioned[0]], mentioned[0], uses, "message")
    return CellError(cell_name, ename, evalue, EXAMPLE, uses=uses)
