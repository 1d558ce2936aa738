"""Checks for Lab 0.1, chapter 3 (the KV cache).

A student's size formulas are compared with the reference in :mod:`course_lib.kv_cache` *and*
with the bytes our engine really allocates (``KVCache.nbytes``, ``PagedKVCache.nbytes``); the
token-count formula with a direct sum over decoding steps; the waste accounting of a contiguous
pool with :func:`course_lib.sim.fragmentation.waste_breakdown` on hand-made states and on states
taken from simulator runs.

Students' functions receive a ``ConfigSizes``, the model sizes alone, rather than a
``ModelConfig``: it has every field a formula needs, but no helper method to call instead. It and
the ``Reservation`` objects of the waste exercise are built with ``checks.make``, where the
student's code runs; test cells describe reservations as plain tuples
``(request_id, start, size, num_tokens, final_len)``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, Callable

import torch

from course_lib.checks import (
    call_student,
    expect_equal,
    fail,
    make,
    register_reference_names,
    require_own_implementation,
)
from course_lib.checks._shared import expect_raises
from course_lib.checks.fixtures import recorded_check, reference
from course_lib.kv_cache import KVCache, kv_cache_bytes, kv_cache_bytes_per_token, tokens_through_model
from course_lib.model import ModelConfig
from course_lib.paged import PagedKVCache
from course_lib.sim.fragmentation import (
    Reservation,
    random_workload,
    simulate_contiguous,
    waste_breakdown,
)

__all__ = [
    "ConfigSizes",
    "LLAMA2_7B",
    "LLAMA3_8B",
    "check_kv_cache_bytes",
    "check_kv_cache_bytes_per_token",
    "check_kv_cache_bytes_rejects_bad_lengths",
    "check_matches_real_allocations",
    "check_tokens_through_model",
    "check_waste_breakdown",
    "check_waste_breakdown_on_simulation",
    "example_pool",
    "smollm2_config",
]

register_reference_names("kv_cache_bytes", "kv_cache_bytes_per_token", "waste_breakdown", "free_holes",
                         "kv_bytes_per_token")


_reference_kv_cache_bytes_per_token = reference(kv_cache_bytes_per_token)
_reference_kv_cache_bytes = reference(kv_cache_bytes)
_reference_waste_breakdown = reference(waste_breakdown)
_reference_tokens_through_model = reference(tokens_through_model)

ReservationLike = Reservation | tuple[int, int, int, int, int]


@dataclass(frozen=True)
class ConfigSizes:
    """The sizes of a Llama-style model (no methods): what a KV-cache formula may read."""

    num_layers: int
    hidden_size: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int

    @classmethod
    def of(cls, config) -> ConfigSizes:
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls)})


# Published sizes (the models' config.json files): Llama-3-8B uses grouped-query attention with
# 8 KV heads for 32 query heads; Llama-2-7B gives every query head its own K and V.
LLAMA3_8B = ConfigSizes(num_layers=32, hidden_size=4096, num_q_heads=32, num_kv_heads=8, head_dim=128,
                        vocab_size=128256)
LLAMA2_7B = ConfigSizes(num_layers=32, hidden_size=4096, num_q_heads=32, num_kv_heads=32, head_dim=128,
                        vocab_size=32000)


@lru_cache(maxsize=1)
def _smollm2_model_config() -> ModelConfig:
    return ModelConfig.from_gguf()


def smollm2_config() -> ConfigSizes:
    """SmolLM2-135M's sizes, read from the GGUF file (no weights are loaded)."""
    return ConfigSizes.of(_smollm2_model_config())


def _as_model_config(sizes: ConfigSizes) -> ModelConfig:
    """A ModelConfig with these sizes, so the reference and the real caches can use it."""
    return ModelConfig(**{f.name: getattr(sizes, f.name) for f in fields(ConfigSizes)},
                       intermediate_size=4 * sizes.hidden_size, max_position_embeddings=8192,
                       rope_theta=10000.0, rms_norm_eps=1e-5)


def _lend(config: ConfigSizes) -> ConfigSizes:
    """The sizes for the student's code, built where it runs."""
    return make(ConfigSizes, **{f.name: getattr(config, f.name) for f in fields(ConfigSizes)})


