"""Checks for Lab 0.1, chapter 2 (training graph vs inference graph: the memory calculator).

Each ``check_*`` runs the student's function on copies of the inputs, compares with the reference
in :mod:`course_lib.memory` (or with the tensors SmolLM2's GGUF file really holds), and raises
:class:`~course_lib.checks.CheckFailed` with what was expected, what came back and a hint aimed at
the usual mistake: forgetting grouped-query attention, counting a tied ``lm_head`` twice, leaving
out Adam's fp32 master copy, reading the KV cache with the query heads.

The ``ModelConfig`` a student's function receives is built with ``checks.make`` (where the
student's code runs); the check keeps its own copy to compute the expected values. A precision the
docstrings do not allow must raise ``ValueError``, the documented type.
"""

from __future__ import annotations

import math
import numbers
from functools import lru_cache
from typing import Any, Callable

from course_lib import memory
from course_lib.checks import call_student, fail, register_reference_names, require_own_implementation, short_repr
from course_lib.checks._shared import expect_raises, lend_config
from course_lib.checks.fixtures import recorded_check, reference
from course_lib.memory import BYTES_PER_ELEMENT, LLAMA2_7B, LLAMA2_13B, TRAINING_PRECISIONS
from course_lib.model import ModelConfig

__all__ = [
    "BYTES_PER_ELEMENT",
    "LLAMA2_7B",
    "LLAMA2_13B",
    "check_activation_bytes",
    "check_count_parameters",
    "check_inference_memory",
    "check_tensor_shapes",
    "check_training_memory",
    "small_config",
    "smollm2_config",
    "smollm2_parameter_count",
    "smollm2_tensor_shapes",
]

register_reference_names(
    "tensor_shapes", "count_parameters", "activation_bytes", "activation_numbers_per_token", "training_memory",
    "inference_memory", "kv_cache_memory",
)

# GGUF tensor names (llama.cpp's) -> the names the notebook uses.
_GGUF_LAYER_NAMES = {
    "attn_norm": "input_norm", "attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj",
    "attn_output": "o_proj", "ffn_norm": "post_attention_norm", "ffn_gate": "gate_proj", "ffn_up": "up_proj",
    "ffn_down": "down_proj",
}
_GGUF_GLOBAL_NAMES = {"token_embd": "embed_tokens", "output_norm": "norm", "output": "lm_head"}

# The relative tolerance for byte counts: they are exact products, only float rounding differs.
_REL = 1e-9

_reference_tensor_shapes = reference(memory.tensor_shapes)
_reference_count_parameters = reference(memory.count_parameters)
_reference_activation_bytes = reference(memory.activation_bytes)
_reference_training_memory = reference(memory.training_memory)
_reference_inference_memory = reference(memory.inference_memory)


# ---------------------------------------------------------------------------------------------
# Inputs the test cells use
# ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def smollm2_config() -> ModelConfig:
    """SmolLM2-135M's sizes, read from its GGUF file."""
    return ModelConfig.from_gguf(None)


@lru_cache(maxsize=1)
def smollm2_tensor_shapes() -> dict[str, tuple[int, ...]]:
    """Every tensor in SmolLM2's GGUF file, renamed to the notebook's names, shapes in torch order.

    GGUF lists dimensions fastest-varying first, so its [576, 49152] is torch's [49152, 576].
    The file has no ``output.weight``: the embedding table doubles as the output layer (tied).
    """
    from course_lib.gguf_file import read_tensor_infos

    shapes = {}
    for tensor in read_tensor_infos():
        parts = tensor.name.split(".")  # "blk.3.attn_q.weight" or "token_embd.weight"
        if parts[0] == "blk":
            name = f"layers.{parts[1]}.{_GGUF_LAYER_NAMES[parts[2]]}"
        else:
            name = _GGUF_GLOBAL_NAMES[parts[0]]
        shapes[name] = tuple(int(size) for size in reversed(tensor.shape))
    return shapes


