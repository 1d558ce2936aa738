"""Record and replay of a check's reference side: the kit's visible tests without the reference.

A toy check module (a pure reference function and a stateful reference class) is recorded with
the instructor edition, then replayed in a student edition where every reference is a stub:
a right answer passes, a wrong one fails with the check's own message, and arguments or paths
that were never recorded fail with a message that says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograde.edition import build_edition
from autograde.recording import assemble_recordings

ROOT = Path(__file__).resolve().parent.parent

TOY_CHECKS = '''
from course_lib.checks import call_student, fail
from course_lib.checks.fixtures import mode, recorded_check, reference
from course_lib import paged, tokenizer

_merge_pair = reference(tokenizer.merge_pair)
_Allocator = reference(paged.BlockAllocator)


@recorded_check
def check_merge(student_merge, ids, pair, new_id):
    expected = _merge_pair(ids, pair, new_id)
    got = call_student(student_merge, "merge_pair", ids, pair, new_id)
    if got != expected:
        fail("merge_pair gave the wrong ids", expected=expected, got=got, hint="replace every occurrence")


@recorded_check
def check_allocations(student_cls, lengths, block_size=4):
    reference_allocator = _Allocator(16, block_size)
    student = student_cls(16, block_size)
    for index, length in enumerate(lengths):
        reference_allocator.allocate("s" + str(index), list(range(length)))
        student.allocate(f"s{index}", list(range(length)))
        if student.num_free_blocks != reference_allocator.num_free_blocks:
            fail(f"free blocks after allocating {length} tokens", expected=reference_allocator.num_free_blocks,
                 got=student.num_free_blocks)


@recorded_check
def check_refusal(student_cls):
    """The reference refuses (out of blocks); the student's must refuse the same way."""
    reference_allocator = _Allocator(2, 4)
    try:
        reference_allocator.allocate("big", list(range(20)))
        refused = None
    except Exception as error:
        refused = type(error).__name__
    student = student_cls(2, 4)
    try:
        student.allocate("big", list(range(20)))
        got = None
    except Exception as error:
        got = type(error).__name__
    if got != refused:
        fail("allocating 5 blocks from 2", expected=refused, got=got)


@recorded_check
def check_admission(student_admit, lengths):
    """The student's admission loop drives the check's own (reference) allocator."""
    allocator = _Allocator(4, 4)
    student_admit(allocator, lengths)


@recorded_check
def check_feeds_student_result_to_reference(student_merge):
    got = call_student(student_merge, "merge_pair", [1, 2, 1, 2], (1, 2), 9)
    return _merge_pair(got, (9, 9), 10)
'''

STUDENT = '''
import sys
sys.path.insert(0, {toy_dir!r})
import toy_checks as checks
from course_lib.checks import CheckFailed
from course_lib.checks.fixtures import OffTheRecord, mode

def merge_pair(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id); i += 2
        else:
            out.append(ids[i]); i += 1
    return out

def wrong_merge(ids, pair, new_id):
    return list(ids)

