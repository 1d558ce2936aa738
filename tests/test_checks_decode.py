"""The chapter-3 checks (course_lib.checks.decode) accept the reference answers of
solutions/lab02-prefill-vs-decode/03_decode.ipynb and reject typical bugs, including each demo
student's, with feedback that names the mistake.

The answers (and the notebook's given ``prompt_attention``) are run with exec in a fresh namespace.
Fast tests use the checks' tiny random model; one slow test runs SmolLM2.
"""

from __future__ import annotations

import math
import re
import runpy
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F

from course_lib.checks import CheckFailed
from course_lib.checks import decode as checks
from course_lib.model import ModelConfig

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "lab02-prefill-vs-decode" / "03_decode.ipynb"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab02-prefill-vs-decode"
SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", re.MULTILINE)


def _cells():
    return nbformat.read(SOLUTION, as_version=4).cells


def _answer_sources() -> dict[str, str]:
    return {
        cell.metadata["nbgrader"]["grade_id"]: SOLUTION_MARKER.sub("", cell.source)
        for cell in _cells()
        if cell.metadata.get("nbgrader", {}).get("solution") and cell.cell_type == "code"
    }


def _student(replacements: dict[str, str] | None = None) -> dict:
    namespace = {"__name__": "__main__", "math": math, "torch": torch, "F": F}
    given = next(cell.source for cell in _cells() if "def prompt_attention" in cell.source)
    exec(compile(given, "<given prompt_attention>", "exec"), namespace)
    for grade_id, source in _answer_sources().items():
        exec(compile((replacements or {}).get(grade_id, source), f"<answer {grade_id}>", "exec"), namespace)
    return namespace


def _demo_answers(name: str) -> dict[str, str]:
    return runpy.run_path(str(DEMO_SPECS / f"{name}.py"))["ANSWERS"]


def _replace_in_answer(grade_id: str, old: str, new: str) -> dict:
    source = _answer_sources()[grade_id]
    assert old in source, f"{old!r} not in the reference answer {grade_id}"
    return _student({grade_id: source.replace(old, new)})


@pytest.fixture(scope="module")
def reference():
    return _student()


@pytest.fixture(scope="module")
def tiny():
    return checks.tiny_model(seed=3)


def test_reference_answers_pass(reference, tiny):
    for shape in ((3, 1, 1, 2), (20, 9, 3, 64), (1, 9, 3, 64), (33, 6, 1, 7)):
        checks.check_decode_attention(reference["decode_attention"], *shape)
    checks.check_decode_attention(reference["decode_attention"], 12, 4, 4, 32, scale=0.05)
    checks.check_decode_cache(reference["DecodeCache"], prompt_len=5, num_decode_steps=3)
    checks.check_decode_cache(reference["DecodeCache"], prompt_len=1, num_decode_steps=4, num_layers=1)
    checks.check_generate(reference["generate"], list(range(5, 45)), 30, model="tiny", seed=3)
    checks.check_generate(reference["generate"], [7], 1, model="tiny", seed=3)
    checks.check_decode_step_cost(reference["decode_step_cost"], tiny.config, 5, 17, 4)


def test_tiny_model_does_not_repeat_itself(tiny):
    # The generate checks on the tiny model only catch position bugs if its output depends on more than the last token.
    from course_lib.model import greedy_generate

    assert len(set(greedy_generate(tiny, list(range(5, 45)), 30))) > 5


@pytest.mark.slow
def test_reference_generate_matches_on_smollm2(reference):
    checks.check_generate(reference["generate"], [504, 3575, 282, 4649, 314], 20)
    checks.check_decode_step_cost(reference["decode_step_cost"], ModelConfig.from_gguf(), 64, 100, 2)


def test_demo_append_after_attend_is_named():
    student = _student(_demo_answers("buggy-append-after-attend"))
    with pytest.raises(CheckFailed, match="append k and v to the cache BEFORE"):
        checks.check_decode_cache(student["DecodeCache"], prompt_len=5, num_decode_steps=3)


