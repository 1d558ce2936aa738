"""Counting FLOPs and bytes: arithmetic intensity, the roofline model, and the peaks of a machine.

A piece of work that performs ``flops`` floating-point operations while moving ``bytes`` between
memory and the chip has an **arithmetic intensity** of ``flops / bytes`` (FLOP per byte). A
machine with a peak rate of ``peak_flops`` (FLOP/s) and a memory bandwidth of
``memory_bandwidth`` (bytes/s) can then run it at most at

    attainable FLOP/s = min(peak_flops, intensity * memory_bandwidth)

(the *roofline*). Below the **ridge point** ``peak_flops / memory_bandwidth`` the work waits for
memory (memory-bound); above it, for the arithmetic units (compute-bound).

The counting conventions used throughout (and stated in the lab notebooks):

- a multiply-add is 2 FLOPs, so ``[m, k] @ [k, n]`` costs ``2 * m * k * n`` FLOPs;
- a linear layer over ``num_tokens`` tokens reads its weights once, reads its inputs and writes its
  outputs: ``(in * out + tokens * in + tokens * out) * bytes_per_element`` bytes;
- attention counts the two matrix products, ``q @ k^T`` and ``p @ v``, over the whole
  ``q_len x kv_len`` rectangle (masked scores included, as a dense kernel computes them):
  ``4 * q_len * kv_len * num_q_heads * head_dim`` FLOPs; it reads q, k, v once and writes the
  output once, and naive attention also writes and reads the score matrix and the probability
  matrix (4 more passes over ``num_q_heads * q_len * kv_len`` numbers);
- softmax, RMSNorm, RoPE, activations and the embedding lookup are left out: they are a small
  fraction of the FLOPs and their traffic overlaps with that of the matrix products.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import torch

from course_lib.exercises import exercise

__all__ = [
    "A100_SXM",
    "H100_SXM",
    "Cost",
    "Machine",
    "attainable_flops",
    "attention_cost",
    "forward_cost",
    "linear_cost",
    "measure_machine",
    "measure_matmul_flops",
    "measure_memory_bandwidth",
]


@dataclass(frozen=True)
class Machine:
    """The two peaks a roofline needs. ``peak_flops`` in FLOP/s, ``memory_bandwidth`` in bytes/s."""

    name: str
    peak_flops: float
    memory_bandwidth: float
    source: str = ""

    def __post_init__(self) -> None:
        for field_name in ("peak_flops", "memory_bandwidth"):
            value = getattr(self, field_name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"Machine.{field_name} must be a number > 0, got {value!r}")

    @property
    def ridge_point(self) -> float:
        """The intensity (FLOP/byte) where the memory roof meets the compute roof."""
        return self.peak_flops / self.memory_bandwidth


# Datasheet figures: dense (no sparsity) 16-bit tensor-core rate, and HBM bandwidth.
H100_SXM = Machine(
    name="NVIDIA H100 SXM (BF16 dense)",
    peak_flops=989e12,
    memory_bandwidth=3.35e12,
    source="NVIDIA H100 Tensor Core GPU datasheet: 989 TFLOP/s BF16 dense, 3.35 TB/s HBM3",
)
A100_SXM = Machine(
    name="NVIDIA A100 SXM 80GB (BF16 dense)",
    peak_flops=312e12,
    memory_bandwidth=2.039e12,
    source="NVIDIA A100 Tensor Core GPU datasheet: 312 TFLOP/s BF16 dense, 2,039 GB/s HBM2e",
)


@dataclass(frozen=True)
class Cost:
    """FLOPs performed and bytes moved by some piece of work."""

    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte."""
        return self.flops / self.bytes

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.flops + other.flops, self.bytes + other.bytes)


