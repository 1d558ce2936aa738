"""Tests of course_lib.tokenizer and course_lib.corpus.

- the hand-checkable "aaabdaaabac" cases of the teaching functions;
- the incremental trainer against the naive full-recount trainer (fixed corpora and hypothesis);
- SmolLM2's tokenizer from the GGUF file against Hugging Face ``tokenizers`` built by transformers
  from the same file: for each kind of text a ``test_X_roundtrip`` (decode(encode(s)) == s) and a
  ``test_X_matches_reference`` (our ids == HF's ids), plus random text with hypothesis;
- special tokens, the chat template against transformers, and clear errors on bad input.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import course_lib.corpus as corpus
from course_lib.tokenizer import (
    BPETokenizer,
    bytes_to_unicode,
    count_words,
    get_pair_counts,
    merge_pair,
    pretokenize,
    train_bpe,
    train_bpe_naive,
)

AAABDAAABAC = list(b"aaabdaaabac")  # a=97, b=98, c=99, d=100


@pytest.fixture(scope="session")
def smollm2_tokenizer(gguf_file):
    # No path: the default shares the GGUF header cache with load_smollm2().
    return BPETokenizer.from_gguf()


def assert_roundtrip(tokenizer: BPETokenizer, texts: list[str]) -> None:
    for text in texts:
        assert tokenizer.decode(tokenizer.encode(text)) == text, f"round trip changed {text!r}"


def assert_matches_reference(tokenizer: BPETokenizer, hf_tokenizer, texts: list[str]) -> None:
    for text in texts:
        expected = hf_tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.encode(text) == expected, f"ids differ from HF tokenizers on {text!r}"


# ---------------------------------------------------------------- teaching functions, by hand


def test_pair_counts_aaabdaaabac():
    # aa occurs at positions 0-1, 1-2, 5-6, 6-7: overlapping occurrences count.
    assert get_pair_counts(AAABDAAABAC) == {
        (97, 97): 4,
        (97, 98): 2,
        (98, 100): 1,
        (100, 97): 1,
        (98, 97): 1,
        (97, 99): 1,
    }
    assert get_pair_counts([]) == {}
    assert get_pair_counts([5]) == {}


def test_merge_pair_is_left_to_right_and_non_overlapping():
    assert merge_pair(AAABDAAABAC, (97, 97), 256) == [256, 97, 98, 100, 256, 97, 98, 97, 99]
    assert merge_pair([97, 97, 97], (97, 97), 256) == [256, 97]
    assert merge_pair([97, 97, 97, 97], (97, 97), 256) == [256, 256]
    assert merge_pair([1, 2, 3], (3, 1), 9) == [1, 2, 3]


def test_training_aaabdaaabac_by_hand():
    # 1st: aa (4 times). 2nd: Zab... (256, 97) and (97, 98) both occur twice; the smaller pair
    # (97, 98) wins the tie. 3rd: (256, 257) "aaab" twice. Then every pair occurs once.
    expected = {(97, 97): 256, (97, 98): 257, (256, 257): 258}
    assert train_bpe_naive("aaabdaaabac", 259) == expected
    assert train_bpe("aaabdaaabac", 259) == expected
    tokenizer = BPETokenizer.train("aaabdaaabac", 259)
    assert tokenizer.encode("aaabdaaabac") == [258, 100, 258, 97, 99]
    assert tokenizer.decode_token_bytes(258) == b"aaab"


def test_training_stops_when_no_pair_is_left():
    assert train_bpe_naive("ab ab", 300) == train_bpe("ab ab", 300) == {(97, 98): 256, (32, 256): 257}
    assert BPETokenizer.train("ab ab", 300).vocab_size == 258


def test_pretokenize_splits_like_gpt2():
    assert pretokenize("Hello world!!\n") == ["Hello", " world", "!!", "\n"]
    assert pretokenize("don't  x 42") == ["don", "'t", " ", " x", " 42"]
    assert count_words("the cat the") == {tuple(b"the"): 1, tuple(b" cat"): 1, tuple(b" the"): 1}


def test_bytes_to_unicode_is_gpt2s_table():
    table = bytes_to_unicode()
    assert len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("a")] == "a"


# ---------------------------------------------------------------- incremental == naive trainer

SMALL_CORPORA = {
    "aaabdaaabac": ("aaabdaaabac", 300),
    "repeats": ("aaaaaaa aaaa aa a " * 5 + "ab" * 9, 280),
    "english": ("the cat sat on the mat; the cat ate the rat. " * 3 + "That's it, isn't it?", 330),
    "code": ("def f(x):\n    return x + 1\n\n\tif x:\n\t\tpass\n" * 4, 320),
    "mixed_scripts": ("日本語 日本 العربية עברית हिन्दी 👩‍👩‍👧 😀😀 ", 340),
    "stdlib_docstrings": (None, 400),
}


@pytest.mark.parametrize("name", SMALL_CORPORA)
def test_incremental_trainer_equals_naive(name):
    text, vocab_size = SMALL_CORPORA[name]
    if text is None:
        text = corpus.load_corpus("stdlib-docstrings", max_bytes=6_000)
    expected = train_bpe_naive(text, vocab_size)
    assert len(expected) > 0
    assert train_bpe(text, vocab_size) == expected


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("aab c\n'é日😀"), max_size=80),
    extra_ids=st.integers(min_value=0, max_value=40),
)
def test_incremental_trainer_equals_naive_on_random_text(text, extra_ids):
    assert train_bpe(text, 256 + extra_ids) == train_bpe_naive(text, 256 + extra_ids)


@settings(max_examples=40, deadline=None)
@given(text=st.text(max_size=60), training=st.text(alphabet=st.sampled_from("ab c日"), max_size=60))
def test_trained_tokenizer_roundtrip_on_random_text(text, training):
    tokenizer = BPETokenizer.train(training, 270)
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert all(0 <= token_id < tokenizer.vocab_size for token_id in ids)


def test_trained_special_tokens_are_kept_whole():
    text = "hello world<|endoftext|>hello there<|endoftext|>"
    tokenizer = BPETokenizer.train(text, 270, special_tokens=["<|endoftext|>"])
    end_of_text = tokenizer.token_to_id("<|endoftext|>")
    assert end_of_text == tokenizer.vocab_size - 1
    assert tokenizer.special_tokens == {"<|endoftext|>": end_of_text}
    ids = tokenizer.encode("hi<|endoftext|>")
    assert ids[-1] == end_of_text and end_of_text not in ids[:-1]
    assert tokenizer.decode(ids) == "hi<|endoftext|>"
    # Merges never reach into a special token: no learned token contains "<|".
    assert all(b"<|" not in tokenizer.decode_token_bytes(i) for i in range(256, end_of_text))


# ---------------------------------------------------------------- SmolLM2 vs HF tokenizers

EMPTY = [""]
EMOJI = ["😀", "👩‍👩‍👧‍👦", "family: 👩‍👩‍👧‍👦 and 👍🏽 flags 🇫🇷🇯🇵", "❤️‍🔥 ok"]
CJK = ["日本語のテキストです。", "中文分词测试，你好世界", "한국어 문장입니다"]
RTL = ["مرحبا بالعالم", "שלום עולם", "mixed עברית and العربية 123"]
INDIC = ["नमस्ते दुनिया", "தமிழ் எழுத்து", "हिन्दी में लिखा गया वाक्य।"]
CODE = [
    "def f(x):\n\treturn x + 1\n",
    "for (int i = 0; i < n; ++i) {\n    sum += a[i];\n}",
    "x = {'a': [1, 2], \"b\": None}  # comment",
]
WHITESPACE = ["\n\n\n", "   x", "trailing spaces   ", " ", "\t\t\tindent", "a \n b\r\n\r\nc", "  \n  \n", "x  "]
DIGITS = ["0", "12345678901234567890", "3.14159 2026-11-21 1,000,000", "٣٤٥ ½ ²"]
CONTRACTIONS = ["don't", "I'M", "we'll they've she'd it's", "DON'T 'tis y'all"]
CHAT_SPECIALS = [
    "<|im_start|>user\nHi<|im_end|>\n",
    "<|endoftext|>",
    " <|im_end|> ",
    "<|im_start|><|im_end|><|endoftext|>",
    "a<|im_start|",
    "<|im_start|>system\nYou are SmolLM<|im_end|>\n<|im_start|>assistant\n",
]
MIXED = ["Hello, 世界! 👋 Ça va? مرحبا\n\tcode(x) = 42 <|im_end|>", "Ünïcödé\u00a0nbsp\u2028line sep"]


def test_empty_roundtrip(smollm2_tokenizer):
    assert smollm2_tokenizer.encode("") == []
    assert_roundtrip(smollm2_tokenizer, EMPTY)


def test_empty_matches_reference(smollm2_tokenizer, hf_tokenizer):
    assert_matches_reference(smollm2_tokenizer, hf_tokenizer, EMPTY)


def test_emoji_roundtrip(smollm2_tokenizer):
    assert_roundtrip(smollm2_tokenizer, EMOJI)


def test_emoji_matches_reference(smollm2_tokenizer, hf_tokenizer):
    assert_matches_reference(smollm2_tokenizer, hf_tokenizer, EMOJI)


def test_cjk_roundtrip(smollm2_tokenizer):
    assert_roundtrip(smollm2_tokenizer, CJK)


def test_cjk_matches_reference(smollm2_tokenizer, hf_tokenizer):
    assert_matches_reference(smollm2_tokenizer, hf_tokenizer, CJK)


def test_rtl_roundtrip(smollm2_tokenizer):
    assert_roundtrip(smollm2_tokenizer, RTL)


def test_rtl_matches_reference(smollm2_tokenizer, hf_tokenizer):
    assert_matches_reference(smollm2_tokenizer, hf_tokenizer, RTL)


def test_indic_roundtrip(smollm2_tokenizer):
    assert_roundtrip(smollm2_tokenizer, INDIC)


def test_indic_matches_reference(smollm2_tokenizer, hf_tokenizer):
    assert_matches_reference(smollm2_tokenizer, hf_tokenizer, INDIC)


def test_code_roundtrip(smollm2_tokenizer):
    assert_roundtrip(smollm2_tokenizer, CODE)


def test_code_matches_reference(smollm2_tokenizer, hf_tokenizer):
    assert_matches_reference(smollm2_tokenizer, hf_tokenizer, CODE)


def test_whitespace_roundtrip(smollm2_tokenizer):
    assert_roundtrip(smollm2_tokenizer, WHITESPACE)


def test_whitespace_matches_reference(smollm2_tokenizer, hf_tokenizer):
    assert_matches_reference(smollm2_tokenizer, hf_tokenizer, WHITESPACE)


def test_digits_roundtrip(smollm2_tokenizer):
    assert_roundtrip(smollm2_tokenizer, DIGITS)


def test_digits_matches_reference(smollm2_tokenizer, hf_tokenizer):
    assert_matches_reference(smollm2_tokenizer, hf_tokenizer, DIGITS)


def test_contractions_roundtrip(smollm2_tokenizer):
    assert_roundtrip(smollm2_tokenizer, CONTRACTIONS)


def test_contractions_matches_reference(smollm2_tokenizer, hf_tokenizer):
    assert_matches_reference(smollm2_tokenizer, hf_tokenizer, CONTRACTIONS)


def test_chat_specials_roundtrip(smollm2_tokenizer):
    assert_roundtrip(smollm2_tokenizer, CHAT_SPECIALS)


def test_chat_specials_matches_reference(smollm2_tokenizer, hf_tokenizer):
    assert_matches_reference(smollm2_tokenizer, hf_tokenizer, CHAT_SPECIALS)
    # Each special token is one id, with no space stripped on either side.
    assert smollm2_tokenizer.encode("<|im_start|>user") == [1, smollm2_tokenizer.token_to_id("user")]
    assert smollm2_tokenizer.encode(" <|im_end|> ") == [216, 2, 216]


def test_mixed_roundtrip(smollm2_tokenizer):
    assert_roundtrip(smollm2_tokenizer, MIXED)


def test_mixed_matches_reference(smollm2_tokenizer, hf_tokenizer):
    assert_matches_reference(smollm2_tokenizer, hf_tokenizer, MIXED)


def test_real_text_roundtrip(smollm2_tokenizer):
    assert_roundtrip(smollm2_tokenizer, [corpus.load_corpus("stdlib-docstrings", max_bytes=20_000)])


def test_real_text_matches_reference(smollm2_tokenizer, hf_tokenizer):
    text = corpus.load_corpus("stdlib-docstrings", max_bytes=20_000)
    assert_matches_reference(smollm2_tokenizer, hf_tokenizer, [text])


# Any character, with the special tokens and contraction pieces mixed in often enough to meet.
_TEXT_PIECES = st.one_of(
    st.characters(exclude_categories=["Cs"]),  # lone surrogates cannot be UTF-8 encoded
    st.sampled_from([" ", "  ", "\n", "\t", "'s", "'LL", "0", "42", "<|im_start|>", "<|im_end|>", "<|endoftext|>"]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.lists(_TEXT_PIECES, max_size=40).map("".join))
def test_random_text_matches_reference(smollm2_tokenizer, hf_tokenizer, text):
    assert smollm2_tokenizer.encode(text) == hf_tokenizer.encode(text, add_special_tokens=False)


@pytest.fixture(scope="session")
def smollm2_byte_values(smollm2_tokenizer) -> set[int]:
    """The byte values that have a single-byte token in SmolLM2's vocabulary (235 of 256)."""
    tokens = (smollm2_tokenizer.decode_token_bytes(i) for i in range(smollm2_tokenizer.vocab_size))
    return {token[0] for token in tokens if len(token) == 1}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.lists(_TEXT_PIECES, max_size=40).map("".join))
