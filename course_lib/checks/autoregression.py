"""Checks for Lab 0.2, chapter 1 (autoregression: the cost of generating with and without a KV cache).

The counting rules, stated once (the notebook explains them):

- Generating ``new_tokens`` tokens from a ``prompt_len``-token prompt takes ``new_tokens`` forward
  passes. Pass k (from 1) produces token k; the last token produced is never run through the model.
- Without a cache, pass k runs the whole sequence so far: ``prompt_len + k - 1`` tokens.
- With a cache, pass 1 runs the prompt (the prefill) and every later pass runs one token.
- FLOPs: ``2 * num_parameters`` per token run (one multiply and one add per weight), plus
  attention: a token that attends over ``n`` keys costs ``4 * num_layers * num_q_heads * head_dim * n``
  (``q @ K^T`` and ``probabilities @ V``, 2 FLOPs per multiply-add each). Causally, the token at
  position j (from 0) attends over j + 1 keys.

``check_greedy_generate`` runs the student's generation loop on the real model wrapped in a
counter, so it can tell "wrong tokens" from "right tokens, but recomputed everything".
"""

from __future__ import annotations

import numbers
from typing import Any, Callable

import torch

from course_lib.checks import call_student, fail, register_reference_names, require_own_implementation, short_repr
from course_lib.model import ModelConfig, greedy_generate

__all__ = [
    "CountingModel",
    "check_generation_flops",
    "check_greedy_generate",
    "check_tokens_processed",
    "reference_generation_flops",
    "reference_tokens_processed",
]

register_reference_names("greedy_generate", "reference_tokens_processed", "reference_generation_flops")


# ---------------------------------------------------------------------------------------------
# The reference counts
# ---------------------------------------------------------------------------------------------


