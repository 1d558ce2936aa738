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

Two more causes lie outside the cell and outside this chapter's answers, and are blamed on neither:

- **an earlier chapter** (``answers_from``): its notebook is not beside this one (``ChapterNotFound``),
  or an answer there is not written yet (a ``NotImplementedError`` from a frame
  ``<04_paging.ipynb: answer cell '...'>``), or raised (then it is that chapter's answer to fix);
- **a knock-on** of a cell that failed first (``FailedCells``): a cell that uses a name an earlier
  failed cell should have defined (``BlockAllocator`` after the cell that reads it failed; a list an
  experiment left half filled, whose mean is then a ``ZeroDivisionError``) names that first cell.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

__all__ = ["AnswerCells", "CellError", "FailedCells", "blame"]

ANSI = re.compile(r"\x1b\[[0-9;]*m")
FRAME = re.compile(r"^Cell In\[(\d+)\], line (\d+)(?:, in ([\w.<>]+))?", re.MULTILINE)
# A frame of an earlier chapter's answer cell, run by course_lib.chapters.answers_from.
EARLIER_FRAME = re.compile(r"^File <(?P<notebook>[^<>:]+)\.ipynb: answer cell '(?P<answer>[^']*)'>:\d+"
                           r"(?:, in (?P<function>[\w.<>]+))?", re.MULTILINE)
MISSING_CHAPTER = re.compile(r"answers_from\('(?P<notebook>[^']+?)(?:\.ipynb)?'\): there is no")
LIBRARY_STUB = "is your exercise in"   # course_lib.exercises.stub_message

ANSWER, NOT_WRITTEN, LOCKED, EXAMPLE = "your answer", "not written yet", "locked in this kit", "worked example"
EARLIER, KNOCK_ON = "an earlier chapter", "knock-on"


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
    evidence: str = ""            # how ANSWER was found: "traceback" or "message"; for EARLIER: "missing",
                                  # "not written" or "raised"
    chapter: str | None = None    # EARLIER: the earlier chapter's notebook (its stem)
    root: str | None = None       # KNOCK_ON: the cell that failed first

    def text(self) -> str:
        message = _short(self.evalue)
        error = f"{self.ename}: {message}" if message else self.ename
        if self.kind == EARLIER and self.evidence == "missing":
            return (f"{self.cell} could not read your answers of {self.chapter}.ipynb: that notebook is not in this "
                    "one's folder")
        if self.kind == EARLIER and self.evidence == "not written":
            return (f"{self.cell} needs your `{self.function}` of {self.chapter}.ipynb (answer cell '{self.answer}'), "
                    "not written yet there")
        if self.kind == EARLIER:
            return (f"your `{self.function}` of {self.chapter}.ipynb (answer cell '{self.answer}') raised {error}, in "
                    f"{self.cell}: fix it in {self.chapter}.ipynb")
        if self.kind == KNOCK_ON:
            return f"{self.cell} raised {error}, a knock-on of {self.root}, which failed first"
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
                "chapter": self.chapter, "root": self.root, "text": self.text()}


def _short(evalue: str, lines: int = 3, width: int = 300) -> str:
    kept = [line.rstrip() for line in str(evalue).strip().splitlines() if line.strip()][:lines]
    text = " / ".join(kept)
    return text if len(text) <= width else text[:width - 3] + "..."


def defined_names(source: str, *, every_binding: bool = False) -> list[str]:
    """Top-level names a cell defines: functions, classes, assigned names (empty on a syntax error).

    every_binding: also names bound by top-level loops, ``with ... as``, augmented assignments and tuple
    targets (what a cell that stops half-way may leave undefined or half made; its imports, done first,
    are not counted)."""
    try:
        tree = ast.parse(_without_magics(source))
    except SyntaxError:
        return []
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [target.id for target in targets if isinstance(target, ast.Name)]
            if every_binding:
                names += [name.id for target in targets if not isinstance(target, ast.Name)
                          for name in ast.walk(target) if isinstance(name, ast.Name)]
        elif every_binding and isinstance(node, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.AugAssign)):
            names += _bound_by(node)
    return list(dict.fromkeys(names))


