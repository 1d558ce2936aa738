"""No borrowed answers: a locked edition holds no code that computes an exercise's answer, marked or not.

The generator (``answer_helpers``) finds the platform functions the references lean on and those the
checks treat as references; the edition stubs them, and the platform the kits run keeps working
without them. The tokenizer's guard compares tables, so no flag a student sets makes it encode.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import course_lib
from autograde.answer_helpers import EXTRA_ROOTS, PLATFORM, answer_helpers, library_index
from autograde.edition import build_edition

ALL_LABS = {"lab01-text-to-tensors", "lab02-prefill-vs-decode", "lab03-kernels", "lab04-faster-decoding",
            "lab05-serving"}
NAMED_IN_THE_ISSUE = {
    "course_lib.sim.fragmentation.free_holes", "course_lib.viz.kv_bytes_per_token",
    "course_lib.paged.PagedKVCache.bytes_per_block", "course_lib.attention.causal_mask",
    "course_lib.attention.repeat_kv_heads",
}


@pytest.fixture(scope="module")
def index():
    return library_index(Path(course_lib.__file__).parent)


def test_the_helpers_the_issue_names_are_found_and_stubbed_in_kits_and_grading(index):
    kit = {helper.name for helper in answer_helpers(index, ALL_LABS)}
    grading = {helper.name for helper in answer_helpers(index, ALL_LABS, grading=True)}
    assert NAMED_IN_THE_ISSUE <= kit <= grading
    assert "course_lib.checks.attention.sdpa_reference" in grading - kit, \
        "the checks' live reference is stubbed where the visible tests do not run"
    assert not any(helper.startswith(("course_lib.runner", "course_lib.handin", "course_lib.commands")) for helper in grading)


def test_an_unlocked_lab_stubs_nothing_of_its_own(index):
    later = answer_helpers(index, ALL_LABS - {"lab01-text-to-tensors"}, grading=True)
    assert not any("lab01-text-to-tensors" in helper.labs for helper in later)
    assert "course_lib.sim.fragmentation.free_holes" not in {helper.name for helper in later}


def test_every_platform_entry_names_a_definition_and_gives_a_reason(index):
    modules = {definition.module for definition in index.definitions.values()}
    for name, reason in PLATFORM.items():
        assert reason.strip(), name
        assert name in index.definitions or name in modules or any(
            key.startswith(name + ".") for key in index.definitions), f"PLATFORM names nothing: {name}"
    assert all(name in index.definitions for name in EXTRA_ROOTS)


def test_the_checks_references_are_either_stubbed_when_grading_or_kept_for_a_reason(index):
    from autograde.answer_helpers import _in_marked, _kept

    grading = {helper.name for helper in answer_helpers(index, ALL_LABS, grading=True)}
    for module, roots in index.reference_roots.items():
        for root in roots:
            assert _in_marked(index, root) or root in grading or _kept(root), f"{module}: {root} unclassified"


@pytest.fixture(scope="module")
def locked_edition(tmp_path_factory):
    folder = tmp_path_factory.mktemp("locked")
    build_edition(folder, sorted(ALL_LABS), grading=True)
    return folder


def run_in(edition: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(edition), "PATH": "/usr/bin:/bin",
                                                            "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, cwd=str(edition), timeout=300)


def test_the_locked_edition_stubs_the_helpers_and_its_platform_still_runs(locked_edition):
    result = run_in(locked_edition, """
import torch
import course_lib.sim.fragmentation as fragmentation, course_lib.viz as viz, course_lib.attention as attention
import course_lib.checks.attention as attention_checks
from course_lib.paged import PagedKVCache
for function, args in [(fragmentation.free_holes, ([], 4)), (viz.kv_bytes_per_token, (1, 1, 1, 1)),
                       (attention.causal_mask, (1, 2)), (attention.repeat_kv_heads, (None, 2)),
                       (attention_checks.sdpa_reference, (None, None, None)),
                       (PagedKVCache.bytes_per_block, (None, 4, None))]:
    try:
        function(*args)
        print('NOT STUBBED', function.__qualname__)
    except NotImplementedError as error:
        assert 'computes part of an answer' in str(error), error
trace = fragmentation.simulate_contiguous(fragmentation.random_workload(30, seed=0), pool_slots=16384)
q, k = torch.randn(3, 9, 8), torch.randn(5, 3, 8)
assert attention.sdpa_attention(q, k, k).shape == (3, 9, 8)
viz.kv_cache_size_vs_context(); viz.training_vs_inference_memory()
from course_lib.viz.kv_cache import contiguous_pool
contiguous_pool([fragmentation.Reservation(0, 2, 4, 1, 3)], 16, 3)
print('platform runs')
""")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "NOT STUBBED" not in result.stdout and "platform runs" in result.stdout


@pytest.mark.slow
def test_the_tokenizer_guard_compares_tables_not_a_flag(locked_edition):
    result = run_in(locked_edition, """
from course_lib.tokenizer import BPETokenizer
model = BPETokenizer.from_gguf()
ids = model.encode('Hello world')
assert model.decode(ids) == 'Hello world'
vocab = [bytes([b]) for b in range(256)] + [b'ab']
mine = BPETokenizer(vocab, {(97, 98): 256})
mine._is_model_tokenizer = True     # the old guard was this flag
for attempt in (lambda: mine.encode('abab'), lambda: mine.decode([256]), lambda: mine._apply_merges(b'abab'),
                lambda: BPETokenizer._apply_merges(mine, b'ab'), lambda: mine.decode_token_bytes(256)):
    try:
        attempt()
        print('ENCODED WITH OWN MERGES')
    except NotImplementedError:
        pass
again = BPETokenizer.from_gguf()
assert again.encode('Hello world') == ids
print('guarded')
""")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ENCODED" not in result.stdout and "guarded" in result.stdout