def _config_name(config: ConfigSizes) -> str:
    return (f"config(layers={config.num_layers}, q_heads={config.num_q_heads}, kv_heads={config.num_kv_heads}, "
            f"head_dim={config.head_dim})")


def _size_hint(got: Any, expected: int, config: ConfigSizes, per_token: int) -> str:
    """Name the usual mistake when the wrong answer is a recognizable multiple of the right one."""
    if not isinstance(got, (int, float)) or isinstance(got, bool) or expected == 0:
        return "return an int: a number of bytes."
    ratio = got / expected
    group = config.num_q_heads / config.num_kv_heads
    if group != 1 and abs(ratio - group) < 1e-9:
        return (f"too large by num_q_heads / num_kv_heads = {group:g}: only the KV heads are cached "
                "(grouped-query attention shares each K/V head between several query heads); use "
                "num_kv_heads x head_dim per layer, not num_q_heads x head_dim (= hidden_size).")
    if abs(ratio - 0.5) < 1e-9:
        return "half the expected size: count both tensors, a key AND a value per token (the factor 2)."
    if abs(ratio - 2) < 1e-9:
        return "twice the expected size: the factor 2 is for K and V; count it once."
    for wrong, right in ((8, 1), (16, 2), (32, 4)):
        if abs(ratio - wrong / right) < 1e-9:
            return "8 times too large: the element size is in bytes (fp16: 2), not bits (16)."
    if expected % per_token == 0 and got == per_token:
        return "that is the size of one token; multiply by seq_len and batch_size."
    return "bytes = 2 (K and V) x num_layers x num_kv_heads x head_dim x bytes per element, per token."


# ---------------------------------------------------------------------------------------------
# (a), (b) sizes
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_kv_cache_bytes_per_token(student_fn: Callable, config: ConfigSizes, dtype: torch.dtype) -> None:
    """``student_fn(config, dtype)`` must equal the reference bytes per token."""
    require_own_implementation(student_fn, "kv_cache_bytes_per_token")
    got = call_student(student_fn, "kv_cache_bytes_per_token", _lend(config), dtype, copy_args=False)
    expected = _reference_kv_cache_bytes_per_token(_as_model_config(config), dtype)
    if got != expected or isinstance(got, bool):
        fail(f"kv_cache_bytes_per_token({_config_name(config)}, {dtype}): wrong number of bytes",
             expected=expected, got=got, hint=_size_hint(got, expected, config, expected))


@recorded_check
def check_kv_cache_bytes(student_fn: Callable, config: ConfigSizes, seq_len: int, batch_size: int,
                         dtype: torch.dtype) -> None:
    """``student_fn(config, seq_len, batch_size, dtype)`` must equal the reference total."""
    require_own_implementation(student_fn, "kv_cache_bytes")
    got = call_student(student_fn, "kv_cache_bytes", _lend(config), seq_len, batch_size, dtype, copy_args=False)
    expected = _reference_kv_cache_bytes(_as_model_config(config), seq_len, batch_size, dtype)
    # Asked on every run, right or wrong, so that the kit's recording holds it for the hint below.
    per_token = _reference_kv_cache_bytes_per_token(_as_model_config(config), dtype)
    if got != expected or isinstance(got, bool):
        fail(f"kv_cache_bytes({_config_name(config)}, seq_len={seq_len}, batch_size={batch_size}, {dtype})",
             expected=expected, got=got, hint=_size_hint(got, expected, config, per_token))


@recorded_check
def check_kv_cache_bytes_rejects_bad_lengths(student_fn: Callable) -> None:
    """Negative seq_len or batch_size must raise ValueError (the documented type) naming the argument."""
    require_own_implementation(student_fn, "kv_cache_bytes")
    config = _lend(smollm2_config())
    for seq_len, batch_size, name in ((-1, 1, "seq_len"), (16, -2, "batch_size")):
        expect_raises(student_fn, f"kv_cache_bytes(config, seq_len={seq_len}, batch_size={batch_size})", ValueError,
                      config, seq_len, batch_size, torch.float16, message_names=(name,),
                      hint="check the arguments first and raise ValueError naming the argument and its allowed "
                           "range: a negative length or batch size is a mistake by the caller.")