def smollm2_parameter_count() -> int:
    """Numbers stored in all of SmolLM2's tensors (the sum of the GGUF tensors' element counts)."""
    return sum(math.prod(shape) for shape in smollm2_tensor_shapes().values())


def small_config(num_layers: int = 2, hidden_size: int = 48, num_q_heads: int = 6, num_kv_heads: int = 2,
                 head_dim: int = 8, vocab_size: int = 100, intermediate_size: int = 80) -> ModelConfig:
    """A tiny Llama config whose sizes are all different, so a mixed-up size shows in the count."""
    return ModelConfig(
        num_layers=num_layers, hidden_size=hidden_size, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads,
        head_dim=head_dim, vocab_size=vocab_size, intermediate_size=intermediate_size,
        max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5,
    )


def _describe(config: ModelConfig) -> str:
    return (f"ModelConfig(layers={config.num_layers}, hidden={config.hidden_size}, q_heads={config.num_q_heads}, "
            f"kv_heads={config.num_kv_heads}, head_dim={config.head_dim}, vocab={config.vocab_size}, "
            f"intermediate={config.intermediate_size})")


def _is_number(value: Any) -> bool:
    """An int, a float or a numpy scalar (np.prod returns one), but not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _close(got: Any, expected: float) -> bool:
    return _is_number(got) and math.isclose(float(got), float(expected), rel_tol=_REL)


# ---------------------------------------------------------------------------------------------
# (a) tensor shapes and the parameter count
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_tensor_shapes(student_tensor_shapes: Callable, config: ModelConfig, tied_embeddings: bool,
                        expected: dict[str, tuple[int, ...]] | None = None) -> None:
    """``student_tensor_shapes(config, tied_embeddings)`` must list every tensor with its torch shape.

    ``expected`` defaults to the reference; pass ``smollm2_tensor_shapes()`` to compare with the file.
    """
    require_own_implementation(student_tensor_shapes, "tensor_shapes")
    got = call_student(student_tensor_shapes, "tensor_shapes", lend_config(config), tied_embeddings, copy_args=False)
    if expected is None:
        expected = _reference_tensor_shapes(config, tied_embeddings)
    call = f"tensor_shapes({_describe(config)}, tied_embeddings={tied_embeddings})"
    if not isinstance(got, dict):
        fail(f"{call} must return a dict {{name: shape tuple}}", expected="dict", got=type(got).__name__)
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    if "lm_head" in extra and tied_embeddings:
        fail(f"{call} lists an lm_head, but this model ties its embeddings", expected="no 'lm_head' entry",
             got=f"'lm_head': {short_repr(got['lm_head'])}",
             hint="with tied embeddings the output layer *is* the embedding table: it is stored once.")
    if "lm_head" in missing:
        fail(f"{call} has no lm_head, but this model does not tie its embeddings", expected=expected["lm_head"],
             got="no 'lm_head' entry",
             hint="untied (Llama-2): the output layer is its own [vocab_size, hidden_size] tensor.")
    if missing or extra:
        fail(f"{call}: the names differ ({len(expected)} tensors expected, {len(got)} returned)",
             expected=f"missing: {short_repr(missing)}", got=f"extra: {short_repr(extra)}",
             hint=("names: embed_tokens, norm, [lm_head], and for every layer i layers.{i}.input_norm, "
                   ".q_proj, .k_proj, .v_proj, .o_proj, .post_attention_norm, .gate_proj, .up_proj, .down_proj "
                   f"(layers 0..{config.num_layers - 1})."))
    for name, shape in expected.items():
        got_shape = got[name]
        if isinstance(got_shape, list):
            got_shape = tuple(got_shape)
        if got_shape == shape:
            continue
        hint = "shapes are (out_features, in_features) as torch stores a Linear weight; norms are (hidden,)."
        if isinstance(got_shape, tuple) and tuple(reversed(got_shape)) == shape:
            hint = "you wrote (in_features, out_features); torch stores a Linear weight as (out, in)."
        elif name.endswith(("k_proj", "v_proj")) and got_shape == (config.num_q_heads * config.head_dim,
                                                                   config.hidden_size):
            hint = (f"grouped-query attention: keys and values have num_kv_heads = {config.num_kv_heads} heads, "
                    f"not num_q_heads = {config.num_q_heads}; several query heads share each KV head.")
        fail(f"{call}[{name!r}] has the wrong shape", expected=shape, got=got[name], hint=hint)


@recorded_check
def check_count_parameters(student_count_parameters: Callable, config: ModelConfig, tied_embeddings: bool,
                           expected: int | None = None) -> None:
    """``student_count_parameters(config, tied_embeddings)`` must return the exact number of weights.

    ``expected`` defaults to the reference; pass ``smollm2_parameter_count()`` to compare with the file.
    """
    require_own_implementation(student_count_parameters, "count_parameters")
    got = call_student(student_count_parameters, "count_parameters", lend_config(config), tied_embeddings,
                       copy_args=False)
    if expected is None:
        expected = _reference_count_parameters(config, tied_embeddings)
    call = f"count_parameters({_describe(config)}, tied_embeddings={tied_embeddings})"
    if not (isinstance(got, numbers.Integral) and not isinstance(got, bool)):
        if _is_number(got) and float(got).is_integer():
            got = int(got)
        else:
            fail(f"{call} must return an int", expected=expected, got=got,
                 hint="a parameter count is a whole number: multiply ints, do not divide.")
    if got == expected:
        return
    hidden, vocab = config.hidden_size, config.vocab_size
    difference = got - expected
    kv_surplus = 2 * config.num_layers * (config.num_q_heads - config.num_kv_heads) * config.head_dim * hidden
    hint = ("add up every tensor: embeddings, per layer q/k/v/o, gate/up/down and two norms, the final norm, "
            "and the lm_head when it is not tied.")
    if difference == vocab * hidden and tied_embeddings:
        hint = "you counted the lm_head, but tied embeddings store the table once: it is embeddings and output layer."
    elif difference == -vocab * hidden and not tied_embeddings:
        hint = "untied embeddings: the lm_head is a second [vocab_size, hidden_size] tensor; count it too."
    elif difference == kv_surplus and kv_surplus:
        hint = (f"k_proj and v_proj have num_kv_heads = {config.num_kv_heads} heads (grouped-query attention), "
                f"not num_q_heads = {config.num_q_heads}.")
    elif difference == -(2 * config.num_layers + 1) * hidden:
        hint = "the RMSNorm weights are parameters too: two per layer and one final norm, each [hidden_size]."
    elif difference == -hidden:
        hint = "the final norm (one [hidden_size] weight after the last layer) is missing."
    elif difference == -config.intermediate_size * hidden * config.num_layers:
        hint = "the SwiGLU MLP has three matrices per layer: gate, up and down."
    fail(call, expected=expected, got=got, hint=hint)


# ---------------------------------------------------------------------------------------------
# (b) activations and training memory
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_activation_bytes(student_activation_bytes: Callable, config: ModelConfig, batch_size: int,
                           seq_len: int, bytes_per_number: float) -> None:
    """``student_activation_bytes(config, batch_size, seq_len, bytes_per_number)`` = the stated formula."""
    require_own_implementation(student_activation_bytes, "activation_bytes")
    got = call_student(student_activation_bytes, "activation_bytes", lend_config(config), batch_size, seq_len,
                       bytes_per_number, copy_args=False)
    call = f"activation_bytes({_describe(config)}, batch_size={batch_size}, seq_len={seq_len}, {bytes_per_number})"
    if not _is_number(got):
        fail(f"{call} must return a number of bytes", expected="int or float", got=short_repr(got))
    expected = _reference_activation_bytes(config, batch_size, seq_len, bytes_per_number)
    if _close(got, expected):
        return
    tokens = batch_size * seq_len
    scores = config.num_layers * config.num_q_heads * seq_len * tokens * bytes_per_number
    logits = (2 * config.hidden_size + config.vocab_size) * tokens * bytes_per_number
    hint = ("per token and layer: 4*hidden + 2*(num_q_heads + num_kv_heads)*head_dim + num_q_heads*seq_len "
            "+ 3*intermediate numbers; plus 2*hidden + vocab per token after the layers; times "
            "batch_size * seq_len tokens and bytes_per_number.")
    if _is_number(got):
        if _close(got, expected - scores):
            hint = ("the attention probabilities are missing: each query head keeps a row of seq_len scores per "
                    "token, num_q_heads * seq_len numbers per token and layer.")
        elif _close(got, expected - logits):
            hint = "after the last layer come the final norm's input and output (2*hidden) and the logits (vocab)."
        elif _close(got, expected / bytes_per_number):
            hint = "that is a count of numbers; multiply by bytes_per_number."
        elif _close(got, expected / batch_size) and batch_size > 1:
            hint = "every sequence of the batch keeps its own activations: multiply by batch_size."
    fail(call, expected=expected, got=got, hint=hint)


@recorded_check
def check_training_memory(student_training_memory: Callable, num_parameters: int, precision: str,
                          activations: float) -> None:
    """``student_training_memory(num_parameters, precision, activations)`` must give the reference's dict;
    a precision that is not a training precision (int8, int4, ...) must raise ValueError."""
    require_own_implementation(student_training_memory, "training_memory")
    call = f"training_memory({num_parameters:,}, {precision!r}, activations={activations:,})"
    if precision not in TRAINING_PRECISIONS:
        expect_raises(student_training_memory, call, ValueError, num_parameters, precision, activations,
                      message_names=(precision, *TRAINING_PRECISIONS),
                      hint="check the precision first and raise ValueError naming the training precisions "
                           f"{sorted(TRAINING_PRECISIONS)}; int8 and int4 are inference formats.")
        return
    got = call_student(student_training_memory, "training_memory", num_parameters, precision, activations)
    _expect_components(call, got, ["weights", "gradients", "optimizer", "activations"])
    expected = _reference_training_memory(num_parameters, precision, activations)
    for component in ("weights", "gradients", "optimizer", "activations"):
        value = got[component]
        if _close(value, expected[component]):
            continue
        bytes_each = float(value) / num_parameters if _is_number(value) and num_parameters else None
        hint = ("bytes per parameter: fp32 training keeps 4 (weights) + 4 (gradients) + 8 (Adam's two moments); "
                "mixed precision fp16/bf16 keeps 2 + 2 + 12 (fp32 master weights and two fp32 moments).")
        if component == "optimizer" and bytes_each is not None and precision != "fp32" and math.isclose(bytes_each, 8):
            hint = ("mixed precision also keeps an fp32 master copy of the weights in the optimizer (the 16-bit "
                    "weights are rounded from it after each step): 4 + 4 + 4 = 12 bytes per parameter.")
        elif component == "optimizer" and bytes_each is not None and bytes_each in (4, 2, 6):
            hint = "Adam keeps *two* running moments (mean and variance of the gradient) per weight, in fp32."
        elif component == "gradients" and bytes_each is not None and precision != "fp32" and bytes_each == 4:
            hint = "in mixed precision the gradients come out of the 16-bit backward pass: 2 bytes each."
        elif component == "activations":
            hint = "pass the activations argument through unchanged: it was computed by activation_bytes."
        fail(f"{call}[{component!r}]", expected=expected[component], got=value, hint=hint)


# ---------------------------------------------------------------------------------------------
# (c) inference memory
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_inference_memory(student_inference_memory: Callable, num_parameters: int, precision: str,
                           config: ModelConfig, batch_size: int, seq_len: int, kv_precision: str = "fp16") -> None:
    """``student_inference_memory(num_parameters, precision, config, batch_size, seq_len, kv_precision)``."""
    require_own_implementation(student_inference_memory, "inference_memory")
    got = call_student(student_inference_memory, "inference_memory", num_parameters, precision, lend_config(config),
                       batch_size, seq_len, kv_precision, copy_args=False)
    call = (f"inference_memory({num_parameters:,}, {precision!r}, {_describe(config)}, batch_size={batch_size}, "
            f"seq_len={seq_len}, kv_precision={kv_precision!r})")
    _expect_components(call, got, ["weights", "kv_cache"])
    expected = _reference_inference_memory(num_parameters, precision, config, batch_size, seq_len, kv_precision)
    if not _close(got["weights"], expected["weights"]):
        hint = f"weights: num_parameters x bytes per element of {precision!r} ({BYTES_PER_ELEMENT[precision]} B)."
        if _close(got["weights"], num_parameters * BYTES_PER_ELEMENT[kv_precision]):
            hint = "the weights use `precision`; kv_precision is only for the cache."
        fail(f"{call}['weights']", expected=expected["weights"], got=got["weights"], hint=hint)
    value, wanted = got["kv_cache"], expected["kv_cache"]
    if _close(value, wanted):
        return
    hint = ("2 (K and V) x num_layers x num_kv_heads x head_dim x bytes per element (kv_precision) per token, "
            "times seq_len tokens times batch_size sequences.")
    if _is_number(value) and wanted:
        ratio = float(value) / wanted
        fixed_fp16 = 2 / BYTES_PER_ELEMENT[kv_precision]   # the ratio of a cache always at 2 bytes a number
        if math.isclose(ratio, config.num_q_heads / config.num_kv_heads) and config.num_q_heads != config.num_kv_heads:
            hint = (f"only the KV heads are cached: num_kv_heads = {config.num_kv_heads}, not num_q_heads = "
                    f"{config.num_q_heads} (grouped-query attention).")
        elif math.isclose(ratio, fixed_fp16) and math.isclose(ratio, 0.5):
            hint = (f"half the expected size: either the factor 2 (a key *and* a value per token, layer and KV head) "
                    f"is missing, or the cache was counted at 2 bytes a number instead of kv_precision's "
                    f"{BYTES_PER_ELEMENT[kv_precision]:g} ({kv_precision!r}).")
        elif math.isclose(ratio, fixed_fp16) and ratio != 1 and not math.isclose(
                ratio, BYTES_PER_ELEMENT[precision] / BYTES_PER_ELEMENT[kv_precision]):
            hint = (f"the cache was counted at 2 bytes a number (fp16), but kv_precision is {kv_precision!r}: "
                    f"{BYTES_PER_ELEMENT[kv_precision]:g} bytes a number. Look the cache's bytes per element up "
                    "with kv_precision, like the weights' with precision.")
        elif math.isclose(ratio, 0.5):
            hint = "the cache holds a key *and* a value per token, layer and KV head: multiply by 2."
        elif math.isclose(ratio, 1 / config.num_layers) and config.num_layers > 1:
            hint = "every layer has its own keys and values: multiply by num_layers."
        elif math.isclose(ratio, BYTES_PER_ELEMENT[precision] / BYTES_PER_ELEMENT[kv_precision]) and ratio != 1:
            hint = "the cache is stored at kv_precision, which may differ from the weights' precision."
        elif math.isclose(ratio, 1 / batch_size) and batch_size > 1:
            hint = "every sequence of the batch has its own cache: multiply by batch_size."
    fail(f"{call}['kv_cache']", expected=wanted, got=value, hint=hint)


def _expect_components(call: str, got: Any, expected: list[str]) -> None:
    if not isinstance(got, dict) or set(got) != set(expected):
        fail(f"{call} must return a dict with exactly the keys {sorted(expected)}", expected=sorted(expected),
             got=sorted(got) if isinstance(got, dict) else type(got).__name__,
             hint="return bytes per component, e.g. {'weights': ..., ...}; the notebook adds them up.")
    for component, value in got.items():
        if not _is_number(value):
            fail(f"{call}[{component!r}] must be a number of bytes", expected="int or float",
                 got=type(value).__name__)

