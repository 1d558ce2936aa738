"""The chapter-3 checks (course_lib.checks.kv_cache) accept the reference answers and reject typical
mistakes, the demo students' among them, with feedback that names the mistake.

Answers come from the solution notebook's answer cells and the demo specs, defined with exec in a
fresh namespace (the notebook itself is not run), so these tests stay fast.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import torch

from course_lib.checks import CheckFailed
from course_lib.checks import kv_cache as checks
from course_lib.sim.fragmentation import Reservation
from tests.notebook_answers import answer_sources

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "lab01-text-to-tensors" / "03_kv_cache.ipynb"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab01-text-to-tensors"


def _answer_sources() -> dict[str, str]:
    return answer_sources(SOLUTION)


def _student(replacements: dict[str, str] | None = None) -> dict:
    """The namespace a student's notebook would have: the reference answers, some replaced."""
    namespace = {"torch": torch, "Reservation": Reservation}
    for grade_id, source in {**_answer_sources(), **(replacements or {})}.items():
        exec(source, namespace)
    return namespace


def _demo_answers(name: str) -> dict[str, str]:
    return runpy.run_path(str(DEMO_SPECS / f"{name}.py"))["ANSWERS"]


def _fails(call, phrase: str) -> str:
    with pytest.raises(CheckFailed) as info:
        call()
    assert phrase in str(info.value), str(info.value)
    return str(info.value)


def test_reference_answers_pass_every_check():
    student = _student()
    for config in (checks.LLAMA3_8B, checks.LLAMA2_7B, checks.smollm2_config()):
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn):
            checks.check_kv_cache_bytes_per_token(student["kv_cache_bytes_per_token"], config, dtype)
            checks.check_kv_cache_bytes(student["kv_cache_bytes"], config, 300, 7, dtype)
    checks.check_matches_real_allocations(student["kv_cache_bytes"], seq_len=33, dtype=torch.float16,
                                          num_blocks=2, block_size=8)
    checks.check_kv_cache_bytes_rejects_bad_lengths(student["kv_cache_bytes"])
    for prompt_len, num_new in ((1, 1), (1, 100), (37, 1000)):
        checks.check_tokens_through_model(student["tokens_through_model"], prompt_len, num_new)
    checks.check_waste_breakdown(student["waste_breakdown"], *checks.example_pool())
    for seed in range(4):
        checks.check_waste_breakdown_on_simulation(student["waste_breakdown"], seed=seed)


def test_worked_example_numbers():
    student = _student()
    assert student["kv_cache_bytes_per_token"](checks.LLAMA3_8B, torch.float16) == 128 * 2**10
    assert student["kv_cache_bytes"](checks.LLAMA3_8B, 2048, 64, torch.float16) == 16 * 2**30
    assert student["kv_cache_bytes_per_token"](checks.smollm2_config(), torch.float32) == 46_080
    assert student["tokens_through_model"](1, 100, False) == 5050
    specs, pool_slots, request_slots = checks.example_pool()
    reservations = [Reservation(*spec) for spec in specs]
    assert student["waste_breakdown"](reservations, pool_slots, request_slots) == {
        "used": 11, "reserved_unused": 5, "internal": 6, "free": 10, "external": 10}


def test_query_heads_demo_student_fails_with_a_gqa_hint():
    student = _student(_demo_answers("buggy-cache-counts-query-heads"))
    _fails(lambda: checks.check_kv_cache_bytes_per_token(student["kv_cache_bytes_per_token"], checks.LLAMA3_8B,
                                                         torch.float16), "only the KV heads are cached")
    _fails(lambda: checks.check_matches_real_allocations(student["kv_cache_bytes"], 128, torch.float32),
           "KVCache(config, max_seq_len=128")
    # Without GQA the bug is invisible: the hidden tests need a GQA model to catch it.
    checks.check_kv_cache_bytes_per_token(student["kv_cache_bytes_per_token"], checks.LLAMA2_7B, torch.float16)


@pytest.mark.parametrize(
    ("body", "phrase"),
    [
        ("config.num_layers * config.num_kv_heads * config.head_dim * size", "the factor 2"),
        ("2 * config.num_layers * config.num_kv_heads * config.head_dim * size * 8", "not bits"),
        ("2 * config.num_layers * config.hidden_size * size", "only the KV heads are cached"),
    ],
)
def test_size_mistakes_get_a_matching_hint(body, phrase):
    source = f"def kv_cache_bytes_per_token(config, dtype):\n    size = torch.empty((), dtype=dtype).element_size()\n    return {body}\n"
    student = _student({"kv_cache_bytes_per_token": source})
    _fails(lambda: checks.check_kv_cache_bytes_per_token(student["kv_cache_bytes_per_token"], checks.smollm2_config(),
                                                         torch.float16), phrase)


def test_missing_validation_is_reported():
    source = ("def kv_cache_bytes(config, seq_len, batch_size=1, dtype=torch.float16):\n"
              "    return kv_cache_bytes_per_token(config, dtype) * seq_len * batch_size\n")
    student = _student({"kv_cache_bytes": source})
    _fails(lambda: checks.check_kv_cache_bytes_rejects_bad_lengths(student["kv_cache_bytes"]), "instead of raising")


def test_forgetting_the_batch_is_reported():
    source = ("def kv_cache_bytes(config, seq_len, batch_size=1, dtype=torch.float16):\n"
              "    return kv_cache_bytes_per_token(config, dtype) * seq_len\n")
    student = _student({"kv_cache_bytes": source})
    _fails(lambda: checks.check_kv_cache_bytes(student["kv_cache_bytes"], checks.LLAMA3_8B, 2048, 64, torch.float16),
           "batch_size=64")


