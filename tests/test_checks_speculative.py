"""The Lab 0.4 chapter 3-5 checks (course_lib.checks.speculative) accept the reference answers of
solutions/lab04-faster-decoding/03_speculative_sampling.ipynb, 04_drafts.ipynb and
05_speculative_engine.ipynb, and reject typical bugs, including each demo student's, with feedback
that names the mistake.
"""

from __future__ import annotations

import math
import runpy
from pathlib import Path

import pytest
import torch

from course_lib.checks import CheckFailed, one_thread
from course_lib.checks import speculative as checks
from course_lib.speculative import sample_with_uniform
from tests.notebook_answers import answer_sources

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions" / "lab04-faster-decoding"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab04-faster-decoding"
CH3, CH4, CH5 = "03_speculative_sampling", "04_drafts", "05_speculative_engine"


@pytest.fixture(autouse=True)
def single_thread():
    with one_thread():
        yield


def _student(notebook: str, replacements: dict[str, str] | None = None, only: tuple[str, ...] = ()) -> dict:
    namespace = {"__name__": "__main__", "math": math, "torch": torch, "sample_with_uniform": sample_with_uniform}
    for grade_id, source in answer_sources(SOLUTIONS / f"{notebook}.ipynb").items():
        if only and grade_id not in only:
            continue
        source = (replacements or {}).get(grade_id, source)
        exec(compile(source, f"<answer {grade_id}>", "exec"), namespace)
    return namespace


def _replace(notebook: str, grade_id: str, old: str, new: str, only: tuple[str, ...] = ()) -> dict:
    source = answer_sources(SOLUTIONS / f"{notebook}.ipynb")[grade_id]
    assert old in source, f"{old!r} not in the reference answer {grade_id}"
    return _student(notebook, {grade_id: source.replace(old, new)}, only)


def _demo(name: str) -> dict:
    return runpy.run_path(str(DEMO_SPECS / f"{name}.py"))["ANSWERS"]


def _fails(call, *needles):
    with pytest.raises(CheckFailed) as failure:
        call()
    message = str(failure.value)
    for needle in needles:
        assert needle in message, message
    return message


@pytest.fixture(scope="module")
def ch3():
    return _student(CH3)


# ----- chapter 3 -------------------------------------------------------------------------------------


def test_reference_chapter3_answers_pass(ch3):
    checks.check_acceptance_probabilities(ch3["acceptance_probabilities"], 6, 3, seed=0)
    checks.check_acceptance_probabilities(ch3["acceptance_probabilities"], 4, 1, seed=2, draft_outside_target=True)
    checks.check_acceptance_probabilities(ch3["acceptance_probabilities"], 3, 0, seed=3)
    checks.check_residual_distribution(ch3["residual_distribution"], 8, seed=0)
    checks.check_residual_distribution(ch3["residual_distribution"], 5, seed=2, equal=True)
    checks.check_verify(ch3["verify_draft"], 6, 3, 20, seed=0)
    checks.check_verify(ch3["verify_draft"], 30, 5, 10, seed=1, zero_fraction=0.3)
    checks.check_verify(ch3["verify_draft"], 5, 0, 5, seed=3)
    checks.check_chi_square(ch3["chi_square_statistic"], [10, 40, 50], [0.25, 0.25, 0.5])
    checks.check_chi_square(ch3["chi_square_statistic"], [3, 1], [1.0, 0.0])
    checks.check_chi_square(ch3["chi_square_statistic"], [3, 0, 7, 0], [0.3, 0.0, 0.7, 0.0])


def test_reference_verifier_passes_the_distribution_check(ch3):
    checks.check_verify_distribution(ch3["verify_draft"], 5, 3, 800, seed=4)


def test_demo_accept_without_min_loses_only_the_acceptance_cell():
    student = _student(CH3, _demo("buggy-accept-without-min"))
    _fails(lambda: checks.check_acceptance_probabilities(student["acceptance_probabilities"], 6, 3), "above 1")
    checks.check_verify(student["verify_draft"], 6, 3, 20, seed=0)  # same tokens: u < p/q decides like u < min(1, p/q)


def test_demo_resample_from_p_fails_both_ways():
    student = _student(CH3, _demo("buggy-resample-from-p"))
    _fails(lambda: checks.check_verify(student["verify_draft"], 6, 3, 20, seed=0), "residual")
    _fails(lambda: checks.check_verify_distribution(student["verify_draft"], 5, 3, 800, seed=4),
           "does not follow the target's distribution", "chi-square")


def test_demo_no_bonus_token_fails():
    student = _student(CH3, _demo("buggy-no-bonus-token"))
    _fails(lambda: checks.check_verify(student["verify_draft"], 6, 3, 20, seed=0), "bonus token")