def test_demo_rope_position_is_named(tiny):
    student = _student(_demo_answers("buggy-rope-position"))
    with pytest.raises(CheckFailed, match="a new token's position is the number of tokens before it"):
        checks.check_generate(student["generate"], list(range(5, 45)), 30, model="tiny", seed=3)


def test_wrong_group_view_is_named():
    # Query head h read as group member h // num_kv_heads of kv head h % num_kv_heads (heads tiled, not grouped).
    source = (_answer_sources()["decode_attention"]
              .replace("q.view(num_kv_heads, num_q_heads // num_kv_heads, head_dim)",
                       "q.view(num_q_heads // num_kv_heads, num_kv_heads, head_dim).transpose(0, 1)")
              .replace("return output.reshape(num_q_heads, head_dim)",
                       "return output.transpose(0, 1).reshape(num_q_heads, head_dim)"))
    student = _student({"decode_attention": source})
    with pytest.raises(CheckFailed, match="view q as"):
        checks.check_decode_attention(student["decode_attention"], 20, 9, 3, 64)


def test_missing_scale_in_decode_is_named():
    student = _replace_in_answer("decode_attention", "k_cache) * scale", "k_cache)")
    with pytest.raises(CheckFailed, match="1 / sqrt"):
        checks.check_decode_attention(student["decode_attention"], 20, 9, 3, 64)


def test_wrong_seq_len_is_named():
    student = _replace_in_answer("DecodeCache", "return self.lengths[-1]", "return self.lengths[0] - 1")
    with pytest.raises(CheckFailed, match="seq_len"):
        checks.check_decode_cache(student["DecodeCache"], prompt_len=5, num_decode_steps=3)


def test_generate_without_cache_is_named(reference):
    def generate(model, config, prompt_ids, max_new_tokens):
        ids = list(prompt_ids)
        cache = reference["DecodeCache"](config.num_layers, len(ids) + max_new_tokens, config.num_kv_heads,
                                         config.head_dim)
        generated = []
        for _ in range(max_new_tokens):
            cache.lengths = [0] * config.num_layers  # start over: recompute everything every step
            logits = model(torch.tensor(ids + generated), None, cache)
            generated.append(int(logits[-1].argmax()))
        return generated

    with pytest.raises(CheckFailed, match="exactly one new token"):
        checks.check_generate(generate, [5, 6, 7], 4, model="tiny", seed=3)


def test_generate_with_the_course_cache_earns_nothing(tiny):
    from course_lib.kv_cache import KVCache

    def generate(model, config, prompt_ids, max_new_tokens):
        cache = KVCache(config, len(prompt_ids) + max_new_tokens)
        logits = model(torch.tensor(prompt_ids), cache.next_positions(len(prompt_ids)), cache)
        return [int(logits[-1].argmax())]

    with pytest.raises(CheckFailed, match="reference|instead of your DecodeCache"):
        checks.check_generate(generate, [5, 6, 7], 1, model="tiny", seed=3)


def test_generate_that_forgets_the_stop_rule_is_named(reference):
    student = _replace_in_answer("generate", "len(generated) == max_new_tokens", "len(generated) == max_new_tokens + 1")
    with pytest.raises(CheckFailed, match="stop after max_new_tokens|forward calls for"):
        checks.check_generate(student["generate"], [5, 6, 7], 4, model="tiny", seed=3)


def test_recomputing_and_hard_coded_generations_are_caught_by_the_forward_calls():
    recomputes = _student(_demo_answers("buggy-generate-recomputes"))
    with pytest.raises(CheckFailed, match="exactly one new token"):
        checks.check_generate(recomputes["generate"], [5, 6, 7], 4, model="tiny", seed=3)
    hardcoded = _student(_demo_answers("buggy-generate-hardcoded"))
    with pytest.raises(CheckFailed, match="ran 0 forward calls for 20 generated tokens"):
        checks.check_generate(hardcoded["generate"], [504, 3575, 282, 4649, 314], 20, model="tiny", seed=3)


