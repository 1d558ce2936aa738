"""The Lab 0.2 chapter-1 checks (course_lib.checks.autoregression) accept the reference answers and
reject each demo student's bug with feedback that names the mistake.

The counts are also checked against a brute-force walk (one pass, one token at a time), and the
generation loop runs on the real model: with and without the cache it must give the tokens of
``course_lib.model.greedy_generate``.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import nbformat
import pytest
import torch

from course_lib.checks import CheckFailed
from course_lib.checks import autoregression as checks
from course_lib.kv_cache import KVCache
from course_lib.model import ModelConfig
from tests.notebook_answers import answer_sources

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "01_autoregression"
SOLUTION = ROOT / "solutions" / "lab02-prefill-vs-decode" / f"{NOTEBOOK}.ipynb"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab02-prefill-vs-decode"

TINY = ModelConfig(num_layers=2, hidden_size=12, num_q_heads=3, num_kv_heads=1, head_dim=4, vocab_size=10,
                   intermediate_size=8, max_position_embeddings=64, rope_theta=10000.0, rms_norm_eps=1e-5)


def _answer_sources() -> dict[str, str]:
    return answer_sources(SOLUTION)


def _student(replacements: dict[str, str] | None = None) -> dict:
    """The namespace a student's notebook would have: every answer cell run, some replaced."""
    namespace = {"__name__": "__main__", "torch": torch, "KVCache": KVCache}
    for grade_id, source in _answer_sources().items():
        exec(compile((replacements or {}).get(grade_id, source), f"<answer {grade_id}>", "exec"), namespace)
    return namespace


def _demo_specs() -> dict[str, dict]:
    specs = {path.stem: runpy.run_path(str(path)) for path in sorted(DEMO_SPECS.glob("*.py"))}
    return {name: spec for name, spec in specs.items() if NOTEBOOK in spec.get("EXPECTED", {})}


def _demo(name: str) -> dict:
    return _student(_demo_specs()[name]["ANSWERS"])


def _failure(check, *args) -> str:
    with pytest.raises(CheckFailed) as caught:
        check(*args)
    return str(caught.value)


@pytest.fixture(scope="module")
def reference():
    return _student()


def _brute_force(prompt_len: int, new_tokens: int, use_cache: bool, num_parameters: int, config: ModelConfig):
    """(tokens, FLOPs) by walking the passes and the tokens of each pass one at a time."""
    per_key = 4 * config.num_layers * config.num_q_heads * config.head_dim
    tokens = flops = 0
    sequence_length = prompt_len
    for step in range(new_tokens):
        if use_cache and step > 0:
            positions = [sequence_length - 1]
        else:
            positions = list(range(sequence_length))
        for position in positions:
            tokens += 1
            flops += 2 * num_parameters + per_key * (position + 1)
        sequence_length += 1
    return tokens, flops


@pytest.mark.parametrize("prompt_len, new_tokens", [(1, 0), (1, 1), (3, 4), (1, 100), (17, 9), (200, 3)])
@pytest.mark.parametrize("use_cache", [False, True])
def test_reference_counts_match_a_brute_force_walk(prompt_len, new_tokens, use_cache):
    tokens, flops = _brute_force(prompt_len, new_tokens, use_cache, 1_000, TINY)
    assert checks.reference_tokens_processed(prompt_len, new_tokens, use_cache) == tokens
    assert checks.reference_generation_flops(TINY, 1_000, prompt_len, new_tokens, use_cache) == flops


def test_outline_figures():
    assert checks.reference_tokens_processed(1, 100, False) == 5_050
    assert checks.reference_tokens_processed(1, 100, True) == 100
    assert checks.reference_generation_flops(TINY, 1_000, 2, 2, False) == 10_864   # the worked example
    assert checks.reference_generation_flops(TINY, 1_000, 2, 2, True) == 6_576


def test_reference_answers_pass_the_counting_checks(reference):
    for prompt_len, new_tokens in [(1, 0), (1, 1), (3, 4), (1, 100), (64, 512)]:
        for use_cache in (False, True):
            checks.check_tokens_processed(reference["tokens_processed"], prompt_len, new_tokens, use_cache)
            checks.check_generation_flops(reference["generation_flops"], TINY, 777, prompt_len, new_tokens,
                                          use_cache)


def test_off_by_one_pass_is_rejected_with_a_hint():
    buggy = _demo("buggy-runs-last-token")
    message = _failure(checks.check_tokens_processed, buggy["tokens_processed"], 3, 4, True)
    assert "expected: 6" in message and "the last token generated is never fed back" in message
    message = _failure(checks.check_tokens_processed, buggy["tokens_processed"], 3, 4, False)
    assert "expected: 18" in message and "not prompt_len + k" in message


