"""Our SmolLM2 forward against transformers loading the same GGUF file.

Tolerance: fp32 logits within 1e-4 absolute (the issue's bar; logits are O(10)). Both sides
run the same fp32 operations, so in practice they agree to within a few ulps or exactly.
Token ids come from the transformers tokenizer (``hf_tokenizer``) so these tests check the model
alone, independent of our tokenizer.
"""

from __future__ import annotations

import pytest
import torch

from course_lib.attention import UncachedAttention, flash_attention, naive_attention
from course_lib.model import (
    LlamaModel,
    ModelConfig,
    greedy_generate,
    load_model,
    random_weights,
    undo_rotary_permutation,
)
from tests.tiny_models import tiny_config

LOGITS_ATOL = 1e-4  # fp32, absolute

LONG_TEXT = (
    "The printing press changed Europe in ways its inventor could not have foreseen. Before Gutenberg, "
    "a book was copied by hand, and a single Bible could occupy a scribe for more than a year. Movable "
    "metal type, an oil-based ink and a screw press adapted from wine making brought the cost of a page "
    "down by orders of magnitude. Within fifty years, presses were running in more than two hundred "
    "cities, and millions of volumes had been printed. Cheap pamphlets carried the arguments of the "
    "Reformation faster than any authority could answer them; scientists could publish exact copies of "
    "their tables and diagrams, so that errors were corrected instead of multiplied; and vernacular "
    "languages gained standard spellings because printers needed them. Historians still argue about "
    "how much of the scientific revolution depended on print, but few doubt that the steady, reliable "
    "reproduction of texts made cumulative knowledge possible on a new scale. Libraries grew, literacy "
    "spread from clerics to merchants and artisans, and the very idea of an author who owns a text "
    "took shape in the disputes between printers over who could sell which book. Censors, too, had to "
    "learn new methods, since suppressing a printed work meant finding every copy rather than one "
    "manuscript. Some of the same questions return with every new medium: who may publish, who pays, "
    "and how a reader can tell a careful work from a careless one. Printers themselves became a new kind "
    "of entrepreneur, borrowing money for paper and type, guessing which titles would sell at the great "
    "book fairs, and going bankrupt when they guessed wrong."
)

PROMPTS = {
    "short": "Hello",
    "long": LONG_TEXT,
    "chat": None,  # built with the chat template in hf_prompt_ids
    "code": "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + ",
    "non_english": "Paris est la capitale de la France. 東京は日本の首都です。Москва — столица России.",
    "numbers_and_symbols": "3.14159 × 2 = 6.28318; {\"key\": [1, 2, 3]} <tag attr='x'/> #hashtag 🙂",
}

CHAT_MESSAGES = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "Name three primary colors."},
    {"role": "assistant", "content": "Red, yellow and blue."},
    {"role": "user", "content": "And the secondary ones?"},
]


def hf_prompt_ids(hf_tokenizer, name: str) -> list[int]:
    if name == "chat":
        text = hf_tokenizer.apply_chat_template(CHAT_MESSAGES, add_generation_prompt=True, tokenize=False)
    else:
        text = PROMPTS[name]
    ids = hf_tokenizer(text, add_special_tokens=False).input_ids
    return ids[:300]

@pytest.fixture(scope="module")
def tiny_model() -> LlamaModel:
    """A 2-layer random Llama: exercises the model's code paths in milliseconds."""
    config = tiny_config()
    return LlamaModel(config, random_weights(config, seed=0)).eval()


# ---------------------------------------------------------------------------------------------
# Fast tests on the tiny random model and on the weight layout
# ---------------------------------------------------------------------------------------------