@recorded_check
def check_matches_real_allocations(student_fn: Callable, seq_len: int, dtype: torch.dtype,
                                   num_blocks: int = 4, block_size: int = 16) -> None:
    """The student's ``kv_cache_bytes`` must equal what our caches really allocate for SmolLM2.

    Builds ``KVCache(config, seq_len, dtype)`` (contiguous, one sequence) and
    ``PagedKVCache(config, num_blocks, block_size, dtype)`` and compares their ``nbytes``
    (and ``bytes_per_block``) with the student's formula.
    """
    require_own_implementation(student_fn, "kv_cache_bytes")
    model_config = _smollm2_model_config()
    config = ConfigSizes.of(model_config)
    contiguous = KVCache(model_config, seq_len, dtype=dtype)
    config = _lend(config)
    got = call_student(student_fn, "kv_cache_bytes", config, seq_len, 1, dtype, copy_args=False)
    expect_equal(got, contiguous.nbytes,
                 f"kv_cache_bytes(SmolLM2, seq_len={seq_len}, batch_size=1, {dtype}) vs the bytes "
                 f"KVCache(config, max_seq_len={seq_len}, dtype={dtype}) allocates",
                 hint="KVCache keeps, per layer, a key and a value tensor [max_seq_len, num_kv_heads, head_dim].")
    paged = PagedKVCache(model_config, num_blocks, block_size, dtype=dtype)
    got_block = call_student(student_fn, "kv_cache_bytes", config, block_size, 1, dtype, copy_args=False)
    # One block's share of the pool as allocated (PagedKVCache.bytes_per_block is a Lab 0.1 answer,
    # a stub in that lab's kit, where this check runs too).
    expect_equal(got_block, paged.nbytes // num_blocks,
                 f"kv_cache_bytes(SmolLM2, seq_len={block_size}, 1, {dtype}) vs the bytes of one paged block "
                 f"of {block_size} tokens")
    got_pool = call_student(student_fn, "kv_cache_bytes", config, block_size, num_blocks, dtype, copy_args=False)
    expect_equal(got_pool, paged.nbytes,
                 f"kv_cache_bytes(SmolLM2, {block_size}, {num_blocks}, {dtype}) vs the bytes of "
                 f"PagedKVCache(config, num_blocks={num_blocks}, block_size={block_size})",
                 hint="the paged pool is num_blocks blocks of block_size tokens each.")


# ---------------------------------------------------------------------------------------------
# (c) work with and without the cache
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_tokens_through_model(student_fn: Callable, prompt_len: int, num_new_tokens: int) -> None:
    """``student_fn(prompt_len, num_new_tokens, use_cache)`` for both values of use_cache."""
    require_own_implementation(student_fn, "tokens_through_model")
    for use_cache in (True, False):
        got = call_student(student_fn, "tokens_through_model", prompt_len, num_new_tokens, use_cache)
        expected = _reference_tokens_through_model(prompt_len, num_new_tokens, use_cache)
        if got == expected and not isinstance(got, bool):
            continue
        if use_cache:
            hint = ("with the cache the prompt runs once (step 0 makes the first new token); every later step "
                    "runs just the previous new token: prompt_len + num_new_tokens - 1.")
        else:
            hint = ("without the cache, step i (i = 0 .. num_new_tokens - 1) runs the prompt and the i tokens "
                    "made so far: sum of (prompt_len + i).")
        fail(f"tokens_through_model(prompt_len={prompt_len}, num_new_tokens={num_new_tokens}, "
             f"use_cache={use_cache})", expected=expected, got=got, hint=hint)


# ---------------------------------------------------------------------------------------------
# (d) waste in a contiguous pool
# ---------------------------------------------------------------------------------------------


def example_pool() -> tuple[list[tuple[int, int, int, int, int]], int, int]:
    """The worked example's state: (reservations as (request_id, start, size, num_tokens, final_len)
    tuples, pool_slots, request_slots)."""
    return [(0, 0, 8, 3, 6), (1, 10, 6, 6, 6), (2, 20, 8, 2, 4)], 32, 5


def _as_reservation(item: ReservationLike) -> Reservation:
    if isinstance(item, Reservation):
        return item
    request_id, start, size, num_tokens, final_len = item
    return Reservation(request_id, start, size, num_tokens, final_len)


def _lend_reservation(reservation: Reservation) -> Reservation:
    return make(Reservation, reservation.request_id, reservation.start, reservation.size, reservation.num_tokens,
                reservation.final_len)


