"""The written questions of a lab: their rubrics (``autograde/knowledge/<lab>.toml``) joined to their
cells in the solution notebooks, read and checked.

One source for each piece of a question:

- **the solution notebook** (``solutions/<lab>/<notebook>.ipynb``) holds the question's two cells
  (``authoring.written_question``): the locked prompt (grade_id ``<grade_id>_prompt``), then nbgrader's
  manually graded answer cell (grade_id ``written_<name>``, its ``points``), whose source there is the
  model answer; nbgrader's release replaces it by "YOUR ANSWER HERE". The notebook decides where the
  question is asked, what it asks, what a full-marks answer says and how many points it is worth;
- **the rubric file** (TOML, here; never shipped) holds what a TA grades with::

    lab = "lab02-prefill-vs-decode"

    [[question]]
    grade_id = "written_why_kv_cache"        # the answer cell's grade_id: written_<name>
    notebook = "01_autoregression"           # solutions/<lab>/<notebook>.ipynb
    notes = '''For TAs: common mistakes, what to accept.'''   # optional

    [[question.criteria]]                    # 1 to 9 criteria (number keys 1-9 tick them)
    id = "why_needed"                        # a short name, unique in the question
    points = 1                               # the criteria add up to the answer cell's points
    text = "What the answer must say to earn them."
    partial = [ { points = 0.5, when = "the common half-right answer" } ]   # optional

``load_lab`` reads the file and joins each question to its cells: every rubric must name a written
answer cell of its notebook whose points equal the criteria's sum, and every written answer cell of
the lab's notebooks must have a rubric. A broken file, or a file and notebooks that disagree, raises
``RubricError`` naming the file, the question and the field. A question whose answer is one number is
no written question: it is an exercise like every other (Lab 0.2's ``kv_cache_bytes_mha``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

KNOWLEDGE_DIR = Path(__file__).resolve().parent
SOLUTIONS_DIR = KNOWLEDGE_DIR.parent.parent / "solutions"     # the checkout's nbgrader source folder
GRADE_ID = re.compile(r"^written_[a-z0-9_]{1,60}$")
CRITERION_ID = re.compile(r"^[a-z][a-z0-9_]{0,30}$")
NOTEBOOK = re.compile(r"^[a-z0-9][a-z0-9_-]{0,60}$")
PROMPT_LEAD = re.compile(r"^\*\*Written question \([^)]*\)\.\*\*\s*")   # authoring.written_question's first words
MAX_CRITERIA = 9          # the number keys 1-9 of the marking page
POINTS_TOLERANCE = 1e-9


class RubricError(ValueError):
    """A rubric file that breaks a rule, or that disagrees with the notebooks; the message names the
    file, question and field."""


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
    """Where a new question's cells go in its solution notebook (``insert_question``).

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
    criteria: tuple[Criterion, ...]
    notes: str = ""
    prompt: str = ""          # from the solution notebook's prompt cell (what students read)
    model_answer: str = ""    # from the solution notebook's answer cell (never shipped)

    @property
    def points(self) -> float:
        """The question's worth: its criteria's points (the answer cell's points, checked by ``load_lab``)."""
        return round(sum(criterion.points for criterion in self.criteria), 9)

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
class LabQuestions:
    lab: str
    questions: tuple[WrittenQuestion, ...]
    path: Path | None = None

    def question(self, key: str) -> WrittenQuestion:
        """The question named ``<notebook>/<grade_id>``."""
        for question in self.questions:
            if question.key == key:
                return question
        known = ", ".join(q.key for q in self.questions) or "none"
        raise KeyError(f"no written question {key!r} in {self.lab}; questions: {known}")

    def by_cell(self, notebook: str, grade_id: str) -> WrittenQuestion | None:
        """The question whose answer cell is ``notebook``/``grade_id``, or None."""
        return next((q for q in self.questions if q.notebook == notebook and q.grade_id == grade_id), None)

    @property
    def points(self) -> float:
        return sum(question.points for question in self.questions)


def labs_with_questions(folder: Path = KNOWLEDGE_DIR) -> list[str]:
    """The labs that have a rubric file in ``folder``."""
    return sorted(path.stem for path in folder.glob("lab*.toml"))


def load_lab(lab: str, folder: Path = KNOWLEDGE_DIR, solutions: Path | None = SOLUTIONS_DIR) -> LabQuestions:
    """The written questions of ``lab``: the rubrics of ``folder/<lab>.toml`` joined to their cells in
    ``solutions/<lab>/`` (prompt, model answer, points); an empty set when the lab has no file.
    ``solutions=None``: the rubrics alone (no prompt or model answer, nothing checked against cells)."""
    path = folder / f"{lab}.toml"
    questions = load_questions_file(path) if path.is_file() else LabQuestions(lab, ())
    if solutions is not None and (Path(solutions) / lab).is_dir():
        questions = join_cells(questions, Path(solutions) / lab)
    return questions