def test_the_model_the_student_gets_is_lent_and_counted(reference):
    from course_lib.checks.decode import _CountingModel

    counting = _CountingModel(checks.tiny_model(seed=3))
    config = counting._model.config
    generated = reference["generate"](counting, config, [5, 6, 7], 3)
    assert [num_tokens for num_tokens, _, _ in counting.calls] == [3, 1, 1][: len(generated)]
    assert [positions[0] for _, positions, _ in counting.calls] == [0, 3, 4][: len(generated)]


def test_decode_cost_without_lm_head_is_named(tiny):
    student = _replace_in_answer("decode_step_cost", "flops += 2 * batch_size * hidden * config.vocab_size", "")
    with pytest.raises(CheckFailed, match="wrong number of flops"):
        checks.check_decode_step_cost(student["decode_step_cost"], tiny.config, 5, 17, 4)


def test_cache_that_wraps_the_course_cache_earns_nothing():
    from course_lib.kv_cache import KVCache

    class DecodeCache:
        def __init__(self, num_layers, max_seq_len, num_kv_heads, head_dim):
            self.inner = KVCache(checks._small_config(num_layers, 4, num_kv_heads, head_dim, max_seq_len), max_seq_len)

        def attend(self, layer_index, q, k, v):
            return self.inner.attend(layer_index, q, k, v)

    with pytest.raises(CheckFailed, match="holds the course's KVCache"):
        checks.check_decode_cache(DecodeCache, prompt_len=5, num_decode_steps=3)



def test_a_list_of_course_caches_is_found_too():
    """The old check looked only at direct attributes; a list of KVCache objects slipped through."""
    student = _student(_demo_answers("buggy-cache-holds-kvcache-list"))
    with pytest.raises(CheckFailed, match="holds the course's KVCache"):
        checks.check_decode_cache(student["DecodeCache"], prompt_len=5, num_decode_steps=3)
    assert student["DecodeCache"](2, 8, 2, 8).attend   # it does work: only its origin is wrong


def test_a_difference_is_shown_where_it_is_not_in_the_first_values(reference):
    def last_head_wrong(q, k_cache, v_cache, scale=None):
        output = reference["decode_attention"](q, k_cache, v_cache, scale)
        output[-1, -3] += 1.0
        return output

    with pytest.raises(CheckFailed) as caught:
        checks.check_decode_attention(last_head_wrong, 20, 9, 3, 64)
    message = str(caught.value)
    assert "[head 8, dims 60..63]" in message
    expected = re.search(r"expected: (\[.*\])", message).group(1)
    got = re.search(r"got: +(\[.*\])", message).group(1)
    assert expected != got


@pytest.mark.slow
def test_generate_that_runs_past_the_end_of_sequence_is_named(reference):
    student = _student(_demo_answers("buggy-generate-ignores-eos"))
    prompt = checks.chat_prompt_ids("What is the capital of France?")
    checks.check_generate(reference["generate"], prompt, 12)
    with pytest.raises(CheckFailed, match="end-of-sequence token"):
        checks.check_generate(student["generate"], prompt, 12)


@pytest.mark.slow
def test_generate_that_drops_the_end_of_sequence_token_is_told_about_it(reference):
    # It stops at eos but leaves the token out: one forward call more than tokens, and the tokens one short.
    student = _replace_in_answer("generate", """            generated.append(int(logits[0].argmax()))
            if generated[-1] == config.eos_token_id or len(generated) == max_new_tokens:
                return generated""", """            token = int(logits[0].argmax())
            if token == config.eos_token_id:
                return generated
            generated.append(token)
            if len(generated) == max_new_tokens:
                return generated""")
    prompt = checks.chat_prompt_ids("What is the capital of France?")
    with pytest.raises(CheckFailed) as failure:
        checks.check_generate(student["generate"], prompt, 12)
    message = str(failure.value)
    assert "stop right before the end-of-sequence token" in message and "belongs to the result" in message
