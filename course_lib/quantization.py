"""Weight-only quantization: int8 per output channel, int4 in groups, and the GGUF blocks they resemble.

A linear layer's weight ``W [out_features, in_features]`` is stored as small integers plus a few
floats that say how to turn them back into real numbers:

    symmetric int8, per output channel:  W[o, i] ≈ q[o, i] * scale[o]                q in [-127, 127]
    asymmetric int8, per output channel: W[o, i] ≈ q[o, i] * scale[o] + minimum[o]   q in [0, 255]
    symmetric int4, groups of g weights: W[o, i] ≈ q[o, i] * scale[o, i // g]        q in [-7, 7]

Rounding to the nearest integer makes every weight's error at most half a step (``scale / 2``).
A scale per output channel (per row) lets a row of small weights keep its precision when another
row holds large ones; a scale per group of 32 does the same within a row, at the cost of one more
float per 32 weights. Two int4 values share one byte (``pack_int4``): the low nibble holds the
even column, the high nibble the odd one, each as a 4-bit two's-complement number.

SmolLM2's GGUF file is itself quantized: its linear layers are **Q4_1** blocks (32 weights as 4-bit
codes 0..15 with an fp16 scale and an fp16 minimum: 20 bytes, 5 bits per weight) and its embedding
table is **Q8_0** (32 int8 codes and an fp16 scale: 34 bytes, 8.5 bits per weight);
``dequantize_q4_1`` and ``dequantize_q8_0`` decode them. The "fp32 model" of this course is those
blocks decoded to fp32.

Running a quantized model (platform code, not exercises):

- ``QuantizedLinear`` holds one quantized weight and computes ``x @ W^T``, either with PyTorch's
  fused weight-only kernels (``aten._weight_int8pack_mm``; ``aten._convert_weight_to_int4pack_for_cpu``
  + ``aten._weight_int4pack_mm_for_cpu``) or by dequantizing the whole weight and calling ``F.linear``;
- ``quantize_model(model, "int8" | "int4")`` gives a ``LlamaModel`` whose decoder-layer linear
  weights are ``QuantizedLinear`` (the tied embedding / output layer and the norms stay fp32);
  ``quantize_model(load_smollm2()[0], "int8")`` is SmolLM2 with int8 weights. A student's own
  quantize / dequantize functions can be passed in.
- ``KVQuantizedAttention`` runs a forward whose keys and values go through an int8 round trip, to
  measure what an int8 KV cache costs in quality.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.exercises import exercise, is_locked, stub_message
from course_lib.model import LlamaModel

__all__ = [
    "GGUF_BLOCK_SIZE",
    "INT4_GROUP_SIZE",
    "KERNELS",
    "KVQuantizedAttention",
    "QuantizedLinear",
    "SCHEMES",
    "dequantize_int4",
    "dequantize_int8",
    "dequantize_int8_asymmetric",
    "dequantize_kv_int8",
    "dequantize_q4_1",
    "dequantize_q8_0",
    "decode_step_bytes",
    "fused_kernel_available",
    "greedy_agreement",
    "model_nbytes",
    "pack_int4",
    "perplexity",
    "quantize_int4",
    "quantize_int8",
    "quantize_int8_asymmetric",
    "quantize_kv_int8",
    "quantize_model",
    "unpack_int4",
]

LAB = "lab04-faster-decoding"
WEIGHTS_CHAPTER = "01_weight_quantization"
COSTS_CHAPTER = "02_quantized_smollm2"

SCHEMES = ("int8", "int4")
"""What ``quantize_model`` accepts."""

KERNELS = ("fused", "dequantize")
"""How a ``QuantizedLinear`` computes: PyTorch's fused weight-only kernel, or dequantize then matmul."""

INT4_GROUP_SIZE = 32
"""Weights per int4 scale: the block size of GGUF's Q4_0/Q4_1, and the smallest group PyTorch's int4 kernels take."""

GGUF_BLOCK_SIZE = 32
"""Weights per GGUF Q8_0 / Q4_1 block."""

_Q8_0_BLOCK_BYTES = 2 + 32       # fp16 scale, 32 int8 codes
_Q4_1_BLOCK_BYTES = 2 + 2 + 16   # fp16 scale, fp16 minimum, 32 4-bit codes in 16 bytes


