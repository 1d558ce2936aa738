"""The models a server can load by name: the real SmolLM2, or a tiny random one for fast tests.

``tiny`` is a 2-layer Llama with random weights and SmolLM2's own tokenizer (so chat templates and
text work as with the real model): its answers are gibberish, but every code path of the server
runs and a forward pass takes about a millisecond.
"""

from __future__ import annotations

__all__ = ["MODEL_NAMES", "load_named_model", "tiny_random_model"]

MODEL_NAMES = {"smollm2": "SmolLM2-135M-Instruct", "tiny": "tiny-random-llama"}


def tiny_random_model(tokenizer=None, *, seed: int = 0, max_position_embeddings: int = 2048):
    """(model, tokenizer): a 2-layer random Llama over SmolLM2's vocabulary, and SmolLM2's tokenizer."""
    from course_lib.model import LlamaModel, ModelConfig, random_weights
    from course_lib.tokenizer import BPETokenizer

    tokenizer = tokenizer or BPETokenizer.from_gguf()
    config = ModelConfig(num_layers=2, hidden_size=64, num_q_heads=4, num_kv_heads=2, head_dim=16,
                         vocab_size=tokenizer.vocab_size, intermediate_size=128,
                         max_position_embeddings=max_position_embeddings, rope_theta=10000.0, rms_norm_eps=1e-5,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    return LlamaModel(config, random_weights(config, seed=seed)).eval(), tokenizer


def load_named_model(name: str, quantize: str | None = None):
    """(model, tokenizer, served model name) for ``name`` in MODEL_NAMES.

    quantize: None, "int8" or "int4": weight-only quantized linear layers
    (``course_lib.quantization.quantize_model``, Lab 0.4).
    """
    if name not in MODEL_NAMES:
        raise ValueError(f"model must be one of {sorted(MODEL_NAMES)}, got {name!r}")
    if quantize not in (None, "int8", "int4"):
        raise ValueError(f"quantize must be None, 'int8' or 'int4', got {quantize!r}")
    if name == "tiny":
        model, tokenizer = tiny_random_model()
    else:
        from course_lib.model import load_smollm2

        model, tokenizer = load_smollm2()
    if quantize is not None:
        from course_lib.quantization import quantize_model

        model = quantize_model(model, quantize)
    return model, tokenizer, MODEL_NAMES[name]
