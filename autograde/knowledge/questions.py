"""The written-question file of a lab, ``autograde/knowledge/<lab>.toml``: read, checked, placed.

The format (TOML; ``'''`` strings keep Markdown, backslashes and quotes as written)::

    lab = "lab02-prefill-vs-decode"

    [[question]]
    grade_id = "written_why_kv_cache"        # the answer cell's nbgrader grade_id: written_<name>
    notebook = "01_autoregression"           # solutions/<lab>/<notebook>.ipynb
    points = 4                               # the answer cell's nbgrader points
    place = { before = "## 8. Summary" }     # where the cells go (see Placement)
    prompt = '''Markdown the student reads.'''
    model_answer = '''Markdown: what a full-marks answer says.'''
    notes = '''For TAs: common mistakes, what to accept.'''   # optional

    [[question.criteria]]                    # 1 to 9 criteria (number keys 1-9 tick them)
    id = "why_needed"                        # a short name, unique in the question
    points = 1                               # the criteria's points add up to the question's
    text = "What the answer must say to earn them."
    partial = [ { points = 0.5, when = "the common half-right answer" } ]   # optional

    [[autograded]]                           # a question with one numeric answer: an exercise spec
    grade_id = "kv_cache_bytes_mha"
    ...

``prompt``, ``model_answer`` and ``place`` are what phase 2 of the written questions moves into the
solution notebook (``question_cells``: a locked prompt cell, then the answer cell whose solution is
the model answer, which nbgrader's release replaces by "YOUR ANSWER HERE"). The rubric stays in
this file for good. Every rule below is checked when the file is read, and a broken file names the
file, the question and the field.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

KNOWLEDGE_DIR = Path(__file__).resolve().parent
GRADE_ID = re.compile(r"^written_[a-z0-9_]{1,60}$")
EXERCISE_ID = re.compile(r"^[a-z][a-z0-9_]{0,60}$")
CRITERION_ID = re.compile(r"^[a-z][a-z0-9_]{0,30}$")
NOTEBOOK = re.compile(r"^\d\d_[a-z0-9_]+$")
MAX_CRITERIA = 9          # the number keys 1-9 of the marking page
POINTS_TOLERANCE = 1e-9


class RubricError(ValueError):
    """A written-question file that breaks a rule; the message names the file, question and field."""


@dataclass(frozen=True)
class PartialCredit:
    points: float
    when: str


@dataclass(frozen=True)
class Criterion:
    id: str
    points: float
    text: str
    partial: tuple[PartialCredit, ...] = ()

    def levels(self) -> tuple[float, ...]:
        """The points a TA may give for this criterion, highest first: full, each partial, none."""
        return tuple(sorted({self.points, *(credit.points for credit in self.partial), 0.0}, reverse=True))


@dataclass(frozen=True)
class Placement:
    """Where a question's cells go in its solution notebook.

    ``before``: in front of the first cell whose source starts with this text (a heading such as
    ``"## 8. Summary"``). ``after``: behind the cell whose grade_id is this, or else the one cell whose
    source starts with it. Exactly one of the two is given, and it must match exactly one cell.
    """

    before: str | None = None
    after: str | None = None

    def index_in(self, cells) -> int:
        """The index at which the question's cells are inserted into ``cells`` (nbformat cells)."""
        text = self.before if self.before is not None else self.after
        by_grade_id = [index for index, cell in enumerate(cells)
                       if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == text]
        starting = [index for index, cell in enumerate(cells) if _source(cell).lstrip().startswith(text)]
        if self.after is not None and by_grade_id:
            matches = by_grade_id
        else:
            matches = starting
        if len(matches) != 1:
            where = "before" if self.before is not None else "after"
            found = "no cell" if not matches else f"{len(matches)} cells ({', '.join(map(str, matches))})"
            raise RubricError(f"place {where} {text!r}: {found} match; it must match exactly one")
        return matches[0] if self.before is not None else matches[0] + 1


