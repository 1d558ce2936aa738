"""SmolLM2 (the Llama architecture) written out in plain PyTorch, with weights read from the GGUF file.

One forward pass, top to bottom:

    input_ids [num_tokens]
      -> embedding lookup                          x [num_tokens, hidden_size]
      -> num_layers x DecoderLayer:
           x = x + Attention(RMSNorm(x))           grouped-query attention with RoPE
           x = x + MLP(RMSNorm(x))                 SwiGLU: down(silu(gate(x)) * up(x))
      -> RMSNorm -> x @ embedding^T               logits [num_tokens, vocab_size] (tied embeddings)

Tokens are *flattened*: there is no batch dimension and no padding. Each token carries its own
position (for RoPE), and an ``AttentionContext`` decides which earlier keys/values each query
sees (no cache, a contiguous ``KVCache``, or the engine's paged cache). So the same model code
runs a single prompt, a decode step, or a mixed batch of many sequences.

Two small speed choices that keep the code readable: the q/k/v projections are one matrix (one
matmul instead of three) and so are the MLP's gate and up projections; and RoPE's cos/sin tables
are computed once for every position when the model is built.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.attention import AttentionContext, UncachedAttention
from course_lib.exercises import exercise
from course_lib.gguf_file import ModelFileMissing, dequantize_by_name, gguf_path, read_tokenizer_metadata
from course_lib.kv_cache import KVCache
from course_lib.model_config import ModelConfig

if TYPE_CHECKING:
    from course_lib.tokenizer import BPETokenizer

__all__ = [
    "Attention",
    "DecoderLayer",
    "LlamaModel",
    "MLP",
    "ModelConfig",
    "ModelFileMissing",
    "RMSNorm",
    "RotaryEmbedding",
    "apply_rotary",
    "gguf_path",
    "greedy_generate",
    "linear",
    "load_model",
    "load_smollm2",
    "random_weights",
    "read_gguf_weights",
    "read_tokenizer_metadata",
    "undo_rotary_permutation",
    "weight_shapes",
]


# --------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------


def _linear_weight(weight):
    """A frozen Parameter for a tensor; a module that computes x @ W^T itself (a quantized weight,
    ``course_lib.quantization.QuantizedLinear``) is kept as it is."""
    return weight if isinstance(weight, nn.Module) else nn.Parameter(weight, requires_grad=False)


def linear(x: Tensor, weight) -> Tensor:
    """x @ weight^T: ``F.linear`` for a tensor weight, ``weight(x)`` for a quantized one."""
    return weight(x) if isinstance(weight, nn.Module) else F.linear(x, weight)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension, computed in fp32.

    x [..., hidden_size] -> [..., hidden_size] in x's dtype.
    """

    def __init__(self, weight: Tensor, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)  # [hidden_size]
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        normalized = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return self.weight * normalized.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoPE) tables for every position, computed once.

    Each pair of dimensions (j, j + head_dim/2) of a query or key is rotated by the angle
    ``position * theta^(-2j / head_dim)``: low j spin fast, high j slowly. Because the dot product
    of two rotated vectors depends only on the difference of their angles, attention scores
    depend on *relative* positions.
    """

    def __init__(self, head_dim: int, max_positions: int, theta: float) -> None:
        super().__init__()
        exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
        inverse_frequencies = 1.0 / (theta**exponents)  # [head_dim / 2]
        angles = torch.outer(torch.arange(max_positions).float(), inverse_frequencies)
        angles = torch.cat([angles, angles], dim=-1)  # [max_positions, head_dim]: both halves of a pair
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """positions [num_tokens] -> cos, sin, each [num_tokens, 1, head_dim] (broadcast over heads)."""
        return self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (x[j], x[j + half]) by the angles in cos/sin.

    x [num_tokens, num_heads, head_dim], cos/sin [num_tokens, 1, head_dim] -> like x.
    """
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    rotated_by_90_degrees = torch.cat([-second, first], dim=-1)
    return x * cos + rotated_by_90_degrees * sin