def _require_int(name: str, value, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _require_positive(name: str, value) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")


@exercise("lab02-prefill-vs-decode", "02_prefill", "linear_cost")
def linear_cost(num_tokens: int, in_features: int, out_features: int, bytes_per_element: float) -> Cost:
    """One linear layer ``y = x @ W^T`` over ``num_tokens`` tokens.

    x [num_tokens, in_features], W [out_features, in_features] -> y [num_tokens, out_features].
    FLOPs = 2 * tokens * in * out; bytes = (in * out + tokens * in + tokens * out) * bytes_per_element.
    The weights are read once however many tokens there are: that is why batching helps.
    """
    _require_int("num_tokens", num_tokens, 1)
    _require_int("in_features", in_features, 1)
    _require_int("out_features", out_features, 1)
    _require_positive("bytes_per_element", bytes_per_element)
    flops = 2 * num_tokens * in_features * out_features
    elements = in_features * out_features + num_tokens * in_features + num_tokens * out_features
    return Cost(float(flops), float(elements * bytes_per_element))


@exercise("lab02-prefill-vs-decode", "02_prefill", "attention_cost")
def attention_cost(
    q_len: int,
    kv_len: int,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    bytes_per_element: float,
    *,
    materialize_scores: bool = False,
) -> Cost:
    """Attention of ``q_len`` queries over ``kv_len`` keys for one sequence.

    q [q_len, num_q_heads, head_dim], k/v [kv_len, num_kv_heads, head_dim] -> [q_len, num_q_heads, head_dim].
    FLOPs = 4 * q_len * kv_len * num_q_heads * head_dim (q @ k^T and p @ v, the full rectangle).
    Bytes = (2 * q_len * num_q_heads + 2 * kv_len * num_kv_heads) * head_dim * bytes_per_element
    (read q, k, v, write the output), plus, with ``materialize_scores`` (naive attention),
    4 * num_q_heads * q_len * kv_len * bytes_per_element (write scores, read them for the softmax,
    write the probabilities, read them for p @ v).
    """
    _require_int("q_len", q_len, 1)
    _require_int("kv_len", kv_len, 1)
    _require_int("num_q_heads", num_q_heads, 1)
    _require_int("num_kv_heads", num_kv_heads, 1)
    _require_int("head_dim", head_dim, 1)
    _require_positive("bytes_per_element", bytes_per_element)
    if num_q_heads % num_kv_heads != 0:
        raise ValueError(f"num_q_heads ({num_q_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    flops = 4 * q_len * kv_len * num_q_heads * head_dim
    elements = (2 * q_len * num_q_heads + 2 * kv_len * num_kv_heads) * head_dim
    if materialize_scores:
        elements += 4 * num_q_heads * q_len * kv_len
    return Cost(float(flops), float(elements * bytes_per_element))


class _ModelSizes(Protocol):
    num_layers: int
    hidden_size: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int


@exercise("lab02-prefill-vs-decode", "03_decode", "decode_step_cost")
def forward_cost(
    config: _ModelSizes, num_seqs: int, q_len: int, kv_len: int, bytes_per_element: float
) -> Cost:
    """One forward pass of a Llama model over ``num_seqs`` sequences that each run ``q_len`` new
    tokens and attend over ``kv_len`` tokens (their cache plus the new ones).

    Prefill of a batch of prompts of length P: ``q_len = kv_len = P``. One decode step with a
    context of C tokens: ``q_len = 1, kv_len = C``. ``config`` is a ``ModelConfig`` (or anything
    with its size fields).

    Per layer: the linear layers q, k, v, o, gate, up, down run over all ``num_seqs * q_len``
    tokens (so their weights are read once for the whole batch), and attention runs per sequence
    (each sequence has its own cache, so nothing is shared). At the end the lm_head runs on one
    row per sequence (only the last token's logits are needed).
    """
    _require_int("num_seqs", num_seqs, 1)
    _require_int("q_len", q_len, 1)
    _require_int("kv_len", kv_len, 1)
    if q_len > kv_len:
        raise ValueError(f"q_len ({q_len}) must be <= kv_len ({kv_len}): the new tokens are part of the context")
    num_tokens = num_seqs * q_len
    hidden, head_dim = config.hidden_size, config.head_dim
    q_size = config.num_q_heads * head_dim
    kv_size = config.num_kv_heads * head_dim
    layer_linears = [
        (hidden, q_size), (hidden, kv_size), (hidden, kv_size), (q_size, hidden),  # q, k, v, o
        (hidden, config.intermediate_size), (hidden, config.intermediate_size),  # gate, up
        (config.intermediate_size, hidden),  # down
    ]
    layer = Cost(0.0, 0.0)
    for in_features, out_features in layer_linears:
        layer = layer + linear_cost(num_tokens, in_features, out_features, bytes_per_element)
    attention = attention_cost(
        q_len, kv_len, config.num_q_heads, config.num_kv_heads, head_dim, bytes_per_element
    )
    layer = layer + Cost(attention.flops * num_seqs, attention.bytes * num_seqs)
    lm_head = linear_cost(num_seqs, hidden, config.vocab_size, bytes_per_element)
    return Cost(layer.flops * config.num_layers, layer.bytes * config.num_layers) + lm_head


@exercise("lab02-prefill-vs-decode", "01_autoregression", "generation_flops")
def generation_flops(config: _ModelSizes, num_parameters: int, prompt_len: int, new_tokens: int,
                     use_cache: bool) -> int:
    """FLOPs to generate ``new_tokens`` tokens after a ``prompt_len``-token prompt, pass by pass.

    Pass k (k = 1..new_tokens) works on a sequence of n = prompt_len + k - 1 tokens. A whole-sequence
    pass (every pass without a cache, the first one with it) costs 2 * N * n for the weights plus
    4 * L * H * d * n * (n + 1) / 2 for causal attention; a cached decode pass costs 2 * N plus
    4 * L * H * d * n (one new token attending over n keys, itself included).
    """
    _require_int("prompt_len", prompt_len, 1)
    _require_int("new_tokens", new_tokens, 0)
    per_key = 4 * config.num_layers * config.num_q_heads * config.head_dim
    total = 0
    for step in range(1, new_tokens + 1):
        seq_len = prompt_len + step - 1
        if use_cache and step > 1:
            total += 2 * num_parameters + per_key * seq_len
        else:
            total += 2 * num_parameters * seq_len + per_key * seq_len * (seq_len + 1) // 2
    return total


def attainable_flops(intensity: float, machine: Machine) -> float:
    """The roofline: min(peak FLOP/s, intensity * bandwidth) in FLOP/s for ``intensity`` FLOP/byte."""
    _require_positive("intensity", intensity)
    return min(machine.peak_flops, intensity * machine.memory_bandwidth)


# --------------------------------------------------------------------------------------------
# Measuring this machine (each helper takes about a second; best of a few repeats, since a
# shared machine can only make a run slower, never faster)
# --------------------------------------------------------------------------------------------


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best_time(function, repeats: int, device: torch.device) -> float:
    function()  # warm-up: first-touch page faults, kernel selection
    _synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        _synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def measure_memory_bandwidth(
    num_bytes: int = 128 * 2**20, *, repeats: int = 3, device: torch.device | str = "cpu"
) -> float:
    """Bytes per second of a large tensor copy: ``2 * num_bytes / time`` (each byte is read and written).

    ``num_bytes`` should be far larger than the caches (the default 128 MiB is); the best of
    ``repeats`` runs is returned.
    """
    _require_int("num_bytes", num_bytes, 2**20)
    _require_int("repeats", repeats, 1)
    device = torch.device(device)
    source = torch.ones(num_bytes // 4, dtype=torch.float32, device=device)
    destination = torch.empty_like(source)
    seconds = _best_time(lambda: destination.copy_(source), repeats, device)
    return 2 * source.numel() * 4 / seconds


def measure_matmul_flops(
    size: int = 1024, *, repeats: int = 3, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
) -> float:
    """FLOP/s of a ``[size, size] @ [size, size]`` matmul: ``2 * size**3 / time`` (best of ``repeats``)."""
    _require_int("size", size, 16)
    _require_int("repeats", repeats, 1)
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(0)
    left = torch.randn(size, size, generator=generator, device=device).to(dtype)
    right = torch.randn(size, size, generator=generator, device=device).to(dtype)
    output = torch.empty(size, size, dtype=dtype, device=device)
    seconds = _best_time(lambda: torch.matmul(left, right, out=output), repeats, device)
    return 2 * size**3 / seconds


def measure_machine(name: str = "this machine", device: torch.device | str = "cpu") -> Machine:
    """A ``Machine`` with this device's measured fp32 matmul rate and copy bandwidth (a few seconds)."""
    device = torch.device(device)
    size = 4096 if device.type == "cuda" else 1024
    return Machine(
        name=name,
        peak_flops=measure_matmul_flops(size, device=device),
        memory_bandwidth=measure_memory_bandwidth(device=device),
        source=f"measured on {device.type}: fp32 {size}x{size} matmul, 128 MiB copy",
    )
