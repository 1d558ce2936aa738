"""Grading a whole class on Dask: one task per (student, lab), every result kept the moment it arrives.

``grade`` finds the submissions, skips those already graded from the same bytes (``resume``), and
sends the rest to Dask workers (``cluster``): a task carries the submission's snapshot, the lab's
sources travel once per lab (scattered to every worker). A lab whose source notebooks have GPU-only
test cells goes to workers started with a ``GPU`` resource when there are any; otherwise a CPU worker
grades it and those cells are "skipped: needs a GPU", as on one machine.

Results are written by this process alone, as they arrive (``store.ResultStore``). Tasks are sent
a few at a time (twice the number of workers), so a class of a thousand is never read into memory
at once and each snapshot is taken just before its task is sent; when a result arrives the folder is
hashed again and a change is reported (the grade is of the snapshot). A worker that dies mid-task
has its task retried elsewhere at most twice by the scheduler, then the submission is reported as
"grading failed" (and an earlier complete result of it is kept). A run that is stopped keeps every
result it finished; ``--resume`` goes on from there.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from autograde.cluster import ALLOWED_FAILURES, Connection, WorkerInfo, check_workers, connect, start_local
from autograde.grade_lab import Discovery, Submission, discover_submissions, locked_when_grading
from autograde.layout import GradingError, Workspace, gpu_available
from autograde.ledger import Ledger
from autograde.progress import Progress
from autograde.results import NEEDS_GPU, LabResult, missing_notebook
from autograde.snapshot import (LabBundle, Snapshot, SnapshotError, course_fingerprint, folder_digest,
                                lab_bundle, lab_needs_gpu, prepared_workspace_files, take_snapshot)
from autograde.store import ResultStore, StoredResult
from course_lib.runner.limits import KernelLimits

__all__ = ["GradeRun", "grade"]

NO_WORKER_PATIENCE_S = 120   # a remote cluster left without workers this long stops the run (results kept)
POLL_S = 2.0
MAX_SENDS = 3                 # a task the scheduler drops (its worker and its data lost) is sent again, this often in all


@dataclass
class GradeRun:
    """What a run did: counts for the summary, the problems to report, how it was graded."""

    total: int = 0                  # submissions found (after --lab / --student)
    graded: int = 0                 # graded in this run
    failed: int = 0                 # grading itself failed (worker died 3 times, unreadable folder, ...)
    resumed: int = 0                # skipped: already graded from the same bytes
    problems: list[str] = field(default_factory=list)
    discovery_problems: list[str] = field(default_factory=list)
    cluster: str = ""
    gpu_route: bool = False         # GPU-only cells of this run ran on GPU workers
    interrupted: bool = False
    workers: list[WorkerInfo] = field(default_factory=list)


def _key(snapshot_digest: str, bundle: LabBundle, fingerprint: str, timeout: int,
         limits: KernelLimits | None = None) -> dict:
    """What a result depends on: if all of it is unchanged, grading again would give the same result."""
    return {"submission": snapshot_digest, "lab_sources": bundle.digest, "grader": fingerprint, "timeout": timeout,
            "limits": (limits or KernelLimits()).as_dict()}


def _unchanged(stored: StoredResult, submission: Submission, bundles: dict[str, LabBundle], fingerprint: str,
               timeout: int, limits: KernelLimits | None = None) -> bool:
    current = _key(folder_digest(submission.folder) or "", bundles[submission.lab], fingerprint, timeout, limits)
    return {name: value for name, value in stored.key.items() if name != "gpu"} == current


def _failure_result(submission: Submission, bundle: LabBundle, reason: str) -> LabResult:
    result = LabResult(submission.student, submission.lab, problems=[reason])
    for name in bundle.notebook_names():
        source = nbformat.reads(bundle.files[f"{name}.ipynb"].decode("utf-8"), as_version=4)
        result.notebooks.append(missing_notebook(name, source, "grading failed", reason))
    return result


def _describe(exception: BaseException) -> str:
    from distributed import KilledWorker

    if isinstance(exception, KilledWorker):
        deaths = getattr(exception, "allowed_failures", ALLOWED_FAILURES) + 1
        return (f"grading failed: the worker grading it died {deaths} times (retried on other "
                "workers; does this submission exhaust memory or crash the grader?)")
    return f"grading failed: {type(exception).__name__}: {exception}"


def kept_receipt(meta: dict | None, previous: StoredResult | None, digest: str | None) -> dict | None:
    """``meta`` (intake's word on a hand-in), with the LMS's receipt time an earlier run recorded for the same
    files when this run was given none (``--received`` is not needed again on every run)."""
    if meta is None or meta.get("received") or previous is None or not (previous.hand_in or {}).get("received"):
        return meta
    if previous.key.get("submission") != digest:
        return meta   # other files: another hand-in, another receipt
    return {**meta, "received": previous.hand_in["received"], "received_from": previous.hand_in.get("received_from")}


def record_grading(ledger: Ledger, stored: StoredResult) -> None:
    """A ``graded`` event in the ledger for each result written: the history of regrades (the result
    file holds only the latest), with the version of the tests and of the grader it was graded with."""
    result = stored.result
    cells = {f"{notebook.name}/{cell.grade_id}": cell.points for notebook in result.notebooks for cell in notebook.cells}
    ledger.record("graded", lab=result.lab, student=result.student, value=result.score, who="course grade",
                  why="graded" if stored.complete else "grading failed",
                  data={"max_score": result.max_score, "complete": stored.complete, "cells": cells,
                        "tests": str(stored.key.get("lab_sources", ""))[:16],
                        "grader": str(stored.key.get("grader", "")), "graded_at": stored.graded_at})


class _Dispatcher:
    """Sends tasks, receives results, writes them, keeps the progress (one per run)."""

    def __init__(self, connection: Connection, store: ResultStore, bundles: dict[str, LabBundle],
                 gpu_labs: set[str], run: GradeRun, progress: Progress, *, timeout: int, fingerprint: str,
                 known_labs: list[str], hidden: list[str], gpu_resource_route: bool, local: bool,
                 limits: KernelLimits | None = None, hand_ins: dict[str, dict] | None = None):
        self.connection, self.client = connection, connection.client
        self.store, self.bundles, self.gpu_labs = store, bundles, gpu_labs
        self.run, self.progress = run, progress
        self.timeout, self.fingerprint, self.known_labs, self.hidden = timeout, fingerprint, known_labs, hidden
        self.gpu_resource_route = gpu_resource_route
        self.local = local
        self.limits = limits or KernelLimits()
        self.hand_ins = hand_ins or {}   # "student/lab" -> intake's word on the hand-in (StoredResult.hand_in)
        self.ledger = Ledger(store.out_dir)
        self.scattered: dict[str, object] = {}
        self.in_flight: dict[object, tuple[Submission, Snapshot, bool]] = {}
        self.sends: dict[tuple[str, str], int] = {}   # (student, lab) -> times sent
        self.no_workers_since: float | None = None

    # ---- sending ------------------------------------------------------------------------------

    def _bundle_future(self, lab: str):
        future = self.scattered.get(lab)
        if future is None or future.status != "finished":
            future = self.client.scatter(self.bundles[lab], broadcast=True, hash=False)
            self.scattered[lab] = future
        return future

    def _workers_per_host(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for details in self.connection.workers().values():
            host = details.get("host", "")
            counts[host] = counts.get(host, 0) + 1
        return counts

    def submit(self, submission: Submission, snapshot: Snapshot | None = None, *, gpu: bool | None = None) -> None:
        from autograde.worker import GradingTask, grade_task

        if snapshot is None:
            try:
                snapshot = take_snapshot(submission.student, submission.lab, submission.folder)
            except SnapshotError as error:
                self._record_failure(submission, f"not graded: {error}")
                return
        use_gpu = self.gpu_resource_route and submission.lab in self.gpu_labs if gpu is None else gpu
        task = GradingTask(submission.student, submission.lab, snapshot.files, snapshot.digest, self.timeout,
                           tuple(locked_when_grading(submission.lab, self.known_labs)), tuple(self.hidden),
                           self._workers_per_host(), self.limits.as_dict())
        self.sends[(submission.student, submission.lab)] = self.sends.get((submission.student, submission.lab), 0) + 1
        future = self.client.submit(grade_task, task, self._bundle_future(submission.lab), pure=False,
                                    key=f"grade-{submission.lab}-{submission.student}-{uuid.uuid4().hex[:8]}",
                                    resources={"GPU": 1} if use_gpu else None)
        self.in_flight[future] = (submission, snapshot, use_gpu)

    # ---- receiving ----------------------------------------------------------------------------

    def receive(self, future) -> None:
        submission, snapshot, _ = self.in_flight.pop(future)
        if future.status == "finished":
            try:
                answer = future.result()
            except Exception as error:  # the answer could not be transferred back
                self._record_failure(submission, _describe(error))
                return
            self._record(submission, snapshot, answer)
            return
        try:
            error = future.exception()
        except Exception as cancelled:  # CancelledError: the scheduler dropped the task
            error = cancelled
        self._record_failure(submission, _describe(error))

    def _record(self, submission: Submission, snapshot: Snapshot, answer: dict) -> None:
        result = LabResult.from_dict(answer["result"])
        now = folder_digest(submission.folder)
        if now != snapshot.digest:
            taken = datetime.fromtimestamp(snapshot.taken_at, timezone.utc).isoformat(timespec="seconds")
            message = (f"the submission folder changed while it was being graded; this grade is of the files as "
                       f"they were at {taken} (run again with --resume to grade the new files)")
            result.problems.append(message)
            self.progress.note(f"note: {submission.student}/{submission.lab}: {message}")
        if answer.get("fingerprint") != self.fingerprint:  # a worker replaced mid-run by one with other code
            result.problems.append(f"graded by course_lib {answer.get('fingerprint')}, not {self.fingerprint}")
        stored = StoredResult(result, _key(snapshot.digest, self.bundles[submission.lab], self.fingerprint,
                                           self.timeout, self.limits),
                              complete=True, worker=answer.get("worker"), elapsed_s=answer.get("elapsed_s"),
                              graded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        stored.key["gpu"] = bool(answer.get("gpu"))
        stored.hand_in = kept_receipt(self.hand_ins.get(f"{submission.student}/{submission.lab}"),
                                      self.store.load(submission.lab, submission.student), snapshot.digest)
        self.store.save(stored, feedback=answer.get("feedback", {}), autograded=answer.get("autograded", {}),
                        instructor=answer.get("instructor") or {})
        record_grading(self.ledger, stored)
        self.run.graded += 1
        self.progress.finished(submission.student, submission.lab,
                               f"{result.score:g}/{result.max_score:g} ({result.percent:.0f}%)",
                               elapsed=answer.get("elapsed_s"), worker=answer.get("worker"))

    def _record_failure(self, submission: Submission, reason: str) -> None:
        self.run.failed += 1
        previous = self.store.load(submission.lab, submission.student)
        if previous is not None and previous.complete:
            self.run.problems.append(f"{submission.student}/{submission.lab}: {reason}; kept the earlier result "
                                     f"(graded {previous.graded_at})")
        else:
            result = _failure_result(submission, self.bundles[submission.lab], reason)
            failed = StoredResult(result, {}, complete=False,
                                  graded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                  hand_in=self.hand_ins.get(f"{submission.student}/{submission.lab}"))
            self.store.save(failed)
            record_grading(self.ledger, failed)
            self.run.problems.append(f"{submission.student}/{submission.lab}: {reason}")
        self.progress.finished(submission.student, submission.lab, reason, failed=True)

    def resend_dropped(self) -> int:
        """Tasks the scheduler cancelled (a killed worker took the last copy of their lab's sources with
        it, so it forgot them) go out again with the sources sent anew; after ``MAX_SENDS`` the
        submission is reported not graded. Never a reason to stop the run. Returns how many were dropped."""
        dropped = [f for f in self.in_flight if f.cancelled()]
        for future in dropped:
            submission, snapshot, gpu = self.in_flight.pop(future)
            if self.sends.get((submission.student, submission.lab), 0) >= MAX_SENDS:
                self._record_failure(submission, f"not graded: the Dask scheduler dropped its task {MAX_SENDS} times "
                                                 "(workers lost while grading it); run again with --resume")
                continue
            self.progress.note(f"note: {submission.student}/{submission.lab}: the Dask scheduler dropped its task "
                               "(a worker was lost); sent again")
            self.submit(submission, snapshot, gpu=gpu)
        return len(dropped)

    # ---- the cluster's health -------------------------------------------------------------------

    def check_health(self) -> None:
        """Called when nothing arrived for a while: workers gone, GPU workers gone."""
        workers = self.connection.workers()
        if not workers and not self.local:
            self.no_workers_since = self.no_workers_since or time.monotonic()
            waited = time.monotonic() - self.no_workers_since
            if waited > NO_WORKER_PATIENCE_S:
                raise GradingError(f"every Dask worker left (waited {waited:.0f} s for one to come back); the "
                                   f"{self.run.graded} results finished are kept: run again with --resume")
            return
        self.no_workers_since = None
        if not any(self.in_flight[f][2] for f in self.in_flight):
            return
        if any(float((details.get("resources") or {}).get("GPU", 0)) >= 1 for details in workers.values()):
            return
        # The GPU workers are gone: grade what waits for them on a CPU worker (GPU cells skipped), never hang.
        for future in [f for f, (_, _, gpu) in self.in_flight.items() if gpu]:
            submission, snapshot, _ = self.in_flight.pop(future)
            future.cancel()
            self.progress.note(f"note: no GPU worker left; {submission.student}/{submission.lab} goes to a CPU "
                               "worker (its GPU-only cells are skipped)")
            self.submit(submission, snapshot, gpu=False)

    # ---- the loop -----------------------------------------------------------------------------

    def run_all(self, todo: list[Submission], window: int) -> None:
        from distributed import wait
        from distributed.client import FuturesCancelledError

        pending = list(reversed(todo))
        while pending or self.in_flight:
            while pending and len(self.in_flight) < window:
                self.submit(pending.pop())
            if not self.in_flight:
                continue
            try:
                done, _ = wait(list(self.in_flight), timeout=POLL_S, return_when="FIRST_COMPLETED")
            except TimeoutError:
                done = set()
            except FuturesCancelledError:   # wait() raises when any future was dropped by the scheduler
                if not self.resend_dropped():
                    time.sleep(POLL_S)   # not yet marked here: look again shortly, never spin
                continue
            for future in done:
                self.receive(future)
            if not done:
                self.check_health()


def _prepare_labs(solutions_dir: Path, bundles: dict[str, LabBundle], labs: list[str], scratch: Path) -> None:
    """generate_assignment for each lab here, once: a broken lab stops the run before any worker starts,
    and the workers receive the prepared workspace with the lab's bundle instead of running nbgrader."""
    from autograde.release import generate_release

    for lab in labs:
        workspace = Workspace.create(scratch / f"prepare-{lab}")
        generate_release(solutions_dir, lab, workspace)
        bundles[lab] = dataclasses.replace(bundles[lab], prepared=prepared_workspace_files(workspace.root, lab,
                                                                                 bundles[lab].digest))


def grade(submissions_dir: Path, out_dir: Path, *, solutions_dir: Path, known_labs: list[str],
          only_lab: str | None = None, only_student: str | None = None, timeout: int = 120, jobs: int = 1,
          cluster: str | None = None, resume: bool = False, connect_timeout: float = 10,
          progress_stream=None, terminal: bool | None = None, on_start=None, run: GradeRun | None = None,
          limits: KernelLimits | None = None, hand_ins: dict[str, dict] | None = None) -> GradeRun:
    """Grade the submissions in ``submissions_dir`` into ``out_dir/results`` (see the module docstring).

    ``jobs``: local worker processes (ignored with ``cluster``, a scheduler address). ``on_start(run)`` is
    called once the workers are checked (the command prints what it got); ``run`` is filled in as grading
    goes, so a caller still has the counts when this raises. ``hand_ins``: {"student/lab": what intake
    learned of the hand-in}, kept in its result file (``StoredResult.hand_in``), also by a result that
    ``resume`` keeps. The outputs for the class (grades.csv, report.json, gradebook.db) are written by
    ``outputs.write_class_outputs`` afterwards.
    """
    import tempfile

    limits = limits or KernelLimits()
    if jobs < 1:
        raise GradingError(f"--jobs must be at least 1, got {jobs}")
    if timeout < 1:
        raise GradingError(f"--timeout must be at least 1, got {timeout}")
    discovery: Discovery = discover_submissions(submissions_dir, known_labs, only_lab)
    submissions = discovery.submissions
    if only_student is not None:
        submissions = [s for s in submissions if s.student == only_student]
        if not submissions:
            students = sorted({s.student for s in discovery.submissions})
            shown = ", ".join(students[:10]) + (" ..." if len(students) > 10 else "")
            raise GradingError(f"--student {only_student!r}: no submission of that student in {submissions_dir}"
                               + (f" (for {only_lab})" if only_lab else "") + f"; students found: {shown or 'none'}")
    run = run if run is not None else GradeRun()
    run.total, run.discovery_problems = len(submissions), list(discovery.problems)
    out_dir.mkdir(parents=True, exist_ok=True)
    store = ResultStore(out_dir)
    fingerprint = course_fingerprint()
    labs = sorted({s.lab for s in submissions})
    bundles = {lab: lab_bundle(solutions_dir, lab) for lab in labs}
    gpu_labs = {lab for lab, bundle in bundles.items() if lab_needs_gpu(bundle)}

    todo, maybe = [], []   # maybe: graded before without a GPU, in a lab with GPU cells
    for submission in submissions:
        stored = store.load(submission.lab, submission.student) if resume else None
        if stored is not None and stored.complete and _unchanged(stored, submission, bundles, fingerprint, timeout,
                                                                 limits):
            meta = kept_receipt((hand_ins or {}).get(f"{submission.student}/{submission.lab}"), stored,
                                stored.key.get("submission"))
            if meta is not None and meta != stored.hand_in:   # the same files, newly known LMS facts
                stored.hand_in = meta
                store.save(stored)
            if submission.lab in gpu_labs and not stored.key.get("gpu"):
                maybe.append(submission)   # graded again only if this run can reach a GPU
            else:
                run.resumed += 1
            continue
        todo.append(submission)
    if not cluster and maybe and not gpu_available():
        run.resumed += len(maybe)   # this machine has no GPU either: grading again would change nothing
        maybe = []
    if not todo and not maybe:
        return run

    with tempfile.TemporaryDirectory(prefix="course-grading-") as scratch:
        connection = (connect(cluster, timeout=connect_timeout) if cluster
                      else start_local(min(jobs, len(todo) + len(maybe))))
        progress = None
        try:
            _prepare_labs(solutions_dir, bundles, sorted({s.lab for s in todo + maybe}), Path(scratch))
            run.cluster = connection.description
            run.workers = check_workers(connection, fingerprint)
            gpu_resource_route = bool(cluster) and any(w.gpu_resource for w in run.workers)
            run.gpu_route = gpu_resource_route or (not cluster and gpu_available())
            if maybe and run.gpu_route:
                todo += maybe
            else:
                run.resumed += len(maybe)
            if on_start:
                on_start(run)
            for worker in run.workers:
                if worker.gpu_resource and not worker.gpu:
                    run.problems.append(f"worker {worker.address} was started with --resources GPU=1 but torch sees "
                                        "no CUDA device there: its GPU-only cells are skipped")
            hidden = [str(Path(p).resolve()) for p in (out_dir, submissions_dir, solutions_dir)]
            progress = Progress(len(todo), stream=progress_stream, terminal=terminal)
            dispatcher = _Dispatcher(connection, store, bundles, gpu_labs, run, progress, timeout=timeout,
                                     fingerprint=fingerprint, known_labs=known_labs, hidden=hidden,
                                     gpu_resource_route=gpu_resource_route, local=not cluster, limits=limits,
                                     hand_ins=hand_ins)
            window = max(4, 2 * len(run.workers))
            try:
                dispatcher.run_all(todo, window)
            except KeyboardInterrupt:
                run.interrupted = True
                for future in list(dispatcher.in_flight):
                    future.cancel()
        finally:
            if progress is not None:
                progress.close()
            connection.close()
    return run


def gpu_cells_skipped(results: list[LabResult]) -> int:
    """How many test cells were reported "skipped: needs a GPU" across ``results``."""
    return sum(cell.status == NEEDS_GPU for result in results for nb in result.notebooks for cell in nb.cells)
