"""The student kernel as a process: cells, handles, time limits, death, and what its sandbox hides.

One student edition (every lab locked) is built for the module; each test starts its own kernel.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from autograde.edition import build_edition
from course_lib.runner.sandbox import BUBBLEWRAP, NONE, UNSHARE, Isolation, detect_isolation
from course_lib.runner.student import KernelDied, StudentKernel

pytestmark = pytest.mark.slow
ISOLATION = detect_isolation()
ALL_LABS = ["lab01-text-to-tensors", "lab02-prefill-vs-decode", "lab03-kernels", "lab04-faster-decoding",
            "lab05-serving"]


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    folder = tmp_path_factory.mktemp("edition")
    build_edition(folder, ALL_LABS)
    return folder


@pytest.fixture
def kernel(edition, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "helper.py").write_text("VALUE = 7\n")
    secret_dir = tmp_path / "instructor-secrets"
    secret_dir.mkdir()
    (secret_dir / "hidden_tests.py").write_text("ANSWER = 42\n")
    os.environ["COURSE_TEST_SECRET"] = "do-not-leak"
    try:
        with StudentKernel(edition=edition, workdir=workdir, hidden=[secret_dir]) as started:
            started.secret_dir = secret_dir
            yield started
    finally:
        os.environ.pop("COURSE_TEST_SECRET", None)


def outputs_of(kernel, source, timeout=30):
    return kernel.run_cell(source, timeout)["outputs"]


def text_of(outputs):
    return "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")


def test_cells_produce_notebook_outputs(kernel):
    outputs = outputs_of(kernel, "print('hello')\n6 * 7")
    assert text_of(outputs) == "hello\n"
    assert outputs[-1]["output_type"] == "execute_result" and outputs[-1]["data"]["text/plain"] == "42"
    plot = outputs_of(kernel, "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()")
    assert any("image/png" in o.get("data", {}) for o in plot), plot
    error = outputs_of(kernel, "1 / 0")
    assert error[-1]["output_type"] == "error" and error[-1]["ename"] == "ZeroDivisionError"
    assert text_of(outputs_of(kernel, "import helper\nprint(helper.VALUE)")) == "7\n", "files next to the notebook"


def test_the_grader_calls_student_code_through_handles(kernel):
    outputs_of(kernel, "def add(a, b):\n    print('adding', a, b)\n    return a + b\nclass Box:\n"
                       "    def __init__(self, x):\n        self.x = x\n")
    printed = []
    kernel.output_sink = printed.append
    add = kernel.lookup("add")
    assert add(2, 3) == 5 and printed == ["adding 2 3\n"]
    box = kernel.lookup("Box")(9)
    assert box.x == 9
    with pytest.raises(NameError):
        kernel.lookup("not_defined")


def test_make_builds_platform_objects_in_the_kernel(kernel):
    from course_lib.sampling import SamplingParams
    from course_lib.scheduler import Request, RequestStatus

    request = kernel.build(Request, ("r1", [1, 2, 3], SamplingParams(max_tokens=4)), {})
    assert request.status is RequestStatus.WAITING
    assert request.num_tokens == 3
    outputs_of(kernel, "def admit(request):\n    from course_lib.scheduler import RequestStatus\n"
                       "    request.status = RequestStatus.RUNNING\n")
    kernel.lookup("admit")(request)
    assert request.status is RequestStatus.RUNNING, "the student's change is visible through the handle"


def test_a_cell_past_its_limit_is_interrupted_and_the_kernel_lives_on(kernel):
    outputs = kernel.run_cell("while True:\n    pass", 2)["outputs"]
    assert outputs[-1]["ename"] == "CellTimeoutError"
    assert text_of(outputs_of(kernel, "print('still here')")) == "still here\n"


def test_a_kernel_that_ignores_interrupts_is_killed(kernel):
    source = "while True:\n    try:\n        while True:\n            pass\n    except KeyboardInterrupt:\n        pass"
    with pytest.raises(KernelDied, match="did not stop when interrupted"):
        kernel.run_cell(source, 1)
    assert not kernel.alive


def test_a_kernel_that_exits_is_reported_dead(kernel):
    with pytest.raises(KernelDied, match="exited with code 3"):
        kernel.run_cell("import os\nos._exit(3)", 10)


def test_the_kernel_imports_the_student_edition(kernel, edition):
    outputs = outputs_of(kernel, "import course_lib, course_lib.exercises as e\n"
                                 "print(course_lib.__file__)\nprint(sorted(e.locked_labs()))")
    printed = text_of(outputs).splitlines()
    assert printed[0].startswith(str(edition)), printed
    assert "lab01-text-to-tensors" in printed[1]
    environment = text_of(outputs_of(kernel, "import os\nprint(os.environ.get('COURSE_TEST_SECRET'))"))
    assert environment == "None\n", "the grader's environment does not reach the kernel"


@pytest.mark.skipif(ISOLATION.name == NONE, reason=f"no sandbox on this machine: {ISOLATION.description}")
def test_the_sandbox_hides_instructor_files_network_and_writes(kernel):
    import sys

    import course_lib

    instructor = Path(course_lib.__file__).resolve().parent
    targets = [kernel.secret_dir.parent / "escape.txt", Path(sys.prefix) / "escape.txt",
               instructor.parent / "escape.txt"]
    probe = f"""
