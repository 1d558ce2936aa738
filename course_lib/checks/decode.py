"""Checks for Lab 0.2, chapter 3 (decode): one-query attention over a cache, a KV cache the model
calls, greedy generation with it, and the FLOPs and bytes of a decode step.

- ``decode_attention`` is compared with ``torch.nn.functional.scaled_dot_product_attention``
  (relative 1e-4, absolute 1e-5 for fp32, as in chapter 2).
- The student's cache class is fed the same q/k/v as the course's ``KVCache`` (a prompt, then one
  token at a time, layer by layer) and must return the same outputs.
- The student's ``generate(model, config, prompt_ids, max_new_tokens)`` runs the real model
  (SmolLM2, or a small random model) with the student's cache and must produce exactly the tokens
  of ``course_lib.model.greedy_generate``. The model it gets is the check's own, lent with
  ``checks.share(..., "__call__")`` inside a wrapper that counts, on the check's side, the positions
  every forward call processed: the prompt once, then one new token per call at the next position,
  one call per generated token. Recomputing the sequence at every step, or returning tokens
  without running the model, is what that count catches. The config comes as an argument (built
  with ``checks.make``): a lent object has no attributes to read.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F

from course_lib import roofline
from course_lib.checks import (
    attributes,
    call_student,
    fail,
    is_remote,
    one_thread,
    register_reference_names,
    require_own_implementation,
    share,
    short_repr,
    smollm2,
    type_name,
)
from course_lib.checks._shared import expect_raises, lend_config
from course_lib.checks.attention import ATOL, RTOL, random_qkv
from course_lib.checks.fixtures import recorded_check, reference
from course_lib.kv_cache import KVCache, kv_cache_bytes_mha
from course_lib.model import LlamaModel, ModelConfig, greedy_generate, random_weights

__all__ = [
    "chat_prompt_ids",
    "check_decode_attention",
    "check_decode_cache",
    "check_decode_step_cost",
    "check_generate",
    "check_kv_cache_bytes_mha",
    "check_kv_cache_bytes_mha_rejects_negative",
    "smollm2_model",
    "tiny_model",
]

# KVCache is not registered: other chapters hand it to students as a given tool. Its use inside
# the student's cache is caught by check_decode_cache instead.
register_reference_names("greedy_generate", "forward_cost", "decode_attention", "kv_cache_bytes_mha")

_reference_greedy_generate = reference(greedy_generate)
_reference_forward_cost = reference(roofline.forward_cost)
_reference_kv_cache_bytes_mha = reference(kv_cache_bytes_mha)


def _close(got: torch.Tensor, expected: torch.Tensor) -> bool:
    return got.shape == expected.shape and torch.allclose(got, expected, rtol=RTOL, atol=ATOL)


def _where_they_differ(got: torch.Tensor, expected: torch.Tensor, axes: tuple[str, ...]) -> tuple[str, list, list]:
    """Where two same-shape tensors differ most, and four values of each from there on.

    Returns (a description such as "[token 0, head 3, dims 5..8]", expected excerpt, got excerpt):
    the excerpt is taken along the last axis around the largest difference, so the values shown
    are ones that differ, not the first few of the tensor (which may well agree).
    """
    error = (got.double() - expected.double()).abs().nan_to_num(nan=float("inf"))
    index = [int(i) for i in torch.unravel_index(error.argmax(), error.shape)]
    width = min(4, got.shape[-1])
    start = max(0, min(index[-1] - 1, got.shape[-1] - width))
    row = tuple(index[:-1])
    where = ", ".join(f"{axis} {i}" for axis, i in zip(axes, row))
    where = f"[{where}{', ' if where else ''}{axes[-1]} {start}..{start + width - 1}]"
    return (where, [round(float(x), 6) for x in expected[row][start:start + width]],
            [round(float(x), 6) for x in got[row][start:start + width]])


def _sdpa_one_query(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None) -> torch.Tensor:
    """q [num_q_heads, head_dim] over k/v [kv_len, num_kv_heads, head_dim] by torch SDPA -> [num_q_heads, head_dim]."""
    group_size = q.shape[0] // k.shape[1]
    keys = k.repeat_interleave(group_size, dim=1).transpose(0, 1)  # [heads, kv_len, head_dim]
    values = v.repeat_interleave(group_size, dim=1).transpose(0, 1)
    return F.scaled_dot_product_attention(q[:, None], keys, values, scale=scale)[:, 0]


# ---------------------------------------------------------------------------------------------
# (a) attention of one new token over the cache
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_decode_attention(
    student_decode_attention: Callable, kv_len: int, num_q_heads: int, num_kv_heads: int, head_dim: int,
    *, seed: int = 0, scale: float | None = None,
) -> None:
    """``student_decode_attention(q, k_cache, v_cache, scale=...)`` with q [num_q_heads, head_dim] and
    caches [kv_len, num_kv_heads, head_dim] must match torch SDPA (no mask: the new token is the last one)."""
    require_own_implementation(student_decode_attention, "decode_attention")
    q, k, v = random_qkv(1, kv_len, num_q_heads, num_kv_heads, head_dim, seed=seed)
    q = q[0]
    call = (f"decode_attention(q {list(q.shape)}, k_cache/v_cache {list(k.shape)}"
            f"{'' if scale is None else f', scale={scale}'})")
    kwargs = {} if scale is None else {"scale": scale}
    got = call_student(student_decode_attention, call, q.clone(), k.clone(), v.clone(), copy_args=False,
                       show_args=False, **kwargs)
    expected = _sdpa_one_query(q, k, v, scale)
    if not isinstance(got, torch.Tensor):
        fail(f"{call} must return a torch.Tensor", expected="Tensor", got=type(got).__name__)
    if tuple(got.shape) != tuple(expected.shape):
        fail(f"{call} returned the wrong shape", expected=tuple(expected.shape), got=tuple(got.shape),
             hint="one output vector per query head: [num_q_heads, head_dim].")
    if _close(got, expected):
        return
    hint = "scores = q . k * scale for every cached key, softmax over the keys, then the weighted sum of values."
    if 1 < num_kv_heads < num_q_heads:
        tiled = torch.arange(num_q_heads) % num_kv_heads
        keys, values = k[:, tiled].transpose(0, 1), v[:, tiled].transpose(0, 1)
        wrong = F.scaled_dot_product_attention(q[:, None], keys, values, scale=scale)[:, 0]
        if _close(got, wrong):
            hint = ("query head h reads kv head h // group_size (heads 0..group_size-1 share kv head 0); "
                    "view q as [num_kv_heads, group_size, head_dim], not [group_size, num_kv_heads, head_dim].")
    if scale is None and _close(got, _sdpa_one_query(q, k, v, 1.0)):
        hint = "multiply the scores by 1 / sqrt(head_dim) when scale is None."
    error = (got - expected).abs()
    where, expected_values, got_values = _where_they_differ(got, expected, ("head", "dims"))
    fail(f"{call} differs from torch's scaled_dot_product_attention by up to {float(error.max()):.3g} "
         f"(tolerance: relative {RTOL:g}, absolute {ATOL:g}); shown: the output at {where}, around the largest "
         "difference", expected=expected_values, got=got_values, hint=hint)


# ---------------------------------------------------------------------------------------------
# (b) the cache the model calls
# ---------------------------------------------------------------------------------------------


def _small_config(num_layers: int, num_q_heads: int, num_kv_heads: int, head_dim: int, max_len: int) -> ModelConfig:
    return ModelConfig(num_layers=num_layers, hidden_size=num_q_heads * head_dim, num_q_heads=num_q_heads,
                       num_kv_heads=num_kv_heads, head_dim=head_dim, vocab_size=64, intermediate_size=32,
                       max_position_embeddings=max_len, rope_theta=10000.0, rms_norm_eps=1e-5)


def _holds_course_cache(obj: Any, depth: int = 0) -> bool:
    """True if ``obj`` is, or holds in its attributes, lists, tuples or dicts (a few levels down), a KVCache.

    Works on a handle to the student's object too: its class name and attributes come over the channel.
    """
    if isinstance(obj, KVCache) or type_name(obj) == "course_lib.kv_cache.KVCache":
        return True
    if depth >= 3:
        return False
    if isinstance(obj, (list, tuple, set)):
        children = list(obj)
    elif isinstance(obj, dict):
        children = list(obj.values())
    else:
        children = list(attributes(obj).values())
    return any(_holds_course_cache(child, depth + 1) for child in children)


@recorded_check
def check_decode_cache(
    student_cache_class: type, prompt_len: int, num_decode_steps: int, *, num_layers: int = 2,
    num_q_heads: int = 4, num_kv_heads: int = 2, head_dim: int = 8, seed: int = 0,
) -> None:
    """``student_cache_class(num_layers, max_seq_len, num_kv_heads, head_dim)`` must behave like KVCache:
    ``attend(layer_index, q, k, v)`` for a prompt (every layer), then for one token at a time, returns
    the same outputs as the reference, and ``seq_len`` counts the tokens stored."""
    require_own_implementation(student_cache_class, "DecodeCache")
    max_seq_len = prompt_len + num_decode_steps
    config = _small_config(num_layers, num_q_heads, num_kv_heads, head_dim, max_seq_len)
    name = f"DecodeCache({num_layers}, {max_seq_len}, {num_kv_heads}, {head_dim})"
    cache = call_student(student_cache_class, name, num_layers, max_seq_len, num_kv_heads, head_dim, show_args=False)
    if _holds_course_cache(cache):
        fail(f"{name} is or holds the course's KVCache, not your own cache", hint="store the keys and values "
             "in tensors of your own; reusing the reference earns no points.", show_values=False)
    reference = KVCache(config, max_seq_len)
    generator = torch.Generator().manual_seed(seed)
    steps = [prompt_len] + [1] * num_decode_steps
    for step, num_tokens in enumerate(steps):
        what = "the prompt" if step == 0 else f"decode step {step}"
        for layer in range(num_layers):
            q = torch.randn(num_tokens, num_q_heads, head_dim, generator=generator)
            k = torch.randn(num_tokens, num_kv_heads, head_dim, generator=generator)
            v = torch.randn(num_tokens, num_kv_heads, head_dim, generator=generator)
            call = f"{name}.attend({layer}, q {list(q.shape)}, k/v {list(k.shape)}) for {what}"
            got = call_student(cache.attend, call, layer, q.clone(), k.clone(), v.clone(), copy_args=False,
                               show_args=False)
            expected = reference.attend(layer, q, k, v)
            if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(expected.shape):
                fail(f"{call} returned the wrong shape", expected=tuple(expected.shape),
                     got=tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__,
                     hint="attend returns [num_tokens, num_q_heads, head_dim], like q.")
            if _close(got, expected):
                continue
            hint = ("store k and v at this layer's current length, then attend over everything this layer "
                    "stored so far (its own keys only: each layer has its own cache).")
            if step > 0:
                earlier = prompt_len + step - 1  # tokens this layer held before this step
                stored, stored_values = reference.keys[layer][:earlier], reference.values[layer][:earlier]
                without_new = _sdpa_one_query(q[0], stored, stored_values, None)[None]
                if _close(got, without_new):
                    hint = ("the new token's own key and value are missing: append k and v to the cache BEFORE "
                            "attending, so the new query also sees itself.")
            where, expected_values, got_values = _where_they_differ(got, expected, ("token", "head", "dims"))
            fail(f"{call} differs from the reference KV cache by up to {float((got - expected).abs().max()):.3g}; "
                 f"shown: the output at {where}, around the largest difference",
                 expected=expected_values, got=got_values, hint=hint)
        seq_len = getattr(cache, "seq_len", None)
        if seq_len != reference.seq_len:
            fail(f"{name}.seq_len after {what} (all {num_layers} layers)", expected=reference.seq_len, got=seq_len,
                 hint="seq_len is the number of tokens stored (in the last layer), prompt included.")


# ---------------------------------------------------------------------------------------------
# (c) greedy generation through the real model
# ---------------------------------------------------------------------------------------------


class _CountingModel:
    """Wraps a LlamaModel for the student's loop; records, per forward call, the token count, the
    positions and whether an attention context came with it. Lent with ``share(..., "__call__")``."""

    def __init__(self, model: LlamaModel) -> None:
        self._model = model
        self.calls: list[tuple[int, list[int], bool]] = []
        self.contexts: list[Any] = []

    def __call__(self, input_ids, positions=None, attention=None, logits_indices=None):
        input_ids = torch.as_tensor(input_ids)
        num_tokens = int(input_ids.numel())
        positions_list = (list(range(num_tokens)) if positions is None
                          else [int(p) for p in torch.as_tensor(positions).flatten()])
        self.calls.append((num_tokens, positions_list, attention is not None))
        self.contexts.append(attention)
        return self._model(input_ids, positions, attention, logits_indices)


def tiny_model(seed: int = 0) -> LlamaModel:
    """A 2-layer random-weight Llama (hidden 32, 4 query / 2 kv heads of 8, vocab 96) for fast checks."""
    config = ModelConfig(num_layers=2, hidden_size=32, num_q_heads=4, num_kv_heads=2, head_dim=8, vocab_size=96,
                         intermediate_size=64, max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-5)
    weights = random_weights(config, seed=seed)
    # Stronger layer outputs than the residual's embedding: with tied embeddings the model would
    # otherwise mostly repeat its input token, and a wrong position would go unnoticed.
    for layer in range(config.num_layers):
        weights[f"layers.{layer}.o_proj"] = weights[f"layers.{layer}.o_proj"] * 3
        weights[f"layers.{layer}.down_proj"] = weights[f"layers.{layer}.down_proj"] * 3
    return LlamaModel(config, weights).eval()


def _model_named(model: str, seed: int) -> LlamaModel:
    if model == "smollm2":
        return smollm2()[0]
    if model == "tiny":
        return tiny_model(seed)
    raise ValueError(f"model must be 'smollm2' or 'tiny', got {model!r}")


@recorded_check
def check_generate(student_generate: Callable, prompt_ids: list[int], max_new_tokens: int, *,
                   model: str = "smollm2", seed: int = 0) -> None:
    """``student_generate(model, config, prompt_ids, max_new_tokens)`` must return the tokens of greedy
    decoding with the course's KV cache, running the prompt once and then exactly one new token per
    forward call (counted on the check's side) through the student's own cache.

    model: "smollm2" or "tiny" (a 2-layer random model, ``tiny_model(seed)``).
    """
    require_own_implementation(student_generate, "generate")
    real_model = _model_named(model, seed)
    counting = _CountingModel(real_model)
    prompt_ids = [int(token) for token in prompt_ids]
    call = f"generate(model, config, {short_repr(prompt_ids)}, max_new_tokens={max_new_tokens}) on {model}"
    with one_thread(), torch.inference_mode():
        got = call_student(student_generate, call, share(counting, "__call__"), lend_config(real_model.config),
                           list(prompt_ids), max_new_tokens, copy_args=False, show_args=False)
    if not isinstance(got, list) or not all(isinstance(token, int) and not isinstance(token, bool) for token in got):
        fail(f"{call} must return a list of ints (the new token ids)", expected="list[int]",
             got=short_repr(got))
    eos = real_model.config.eos_token_id
    expected = None
    if len(counting.calls) == len(got) + 1:   # one forward call more than tokens: was the last one eos, dropped?
        expected = _greedy(real_model, prompt_ids, max_new_tokens)
        if expected and expected[-1] == eos and got == expected[:-1]:
            fail(f"{call}: your tokens stop right before the end-of-sequence token (id {eos}), which greedy "
                 f"decoding produced at index {len(expected) - 1}", expected=expected, got=got,
                 hint="the token that ends generation belongs to the result: append every sampled token first, "
                      "then stop when it is config.eos_token_id.")
    _check_forward_calls(call, counting, prompt_ids, got)
    if expected is None:
        expected = _greedy(real_model, prompt_ids, max_new_tokens)
    if got == expected:
        return
    index = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    hint = "greedy: the next token is the argmax of the last row of logits; stop after eos or max_new_tokens."
    if len(got) > len(expected) and got[:len(expected)] == expected and expected[-1] == eos:
        fail(f"{call}: generated {len(got) - len(expected)} tokens past the end-of-sequence token (id {eos}), "
             f"which came at index {len(expected) - 1}", expected=expected, got=got,
             hint="generation stops right after the end-of-sequence token (include it in the result), even when "
                  "fewer than max_new_tokens tokens came: compare each new token with config.eos_token_id.")
    if len(got) != len(expected) and got[:len(expected)] == expected[:len(got)]:
        hint = (f"the tokens agree but you returned {len(got)} of them, the reference {len(expected)}: stop after "
                "max_new_tokens tokens, or right after the eos token (config.eos_token_id, included).")
    fail(f"{call}: generated tokens differ from greedy decoding with the reference first at index {index} "
         f"(both agree on {got[:index]}; shown from index {index} on)",
         expected=expected[index:], got=got[index:], hint=hint)


def _greedy(model: LlamaModel, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """The reference's greedy tokens for the prompt (through ``reference``: the kit replays them)."""
    with one_thread(), torch.inference_mode():
        return _reference_greedy_generate(model, prompt_ids, max_new_tokens)


def _check_forward_calls(call: str, counting: _CountingModel, prompt_ids: list[int], got: list[int]) -> None:
    """What the model ran, measured on the check's side: the prompt once, then one token per step."""
    calls = counting.calls
    sizes = [num_tokens for num_tokens, _, _ in calls]
    if len(calls) != len(got):
        fail(f"{call}: the model ran {len(calls)} forward calls for {len(got)} generated tokens",
             expected=f"{len(got)} calls (one per generated token)", got=f"{len(calls)} calls of sizes {sizes[:8]}",
             hint="every generated token is the argmax of one forward call: the prompt's call gives the first, "
                  "each later call (one token) gives the next. Tokens that no forward call produced, or extra "
                  "calls, mean the loop is not greedy decoding through the model.")
    if not calls:
        return
    if not all(has_context for _, _, has_context in calls):
        fail(f"{call} called the model without an attention context", expected="model(ids, positions, cache)",
             got="model(ids, ...) with attention=None",
             hint="pass your DecodeCache as the model's `attention` argument, so each layer stores its keys there.")
    for context in counting.contexts:
        if not is_remote(context) and (type(context).__module__ or "").startswith("course_lib"):
            fail(f"{call} used the course's {type(context).__name__} instead of your DecodeCache",
                 expected="your DecodeCache", got=type(context).__name__, hint="create a DecodeCache and pass it.")
    first_size, first_positions, _ = calls[0]
    if first_size != len(prompt_ids) or first_positions != list(range(len(prompt_ids))):
        fail(f"{call}: the first forward call must run the whole prompt at positions 0 .. {len(prompt_ids) - 1}",
             expected=(len(prompt_ids), f"positions {list(range(len(prompt_ids)))[:6]}..."),
             got=(first_size, f"positions {first_positions[:6]}..."),
             hint="prefill: run every prompt token in one call, with positions torch.arange(len(prompt_ids)).")
    later_sizes = sizes[1:]
    if any(size != 1 for size in later_sizes):
        fail(f"{call}: after the prompt, every forward call must run exactly one new token (the cache holds the "
             "rest)", expected=[1] * len(later_sizes), got=later_sizes,
             hint="the cache holds every earlier token's keys and values; feed only the token just generated. "
                  "Running the whole sequence again is the quadratic recomputation a KV cache exists to avoid.")
    expected_positions = list(range(len(prompt_ids), len(prompt_ids) + len(later_sizes)))
    got_positions = [positions[0] for _, positions, _ in calls[1:]]
    if got_positions != expected_positions:
        fail(f"{call}: a new token's position is the number of tokens before it", expected=expected_positions,
             got=got_positions,
             hint="RoPE rotates the new token's query and key by its position: pass positions=[cache.seq_len].")


# ---------------------------------------------------------------------------------------------
# (d) the cache of a model without grouped-query attention
# ---------------------------------------------------------------------------------------------


def _mha_hint(got: Any, expected: float, bytes_per_element: float) -> str:
    """What a wrong size most likely forgot, from how it relates to the right one."""
    rule = ("per token, every layer keeps a key and a value (the factor 2) of hidden_size numbers each; multiply "
            "by num_layers, by the tokens and by bytes_per_element (bytes, not bits).")
    try:
        got = float(got)
    except (TypeError, ValueError):
        return "return a number of bytes. " + rule
    if expected and math.isclose(got, expected / 2, rel_tol=1e-9):
        return "half the right size: count the values as well as the keys (the factor 2). " + rule
    if expected and math.isclose(got, expected * 8, rel_tol=1e-9):
        return "eight times the right size: that is bits, and the answer is in bytes. " + rule
    if expected and bytes_per_element and math.isclose(got, expected / bytes_per_element, rel_tol=1e-9):
        return "that is the number of elements: multiply by bytes_per_element. " + rule
    return rule


@recorded_check
def check_kv_cache_bytes_mha(student_fn: Callable, num_layers: int, hidden_size: int, num_tokens: int,
                             bytes_per_element: float) -> None:
    """``student_fn(num_layers, hidden_size, num_tokens, bytes_per_element)`` must equal the reference's bytes."""
    require_own_implementation(student_fn, "kv_cache_bytes_mha")
    call = f"kv_cache_bytes_mha({num_layers}, {hidden_size}, num_tokens={num_tokens}, {bytes_per_element})"
    got = call_student(student_fn, call, num_layers, hidden_size, num_tokens, bytes_per_element, show_args=False)
    expected = _reference_kv_cache_bytes_mha(num_layers, hidden_size, num_tokens, bytes_per_element)
    right = isinstance(got, (int, float)) and not isinstance(got, bool) and math.isclose(got, expected, rel_tol=1e-12,
                                                                                         abs_tol=1e-9)
    if not right:
        fail(f"{call}: wrong number of bytes", expected=expected, got=short_repr(got),
             hint=_mha_hint(got, expected, bytes_per_element))


@recorded_check
def check_kv_cache_bytes_mha_rejects_negative(student_fn: Callable, num_layers: int, hidden_size: int,
                                              num_tokens: int, bytes_per_element: float) -> None:
    """A negative ``num_tokens`` must raise ValueError (the documented type) naming the argument."""
    require_own_implementation(student_fn, "kv_cache_bytes_mha")
    if num_tokens >= 0:
        raise ValueError(f"num_tokens must be negative for this check, got {num_tokens}")
    expect_raises(student_fn, f"kv_cache_bytes_mha({num_layers}, {hidden_size}, num_tokens={num_tokens}, "
                  f"{bytes_per_element:g})", ValueError, num_layers, hidden_size, num_tokens, bytes_per_element,
                  message_names=("num_tokens",),
                  hint="check num_tokens first and raise ValueError naming it and its allowed range (>= 0).")


# ---------------------------------------------------------------------------------------------
# (e) FLOPs and bytes of one decode step
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_decode_step_cost(
    student_decode_step_cost: Callable, config: ModelConfig, batch_size: int, context_len: int,
    bytes_per_element: float,
) -> None:
    """``student_decode_step_cost(config, batch_size, context_len, bytes_per_element)`` -> (flops, bytes)
    of one decode step of ``batch_size`` sequences with ``context_len`` tokens each (the new one included)."""
    require_own_implementation(student_decode_step_cost, "decode_step_cost")
    call = f"decode_step_cost(config, batch_size={batch_size}, context_len={context_len}, {bytes_per_element})"
    got = call_student(student_decode_step_cost, call, lend_config(config), batch_size, context_len, bytes_per_element,
                       copy_args=False, show_args=False)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        fail(f"{call} must return a pair (flops, bytes)", expected="(flops, bytes)", got=short_repr(got))
    expected = _reference_forward_cost(config, batch_size, 1, context_len, bytes_per_element)
    hints = {
        "flops": "per layer: the seven linear layers over batch_size tokens (2 * B * in * out each) plus attention "
                 "per sequence (4 * context_len * num_q_heads * head_dim); times num_layers; plus the lm_head "
                 "(2 * B * hidden * vocab).",
        "bytes": "weights once per step (not per sequence), inputs and outputs per token, and per sequence the "
                 "attention traffic (2 * (num_q_heads + context_len * num_kv_heads) * head_dim numbers); times "
                 "num_layers; plus the lm_head's weights, inputs and outputs.",
    }
    for index, (part, value) in enumerate((("flops", expected.flops), ("bytes", expected.bytes))):
        try:
            ok = math.isclose(float(got[index]), value, rel_tol=1e-9)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            fail(f"{call}: wrong number of {part}", expected=value, got=got[index], hint=hints[part])



def chat_prompt_ids(question: str) -> list[int]:
    """The token ids of one user ``question`` in SmolLM2's chat template (what the notebook's chat prompt is)."""
    _, tokenizer = smollm2()
    return tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": question}]))


def smollm2_model() -> LlamaModel:
    """SmolLM2-135M-Instruct (fp32, CPU), loaded once per process (``checks.smollm2()``'s model)."""
    return smollm2()[0]