@pytest.mark.parametrize("demo, needle", [
    ("buggy-bonus-from-wrong-row", "LAST row"),
    ("buggy-emits-rejected-draft", "A rejected draft is not emitted"),
    ("buggy-accept-less-or-equal", "The test is strict"),
])
def test_demo_verifier_bugs_fail_the_visible_check_with_their_own_hint(demo, needle):
    student = _student(CH3, _demo(demo))
    _fails(lambda: checks.check_verify(student["verify_draft"], vocab_size=6, num_drafts=3, num_trials=20, seed=0),
           needle)


def test_demo_chi_square_without_inf_fails_the_visible_check():
    student = _student(CH3, _demo("buggy-chi-square-no-inf"), only=("chi_square",))
    checks.check_chi_square(student["chi_square_statistic"], [10, 40, 50], [0.25, 0.25, 0.5])
    _fails(lambda: checks.check_chi_square(student["chi_square_statistic"], [4, 1, 5], [0.5, 0.0, 0.5]), "math.inf")


@pytest.mark.parametrize("old, new, needle", [
    ("(p / safe_q).clamp(max=1.0)", "(q / torch.where(p > 0, p, torch.ones_like(p))).clamp(max=1.0)", "upside down"),
])
def test_acceptance_bugs_fail(old, new, needle):
    student = _replace(CH3, "acceptance_probabilities", old, new, only=("acceptance_probabilities",))
    _fails(lambda: checks.check_acceptance_probabilities(student["acceptance_probabilities"], 6, 3), needle)


@pytest.mark.parametrize("old, new, needle, equal", [
    ("return residual / total", "return residual", "normalize", False),
    ("    if float(total) <= 0:\n        return target_row / target_row.sum()\n", "", "p == q", True),
])
def test_residual_bugs_fail(old, new, needle, equal):
    student = _replace(CH3, "residual_distribution", old, new, only=("residual_distribution",))
    _fails(lambda: checks.check_residual_distribution(student["residual_distribution"], 8, equal=equal), needle)


def test_verifier_that_does_not_stop_at_the_first_rejection_fails():
    student = _replace(CH3, "verify", "        return emitted\n", "        break\n")
    _fails(lambda: checks.check_verify(student["verify_draft"], 6, 3, 20, seed=0), "verify_draft")


@pytest.mark.parametrize("old, new, needle", [
    ("return float(((observed[possible] - expected) ** 2 / expected).sum())",
     "return float(((observed[possible] - expected) ** 2).sum())", "divide each squared difference"),
    ("return float(((observed[possible] - expected) ** 2 / expected).sum())",
     "return float(((observed[possible] - probs[possible]) ** 2 / probs[possible]).sum())", "expected *counts*"),
])
def test_chi_square_bugs_fail(old, new, needle):
    student = _replace(CH3, "chi_square", old, new, only=("chi_square",))
    _fails(lambda: checks.check_chi_square(student["chi_square_statistic"], [10, 40, 50], [0.25, 0.25, 0.5]), needle)


def test_chi_square_ignoring_impossible_categories_fails():
    student = _replace(CH3, "chi_square", "    if bool((observed[~possible] > 0).any()):\n        return math.inf\n", "",
                       only=("chi_square",))
    _fails(lambda: checks.check_chi_square(student["chi_square_statistic"], [3, 1], [1.0, 0.0]), "math.inf")


# ----- chapter 4 -------------------------------------------------------------------------------------


def test_reference_chapter4_answers_pass():
    student = _student(CH4, only=("ngram_draft", "expected_tokens"))
    for text, k in (([5, 6, 7, 8, 1, 2, 5, 6, 7], 3), ([1, 2, 3, 9, 2, 3, 4, 2, 3], 3), ([4, 4, 4], 2), ([5], 4),
                    ([3, 1, 3, 1, 3], 0)):
        checks.check_ngram_draft(student["ngram_draft"], text, k)
    checks.check_ngram_draft(student["ngram_draft"], [1, 2, 9, 2], 2, max_ngram=3, min_ngram=2)
    for args in ((0.8, 4, 0.05), (1.0, 3, 0.5), (0.0, 5, 0.1), (0.37, 1, 2.0, 1.3), (0.5, 0, 0.3)):
        checks.check_expected_tokens(student["expected_tokens_per_step"], student["speculative_speedup"], *args)


def test_demo_ngram_first_occurrence_fails():
    student = _student(CH4, _demo("buggy-ngram-first-occurrence"), only=("ngram_draft",))
    _fails(lambda: checks.check_ngram_draft(student["ngram_draft"], [1, 2, 3, 9, 2, 3, 4, 2, 3], 3), "FIRST occurrence")