def test_random_text_roundtrip(smollm2_tokenizer, smollm2_byte_values, text):
    # SmolLM2 has no token for 21 byte values (e.g. 0x04 and the UTF-8 lead bytes 0xF1, 0xF2 of
    # unassigned planes); HF drops such bytes and so do we, so only covered text round-trips.
    if set(text.encode("utf-8")) <= smollm2_byte_values:
        assert smollm2_tokenizer.decode(smollm2_tokenizer.encode(text)) == text


def test_bytes_without_a_token_are_dropped_like_reference(smollm2_tokenizer, hf_tokenizer):
    text = "a\x04b !\x04! x\U00050000y"
    assert_matches_reference(smollm2_tokenizer, hf_tokenizer, [text])
    assert smollm2_tokenizer.encode("!\x04!") == [smollm2_tokenizer.token_to_id("!!")]


def test_vocabulary_matches_reference(smollm2_tokenizer, hf_tokenizer):
    assert smollm2_tokenizer.vocab_size == len(hf_tokenizer) == 49152
    names = {smollm2_tokenizer.id_to_token(i): i for i in range(smollm2_tokenizer.vocab_size)}
    assert names == hf_tokenizer.get_vocab()
    assert smollm2_tokenizer.token_to_id("Ġthe") == hf_tokenizer.convert_tokens_to_ids("Ġthe")
    assert smollm2_tokenizer.bos_token_id == hf_tokenizer.bos_token_id == 1
    assert smollm2_tokenizer.eos_token_id == hf_tokenizer.eos_token_id == 2
    hf_special = {token: hf_tokenizer.convert_tokens_to_ids(token) for token in hf_tokenizer.added_tokens_encoder}
    assert smollm2_tokenizer.special_tokens == hf_special