def test_square_attention_is_rejected_with_a_hint():
    buggy = _demo("buggy-square-attention")
    message = _failure(checks.check_generation_flops, buggy["generation_flops"], TINY, 1_000, 2, 2, False)
    assert "n * (n + 1) / 2" in message


def test_other_counting_mistakes_get_their_hints(reference):
    def weights_only(config, num_parameters, prompt_len, new_tokens, use_cache):
        return 2 * num_parameters * reference["tokens_processed"](prompt_len, new_tokens, use_cache)

    assert "attention term is missing" in _failure(checks.check_generation_flops, weights_only, TINY, 10, 3, 4, True)

    def float_count(prompt_len, new_tokens, use_cache):
        return new_tokens * prompt_len + new_tokens * (new_tokens - 1) / 2 + 0.25

    assert "must return an int" in _failure(checks.check_tokens_processed, float_count, 3, 4, False)

    def prompt_is_free(prompt_len, new_tokens, use_cache):
        return new_tokens

    assert "the prompt is not free" in _failure(checks.check_tokens_processed, prompt_is_free, 3, 4, True)


def test_reexporting_the_reference_earns_nothing():
    from course_lib.model import greedy_generate

    def student(model, prompt_ids, max_new_tokens, use_cache):
        return greedy_generate(model, prompt_ids, max_new_tokens, use_cache=use_cache)

    assert "reference" in _failure(checks.check_greedy_generate, student, None, [1], 1, True)
    assert "reference" in _failure(checks.check_tokens_processed, checks.reference_tokens_processed, 1, 1, True)


@pytest.mark.parametrize("name", sorted(_demo_specs()))
def test_demo_specs_name_real_answer_cells(name):
    spec = _demo_specs()[name]
    assert spec["BASE"] == "solution"
    assert set(spec["ANSWERS"]) <= set(_answer_sources())
    assert f"expected {spec['EXPECTED'][NOTEBOOK]:g}/9" in spec["DESCRIPTION"]


def test_header_announces_the_points():
    notebook = nbformat.read(SOLUTION, as_version=4)
    cells = [cell for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade")]
    points = sum(cell.metadata["nbgrader"]["points"] for cell in cells)
    assert f"**{points:g} points** in {len(cells)} graded test cells" in notebook.cells[0].source


# ---------------------------------------------------------------------------------------------
# The generation loop on the real model
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_reference_loop_passes_and_matches_with_and_without_cache(reference, smollm2):
    model, tokenizer = smollm2
    prompt = tokenizer.encode("The capital of France is")
    for use_cache in (False, True):
        checks.check_greedy_generate(reference["greedy_generate"], model, prompt, 4, use_cache)
    assert reference["greedy_generate"](model, prompt, 4, True) == reference["greedy_generate"](model, prompt, 4, False)


@pytest.mark.slow
def test_decode_at_position_zero_is_rejected_with_a_hint(smollm2):
    model, tokenizer = smollm2
    buggy = _demo("buggy-decode-position-zero")
    prompt = tokenizer.encode("The capital of France is")
    checks.check_greedy_generate(buggy["greedy_generate"], model, prompt, 4, False)
    message = _failure(checks.check_greedy_generate, buggy["greedy_generate"], model, prompt, 6, True)
    assert "differ first at step" in message and "cache.next_positions(1)" in message


@pytest.mark.slow
def test_recomputing_with_a_cache_flag_is_caught_by_the_token_count(reference, smollm2):
    model, tokenizer = smollm2

    def never_caches(model, prompt_ids, max_new_tokens, use_cache):
        return reference["greedy_generate"](model, prompt_ids, max_new_tokens, False)

    message = _failure(checks.check_greedy_generate, never_caches, model, tokenizer.encode("Hello"), 3, True)
    assert "right ids, but the model ran" in message and "none of the savings" in message


@pytest.mark.slow
def test_a_loop_that_ignores_eos_is_told_to_stop(reference, smollm2):
    model, tokenizer = smollm2
    question = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+2? Answer with a number only."}])
    prompt = tokenizer.encode(question)
    expected = reference["greedy_generate"](model, prompt, 12, True)
    assert expected[-1] == model.config.eos_token_id and len(expected) < 12   # the hidden test relies on it

    def ignores_eos(model, prompt_ids, max_new_tokens, use_cache):
        generated = reference["greedy_generate"](model, prompt_ids, max_new_tokens, use_cache)
        return generated + [model.config.eos_token_id] * (max_new_tokens - len(generated))

    assert "end-of-sequence token" in _failure(checks.check_greedy_generate, ignores_eos, model, prompt, 12, True)