def load_questions_file(path: Path) -> LabQuestions:
    """Read and check one rubric file; RubricError names what is wrong."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise RubricError(f"{path}: cannot be read ({error})") from None
    except tomllib.TOMLDecodeError as error:
        raise RubricError(f"{path}: not valid TOML ({error})") from None
    lab = data.get("lab")
    if lab != Path(path).stem:
        raise RubricError(f"{path}: lab = {lab!r}, but the file is named for {Path(path).stem!r}")
    _only(data, {"lab", "question"}, f"{path}")
    questions = tuple(_question(lab, entry, f"{path}: question {index + 1}")
                      for index, entry in enumerate(data.get("question", [])))
    seen: set[tuple[str, str]] = set()
    for question in questions:
        if (question.notebook, question.grade_id) in seen:
            raise RubricError(f"{path}: grade_id {question.grade_id!r} is used twice in {question.notebook}")
        seen.add((question.notebook, question.grade_id))
    return LabQuestions(lab, questions, Path(path))


def join_cells(questions: LabQuestions, lab_dir: Path) -> LabQuestions:
    """Each question with its prompt and model answer from ``lab_dir/<notebook>.ipynb``, after checking
    that rubrics and written answer cells match one to one, with the same points."""
    where = questions.path or f"{questions.lab} (no rubric file)"
    found: dict[tuple[str, str], tuple[str, str, float]] = {}
    for notebook_path in sorted(Path(lab_dir).glob("*.ipynb")):
        found.update(_written_cells(notebook_path))
    joined = []
    for question in questions.questions:
        cell = found.pop((question.notebook, question.grade_id), None)
        if cell is None:
            raise RubricError(f"{where}: {question.key}: no written answer cell {question.grade_id!r} in "
                              f"{Path(lab_dir) / question.notebook}.ipynb (a Markdown cell with nbgrader's "
                              "grade and solution set: autograde.authoring.written_question makes one)")
        prompt, model_answer, points = cell
        if not math.isclose(points, question.points, abs_tol=POINTS_TOLERANCE):
            raise RubricError(f"{where}: {question.key}: the criteria add up to {question.points:g} points, the "
                              f"answer cell in {question.notebook}.ipynb is worth {points:g}")
        joined.append(replace(question, prompt=prompt, model_answer=model_answer))
    if found:
        names = ", ".join(f"{notebook}/{grade_id}" for notebook, grade_id in sorted(found))
        raise RubricError(f"{where}: no rubric for the written answer cell(s) {names}: add a [[question]] for each")
    return LabQuestions(questions.lab, tuple(joined), questions.path)


def _written_cells(path: Path) -> dict[tuple[str, str], tuple[str, str, float]]:
    """{(notebook, grade_id): (prompt, model answer, points)} of one solution notebook's written questions."""
    from course_lib.handin.notebooks import is_written_answer

    cells = json.loads(Path(path).read_text(encoding="utf-8")).get("cells", [])
    prompts = {cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"): _source(cell) for cell in cells}
    found = {}
    for cell in cells:
        if not is_written_answer(cell):
            continue
        meta = cell["metadata"]["nbgrader"]
        grade_id = meta.get("grade_id", "")
        prompt = PROMPT_LEAD.sub("", prompts.get(f"{grade_id}_prompt", "")).strip()
        found[(path.stem, grade_id)] = (prompt, _source(cell).strip(), float(meta.get("points") or 0))
    return found


# --------------------------------------------------------------------------------------------
# The rules, one field at a time
# --------------------------------------------------------------------------------------------

QUESTION_FIELDS = {"grade_id", "notebook", "notes", "criteria"}
CRITERION_FIELDS = {"id", "points", "text", "partial"}


def _question(lab: str, entry: dict, where: str) -> WrittenQuestion:
    moved = sorted({"prompt", "model_answer", "place", "points"} & set(entry))
    if moved:
        raise RubricError(f"{where}: {', '.join(moved)}: these live in the solution notebook's cells (the prompt "
                          "cell and the answer cell's source and points), not in the rubric file")
    _only(entry, QUESTION_FIELDS, where)
    grade_id = _text(entry, "grade_id", where)
    where = f"{where} ({grade_id})"
    if not GRADE_ID.match(grade_id):
        raise RubricError(f"{where}: grade_id must look like written_<name> (lower case, digits, _)")
    notebook = _notebook(entry, where)
    criteria = tuple(_criterion(item, f"{where}: criterion {index + 1}")
                     for index, item in enumerate(_list(entry, "criteria", where)))
    if not 1 <= len(criteria) <= MAX_CRITERIA:
        raise RubricError(f"{where}: {len(criteria)} criteria; give 1 to {MAX_CRITERIA} (the number keys tick them)")
    ids = [criterion.id for criterion in criteria]
    if len(set(ids)) != len(ids):
        raise RubricError(f"{where}: criterion ids repeat: {', '.join(sorted({i for i in ids if ids.count(i) > 1}))}")
    return WrittenQuestion(lab, notebook, grade_id, criteria, notes=_text(entry, "notes", where, required=False))


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


def _notebook(entry: dict, where: str) -> str:
    notebook = _text(entry, "notebook", where)
    if not NOTEBOOK.match(notebook):
        raise RubricError(f"{where}: notebook {notebook!r} must be a chapter's file name without .ipynb, like "
                          "03_decode (lower case, digits, _ and -)")
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


# --------------------------------------------------------------------------------------------
# Adding a question to a notebook
# --------------------------------------------------------------------------------------------

def insert_question(notebook, grade_id: str, points: float, prompt: str, model_answer: str,
                    place: Placement) -> int:
    """Insert a written question's two cells (``authoring.written_question``) into ``notebook`` (nbformat)
    at ``place``; returns the index of the prompt cell. Its rubric goes into ``<lab>.toml``."""
    from autograde.authoring import written_question

    taken = {cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") for cell in notebook.cells}
    if grade_id in taken or f"{grade_id}_prompt" in taken:
        raise RubricError(f"{grade_id} is already a cell of this notebook")
    index = place.index_in(notebook.cells)
    notebook.cells[index:index] = written_question(grade_id, points, prompt, model_answer)
    return index
