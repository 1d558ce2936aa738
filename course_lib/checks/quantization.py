"""Checks for Lab 0.4, chapters 1 and 2: weight-only quantization, GGUF blocks, and what quantization costs.

Chapter 1 (``01_weight_quantization``): the student's quantize / dequantize pairs are run on weights
the check draws (rows of zeros, off-centre rows and outliers included) and compared with
:mod:`course_lib.quantization`: scales to 1e-5 relative, integer codes exactly (a code may differ by
one where ``weight / scale`` sits within 1e-4 of a rounding tie, since ``torch.round`` rounds ties to
even and ``floor(x + 0.5)`` does not), and the student's dequantize is fed the *reference* codes so a
bug there is caught on its own. Packing is compared byte for byte (the layout is specified). The
GGUF decoders are compared with the ``gguf`` package on the shipped file's blocks and on blocks it
writes.

Chapter 2 (``02_quantized_smollm2``): ``perplexity`` on a small random model and on SmolLM2 (the
check lends the model; the student's code runs it), ``decode_step_bytes`` against the reference
formula, and the int8 KV round trip.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import torch

from course_lib import quantization as reference_module
from course_lib.checks import (
    call_student,
    fail,
    make,
    one_thread,
    register_reference_names,
    require_own_implementation,
    share,
    short_repr,
    smollm2,
)
from course_lib.checks.fixtures import recorded_check, reference

__all__ = [
    "check_decode_step_bytes",
    "check_gguf_blocks",
    "check_int4_groups",
    "check_int8_asymmetric",
    "check_int8_symmetric",
    "check_kv_int8",
    "check_pack_int4",
    "check_perplexity",
    "held_out_token_ids",
    "random_weight",
    "tiny_model",
]

register_reference_names(
    "quantize_int8", "dequantize_int8", "quantize_int8_asymmetric", "dequantize_int8_asymmetric", "pack_int4",
    "unpack_int4", "quantize_int4", "dequantize_int4", "dequantize_q8_0", "dequantize_q4_1", "perplexity",
    "decode_step_bytes", "quantize_kv_int8", "dequantize_kv_int8", "quantize_model",
)

SCALE_RTOL = 1e-5
TIE_WINDOW = 1e-4  # |weight / scale - (k + 0.5)| below this: either neighbouring code is right


def random_weight(out_features: int, in_features: int, seed: int = 0, *, zero_row: bool = False,
                  offset: float = 0.0, outlier: bool = False) -> torch.Tensor:
    """A reproducible fp32 weight [out, in]: normal * 0.05 (a linear layer's scale), plus the requested quirks."""
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(out_features, in_features, generator=generator) * 0.05 + offset
    if outlier:
        weight[0, in_features // 3] = 2.0
    if zero_row:
        weight[-1] = 0.0
    return weight


def _describe(weight_args: dict) -> str:
    quirks = [name for name in ("zero_row", "outlier") if weight_args.get(name)]
    if weight_args.get("offset"):
        quirks.append(f"offset {weight_args['offset']}")
    return f"a [{weight_args['out_features']}, {weight_args['in_features']}] weight" + (
        f" ({', '.join(quirks)})" if quirks else "")


def _require_tensor(value, what: str, dtype: torch.dtype, shape: tuple[int, ...], hint: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        fail(f"{what} must be a tensor", expected=f"{dtype} tensor of shape {shape}", got=type(value).__name__, hint=hint)
    if tuple(value.shape) != shape:
        fail(f"{what} has the wrong shape", expected=shape, got=tuple(value.shape), hint=hint)
    if value.dtype != dtype:
        fail(f"{what} has the wrong dtype", expected=dtype, got=value.dtype, hint=hint)
    return value


def _compare_codes(got: torch.Tensor, expected: torch.Tensor, ratio: torch.Tensor, what: str, hint: str) -> None:
    """Codes equal, except off by one at a rounding tie of ``ratio`` (the unrounded code)."""
    differs = got.long() != expected.long()
    if not bool(differs.any()):
        return
    at_tie = ((ratio - ratio.floor()) - 0.5).abs() < TIE_WINDOW
    allowed = at_tie & ((got.long() - expected.long()).abs() == 1)
    bad = differs & ~allowed
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        fail(f"{what}: {int(bad.sum())} codes differ from round-to-nearest, first at {list(index)}",
             expected=int(expected[index]), got=int(got[index]), hint=hint)


def _compare_close(got: torch.Tensor, expected: torch.Tensor, what: str, hint: str, rtol: float = 1e-5,
                   atol: float = 1e-7) -> None:
    if not torch.allclose(got.float(), expected.float(), rtol=rtol, atol=atol):
        error = (got.float() - expected.float()).abs()
        index = tuple(int(i) for i in (error == error.max()).nonzero()[0])
        fail(f"{what} differs by up to {float(error.max()):.3g} (tolerance: relative {rtol:g})",
             expected=float(expected[index]), got=float(got[index]), hint=hint)


# ---------------------------------------------------------------------------------------------
# Chapter 1 (a): symmetric int8 per output channel
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_int8_symmetric(student_quantize: Callable, student_dequantize: Callable, out_features: int,
                         in_features: int, *, seed: int = 0, zero_row: bool = False, offset: float = 0.0,
                         outlier: bool = False) -> None:
    """``quantize_int8(weight) -> (q int8 [out, in], scale [out])`` and ``dequantize_int8(q, scale)``."""
    require_own_implementation(student_quantize, "quantize_int8")
    require_own_implementation(student_dequantize, "dequantize_int8")
    weight_args = dict(out_features=out_features, in_features=in_features, zero_row=zero_row, offset=offset,
                       outlier=outlier)
    weight = random_weight(out_features, in_features, seed, zero_row=zero_row, offset=offset, outlier=outlier)
    where = f"quantize_int8 on {_describe(weight_args)}"
    expected_q, expected_scale = reference(reference_module.quantize_int8)(weight)
    result = call_student(student_quantize, where, weight, show_args=False)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        fail(f"{where} must return a pair (q, scale)", expected="(q, scale)", got=short_repr(result))
    q, scale = result
    scale_hint = "one scale per output channel: reduce |weight| over the input dimension (dim=1), divide by 127."
    scale = _require_tensor(scale, f"{where}: scale", torch.float32, (out_features,),
                            scale_hint + " Return it as float32.")
    column_scale = weight.abs().amax(dim=0) / 127
    if out_features == in_features and torch.allclose(scale, column_scale, rtol=SCALE_RTOL):
        fail(f"{where}: the scales are the columns' max / 127, not the rows'", show_values=False, hint=scale_hint)
    if zero_row and not bool(torch.isfinite(scale).all() & (scale > 0).all()):
        fail(f"{where}: a row of zeros gave a scale of {float(scale[-1])!r}", expected="any positive scale (1.0)",
             got=float(scale[-1]), hint="guard the division: a row whose max is 0 can use scale 1 (every code is 0).")
    _compare_close(scale, expected_scale, f"{where}: scale", scale_hint, rtol=SCALE_RTOL)
    q = _require_tensor(q, f"{where}: q", torch.int8, (out_features, in_features),
                        "q holds one int8 code per weight: round(weight / scale[:, None]).to(torch.int8).")
    _compare_codes(q, expected_q, weight / expected_scale[:, None], f"{where}: q",
                   "q = round(weight / scale[:, None]), clamped to [-127, 127].")
    restored = call_student(student_dequantize, "dequantize_int8(q, scale) on the reference's codes",
                            expected_q, expected_scale, show_args=False)
    expected_restored = reference(reference_module.dequantize_int8)(expected_q, expected_scale)
    restored = _require_tensor(restored, "dequantize_int8(q, scale)", torch.float32, (out_features, in_features),
                               "return the fp32 weight q * scale[:, None].")
    _compare_close(restored, expected_restored, "dequantize_int8(q, scale)",
                   "every code times the scale of its row: q.float() * scale[:, None].")


# ---------------------------------------------------------------------------------------------
# Chapter 1 (b): asymmetric int8 per output channel
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_int8_asymmetric(student_quantize: Callable, student_dequantize: Callable, out_features: int,
                          in_features: int, *, seed: int = 0, zero_row: bool = False, offset: float = 0.0) -> None:
    """``quantize_int8_asymmetric(weight) -> (q uint8, scale [out], minimum [out])`` and its dequantize."""
    require_own_implementation(student_quantize, "quantize_int8_asymmetric")
    require_own_implementation(student_dequantize, "dequantize_int8_asymmetric")
    weight_args = dict(out_features=out_features, in_features=in_features, zero_row=zero_row, offset=offset)
    weight = random_weight(out_features, in_features, seed, zero_row=zero_row, offset=offset)
    where = f"quantize_int8_asymmetric on {_describe(weight_args)}"
    expected_q, expected_scale, expected_minimum = reference(reference_module.quantize_int8_asymmetric)(weight)
    result = call_student(student_quantize, where, weight, show_args=False)
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        fail(f"{where} must return (q, scale, minimum)", expected="(q, scale, minimum)", got=short_repr(result))
    q, scale, minimum = result
    minimum = _require_tensor(minimum, f"{where}: minimum", torch.float32, (out_features,),
                              "minimum[o] = the smallest weight of row o (float32).")
    _compare_close(minimum, expected_minimum, f"{where}: minimum", "minimum[o] = weight[o].min().")
    scale_hint = "scale[o] = (max of row o - min of row o) / 255: the 256 codes span the row's own range."
    scale = _require_tensor(scale, f"{where}: scale", torch.float32, (out_features,), scale_hint)
    if zero_row and not bool((scale > 0).all()):
        fail(f"{where}: a constant row gave scale {float(scale[-1])!r}", expected="any positive scale (1.0)",
             got=float(scale[-1]), hint="guard the division: a row with max == min can use scale 1.")
    _compare_close(scale, expected_scale, f"{where}: scale", scale_hint, rtol=SCALE_RTOL)
    q = _require_tensor(q, f"{where}: q", torch.uint8, (out_features, in_features),
                        "codes 0..255 as torch.uint8: round((weight - minimum[:, None]) / scale[:, None]).")
    _compare_codes(q, expected_q, (weight - expected_minimum[:, None]) / expected_scale[:, None], f"{where}: q",
                   "q = round((weight - minimum[:, None]) / scale[:, None]), in [0, 255].")
    restored = call_student(student_dequantize, "dequantize_int8_asymmetric(q, scale, minimum) on the reference's codes",
                            expected_q, expected_scale, expected_minimum, show_args=False)
    expected_restored = reference(reference_module.dequantize_int8_asymmetric)(expected_q, expected_scale,
                                                                                expected_minimum)
    restored = _require_tensor(restored, "dequantize_int8_asymmetric(q, scale, minimum)", torch.float32,
                               (out_features, in_features), "return the fp32 weight.")
    _compare_close(restored, expected_restored, "dequantize_int8_asymmetric(q, scale, minimum)",
                   "weight = q * scale[:, None] + minimum[:, None] (convert q to float first: uint8 arithmetic wraps).")


# ---------------------------------------------------------------------------------------------
# Chapter 1 (c): two int4 values per byte
# ---------------------------------------------------------------------------------------------


def _values_for_packing(rows: int, cols: int, seed: int) -> torch.Tensor:
    """int8 [rows, cols] in [-8, 7]: row 0 holds every (low, high) pair, the rest are random."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randint(-8, 8, (rows, cols), generator=generator, dtype=torch.int8)
    pairs = torch.tensor([[low, high] for low in range(-8, 8) for high in range(-8, 8)], dtype=torch.int8).flatten()
    values[0, : min(cols, pairs.numel())] = pairs[: min(cols, pairs.numel())]
    return values


@recorded_check
def check_pack_int4(student_pack: Callable, student_unpack: Callable, rows: int = 2, cols: int = 512,
                    *, seed: int = 0) -> None:
    """``pack_int4(values int [rows, cols]) -> uint8 [rows, cols // 2]`` (column 2j low nibble, 2j+1 high nibble,
    4-bit two's complement) and ``unpack_int4`` back to int8."""
    require_own_implementation(student_pack, "pack_int4")
    require_own_implementation(student_unpack, "unpack_int4")
    values = _values_for_packing(rows, cols, seed)
    expected_packed = reference(reference_module.pack_int4)(values)
    call = f"pack_int4(values int8 [{rows}, {cols}] in [-8, 7])"
    packed = call_student(student_pack, call, values, show_args=False)
    packed = _require_tensor(packed, call, torch.uint8, (rows, cols // 2),
                             "two values per byte: [rows, cols // 2], dtype torch.uint8.")
    if not torch.equal(packed, expected_packed):
        bad = (packed != expected_packed).nonzero()[0]
        row, byte = int(bad[0]), int(bad[1])
        low, high = int(values[row, 2 * byte]), int(values[row, 2 * byte + 1])
        swapped = ((values[:, 1::2].to(torch.int16) & 0xF) | ((values[:, 0::2].to(torch.int16) & 0xF) << 4)).to(torch.uint8)
        if torch.equal(packed, swapped):
            hint = "column 2j goes in the LOW 4 bits and column 2j + 1 in the HIGH 4 bits: low | (high << 4)."
        elif low < 0 or high < 0:
            hint = ("negative values: keep only their low 4 bits (v & 0xF: -1 -> 0b1111 = 15, -8 -> 0b1000 = 8) "
                    "before shifting and OR-ing, or the sign bits spill into the other nibble.")
        else:
            hint = "byte j = (values[:, 2j] & 0xF) | ((values[:, 2j + 1] & 0xF) << 4)."
        fail(f"{call}: byte {byte} of row {row} packs the pair ({low}, {high}) wrongly",
             expected=f"{int(expected_packed[row, byte])} = 0b{int(expected_packed[row, byte]):08b}",
             got=f"{int(packed[row, byte])} = 0b{int(packed[row, byte]):08b}", hint=hint)
    call = f"unpack_int4(packed uint8 [{rows}, {cols // 2}])"
    unpacked = call_student(student_unpack, call, expected_packed, show_args=False)
    unpacked = _require_tensor(unpacked, call, torch.int8, (rows, cols), "return int8 [rows, 2 * packed_cols].")
    if not torch.equal(unpacked, values):
        bad = (unpacked != values).nonzero()[0]
        row, col = int(bad[0]), int(bad[1])
        if bool(((unpacked.long() - values.long()) % 16 == 0).all()) and bool((unpacked >= 0).all()):
            hint = ("the sign is lost: a nibble of 8..15 stands for -8..-1 in 4-bit two's complement; "
                    "subtract 16 from nibbles >= 8.")
        else:
            hint = "column 2j is the low nibble (byte & 0xF), column 2j + 1 the high nibble (byte >> 4)."
        fail(f"{call}: value at [{row}, {col}] differs", expected=int(values[row, col]),
             got=int(unpacked[row, col]), hint=hint)


# ---------------------------------------------------------------------------------------------
# Chapter 1 (d): symmetric int4 in groups
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_int4_groups(student_quantize: Callable, student_dequantize: Callable, out_features: int, in_features: int,
                      group_size: int = 32, *, seed: int = 0, zero_row: bool = False, outlier: bool = False) -> None:
    """``quantize_int4(weight, group_size) -> (packed uint8 [out, in // 2], scale [out, in // group_size])``
    and ``dequantize_int4(packed, scale)``."""
    require_own_implementation(student_quantize, "quantize_int4")
    require_own_implementation(student_dequantize, "dequantize_int4")
    weight_args = dict(out_features=out_features, in_features=in_features, zero_row=zero_row, outlier=outlier)
    weight = random_weight(out_features, in_features, seed, zero_row=zero_row, outlier=outlier)
    where = f"quantize_int4 on {_describe(weight_args)}, group_size={group_size}"
    expected_packed, expected_scale = reference(reference_module.quantize_int4)(weight, group_size)
    result = call_student(student_quantize, where, weight, group_size, show_args=False)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        fail(f"{where} must return (packed, scale)", expected="(packed, scale)", got=short_repr(result))
    packed, scale = result
    num_groups = in_features // group_size
    scale_hint = (f"one scale per group: view the weight as [out, {num_groups}, {group_size}], take max |w| "
                  "over the last dimension, divide by 7.")
    scale = _require_tensor(scale, f"{where}: scale", torch.float32, (out_features, num_groups), scale_hint)
    row_scale = (weight.abs().amax(dim=1, keepdim=True) / 7).expand(out_features, num_groups)
    if num_groups > 1 and torch.allclose(scale, row_scale, rtol=SCALE_RTOL):
        fail(f"{where}: every group of a row got the row's scale", show_values=False, hint=scale_hint)
    if torch.allclose(scale, expected_scale * 7 / 8, rtol=SCALE_RTOL) or torch.allclose(scale, expected_scale * 7 / 15,
                                                                                         rtol=SCALE_RTOL):
        fail(f"{where}: the scales use the wrong number of steps", show_values=False,
             hint="symmetric int4 codes go from -7 to 7: scale = max |w| / 7.")
    _compare_close(scale, expected_scale, f"{where}: scale", scale_hint, rtol=SCALE_RTOL)
    packed = _require_tensor(packed, f"{where}: packed", torch.uint8, (out_features, in_features // 2),
                             "pack the codes two per byte with pack_int4: [out, in // 2] uint8.")
    if not torch.equal(packed, expected_packed):
        ratio = weight / expected_scale.repeat_interleave(group_size, dim=1)
        # Compare as values: a tie may round either way (then the byte differs by one nibble step).
        got_values = _unpack_for_comparison(packed)
        expected_values = _unpack_for_comparison(expected_packed)
        _compare_codes(got_values, expected_values, ratio, f"{where}: the packed codes",
                       "codes = round(weight / scale of its group), in [-7, 7], packed with pack_int4 "
                       "(column 2j in the low nibble).")
    restored = call_student(student_dequantize, "dequantize_int4(packed, scale) on the reference's codes",
                            expected_packed, expected_scale, show_args=False)
    expected_restored = reference(reference_module.dequantize_int4)(expected_packed, expected_scale)
    restored = _require_tensor(restored, "dequantize_int4(packed, scale)", torch.float32, (out_features, in_features),
                               "return the fp32 weight [out, in].")
    hint = ("unpack the codes, then multiply each by the scale of its group: "
            "scale.repeat_interleave(group_size, dim=1); group_size = in_features // scale.shape[1].")
    steps = (restored - expected_restored) / expected_scale.repeat_interleave(group_size, dim=1)
    if bool((steps.round() % 16 == 0).all()) and bool((steps.abs() > 8).any()):
        hint = ("some values are off by exactly 16 steps: the sign of negative codes is lost when unpacking "
                "(a nibble of 8..15 is -8..-1; check unpack_int4).")
    _compare_close(restored, expected_restored, "dequantize_int4(packed, scale)", hint)


def _unpack_for_comparison(packed: torch.Tensor) -> torch.Tensor:
    """The check's own unpacking (two's-complement nibbles), so no reference sees a student's bytes."""
    as_int = packed.to(torch.int16)
    nibbles = torch.stack([as_int & 0xF, as_int >> 4], dim=-1).reshape(packed.shape[0], -1)
    return torch.where(nibbles >= 8, nibbles - 16, nibbles)


# ---------------------------------------------------------------------------------------------
# Chapter 1 (e): the GGUF blocks of the shipped file
# ---------------------------------------------------------------------------------------------


def _gguf_rows(source: str, num_rows: int, seed: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{"Q8_0": (raw uint8, expected fp32), "Q4_1": ...} decoded by the gguf package (the outside oracle)."""
    import numpy as np
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    rows: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    if source == "file":
        from course_lib.gguf_file import open_gguf

        tensors = {tensor.name: tensor for tensor in open_gguf().tensors}
        picks = {"Q8_0": "token_embd.weight", "Q4_1": "blk.3.attn_q.weight"}
        for kind, name in picks.items():
            tensor = tensors[name]
            start = seed % max(1, tensor.data.shape[0] - num_rows)
            raw = np.array(tensor.data[start : start + num_rows])
            rows[kind] = (torch.from_numpy(raw.copy()), torch.from_numpy(dequantize(raw, tensor.tensor_type)))
        return rows
    if source != "synthetic":
        raise ValueError(f"source must be 'file' or 'synthetic', got {source!r}")
    generator = np.random.default_rng(seed)
    weights = (generator.standard_normal((num_rows, 96)) * generator.uniform(0.01, 3)).astype(np.float32)
    weights[0, :32] += 5.0  # a block far from zero: its minimum matters
    for kind in ("Q8_0", "Q4_1"):
        qtype = getattr(GGMLQuantizationType, kind)
        raw = quantize(weights, qtype)
        rows[kind] = (torch.from_numpy(raw), torch.from_numpy(dequantize(raw, qtype)))
    return rows


@recorded_check
def check_gguf_blocks(student_q8_0: Callable, student_q4_1: Callable, source: str = "file", num_rows: int = 4,
                      *, seed: int = 0) -> None:
    """``dequantize_q8_0(raw)`` and ``dequantize_q4_1(raw)`` (raw uint8 [rows, n * block_bytes] -> fp32
    [rows, n * 32]) against the ``gguf`` package, on rows of the shipped file or on blocks it writes."""
    require_own_implementation(student_q8_0, "dequantize_q8_0")
    require_own_implementation(student_q4_1, "dequantize_q4_1")
    rows = _gguf_rows(source, num_rows, seed)
    origin = "rows of the SmolLM2 file" if source == "file" else "blocks written by the gguf package"
    hints = {
        "Q8_0": "each 34-byte block: bytes 0-1 are the fp16 scale (block[:2].view(torch.float16)), bytes 2..33 "
                "are 32 int8 codes (view(torch.int8)); weight = scale * code.",
        "Q4_1": "each 20-byte block: fp16 scale d (bytes 0-1), fp16 minimum m (bytes 2-3), then 16 bytes: byte j "
                "holds weight j in its low nibble and weight j + 16 in its high nibble; weight = d * code + m.",
    }
    for kind, function in (("Q8_0", student_q8_0), ("Q4_1", student_q4_1)):
        raw, expected = rows[kind]
        call = f"dequantize_{kind.lower()}(raw uint8 {list(raw.shape)}) on {origin}"
        got = call_student(function, call, raw.clone(), show_args=False)
        got = _require_tensor(got, call, torch.float32, tuple(expected.shape), hints[kind])
        if torch.allclose(got, expected, rtol=1e-6, atol=1e-6):
            continue
        hint = hints[kind]
        if kind == "Q4_1":
            # Diagnose from the right answer alone (the kit ships this file: it must not decode blocks).
            per_block_expected, per_block_got = expected.reshape(-1, 32), got.reshape(-1, 32)
            neighbours = per_block_expected.reshape(-1, 2, 16).transpose(1, 2).reshape(-1, 32)
            offset = per_block_got - per_block_expected
            if torch.allclose(per_block_got, neighbours, rtol=1e-6, atol=1e-6):
                hint = ("the nibble order: Q4_1 stores weights j and j + 16 in byte j (low, high), not two "
                        "neighbours; take all 16 low nibbles first, then all 16 high nibbles.")
            elif bool((offset.std(dim=1) < 1e-6).all()) and bool((offset.abs().amax(dim=1) > 0).any()):
                hint = "add the block's minimum m (bytes 2-3, fp16): weight = d * code + m."
        fail(f"{call} differs from the gguf package by up to {float((got - expected).abs().max()):.3g}",
             expected=expected.flatten()[:6].tolist(), got=got.flatten()[:6].tolist(), hint=hint)


# ---------------------------------------------------------------------------------------------
# Chapter 2 (a): perplexity
# ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=4)
def tiny_model(seed: int = 0):
    """A 2-layer random Llama (hidden 48, vocab 64) whose predictions depend on the context."""
    from course_lib.model import LlamaModel, ModelConfig, random_weights

    config = ModelConfig(num_layers=2, hidden_size=48, num_q_heads=4, num_kv_heads=2, head_dim=12, vocab_size=64,
                         intermediate_size=96, max_position_embeddings=512, rope_theta=10000.0, rms_norm_eps=1e-5)
    weights = random_weights(config, seed=seed)
    for layer in range(config.num_layers):
        weights[f"layers.{layer}.o_proj"] = weights[f"layers.{layer}.o_proj"] * 3
        weights[f"layers.{layer}.down_proj"] = weights[f"layers.{layer}.down_proj"] * 3
    return LlamaModel(config, weights).eval()


@lru_cache(maxsize=4)
def held_out_token_ids(num_tokens: int, offset: int = 20_000) -> tuple[int, ...]:
    """SmolLM2 token ids of Python standard-library docstrings (``course_lib.corpus``), from ``offset`` bytes on."""
    from course_lib.corpus import load_corpus

    _, tokenizer = smollm2()
    text = load_corpus("stdlib-docstrings", max_bytes=offset + 8 * num_tokens + 4_000)[offset:]
    return tuple(tokenizer.encode(text)[:num_tokens])


class _CountingModel:
    """Runs the real model for the student's code and counts what it was asked (measured on our side)."""

    def __init__(self, model) -> None:
        self._model = model
        self.config = model.config
        self.device = model.device
        self.dtype = model.dtype
        self.num_tokens_seen: list[int] = []

    def __call__(self, input_ids, positions=None, attention=None, logits_indices=None):
        self.num_tokens_seen.append(int(torch.as_tensor(input_ids).numel()))
        with torch.inference_mode():
            return self._model(input_ids, positions, attention, logits_indices)


def _perplexity_variants(model, token_ids: list[int], window: int) -> dict[str, float]:
    """Values that common mistakes produce, computed here (no reference involved), for the hint."""
    nll_shifted = nll_unshifted = 0.0
    count_shifted = count_unshifted = 0
    per_window = []
    with torch.inference_mode():
        for start in range(0, len(token_ids), window):
            chunk = torch.tensor(token_ids[start : start + window])
            if len(chunk) < 2:
                continue
            log_probs = torch.log_softmax(model(chunk).float(), dim=-1)
            shifted = -log_probs[torch.arange(len(chunk) - 1), chunk[1:]]
            nll_shifted += float(shifted.sum())
            count_shifted += len(chunk) - 1
            per_window.append(float(shifted.mean()))
            unshifted = -log_probs[torch.arange(len(chunk)), chunk]
            nll_unshifted += float(unshifted.sum())
            count_unshifted += len(chunk)
    return {
        "unshifted": math.exp(nll_unshifted / count_unshifted),
        "mean of window means": math.exp(sum(per_window) / len(per_window)),
        "base 2": 2 ** (nll_shifted / count_shifted),
        "mean NLL (no exp)": nll_shifted / count_shifted,
    }


@recorded_check
def check_perplexity(student_perplexity: Callable, model_name: str = "tiny", num_tokens: int = 50,
                     window: int = 20, *, seed: int = 0) -> None:
    """``perplexity(model, token_ids, window)`` against the reference, on the tiny model or SmolLM2."""
    require_own_implementation(student_perplexity, "perplexity")
    if model_name == "tiny":
        model = tiny_model(seed)
        generator = torch.Generator().manual_seed(seed)
        token_ids = torch.randint(0, model.config.vocab_size, (num_tokens,), generator=generator).tolist()
    elif model_name == "smollm2":
        model, _ = smollm2()
        token_ids = list(held_out_token_ids(num_tokens))
    else:
        raise ValueError(f"model_name must be 'tiny' or 'smollm2', got {model_name!r}")
    counting = _CountingModel(model)
    call = f"perplexity(model, <{len(token_ids)} tokens>, window={window}) on the {model_name} model"
    with one_thread():
        got = call_student(student_perplexity, call, share(counting, "__call__"), list(token_ids), window,
                           copy_args=False, show_args=False)
        expected = reference(reference_module.perplexity)(model, token_ids, window)
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        got = float(got)
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        fail(f"{call} must return a float", expected=expected, got=short_repr(got))
    if math.isclose(float(got), expected, rel_tol=1e-4):
        return
    hint = ("exp(mean over every predicted token of -log p(token | tokens before it in its window)); row t of "
            "a window's logits predicts token t + 1.")
    windows = -(-len(token_ids) // window)
    if any(size > window for size in counting.num_tokens_seen):
        hint = f"run the text in windows of at most window={window} tokens (you ran {max(counting.num_tokens_seen)})."
    else:
        with one_thread():
            variants = _perplexity_variants(model, token_ids, window)
        for name, value in variants.items():
            if math.isclose(float(got), value, rel_tol=1e-4):
                hint = {
                    "unshifted": "row t of the logits predicts token t + 1, not token t: score logits[:-1] "
                                 "against token_ids[1:].",
                    "mean of window means": f"the last of the {windows} windows is shorter: average over all "
                                            "predicted tokens, not over windows.",
                    "base 2": "perplexity uses the natural log: exp(mean NLL), not 2 ** (mean NLL).",
                    "mean NLL (no exp)": "that is the mean negative log-likelihood; perplexity is its exp.",
                }[name]
                break
    fail(f"{call} gave the wrong perplexity (tolerance: relative 1e-4)", expected=expected, got=got, hint=hint)


# ---------------------------------------------------------------------------------------------
# Chapter 2 (b): bytes of a decode step
# ---------------------------------------------------------------------------------------------


def _config_fields(config_name: str) -> dict:
    """The fields of a ModelConfig by name (plain data: the config is built next to the student's code)."""
    from dataclasses import asdict

    from course_lib.model import ModelConfig

    if config_name == "smollm2":
        return asdict(ModelConfig.from_gguf())
    if config_name == "llama-2-7b":
        return dict(num_layers=32, hidden_size=4096, num_q_heads=32, num_kv_heads=32, head_dim=128, vocab_size=32000,
                    intermediate_size=11008, max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5)
    if config_name == "tiny":
        return asdict(tiny_model().config)
    raise ValueError(f"config_name must be 'smollm2', 'llama-2-7b' or 'tiny', got {config_name!r}")


@recorded_check
def check_decode_step_bytes(student_decode_step_bytes: Callable, config_name: str, layer_bits_per_weight: float,
                            batch_size: int, context_len: int, *, lm_head_bits_per_weight: float = 32,
                            kv_bits_per_value: float = 32) -> None:
    """``decode_step_bytes(config, layer_bits, batch_size, context_len, lm_head_bits_per_weight=...,
    kv_bits_per_value=...)`` against the reference."""
    require_own_implementation(student_decode_step_bytes, "decode_step_bytes")
    from course_lib.model import ModelConfig

    fields = _config_fields(config_name)
    config = ModelConfig(**fields)
    call = (f"decode_step_bytes({config_name} config, {layer_bits_per_weight}, batch_size={batch_size}, "
            f"context_len={context_len}, lm_head_bits_per_weight={lm_head_bits_per_weight}, "
            f"kv_bits_per_value={kv_bits_per_value})")
    # The config is built where the student's code runs (a frozen dataclass: no copy needed).
    got = call_student(student_decode_step_bytes, call, make(ModelConfig, **fields), layer_bits_per_weight, batch_size,
                       context_len, lm_head_bits_per_weight=lm_head_bits_per_weight,
                       kv_bits_per_value=kv_bits_per_value, copy_args=False, show_args=False)
    expected = reference(reference_module.decode_step_bytes)(
        config, layer_bits_per_weight, batch_size, context_len, lm_head_bits_per_weight=lm_head_bits_per_weight,
        kv_bits_per_value=kv_bits_per_value)
    try:
        ok = math.isclose(float(got), expected, rel_tol=1e-9)
    except (TypeError, ValueError):
        ok = False
    if ok:
        return
    hidden, kv_size = config.hidden_size, config.num_kv_heads * config.head_dim
    kv_bytes = batch_size * context_len * 2 * config.num_layers * kv_size * kv_bits_per_value / 8
    hint = ("weights: every layer's q, k, v, o, gate, up, down parameters x layer bits / 8, plus vocab x hidden x "
            "lm_head bits / 8; KV: batch x context x 2 x layers x kv_heads x head_dim x kv bits / 8.")
    try:
        value = float(got)
        if math.isclose(value, expected * 8, rel_tol=1e-9):
            hint = "that is bits: divide by 8 for bytes."
        elif math.isclose(value, expected - kv_bytes, rel_tol=1e-9):
            hint = "the KV cache is missing: each sequence reads its K and V for every context token."
        elif math.isclose(value, expected - kv_bytes / 2, rel_tol=1e-9):
            hint = "count both K and V (the factor 2) in the KV cache's bytes per token."
        elif math.isclose(value, expected - config.vocab_size * hidden * lm_head_bits_per_weight / 8, rel_tol=1e-9):
            hint = "the output layer (vocab x hidden, the tied embedding) is read at every step too."
    except (TypeError, ValueError):
        pass
    fail(f"{call}: wrong number of bytes", expected=expected, got=got, hint=hint)


# ---------------------------------------------------------------------------------------------
# Chapter 2 (c): an int8 KV cache
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_kv_int8(student_quantize: Callable, student_dequantize: Callable, num_tokens: int, num_kv_heads: int,
                  head_dim: int, *, seed: int = 0) -> None:
    """``quantize_kv_int8(x [tokens, heads, dim]) -> (q int8, scale [tokens, heads])`` and ``dequantize_kv_int8``."""
    require_own_implementation(student_quantize, "quantize_kv_int8")
    require_own_implementation(student_dequantize, "dequantize_kv_int8")
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_tokens, num_kv_heads, head_dim, generator=generator) * (
        1 + 5 * torch.rand(num_tokens, num_kv_heads, 1, generator=generator))
    x[0, 0] = 0.0  # a head of zeros must not divide by zero
    where = f"quantize_kv_int8(x [{num_tokens}, {num_kv_heads}, {head_dim}])"
    expected_q, expected_scale = reference(reference_module.quantize_kv_int8)(x)
    result = call_student(student_quantize, where, x, show_args=False)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        fail(f"{where} must return (q, scale)", expected="(q, scale)", got=short_repr(result))
    q, scale = result
    scale_hint = "one scale per token and head: max |x| over head_dim (dim=2) / 127, shape [num_tokens, num_kv_heads]."
    scale = _require_tensor(scale, f"{where}: scale", torch.float32, (num_tokens, num_kv_heads), scale_hint)
    if not bool((scale > 0).all()):
        fail(f"{where}: a head of zeros gave scale 0", show_values=False,
             hint="guard the division: a head whose max is 0 can use scale 1.")
    _compare_close(scale, expected_scale, f"{where}: scale", scale_hint, rtol=SCALE_RTOL)
    q = _require_tensor(q, f"{where}: q", torch.int8, (num_tokens, num_kv_heads, head_dim),
                        "one int8 code per value: round(x / scale[:, :, None]).")
    _compare_codes(q, expected_q, x / expected_scale[:, :, None], f"{where}: q",
                   "q = round(x / scale[:, :, None]), clamped to [-127, 127].")
    restored = call_student(student_dequantize, "dequantize_kv_int8(q, scale) on the reference's codes",
                            expected_q, expected_scale, show_args=False)
    expected_restored = reference(reference_module.dequantize_kv_int8)(expected_q, expected_scale)
    restored = _require_tensor(restored, "dequantize_kv_int8(q, scale)", torch.float32,
                               (num_tokens, num_kv_heads, head_dim), "return fp32 q * scale[:, :, None].")
    _compare_close(restored, expected_restored, "dequantize_kv_int8(q, scale)", "q.float() * scale[:, :, None].")
