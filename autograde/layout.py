"""Where things live: the repository's folders, the labs, and how nbgrader is run.

nbgrader's course layout is renamed for this project: its *source* folder is ``solutions/`` and
its *release* folder is ``labs/``. Submissions, autograded notebooks, feedback and the gradebook
live in a grading workspace outside git (a temporary folder unless one is given).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import course_lib
from course_lib.handin.notebooks import LAB_NAME, SAFE_ID, gpu_available  # shared with the student tools

SOLUTIONS_DIR = "solutions"
LABS_DIR = "labs"
COURSE_ID = "llm-inference-workbook"


class GradingError(RuntimeError):
    """A problem the user must fix (bad folder, unknown lab, nbgrader failure), with a clear message."""


def find_repo_root(start: Path | None = None) -> Path:
    """The checkout that holds solutions/ (the working directory or one of its parents, else the package's)."""
    candidates = []
    here = (start or Path.cwd()).resolve()
    candidates.extend([here, *here.parents])
    candidates.append(Path(course_lib.__file__).resolve().parent.parent)
    for candidate in candidates:
        if (candidate / SOLUTIONS_DIR).is_dir() and (candidate / "course_lib").is_dir():
            return candidate
    raise GradingError(
        "Could not find the course repository (a folder with solutions/ and course_lib/). "
        "Run the command inside the checkout, or pass --solutions."
    )


def list_labs(solutions_dir: Path) -> list[str]:
    """Names of the labs in a solutions folder: subfolders named lab<NN>-... holding notebooks."""
    if not solutions_dir.is_dir():
        raise GradingError(f"solutions folder {solutions_dir} does not exist")
    return sorted(
        path.name
        for path in solutions_dir.iterdir()
        if path.is_dir() and LAB_NAME.match(path.name) and any(path.glob("*.ipynb"))
    )


def resolve_labs(solutions_dir: Path, requested: str | None) -> list[str]:
    """The labs a command works on: all of them, or the one named (with a clear error if unknown)."""
    labs = list_labs(solutions_dir)
    if requested is None:
        if not labs:
            raise GradingError(f"no labs found in {solutions_dir} (expected folders like lab01-name/ with notebooks)")
        return labs
    if requested not in labs:
        known = ", ".join(labs) or "none"
        raise GradingError(f"unknown lab {requested!r}; labs in {solutions_dir}: {known}")
    return [requested]


def kernel_environment(threads: int | None = None) -> dict[str, str]:
    """Environment for notebook kernels: Triton interpreted on a CPU, quiet progress bars and hubs offline.

    ``threads`` caps the math threads of each kernel (OMP_NUM_THREADS) unless the caller's environment
    already sets them: kernels graded side by side must share the cores, or each one's PyTorch spins
    a thread per core and a small generate() runs ten times slower than alone.
    """
    env = dict(os.environ)
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        env.setdefault("OMP_NUM_THREADS", str(threads))
        env.setdefault("MKL_NUM_THREADS", str(threads))
    bin_dir = str(Path(sys.executable).parent)
    # nbgrader shells out to `alembic`, which lives next to this Python.
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    matplotlib_folder = _matplotlib_folder()
    if matplotlib_folder is not None:
        env.setdefault("MPLCONFIGDIR", str(matplotlib_folder))
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    if not gpu_available():
        env["TRITON_INTERPRET"] = "1"
    return env


def _matplotlib_folder() -> Path | None:
    """Matplotlib's settings and font cache for kernels of this Python, or None if it cannot be made.

    Not the shared ``~/.cache/matplotlib``: another install (a deleted clone's virtual environment,
    a system Python) can leave a font list there without matplotlib's bundled fonts, and then every
    plot warns "findfont: Font family ... not found" on stderr, which fails the cell.
    """
    from course_lib.disk_cache import cache_folder, fingerprint

    folder = cache_folder() / "matplotlib" / fingerprint(sys.prefix)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


_EMPTY_GRADEBOOK: list[bytes] = []   # made once per process


def _alembic_head() -> str:
    """The gradebook schema version nbgrader's migrations end at (what ``alembic heads`` prints)."""
    import nbgrader
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(Path(nbgrader.__file__).parent / "alembic"))
    return str(ScriptDirectory.from_config(config).get_current_head())