def _waste_hint(kind: str, got: dict, expected: dict) -> str:
    if kind == "used":
        return "used = sum of num_tokens over the reservations."
    if kind == "reserved_unused":
        return "slots for tokens still to come: final_len - num_tokens, per reservation."
    if kind == "internal":
        return "slots past the final length, never used: size - final_len, per reservation."
    if kind == "free" and isinstance(got.get("free"), int) and got["free"] < expected["free"]:
        return ("some free slots are missing: count the hole before the first reservation and the one after the "
                "last (up to pool_slots) too.")
    if kind == "free":
        return "free = pool_slots - sum of the reservations' sizes; sort reservations by start to find the holes."
    if isinstance(got.get("external"), int) and got["external"] == expected["free"]:
        return "only holes SHORTER than request_slots are external fragmentation; larger holes are usable."
    return ("walk the reservations in order of start (sort them first); each gap between one's end and the "
            "next's start is a hole; holes with length < request_slots are external fragmentation.")


@recorded_check
def check_waste_breakdown(student_fn: Callable, reservations: list[ReservationLike], pool_slots: int,
                          request_slots: int) -> None:
    """``student_fn(reservations, pool_slots, request_slots)`` must count every kind like the reference.

    reservations: ``Reservation`` objects or ``(request_id, start, size, num_tokens, final_len)`` tuples.
    """
    require_own_implementation(student_fn, "waste_breakdown")
    _check_waste_breakdown(student_fn, [_as_reservation(item) for item in reservations], pool_slots, request_slots)


def _check_waste_breakdown(student_fn: Callable, reservations: list[Reservation], pool_slots: int,
                           request_slots: int) -> None:
    lent = [_lend_reservation(reservation) for reservation in reservations]
    got = call_student(student_fn, "waste_breakdown", lent, pool_slots, request_slots, copy_args=False)
    call = f"waste_breakdown(<{len(reservations)} reservations>, pool_slots={pool_slots}, request_slots={request_slots})"
    kinds = ["used", "reserved_unused", "internal", "free", "external"]
    if not isinstance(got, dict):
        fail(f"{call} must return a dict", expected=kinds, got=type(got).__name__)
    missing = [kind for kind in kinds if kind not in got]
    if missing:
        fail(f"{call}: missing keys", expected=sorted(kinds), got=sorted(got),
             hint="return a dict with the keys used, reserved_unused, internal, free, external.")
    expected = _reference_waste_breakdown(reservations, pool_slots, request_slots)
    starts = [reservation.start for reservation in reservations]
    for kind in expected:
        if got[kind] != expected[kind]:
            shown = ", ".join(f"(start={r.start}, size={r.size}, num_tokens={r.num_tokens}, final_len={r.final_len})"
                              for r in reservations[:6])
            hint = _waste_hint(kind, got, expected)
            if kind in ("free", "external") and starts != sorted(starts):
                hint = (f"these reservations are not listed in order of start (starts {starts[:6]}"
                        f"{' ...' if len(starts) > 6 else ''}): the list comes in any order, so sort it by start "
                        "(sorted(reservations, key=lambda r: r.start)) before measuring the holes between "
                        "neighbours; a hole measured between two reservations out of order comes out negative. "
                        + hint)
            fail(f"{call}: wrong count for {kind!r}; reservations: {shown}{' ...' if len(reservations) > 6 else ''}",
                 expected=expected[kind], got=got[kind], hint=hint)


@recorded_check
def check_waste_breakdown_on_simulation(student_fn: Callable, seed: int, num_states: int = 5) -> None:
    """Check the student's counts on states of a simulated contiguous pool (reservations shuffled)."""
    require_own_implementation(student_fn, "waste_breakdown")
    workload = random_workload(40, seed=seed, mean_prompt_len=30, mean_output_len=40,
                               max_tokens_choices=(32, 64, 128), arrivals_per_step=0.5)
    trace = simulate_contiguous(workload, pool_slots=512)
    rng = random.Random(seed)
    busy = [snapshot for snapshot in trace.snapshots if snapshot.reservations]
    for snapshot in rng.sample(busy, min(num_states, len(busy))):
        reservations = list(snapshot.reservations)
        rng.shuffle(reservations)  # the order a dict of running requests would give: not by address
        _check_waste_breakdown(student_fn, reservations, trace.pool_slots, snapshot.next_request_slots or 64)