def test_token_count_off_by_one_is_reported():
    source = ("def tokens_through_model(prompt_len, num_new_tokens, use_cache):\n"
              "    return prompt_len + num_new_tokens if use_cache else "
              "num_new_tokens * prompt_len + num_new_tokens * (num_new_tokens - 1) // 2\n")
    student = _student({"tokens_through_model": source})
    _fails(lambda: checks.check_tokens_through_model(student["tokens_through_model"], 1, 100),
           "prompt_len + num_new_tokens - 1")


def test_tail_hole_demo_student_fails_with_a_hint_about_the_tail():
    student = _student(_demo_answers("buggy-waste-tail-hole"))
    _fails(lambda: checks.check_waste_breakdown(student["waste_breakdown"], *checks.example_pool()),
           "the one after the last")


def test_unsorted_reservations_are_caught():
    source = _answer_sources()["waste_breakdown"].replace("sorted(reservations, key=lambda r: r.start)", "reservations")
    student = _student({"waste_breakdown": source})
    reservations, pool_slots, request_slots = checks.example_pool()
    with pytest.raises(CheckFailed):
        checks.check_waste_breakdown(student["waste_breakdown"], list(reversed(reservations)), pool_slots,
                                     request_slots)


def test_every_free_slot_counted_as_external_is_reported():
    source = _answer_sources()["waste_breakdown"].replace("if hole < request_slots:", "if True:")
    student = _student({"waste_breakdown": source})
    reservations, pool_slots, _ = checks.example_pool()
    _fails(lambda: checks.check_waste_breakdown(student["waste_breakdown"], reservations, pool_slots, 4),
           "SHORTER than request_slots")


def test_re_exporting_the_reference_earns_nothing():
    from course_lib.kv_cache import kv_cache_bytes
    from course_lib.sim.fragmentation import waste_breakdown

    _fails(lambda: checks.check_kv_cache_bytes(kv_cache_bytes, checks.LLAMA3_8B, 1, 1, torch.float16),
           "reference implementation")
    namespace = {"waste_breakdown_ref": waste_breakdown}
    exec("def waste_breakdown(r, p, q):\n    return waste_breakdown_ref(r, p, q)\n", namespace)
    _fails(lambda: checks.check_waste_breakdown(namespace["waste_breakdown"], *checks.example_pool()),
           "calls the course's reference")


def test_a_crash_becomes_feedback_that_names_the_call():
    student = _student({"waste_breakdown": "def waste_breakdown(r, p, q):\n    return r[0].nothing\n"})
    _fails(lambda: checks.check_waste_breakdown(student["waste_breakdown"], *checks.example_pool()),
           "waste_breakdown(")


def test_a_wrong_exception_type_for_bad_lengths_is_reported():
    source = ("def kv_cache_bytes(config, seq_len, batch_size=1, dtype=torch.float16):\n"
              "    assert seq_len >= 0 and batch_size >= 0, 'negative'\n"
              "    return kv_cache_bytes_per_token(config, dtype) * seq_len * batch_size\n")
    student = _student({"kv_cache_bytes": source})
    _fails(lambda: checks.check_kv_cache_bytes_rejects_bad_lengths(student["kv_cache_bytes"]),
           "raised AssertionError; the documented error is ValueError")
    mute = ("def kv_cache_bytes(config, seq_len, batch_size=1, dtype=torch.float16):\n"
            "    if seq_len < 0 or batch_size < 0:\n"
            "        raise ValueError('no')\n"
            "    return kv_cache_bytes_per_token(config, dtype) * seq_len * batch_size\n")
    student = _student({"kv_cache_bytes": mute})
    _fails(lambda: checks.check_kv_cache_bytes_rejects_bad_lengths(student["kv_cache_bytes"]), "names none of")


def test_reservations_may_be_given_as_tuples_or_objects():
    student = _student()
    specs, pool_slots, request_slots = checks.example_pool()
    checks.check_waste_breakdown(student["waste_breakdown"], specs, pool_slots, request_slots)
    checks.check_waste_breakdown(student["waste_breakdown"], [Reservation(*spec) for spec in specs], pool_slots,
                                 request_slots)


def test_tokens_through_model_reference_is_the_course_function():
    from course_lib.kv_cache import tokens_through_model

    assert (tokens_through_model(1, 100, True), tokens_through_model(1, 100, False)) == (100, 5050)
    assert tokens_through_model(10, 3, False) == 10 + 11 + 12


def test_waste_that_assumes_sorted_reservations_fails_the_unsorted_visible_case_with_a_hint():
    student = _student(_demo_answers("buggy-waste-assumes-sorted"))
    reservations, pool_slots, request_slots = checks.example_pool()
    checks.check_waste_breakdown(student["waste_breakdown"], reservations, pool_slots, request_slots)  # sorted: right
    message = _fails(lambda: checks.check_waste_breakdown(student["waste_breakdown"], reservations[::-1], pool_slots,
                                                          5), "not listed in order of start")
    assert "sort it by start" in message


def test_kv_cache_bytes_without_an_argument_check_fails_the_visible_value_error_case():
    student = _student(_demo_answers("buggy-kv-bytes-no-valueerror"))
    checks.check_kv_cache_bytes(student["kv_cache_bytes"], checks.LLAMA3_8B, 2048, 1, torch.float16)
    message = _fails(lambda: checks.check_kv_cache_bytes_rejects_bad_lengths(student["kv_cache_bytes"]),
                     "returned instead of raising ValueError")
    assert "seq_len=-1" in message
