"""Each kernel limit tried by breaking it, in a real sandboxed kernel: the sandbox pays, not the grader.

Small limits keep the tests cheap (a 512 MB memory limit, 64 processes, a 64 MB scratch disk): a
memory hog spread over processes, a process storm, a disk filler, a single huge file, an output
flood through print and through file descriptor 1, a kernel that stops itself and then is sent a
large request, a lent model asked for too much, and the relay folder a student tries to redirect.
The CPU-time limit takes longer to reach and is in ``make test-full``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from autograde.edition import build_edition
from course_lib.runner.limits import KernelLimits, MiB
from course_lib.runner.sandbox import NONE, detect_isolation
from course_lib.runner.student import KernelDied, StudentKernel

pytestmark = pytest.mark.slow
ISOLATION = detect_isolation()
needs_sandbox = pytest.mark.skipif(ISOLATION.name == NONE, reason=f"no sandbox here: {ISOLATION.description}")
SMALL = dict(memory=512 * MiB, processes=64, disk=64 * MiB, file=8 * MiB, output=256 << 10, stream=32 << 10)


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    folder = tmp_path_factory.mktemp("edition")
    build_edition(folder, ["lab01-text-to-tensors"])
    return folder


@pytest.fixture
def kernel(edition, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    with StudentKernel(edition=edition, workdir=workdir, limits=KernelLimits(**SMALL)) as started:
        yield started


def run(kernel, source: str, timeout: float = 30) -> list[dict]:
    return kernel.run_cell(source, timeout)["outputs"]


def text(outputs) -> str:
    return "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")


def error(outputs) -> str:
    errors = [o for o in outputs if o["output_type"] == "error"]
    return f"{errors[-1]['ename']}: {errors[-1]['evalue']}" if errors else ""


def test_a_memory_hog_spread_over_processes_is_stopped_with_the_reason(kernel):
    started = time.monotonic()
    with pytest.raises(KernelDied, match="memory limit of 512 MB reached"):
        run(kernel, "import os, time\nfor _ in range(6):\n    if os.fork() == 0:\n        block = bytearray(200 << 20)\n"
                    "        time.sleep(60)\n        os._exit(0)\ntime.sleep(60)", timeout=60)
    assert time.monotonic() - started < 30
    assert not kernel.alive


def test_shared_memory_no_data_limit_counts_is_counted_too(kernel):
    """mmap(MAP_SHARED) escapes RLIMIT_DATA and tmpfs sizes: the watchdog counts it as memory."""
    with pytest.raises(KernelDied, match="memory limit of 512 MB reached"):
        run(kernel, "import mmap, time\nblock = mmap.mmap(-1, 900 << 20)\nfor offset in range(0, 900 << 20, 4096):\n"
                    "    block[offset] = 1\ntime.sleep(60)", timeout=60)


def test_one_allocation_past_the_limit_fails_in_the_students_code_only(kernel):
    assert "MemoryError" in error(run(kernel, "block = bytearray(2 << 30)"))
    assert text(run(kernel, "print('still here')")) == "still here\n"


@needs_sandbox
def test_a_process_storm_stops_at_the_process_limit(kernel):
    """Forks past the limit fail in the student's code; a kernel that reaches the limit is stopped."""
    started = time.monotonic()
    with pytest.raises(KernelDied, match="process limit of 64 reached"):
        run(kernel, "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                    "        time.sleep(0.01)", timeout=60)
    assert time.monotonic() - started < 30
    assert not kernel.alive and kernel.uid is not None
    from course_lib.runner.watchdog import kernel_processes, wait_for_exit

    assert wait_for_exit(kernel_processes(None, kernel.uid), 5), "every process of the kernel's user id is gone"


@needs_sandbox
def test_the_disk_and_file_size_limits_hold_and_the_grader_disk_is_untouched(kernel, tmp_path):
    full = error(run(kernel, "with open('fill', 'wb') as f:\n    for _ in range(200):\n        f.write(b'x' * (1 << 20))\n"
                             "        f.flush()"))
    assert "No space left on device" in full or "File too large" in full, full
    run(kernel, "import os\nos.remove('fill')")
    assert "File too large" in error(run(kernel, "open('/tmp/big', 'wb').write(b'x' * (9 << 20))"))
    printed = text(run(kernel, "import shutil\nprint(shutil.disk_usage('/tmp').total // (1 << 20))"))
    assert int(printed) <= 64
    assert not any(path.stat().st_size > (1 << 20) for path in tmp_path.rglob("*") if path.is_file())


@needs_sandbox
def test_a_flood_of_empty_files_is_stopped(kernel):
    """Empty files cost no bytes but kernel memory each: the scratch folder holds a bounded number."""
    with pytest.raises(KernelDied, match="files in the scratch folder reached"):
        run(kernel, "import os\nos.makedirs('many', exist_ok=True)\nfor index in range(200_000):\n"
                    "    open(f'many/{index}', 'w').close()\nimport time\ntime.sleep(30)", timeout=120)


def test_an_output_flood_keeps_its_head_and_tail_in_bytes(kernel):
    outputs = run(kernel, "print('HEAD' + 'x' * (50 << 20) + 'TAIL')\nimport os\nos.write(1, b'FD' * (10 << 20))\n"
                          "from IPython.display import display\ndisplay({'image/png': 'A' * (20 << 20)}, raw=True)")
    size = len(json.dumps(outputs))
    assert size < 400 << 10, size
    printed = text(outputs)
    assert printed.startswith("HEAD") and "bytes of printed output cut here" in printed
    assert "removed: a cell keeps at most" in printed


def test_a_kernel_that_stops_itself_cannot_stall_a_write(kernel):
    run(kernel, "import os, signal, threading\n"
                "def stop_soon(data):\n"
                "    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGSTOP)).start()\n"
                "    return len(data)")
    stop_soon = kernel.lookup("stop_soon")
    kernel.set_deadline(5)
    assert stop_soon(b"x") == 1
    time.sleep(1)
    started = time.monotonic()
    kernel.set_deadline(3)
    with pytest.raises(KernelDied):
        stop_soon(b"x" * (8 << 20))   # larger than any pipe buffer: the write itself would block
    assert time.monotonic() - started < 3 + 10 + 5
    assert not kernel.alive


def test_a_lent_model_refuses_more_work_than_a_check_needs(kernel):
    import torch

    from autograde.testcells import run_test_cell
    from course_lib.checks import share

    class Config:
        vocab_size, max_position_embeddings = 100, 4096

    class CountingModel:
        def __init__(self):
            self._model = self
            self.config = Config()
            self.tokens = 0

        def __call__(self, input_ids, positions=None, attention=None, logits_indices=None):
            self.tokens += torch.as_tensor(input_ids).numel()
            return torch.zeros(1, 100)

    run(kernel, "def overload(model):\n    import torch\n    for ids in ([1] * 6000, [5] * 10):\n        try:\n"
                "            model(torch.tensor(ids), logits_indices=torch.arange(100_000))\n"
                "        except ValueError as error:\n            print('refused:', error)\n"
                "    return model(torch.tensor([1, 2, 3]))\n")
    model = CountingModel()
    namespace = {"lent": share, "model": model}
    outputs = run_test_cell("result = overload(lent(model, '__call__'))", kernel, namespace, timeout=30)
    printed = text(outputs)
    assert not error(outputs), outputs
    assert printed.count("refused:") == 2 and "1 to 1024 tokens" in printed and "logits_indices" in printed
    assert model.tokens == 3, "only the call within bounds ran in the grader"


@needs_sandbox
def test_a_students_link_never_redirects_the_relay_socket(kernel, tmp_path):
    target = tmp_path / "grader-side"
    target.mkdir()
    run(kernel, f"import os\nos.symlink({str(target)!r}, '.course-net')")
    url = kernel.expose_url("http://127.0.0.1:45678/")
    assert url == "http://127.0.0.1:45678/"
    assert list(target.iterdir()) == []
    assert kernel.net_dir is not None and (kernel.net_dir / "45678.sock").exists()
    assert not (tmp_path / "work" / ".course-net").exists(), "the kernel's folder is its own tmpfs"


def test_hidden_checks_show_neither_what_the_student_printed_nor_its_errors(kernel):
    from autograde.testcells import run_test_cell

    run(kernel, "seen = []\ndef echo(x):\n    seen.append(x)\n    print('ARG', x)\n"
                "    if x == 'SECRET-INPUT-2':\n        raise ValueError('leaked ' + ' '.join(seen))\n    return x")
    cell = ("assert echo('visible') == 'visible'\n### BEGIN HIDDEN TESTS\nassert echo('SECRET-INPUT-1') == 'SECRET-INPUT-1'\n"
            "echo('SECRET-INPUT-2')\n### END HIDDEN TESTS\n")
    outputs = run_test_cell(cell, kernel, {}, timeout=30)
    everything = json.dumps(outputs)
    assert "ARG visible" in everything, "visible checks keep the student's output"
    assert "SECRET-INPUT" not in everything and "leaked" not in everything
    assert "output printed by your code during hidden checks is not shown" in everything
    assert "during a hidden check" in error(outputs)


def test_an_assertion_error_the_student_raises_in_a_hidden_check_keeps_its_message_back(kernel):
    """The test code's own assert keeps its message; an AssertionError from the student's code is the
    student's message (here the hidden input), so in a hidden check it is withheld like any other error."""
    from autograde.testcells import run_test_cell

    run(kernel, "def judge(x):\n    if x != 'visible':\n        raise AssertionError('leaked ' + x)\n    return x")
    hidden = "assert judge('visible') == 'visible'\n### BEGIN HIDDEN TESTS\njudge('SECRET-INPUT-3')\n### END HIDDEN TESTS\n"
    outputs = run_test_cell(hidden, kernel, {}, timeout=30)
    assert "SECRET-INPUT" not in json.dumps(outputs) and "leaked" not in json.dumps(outputs)
    assert "during a hidden check" in error(outputs)
    own = "### BEGIN HIDDEN TESTS\nassert judge('visible') == 'other', 'the hidden check says so'\n### END HIDDEN TESTS\n"
    assert "the hidden check says so" in error(run_test_cell(own, kernel, {}, timeout=30))


def test_a_failing_check_in_a_hidden_region_names_neither_the_inputs_nor_the_expected_value(kernel):
    """A check's message names the call and the expected value (Lab 0.1's count_parameters said
    ``count_parameters(ModelConfig(layers=32, hidden=4096, ...))  expected: 6738415616`` to any wrong
    answer); in a hidden region it is one fixed sentence. Nor can the answer pick the name of the error
    it raises (``[ValueError, KeyError, ...][x]``), or print only on some inputs (the note is always there)."""
    from autograde.testcells import HIDDEN_CHECK_FAILED, run_test_cell

    run(kernel, "def count(config):\n    return 5\ndef picky(x):\n    if x != 'visible':\n"
                "        raise [KeyError, ValueError, OSError][len(x) % 3]()\n    return x\n")
    hidden = ("from course_lib.checks import expect_equal\nexpect_equal(count('visible'), 5, 'count(visible)')\n"
              "### BEGIN HIDDEN TESTS\nexpect_equal(count('SECRET-CONFIG-4096'), 6738415616, "
              "'count(SECRET-CONFIG-4096)')\n### END HIDDEN TESTS\n")
    outputs = run_test_cell(hidden, kernel, {}, timeout=30)
    assert "SECRET" not in json.dumps(outputs) and "6738415616" not in json.dumps(outputs)
    assert error(outputs) == f"CheckFailed: {HIDDEN_CHECK_FAILED}"
    picked = run_test_cell("### BEGIN HIDDEN TESTS\npicky('SECRET-INPUT-5')\n### END HIDDEN TESTS\n", kernel, {},
                           timeout=30)
    assert "OSError" not in json.dumps(picked) and error(picked).startswith("Error: your code raised an exception")
    silent = run_test_cell("### BEGIN HIDDEN TESTS\nassert count(1) == 5\n### END HIDDEN TESTS\n", kernel, {},
                           timeout=30)
    assert "during hidden checks is not shown" in text(silent), "the note does not depend on a print"


FORGED_KERNEL_DIED = """
_kept = []
def remember(x):
    _kept.append(x)
    return x
class _Forged(Exception):
    pass
_Forged.__module__ = "course_lib"
_Forged.__qualname__ = "runner.student.KernelDied"
def leak():
    raise _Forged("limit of " + repr(_kept) + " files in the scratch folder reached")
"""


def test_a_forged_kernel_died_is_the_students_error_and_carries_nothing_out(kernel):
    """The grader rebuilt a student class that named itself course_lib + runner.student.KernelDied as its own
    KernelDied and trusted its words (a shape it kept from deaths it made itself): a direct call after the
    hidden checks carried their inputs out. Now it is the student's error, withheld like any other, and the
    kernel, which did not die, goes on."""
    from autograde.testcells import run_test_cell
    from autograde.withhold import HiddenChecks, STUDENT_RAISED

    run(kernel, FORGED_KERNEL_DIED)
    hidden = HiddenChecks()
    run_test_cell("### BEGIN HIDDEN TESTS\nassert remember('SECRET-INPUT-6') == 'SECRET-INPUT-6'\n"
                  "### END HIDDEN TESTS\n", kernel, {}, timeout=30, hidden_checks=hidden)
    outputs = run_test_cell("leak()\n", kernel, {}, timeout=30, hidden_checks=hidden)
    assert "SECRET" not in json.dumps(outputs)
    assert error(outputs) == f"Error: {STUDENT_RAISED}"
    assert kernel.ended() is None and kernel.alive
    visible = run_test_cell("leak()\n", kernel, {}, timeout=30)   # before any hidden check: the student's own words
    assert error(visible).startswith("runner.student.KernelDied: limit of ")


def test_a_huge_range_costs_the_cell_not_the_graders_memory(kernel):
    """range(40_000_000) crosses as three ints; the batching check's list() of it took 1.5 GB of the grader's
    memory. It is refused on receipt: the cell fails with a sentence, the kernel goes on."""
    import resource

    from autograde.testcells import run_test_cell

    run(kernel, "def policy(state):\n    return range(40_000_000)\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outputs = run_test_cell("from course_lib.checks.batching import _admitted_ids\n"
                            "_admitted_ids(policy(None), 'static_batching(state)')\n", kernel, {}, timeout=30)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert "ValueTooLarge: your code gave the grader a range of 40,000,000 items" in error(outputs)
    assert grown_mb < 300, f"the grader's peak memory grew {grown_mb:.0f} MB"
    assert kernel.ended() is None and run(kernel, "print('still here')")[0]["text"] == "still here\n"


def test_an_os_error_the_students_code_raises_does_not_end_the_kernel(kernel):
    """A FileNotFoundError from the kernel was taken for a broken pipe: the grader killed the kernel."""
    from course_lib import gguf_file

    with pytest.raises(OSError) as raised:
        kernel.build(gguf_file.open_gguf, ("/no/such/model.gguf",), {})
    assert not isinstance(raised.value, KernelDied) and kernel.ended() is None and kernel.alive


GRADER_CPU_OVERRUN = """
import resource, sys, types
from autograde.grader_limits import apply_grader_memory, cell_cpu_budget
apply_grader_memory(types.SimpleNamespace(grader_memory=1 << 30))
try:
    bytearray(2 << 30)
except MemoryError:
    print("the grader's allocation past its limit failed", flush=True)
with cell_cpu_budget(types.SimpleNamespace(grader_cpu=1)):
    sum(range(10 ** 11))   # one C call: no alarm, no Python handler runs until it returns
print("not reached", flush=True)
"""


def test_the_grading_process_has_limits_of_its_own(kernel, tmp_path):
    """A check that allocates past the grader's memory limit fails its cell with the grader's sentence; a C call
    that runs past the CPU budget of a test cell ends the grading process, which the grader reports as such."""
    import signal
    import subprocess
    import sys

    from autograde.grader_limits import stopped_by_limit
    from autograde.testcells import run_test_cell

    outputs = run_test_cell("ballast = bytearray(1 << 42)\n", kernel, {}, timeout=30)   # in the grader: 4 TB
    assert error(outputs).startswith("GraderOutOfMemory: the grader's memory limit of 8 GB was reached")
    run = subprocess.run([sys.executable, "-c", GRADER_CPU_OVERRUN], capture_output=True, text=True, timeout=120)
    assert "the grader's allocation past its limit failed" in run.stdout and "not reached" not in run.stdout
    assert run.returncode == -signal.SIGXCPU
    assert "CPU-time limit of 10 min per test cell" in stopped_by_limit(run.returncode, KernelLimits())


def test_require_own_implementation_asks_the_kernel_where_the_code_comes_from(kernel):
    from course_lib.checks import CheckFailed, register_reference_names, require_own_implementation

    register_reference_names("merge_pair")
    run(kernel, "from course_lib import tokenizer\nimport functools\n"
                "borrowed = tokenizer.merge_pair\npartial = functools.partial(tokenizer.merge_pair)\n"
                "def wrapper(ids, pair, new_id):\n    return tokenizer.merge_pair(ids, pair, new_id)\n"
                "def own(ids, pair, new_id):\n    return [new_id if tuple(ids[i:i+2]) == pair else ids[i] for i in range(len(ids))]")
    for name in ("borrowed", "partial", "wrapper"):
        with pytest.raises(CheckFailed, match="reference"):
            require_own_implementation(kernel.lookup(name), name)
    require_own_implementation(kernel.lookup("own"), "own")


@pytest.mark.full
def test_a_cpu_burner_is_stopped_at_the_cpu_time_limit(edition, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    with StudentKernel(edition=edition, workdir=workdir, limits=KernelLimits(cpu=10)) as kernel:
        with pytest.raises(KernelDied, match="CPU-time limit of 10 s reached"):
            run(kernel, "while True:\n    pass", timeout=300)


def test_a_killed_grader_takes_its_kernels_with_it(edition, tmp_path):
    """The kernel ends when the grader's end of its pipes closes, whatever the student's code does."""
    import subprocess
    import sys

    workdir = tmp_path / "work"
    workdir.mkdir()
    script = (f"from pathlib import Path\nfrom course_lib.runner.student import StudentKernel\n"
              f"k = StudentKernel(edition=Path({str(edition)!r}), workdir=Path({str(workdir)!r}))\nk.start()\n"
              "k.endpoint.deadline = None\nprint(k.process.pid, flush=True)\n"
              "k.endpoint.request('exec_cell', 'while True:\\n    pass')\n")
    grader = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    kernel_pid = int(grader.stdout.readline())
    time.sleep(1)
    grader.kill()
    grader.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and Path(f"/proc/{kernel_pid}").exists():
        time.sleep(0.2)
    state = Path(f"/proc/{kernel_pid}/status").read_text().split("State:")[1].split()[0] \
        if Path(f"/proc/{kernel_pid}").exists() else "gone"
    assert state in ("gone", "Z"), f"the kernel outlived its grader ({state})"
