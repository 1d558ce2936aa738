"""Grading a class on Dask, for real, on the fixture lab: a serial run, a real scheduler with two
worker processes of which one is killed mid-run, --resume, --student, the merged gradebook, and a
worker without the course installed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from tests.grading_fixture import EXPECTED_CPU, LAB, write_fixture_lab, write_submissions

pytestmark = pytest.mark.slow
STUDENTS = ["blank", "correct", "malformed", "os-exit", "wrong-hidden"]   # a pass, a zero, a crash, a bad file
GPU = False
try:
    import torch

    GPU = torch.cuda.is_available()
except Exception:
    pass


def course(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograde.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def scores(out: Path) -> dict[str, tuple[float, float]]:
    report = json.loads((out / "report.json").read_text())
    return {entry["student"]: (entry["score"], entry["max_score"]) for entry in report["submissions"]}


def result_files(out: Path) -> dict[str, bytes]:
    return {path.stem: path.read_bytes() for path in sorted((out / "results" / LAB).glob("*.json"))}


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """The fixture lab, five of its submissions, graded by one local worker."""
    root = tmp_path_factory.mktemp("class")
    solutions_lab = write_fixture_lab(root / "solutions")
    release = course("release", "--solutions", "solutions", "--labs", "labs", cwd=root)
    assert release.returncode == 0, release.stdout + release.stderr
    everyone = root / "everyone"
    write_submissions(root / "labs" / LAB, solutions_lab, everyone)
    (root / "submissions").mkdir()
    for student in STUDENTS:
        (everyone / student).rename(root / "submissions" / student)
    run = course("grade", "submissions", "--solutions", "solutions", "--out", "serial", "--timeout", "10",
                 "--jobs", "1", cwd=root)
    assert run.returncode == 0, run.stdout + run.stderr
    return root, run


def expected(student: str) -> tuple[float, float]:
    """EXPECTED_CPU, plus the GPU check's point on a GPU for those whose ch1 runs to it with a working double()."""
    score, maximum = EXPECTED_CPU[student]
    if GPU:
        return score + (student in {"correct", "wrong-hidden"}), maximum + 1
    return score, maximum


def test_a_serial_run_grades_every_submission_once_with_progress_lines(serial):
    root, run = serial
    assert scores(root / "serial") == {student: expected(student) for student in STUDENTS}
    lines = [line for line in run.stderr.splitlines() if line.startswith("[")]
    assert len(lines) == len(STUDENTS), run.stderr
    assert sorted(line.split()[1].split("/")[0] for line in lines) == sorted(STUDENTS)
    assert lines[-1].startswith(f"[{len(STUDENTS)}/{len(STUDENTS)}]")
    assert f"graded {len(STUDENTS)} of {len(STUDENTS)}" in run.stdout
    if not GPU:
        assert f"{len(STUDENTS)} GPU-only test cells skipped" in run.stdout


def test_the_merged_gradebook_holds_every_score(serial):
    from nbgrader.api import Gradebook

    root, _ = serial
    out = root / "serial"
    report = scores(out)
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", "llm-inference-workbook") as gradebook:
        assert sorted(student.id for student in gradebook.students) == sorted(STUDENTS)
        for student in STUDENTS:
            submission = gradebook.find_submission(LAB, student)
            assert submission.score == report[student][0]
            assert not submission.needs_manual_grade
    for student in STUDENTS:
        assert sorted(p.name for p in (out / "autograded" / student / LAB).glob("*.ipynb")) == (
            ["ch2.ipynb"] if student == "malformed" else ["ch1.ipynb", "ch2.ipynb"])
    assert "c.CourseDirectory.root" in (out / "nbgrader_config.py").read_text()


def test_resume_grades_only_what_changed(serial, tmp_path):
    root, _ = serial
    import shutil

    out = tmp_path / "out"
    shutil.copytree(root / "serial", out)
    submissions = tmp_path / "submissions"
    shutil.copytree(root / "submissions", submissions)
    before = result_files(out)
    nothing = course("grade", str(submissions), "--solutions", str(root / "solutions"), "--out", str(out),
                     "--timeout", "10", "--resume", cwd=root)
    assert nothing.returncode == 0, nothing.stdout + nothing.stderr
    assert f"graded 0 of {len(STUDENTS)}, {len(STUDENTS)} already graded (--resume)" in nothing.stdout
    assert result_files(out) == before
    # one student hands in again: only that one is graded
    path = submissions / "correct" / LAB / "ch2.ipynb"
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_markdown_cell("a note added after the deadline"))
    nbformat.write(notebook, path)
    again = course("grade", str(submissions), "--solutions", str(root / "solutions"), "--out", str(out),
                   "--timeout", "10", "--resume", cwd=root)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"graded 1 of {len(STUDENTS)}, {len(STUDENTS) - 1} already graded" in again.stdout
    after = result_files(out)
    assert {s for s in STUDENTS if after[s] != before[s]} == {"correct"}
    assert scores(out) == scores(root / "serial")


def test_one_student_is_regraded_without_touching_the_others(serial, tmp_path):
    root, _ = serial
    import shutil

    out = tmp_path / "out"
    shutil.copytree(root / "serial", out)
    before = {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in (out / "results").rglob("*.json")}
    run = course("grade", "submissions", "--solutions", "solutions", "--out", str(out), "--timeout", "10",
                 "--student", "wrong-hidden", cwd=root)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "graded 1 of 1" in run.stdout
    changed = {path.stem for path, (data, mtime) in before.items()
               if path.read_bytes() != data or path.stat().st_mtime_ns != mtime}
    assert changed == {"wrong-hidden"}
    assert scores(out) == scores(root / "serial"), "the class files still hold every student"
    missing = course("grade", "submissions", "--solutions", "solutions", "--out", str(out), "--student", "nobody",
                     cwd=root, timeout=120)
    assert missing.returncode == 1 and "--student 'nobody': no submission" in missing.stderr