def _bound_by(node: ast.AST) -> list[str]:
    targets = [node.target] if isinstance(node, (ast.For, ast.AsyncFor, ast.AugAssign)) else \
        [item.optional_vars for item in node.items if item.optional_vars is not None]
    bound = [name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)]
    if isinstance(node, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):   # what the body assigns, too
        inner = "\n".join(ast.unparse(statement) for statement in node.body)
        bound += defined_names(inner, every_binding=True)
    return bound


def _without_magics(source: str) -> str:
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _uses(source: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", source) is not None


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


class FailedCells:
    """The cells that raised so far, and the names each would have defined: what a later error may be a
    knock-on of."""

    def __init__(self) -> None:
        self.cells: list[tuple[str, tuple[str, ...], str]] = []   # (cell, names it binds, the cell that failed first)

    def add(self, cell: str, source: str, blamed: CellError) -> None:
        root = blamed.root if blamed.kind == KNOCK_ON and blamed.root else cell
        self.cells.append((cell, tuple(defined_names(source, every_binding=True)), root))

    def ran(self, source: str) -> None:
        """A cell ran without an error: the names it defines are whole again."""
        defined = set(defined_names(source))
        if defined:
            self.cells = [(cell, tuple(name for name in names if name not in defined), root)
                          for cell, names, root in self.cells]

    def root_of(self, source: str, ename: str, evalue: str) -> str | None:
        """The cell that failed first, if this error looks like its knock-on: a NameError for a name it
        should have defined, or an error in a cell that uses such a name."""
        missing = re.search(r"name '(\w+)' is not defined", evalue) if ename == "NameError" else None
        for cell, names, root in self.cells:
            if missing and missing.group(1) in names:
                return root
        for cell, names, root in self.cells:
            if any(_uses(source, name) for name in names if len(name) > 1):
                return root
        return None


def _frames(traceback: list[str]) -> list[tuple[int, str | None]]:
    """(execution count, function) of every notebook frame, outermost first."""
    text = ANSI.sub("", "\n".join(traceback))
    return [(int(count), function) for count, _, function in FRAME.findall(text)]


def _earlier_chapter(ename: str, evalue: str, traceback: list[str]) -> tuple[str, str, str, str] | None:
    """(chapter, answer cell, function, "missing" | "not written" | "raised") when the error comes from an
    earlier chapter's notebook read by answers_from; None otherwise."""
    missing = MISSING_CHAPTER.search(evalue) if ename == "ChapterNotFound" else None
    if missing:
        return missing["notebook"], "", "", "missing"
    frames = list(EARLIER_FRAME.finditer(ANSI.sub("", "\n".join(traceback))))
    if not frames:
        return None
    innermost = frames[-1]
    function = innermost["function"] or innermost["answer"]
    how = "not written" if ename == "NotImplementedError" else "raised"
    return innermost["notebook"], innermost["answer"], function, how


def blame(error: dict, cell_name: str, cell_source: str, answers: AnswerCells,
          failed: FailedCells | None = None) -> CellError:
    """What the error output ``error`` of the cell named ``cell_name`` is blamed on (module docstring).

    failed: the cells that raised before this one, for knock-ons (none: no cell is taken for one)."""
    ename, evalue = str(error.get("ename", "Error")), str(error.get("evalue", ""))
    uses = tuple(name for name in answers.names if re.search(rf"\b{re.escape(name)}\b", cell_source))
    if LIBRARY_STUB in evalue:
        return CellError(cell_name, ename, evalue, LOCKED, uses=uses)
    traceback = error.get("traceback") or []
    earlier = _earlier_chapter(ename, evalue, traceback)
    if earlier is not None:
        chapter, answer, function, how = earlier
        return CellError(cell_name, ename, evalue, EARLIER, answer or None, function or None, uses, how, chapter)
    in_answers = [(count, function) for count, function in _frames(traceback) if count in answers.by_count]
    root = failed.root_of(cell_source, ename, evalue) if failed is not None else None
    if root is not None and (ename == "NameError" or not in_answers):
        return CellError(cell_name, ename, evalue, KNOCK_ON, uses=uses, root=root)
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
