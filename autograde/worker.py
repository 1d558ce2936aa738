"""What runs on a Dask worker: grade one student's submission of one lab, return plain data.

A task (``GradingTask``) carries the submission's bytes; the lab's sources arrive as a
``LabBundle`` (scattered once per lab, so each worker receives them once). Each worker process
prepares a lab once and keeps it (``PreparedLab``: the sources written out, the workspace where
nbgrader's ``generate_assignment`` ran (sent with the bundle, or run here), the student edition of
``course_lib`` for that lab built), keyed by the digest of the lab's sources and the time limit, then grades student
after student in it with the same ``Grader`` as a single machine: the student's code runs in an
isolated kernel on the student edition, the test cells in an nbgrader process of the grader's.

The answer is plain data (``LabResult.as_dict``, feedback HTML by notebook, the autograded
notebooks' bytes, sanitized for formgrader like the feedback: ``feedback.reviewable_notebook``; the
instructor's record of the lost points: ``lost_points``), so the machine that asked can write it where
it belongs. Nothing of one
student is left behind in the workspace once the answer is built, except the gradebook's rows.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograde.snapshot import LabBundle, course_fingerprint

__all__ = ["GradingTask", "PreparedLab", "grade_task", "probe_worker"]


@dataclass(frozen=True)
class GradingTask:
    """One (student, lab): the submission as bytes and the settings it is graded under."""

    student: str
    lab: str
    files: dict[str, bytes] = field(repr=False)   # name -> bytes: the notebooks and timestamp.txt
    digest: str
    timeout: int
    locked_labs: tuple[str, ...]                    # labs the student edition stubs (this lab and later ones)
    hidden: tuple[str, ...] = ()                    # the instructor's folders, hidden from kernels where they exist
    workers_per_host: dict[str, int] = field(default_factory=dict)   # to share a host's cores among kernels
    limits: dict[str, int] = field(default_factory=dict)            # KernelLimits.as_dict() (empty: the defaults)


@dataclass
class PreparedLab:
    """A lab made ready on this worker process: sources, nbgrader workspace, student edition."""

    lab: str
    root: Path
    solutions_dir: Path
    edition: Path
    workspace: object  # layout.Workspace

    @property
    def private(self) -> Path:
        """Everything here but the edition is the grader's: kernels never see it."""
        return self.root / "private"


_PREPARED: dict[tuple[str, str, int, tuple[str, ...]], PreparedLab] = {}
_ROOT: Path | None = None


_WORKER_FOLDER = re.compile(r"course-worker-(\d+)-[A-Za-z0-9_]+")


def _worker_root() -> Path:
    global _ROOT
    if _ROOT is None:
        _remove_folders_of_dead_workers(Path(tempfile.gettempdir()))
        _ROOT = Path(tempfile.mkdtemp(prefix=f"course-worker-{os.getpid()}-"))
        atexit.register(shutil.rmtree, _ROOT, True)
    return _ROOT


def _remove_folders_of_dead_workers(parent: Path) -> list[Path]:
    """Remove the folders of grading workers that no longer run; the folders removed.

    A worker removes its folder when it exits, but not when it is killed (the out-of-memory killer,
    a lost node, a test that kills one): the folder keeps the lab's solutions and hidden tests on
    the machine. The next worker to start there removes it: a folder of this user's whose process
    id no longer exists.
    """
    removed = []
    for folder in parent.glob("course-worker-*"):
        match = _WORKER_FOLDER.fullmatch(folder.name)
        if not match or folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
            continue
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        except (PermissionError, OverflowError):
            pass  # the process id is in use (another user's process): not ours to judge
    return removed


def prepared_lab(bundle: LabBundle, timeout: int, locked_labs: tuple[str, ...]) -> PreparedLab:
    """This process's prepared copy of the lab, made on first use (generate_assignment, edition)."""
    from autograde.edition import build_edition
    from autograde.layout import Workspace
    from autograde.release import generate_release
    from course_lib.runner.sandbox import fill_shared_cache

    key = (bundle.lab, bundle.digest, int(timeout), tuple(locked_labs))
    if key in _PREPARED:
        return _PREPARED[key]
    fill_shared_cache()   # before the first kernel: graded kernels only read the cache
    root = _worker_root() / f"{bundle.lab}-{bundle.digest[:12]}-{int(timeout)}-{len(_PREPARED)}"
    solutions_dir = root / "private" / "solutions"
    bundle.write(solutions_dir)
    workspace = Workspace.create(root / "private" / "workspace", timeout=timeout)
    if not bundle.write_prepared(workspace.root):   # prepared by the sender: nbgrader has nothing to do
        generate_release(solutions_dir, bundle.lab, workspace)   # raises GradingError if the lab is broken
    edition = root / "edition"
    build_edition(edition, list(locked_labs), grading=True)
    _PREPARED[key] = PreparedLab(bundle.lab, root, solutions_dir, edition, workspace)
    return _PREPARED[key]