@pytest.mark.parametrize("demo, text, k, needle", [
    ("buggy-ngram-shortest-first", [1, 2, 3, 4, 9, 3, 5, 1, 2, 3], 3, "longest first"),
    ("buggy-ngram-no-overlap", [4, 1, 1, 0, 1, 1, 1], 4, "overlaps the ending"),
    ("buggy-ngram-no-overlap", [0, 4, 2, 4, 2, 4, 2, 4], 4, "overlaps the ending"),
])
def test_demo_ngram_bugs_fail_with_a_hint_that_names_them(demo, text, k, needle):
    student = _student(CH4, _demo(demo), only=("ngram_draft",))
    checks.check_ngram_draft(student["ngram_draft"], [5, 6, 7, 8, 1, 2, 5, 6, 7], 3)  # the worked example still passes
    _fails(lambda: checks.check_ngram_draft(student["ngram_draft"], text, k), needle)


def test_ngram_that_counts_the_ending_itself_fails():
    student = _replace(CH4, "ngram_draft", "for start in range(len(token_ids) - n - 1, -1, -1):",
                       "for start in range(len(token_ids) - n, -1, -1):", only=("ngram_draft",))
    _fails(lambda: checks.check_ngram_draft(student["ngram_draft"], [5, 6, 7, 8, 1, 2, 5, 6, 7], 3), "ngram_draft")


def test_demo_expected_tokens_off_by_one_fails():
    student = _student(CH4, _demo("buggy-expected-tokens-off-by-one"), only=("expected_tokens",))
    _fails(lambda: checks.check_expected_tokens(student["expected_tokens_per_step"], student["speculative_speedup"],
                                                0.8, 4, 0.05), "one token short")


def test_expected_tokens_dividing_by_zero_at_alpha_one_fails():
    student = _replace(CH4, "expected_tokens", "    if acceptance_rate == 1:\n        return float(num_draft_tokens + 1)\n",
                       "", only=("expected_tokens",))
    _fails(lambda: checks.check_expected_tokens(student["expected_tokens_per_step"], student["speculative_speedup"],
                                                1.0, 3, 0.5), "alpha")


# ----- chapter 5 -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ch5():
    return _student(CH5, only=("commit_verified", "crossover_batch_size"))


def test_reference_chapter5_answers_pass(ch5):
    for args in ((10, [4, 5, 6], 2, 9), (10, [4, 5, 6], 3, 7), (37, [8], 0, 2), (0, [], 0, 5)):
        checks.check_commit_verified(ch5["commit_verified"], *args)
    checks.check_commit_in_engine(ch5["commit_verified"], "tiny", 6, 3, seed=0)
    checks.check_commit_in_engine(ch5["commit_verified"], "tiny", 5, 5, seed=1, num_blocks=40)
    for args in (([1, 4, 16], [10.0, 20.0, 50.0], [15.0, 22.0, 30.0]), ([1, 2], [3.0, 4.0], [2.0, 5.0]),
                 ([2, 3], [4.0, 4.0], [6.0, 4.0])):
        checks.check_crossover_batch_size(ch5["crossover_batch_size"], *args)


def test_demo_keeps_rejected_slots_fails_by_hand_and_in_the_engine():
    student = _student(CH5, _demo("buggy-keeps-rejected-slots"), only=("commit_verified",))
    _fails(lambda: checks.check_commit_verified(student["commit_verified"], 10, [4, 5, 6], 2, 9), "slots to free")
    _fails(lambda: checks.check_commit_in_engine(student["commit_verified"], "tiny", 6, 3, seed=0), "KV slots",
           "given back")


@pytest.mark.parametrize("old, new, needle_by_hand, needle_engine", [
    ("num_computed_tokens + 1 + num_accepted,", "num_computed_tokens + 2 + num_accepted,", "has not run", "could not apply"),
    ("list(draft_token_ids[:num_accepted]) + [next_token_id]", "list(draft_token_ids[:num_accepted])",
     "next_token_id is missing", "could not apply"),
    ("num_computed_tokens + 1 + num_accepted,", "num_computed_tokens + num_accepted,", "ran in this step",
     "could not apply"),
])
def test_commit_bugs_fail_by_hand_and_in_the_engine(old, new, needle_by_hand, needle_engine):
    student = _replace(CH5, "commit_verified", old, new, only=("commit_verified",))
    _fails(lambda: checks.check_commit_verified(student["commit_verified"], 10, [4, 5, 6], 2, 9), needle_by_hand)
    _fails(lambda: checks.check_commit_in_engine(student["commit_verified"], "tiny", 6, 3, seed=0), needle_engine)


def test_crossover_that_ignores_the_direction_fails(ch5):
    student = _replace(CH5, "crossover_batch_size", "if speedups[i] > 1 >= speedups[i + 1]:",
                       "if (speedups[i] - 1) * (speedups[i + 1] - 1) <= 0:", only=("crossover_batch_size",))
    _fails(lambda: checks.check_crossover_batch_size(student["crossover_batch_size"], [1, 2], [3.0, 4.0], [2.0, 5.0]),
           "return None")


@pytest.mark.slow
def test_commit_in_engine_on_smollm2(ch5):
    checks.check_commit_in_engine(ch5["commit_verified"], "smollm2", 2, 4)