def test_undo_rotary_permutation_inverts_llama_cpp_layout():
    num_heads, head_dim, hidden = 2, 6, 3
    hf_layout = torch.arange(num_heads * head_dim * hidden, dtype=torch.float32).reshape(-1, hidden)
    # llama.cpp's converter, written out by hand: within each head, row j of the first half goes
    # to row 2j and row j of the second half to row 2j + 1.
    gguf_layout = torch.empty_like(hf_layout)
    half = head_dim // 2
    for head in range(num_heads):
        base = head * head_dim
        for j in range(half):
            gguf_layout[base + 2 * j] = hf_layout[base + j]
            gguf_layout[base + 2 * j + 1] = hf_layout[base + half + j]
    assert torch.equal(undo_rotary_permutation(gguf_layout, num_heads), hf_layout)
    with pytest.raises(ValueError, match="multiple of 2 \\* num_heads"):
        undo_rotary_permutation(torch.zeros(10, 3), num_heads=2)


def test_logits_shape_and_dtype(tiny_model):
    logits = tiny_model(torch.tensor([3, 4, 5, 6]))
    assert logits.shape == (4, tiny_model.config.vocab_size)
    assert logits.dtype == torch.float32


def test_logits_indices_select_rows(tiny_model):
    ids = torch.tensor([3, 4, 5, 6, 7])
    full = tiny_model(ids)
    selected = tiny_model(ids, logits_indices=torch.tensor([4, 1]))
    torch.testing.assert_close(selected, full[[4, 1]], atol=1e-6, rtol=1e-6)


def test_attention_backends_agree_inside_the_model(tiny_model):
    ids = torch.tensor([5, 9, 2, 7, 7, 1, 30, 12, 8])
    expected = tiny_model(ids)
    for attention_fn in (naive_attention, flash_attention):
        got = tiny_model(ids, attention=UncachedAttention(attention_fn))
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_positions_matter(tiny_model):
    ids = torch.tensor([3, 4, 5])
    shifted = tiny_model(ids, positions=torch.tensor([10, 11, 12]))
    assert not torch.allclose(shifted, tiny_model(ids))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"input_ids": torch.tensor([3, 50])}, ValueError, r"input_ids must lie in \[0, 50\)"),
        ({"input_ids": torch.tensor([-1, 3])}, ValueError, "input_ids must lie"),
        ({"input_ids": torch.tensor([], dtype=torch.long)}, ValueError, "empty"),
        ({"input_ids": torch.tensor([[3, 4]])}, TypeError, "1-D integer"),
        ({"input_ids": torch.tensor([3.0])}, TypeError, "1-D integer"),
        (
            {"input_ids": torch.tensor([3, 4]), "positions": torch.tensor([63, 64])},
            ValueError,
            r"positions must lie in \[0, 64\)",
        ),
        ({"input_ids": torch.tensor([3, 4]), "positions": torch.tensor([0])}, ValueError, "shape"),
        ({"input_ids": torch.arange(65) % 50}, ValueError, "max_position_embeddings"),
        (
            {"input_ids": torch.tensor([3, 4]), "logits_indices": torch.tensor([2])},
            ValueError,
            "logits_indices",
        ),
    ],
)
def test_bad_forward_inputs_raise_clear_errors(tiny_model, kwargs, error, message):
    with pytest.raises(error, match=message):
        tiny_model(**kwargs)


def test_config_validation():
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        tiny_config(num_q_heads=3, num_kv_heads=2)
    with pytest.raises(ValueError, match="num_layers"):
        tiny_config(num_layers=0)
    with pytest.raises(ValueError, match="head_dim must be even"):
        tiny_config(head_dim=7)


def test_wrong_weight_shapes_are_named():
    config = tiny_config()
    weights = random_weights(config)
    weights["layers.1.down_proj"] = torch.zeros(3, 3)
    with pytest.raises(ValueError, match=r"layers\.1\.down_proj"):
        LlamaModel(config, weights)