import os, socket
results = {{}}
results['secret'] = os.listdir({str(kernel.secret_dir)!r}) if os.path.isdir({str(kernel.secret_dir)!r}) else 'absent'
results['instructor'] = os.path.exists({str(instructor / 'exercises.py')!r})
for target in {[str(t) for t in targets]!r}:
    try:
        open(target, 'w').write('x')
    except OSError:
        pass
try:
    socket.create_connection(('1.1.1.1', 80), timeout=2)
    results['network'] = 'connected'
except OSError as error:
    results['network'] = type(error).__name__
open('answer.txt', 'w').write('mine')
results['write_inside'] = open('answer.txt').read()
print(results)
"""
    printed = text_of(outputs_of(kernel, probe))
    results = eval(printed)  # noqa: S307 - our own probe's dict
    assert results["secret"] in ([], "absent"), results
    assert results["instructor"] is False, results
    for target in targets:  # a write either fails or lands in a private, throw-away file system
        assert not target.exists(), f"the kernel wrote {target} on the grader's file system"
    assert results["network"] != "connected"
    assert results["write_inside"] == "mine"


@pytest.mark.skipif(not (shutil.which("unshare") and shutil.which("setpriv") and os.geteuid() == 0),
                    reason="the unshare fallback needs util-linux's unshare and setpriv, run as root")
def test_the_unshare_fallback_isolates_too(edition, tmp_path):
    workdir, secret = tmp_path / "work", tmp_path / "secret"
    workdir.mkdir()
    secret.mkdir()
    (secret / "gradebook.db").write_text("grades")
    with StudentKernel(edition=edition, workdir=workdir, hidden=[secret],
                       isolation=Isolation(UNSHARE, "test")) as kernel:
        printed = text_of(outputs_of(kernel, f"import os\nsecret = {str(secret)!r}\n"
                                             "print(os.listdir(secret) if os.path.isdir(secret) else 'absent')\n"
                                             "open('x.txt','w').write('ok')\nprint(open('x.txt').read())"))
        assert printed in ("[]\nok\n", "absent\nok\n"), printed


def test_isolation_detection_names_what_it_found():
    assert ISOLATION.name in (BUBBLEWRAP, UNSHARE, NONE) and ISOLATION.description


def test_in_place_changes_to_arguments_come_back(kernel):
    import torch

    from course_lib.checks import call_student

    outputs_of(kernel, "def fill(cache, rows, value):\n    cache[rows] = value\n    rows.append(99)\n")
    cache, rows = torch.zeros(4, 3), [1, 2]
    call_student(kernel.lookup("fill"), "fill", cache, rows, 5.0, copy_args=False)
    assert cache[1:3].eq(5).all() and cache[0].eq(0).all(), "the kernel's in-place write reached the check's tensor"
    assert rows == [1, 2, 99]
    untouched = torch.zeros(4, 3)
    call_student(kernel.lookup("fill"), "fill", untouched, [0], 1.0)  # copy_args=True: the check's tensor stays
    assert untouched.eq(0).all()


def test_a_server_the_check_runs_is_reachable_through_student_url_only(kernel):
    import http.server
    import threading

    from autograde.testcells import run_test_cell
    from course_lib.checks import student_url

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello from the check")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        outputs_of(kernel, "import urllib.request\ndef fetch(url):\n"
                           "    return urllib.request.urlopen(url, timeout=5).read().decode()\n")
        cell = f"from course_lib.checks import student_url\nprint(fetch(student_url({url!r})))"
        outputs = run_test_cell(cell, kernel, {}, timeout=30)
        assert text_of(outputs) == "hello from the check\n", outputs
    finally:
        server.shutdown()


def test_student_code_may_be_called_from_a_checks_thread(kernel):
    import threading

    outputs_of(kernel, "def square(x):\n    return x * x\n")
    square = kernel.lookup("square")
    kernel.set_deadline(60)
    results, errors = [], []

    def worker():
        try:
            results.extend(square(i) for i in range(200))
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for thread in threads:
        thread.start()
    main = [square(i) for i in range(200)]
    for thread in threads:
        thread.join()
    assert not errors and sorted(results) == sorted([i * i for i in range(200)] * 3) and main[-1] == 199 * 199


def _available_sandboxes() -> list:
    kinds = []
    if ISOLATION.name == BUBBLEWRAP:
        kinds.append(pytest.param(Isolation(BUBBLEWRAP, "test"), id="bubblewrap"))
    if shutil.which("unshare") and shutil.which("setpriv") and os.geteuid() == 0:
        kinds.append(pytest.param(Isolation(UNSHARE, "test"), id="unshare"))
    return kinds or [pytest.param(None, marks=pytest.mark.skip(reason=f"no sandbox here: {ISOLATION.description}"))]


@pytest.mark.parametrize("isolation", _available_sandboxes())
def test_a_copy_of_the_course_the_grader_does_not_know_about_is_hidden_too(isolation, edition, tmp_path):
    """Another checkout elsewhere on the machine (here a new top-level folder) is out of sight."""
    import tempfile

    from course_lib.runner.sandbox import default_plan

    try:
        stray = Path(tempfile.mkdtemp(prefix="course-stray-checkout-", dir="/"))
    except OSError:
        pytest.skip("creating a top-level folder needs root")
    try:
        (stray / "solutions").mkdir()
        (stray / "solutions" / "hidden.ipynb").write_text("BEGIN HIDDEN TESTS")
        assert stray in default_plan(workdir=tmp_path, edition=edition, extra_hidden=[]).hidden
        workdir = tmp_path / "work"
        workdir.mkdir()
        with StudentKernel(edition=edition, workdir=workdir, isolation=isolation) as kernel:
            printed = text_of(outputs_of(kernel, f"import os\nprint(sorted(os.listdir({str(stray)!r})) "
                                                 f"if os.path.isdir({str(stray)!r}) else 'absent')"))
        assert printed.strip() in ("[]", "absent"), printed
    finally:
        shutil.rmtree(stray, ignore_errors=True)


def test_only_system_folders_stay_visible(tmp_path):
    from course_lib.runner.sandbox import _non_system_folders

    for name in ("usr", "etc", "work", "srv", "home"):
        (tmp_path / name).mkdir()
    (tmp_path / "bin").symlink_to(tmp_path / "usr")
    assert [p.name for p in _non_system_folders(tmp_path)] == ["home", "srv", "work"]


def test_a_check_can_look_inside_a_student_object_it_holds_a_handle_to(kernel):
    """checks.type_name / checks.attributes: the DecodeCache check finds a course KVCache in a list."""
    import course_lib.sampling  # noqa: F401 - a frozen course dataclass crosses by value: its module must be loaded here
    from course_lib.checks import attributes, is_remote, type_name
    from course_lib.checks.decode import _holds_course_cache

    outputs_of(kernel, "from course_lib.sampling import SamplingParams\n"
                       "class Wrapper:\n    def __init__(self):\n        self.parts = [SamplingParams(), 3]\n"
                       "class Plain:\n    def __init__(self):\n        self.values = [1, 2]\n"
                       "wrapped, plain = Wrapper(), Plain()")
    wrapped, plain = kernel.lookup("wrapped"), kernel.lookup("plain")
    assert is_remote(wrapped) and type_name(wrapped).endswith("Wrapper")
    assert attributes(plain) == {"values": [1, 2]}
    assert type_name(attributes(wrapped)["parts"][0]) == "course_lib.sampling.SamplingParams"
    assert not _holds_course_cache(plain) and not _holds_course_cache(wrapped)


@pytest.mark.parametrize("isolation", _available_sandboxes())
def test_kernels_read_the_shared_disk_cache_but_cannot_change_it_or_the_edition(isolation, edition, tmp_path, monkeypatch):
    """The corpus and the dequantized model come from the grader's cache, which no submission may poison."""
    from course_lib import disk_cache

    cache = tmp_path / "home" / ".cache" / "course"
    monkeypatch.setenv(disk_cache.CACHE_ENVIRONMENT, str(cache))
    key = disk_cache.fingerprint("test")
    assert disk_cache.cached_text("corpus", key, lambda: "from the grader") == "from the grader"
    entry = next((cache / "text").iterdir())
    workdir = tmp_path / "work"
    workdir.mkdir()
    probe = f"""
import os
from course_lib import disk_cache
results = {{'folder': str(disk_cache.cache_folder()),
            'read': disk_cache.read_text('corpus', {key!r}),
            'built': disk_cache.cached_text('other', {key!r}, lambda: 'built in the kernel')}}
targets = {{'overwrite': {str(entry)!r}, 'create': os.path.join({str(cache)!r}, 'text', 'new.txt'),
           'edition': {str(edition / "course_lib" / "planted.py")!r}}}
for attempt, path in targets.items():
    try:
        open(path, 'w').write('poisoned')
        results[attempt] = 'written'
    except OSError as error:
        results[attempt] = type(error).__name__
print(results)
"""
    with StudentKernel(edition=edition, workdir=workdir, isolation=isolation) as kernel:
        results = eval(text_of(outputs_of(kernel, probe)))  # noqa: S307 - our own probe's dict
    assert results["folder"] == str(cache.resolve()) and results["read"] == "from the grader", results
    assert results["built"] == "built in the kernel", results  # a read-only cache never fails a notebook
    # Neither the cache nor the student edition (shared by the next kernels) may change, even where
    # they live under /tmp, which the unshare sandbox otherwise leaves writable.
    assert all(results[attempt] != "written" for attempt in ("overwrite", "create", "edition")), results
    assert not (edition / "course_lib" / "planted.py").exists()
    assert disk_cache.read_text("corpus", key) == "from the grader"
    assert sorted(path.name for path in (cache / "text").iterdir()) == [entry.name]


