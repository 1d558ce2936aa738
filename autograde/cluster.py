"""The Dask cluster that grades: a local one for ``--jobs N``, or the instructor's for ``--cluster``.

``--jobs N`` starts a ``LocalCluster`` of N worker processes with one thread each (one submission
at a time per worker; each submission runs its own kernel and nbgrader processes). ``--cluster
tcp://HOST:PORT`` connects to a scheduler started with ``dask scheduler``, whose workers were started
on the lab machines with ``dask worker tcp://HOST:PORT --nworkers 2 --nthreads 1`` (and
``--resources GPU=1`` on a machine with a GPU).

Before any work is sent, every worker is asked what it has (``check_workers``): the course installed,
with exactly the grader's code (``snapshot.course_fingerprint``), a GPU or not. A worker without the
course, or with other code, stops the run with a message naming it: grades from two versions of the
checks would not be comparable. A worker that dies mid-task has its task retried on another worker,
at most twice (the scheduler's ``allowed-failures``, set to 2 here), then the submission is reported
as "grading failed".
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
from dataclasses import dataclass, field

from autograde.layout import GradingError

__all__ = ["ALLOWED_FAILURES", "Connection", "WorkerInfo", "check_workers", "connect", "judge_workers",
           "start_local", "validate_address"]

ALLOWED_FAILURES = 2      # a task whose worker died is retried at most this many times
PROBE_TIMEOUT_S = 120     # how long the workers may take to answer the check (they import course_lib)
ADDRESS = re.compile(r"^(?:(tcp|tls|ucx|inproc)://)?(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


@dataclass
class WorkerInfo:
    address: str
    host: str
    resources: dict[str, float] = field(default_factory=dict)
    gpu: bool = False            # torch sees a CUDA device on it
    fingerprint: str | None = None
    isolation: str | None = None

    @property
    def gpu_resource(self) -> bool:
        return self.resources.get("GPU", 0) >= 1


@dataclass
class Connection:
    """A client and, for ``--jobs``, the local cluster it owns (closed with the connection)."""

    client: object
    cluster: object | None
    description: str

    def close(self) -> None:
        for closable in (self.client, self.cluster):
            if closable is None:
                continue
            try:
                closable.close()
            except Exception:  # closing a cluster whose workers already died must not hide the real error
                pass

    def workers(self) -> dict[str, dict]:
        return dict(self.client.scheduler_info(n_workers=-1).get("workers", {}))


def validate_address(address: str) -> str:
    """``tcp://HOST:PORT`` (or ``HOST:PORT``), with a clear error naming --cluster for anything else."""
    match = ADDRESS.match(address.strip())
    if not match or not 0 < int(match.group(3)) < 65536:
        raise GradingError(f"--cluster must be a scheduler address like tcp://10.0.0.5:8786 (what `dask scheduler` "
                           f"prints), got {address!r}")
    return address.strip() if match.group(1) else f"tcp://{address.strip()}"


def _quiet_dask_logs() -> None:
    # A worker that dies is expected here (the grader handles it); Dask's tracebacks would bury the table.
    for name in ("distributed", "distributed.nanny", "distributed.scheduler", "distributed.worker",
                 "distributed.core", "distributed.comm", "distributed.client"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def start_local(jobs: int) -> Connection:
    """A LocalCluster of ``jobs`` single-threaded worker processes on 127.0.0.1, no dashboard."""
    import dask
    from distributed import Client, LocalCluster

    if jobs < 1:
        raise GradingError(f"--jobs must be at least 1, got {jobs}")
    _quiet_dask_logs()
    with dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES}):
        cluster = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=None, memory_limit=0, silence_logs=logging.CRITICAL)
        client = Client(cluster)
    return Connection(client, cluster, f"{jobs} local worker{'s' if jobs > 1 else ''}")


def connect(address: str, *, timeout: float = 10, wait_for_workers: float = 30) -> Connection:
    """Connect to an instructor-started scheduler; a clear error within ``timeout`` s if it cannot."""
    from distributed import Client

    address = validate_address(address)
    _quiet_dask_logs()
    try:
        client = Client(address, timeout=timeout)
    except (OSError, TimeoutError) as error:
        raise GradingError(f"could not reach the Dask scheduler at {address} within {timeout:g} s ({error}). "
                           "Is `dask scheduler` running there, and is the port open from this machine?") from None
    connection = Connection(client, None, f"the Dask scheduler at {address}")
    try:
        client.wait_for_workers(1, timeout=wait_for_workers)
    except Exception:
        connection.close()
        raise GradingError(f"the Dask scheduler at {address} has no workers (waited {wait_for_workers:g} s). "
                           f"Start some on the lab machines: dask worker {address} --nworkers 2 --nthreads 1"
                           ) from None
    _limit_retries(client)
    return connection


def _limit_retries(client) -> None:
    """Make the instructor's scheduler retry a task whose worker died at most ALLOWED_FAILURES times."""
    limit = ALLOWED_FAILURES

    def set_allowed_failures(dask_scheduler=None):
        dask_scheduler.allowed_failures = limit
        return dask_scheduler.allowed_failures

    try:
        client.run_on_scheduler(set_allowed_failures)
    except Exception:  # a scheduler that refuses remote functions keeps its own setting (Dask's default is 3)
        pass


def _probe():
    """Runs on each worker; defined so that it unpickles even where course_lib is not installed."""

    def probe():
        try:
            from autograde.worker import probe_worker
        except Exception as error:  # ImportError where the course is not installed
            return {"error": f"{type(error).__name__}: {error}"}
        return probe_worker()

    return probe


def check_workers(connection: Connection, fingerprint: str) -> list[WorkerInfo]:
    """Every worker's course, code and GPU; a GradingError naming the workers that cannot grade."""
    scheduler_workers = connection.workers()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(connection.client.run, _probe(), on_error="return")
        try:
            answers = future.result(timeout=PROBE_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            raise GradingError(f"the workers did not answer the grader's check within {PROBE_TIMEOUT_S} s") from None
    return judge_workers(answers, scheduler_workers, fingerprint)


def judge_workers(answers: dict, scheduler_workers: dict[str, dict], fingerprint: str) -> list[WorkerInfo]:
    """The workers that can grade, from their answers to the probe; a GradingError naming any that cannot."""
    workers, problems = [], []
    for address, answer in sorted(answers.items()):
        details = scheduler_workers.get(address, {})
        if isinstance(answer, BaseException):
            problems.append(f"{address}: the check failed ({type(answer).__name__}: {answer})")
            continue
        if "error" in answer:
            problems.append(f"{address}: course_lib is not installed there ({answer['error']}); "
                            "install the course (pip install -e <checkout>) in the worker's environment")
            continue
        if answer["fingerprint"] != fingerprint:
            problems.append(f"{address}: has course_lib {answer['fingerprint']}, this grader has {fingerprint} "
                            "(install the same commit of the course on every worker)")
            continue
        workers.append(WorkerInfo(address, details.get("host") or address.split("://")[-1].rsplit(":", 1)[0],
                                  dict(details.get("resources") or {}), bool(answer["gpu"]), answer["fingerprint"],
                                  answer.get("isolation")))
    if problems:
        raise GradingError("some Dask workers cannot grade:\n  " + "\n  ".join(problems))
    if not workers:
        raise GradingError("no Dask worker answered the grader's check")
    return workers