def _write_empty_gradebook(path: Path) -> None:
    if not _EMPTY_GRADEBOOK:
        from unittest import mock

        from nbgrader.api import Gradebook

        with tempfile.TemporaryDirectory(prefix="course-gradebook-") as scratch:
            database = Path(scratch) / "gradebook.db"
            with mock.patch("nbgrader.api.get_alembic_version", _alembic_head):
                Gradebook(f"sqlite:///{database}", COURSE_ID).close()
            _EMPTY_GRADEBOOK.append(database.read_bytes())
    path.write_bytes(_EMPTY_GRADEBOOK[0])


@dataclass
class Workspace:
    """An nbgrader course root: source/, release/, submitted/, autograded/, feedback/, gradebook.db."""

    root: Path
    timeout: int = 120
    kernel_threads: int | None = None  # math threads per notebook kernel (None: PyTorch's default)
    extra_environment: dict[str, str] | None = None  # e.g. the settings of the isolated kernels

    @classmethod
    def create(cls, root: Path | None = None, *, timeout: int = 120) -> "Workspace":
        root = Path(root) if root else Path(tempfile.mkdtemp(prefix="course-grading-"))
        root.mkdir(parents=True, exist_ok=True)
        workspace = cls(root=root.resolve(), timeout=timeout)
        workspace.write_config()
        workspace.create_gradebook()
        return workspace

    def create_gradebook(self) -> None:
        """An empty nbgrader gradebook (the course's row and the schema version), unless there is one.

        nbgrader makes the same file on first use, but finds the schema version by starting an
        ``alembic heads`` process (5 s, three times per grading run); here it is read in-process.
        """
        database = self.path("gradebook.db")
        if database.exists():
            return
        staging = self.path(f".gradebook.db.{os.getpid()}.tmp")
        _write_empty_gradebook(staging)
        os.replace(staging, database)

    @property
    def config_path(self) -> Path:
        return self.root / "nbgrader_config.py"

    def write_config(self) -> None:
        self.config_path.write_text(NBGRADER_CONFIG.format(root=str(self.root), course_id=COURSE_ID,
                                                           timeout=int(self.timeout)))

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def install_source(self, solutions_dir: Path, lab: str) -> None:
        """Copy solutions/<lab> into the workspace's source/ (nbgrader reads the source there)."""
        target = self.path("source", lab)
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(solutions_dir / lab, target,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))

    def run_nbgrader(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run one nbgrader command in the workspace; never raises on a non-zero exit."""
        return self.run_module("nbgrader", *args, f"--config={self.config_path}", timeout=timeout)

    def run_module(self, module: str, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
        """``python -m module args`` in the workspace, with the kernels' environment; never raises on a non-zero exit."""
        command = [sys.executable, "-m", module, *args]
        return subprocess.run(
            command,
            cwd=self.root,
            env={**kernel_environment(self.kernel_threads), **(self.extra_environment or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )


# The preprocessors named here are what make the grades trustworthy (see preprocessors.py).
NBGRADER_CONFIG = '''\
c = get_config()
c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = {course_id!r}
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.Exchange.assignment_dir = {root!r}

# Per-cell time limit; an interrupted cell fails, the rest of the notebook still runs.
c.IsolatedExecute.timeout = {timeout}

# Test cells a student deleted are put back before grading (edited ones are overwritten anyway).
c.OverwriteCells.add_missing_cells = True
c.OverwriteCellsKeepingCopies.add_missing_cells = True

# A copied test or answer cell (its metadata copied too) is the student's own cell, not a failure.
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "autograde.preprocessors.ForgetForeignCells",
    "nbgrader.preprocessors.DeduplicateIds",
    "autograde.preprocessors.ForgetForeignCells",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "autograde.preprocessors.OverwriteCellsKeepingCopies",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# Student code runs in an isolated kernel; test cells run in this (the grader's) process.
c.Autograde.autograde_preprocessors = [
    "autograde.execute.IsolatedExecute",
    "autograde.preprocessors.DemoteStderr",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.GenerateFeedback.preprocessors = [
    "autograde.preprocessors.ScrubHiddenTests",
    "autograde.feedback.SanitizeFeedback",
    "nbgrader.preprocessors.GetGrades",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
'''
