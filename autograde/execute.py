"""nbgrader's execute step, rebuilt so that student code never runs where the checks live.

``IsolatedExecute`` replaces nbgrader's ``Execute`` in ``nbgrader autograde``. For each notebook it
starts a student kernel (``StudentKernel``: the student edition of ``course_lib``, a scratch copy
of the submission's folder, the sandbox) and walks the cells in order:

- an ordinary or answer cell runs in the kernel, with the per-cell time limit;
- a test cell (its instructor source, hidden tests included, already restored by nbgrader's
  ``OverwriteCells``) runs here in the grader (``testcells.run_test_cell``) against handles to the
  student's objects, knowing the code cells sent to the kernel before it (``GradedSources``: Lab 0.3's
  compile check compiles the kernels' source from them, in the sandbox, ``kernel_compile``);
- a test cell that the *source* notebook marks as GPU-only is not run on a machine without a
  GPU: it gets a "skipped: needs a GPU" error (0 points in nbgrader's gradebook; our report leaves
  it out of max_score). The submitted notebook's metadata is never consulted for this.

If the kernel dies, the cell where it happened says so and every later code cell is marked as not
run; the cells before keep their results. The kernel runs under the run's ``KernelLimits``: a
kernel stopped at a limit says which in the cell where it happened ("memory limit of 4 GB
reached"), an error raised in the student's code by a limit (a failed allocation, a full disk, a
refused fork) gets the same sentence in front of its message, and once the notebook's wall-time
limit has passed, the cells left are not run. Every cell's outputs are bounded again here, whatever
the kernel sent (``bounded.bound_outputs``). Once the notebook's first hidden check has started, the
cells after it show only what the grader knows (``withhold``): the answer may have kept the hidden
inputs to print, raise or return later; that includes how the kernel died (its exit code, a
message it forged on the channel) and how long each cell took (no timings are recorded from
then on). The settings come from the environment the grader
gives the nbgrader process (``GradingSettings``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade
from traitlets import Integer

from autograde.grader_limits import apply_grader_memory
from autograde.kernel_compile import sandboxed_worker
from autograde.lost_points import NotebookRecord, record_path
from autograde.results import student_error_name
from autograde.testcells import run_test_cell
from autograde.withhold import HiddenChecks, withhold_cell_outputs, withhold_death
from course_lib.checks.graded_sources import GradedSources, graded_sources
from course_lib.runner.bounded import bound_outputs, output_size
from course_lib.runner.limits import KernelLimits, format_bytes
from course_lib.runner.student import KernelDied, StudentKernel
from course_lib.runner.watchdog import limit_message, name_the_limit

__all__ = ["GradingSettings", "IsolatedExecute", "cell_needs_gpu"]

KERNEL_DIED = "KernelDied"
NOTEBOOK_OUTPUTS = 10   # a notebook keeps at most ten cells' worth of output (the output limit each)
NOT_RUN = "NotRun"
NEEDS_GPU = "NeedsGPU"


# The grader's own code, hidden from the student's kernel like the instructor's course_lib (the
# sandbox hides the whole checkout when it runs from one; this covers an installed autograde too).
_PLATFORM = Path(__file__).resolve().parent


def cell_needs_gpu(cell) -> bool:
    """A test cell is GPU-only when its metadata says so (``authoring.tests(..., needs_gpu=True)``)."""
    return bool(cell.get("metadata", {}).get("course", {}).get("needs_gpu"))


@dataclass
class GradingSettings:
    """What the grader tells the nbgrader process about the student kernels (through the environment)."""

    edition: Path                      # the folder holding the student edition's course_lib
    workspace: Path                    # the nbgrader course root (source/ holds the hidden tests)
    hidden: list[Path] = field(default_factory=list)
    gpu: bool = False
    threads: int | None = None
    limits: KernelLimits = field(default_factory=KernelLimits)

    ENVIRONMENT = "COURSE_GRADING_SETTINGS"

    def to_environment(self) -> dict[str, str]:
        data = {"edition": str(self.edition), "workspace": str(self.workspace),
                "hidden": [str(path) for path in self.hidden], "gpu": self.gpu, "threads": self.threads,
                "limits": self.limits.as_dict()}
        return {self.ENVIRONMENT: json.dumps(data)}

    @classmethod
    def from_environment(cls) -> "GradingSettings":
        raw = os.environ.get(cls.ENVIRONMENT)
        if not raw:
            raise RuntimeError(f"{cls.ENVIRONMENT} is not set: IsolatedExecute runs only under `course grade`")
        data = json.loads(raw)
        return cls(Path(data["edition"]), Path(data["workspace"]), [Path(p) for p in data.get("hidden", [])],
                   bool(data.get("gpu")), data.get("threads"), KernelLimits.from_dict(data.get("limits", {})))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _record_timing(cell, started: str, finished: str) -> None:
    """When the cell ran, under the keys nbclient's ``record_timing`` uses (so tools that read one read both)."""
    cell.metadata["execution"] = {"iopub.status.busy": started, "shell.execute_reply": finished}