def _worker_address() -> str:
    try:
        from distributed import get_worker

        return get_worker().address
    except Exception:  # not on a Dask worker (called directly, as the tests and the benchmark may)
        return f"local-{os.getpid()}"


def _kernel_threads(task: GradingTask, address: str) -> int | None:
    """Math threads per kernel: this host's cores shared among its grading workers (None when alone)."""
    host = address.split("://")[-1].rsplit(":", 1)[0]
    workers_here = task.workers_per_host.get(host, 1)
    if workers_here <= 1:
        return None
    return max(1, (os.cpu_count() or 1) // workers_here)


def grade_task(task: GradingTask, bundle: LabBundle) -> dict:
    """Grade one submission on this worker; returns plain data (see the module docstring)."""
    from autograde.execute import GradingSettings
    from autograde.feedback import instructor_markdown, reviewable_notebook
    from autograde.grade_lab import Grader, Submission
    from autograde.layout import gpu_available
    from course_lib.runner.limits import KernelLimits

    started = time.monotonic()
    if bundle.lab != task.lab:
        raise ValueError(f"task for {task.lab} was given the sources of {bundle.lab}")
    lab = prepared_lab(bundle, task.timeout, task.locked_labs)
    address = _worker_address()
    gpu = gpu_available()
    incoming = lab.private / "incoming" / task.student / task.lab
    out_dir = lab.private / "out"
    workspace = lab.workspace
    try:
        if incoming.exists():
            shutil.rmtree(incoming)
        incoming.mkdir(parents=True)
        for name, data in task.files.items():
            if "/" in name or name.startswith("."):
                raise ValueError(f"unexpected file name in a submission: {name!r}")
            (incoming / name).write_bytes(data)
        hidden = [Path(path) for path in task.hidden if Path(path).exists()] + [lab.private]
        threads = _kernel_threads(task, address)
        workspace.kernel_threads = threads
        settings = GradingSettings(lab.edition, workspace.root, hidden, gpu, threads, KernelLimits.from_dict(task.limits))
        grader = Grader(lab.solutions_dir, out_dir, workspace, task.lab, settings, one_process=True)
        [result] = grader.grade_all([Submission(task.student, task.lab, incoming)], release=False)
        feedback = {}
        for notebook in result.notebooks:
            if notebook.feedback:
                feedback[notebook.name] = (out_dir / notebook.feedback).read_text(encoding="utf-8")
        autograded_dir = workspace.path("autograded", task.student, task.lab)
        # For formgrader, which renders them in the instructor's Jupyter server: sanitized like the feedback.
        autograded = {path.stem: reviewable_notebook(path.read_bytes(), instructor_markdown(
            workspace.path("source", task.lab, path.name))) for path in sorted(autograded_dir.glob("*.ipynb"))}
        instructor = grader.instructor_records.get(task.student, {})
    finally:
        for folder in (incoming, out_dir / "feedback" / task.student, workspace.path("submitted", task.student),
                       workspace.path("autograded", task.student), workspace.path("feedback", task.student),
                       workspace.path("instructor", task.student)):
            shutil.rmtree(folder, ignore_errors=True)
    return {"result": result.as_dict(), "feedback": feedback, "autograded": autograded, "instructor": instructor,
            "worker": address,
            "gpu": gpu, "elapsed_s": round(time.monotonic() - started, 2), "fingerprint": course_fingerprint()}


def probe_worker() -> dict:
    """What the grader checks on every worker before sending work (see ``cluster.check_workers``)."""
    from autograde.layout import gpu_available
    from course_lib.runner.sandbox import detect_isolation

    return {"fingerprint": course_fingerprint(), "gpu": gpu_available(), "cpus": os.cpu_count(),
            "isolation": detect_isolation().name}
