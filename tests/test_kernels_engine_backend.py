"""LLMEngine with a custom attention backend (how Lab 0.3's kernels serve the model): an object with
decode/store, a bare decode function, and clear errors for anything else. Tiny float64 model, torch
implementations standing in for a student's kernels."""

from __future__ import annotations

import pytest
import torch

from course_lib.checks import one_thread
from course_lib.engine import LLMEngine
from course_lib.model import LlamaModel, random_weights
from course_lib.model_runner import attention_functions, check_attention_backend, paged_decode_attention_torch
from course_lib.sampling import SamplingParams
from tests.tiny_models import ByteTokenizer, tiny_config

TINY = tiny_config(vocab_size=300, max_position_embeddings=128, bos_token_id=None, eos_token_id=None)
GREEDY = SamplingParams(temperature=0.0, max_tokens=6)
PROMPTS = [[5, 17, 42, 9, 100, 7, 3], [250, 1, 1, 1, 2], list(range(30, 60))]


@pytest.fixture(scope="module")
def tiny_model():
    weights = {name: tensor.double() for name, tensor in random_weights(TINY, seed=1).items()}
    return LlamaModel(TINY, weights).eval()


class RecordingBackend:
    """decode and store in torch, counting the calls (a stand-in for a student's kernels)."""

    def __init__(self):
        self.decodes, self.stores = 0, 0

    def decode(self, q, k_cache, v_cache, block_tables, seq_lens, scale):
        self.decodes += 1
        return paged_decode_attention_torch(q, k_cache, v_cache, block_tables, seq_lens, scale)

    def store(self, k, v, k_cache, v_cache, slot_mapping):
        self.stores += 1
        block_size = k_cache.shape[1]
        k_cache[slot_mapping // block_size, slot_mapping % block_size] = k   # the engine never passes slot -1
        v_cache[slot_mapping // block_size, slot_mapping % block_size] = v


def _tokens(model, backend):
    engine = LLMEngine(model, ByteTokenizer(), attention_backend=backend, block_size=4, num_blocks=64)
    with one_thread():
        return [output.token_ids for output in engine.generate(PROMPTS, GREEDY)]


def test_object_backend_matches_the_torch_backend_and_is_called(tiny_model):
    backend = RecordingBackend()
    assert _tokens(tiny_model, backend) == _tokens(tiny_model, "torch")
    assert backend.decodes > 0 and backend.stores > 0


def test_decode_function_backend_uses_the_engines_store(tiny_model):
    calls = []

    def decode(*args):
        calls.append(args[0].shape[0])
        return paged_decode_attention_torch(*args)

    assert _tokens(tiny_model, decode) == _tokens(tiny_model, "torch")
    assert max(calls) == len(PROMPTS), "decode rows of the whole batch arrive in one call"


def test_a_wrong_decode_changes_the_tokens(tiny_model):
    class Shuffled(RecordingBackend):
        def decode(self, q, *rest):
            return super().decode(q.flip(1).contiguous(), *rest)   # the heads in the wrong order

    assert _tokens(tiny_model, Shuffled()) != _tokens(tiny_model, "torch")


@pytest.mark.parametrize("backend, error, words", [
    ("cuda", ValueError, "must be one of"),
    (42, TypeError, "decode function"),
    (type("NoCallableDecode", (), {"decode": 3})(), TypeError, "decode must be callable"),
    (type("BadStore", (), {"decode": lambda self, *a: None, "store": "x"})(), TypeError, "store must be callable"),
])
def test_bad_backends_are_rejected_with_a_clear_error(tiny_model, backend, error, words):
    with pytest.raises(error, match=words):
        LLMEngine(tiny_model, ByteTokenizer(), attention_backend=backend, block_size=4, num_blocks=8)


def test_triton_backend_is_refused_while_lab_03_is_locked(monkeypatch):
    import course_lib.exercises as exercises

    monkeypatch.setattr(exercises, "locked_labs", lambda: frozenset({"lab03-kernels"}))
    with pytest.raises(ValueError, match="your exercises in Lab 0.3"):
        check_attention_backend("triton")
    check_attention_backend("torch")


def test_attention_functions_of_an_object_backend():
    backend = RecordingBackend()
    prefill, decode, store = attention_functions(backend)
    assert decode == backend.decode and store == backend.store
    assert prefill.__name__ == "sdpa_attention"