class Attention(nn.Module):
    """Grouped-query self-attention: project to q/k/v, apply RoPE, let the context attend, project out.

    ``qkv_proj`` [(num_q_heads + 2 * num_kv_heads) * head_dim, hidden_size] stacks the query, key and
    value projections so one matmul computes all three.
    """

    def __init__(self, config: ModelConfig, qkv_proj: Tensor, o_proj: Tensor) -> None:
        super().__init__()
        self.num_q_heads = config.num_q_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        self.qkv_proj = _linear_weight(qkv_proj)
        self.o_proj = _linear_weight(o_proj)  # [hidden_size, num_q_heads * head_dim]

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, attention: AttentionContext, layer_index: int
    ) -> Tensor:
        """x [num_tokens, hidden_size], cos/sin [num_tokens, 1, head_dim] -> [num_tokens, hidden_size]."""
        num_tokens = x.shape[0]
        qkv = linear(x, self.qkv_proj).view(num_tokens, -1, self.head_dim)  # [tokens, q+k+v heads, head_dim]
        # Queries and keys get the same rotation, so rotate their heads together in one call.
        num_rotated = self.num_q_heads + self.num_kv_heads
        q_and_k = apply_rotary(qkv[:, :num_rotated], cos, sin)
        q, k = q_and_k.split([self.num_q_heads, self.num_kv_heads], dim=1)
        v = qkv[:, num_rotated:]
        output = attention.attend(layer_index, q, k, v)  # [tokens, num_q_heads, head_dim]
        return linear(output.reshape(num_tokens, self.num_q_heads * self.head_dim), self.o_proj)


class MLP(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x)).

    ``gate_up_proj`` [2 * intermediate_size, hidden_size] stacks gate (first half) and up (second).
    """

    def __init__(self, gate_up_proj: Tensor, down_proj: Tensor) -> None:
        super().__init__()
        self.gate_up_proj = _linear_weight(gate_up_proj)
        self.down_proj = _linear_weight(down_proj)  # [hidden_size, intermediate_size]

    def forward(self, x: Tensor) -> Tensor:
        """x [num_tokens, hidden_size] -> [num_tokens, hidden_size]."""
        gate, up = linear(x, self.gate_up_proj).chunk(2, dim=-1)
        return linear(F.silu(gate) * up, self.down_proj)


class DecoderLayer(nn.Module):
    """One transformer block with pre-normalization and residual connections."""

    def __init__(self, config: ModelConfig, weights: Mapping[str, Tensor], prefix: str) -> None:
        super().__init__()
        self.input_norm = RMSNorm(weights[prefix + "input_norm"], config.rms_norm_eps)
        self.attention = Attention(config, weights[prefix + "qkv_proj"], weights[prefix + "o_proj"])
        self.post_attention_norm = RMSNorm(weights[prefix + "post_attention_norm"], config.rms_norm_eps)
        self.mlp = MLP(weights[prefix + "gate_up_proj"], weights[prefix + "down_proj"])

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, attention: AttentionContext, layer_index: int
    ) -> Tensor:
        """x [num_tokens, hidden_size] -> [num_tokens, hidden_size]."""
        x = x + self.attention(self.input_norm(x), cos, sin, attention, layer_index)
        return x + self.mlp(self.post_attention_norm(x))


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


def weight_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The names and torch shapes of every weight ``LlamaModel`` needs (see ``read_gguf_weights``)."""
    q_size = config.num_q_heads * config.head_dim
    kv_size = config.num_kv_heads * config.head_dim
    shapes = {
        "embed_tokens": (config.vocab_size, config.hidden_size),
        "norm": (config.hidden_size,),
    }
    for layer in range(config.num_layers):
        prefix = f"layers.{layer}."
        shapes[prefix + "input_norm"] = (config.hidden_size,)
        shapes[prefix + "qkv_proj"] = (q_size + 2 * kv_size, config.hidden_size)
        shapes[prefix + "o_proj"] = (config.hidden_size, q_size)
        shapes[prefix + "post_attention_norm"] = (config.hidden_size,)
        shapes[prefix + "gate_up_proj"] = (2 * config.intermediate_size, config.hidden_size)
        shapes[prefix + "down_proj"] = (config.hidden_size, config.intermediate_size)
    return shapes


