"""How much memory a Llama-style model needs: to train it, and to serve it.

Training keeps four things per run: the weights, one gradient per weight, the optimizer's state
(Adam: two running moments per weight, plus an fp32 master copy of the weights when the rest is
kept in 16 bits) and the activations the backward pass needs. Inference keeps the weights, at
whatever precision they were quantized to, and the KV cache of the tokens being served.

The rules, stated once so the notebook, the checks and the plots agree:

- **Parameters** (``tensor_shapes``, ``count_parameters``): per layer the q/k/v/o projections
  (k and v have ``num_kv_heads`` heads: grouped-query attention), the gate/up/down MLP and two
  RMSNorm weights; plus the embedding table, the final norm and an ``lm_head`` that is a separate
  tensor only when the embeddings are not tied. No biases (Llama has none).
- **Training** (``training_memory``): "fp32" keeps weights and gradients in fp32 and Adam's two
  moments in fp32: 4 + 4 + 8 = 16 bytes per parameter. "fp16"/"bf16" is mixed precision: 16-bit
  weights and gradients, and the optimizer holds an fp32 master copy and two fp32 moments:
  2 + 2 + 12 = 16 bytes per parameter (the accounting of the ZeRO paper). Activations on top.
- **Activations** (``activation_bytes``): the tensors a plain (no recomputation, no
  FlashAttention) backward pass keeps, per token and layer:
  ``4 * hidden + 2 * (num_q_heads + num_kv_heads) * head_dim + num_q_heads * seq_len + 3 * intermediate``
  numbers, plus ``2 * hidden + vocab`` per token for the final norm and the logits; see the function.
- **Inference** (``inference_memory``): weights at the chosen precision (int8 = 1 byte, int4 = half
  a byte per weight; real formats add a small scale per block, ignored here) and the KV cache
  (``course_lib.kv_cache``'s formula) at its own precision. Temporary activations are ignored.

Sizes are in bytes; ``GB`` (10**9) and ``GiB`` (2**30) convert. GPU memory is sold in round "GB"
labels (``GPU_MEMORY_GB``), which ``fits_on`` compares against 10**9-byte gigabytes.
"""

from __future__ import annotations

import math

from course_lib.exercises import exercise
from course_lib.model import ModelConfig

__all__ = [
    "BYTES_PER_ELEMENT",
    "GB",
    "GiB",
    "GPU_MEMORY_GB",
    "LLAMA2_7B",
    "LLAMA2_13B",
    "TRAINING_PRECISIONS",
    "activation_bytes",
    "activation_numbers_per_token",
    "bytes_per_element",
    "count_parameters",
    "embedding_bytes",
    "fits_on",
    "inference_memory",
    "kv_cache_memory",
    "tensor_shapes",
    "training_memory",
]

GB = 10**9
GiB = 2**30


