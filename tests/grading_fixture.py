"""A tiny lab and a set of hostile submissions for testing the grading rules quickly.

The lab has two notebooks. ``ch1``: an answer ``add_one`` with a visible and a hidden test, a
test that prints warnings to stderr while passing, an answer ``double`` and its test (through
``course_lib.checks.expect_equal``), and a GPU-only check. ``ch2``: one answer and one test.
Every submission carries one problem a real class produces, or one attack a hostile student
would try (``ATTACKS``): each must score exactly what its honest work earns.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

from autograde import authoring as a
from autograde.demos import DemoStudent, build_submission

LAB = "lab00-fixture"
HIDDEN_MARKER = "HIDDEN_INPUT_7741"


WRITTEN_QUESTION = ("written_why_square", 2, "Why is `square(-3)` positive?",
                    "A product of two numbers of the same sign is positive: -3 times -3 is 9.")
WRITTEN_RUBRIC = """
lab = "lab00-fixture"

[[question]]
grade_id = "written_why_square"
notebook = "ch2"
notes = "Accept any correct reason about signs."

[[question.criteria]]
id = "same_sign"
points = 1
text = "Says that a product of two numbers of the same sign is positive."

[[question.criteria]]
id = "example"
points = 1
text = "Works the example: -3 times -3 is 9."
partial = [ { points = 0.5, when = "gives 9 without the product" } ]
"""


def fixture_notebooks(*, written: bool = False) -> dict[str, object]:
    """The fixture lab's chapters; ``written``: ch2 also asks a written question (``WRITTEN_QUESTION``,
    its rubric ``WRITTEN_RUBRIC``), graded by a TA."""
    ch1 = a.notebook([
        a.markdown("# Fixture chapter 1"),
        a.answer("add_one", '''
            def add_one(x):
                """int -> int"""
                ### BEGIN SOLUTION
                return x + 1
                ### END SOLUTION
        '''),
        a.tests("test_add_one", 2, f'''
            assert add_one(1) == 2, "add_one(1) should be 2"
            ### BEGIN HIDDEN TESTS
            {HIDDEN_MARKER} = 41
            assert add_one({HIDDEN_MARKER}) == 42, "hidden check failed"
            ### END HIDDEN TESTS
        '''),
        a.tests("test_warnings", 1, '''
            import sys, warnings
            warnings.warn("a harmless warning from a library")
            print("progress bars and chatter on stderr", file=sys.stderr)
            assert add_one(0) == 1
        '''),
        a.answer("double", '''
            def double(x):
                ### BEGIN SOLUTION
                return 2 * x
                ### END SOLUTION
        '''),
        a.tests("test_double", 3, '''
            from course_lib.checks import expect_equal
            expect_equal(double(2), 4, "double(2)")
        '''),
        a.tests("test_gpu", 1, '''
            from course_lib.checks import require_gpu
            require_gpu("the fixture's GPU check")
            assert double(3) == 6
        ''', needs_gpu=True),
    ])
    ch2 = a.notebook([
        a.markdown("# Fixture chapter 2"),
        a.answer("square", '''
            def square(x):
                ### BEGIN SOLUTION
                return x * x
                ### END SOLUTION
        '''),
        a.tests("test_square", 2, '''
            assert square(3) == 9, "square(3) should be 9"
        '''),
    ])
    if written:
        ch2.cells += a.written_question(*WRITTEN_QUESTION)
    return {"ch1": ch1, "ch2": ch2}


def write_fixture_lab(solutions_dir: Path, *, written: bool = False) -> Path:
    lab_dir = solutions_dir / LAB
    lab_dir.mkdir(parents=True, exist_ok=True)
    for name, notebook in fixture_notebooks(written=written).items():
        nbformat.write(notebook, lab_dir / f"{name}.ipynb")
    return lab_dir


# student -> (answers, mutation name); answers start from the solution unless BASE says otherwise.
STUDENTS = {
    "correct": dict(),
    "blank": dict(base="release"),
    "noisy": dict(answers={"add_one": "import sys\nprint('debug output', file=sys.stderr)\n"
                                      "def add_one(x):\n    return x + 1"}),
    "infinite-loop": dict(answers={"double": "def double(x):\n    while True:\n        pass"}),
    "os-exit": dict(answers={"double": "import os\nos._exit(3)"}),
    "segfault": dict(answers={"double": "import ctypes\nctypes.string_at(0)"}),
    "tampered": dict(answers={"add_one": "def add_one(x):\n    return x + 2"}, mutation="tamper"),
    "copied-test-cells": dict(mutation="copy-tests"),
    "wrong-hidden": dict(answers={"add_one": "def add_one(x):\n    return 2 if x == 1 else 0"}),
    "malformed": dict(mutation="not-json"),
    "old-format": dict(mutation="nbformat3"),
}

# Attacks, each in an otherwise honest submission (see test_grading_rules for what each must not do).
# Answer cells run in the student's kernel; the test cells run in the grader.
PATCH_CHECKS = """
import builtins, course_lib.checks as checks
checks.expect_equal = lambda *args, **kwargs: None          # no-op the check the test cell calls
checks.fail = lambda *args, **kwargs: None
builtins.AssertionError = type("Harmless", (Exception,), {})
def double(x):
    raise NotImplementedError()