def _error(ename: str, evalue: str) -> dict:
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}


class IsolatedExecute(NbGraderPreprocessor):
    """Execute a submitted notebook: student code in an isolated kernel, test cells in the grader."""

    timeout = Integer(120, help="Time limit per cell, in seconds.").tag(config=True)

    def preprocess(self, nb, resources):
        settings = GradingSettings.from_environment()
        apply_grader_memory(settings.limits)   # the test cells run here: this process gets limits of its own
        lab, name = resources["nbgrader"]["assignment"], resources["nbgrader"]["notebook"]
        source_cells = self._source_test_cells(settings.workspace, lab, name)
        folder = Path(resources.get("metadata", {}).get("path") or ".")
        student = resources["nbgrader"]["student"]
        with tempfile.TemporaryDirectory(prefix="course-kernel-") as scratch:
            workdir = Path(scratch) / lab
            self._stage_workdir(workdir, settings.workspace / "submitted" / student / lab, folder)
            hidden = [*settings.hidden, settings.workspace, folder.resolve(), _PLATFORM]
            kernel = StudentKernel(edition=settings.edition, workdir=workdir, hidden=hidden,
                                   threads=settings.threads, gpu=settings.gpu, limits=settings.limits)
            self._compile_worker = sandboxed_worker(hidden)
            try:
                kernel.start()
            except KernelDied as error:
                detail = kernel.stderr_tail().strip().splitlines()[-3:]
                self._mark_not_run(nb.cells, f"the student kernel could not start: {error} {' / '.join(detail)}")
                kernel.close()
                return nb, resources
            record = NotebookRecord()
            try:
                self._run_cells(nb, kernel, source_cells, settings.gpu, settings.limits, record)
            finally:
                kernel.close()
                record.write(record_path(settings.workspace, student, lab, name))
        return nb, resources

    @staticmethod
    def _stage_workdir(workdir: Path, submitted: Path, autograded: Path) -> None:
        """The kernel's folder: what the student handed in, nothing of the grader's.

        The notebooks nbgrader prepared for grading hold the restored test cells, hidden tests
        included, so they never go in: the kernel gets the notebooks as submitted and the other
        files of the submission.
        """
        source = submitted if submitted.is_dir() else autograded
        shutil.copytree(source, workdir, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "*.ipynb"))
        if submitted.is_dir():
            for notebook in submitted.glob("*.ipynb"):
                shutil.copy2(notebook, workdir / notebook.name)

    @staticmethod
    def _source_test_cells(workspace: Path, lab: str, name: str) -> dict[str, dict]:
        """The instructor's test cells by grade_id (GPU-only flags are read from here, not the submission)."""
        path = workspace / "source" / lab / f"{name}.ipynb"
        notebook = nbformat.read(path, as_version=4)
        return {cell.metadata["nbgrader"]["grade_id"]: cell for cell in notebook.cells if is_grade(cell)}

    def _run_cells(self, nb, kernel: StudentKernel, source_cells: dict[str, dict], gpu: bool,
                   limits: KernelLimits, record: NotebookRecord | None = None) -> None:
        namespace: dict = {}
        ran: list[str] = []   # the code cells sent to the kernel, in order: what a compile check reads
        hidden_checks = HiddenChecks()
        died_in: int | None = None
        died_why = ""
        count = 0
        notebook_output = 0
        notebook_ends = time.monotonic() + limits.notebook
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            if died_in is not None:
                cell.outputs = [nbformat.from_dict(_error(
                    NOT_RUN, f"not run: the kernel died in an earlier cell (cell {died_in + 1}{died_why})"))]
                cell.execution_count = None
                continue
            left = notebook_ends - time.monotonic()
            if left <= 0:
                cell.outputs = [nbformat.from_dict(_error(
                    NOT_RUN, f"not run: {limit_message('notebook', limits)} before this cell"))]
                cell.execution_count = None
                continue
            count += 1
            started = _now()
            try:
                outputs = self._run_cell(cell, kernel, source_cells, namespace, gpu, index, min(self.timeout, left),
                                         hidden_checks, ran, record)
            except KernelDied:   # made by the grader, which recorded why (kernel.ended() below says it)
                outputs = []
            peak = kernel.watchdog.peak.processes if kernel.watchdog is not None else 0
            outputs = [name_the_limit(output, limits, peak)
                       for output in bound_outputs(outputs, limits.output, limits.stream)]
            death = kernel.ended()   # the grader's record, never an output's name or words
            if death is not None:
                outputs = [output for output in outputs if output.get("ename") != KERNEL_DIED]
                if record is not None and hidden_checks.started:   # how it died is withheld: the record keeps it
                    record.answer_cell_error(index, cell.source, _error(KERNEL_DIED, death))
                # how the kernel died is the student's to choose (os._exit(41)) once hidden checks have run
                outputs.append(_error(KERNEL_DIED, withhold_death(death, limits) if hidden_checks.started else death))
            kept = sum(output_size(output) for output in outputs)
            if notebook_output + kept > NOTEBOOK_OUTPUTS * limits.output:   # the whole page stays bounded too
                outputs = [o for o in outputs if o.get("output_type") == "error"] + [{
                    "output_type": "stream", "name": "stdout",
                    "text": f"[this cell's output ({kept:,} bytes) is not kept: the notebook's outputs passed "
                            f"{NOTEBOOK_OUTPUTS} x {format_bytes(limits.output)}]\n"}]
            notebook_output += sum(output_size(output) for output in outputs)
            if not hidden_checks.started:   # from then on, how long a cell took is the answer's to choose
                _record_timing(cell, started, _now())
            if death is not None:
                died_in = index
                self.log.warning("kernel died in cell %d; grading what ran before it", index + 1)
                reason = withhold_death(death, limits) if hidden_checks.started else death
                died_why = f": {reason.split(': the kernel')[0].split('; the cells')[0][:300]}"
            for output in outputs:
                if output.get("output_type") == "execute_result":
                    output["execution_count"] = count
            cell.outputs = [nbformat.from_dict(output) for output in outputs]
            cell.execution_count = count

    def _run_cell(self, cell, kernel: StudentKernel, source_cells: dict[str, dict], namespace: dict, gpu: bool,
                  index: int, timeout: float, hidden_checks: HiddenChecks, ran: list[str],
                  record: NotebookRecord | None = None) -> list[dict]:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        # A cell marked as a test that is none of the lab's (a copy of a test cell, which keeps its
        # metadata, or one the student made: nbgrader took its unknown or duplicate grade_id away) is
        # the student's code: it runs in the kernel like any other, never here.
        if is_grade(cell) and grade_id in source_cells:
            source_cell = source_cells[grade_id]
            if cell_needs_gpu(source_cell) and not gpu:
                return [_error(NEEDS_GPU, "skipped: needs a GPU (this machine has none; not counted in max_score)")]
            def keep_for_instructor(error: BaseException) -> None:
                if record is not None:
                    record.test_cell_error(grade_id, error, cell.source, hidden_started=hidden_checks.started)

            # A compile check reads the kernels' source from the cells this grader sent, never from the kernel.
            with graded_sources(GradedSources(tuple(ran), self._compile_worker)):
                return run_test_cell(cell.source, kernel, namespace, timeout=timeout,
                                     label=f"<test cell {grade_id}>", limits=kernel.limits,
                                     hidden_checks=hidden_checks, on_error=keep_for_instructor)
        ran.append(cell.source)
        outputs = kernel.run_cell(cell.source, timeout)["outputs"]
        if not hidden_checks.started:
            return _students_outputs(bound_outputs(outputs, kernel.limits.output, kernel.limits.stream))
        if record is not None:   # the notebook shows only the grader's note from here: the record keeps the error
            for output in outputs:
                if output.get("output_type") == "error":
                    record.answer_cell_error(index, cell.source, output)
        return withhold_cell_outputs(outputs, kernel.limits, timed_out=kernel.timed_out, timeout=timeout)

    @staticmethod
    def _mark_not_run(cells, reason: str) -> None:
        for cell in cells:
            if cell.cell_type == "code":
                cell.outputs = [nbformat.from_dict(_error(NOT_RUN, reason))]


def _students_outputs(outputs: list[dict]) -> list[dict]:
    """A cell's outputs from the kernel (already bounded), every error in them the student's: one that
    bears a name of the grader's verdicts (a class the student named KernelDied) says whose it is."""
    return [{**output, "ename": student_error_name(str(output.get("ename", "")))}
            if output.get("output_type") == "error" else output for output in outputs]