class LlamaModel(nn.Module):
    """A Llama decoder over flattened tokens. Build it with ``load_model()`` / ``load_smollm2()``.

    ``weights`` maps the names of ``weight_shapes(config)`` to tensors of those shapes; the model
    keeps them as they are (no copy), so pass tensors already in the dtype and device you want.
    A linear weight may also be a ``course_lib.quantization.QuantizedLinear`` (see ``quantize_model``).
    """

    def __init__(self, config: ModelConfig, weights: Mapping[str, Tensor]) -> None:
        super().__init__()
        expected = weight_shapes(config)
        missing = sorted(set(expected) - set(weights))
        if missing:
            raise ValueError(f"weights is missing {len(missing)} tensors, e.g. {missing[:3]}")
        for name, shape in expected.items():
            if tuple(weights[name].shape) != shape:
                raise ValueError(f"weights[{name!r}] has shape {tuple(weights[name].shape)}, expected {shape}")
        self.config = config
        # The same matrix embeds tokens and (transposed) turns final hidden states into logits.
        self.embed_tokens = nn.Parameter(weights["embed_tokens"], requires_grad=False)  # [vocab, hidden]
        self.layers = nn.ModuleList(
            DecoderLayer(config, weights, f"layers.{layer}.") for layer in range(config.num_layers)
        )
        self.norm = RMSNorm(weights["norm"], config.rms_norm_eps)
        self.rotary = RotaryEmbedding(config.head_dim, config.max_position_embeddings, config.rope_theta)
        self.rotary.to(device=self.embed_tokens.device, dtype=self.embed_tokens.dtype)

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.dtype

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.device

    def forward(
        self,
        input_ids: Tensor,
        positions: Tensor | None = None,
        attention: AttentionContext | None = None,
        logits_indices: Tensor | None = None,
    ) -> Tensor:
        """Logits for a flat run of tokens.

        input_ids [num_tokens] int64; positions [num_tokens] int64 (default 0..num_tokens-1);
        attention: where keys/values live (None: the tokens are one sequence attending causally to
        themselves, no cache); logits_indices [num_selected] int64: which rows need logits (None: all).
        Returns fp32 logits [num_tokens or num_selected, vocab_size].
        """
        self._check_forward_inputs(input_ids, positions, logits_indices)
        num_tokens = input_ids.shape[0]
        if positions is None:
            positions = torch.arange(num_tokens, device=input_ids.device)
        if attention is None:
            attention = UncachedAttention()

        cos, sin = self.rotary(positions)
        x = F.embedding(input_ids, self.embed_tokens)  # [num_tokens, hidden_size]
        for layer_index, layer in enumerate(self.layers):
            x = layer(x, cos, sin, attention, layer_index)
        if logits_indices is not None:
            # The lm_head is the largest matmul per token (hidden x 49152); skip rows nobody samples from.
            x = x[logits_indices]
        return F.linear(self.norm(x), self.embed_tokens).float()

    def _check_forward_inputs(
        self, input_ids: Tensor, positions: Tensor | None, logits_indices: Tensor | None
    ) -> None:
        if not isinstance(input_ids, Tensor) or input_ids.dim() != 1 or input_ids.dtype.is_floating_point:
            raise TypeError("input_ids must be a 1-D integer tensor [num_tokens]")
        num_tokens = input_ids.shape[0]
        if num_tokens == 0:
            raise ValueError("input_ids is empty; pass at least one token")
        low, high = int(input_ids.min()), int(input_ids.max())
        if low < 0 or high >= self.config.vocab_size:
            raise ValueError(
                f"input_ids must lie in [0, {self.config.vocab_size}), got values from {low} to {high}"
            )
        if positions is not None:
            if not isinstance(positions, Tensor) or positions.shape != input_ids.shape:
                raise ValueError(
                    f"positions must be a tensor of shape {tuple(input_ids.shape)} like input_ids, "
                    f"got {getattr(positions, 'shape', type(positions).__name__)}"
                )
            if positions.dtype.is_floating_point:
                raise TypeError("positions must be an integer tensor")
            low, high = int(positions.min()), int(positions.max())
            if low < 0 or high >= self.config.max_position_embeddings:
                raise ValueError(
                    f"positions must lie in [0, {self.config.max_position_embeddings}) "
                    f"(max_position_embeddings), got values from {low} to {high}"
                )
        elif num_tokens > self.config.max_position_embeddings:
            raise ValueError(
                f"{num_tokens} tokens exceed max_position_embeddings ({self.config.max_position_embeddings})"
            )
        if logits_indices is not None:
            if not isinstance(logits_indices, Tensor) or logits_indices.dim() != 1:
                raise TypeError("logits_indices must be a 1-D integer tensor [num_selected]")
            if logits_indices.numel() and (
                int(logits_indices.min()) < -num_tokens or int(logits_indices.max()) >= num_tokens
            ):
                raise ValueError(f"logits_indices must lie in [-{num_tokens}, {num_tokens})")