# --------------------------------------------------------------------------------------------
# Input checks shared by the references (bad input gets a clear error, not a NaN)
# --------------------------------------------------------------------------------------------


def _check_weight(weight: Any, name: str = "weight") -> None:
    if not isinstance(weight, Tensor) or weight.dim() != 2 or not weight.dtype.is_floating_point:
        got = f"{weight.dtype} tensor of shape {tuple(weight.shape)}" if isinstance(weight, Tensor) else type(weight).__name__
        raise ValueError(f"{name} must be a 2-D floating tensor [out_features, in_features], got {got}")
    if weight.numel() and not bool(torch.isfinite(weight).all()):
        raise ValueError(f"{name} holds inf or NaN; only finite weights can be quantized")


def _check_group_size(group_size: Any, in_features: int) -> None:
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 2 or group_size % 2:
        raise ValueError(f"group_size must be an even integer >= 2, got {group_size!r}")
    if in_features % group_size:
        raise ValueError(f"in_features ({in_features}) must be a multiple of group_size ({group_size})")


def _safe_scale(scale: Tensor) -> Tensor:
    """A step of 0 (a row or group of zeros, or of equal weights) becomes 1: any step restores them exactly."""
    return torch.where(scale > 0, scale, torch.ones_like(scale))


# --------------------------------------------------------------------------------------------
# Chapter 1: int8 per output channel
# --------------------------------------------------------------------------------------------