# int8/int4 have no torch dtype, so sizes come from this table rather than torch.element_size().
BYTES_PER_ELEMENT = {"fp64": 8.0, "fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}

# Training precisions and the bytes each keeps per parameter (weights, gradients, optimizer state).
TRAINING_PRECISIONS = {
    "fp32": {"weights": 4, "gradients": 4, "optimizer": 8},   # Adam's two fp32 moments
    "fp16": {"weights": 2, "gradients": 2, "optimizer": 12},  # fp32 master weights + two fp32 moments
    "bf16": {"weights": 2, "gradients": 2, "optimizer": 12},
}

# Memory printed on the box, in GB (10**9 bytes). The usable amount is a little different: the
# label is rounded, and the CUDA context and the framework take some before any tensor exists.
GPU_MEMORY_GB = {
    "T4": 16,
    "L4": 24,
    "A100 40GB": 40,
    "A100 80GB": 80,
    "H100 80GB": 80,
    "H200": 141,
}

# The published shapes of Llama-2 (untied embeddings: the lm_head is its own [vocab, hidden] tensor).
LLAMA2_7B = ModelConfig(
    num_layers=32, hidden_size=4096, num_q_heads=32, num_kv_heads=32, head_dim=128, vocab_size=32000,
    intermediate_size=11008, max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5,
    bos_token_id=1, eos_token_id=2,
)
LLAMA2_13B = ModelConfig(
    num_layers=40, hidden_size=5120, num_q_heads=40, num_kv_heads=40, head_dim=128, vocab_size=32000,
    intermediate_size=13824, max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5,
    bos_token_id=1, eos_token_id=2,
)


@exercise("lab01-text-to-tensors", "01_tokenization", "bytes_per_element")
def bytes_per_element(precision: str) -> float:
    """Bytes one stored number takes: bits / 8 ("fp32" 4, "fp16"/"bf16" 2, "fp8"/"int8" 1, "int4" 0.5).

    Raises ValueError for a precision not in BYTES_PER_ELEMENT, naming the allowed ones.
    """
    if precision not in BYTES_PER_ELEMENT:
        raise ValueError(f"precision must be one of {sorted(BYTES_PER_ELEMENT)}, got {precision!r}")
    return BYTES_PER_ELEMENT[precision]


@exercise("lab01-text-to-tensors", "01_tokenization", "embedding_bytes")
def embedding_bytes(vocab_size: int, d_model: int, bytes_per_element: float) -> float:
    """Bytes of a ``[vocab_size, d_model]`` embedding table: vocab_size * d_model * bytes_per_element."""
    return vocab_size * d_model * bytes_per_element


@exercise("lab01-text-to-tensors", "02_training_vs_inference", "tensor_shapes")
def tensor_shapes(config: ModelConfig, tied_embeddings: bool) -> dict[str, tuple[int, ...]]:
    """Every weight tensor of a Llama model and its torch shape ``[out_features, in_features]``.

    Names: ``embed_tokens`` [vocab, hidden]; per layer i ``layers.i.input_norm`` [hidden],
    ``layers.i.q_proj`` [num_q_heads * head_dim, hidden], ``layers.i.k_proj`` and ``layers.i.v_proj``
    [num_kv_heads * head_dim, hidden], ``layers.i.o_proj`` [hidden, num_q_heads * head_dim],
    ``layers.i.post_attention_norm`` [hidden], ``layers.i.gate_proj`` and ``layers.i.up_proj``
    [intermediate, hidden], ``layers.i.down_proj`` [hidden, intermediate]; ``norm`` [hidden]; and
    ``lm_head`` [vocab, hidden] only when ``tied_embeddings`` is False (tied: the embedding table is
    reused as the output layer and stored once).
    """
    _check_config(config)
    if not isinstance(tied_embeddings, bool):
        raise TypeError(f"tied_embeddings must be a bool, got {tied_embeddings!r}")
    hidden = config.hidden_size
    q_size = config.num_q_heads * config.head_dim
    kv_size = config.num_kv_heads * config.head_dim
    shapes = {"embed_tokens": (config.vocab_size, hidden)}
    for layer in range(config.num_layers):
        prefix = f"layers.{layer}."
        shapes[prefix + "input_norm"] = (hidden,)
        shapes[prefix + "q_proj"] = (q_size, hidden)
        shapes[prefix + "k_proj"] = (kv_size, hidden)
        shapes[prefix + "v_proj"] = (kv_size, hidden)
        shapes[prefix + "o_proj"] = (hidden, q_size)
        shapes[prefix + "post_attention_norm"] = (hidden,)
        shapes[prefix + "gate_proj"] = (config.intermediate_size, hidden)
        shapes[prefix + "up_proj"] = (config.intermediate_size, hidden)
        shapes[prefix + "down_proj"] = (hidden, config.intermediate_size)
    shapes["norm"] = (hidden,)
    if not tied_embeddings:
        shapes["lm_head"] = (config.vocab_size, hidden)
    return shapes


@exercise("lab01-text-to-tensors", "02_training_vs_inference", "count_parameters")
def count_parameters(config: ModelConfig, tied_embeddings: bool) -> int:
    """Number of weights (stored numbers) of the model: the sum of ``tensor_shapes``' sizes.

    SmolLM2-135M (tied): 134,515,008; Llama-2-7B (untied): 6,738,415,616; Llama-2-13B: 13,015,864,320.
    """
    return sum(math.prod(shape) for shape in tensor_shapes(config, tied_embeddings).values())


@exercise("lab01-text-to-tensors", "02_training_vs_inference", "activation_bytes")
def activation_numbers_per_token(config: ModelConfig, seq_len: int) -> int:
    """Numbers the backward pass keeps for one token of a ``seq_len``-token sequence (all layers).

    Per layer: the attention block's input and the normed input (2 * hidden), q, k and v
    ((num_q_heads + 2 * num_kv_heads) * head_dim), one row of attention probabilities per query
    head (num_q_heads * seq_len: a plain implementation stores the [seq_len, seq_len] matrix), the
    attention output fed to o_proj (num_q_heads * head_dim); the MLP block's input and normed input
    (2 * hidden), gate and up (2 * intermediate) and their product fed to down_proj (intermediate).
    After the layers: the final norm's input and output (2 * hidden) and the logits (vocab).
    """
    _check_config(config)
    _check_int_at_least("seq_len", seq_len, 1)
    per_layer = (
        4 * config.hidden_size
        + 2 * (config.num_q_heads + config.num_kv_heads) * config.head_dim
        + config.num_q_heads * seq_len
        + 3 * config.intermediate_size
    )
    return config.num_layers * per_layer + 2 * config.hidden_size + config.vocab_size


@exercise("lab01-text-to-tensors", "02_training_vs_inference", "activation_bytes")
def activation_bytes(config: ModelConfig, batch_size: int, seq_len: int, bytes_per_number: float) -> float:
    """Bytes of activations kept for the backward pass of a batch: [batch_size, seq_len] tokens.

    batch_size * seq_len * ``activation_numbers_per_token(config, seq_len)`` * bytes_per_number.
    Quadratic in seq_len because of the attention probabilities.
    """
    _check_int_at_least("batch_size", batch_size, 1)
    _check_positive("bytes_per_number", bytes_per_number)
    return batch_size * seq_len * activation_numbers_per_token(config, seq_len) * bytes_per_number


@exercise("lab01-text-to-tensors", "02_training_vs_inference", "training_memory")
def training_memory(num_parameters: int, precision: str, activations: float) -> dict[str, float]:
    """Bytes training keeps, by component: {"weights", "gradients", "optimizer", "activations"}.

    ``precision`` in TRAINING_PRECISIONS: "fp32" (4 + 4 + 8 bytes per parameter) or mixed
    precision "fp16"/"bf16" (2 + 2 + 12: the optimizer holds fp32 master weights and Adam's two
    fp32 moments). ``activations`` (bytes) is passed through: it depends on batch and length.
    """
    if precision not in TRAINING_PRECISIONS:
        raise ValueError(
            f"precision must be one of {sorted(TRAINING_PRECISIONS)} for training (int8/int4 are "
            f"inference formats), got {precision!r}"
        )
    _check_int_at_least("num_parameters", num_parameters, 0)
    _check_positive("activations", activations, allow_zero=True)
    per_parameter = TRAINING_PRECISIONS[precision]
    return {
        "weights": num_parameters * per_parameter["weights"],
        "gradients": num_parameters * per_parameter["gradients"],
        "optimizer": num_parameters * per_parameter["optimizer"],
        "activations": activations,
    }


@exercise("lab01-text-to-tensors", "02_training_vs_inference", "inference_memory")
def kv_cache_memory(config: ModelConfig, batch_size: int, seq_len: int, precision: str = "fp16") -> float:
    """Bytes of keys and values for ``batch_size`` sequences of ``seq_len`` tokens.

    2 (K and V) x num_layers x num_kv_heads x head_dim x bytes_per_element(precision) per token;
    the same formula as ``course_lib.kv_cache.kv_cache_bytes``, with precisions that have no torch dtype.
    """
    _check_config(config)
    _check_int_at_least("batch_size", batch_size, 0)
    _check_int_at_least("seq_len", seq_len, 0)
    per_token = 2 * config.num_layers * config.num_kv_heads * config.head_dim * bytes_per_element(precision)
    return per_token * seq_len * batch_size


@exercise("lab01-text-to-tensors", "02_training_vs_inference", "inference_memory")
def inference_memory(
    num_parameters: int,
    precision: str,
    config: ModelConfig,
    batch_size: int,
    seq_len: int,
    kv_precision: str = "fp16",
) -> dict[str, float]:
    """Bytes serving keeps: {"weights", "kv_cache"}.

    Weights: num_parameters x bytes_per_element(precision), any of BYTES_PER_ELEMENT. KV cache:
    ``kv_cache_memory(config, batch_size, seq_len, kv_precision)`` for ``batch_size`` sequences of
    ``seq_len`` tokens (prompt and generated tokens together).
    """
    _check_int_at_least("num_parameters", num_parameters, 0)
    return {
        "weights": num_parameters * bytes_per_element(precision),
        "kv_cache": kv_cache_memory(config, batch_size, seq_len, kv_precision),
    }


def fits_on(total_bytes: float, gpu_memory_gb: float) -> bool:
    """Whether ``total_bytes`` fit in a GPU sold as ``gpu_memory_gb`` GB (10**9 bytes each)."""
    _check_positive("total_bytes", total_bytes, allow_zero=True)
    _check_positive("gpu_memory_gb", gpu_memory_gb)
    return total_bytes <= gpu_memory_gb * GB


def _check_config(config: object) -> None:
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config must be a course_lib.model.ModelConfig, got {type(config).__name__}")


def _check_int_at_least(name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def _check_positive(name: str, value: object, *, allow_zero: bool = False) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