# ---- a real scheduler and workers on localhost --------------------------------------------------

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(command: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
                            stdin=subprocess.DEVNULL)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def dask_worker(address: str, name: str, log: Path, *extra: str) -> subprocess.Popen:
    return start([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nworkers", "1", "--nthreads", "1",
                  "--no-dashboard", "--name", name, "--memory-limit", "0", *extra], log)


def wait_for_workers(address: str, count: int, timeout: float = 120) -> dict[str, dict]:
    from distributed import Client

    with Client(address, timeout=30) as client:
        client.wait_for_workers(count, timeout=timeout)
        return client.scheduler_info(n_workers=-1)["workers"]


@pytest.fixture
def scheduler(tmp_path):
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    processes = [start([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port",
                        str(port), "--no-dashboard"], tmp_path / "scheduler.log")]
    yield address, processes, tmp_path
    for process in processes:
        stop(process)


def test_a_killed_worker_loses_no_submission(serial, scheduler):
    """Two workers; one is killed while it grades. Every submission is graded exactly once, same scores."""
    from distributed import Client

    root, _ = serial
    address, processes, logs = scheduler
    processes.append(dask_worker(address, "doomed", logs / "doomed.log"))
    processes.append(dask_worker(address, "survivor", logs / "survivor.log"))
    workers = wait_for_workers(address, 2)
    doomed_address = next(a for a, w in workers.items() if w["name"].startswith("doomed"))
    grading = subprocess.Popen([sys.executable, "-m", "autograde.cli", "grade", "submissions", "--solutions",
                                "solutions", "--out", "cluster", "--timeout", "10", "--cluster", address],
                               cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # kill the doomed worker as soon as it holds a task (its result must come from the survivor)
        killed_task = None
        with Client(address, timeout=30) as client:
            deadline = time.monotonic() + 600
            while killed_task is None and time.monotonic() < deadline and grading.poll() is None:
                busy = client.processing(workers=[doomed_address]).get(doomed_address) or []
                if busy:
                    killed_task = busy[0]
                    stop(processes[1])
                time.sleep(0.5)
        assert killed_task is not None, "the doomed worker never got a task"
        stdout, stderr = grading.communicate(timeout=900)
    finally:
        if grading.poll() is None:
            grading.kill()
    assert grading.returncode == 0, stdout + stderr
    lines = [line for line in stderr.splitlines() if line.startswith("[")]
    finished = sorted(line.split()[1].split("/")[0] for line in lines)
    assert finished == sorted(STUDENTS), "every submission is reported finished exactly once"
    assert scores(root / "cluster") == scores(root / "serial")
    records = {path.stem: json.loads(path.read_text()) for path in (root / "cluster" / "results" / LAB).glob("*.json")}
    assert sorted(records) == sorted(STUDENTS) and all(record["complete"] for record in records.values())
    killed_student = next(s for s in STUDENTS if f"-{s}-" in str(killed_task))
    assert records[killed_student]["worker"] != doomed_address, "the killed worker's task was graded elsewhere"


def test_a_worker_without_the_course_is_named(scheduler, tmp_path):
    from tests.grading_fixture import write_fixture_lab

    address, processes, logs = scheduler
    # a worker process in which `import course_lib` fails, as on a machine where it is not installed
    processes.append(start([sys.executable, "-c", "import sys; sys.modules['course_lib'] = None; "
                            "from distributed.cli.dask_worker import main; sys.argv[0] = 'dask-worker'; main()",
                            address, "--no-nanny", "--nthreads", "1", "--no-dashboard", "--name", "bare"],
                           logs / "bare.log"))
    wait_for_workers(address, 1)
    write_fixture_lab(tmp_path / "solutions")
    (tmp_path / "submissions" / "alice" / LAB).mkdir(parents=True)
    (tmp_path / "submissions" / "alice" / LAB / "ch1.ipynb").write_text("{}")
    run = course("grade", "submissions", "--solutions", "solutions", "--out", "out", "--cluster", address,
                 cwd=tmp_path, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "some Dask workers cannot grade" in run.stderr and "course_lib is not installed" in run.stderr
    assert not (tmp_path / "out" / "gradebook.db").exists()


def test_gpu_labs_go_to_gpu_workers(serial, scheduler, tmp_path):
    """The fixture lab has a GPU-only cell: with a worker started with --resources GPU=1, only it grades."""
    import shutil

    root, _ = serial
    address, processes, logs = scheduler
    processes.append(dask_worker(address, "gpu", logs / "gpu.log", "--resources", "GPU=1"))
    processes.append(dask_worker(address, "cpu", logs / "cpu.log"))
    workers = wait_for_workers(address, 2)
    gpu_address = next(a for a, w in workers.items() if w["name"].startswith("gpu"))
    submissions = tmp_path / "submissions"
    for student in ("correct", "blank", "malformed"):
        shutil.copytree(root / "submissions" / student, submissions / student)
    run = course("grade", str(submissions), "--solutions", str(root / "solutions"), "--out", str(tmp_path / "out"),
                 "--timeout", "10", "--cluster", address, cwd=root)
    assert run.returncode == 0, run.stdout + run.stderr
    records = [json.loads(p.read_text()) for p in (tmp_path / "out" / "results" / LAB).glob("*.json")]
    assert len(records) == 3 and {record["worker"] for record in records} == {gpu_address}
    if not GPU:
        assert "started with --resources GPU=1 but torch sees no CUDA device" in run.stdout