# --------------------------------------------------------------------------------------------
# Reading the weights from the GGUF file
# --------------------------------------------------------------------------------------------


def undo_rotary_permutation(weight: Tensor, num_heads: int) -> Tensor:
    """Reorder a GGUF q/k projection's rows back to the rotate-half layout of transformers.

    weight [num_heads * head_dim, hidden_size] -> same shape.

    Within each head, transformers pairs dimension j with j + head_dim/2 for the rotation, while
    llama.cpp rotates neighbours (2j, 2j+1). llama.cpp's converter therefore reorders each head's
    rows: row j of the first half goes to 2j, row j of the second half to 2j + 1. Reading the
    GGUF rows as [head, j, which_half] and swapping the last two axes restores [head, which_half, j].
    """
    rows, hidden_size = weight.shape
    if rows % (2 * num_heads) != 0:
        raise ValueError(f"weight has {rows} rows, not a multiple of 2 * num_heads ({2 * num_heads})")
    half = rows // num_heads // 2
    return weight.reshape(num_heads, half, 2, hidden_size).transpose(1, 2).reshape(rows, hidden_size)


def _dequantize(name: str, path: str | None = None) -> Tensor:
    """One GGUF tensor as fp32 in torch's layout, [rows, columns] (GGUF lists dims innermost first).

    By name through the disk cache: once an earlier process has dequantized the model, neither the
    file's header is parsed nor a tensor dequantized again."""
    array = dequantize_by_name(name, path)
    if not array.flags.writeable:
        # fp32 tensors read from the file for the first time are read-only views of it; torch needs its own copy.
        array = array.copy()
    return torch.from_numpy(array)


@lru_cache(maxsize=2)
def read_gguf_weights(path: str | None = None) -> Mapping[str, Tensor]:
    """Every weight of the GGUF model, dequantized to fp32, in ``LlamaModel``'s names and layout.

    Cached per process (dequantizing takes a few seconds): every fp32 CPU model loaded from the
    same file shares these tensors. The model never writes its weights; do not write them either.
    """
    config = ModelConfig.from_gguf(path)
    weights = {
        "embed_tokens": _dequantize("token_embd.weight", path),
        "norm": _dequantize("output_norm.weight", path),
    }
    for layer in range(config.num_layers):
        gguf_prefix, prefix = f"blk.{layer}.", f"layers.{layer}."
        q = undo_rotary_permutation(_dequantize(gguf_prefix + "attn_q.weight", path), config.num_q_heads)
        k = undo_rotary_permutation(_dequantize(gguf_prefix + "attn_k.weight", path), config.num_kv_heads)
        v = _dequantize(gguf_prefix + "attn_v.weight", path)
        gate = _dequantize(gguf_prefix + "ffn_gate.weight", path)
        up = _dequantize(gguf_prefix + "ffn_up.weight", path)
        weights[prefix + "input_norm"] = _dequantize(gguf_prefix + "attn_norm.weight", path)
        weights[prefix + "qkv_proj"] = torch.cat([q, k, v])
        weights[prefix + "o_proj"] = _dequantize(gguf_prefix + "attn_output.weight", path)
        weights[prefix + "post_attention_norm"] = _dequantize(gguf_prefix + "ffn_norm.weight", path)
        weights[prefix + "gate_up_proj"] = torch.cat([gate, up])
        weights[prefix + "down_proj"] = _dequantize(gguf_prefix + "ffn_down.weight", path)
    return MappingProxyType(weights)  # read-only: the cache is shared by every caller