"""
FAKE_GPU = """
class NeedsGPU(Exception):
    pass
def add_one(x):
    raise NeedsGPU("skipped: needs a GPU")
"""
LYING_EQ = """
class AlwaysEqual:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
def add_one(x):
    return AlwaysEqual()
"""
READ_SECRETS = """
def add_one(x):
    return x + 1
import os, time
found, started = [], time.time()
for top in ["..", "/tmp", "/work", "/root", "/home", "/"]:
    for folder, subfolders, files in os.walk(top):
        subfolders[:] = [d for d in subfolders if d not in ("proc", "sys", "dev", "usr", ".venv", "lib")]
        found += [os.path.join(folder, f) for f in files if f in ("gradebook.db", "ch1.ipynb", "nbgrader_config.py")]
        if time.time() - started > 4:
            break
for path in found[:30]:
    try:
        print(path, open(path, errors="replace").read()[:100000])
    except OSError as error:
        print(path, error)
print("searched; found", len(found))
"""
WRITE_OUTSIDE = """
def add_one(x):
    return x + 1
import os, glob
for target in glob.glob("/tmp/**/gradebook.db", recursive=True) + ["/tmp/course-escape.txt",
        os.path.expanduser("~/course-escape.txt"), "/etc/course-escape.txt"]:
    try:
        open(target, "w").write("overwritten")
    except OSError:
        pass
"""
# Attacks on the grader itself (graded with small limits: see LIMITS), each in an otherwise honest submission.
MEMORY_HOG = """
import os, time
def double(x):
    return 2 * x
for _ in range(4):
    if os.fork() == 0:
        block = bytearray(400 << 20)
        time.sleep(120)
        os._exit(0)
time.sleep(120)
"""
PROCESS_STORM = """
import os, time
def double(x):
    return 2 * x
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
"""
DISK_FILLER = """
def add_one(x):
    return x + 1
import os
for folder in (".", "/tmp", "/dev/shm"):
    for index in range(40):
        try:
            with open(os.path.join(folder, f"fill-{index}"), "wb") as file:
                file.write(b"x" * (8 << 20))
        except OSError as error:
            print(folder, "full:", error.strerror)
            break
try:
    open("/tmp/big", "wb").write(b"y" * (600 << 20))
except (OSError, MemoryError) as error:
    print("big file:", type(error).__name__)
"""
OUTPUT_FLOOD = """
def add_one(x):
    return x + 1