class Allocator:
    def __init__(self, num_blocks, block_size):
        self.free, self.block_size = num_blocks, block_size
    def allocate(self, seq_id, token_ids):
        self.free -= -(-len(token_ids) // self.block_size)
    @property
    def num_free_blocks(self):
        return self.free

class RefusingAllocator(Allocator):
    def allocate(self, seq_id, token_ids):
        from course_lib.paged import OutOfBlocksError
        if -(-len(token_ids) // self.block_size) > self.free:
            raise OutOfBlocksError("out of blocks")
        super().allocate(seq_id, token_ids)

class LeakyAllocator(Allocator):
    def allocate(self, seq_id, token_ids):
        self.free -= 1

def admit(allocator, lengths):
    """First come, first served: ask before allocating, stop at the first that does not fit."""
    for index, length in enumerate(lengths):
        if not allocator.can_allocate(list(range(length))):
            break
        allocator.allocate("s" + str(index), list(range(length)))

def admit_without_asking(allocator, lengths):
    for index, length in enumerate(lengths):
        allocator.allocate("s" + str(index), list(range(length)))

def admit_overtaking(allocator, lengths):
    for index, length in enumerate(lengths):
        if allocator.can_allocate(list(range(length))):
            allocator.allocate("s" + str(index), list(range(length)))

def outcome(call):
    try:
        call()
        return "passed"
    except OffTheRecord as error:
        return "off the record: " + str(error).splitlines()[0][:80]
    except CheckFailed as error:
        return "failed: " + str(error).splitlines()[0]

def whole(call):
    try:
        call()
        return "passed"
    except CheckFailed as error:
        return type(error).__name__ + ": " + str(error).replace(chr(10), " | ")

print("MODE", mode())
print("RESULT", outcome(lambda: checks.check_merge(merge_pair, [1, 2, 3, 1, 2], (1, 2), 7)))
print("RESULT", outcome(lambda: checks.check_allocations(Allocator, [5, 9, 1])))
print("RESULT", outcome(lambda: checks.check_feeds_student_result_to_reference(merge_pair)))
if mode() == "replay":
    print("RESULT", outcome(lambda: checks.check_merge(wrong_merge, [1, 2, 3, 1, 2], (1, 2), 7)))
    print("RESULT", outcome(lambda: checks.check_allocations(LeakyAllocator, [5, 9, 1])))
    print("RESULT", outcome(lambda: checks.check_merge(merge_pair, [4, 4], (4, 4), 8)))
    print("RESULT", outcome(lambda: checks.check_feeds_student_result_to_reference(wrong_merge)))
print("RESULT", outcome(lambda: checks.check_refusal(RefusingAllocator)))
if mode() == "replay":
    print("RESULT", outcome(lambda: checks.check_refusal(Allocator)))
print("RESULT", outcome(lambda: checks.check_admission(admit, [5, 9, 4])))
if mode() == "replay":
    print("RESULT", whole(lambda: checks.check_admission(admit_without_asking, [5, 9, 4])))
    print("RESULT", whole(lambda: checks.check_admission(admit_overtaking, [5, 9, 4])))
'''


def run(script: str, pythonpath: str, **environment) -> list[str]:
    # -P: not the current folder (the repository, whose course_lib is the instructor edition) first on sys.path
    completed = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True, timeout=300,
                               env={"PYTHONPATH": pythonpath, "PATH": "/usr/bin:/bin", **environment})
    assert completed.returncode == 0, completed.stderr[-3000:]
    return [line.split(" ", 1)[1] for line in completed.stdout.splitlines() if line.startswith(("MODE", "RESULT"))]


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fixtures")
    toy_dir = folder / "toy"
    toy_dir.mkdir()
    (toy_dir / "toy_checks.py").write_text(textwrap.dedent(TOY_CHECKS))
    script = STUDENT.format(toy_dir=str(toy_dir))
    jsonl = folder / "recording.jsonl"
    recorded = run(script, str(ROOT), COURSE_RECORD_FIXTURES=str(jsonl))
    edition = folder / "edition"
    build_edition(edition, ["lab01-text-to-tensors", "lab02-prefill-vs-decode"])
    fixtures = edition / "course_lib" / "checks" / "recorded"
    fixtures.mkdir(parents=True, exist_ok=True)
    (fixtures / "toy.json").write_text(json.dumps({"checks": assemble_recordings(jsonl.read_text())}))
    return recorded, run(script, str(edition)), jsonl


def test_recording_runs_the_real_reference(replayed):
    recorded, _, jsonl = replayed
    assert recorded == ["record", "passed", "passed", "passed", "passed", "passed"]
    entries = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(entries) == 5
    refusal = next(e for e in entries if "check_refusal" in e["key"])
    assert refusal["events"][-1]["raises"]["type"] == "course_lib.paged.OutOfBlocksError", refusal["events"]
    allocations = next(e for e in entries if "check_allocations" in e["key"])
    targets = [event["target"] for event in allocations["events"]]
    assert targets[0] == "course_lib.paged.BlockAllocator", targets
    assert targets[1].endswith(".allocate") and targets[2].endswith(".num_free_blocks"), targets


def test_replay_passes_a_right_answer_without_any_reference(replayed):
    _, replay, _ = replayed
    assert replay[:4] == ["replay", "passed", "passed", "passed"]


def test_replay_fails_a_wrong_answer_with_the_checks_own_message(replayed):
    _, replay, _ = replayed
    assert replay[4] == "failed: merge_pair gave the wrong ids"
    assert replay[5] == "failed: free blocks after allocating 5 tokens"


def test_unrecorded_arguments_and_paths_say_so(replayed):
    _, replay, _ = replayed
    assert replay[6].startswith("off the record: check_merge has no recorded reference result"), replay[6]
    assert replay[7].startswith("off the record: this visible test cannot follow your answer"), replay[7]


def test_a_refusal_of_the_reference_is_replayed_as_the_same_exception(replayed):
    _, replay, _ = replayed
    assert replay[8] == "passed", "the recorded OutOfBlocksError is raised again in the kit"
    assert replay[9] == "failed: allocating 5 blocks from 2", replay[9]


def test_a_recording_goes_stale_when_code_changes_not_when_prose_does(tmp_path):
    from autograde.recording import _inputs, fixture_path, stale_fixtures

    lab = "lab-toy"
    (tmp_path / "solutions" / lab).mkdir(parents=True)
    (tmp_path / "solutions" / lab / "01_toy.ipynb").write_text("{}")
    module = tmp_path / "course_lib" / "toy.py"
    module.parent.mkdir()
    module.write_text('"""A toy module."""\n\ndef f(x):\n    """Doubles."""\n    return 2 * x  # why: a test\n')
    inputs = _inputs(tmp_path, lab, [str(module)])
    fixture_path(tmp_path, lab).parent.mkdir(parents=True)
    fixture_path(tmp_path, lab).write_text(json.dumps({"lab": lab, "inputs": inputs, "checks": {}}))
    assert stale_fixtures(tmp_path, [lab]) == []

    module.write_text('"""Docs rewritten."""\n\ndef f(x):\n    """Twice x, said again."""\n\n    return 2 * x\n')
    assert stale_fixtures(tmp_path, [lab]) == [], "docstrings, comments and blank lines decide no recorded value"

    module.write_text('"""Docs rewritten."""\n\ndef f(x):\n    return 3 * x\n')
    stale = [str(difference) for difference in stale_fixtures(tmp_path, [lab])]
    assert len(stale) == 1 and "course_lib/toy.py changed" in stale[0], stale


def test_a_divergence_says_what_the_reference_did_there(replayed):
    _, replay, _ = replayed
    assert replay[10] == "passed"
    # Allocating without asking first: the reference asked can_allocate at that point, and got True.
    assert replay[11].startswith("OffTheRecord: this visible test cannot follow your answer in check_admission: "
                                 "your answer led it to ask for BlockAllocator.allocate"), replay[11]
    assert "where at this point the reference answer's run asked for BlockAllocator.can_allocate([0, 1, 2, 3, 4]), " \
           "which returned True (just after BlockAllocator(4, 4))" in replay[11], replay[11]
    # Overtaking: after the second request did not fit, the reference asked nothing more.
    assert "your answer led it to ask for BlockAllocator.can_allocate([0, 1, 2, 3])" in replay[12], replay[12]
    assert "asked nothing more after BlockAllocator.can_allocate([0, 1, 2, 3, 4, 5, 6, 7, 8]), which returned " \
           "False" in replay[12], replay[12]
    assert "hint: your answer takes another path than the reference" in replay[12]


def test_a_check_can_put_a_divergence_in_its_own_context():
    from course_lib.checks.fixtures import OffTheRecord

    error = OffTheRecord("what happened", hint="the generic hint")
    assert str(error) == "what happened\n  hint: the generic hint"
    told = error.in_context("scenario so far: a, b", "stop at the first request that does not fit")
    assert isinstance(told, OffTheRecord)
    assert str(told) == "what happened\n  scenario so far: a, b\n  hint: stop at the first request that does not fit"
    assert str(error.in_context("scenario")) == "what happened\n  scenario\n  hint: the generic hint"