@dataclass(frozen=True)
class WrittenQuestion:
    lab: str
    notebook: str
    grade_id: str
    points: float
    criteria: tuple[Criterion, ...]
    prompt: str = ""
    model_answer: str = ""
    notes: str = ""
    place: Placement | None = None

    @property
    def key(self) -> str:
        """``<notebook>/<grade_id>``: names the question across a lab."""
        return f"{self.notebook}/{self.grade_id}"

    def criterion(self, criterion_id: str) -> Criterion:
        for criterion in self.criteria:
            if criterion.id == criterion_id:
                return criterion
        raise KeyError(criterion_id)

    @property
    def rubric_hash(self) -> str:
        """A short hash of what a mark depends on (criteria ids, points, partial levels): a mark
        saved under another hash was given with an older rubric and may need a second look."""
        shape = [[c.id, c.points, [p.points for p in c.partial]] for c in self.criteria] + [self.points]
        return hashlib.sha256(json.dumps(shape).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class AutogradedExercise:
    """A question with one numeric answer, written as the spec of an autograded exercise: what the
    answer cell asks (``prompt``, ``signature``, ``docstring``), the reference answer, the visible and
    hidden tests (inputs and expected values), the points of each test cell and a realistic bug for
    a demo student. Phase 2 builds it like every exercise: an ``@exercise`` reference in course_lib,
    a check in course_lib.checks, the cells, the demo student."""

    lab: str
    notebook: str
    grade_id: str
    prompt: str
    signature: str
    docstring: str
    reference: str
    visible: tuple[dict, ...]
    hidden: tuple[dict, ...]
    points_visible: float
    points_hidden: float
    hint: str
    demo_bug: dict = field(default_factory=dict)
    place: Placement | None = None


@dataclass(frozen=True)
class LabQuestions:
    lab: str
    questions: tuple[WrittenQuestion, ...]
    autograded: tuple[AutogradedExercise, ...] = ()
    path: Path | None = None

    def question(self, key: str) -> WrittenQuestion:
        """The question named ``<notebook>/<grade_id>``."""
        for question in self.questions:
            if question.key == key:
                return question
        known = ", ".join(q.key for q in self.questions) or "none"
        raise KeyError(f"no written question {key!r} in {self.lab}; questions: {known}")

    @property
    def points(self) -> float:
        return sum(question.points for question in self.questions)


def labs_with_questions(folder: Path = KNOWLEDGE_DIR) -> list[str]:
    """The labs that have a written-question file in ``folder``."""
    return sorted(path.stem for path in folder.glob("lab*.toml"))


def load_lab(lab: str, folder: Path = KNOWLEDGE_DIR) -> LabQuestions:
    """The written questions of ``lab`` (an empty set when the lab has no file)."""
    path = folder / f"{lab}.toml"
    if not path.is_file():
        return LabQuestions(lab, ())
    return load_questions_file(path)


def load_questions_file(path: Path) -> LabQuestions:
    """Read and check one written-question file; RubricError names what is wrong."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise RubricError(f"{path}: cannot be read ({error})") from None
    except tomllib.TOMLDecodeError as error:
        raise RubricError(f"{path}: not valid TOML ({error})") from None
    lab = data.get("lab")
    if lab != Path(path).stem:
        raise RubricError(f"{path}: lab = {lab!r}, but the file is named for {Path(path).stem!r}")
    _only(data, {"lab", "question", "autograded"}, f"{path}")
    questions = tuple(_question(lab, entry, f"{path}: question {index + 1}")
                      for index, entry in enumerate(data.get("question", [])))
    autograded = tuple(_autograded(lab, entry, f"{path}: autograded {index + 1}")
                       for index, entry in enumerate(data.get("autograded", [])))
    seen: set[tuple[str, str]] = set()
    for notebook, grade_id in [(q.notebook, q.grade_id) for q in questions] + \
                              [(a.notebook, a.grade_id) for a in autograded]:
        if (notebook, grade_id) in seen:
            raise RubricError(f"{path}: grade_id {grade_id!r} is used twice in {notebook}")
        seen.add((notebook, grade_id))
    return LabQuestions(lab, questions, autograded, Path(path))


# --------------------------------------------------------------------------------------------
# The rules, one field at a time
# --------------------------------------------------------------------------------------------

QUESTION_FIELDS = {"grade_id", "notebook", "points", "place", "prompt", "model_answer", "notes", "criteria"}
CRITERION_FIELDS = {"id", "points", "text", "partial"}
AUTOGRADED_FIELDS = {"grade_id", "notebook", "place", "prompt", "signature", "docstring", "reference", "visible",
                     "hidden", "points_visible", "points_hidden", "hint", "demo_bug"}


def _question(lab: str, entry: dict, where: str) -> WrittenQuestion:
    _only(entry, QUESTION_FIELDS, where)
    grade_id = _text(entry, "grade_id", where)
    where = f"{where} ({grade_id})"
    if not GRADE_ID.match(grade_id):
        raise RubricError(f"{where}: grade_id must look like written_<name> (lower case, digits, _)")
    notebook = _notebook(entry, where)
    points = _points(entry.get("points"), f"{where}: points")
    criteria = tuple(_criterion(item, f"{where}: criterion {index + 1}")
                     for index, item in enumerate(_list(entry, "criteria", where)))
    if not 1 <= len(criteria) <= MAX_CRITERIA:
        raise RubricError(f"{where}: {len(criteria)} criteria; give 1 to {MAX_CRITERIA} (the number keys tick them)")
    ids = [criterion.id for criterion in criteria]
    if len(set(ids)) != len(ids):
        raise RubricError(f"{where}: criterion ids repeat: {', '.join(sorted(i for i in ids if ids.count(i) > 1))}")
    total = sum(criterion.points for criterion in criteria)
    if not math.isclose(total, points, abs_tol=POINTS_TOLERANCE):
        raise RubricError(f"{where}: the criteria add up to {total:g} points, the question is worth {points:g}")
    return WrittenQuestion(lab, notebook, grade_id, points, criteria,
                           prompt=_text(entry, "prompt", where, required=False),
                           model_answer=_text(entry, "model_answer", where, required=False),
                           notes=_text(entry, "notes", where, required=False),
                           place=_placement(entry.get("place"), where))


def _criterion(entry, where: str) -> Criterion:
    if not isinstance(entry, dict):
        raise RubricError(f"{where}: must be a table with id, points and text")
    _only(entry, CRITERION_FIELDS, where)
    criterion_id = _text(entry, "id", where)
    if not CRITERION_ID.match(criterion_id):
        raise RubricError(f"{where}: id {criterion_id!r} must be a short lower-case name (letters, digits, _)")
    where = f"{where} ({criterion_id})"
    points = _points(entry.get("points"), f"{where}: points")
    partial = []
    for index, item in enumerate(entry.get("partial", [])):
        spot = f"{where}: partial {index + 1}"
        if not isinstance(item, dict) or set(item) != {"points", "when"}:
            raise RubricError(f"{spot}: must be {{ points = ..., when = \"...\" }}")
        credit = PartialCredit(_points(item["points"], f"{spot}: points"), _text(item, "when", spot))
        if not credit.points < points:
            raise RubricError(f"{spot}: {credit.points:g} points must be less than the criterion's {points:g}")
        partial.append(credit)
    if len({credit.points for credit in partial}) != len(partial):
        raise RubricError(f"{where}: two partial credits give the same points")
    return Criterion(criterion_id, points, _text(entry, "text", where), tuple(partial))


def _autograded(lab: str, entry: dict, where: str) -> AutogradedExercise:
    _only(entry, AUTOGRADED_FIELDS, where)
    grade_id = _text(entry, "grade_id", where)
    where = f"{where} ({grade_id})"
    if not EXERCISE_ID.match(grade_id) or grade_id.startswith("written_"):
        raise RubricError(f"{where}: grade_id must be an exercise name (lower case), not written_...")
    tests = {}
    for kind in ("visible", "hidden"):
        cases = tuple(_list(entry, kind, where))
        for index, case in enumerate(cases):
            if not isinstance(case, dict) or not {"args", "expected"} <= set(case):
                raise RubricError(f"{where}: {kind} test {index + 1} needs args and expected")
        tests[kind] = cases
    if not tests["visible"] or not tests["hidden"]:
        raise RubricError(f"{where}: an exercise needs visible and hidden tests")
    return AutogradedExercise(
        lab, _notebook(entry, where), grade_id, _text(entry, "prompt", where), _text(entry, "signature", where),
        _text(entry, "docstring", where), _text(entry, "reference", where), tests["visible"], tests["hidden"],
        _points(entry.get("points_visible"), f"{where}: points_visible"),
        _points(entry.get("points_hidden"), f"{where}: points_hidden"), _text(entry, "hint", where),
        dict(entry.get("demo_bug", {})), _placement(entry.get("place"), where))


def _placement(value, where: str) -> Placement | None:
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) != 1 or not set(value) <= {"before", "after"} \
            or not isinstance(next(iter(value.values())), str) or not next(iter(value.values())).strip():
        raise RubricError(f"{where}: place must be {{ before = \"...\" }} or {{ after = \"...\" }}")
    return Placement(**value)


def _notebook(entry: dict, where: str) -> str:
    notebook = _text(entry, "notebook", where)
    if not NOTEBOOK.match(notebook):
        raise RubricError(f"{where}: notebook {notebook!r} must be a chapter's stem, like 03_decode")
    return notebook


def _points(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise RubricError(f"{where}: must be a number above 0, got {value!r}")
    return float(value)


def _text(entry: dict, name: str, where: str, *, required: bool = True) -> str:
    value = entry.get(name, "" if not required else None)
    if not isinstance(value, str) or (required and not value.strip()):
        raise RubricError(f"{where}: {name} must be {'a non-empty' if required else 'a'} string")
    return value.strip()


def _list(entry: dict, name: str, where: str) -> list:
    value = entry.get(name, [])
    if not isinstance(value, list):
        raise RubricError(f"{where}: {name} must be a list")
    return value


def _only(entry: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise RubricError(f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")


def _source(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def question_cells(question: WrittenQuestion) -> list:
    """The question's two cells for its solution notebook (``authoring.written_question``): the
    locked prompt, then the answer cell holding the model answer. Inserted at ``question.place``."""
    from autograde.authoring import written_question

    if not question.prompt or not question.model_answer:
        raise RubricError(f"{question.lab}: {question.key} has no prompt or model answer to make cells from")
    return written_question(question.grade_id, question.points, question.prompt, question.model_answer)