@exercise(LAB, WEIGHTS_CHAPTER, "int8_symmetric")
def quantize_int8(weight: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric int8 quantization with one scale per output channel (row).

    weight [out_features, in_features] float -> (q int8 [out_features, in_features], scale fp32 [out_features])
    with ``scale[o] = max_i |weight[o, i]| / 127`` and ``q = round(weight / scale[:, None])``, so
    ``q * scale[:, None]`` restores every weight to within ``scale / 2``. A row of zeros gets scale 1.
    """
    _check_weight(weight)
    weight = weight.float()
    scale = _safe_scale(weight.abs().amax(dim=1) / 127)
    q = torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


@exercise(LAB, WEIGHTS_CHAPTER, "int8_symmetric")
def dequantize_int8(q: Tensor, scale: Tensor) -> Tensor:
    """q int8 [out_features, in_features], scale [out_features] -> fp32 weight ``q * scale[:, None]``."""
    if not isinstance(q, Tensor) or q.dim() != 2 or q.dtype != torch.int8:
        raise ValueError(f"q must be a 2-D int8 tensor, got {getattr(q, 'dtype', type(q).__name__)}")
    if not isinstance(scale, Tensor) or tuple(scale.shape) != (q.shape[0],):
        raise ValueError(f"scale must have shape ({q.shape[0]},): one per output channel")
    return q.float() * scale.float()[:, None]


@exercise(LAB, WEIGHTS_CHAPTER, "int8_asymmetric")
def quantize_int8_asymmetric(weight: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Asymmetric int8 quantization per output channel: a scale and a minimum per row.

    weight [out_features, in_features] float -> (q uint8 [out, in], scale fp32 [out], minimum fp32 [out])
    with ``minimum[o] = min_i weight[o, i]``, ``scale[o] = (max_i weight[o, i] - minimum[o]) / 255`` and
    ``q = round((weight - minimum[:, None]) / scale[:, None])`` in [0, 255]. All 256 codes cover the
    row's own range, so a row whose weights are not centred on 0 loses less than with a symmetric scale.
    """
    _check_weight(weight)
    weight = weight.float()
    minimum = weight.amin(dim=1)
    scale = _safe_scale((weight.amax(dim=1) - minimum) / 255)
    q = torch.round((weight - minimum[:, None]) / scale[:, None]).clamp(0, 255).to(torch.uint8)
    return q, scale, minimum


@exercise(LAB, WEIGHTS_CHAPTER, "int8_asymmetric")
def dequantize_int8_asymmetric(q: Tensor, scale: Tensor, minimum: Tensor) -> Tensor:
    """q uint8 [out, in], scale [out], minimum [out] -> fp32 weight ``q * scale[:, None] + minimum[:, None]``."""
    if not isinstance(q, Tensor) or q.dim() != 2 or q.dtype != torch.uint8:
        raise ValueError(f"q must be a 2-D uint8 tensor, got {getattr(q, 'dtype', type(q).__name__)}")
    for name, tensor in (("scale", scale), ("minimum", minimum)):
        if not isinstance(tensor, Tensor) or tuple(tensor.shape) != (q.shape[0],):
            raise ValueError(f"{name} must have shape ({q.shape[0]},): one per output channel")
    return q.float() * scale.float()[:, None] + minimum.float()[:, None]


# --------------------------------------------------------------------------------------------
# Chapter 1: int4 in groups, two values per byte
# --------------------------------------------------------------------------------------------


@exercise(LAB, WEIGHTS_CHAPTER, "pack_int4")
def pack_int4(values: Tensor) -> Tensor:
    """Two signed 4-bit values per byte.

    values: integer tensor [rows, cols] with entries in [-8, 7] and an even number of columns.
    Returns uint8 [rows, cols // 2]: byte j holds column 2j in its low 4 bits and column 2j + 1 in
    its high 4 bits, each as a 4-bit two's-complement number (-1 is 0b1111, -8 is 0b1000).
    """
    if not isinstance(values, Tensor) or values.dim() != 2 or values.dtype.is_floating_point or values.dtype == torch.bool:
        raise ValueError("values must be a 2-D integer tensor [rows, cols]")
    if values.shape[1] % 2:
        raise ValueError(f"values must have an even number of columns to pair them, got {values.shape[1]}")
    if values.numel() and (int(values.min()) < -8 or int(values.max()) > 7):
        raise ValueError(f"int4 values must lie in [-8, 7], got {int(values.min())} to {int(values.max())}")
    nibbles = values.to(torch.int16) & 0xF  # the low 4 bits of the two's-complement number
    return (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).to(torch.uint8)


@exercise(LAB, WEIGHTS_CHAPTER, "pack_int4")
def unpack_int4(packed: Tensor) -> Tensor:
    """The inverse of ``pack_int4``: uint8 [rows, cols // 2] -> int8 [rows, cols] with values in [-8, 7]."""
    if not isinstance(packed, Tensor) or packed.dim() != 2 or packed.dtype != torch.uint8:
        raise ValueError(f"packed must be a 2-D uint8 tensor, got {getattr(packed, 'dtype', type(packed).__name__)}")
    as_int = packed.to(torch.int16)
    nibbles = torch.stack([as_int & 0xF, as_int >> 4], dim=-1).reshape(packed.shape[0], 2 * packed.shape[1])
    # A nibble of 8..15 is a negative number in 4-bit two's complement: subtract 16.
    return torch.where(nibbles >= 8, nibbles - 16, nibbles).to(torch.int8)


@exercise(LAB, WEIGHTS_CHAPTER, "int4_groups")
def quantize_int4(weight: Tensor, group_size: int = INT4_GROUP_SIZE) -> tuple[Tensor, Tensor]:
    """Symmetric int4 quantization with one scale per group of ``group_size`` weights of a row.

    weight [out, in] float (in a multiple of group_size) -> (packed uint8 [out, in // 2],
    scale fp32 [out, in // group_size]) with ``scale[o, g] = max |weight[o, group g]| / 7``,
    ``q = round(weight / scale)`` in [-7, 7], packed two per byte by ``pack_int4``.
    """
    _check_weight(weight)
    out_features, in_features = weight.shape
    _check_group_size(group_size, in_features)
    groups = weight.float().reshape(out_features, in_features // group_size, group_size)
    scale = _safe_scale(groups.abs().amax(dim=2) / 7)
    q = torch.round(groups / scale[:, :, None]).clamp(-7, 7).reshape(out_features, in_features)
    return pack_int4(q.to(torch.int8)), scale


@exercise(LAB, WEIGHTS_CHAPTER, "int4_groups")
def dequantize_int4(packed: Tensor, scale: Tensor) -> Tensor:
    """packed uint8 [out, in // 2], scale [out, in // group_size] -> fp32 weight [out, in].

    The group size is ``in // scale.shape[1]``; weight[o, i] = value[o, i] * scale[o, i // group_size].
    """
    values = unpack_int4(packed)
    out_features, in_features = values.shape
    if not isinstance(scale, Tensor) or scale.dim() != 2 or scale.shape[0] != out_features or not scale.shape[1]:
        raise ValueError(f"scale must have shape [{out_features}, num_groups], got {getattr(scale, 'shape', None)}")
    if in_features % scale.shape[1]:
        raise ValueError(f"{in_features} columns do not split into {scale.shape[1]} equal groups")
    group_size = in_features // scale.shape[1]
    return values.float() * scale.float().repeat_interleave(group_size, dim=1)


# --------------------------------------------------------------------------------------------
# Chapter 1: the GGUF blocks of the shipped file
# --------------------------------------------------------------------------------------------


def _blocks(raw: Tensor, block_bytes: int, name: str) -> tuple[Tensor, tuple[int, ...]]:
    """raw uint8 [..., n * block_bytes] -> (blocks [num_blocks, block_bytes], leading shape)."""
    if not isinstance(raw, Tensor) or raw.dtype != torch.uint8 or raw.dim() < 1:
        raise ValueError(f"{name} takes a uint8 tensor of raw bytes, got {getattr(raw, 'dtype', type(raw).__name__)}")
    if raw.shape[-1] % block_bytes:
        raise ValueError(f"{name}: the last dimension ({raw.shape[-1]} bytes) is not a whole number of "
                         f"{block_bytes}-byte blocks")
    return raw.reshape(-1, block_bytes), tuple(raw.shape[:-1])


def _fp16_field(blocks: Tensor, offset: int) -> Tensor:
    """Bytes offset, offset+1 of each block read as one little-endian fp16 -> fp32 [num_blocks]."""
    return blocks[:, offset : offset + 2].contiguous().view(torch.float16).float().reshape(-1)


@exercise(LAB, WEIGHTS_CHAPTER, "gguf_blocks")
def dequantize_q8_0(raw: Tensor) -> Tensor:
    """Decode GGUF Q8_0 blocks: raw uint8 [..., n * 34] -> fp32 [..., n * 32].

    Each 34-byte block: an fp16 scale d (2 bytes, little-endian), then 32 int8 codes; weight j = d * code[j].
    """
    blocks, leading = _blocks(raw, _Q8_0_BLOCK_BYTES, "dequantize_q8_0")
    scale = _fp16_field(blocks, 0)
    codes = blocks[:, 2:].contiguous().view(torch.int8).float()  # [num_blocks, 32]
    return (codes * scale[:, None]).reshape(*leading, -1)


@exercise(LAB, WEIGHTS_CHAPTER, "gguf_blocks")
def dequantize_q4_1(raw: Tensor) -> Tensor:
    """Decode GGUF Q4_1 blocks: raw uint8 [..., n * 20] -> fp32 [..., n * 32].

    Each 20-byte block: an fp16 scale d, an fp16 minimum m, then 16 bytes of 4-bit codes (0..15):
    byte j holds weight j in its low 4 bits and weight j + 16 in its high 4 bits; weight = d * code + m.
    """
    blocks, leading = _blocks(raw, _Q4_1_BLOCK_BYTES, "dequantize_q4_1")
    scale, minimum = _fp16_field(blocks, 0), _fp16_field(blocks, 2)
    code_bytes = blocks[:, 4:]
    codes = torch.cat([code_bytes & 0xF, code_bytes >> 4], dim=1).float()  # weights 0..15, then 16..31
    return (codes * scale[:, None] + minimum[:, None]).reshape(*leading, -1)


# --------------------------------------------------------------------------------------------
# Chapter 2: measuring a model (perplexity) and an int8 KV cache
# --------------------------------------------------------------------------------------------


@exercise(LAB, COSTS_CHAPTER, "perplexity")
def perplexity(model, token_ids: Sequence[int], window: int = 256) -> float:
    """exp(mean negative log-likelihood) of ``token_ids`` under ``model``, window by window.

    The text is cut into consecutive, non-overlapping windows of at most ``window`` tokens; each
    window runs through ``model(input_ids)`` alone (no cache) and every token of a window but its
    first is predicted from the ones before it in that window: the logits of row t score token t + 1.
    So a text of n tokens scores n - (number of windows) predictions, all with equal weight.
    """
    token_ids = [int(token) for token in token_ids]
    if not isinstance(window, int) or isinstance(window, bool) or window < 2:
        raise ValueError(f"window must be an integer >= 2 (one context token and one to predict), got {window!r}")
    if len(token_ids) < 2:
        raise ValueError(f"token_ids must hold at least 2 tokens, got {len(token_ids)}")
    total_nll, num_predicted = 0.0, 0
    with torch.inference_mode():
        for start in range(0, len(token_ids), window):
            chunk = token_ids[start : start + window]
            if len(chunk) < 2:
                continue  # a lone last token has nothing before it in its window to be predicted from
            input_ids = torch.tensor(chunk, device=_model_device(model))
            logits = model(input_ids).float()  # [len(chunk), vocab]
            nll = F.cross_entropy(logits[:-1], input_ids[1:], reduction="sum")
            total_nll += float(nll)
            num_predicted += len(chunk) - 1
    return math.exp(total_nll / num_predicted)


@exercise(LAB, COSTS_CHAPTER, "decode_step_bytes")
def decode_step_bytes(config, layer_bits_per_weight: float, batch_size: int, context_len: int, *,
                      lm_head_bits_per_weight: float = 32, kv_bits_per_value: float = 32) -> float:
    """Bytes one decode step must read from memory: weights once, and every sequence's KV cache.

    config: a ``ModelConfig``. The decoder layers' linear weights (q, k, v, o, gate, up, down of every
    layer) take ``layer_bits_per_weight`` bits each, scales included (32 for fp32; 8 + 32 / in_features
    for int8 with an fp32 scale per row; 4 + 32 / 32 = 5 for int4 with an fp32 scale per 32 weights).
    The output layer (vocab x hidden) takes ``lm_head_bits_per_weight``. Each of the ``batch_size``
    sequences reads K and V of ``context_len`` tokens: 2 x layers x kv_heads x head_dim values of
    ``kv_bits_per_value`` bits per token. Activations and norms are left out (tiny).
    """
    for name, value in (("batch_size", batch_size), ("context_len", context_len)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    for name, value in (("layer_bits_per_weight", layer_bits_per_weight),
                        ("lm_head_bits_per_weight", lm_head_bits_per_weight), ("kv_bits_per_value", kv_bits_per_value)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    hidden, head_dim = config.hidden_size, config.head_dim
    q_size, kv_size = config.num_q_heads * head_dim, config.num_kv_heads * head_dim
    per_layer = hidden * q_size + 2 * hidden * kv_size + q_size * hidden + 3 * hidden * config.intermediate_size
    weight_bits = config.num_layers * per_layer * layer_bits_per_weight
    weight_bits += config.vocab_size * hidden * lm_head_bits_per_weight
    kv_values_per_token = 2 * config.num_layers * kv_size
    kv_bits = batch_size * context_len * kv_values_per_token * kv_bits_per_value
    return (weight_bits + kv_bits) / 8


@exercise(LAB, COSTS_CHAPTER, "kv_int8")
def quantize_kv_int8(x: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric int8 for keys or values, one scale per (token, head).

    x [num_tokens, num_kv_heads, head_dim] float -> (q int8 same shape, scale fp32 [num_tokens, num_kv_heads])
    with ``scale = max |x[t, h, :]| / 127``. A scale per token lets a new token be quantized once, when
    it is written, without touching the tokens already in the cache.
    """
    if not isinstance(x, Tensor) or x.dim() != 3 or not x.dtype.is_floating_point:
        raise ValueError("x must be a 3-D floating tensor [num_tokens, num_kv_heads, head_dim]")
    x = x.float()
    scale = _safe_scale(x.abs().amax(dim=2) / 127)
    q = torch.round(x / scale[:, :, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


@exercise(LAB, COSTS_CHAPTER, "kv_int8")
def dequantize_kv_int8(q: Tensor, scale: Tensor) -> Tensor:
    """q int8 [num_tokens, num_kv_heads, head_dim], scale [num_tokens, num_kv_heads] -> fp32 ``q * scale``."""
    if not isinstance(q, Tensor) or q.dim() != 3 or q.dtype != torch.int8:
        raise ValueError("q must be a 3-D int8 tensor [num_tokens, num_kv_heads, head_dim]")
    if not isinstance(scale, Tensor) or tuple(scale.shape) != tuple(q.shape[:2]):
        raise ValueError(f"scale must have shape {tuple(q.shape[:2])} [num_tokens, num_kv_heads]")
    return q.float() * scale.float()[:, :, None]


def _model_device(model) -> torch.device:
    device = getattr(model, "device", None)
    return torch.device(device) if device is not None else torch.device("cpu")


# --------------------------------------------------------------------------------------------
# Platform: running quantized weights
# --------------------------------------------------------------------------------------------


def _fused_op(name: str):
    return getattr(torch.ops.aten, name, None)


def fused_kernel_available(scheme: str, device: torch.device | str = "cpu") -> bool:
    """Whether this PyTorch build has the fused weight-only kernel ``QuantizedLinear`` uses for ``scheme``.

    int8: ``aten._weight_int8pack_mm`` (CPU). int4: ``aten._convert_weight_to_int4pack_for_cpu`` and
    ``aten._weight_int4pack_mm_for_cpu`` (CPU). On a GPU, ``QuantizedLinear`` dequantizes instead.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    if torch.device(device).type != "cpu":
        return False
    if scheme == "int8":
        return _fused_op("_weight_int8pack_mm") is not None
    return _fused_op("_convert_weight_to_int4pack_for_cpu") is not None and _fused_op("_weight_int4pack_mm_for_cpu") is not None


def _locked_reference(name: str, function: Callable) -> Callable:
    """The reference ``function``, or a clear error in a student kit where it is a stub."""
    if is_locked(LAB):
        marker = getattr(function, "__course_exercise__")
        raise RuntimeError(f"{stub_message(name, marker)} Pass your own function to quantize_model "
                           f"(quantize=..., dequantize=...).")
    return function


class QuantizedLinear(nn.Module):
    """A linear layer's weight stored quantized; calling it computes ``x @ W^T``.

    scheme: "int8" (one scale per output channel) or "int4" (one scale per group of weights).
    qweight, scale: what ``quantize_int8`` / ``quantize_int4`` (or a student's version) returned:
    int8 [out, in] and [out]; or packed uint8 [out, in // 2] and [out, in // group_size].
    dequantize: the matching ``dequantize_int8`` / ``dequantize_int4`` (qweight, scale) -> fp32 [out, in].
    kernel: "fused" runs PyTorch's fused weight-only kernel on the CPU (int8: the int8 codes and
    scales as they are; int4: the integer values are repacked into the kernel's own tiled layout
    once, here), "dequantize" rebuilds the fp32 weight at every call and runs ``F.linear``.

    Every ``nbytes`` counted is a buffer this module holds: int8 [out, in] + fp32 scales; int4 either
    the packed weight + fp32 scales (dequantize) or the kernel's packed weight + its fp32
    scales-and-zeros table [in // group_size, out, 2] (fused).
    """

    def __init__(self, scheme: str, qweight: Tensor, scale: Tensor, dequantize: Callable[[Tensor, Tensor], Tensor],
                 kernel: str = "fused") -> None:
        super().__init__()
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        if kernel == "fused" and not fused_kernel_available(scheme, qweight.device):
            raise ValueError(f"this PyTorch build has no fused {scheme} kernel on {qweight.device}; use kernel='dequantize'")
        self.scheme = scheme
        self.kernel = kernel
        self._dequantize = dequantize
        values_per_byte = 2 if scheme == "int4" else 1
        self.out_features, self.in_features = int(qweight.shape[0]), int(qweight.shape[1]) * values_per_byte
        self.group_size = self.in_features if scheme == "int8" else self.in_features // int(scale.shape[1])
        if kernel == "dequantize":
            self.register_buffer("qweight", qweight)
            self.register_buffer("scale", scale.float())
        elif scheme == "int8":
            self.register_buffer("qweight", qweight.contiguous())
            self.register_buffer("scale", scale.float().contiguous())
        else:
            self._prepare_int4_kernel(qweight, scale.float())

    def _prepare_int4_kernel(self, packed: Tensor, scale: Tensor) -> None:
        """Repack for ``_weight_int4pack_mm_for_cpu``: codes 0..15 and (scale, zero) with w = (code - 8) * scale + zero.

        The integer values come from the given dequantize with every scale set to 1 (so no unpacking
        code of our own is needed); a symmetric value v is the code v + 8 with zero 0.
        """
        values = torch.round(self._dequantize(packed, torch.ones_like(scale))).to(torch.int32)
        if values.numel() and (int(values.min()) < -8 or int(values.max()) > 7):
            raise ValueError("int4 values must lie in [-8, 7] for the fused kernel")
        if self.group_size not in (32, 64, 128, 256):
            raise ValueError(f"the fused int4 kernel takes groups of 32, 64, 128 or 256 weights, got {self.group_size}")
        self.register_buffer("qweight", torch.ops.aten._convert_weight_to_int4pack_for_cpu(values + 8, 1))
        scales_and_zeros = torch.stack([scale.t(), torch.zeros_like(scale.t())], dim=-1).contiguous()
        self.register_buffer("scales_and_zeros", scales_and_zeros)  # [in // group_size, out, 2]

    @property
    def shape(self) -> tuple[int, int]:
        """(out_features, in_features), like the fp32 weight this replaces."""
        return (self.out_features, self.in_features)

    @property
    def nbytes(self) -> int:
        return sum(buffer.numel() * buffer.element_size() for buffer in self.buffers())

    def dequantized_weight(self) -> Tensor:
        """The fp32 weight [out, in] this layer computes with (dequantize kernel only)."""
        if self.kernel != "dequantize":
            raise RuntimeError("dequantized_weight needs kernel='dequantize' (the fused layout is the kernel's own)")
        return self._dequantize(self.qweight, self.scale)

    def forward(self, x: Tensor) -> Tensor:
        """x [num_tokens, in_features] -> [num_tokens, out_features], in x's dtype."""
        if self.kernel == "dequantize":
            return F.linear(x, self.dequantized_weight().to(x.dtype))
        rows = x.reshape(-1, self.in_features)
        # The fused CPU kernels take fp32 or bf16 activations; other dtypes go through fp32.
        compute = rows if rows.dtype in (torch.float32, torch.bfloat16) else rows.float()
        if self.scheme == "int8":
            out = torch.ops.aten._weight_int8pack_mm(compute.contiguous(), self.qweight, self.scale.to(compute.dtype))
        else:
            out = torch.ops.aten._weight_int4pack_mm_for_cpu(
                compute.contiguous(), self.qweight, self.group_size, self.scales_and_zeros.to(compute.dtype))
        return out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        group = f", group_size={self.group_size}" if self.scheme == "int4" else ""
        return f"{self.scheme}, in={self.in_features}, out={self.out_features}{group}, kernel={self.kernel}"


_LINEAR_NAMES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


def quantize_model(model, scheme: str, *, quantize: Callable | None = None, dequantize: Callable | None = None,
                   kernel: str | None = None, group_size: int = INT4_GROUP_SIZE):
    """A new ``LlamaModel`` whose decoder-layer linear weights are ``QuantizedLinear``.

    model: a ``LlamaModel`` (fp32 weights). scheme: "int8" (per output channel) or "int4" (groups of
    ``group_size``). quantize / dequantize: a student's functions with the signatures of
    ``quantize_int8``/``dequantize_int8`` or ``quantize_int4``/``dequantize_int4`` (default: the
    course's). kernel: "fused" or "dequantize" (default: "fused" where this build has the kernel).

    The tied embedding / output layer and the norm weights stay fp32 and are shared with ``model``
    (no copy): the output layer is the largest single matrix and the most sensitive one, so
    weight-only recipes usually keep it at higher precision. The original model is not changed.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    if kernel is None:
        kernel = "fused" if fused_kernel_available(scheme, model.device) else "dequantize"
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if scheme == "int8":
        quantize = quantize or _locked_reference("quantize_int8", quantize_int8)
        dequantize = dequantize or _locked_reference("dequantize_int8", dequantize_int8)
        make_codes = quantize
    else:
        quantize = quantize or _locked_reference("quantize_int4", quantize_int4)
        dequantize = dequantize or _locked_reference("dequantize_int4", dequantize_int4)

        def make_codes(weight: Tensor):
            return quantize(weight, group_size)

    weights: dict[str, Any] = {"embed_tokens": model.embed_tokens.detach(), "norm": model.norm.weight.detach()}
    with torch.no_grad():
        for index, layer in enumerate(model.layers):
            prefix = f"layers.{index}."
            weights[prefix + "input_norm"] = layer.input_norm.weight.detach()
            weights[prefix + "post_attention_norm"] = layer.post_attention_norm.weight.detach()
            for name in _LINEAR_NAMES:
                owner = layer.attention if name in ("qkv_proj", "o_proj") else layer.mlp
                weight = getattr(owner, name)
                if isinstance(weight, QuantizedLinear):
                    raise ValueError("model is already quantized; quantize the fp32 model")
                qweight, scale = make_codes(weight.detach().float())
                weights[prefix + name] = QuantizedLinear(scheme, qweight, scale, dequantize, kernel)
    return LlamaModel(model.config, weights).eval()


def model_nbytes(model) -> int:
    """Bytes of every parameter and buffer of ``model`` (quantized weights as stored, RoPE tables excluded)."""
    total = sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())
    for name, buffer in model.named_buffers():
        if not name.startswith("rotary."):
            total += buffer.numel() * buffer.element_size()
    return total


def greedy_agreement(reference_model, model, token_ids_list: Sequence[Sequence[int]],
                     num_prompt_tokens: Sequence[int]) -> float:
    """Share of next-token choices on which ``model`` agrees with ``reference_model``, teacher-forced.

    token_ids_list: texts (prompt followed by the reference model's own greedy continuation);
    num_prompt_tokens: each text's prompt length. Both models read each whole text in one forward,
    and at every position from the prompt's last token on, their argmax (the greedy next token)
    is compared. Both models see the same text so far, so one disagreement does not change what is
    compared later: this is the chance a greedy draft from ``model`` is accepted by ``reference_model``.
    """
    agree = total = 0
    with torch.inference_mode():
        for token_ids, prompt_len in zip(token_ids_list, num_prompt_tokens):
            if not 1 <= prompt_len < len(token_ids):
                raise ValueError(f"prompt length {prompt_len} must be in [1, {len(token_ids)}) for a text of {len(token_ids)} tokens")
            input_ids = torch.tensor(list(token_ids), device=_model_device(reference_model))
            rows = torch.arange(prompt_len - 1, len(token_ids) - 1, device=input_ids.device)
            expected = reference_model(input_ids, logits_indices=rows).argmax(dim=-1)
            got = model(input_ids, logits_indices=rows).argmax(dim=-1)
            agree += int((expected == got).sum())
            total += rows.numel()
    return agree / total


class KVQuantizedAttention:
    """An ``AttentionContext`` for one uncached forward whose keys and values take an int8 round trip.

    ``attend`` quantizes k and v with ``quantize`` (per token and head), dequantizes them with
    ``dequantize`` and runs causal attention over the result: the model then sees exactly what an
    int8 KV cache would give back. quantize / dequantize default to the course's
    ``quantize_kv_int8`` / ``dequantize_kv_int8``; a student's pair can be passed instead.
    """

    def __init__(self, quantize: Callable | None = None, dequantize: Callable | None = None) -> None:
        from course_lib.attention import sdpa_attention

        if is_locked(LAB) and (quantize is None or dequantize is None):
            raise RuntimeError("KVQuantizedAttention needs your quantize_kv_int8 and dequantize_kv_int8 "
                               "(KVQuantizedAttention(quantize=..., dequantize=...)): "
                               + stub_message("quantize_kv_int8", quantize_kv_int8.__course_exercise__))
        self.quantize = quantize or quantize_kv_int8
        self.dequantize = dequantize or dequantize_kv_int8
        self._attention = sdpa_attention

    def attend(self, layer_index: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [num_tokens, num_q_heads, head_dim], k/v [num_tokens, num_kv_heads, head_dim] -> like q."""
        keys = self.dequantize(*self.quantize(k)).to(k.dtype)
        values = self.dequantize(*self.quantize(v)).to(v.dtype)
        return self._attention(q, keys, values, causal=True)