def random_weights(config: ModelConfig, *, seed: int = 0) -> dict[str, Tensor]:
    """fp32 weights of the right shapes, drawn at random: a tiny config gives a model for fast tests."""
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in weight_shapes(config).items():
        if len(shape) == 1:  # norm weights: near 1 so activations keep their scale
            weights[name] = 1.0 + 0.1 * torch.randn(shape, generator=generator)
        else:
            weights[name] = torch.randn(shape, generator=generator) / math.sqrt(shape[1])
    return weights


def load_model(dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu", path=None) -> LlamaModel:
    """Our ``LlamaModel`` with the SmolLM2 weights (or those of the GGUF file at ``path``), in eval mode."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    config = ModelConfig.from_gguf(path)
    weights = {
        name: tensor.to(device=device, dtype=dtype)
        for name, tensor in read_gguf_weights(None if path is None else str(path)).items()
    }
    return LlamaModel(config, weights).eval()


def load_smollm2(dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> tuple[LlamaModel, BPETokenizer]:
    """(model, tokenizer) for SmolLM2-135M-Instruct, both read from the installed GGUF file.

    For int8 or int4 weights, quantize the model afterwards:
    ``course_lib.quantization.quantize_model(model, "int8")`` (Lab 0.4).
    """
    from course_lib.tokenizer import BPETokenizer  # imported here: the tokenizer module is optional for the model

    return load_model(dtype=dtype, device=device), BPETokenizer.from_gguf()


# --------------------------------------------------------------------------------------------
# A minimal generation loop (for labs and tests; the engine is the real thing)
# --------------------------------------------------------------------------------------------


@exercise("lab02-prefill-vs-decode", "03_decode", "generate")
def greedy_generate(
    model: LlamaModel, prompt_ids: Sequence[int], max_new_tokens: int, *, use_cache: bool = True
) -> list[int]:
    """Greedy decoding of one prompt: the generated ids (the eos token included if it came).

    With ``use_cache`` the prompt runs once through a ``KVCache`` and each step feeds one token;
    without it every step recomputes the whole sequence (the baseline a cache is measured against).
    """
    prompt_ids = [int(token) for token in prompt_ids]
    if not prompt_ids:
        raise ValueError("prompt_ids is empty; pass at least one token")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    total_len = len(prompt_ids) + max_new_tokens
    if total_len - 1 > model.config.max_position_embeddings:
        raise ValueError(
            f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
            f"max_position_embeddings ({model.config.max_position_embeddings})"
        )
    device = model.device
    last_row = torch.tensor([-1], device=device)
    generated: list[int] = []
    with torch.inference_mode():
        if use_cache:
            cache = KVCache(model.config, max_seq_len=total_len - 1, dtype=model.dtype, device=device)
            step_ids = prompt_ids
            while True:
                input_ids = torch.tensor(step_ids, device=device)
                logits = model(input_ids, cache.next_positions(len(step_ids)), cache, logits_indices=last_row)
                generated.append(int(logits.argmax(dim=-1)))
                if generated[-1] == model.config.eos_token_id or len(generated) == max_new_tokens:
                    return generated
                step_ids = generated[-1:]
        else:
            while True:
                input_ids = torch.tensor(prompt_ids + generated, device=device)
                logits = model(input_ids, logits_indices=last_row)
                generated.append(int(logits.argmax(dim=-1)))
                if generated[-1] == model.config.eos_token_id or len(generated) == max_new_tokens:
                    return generated