def test_decode_matches_reference_and_token_bytes(smollm2_tokenizer, hf_tokenizer):
    text = "<|im_start|>user\nWhat is 2+2? 🤔<|im_end|>"
    ids = smollm2_tokenizer.encode(text)
    assert smollm2_tokenizer.decode(ids) == hf_tokenizer.decode(ids) == text
    assert b"".join(smollm2_tokenizer.decode_token_bytes(i) for i in ids) == text.encode("utf-8")
    # Ids may come as a tensor or NumPy integers (what a model's output holds).
    assert smollm2_tokenizer.decode(torch.tensor(ids)) == smollm2_tokenizer.decode(np.array(ids)) == text
    # A token may hold part of a character; alone it decodes to U+FFFD.
    emoji_ids = smollm2_tokenizer.encode("🤔")
    assert len(emoji_ids) > 1 and smollm2_tokenizer.decode(emoji_ids[:1]) == "\ufffd"


CONVERSATIONS = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
    [
        {"role": "user", "content": "Name a color."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another <|im_end|> one\n"},
    ],
]


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_chat_template_matches_reference(smollm2_tokenizer, hf_tokenizer, messages, add_generation_prompt):
    expected = hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    assert smollm2_tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt) == expected


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("train", [train_bpe_naive, train_bpe, BPETokenizer.train])
def test_training_rejects_bad_input(train):
    with pytest.raises(ValueError, match="vocab_size must be >= 256"):
        train("abc", 255)
    with pytest.raises(TypeError, match="vocab_size must be an int"):
        train("abc", 300.0)
    with pytest.raises(TypeError, match="text must be a str"):
        train(b"abc", 300)