def _check_lengths(prompt_len: int, new_tokens: int) -> None:
    for name, value, minimum in (("prompt_len", prompt_len, 1), ("new_tokens", new_tokens, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def _sequence_lengths(prompt_len: int, new_tokens: int) -> list[int]:
    """Length of the sequence the model has seen after forward pass k, for k = 1..new_tokens."""
    return [prompt_len + step - 1 for step in range(1, new_tokens + 1)]


def reference_tokens_processed(prompt_len: int, new_tokens: int, use_cache: bool) -> int:
    """Tokens run through the model to generate ``new_tokens`` tokens (rules in the module docstring).

    Without a cache: new_tokens * prompt_len + new_tokens * (new_tokens - 1) / 2.
    With a cache: prompt_len + new_tokens - 1 (0 when new_tokens is 0).
    """
    _check_lengths(prompt_len, new_tokens)
    if new_tokens == 0:
        return 0
    if use_cache:
        return prompt_len + new_tokens - 1
    return sum(_sequence_lengths(prompt_len, new_tokens))


def reference_generation_flops(config: ModelConfig, num_parameters: int, prompt_len: int, new_tokens: int,
                               use_cache: bool) -> int:
    """FLOPs to generate ``new_tokens`` tokens: weights (2 per parameter per token) plus attention."""
    _check_lengths(prompt_len, new_tokens)
    per_key = 4 * config.num_layers * config.num_q_heads * config.head_dim
    total = 0
    for step, seq_len in enumerate(_sequence_lengths(prompt_len, new_tokens), start=1):
        if use_cache and step > 1:
            run_tokens, keys_attended = 1, seq_len  # one new token, attending over the whole cache
        else:
            run_tokens, keys_attended = seq_len, seq_len * (seq_len + 1) // 2  # causal: 1 + 2 + ... + seq_len
        total += 2 * num_parameters * run_tokens + per_key * keys_attended
    return total


# ---------------------------------------------------------------------------------------------
# (a) tokens processed, (b) FLOPs
# ---------------------------------------------------------------------------------------------


def check_tokens_processed(student_tokens_processed: Callable, prompt_len: int, new_tokens: int,
                           use_cache: bool) -> None:
    """``student_tokens_processed(prompt_len, new_tokens, use_cache)`` must give the reference's count."""
    require_own_implementation(student_tokens_processed, "tokens_processed")
    got = call_student(student_tokens_processed, "tokens_processed", prompt_len, new_tokens, use_cache)
    expected = reference_tokens_processed(prompt_len, new_tokens, use_cache)
    call = f"tokens_processed(prompt_len={prompt_len}, new_tokens={new_tokens}, use_cache={use_cache})"
    if _as_int(got) == expected:
        return
    got_int = _as_int(got)
    if got_int is None:
        fail(f"{call} must return an int", expected=expected, got=got,
             hint="a count of tokens is a whole number: use // for the halving, not /.")
    if use_cache:
        hint = "with a cache: the prompt runs once (pass 1), then each later pass runs the one token just produced."
        if got_int == expected + 1:
            hint = ("one too many: the last token generated is never fed back, because no pass comes after it. "
                    "new_tokens tokens take new_tokens passes: the prefill plus new_tokens - 1 single tokens.")
        elif got_int == new_tokens:
            hint = "the prompt is not free: pass 1 runs all prompt_len prompt tokens to fill the cache."
    else:
        hint = "without a cache, pass k (from 1) runs the whole sequence so far: prompt_len + k - 1 tokens."
        if got_int == expected + new_tokens:
            hint = ("pass k runs prompt_len + k - 1 tokens, not prompt_len + k: the token pass k produces is "
                    "not in the input yet (and the last one produced is never run).")
        elif got_int == new_tokens * prompt_len:
            hint = "the sequence grows by one token after every pass: add the tokens generated so far."
    fail(call, expected=expected, got=got, hint=hint)


def check_generation_flops(student_generation_flops: Callable, config: ModelConfig, num_parameters: int,
                           prompt_len: int, new_tokens: int, use_cache: bool) -> None:
    """``student_generation_flops(config, num_parameters, prompt_len, new_tokens, use_cache)``."""
    require_own_implementation(student_generation_flops, "generation_flops")
    got = call_student(student_generation_flops, "generation_flops", config, num_parameters, prompt_len, new_tokens,
                       use_cache)
    expected = reference_generation_flops(config, num_parameters, prompt_len, new_tokens, use_cache)
    call = (f"generation_flops(config, num_parameters={num_parameters:,}, prompt_len={prompt_len}, "
            f"new_tokens={new_tokens}, use_cache={use_cache})")
    got_int = _as_int(got)
    if got_int == expected:
        return
    if got_int is None:
        fail(f"{call} must return an int", expected=expected, got=got,
             hint="FLOP counts here are whole numbers: use // when halving n * (n + 1).")
    weights_only = 2 * num_parameters * reference_tokens_processed(prompt_len, new_tokens, use_cache)
    hint = ("per pass: 2 * num_parameters * (tokens run) + 4 * num_layers * num_q_heads * head_dim * (keys "
            "attended, summed over the tokens run).")
    if got_int == weights_only:
        hint = ("the attention term is missing: each token also multiplies its query with every key it sees and "
                "its probabilities with every value, 4 * num_layers * num_q_heads * head_dim FLOPs per key.")
    elif not use_cache and got_int > expected:
        hint = ("causal attention: the token at position j attends over j + 1 keys, so a pass over n tokens "
                "attends over 1 + 2 + ... + n = n * (n + 1) / 2 keys in total, not n * n.")
    elif use_cache and got_int < expected:
        hint = ("with a cache, the new token still attends over *every* cached key (prompt_len + k - 1 of them at "
                "pass k); the cache saves recomputing keys, not reading them.")
    fail(call, expected=expected, got=got, hint=hint)


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):   # int or a numpy integer
        return int(value)
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return int(value)
    return None


# ---------------------------------------------------------------------------------------------
# (c) the generation loop on the real model
# ---------------------------------------------------------------------------------------------


class CountingModel:
    """Wraps a ``LlamaModel`` and counts forward calls and the tokens they run; otherwise the model itself.

    ``model(input_ids, positions, attention, logits_indices)`` and ``model.forward(...)`` both count.
    Every other attribute (``config``, ``dtype``, ``device``...) is the wrapped model's.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self._model = model
        self.calls = 0
        self.tokens_run = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __call__(self, input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.calls += 1
        self.tokens_run += int(input_ids.shape[0]) if torch.is_tensor(input_ids) else 0
        return self._model(input_ids, *args, **kwargs)

    def forward(self, input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self(input_ids, *args, **kwargs)


def check_greedy_generate(student_greedy_generate: Callable, model: torch.nn.Module, prompt_ids: list[int],
                          max_new_tokens: int, use_cache: bool) -> None:
    """``student_greedy_generate(model, prompt_ids, max_new_tokens, use_cache)`` must give the reference's
    tokens, running exactly as many tokens through the model as the rule for ``use_cache`` says."""
    require_own_implementation(student_greedy_generate, "greedy_generate")
    counting = CountingModel(model)
    call = f"greedy_generate(model, {short_repr(list(prompt_ids))}, {max_new_tokens}, use_cache={use_cache})"
    got = call_student(student_greedy_generate, call, counting, list(prompt_ids), max_new_tokens, use_cache,
                       copy_args=False, show_args=False)
    expected = greedy_generate(model, list(prompt_ids), max_new_tokens, use_cache=True)
    if isinstance(got, torch.Tensor):
        got = got.tolist()
    if not isinstance(got, list) or not all(isinstance(token, int) for token in got):
        fail(f"{call} must return a list of ints (the generated ids only)", expected=expected,
             got=short_repr(got), hint="append int(logits.argmax(dim=-1)) at each step; do not return the prompt.")
    if got[: len(prompt_ids)] == list(prompt_ids) and got[len(prompt_ids):] == expected:
        fail(f"{call} returned the prompt too", expected=expected, got=got,
             hint="return only the generated ids.")
    if got != expected:
        index = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
        hint = "each step feeds the sequence so far and takes the argmax of the last position's logits."
        if len(got) > len(expected) and got[: len(expected)] == expected:
            hint = (f"stop right after the end-of-sequence token ({model.config.eos_token_id}, "
                    "model.config.eos_token_id) when it comes.")
        elif len(got) < len(expected) and expected[: len(got)] == got:
            hint = f"generate max_new_tokens = {max_new_tokens} tokens (unless the end-of-sequence token comes first)."
        elif use_cache and index >= 1:
            hint = (f"the first {index} token(s) match, then they drift: with a cache, pass each new token's "
                    "position (cache.next_positions(1)), and feed only the token just generated.")
        fail(f"{call}: the generated ids differ first at step {index}", expected=expected, got=got, hint=hint)
    expected_tokens = reference_tokens_processed(len(prompt_ids), len(expected), use_cache)
    if counting.tokens_run != expected_tokens:
        if use_cache:
            hint = ("with a cache the prompt runs once and then one token per step; running the whole sequence "
                    "each step gives the same ids but none of the savings.")
        else:
            hint = ("without a cache, each step runs the whole sequence so far through the model, once, with no "
                    "KV cache: the baseline the cache is compared with.")
        fail(f"{call}: right ids, but the model ran a different number of tokens than the rule says",
             expected=f"{expected_tokens} tokens", got=f"{counting.tokens_run} tokens in {counting.calls} calls",
             hint=hint)