import os
from IPython.display import display
print("FLOOD-HEAD" + "x" * (20 << 20) + "FLOOD-TAIL")
os.write(1, b"fd" * (5 << 20))
display({"image/png": "A" * (10 << 20), "text/plain": "<a 10 MB image>"}, raw=True)
raise ValueError("m" * (5 << 20))
"""
PRINT_HIDDEN = """
def add_one(x):
    print("ARGS", x)
    return x + 1
"""
FEEDBACK_SCRIPT = """
def add_one(x):
    return x + 1
from IPython.display import HTML, Javascript, display
display(HTML("<script>document.title='owned'</script><img src=x onerror=alert(1)>"
             "<div class='verdict'>All tests passed: 77/77</div>"))
display(Javascript("document.title='OWNED-BY-JAVASCRIPT'"))
display({"image/png": "iVBORw0KGgo=", "text/plain": "a plot"},   # nbconvert writes width= as it is
        metadata={"image/png": {"width": "1 onerror=alert('OWNED-BY-WIDTH')"}}, raw=True)
"""
HTML_MARKDOWN = "My answer <img src=x onerror=\"alert('OWNED-BY-MARKDOWN')\"><script>alert('OWNED')</script>"
MODULE_BY_NAME = """
import types
double = types.ModuleType("course_lib.server.__main__")
"""
STALL = """
def add_one(x):
    return x + 1
import os, signal
from course_lib.runner import channel
_fill = channel.FrameReader._fill
def _stop_on_a_large_frame(reader, needed, deadline):
    if needed > (1 << 20):
        os.kill(os.getpid(), signal.SIGSTOP)
    return _fill(reader, needed, deadline)
channel.FrameReader._fill = _stop_on_a_large_frame
"""
HASH_BOMB = """
class _Pair(tuple):
    _fields = ()            # crosses as a named tuple would: a plain tuple
    def __hash__(self):     # so the kernel builds the dict at once
        return 0
def double(x):
    key = (1,)
    for _ in range(40):
        key = (key, key)    # 2**40 leaves in a 200-byte pickle
    return {_Pair(key): 2 * x}
"""
DEEP_KEY = """
import pickle
from course_lib.runner import channel
_dumps = channel.Endpoint.dumps
class _Deep:
    pass
def _frame_by_hand(self, message):
    if isinstance(message, dict) and isinstance(message.get("value"), _Deep):
        request = pickle.dumps(message["reply"], protocol=2)[2:-1]
        return (b"\\x80\\x04\\x8c\\x04dict(\\x8c\\x05reply" + request + b"\\x8c\\x05value\\x8c\\x04dict)"
                + b"\\x85" * 2_000_000 + b"K\\x01\\x86\\x86Qt\\x86Q.")
        # {"reply": id, "value": {((((...)))): 1}}, a key two million tuples deep, dicts as the kernel sends them
    return _dumps(self, message)
channel.Endpoint.dumps = _frame_by_hand
def double(x):
    return _Deep()
"""
ASSERT_HIDDEN = """
def add_one(x):
    if x not in (0, 1):   # the visible checks use 0 and 1: anything else is a hidden input
        raise AssertionError(f"LEAKED-ARGUMENT-{x}")
    return x + 1
"""
REMEMBER_HIDDEN = """
_seen = []
def add_one(x):
    _seen.append(x)
    return x + 1
"""
LEAK_LATER = """
print("LEAKED-LATER-PRINT", _seen)
from IPython.display import display
display({"text/plain": f"LEAKED-LATER-DISPLAY {_seen}"}, raw=True)
class Leak(Exception):
    pass
def double(x):
    raise Leak(f"LEAKED-LATER-RAISE {_seen}")
"""
EXIT_WITH_HIDDEN = """
import os
def add_one(x):
    if x not in (0, 1):   # a hidden input: end the kernel with it as the exit code
        os._exit(x % 256)
    return x + 1
"""
FORGED_FRAME = """
import gc, pickle
from course_lib.runner import channel
_endpoint = next(o for o in gc.get_objects() if isinstance(o, channel.Endpoint))
# A reply to no request, its id the inputs add_one kept: the grader's "malformed message" quoted it.
channel.write_frame(_endpoint.write_fd, _endpoint.dumps({"reply": f"LEAKED-FRAME-{_seen}"}))
import time
time.sleep(5)
def double(x):
    return 2 * x