def test_greedy_generate_rejects_bad_arguments(tiny_model):
    with pytest.raises(ValueError, match="prompt_ids is empty"):
        greedy_generate(tiny_model, [], 4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        greedy_generate(tiny_model, [3], 0)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        greedy_generate(tiny_model, [3] * 60, 10)


# ---------------------------------------------------------------------------------------------
# The real model against transformers
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_config_from_gguf(smollm2):
    model, _ = smollm2
    assert model.config == ModelConfig(
        num_layers=30,
        hidden_size=576,
        num_q_heads=9,
        num_kv_heads=3,
        head_dim=64,
        vocab_size=49152,
        intermediate_size=1536,
        max_position_embeddings=8192,
        rope_theta=100000.0,
        rms_norm_eps=model.config.rms_norm_eps,
        bos_token_id=1,
        eos_token_id=2,
    )
    assert model.config.rms_norm_eps == pytest.approx(1e-5)
    assert model.dtype == torch.float32
    assert model.device == torch.device("cpu")
    assert model.config.kv_bytes_per_token(torch.float32) == 2 * 30 * 3 * 64 * 4


@pytest.mark.slow
@pytest.mark.parametrize("name", PROMPTS)
def test_logits_match_transformers(smollm2, hf_model, hf_tokenizer, name):
    model, _ = smollm2
    ids = hf_prompt_ids(hf_tokenizer, name)
    if name == "long":
        assert len(ids) == 300  # the prompt is cut at 300 tokens
    input_ids = torch.tensor(ids)
    # Every row of a short prompt; for the long one every 8th row and the last (the 49152-wide
    # lm_head over all 300 rows would double the test's cost; each row's hidden state still
    # depends on every earlier token).
    rows = torch.arange(len(ids))
    if len(ids) > 64:
        rows = torch.cat([rows[::8], rows[-1:]])
    with torch.inference_mode():
        ours = model(input_ids, logits_indices=rows)
        theirs = hf_model(input_ids[None], logits_to_keep=rows).logits[0]
    assert ours.shape == (len(rows), model.config.vocab_size)
    torch.testing.assert_close(ours, theirs, atol=LOGITS_ATOL, rtol=0)


@pytest.mark.slow
def test_repeated_loads_share_the_cached_weights():
    # Two loads side by side, not the session's model against a new one: test_disk_cache clears the
    # weight cache on purpose, and xdist may run it in this process after the session model loaded.
    first, again = load_model(), load_model()
    assert again.embed_tokens.data_ptr() == first.embed_tokens.data_ptr()


@pytest.mark.slow
def test_greedy_tokens_match_transformers_generate(smollm2, hf_model, hf_tokenizer):
    model, _ = smollm2
    ids = hf_prompt_ids(hf_tokenizer, "non_english")
    ours = greedy_generate(model, ids, 10)
    with torch.inference_mode():
        output = hf_model.generate(
            torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=10, do_sample=False,
        )
    assert ours == output[0, len(ids) :].tolist()


@pytest.mark.slow
def test_chat_answers_capital_of_france_like_transformers(smollm2, hf_model):
    model, tokenizer = smollm2
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    ids = tokenizer.encode(text)
    ours = greedy_generate(model, ids, 16)
    assert ours[-1] == model.config.eos_token_id
    assert tokenizer.decode(ours[:-1]) == "The capital of France is Paris."
    with torch.inference_mode():
        output = hf_model.generate(
            torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=16, do_sample=False,
        )
    assert ours == output[0, len(ids) :].tolist()


@pytest.mark.slow
def test_bfloat16_model_agrees_on_the_next_token(smollm2, hf_tokenizer):
    model, _ = smollm2
    bf16_model = load_model(dtype=torch.bfloat16)
    assert bf16_model.dtype == torch.bfloat16
    ids = torch.tensor(hf_prompt_ids(hf_tokenizer, "code"))
    with torch.inference_mode():
        fp32_logits = model(ids, logits_indices=torch.tensor([-1]))
        bf16_logits = bf16_model(ids, logits_indices=torch.tensor([-1]))
    assert bf16_logits.dtype == torch.float32  # logits come back in fp32 whatever the model dtype
    assert int(bf16_logits.argmax()) == int(fp32_logits.argmax())