def test_several_calls_on_a_student_object_cross_as_one_request(kernel):
    """checks.call_methods: values, missing members and errors come back per call, in order, from one
    request; the student's exceptions are rebuilt as for single calls (look-alikes stay StudentError)."""
    from course_lib.checks import call_methods
    from course_lib.runner.channel import StudentError

    outputs_of(kernel, "class CheckFailed(AssertionError):\n    pass\n"
                       "class Pool:\n    def __init__(self):\n        self.free = 3\n"
                       "    def take(self, n):\n        print('taking', n)\n        self.free -= n\n        return self.free\n"
                       "    def todo(self):\n        raise NotImplementedError('write me')\n"
                       "    def forged(self):\n        raise CheckFailed('passed')\n"
                       "pool = Pool()\n")
    pool = kernel.lookup("pool")
    sent = []
    original = kernel.endpoint.send
    kernel.endpoint.send = lambda message: (sent.append(message.get("op")), original(message))[1]
    printed = []
    kernel.output_sink = printed.append
    try:
        results = call_methods(pool, [("take", (1,)), ("free", None), ("nothing", None), ("todo", ()),
                                      ("forged", ()), ("take", (2,))])
    finally:
        kernel.endpoint.send = original
        kernel.output_sink = None
    assert sent == ["call_methods"]
    assert [status for status, _ in results] == ["value", "value", "missing", "error", "error", "value"]
    assert results[0][1] == 2 and results[1][1] == 2 and results[5][1] == 0
    assert isinstance(results[2][1], AttributeError)
    assert type(results[3][1]) is NotImplementedError and "write me" in str(results[3][1])
    assert isinstance(results[4][1], StudentError)
    assert "taking 1" in "".join(printed) and "taking 2" in "".join(printed)