"""
ERROR_NAME_HIDDEN = """
import builtins
_errors = sorted(n for n in dir(builtins) if n.endswith("Error") and isinstance(getattr(builtins, n), type))
def add_one(x):
    if x not in (0, 1):   # the name of the error spells the hidden input: one of about sixty
        raise getattr(builtins, _errors[x % len(_errors)])()
    return x + 1
"""
FORGED_KERNEL_DIED = """
class _Forged(Exception):
    pass
_Forged.__module__ = "course_lib"                     # rebuilt by the old grader as its own KernelDied,
_Forged.__qualname__ = "runner.student.KernelDied"    # whose words it trusted
def double(x):
    raise _Forged(f"limit of {_seen} files in the scratch folder reached")
"""
HUGE_RANGE = """
def add_one(x):
    return range(40_000_000)   # three ints on the channel; forty million items to whoever lists them
"""
COLLIDING_KEYS = """
from course_lib.runner import channel
_dumps = channel.Endpoint.dumps
class _Colliding:
    pass
def _long1(value):
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\\x8a" + bytes([len(raw)]) + raw
# 200,000 different ints k * (2**61 - 1), one hash: a dict of them costs 2 * 10**10 comparisons to build
_PAIRS = b"".join(_long1(key * ((1 << 61) - 1)) + b"K\\x00" for key in range(1, 200_001))
def _frame_by_hand(self, message):
    if isinstance(message, dict) and isinstance(message.get("value"), _Colliding):
        import pickle
        request = pickle.dumps(message["reply"], protocol=2)[2:-1]
        return b"\\x80\\x04}(\\x8c\\x05reply" + request + b"\\x8c\\x05value}(" + _PAIRS + b"uu."   # built by the unpickler
    return _dumps(self, message)
channel.Endpoint.dumps = _frame_by_hand
def double(x):
    return _Colliding()
"""
SIZES_AS_TEXT = """
from course_lib.runner import channel
class _Huge:
    pass
_persistent_id = channel._Pickler.persistent_id
def _sizes_as_text(self, obj):   # a float32 view of 30,000 x 30,000 elements in 4 bytes, its sizes written as text
    if isinstance(obj, _Huge):
        return ("tensor", "float32", ("30000", "30000"), bytes(4), (0, 0), "cpu")
    return _persistent_id(self, obj)
channel._Pickler.persistent_id = _sizes_as_text
def add_one(x):
    return _Huge()