def test_special_tokens_count_toward_vocab_size():
    with pytest.raises(ValueError, match="vocab_size must be >= 258"):
        BPETokenizer.train("abc", 257, special_tokens=["<a>", "<b>"])
    with pytest.raises(ValueError, match="special tokens must be non-empty strings"):
        BPETokenizer.train("abc", 300, special_tokens=[""])


def test_encode_and_decode_reject_bad_input(smollm2_tokenizer):
    with pytest.raises(TypeError, match="text must be a str"):
        smollm2_tokenizer.encode(b"bytes")
    with pytest.raises(ValueError, match="lone surrogate"):
        smollm2_tokenizer.encode("a\ud800")
    with pytest.raises(ValueError, match=r"token_id must be in \[0, 49152\), got 49152"):
        smollm2_tokenizer.decode([1, 49152])
    with pytest.raises(ValueError, match=r"must be in \[0, 49152\), got -1"):
        smollm2_tokenizer.decode([-1])
    with pytest.raises(TypeError, match="token_id must be an int"):
        smollm2_tokenizer.decode(["a"])
    with pytest.raises(TypeError, match="ids must be a sequence of ints"):
        smollm2_tokenizer.decode("abc")
    with pytest.raises(ValueError, match="unknown token"):
        smollm2_tokenizer.token_to_id(" the")