def test_each_test_cell_reads_the_names_the_notebook_holds_when_it_runs(kernel):
    """A student who fixes a function in a cell between two test cells (03_kv_cache: kv_cache_bytes wrong in
    its answer cell, fixed in the exploration cell under its test) passes the second one in JupyterLab and
    with `course check`. The grader kept its first lookup for the whole notebook and failed it (0 of 2 points
    for test_kv_cache_bytes_real_allocations). A name a test cell bound itself stays the test code's."""
    from autograde.testcells import run_test_cell

    def error(outputs):
        return next((output for output in outputs if output["output_type"] == "error"), None)

    namespace: dict = {}
    outputs_of(kernel, "def area(w, h):\n    return w + h   # wrong\nsize = 1")
    assert error(run_test_cell("limit = size\nassert area(2, 3) == 6, 'area(2, 3) should be 6'", kernel, namespace,
                               timeout=30))["evalue"] == "area(2, 3) should be 6"
    outputs_of(kernel, "def area(w, h):\n    return w * h   # fixed further down the notebook\nsize = 2")
    assert error(run_test_cell("assert area(2, 3) == 6\nassert size == 2\nassert limit == 1, limit", kernel,
                               namespace, timeout=30)) is None
    outputs_of(kernel, "del area")
    assert error(run_test_cell("area(2, 3)", kernel, namespace, timeout=30))["ename"] == "NameError"