"""
STALL_PADDING = "def double(x):\n    return 2 * x\n" + ("# " + "p" * 100 + "\n") * 13_000
# The limits of the grading run: small, so that each attack is cheap to stop.
LIMITS = "memory=1GB,processes=128,disk=128MB,file=64MB"

ATTACKS = {
    "attack-patch-checks": dict(answers={"double": PATCH_CHECKS}),
    "attack-fake-gpu": dict(answers={"add_one": FAKE_GPU}),
    "attack-lying-eq": dict(answers={"add_one": LYING_EQ}),
    "attack-read-secrets": dict(answers={"add_one": READ_SECRETS}),
    "attack-write-outside": dict(answers={"add_one": WRITE_OUTSIDE}),
    "attack-memory-hog": dict(answers={"double": MEMORY_HOG}),
    "attack-process-storm": dict(answers={"double": PROCESS_STORM}),
    "attack-disk-filler": dict(answers={"add_one": DISK_FILLER}),
    "attack-output-flood": dict(answers={"add_one": OUTPUT_FLOOD}),
    "attack-print-hidden": dict(answers={"add_one": PRINT_HIDDEN}),
    "attack-feedback-script": dict(answers={"add_one": FEEDBACK_SCRIPT}, mutation="html-markdown"),
    "attack-module-by-name": dict(answers={"double": MODULE_BY_NAME}),
    "attack-stall": dict(answers={"add_one": STALL, "double": STALL_PADDING}),
    "attack-forged-timestamp": dict(mutation="timestamp"),
    "attack-hash-bomb": dict(answers={"double": HASH_BOMB}),
    "attack-deep-key": dict(answers={"double": DEEP_KEY}),
    "attack-assert-hidden": dict(answers={"add_one": ASSERT_HIDDEN}),
    "attack-print-hidden-later": dict(answers={"add_one": REMEMBER_HIDDEN, "double": LEAK_LATER}),
    "attack-exit-code-hidden": dict(answers={"add_one": EXIT_WITH_HIDDEN}),
    "attack-forged-frame": dict(answers={"add_one": REMEMBER_HIDDEN, "double": FORGED_FRAME}),
    "attack-error-name-hidden": dict(answers={"add_one": ERROR_NAME_HIDDEN}),
    "attack-forged-kernel-died": dict(answers={"add_one": REMEMBER_HIDDEN, "double": FORGED_KERNEL_DIED}),
    "attack-huge-range": dict(answers={"add_one": HUGE_RANGE}),
    "attack-colliding-keys": dict(answers={"double": COLLIDING_KEYS}),
    "attack-tensor-sizes-as-text": dict(answers={"add_one": SIZES_AS_TEXT}),
}
STUDENTS.update(ATTACKS)

# Expected points (ch1 + ch2) on a CPU, where test_gpu (1 point) is skipped.
EXPECTED_CPU = {
    "correct": (8, 8),
    "blank": (0, 8),
    "noisy": (8, 8),
    "infinite-loop": (5, 8),       # only test_double hangs; ch2 untouched
    "os-exit": (5, 8),             # test_add_one + test_warnings ran before the crash; ch2 fine
    "segfault": (5, 8),
    "tampered": (5, 8),            # the emptied and the deleted test cells are restored and fail
    "copied-test-cells": (8, 8),   # a copy of a test cell (its metadata copied too) and one with an unknown id:
                                   # the student's own cells, run in the kernel; nbgrader failed the whole lab
    "wrong-hidden": (5, 8),        # visible check passes, hidden one fails: test_add_one and test_warnings lost
    "malformed": (2, 8),           # ch1 unreadable -> 0; ch2 graded
    "old-format": (2, 8),
    "attack-patch-checks": (5, 8),   # double is blank: test_double's 3 points, whatever the kernel patched
    "attack-fake-gpu": (5, 8),       # add_one raises a look-alike NeedsGPU: its 3 points lost, max unchanged
    "attack-lying-eq": (5, 8),       # an object equal to everything is not 2
    "attack-read-secrets": (8, 8),   # honest answers: full marks, and nothing secret in its outputs
    "attack-write-outside": (8, 8),
    "attack-memory-hog": (5, 8),     # stopped at the memory limit in double's cell: test_double not run
    "attack-process-storm": (5, 8),  # stopped at the process limit, the same way
    "attack-disk-filler": (8, 8),    # its writes fail in its own code; nothing else changes
    "attack-output-flood": (8, 8),
    "attack-print-hidden": (8, 8),
    "attack-feedback-script": (8, 8),
    "attack-module-by-name": (5, 8),   # a module is not a function: test_double fails, nothing is imported
    "attack-stall": (5, 8),          # the write of its 1.3 MB cell ends at the deadline: killed there
    "attack-forged-timestamp": (8, 8),
    "attack-hash-bomb": (5, 8),      # its reply unfolds into 2**40 items: refused, not hashed for hours
    "attack-deep-key": (5, 8),       # its hand-made reply nests 2 million deep: refused, the grader does not crash
    "attack-assert-hidden": (6, 8),  # the hidden check of add_one fails (its AssertionError's message is not shown)
    "attack-print-hidden-later": (5, 8),   # double raises (with the hidden input in its message): test_double lost
    "attack-exit-code-hidden": (2, 8),   # the kernel ends in test_add_one's hidden check: ch1's tests lost, ch2 fine
    "attack-forged-frame": (5, 8),       # its malformed reply stops the kernel in double's cell: test_double not run
    "attack-error-name-hidden": (6, 8),  # add_one raises on the hidden input: test_add_one lost
    "attack-forged-kernel-died": (5, 8),   # double raises a look-alike of the grader's KernelDied: test_double lost
    "attack-huge-range": (5, 8),         # add_one's range(40_000_000) is refused on receipt: its two tests lost
    "attack-colliding-keys": (5, 8),     # its dict frame is malformed (the grader builds no dict): test_double lost
    "attack-tensor-sizes-as-text": (2, 8),   # its tensor's fields are malformed: the kernel stops in test_add_one
}
FORGED_TIMESTAMP = "2001-01-01 00:00:00.000000 UTC\n<script>alert('gradebook')</script>\n"
# Hand-in times (timestamp.txt) of two students, around the due time test_grading_rules grades with.
DUE = "2026-01-12T23:59Z"
TIMESTAMPS = {"correct": "2026-01-12 23:00:00.000000 UTC", "noisy": "2026-01-15 09:30:00.000000 UTC"}


def write_submissions(release_dir: Path, solutions_lab: Path, out_dir: Path) -> Path:
    """Materialize STUDENTS under out_dir/<student>/<LAB>/ plus one folder that is not a student."""
    for student, spec in STUDENTS.items():
        folder = out_dir / student / LAB
        folder.mkdir(parents=True, exist_ok=True)
        demo = DemoStudent(student, "", spec.get("base", "solution"), spec.get("answers", {}))
        for name in ("ch1", "ch2"):
            notebook = build_submission(nbformat.read(release_dir / f"{name}.ipynb", as_version=4),
                                        nbformat.read(solutions_lab / f"{name}.ipynb", as_version=4), demo, name)
            path = folder / f"{name}.ipynb"
            mutation = spec.get("mutation")
            if name == "ch1" and mutation == "tamper":
                for cell in notebook.cells:
                    if cell.metadata.get("nbgrader", {}).get("grade_id") == "test_add_one":
                        cell.source = ""  # emptied
                notebook.cells = [c for c in notebook.cells
                                  if c.metadata.get("nbgrader", {}).get("grade_id") != "test_warnings"]  # deleted
            if name == "ch1" and mutation == "copy-tests":
                test = next(c for c in notebook.cells
                            if c.metadata.get("nbgrader", {}).get("grade_id") == "test_double")
                copy = nbformat.from_dict(json.loads(json.dumps(test)))
                copy.source = "print('my own experiment, in a copy of the test cell')"
                unknown = nbformat.from_dict(json.loads(json.dumps(test)))
                unknown.metadata["nbgrader"]["grade_id"] = "my_test"
                unknown.source = "open('/tmp/COPIED-CELL-RAN-IN-THE-GRADER', 'w').write('x')"
                copy["id"], unknown["id"] = "copied-test", "unknown-test"
                notebook.cells += [copy, unknown]
            if name == "ch1" and mutation == "html-markdown":   # a written answer with HTML in it
                notebook.cells.append(nbformat.v4.new_markdown_cell(HTML_MARKDOWN))
            if name == "ch1" and mutation == "timestamp":
                (folder / "timestamp.txt").write_text(FORGED_TIMESTAMP)
            if name == "ch1" and student in TIMESTAMPS:
                (folder / "timestamp.txt").write_text(TIMESTAMPS[student] + "\n")
            if name == "ch1" and mutation == "not-json":
                path.write_text('{"cells": [ this is not json')
                continue
            if name == "ch1" and mutation == "nbformat3":
                path.write_text(json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {},
                                            "worksheets": [{"cells": []}]}))
                continue
            nbformat.write(notebook, path)
    (out_dir / "README.txt").write_text("not a student folder\n")
    (out_dir / "bad name!").mkdir(exist_ok=True)
    return out_dir