def test_chat_template_rejects_bad_input(smollm2_tokenizer):
    with pytest.raises(ValueError, match=r"messages\[0\] must be a dict with 'role' and 'content'"):
        smollm2_tokenizer.apply_chat_template([{"content": "no role"}])
    with pytest.raises(TypeError, match="messages must be a list"):
        smollm2_tokenizer.apply_chat_template("Hi")
    with pytest.raises(ValueError, match="no chat template"):
        BPETokenizer.train("abc", 256).apply_chat_template(CONVERSATIONS[0])


def test_inconsistent_merges_are_rejected():
    token_bytes = [bytes([byte]) for byte in range(256)] + [b"ab"]
    with pytest.raises(ValueError, match="not the concatenation"):
        BPETokenizer(token_bytes, {(97, 99): 256})
    with pytest.raises(ValueError, match=r"must be in \[0, 257\)"):
        BPETokenizer(token_bytes, {(97, 98): 300})


# ---------------------------------------------------------------- corpora


def test_stdlib_docstrings_corpus_is_cut_at_a_character_boundary():
    text = corpus.load_corpus("stdlib-docstrings", max_bytes=1_000)
    assert 997 <= len(text.encode("utf-8")) <= 1_000
    assert corpus.load_corpus("stdlib-docstrings", max_bytes=30_000).startswith(text)


def test_corpus_rejects_bad_arguments():
    with pytest.raises(ValueError, match="name must be one of"):
        corpus.load_corpus("wikipedia")
    with pytest.raises(ValueError, match="max_bytes must be None or an int >= 0"):
        corpus.load_corpus("stdlib-docstrings", max_bytes=-1)


def test_missing_python_docs_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(corpus, "PYTHON_DOCS_DIR", tmp_path / "absent")
    corpus._python_docs.cache_clear()
    try:
        with pytest.raises(corpus.CorpusMissing, match="apt-get install python3.11-doc"):
            corpus.load_corpus("python-docs")
    finally:
        corpus._python_docs.cache_clear()
