"""LLMEngine: fast tests on a tiny random Llama, then (slow) SmolLM2 against transformers' generate.

The tiny model runs in float64, so its greedy tokens are the same whether computed in one padded-free
batch over paged blocks or by recomputing each sequence alone: a near-tie that fp32 rounding could
flip is far less likely, and a real bug (a wrong slot, a wrong mask) changes tokens.
"""

from __future__ import annotations

import random

import pytest
import torch

from course_lib.checks import one_thread
from course_lib.detokenizer import IncrementalDetokenizer
from course_lib.engine import LLMEngine
from course_lib.model import LlamaModel, greedy_generate, random_weights
from course_lib.model_runner import paged_decode_attention_torch
from course_lib.paged import AllocatorProtocol, BlockAllocator
from course_lib.sampling import SamplingParams
from course_lib.scheduler import Scheduler, SchedulerConfig
from tests.tiny_models import ByteTokenizer, tiny_config

TINY = tiny_config(vocab_size=300, max_position_embeddings=256, bos_token_id=None, eos_token_id=None)


@pytest.fixture(autouse=True)
def one_thread_for_tiny_shapes(request):
    """Tiny matrices gain nothing from threads, and on a busy machine each OpenMP hand-off between
    threads can cost milliseconds. The slow SmolLM2 tests keep torch's default."""
    if request.node.get_closest_marker("slow"):
        yield
        return
    with one_thread():
        yield


@pytest.fixture(scope="module")
def tiny_model():
    weights = {name: tensor.double() for name, tensor in random_weights(TINY, seed=0).items()}
    return LlamaModel(TINY, weights).eval()


@pytest.fixture(scope="module")
def prompts_and_references(tiny_model):
    """Varied prompts (some sharing a long prefix) and each one's greedy tokens computed alone, uncached."""
    rng = random.Random(0)
    shared = [rng.randrange(TINY.vocab_size) for _ in range(40)]
    prompts = [[rng.randrange(TINY.vocab_size) for _ in range(rng.randrange(1, 70))] for _ in range(8)]
    prompts += [shared + [rng.randrange(TINY.vocab_size) for _ in range(rng.randrange(1, 20))] for _ in range(4)]
    with one_thread():
        references = [greedy_generate(tiny_model, prompt, 10, use_cache=False) for prompt in prompts]
    return prompts, references


GREEDY = SamplingParams(temperature=0.0, max_tokens=10)


def scripted_sampler(script: dict[int, list[int]]):
    """A sampler that returns the next scripted token of each request (keyed by its seed)."""
    positions = {seed: 0 for seed in script}

    def sampler(logits, params, generators):
        tokens = []
        for p in params:
            tokens.append(script[p.seed][positions[p.seed]])
            positions[p.seed] += 1
        return torch.tensor(tokens)

    return sampler


# ----- the engine against recomputation, under every scheduling situation -----------------------


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"enable_prefix_caching": False},
        {"max_num_batched_tokens": 8, "max_num_seqs": 4},  # chunked prefill
        {"num_blocks": 20, "block_size": 4},  # tight pool: preemption
        {"block_size": 1, "max_num_seqs": 3},
        {"attention_backend": "naive"},
        {"attention_backend": "flash"},
        {"policy": "priority", "enable_chunked_prefill": False, "max_num_batched_tokens": 128},
    ],
    ids=["default", "no_prefix_cache", "chunked", "preemption", "block_size_1", "naive", "flash", "priority_no_chunking"],
)
def test_greedy_tokens_equal_recomputation(tiny_model, prompts_and_references, options):
    prompts, references = prompts_and_references
    engine = LLMEngine(tiny_model, ByteTokenizer(), **options)
    outputs = engine.generate(prompts, GREEDY)
    for index, (output, reference) in enumerate(zip(outputs, references)):
        assert output.token_ids == reference, f"request {index} (prompt of {len(prompts[index])} tokens)"
        assert output.finish_reason == "length"
        assert output.prompt_token_ids == prompts[index]
    assert engine.allocator.num_free_blocks == engine.allocator.num_blocks
    if options.get("max_num_batched_tokens") == 8:
        assert engine.stats.num_partial_prefill_chunks > 0
    if options.get("num_blocks") == 20:
        assert engine.stats.num_preemptions > 0


def test_prefix_cache_hits_on_a_second_round(tiny_model, prompts_and_references):
    prompts, references = prompts_and_references
    engine = LLMEngine(tiny_model, ByteTokenizer(), block_size=4)
    engine.generate(prompts, GREEDY)
    first_round_hits = engine.stats.num_prefix_cached_tokens
    outputs = engine.generate(prompts, GREEDY)
    assert [o.token_ids for o in outputs] == references
    # Every full block of every prompt but the last token is in the cache now.
    expected = sum((len(p) - 1) // 4 * 4 for p in prompts)
    assert engine.stats.num_prefix_cached_tokens - first_round_hits == expected


# ----- streaming, stop conditions, text ---------------------------------------------------------


def test_step_streams_the_same_tokens_and_text_as_generate(tiny_model, prompts_and_references):
    prompts, references = prompts_and_references
    engine = LLMEngine(tiny_model, ByteTokenizer(), max_num_batched_tokens=16, max_num_seqs=4)
    ids = [engine.add_request(prompt, GREEDY) for prompt in prompts[:5]]
    tokens = {i: [] for i in ids}
    texts = {i: "" for i in ids}
    finished = set()
    while engine.has_unfinished():
        for output in engine.step():
            assert output.request_id not in finished
            tokens[output.request_id] += output.new_token_ids
            texts[output.request_id] += output.new_text
            if output.finished:
                finished.add(output.request_id)
                assert output.finish_reason == "length"
    assert [tokens[i] for i in ids] == references[:5]
    assert [texts[i] for i in ids] == [ByteTokenizer().decode(r) for r in references[:5]]


def test_stop_token_eos_and_stop_strings(tiny_model):
    # Seeds only key the scripted sampler's token lists here.
    script = {1: [72, 105, 2, 65], 2: [72, 105, 33, 9], 3: [65, 66, 67, 68, 69], 4: [65, 66, 67, 68, 69]}
    engine = LLMEngine(tiny_model, ByteTokenizer(eos_token_id=2), sampler=scripted_sampler(script))
    params = [
        SamplingParams(max_tokens=4, seed=1),  # eos at the third token
        SamplingParams(max_tokens=4, seed=2, stop_token_ids=[33]),
        SamplingParams(max_tokens=5, seed=3, stop=["CD"]),  # stop string across two tokens
        SamplingParams(max_tokens=5, seed=4, stop=["XYZ"]),  # never matches
    ]
    outputs = engine.generate([[5, 6]] * 4, params)
    assert [o.token_ids for o in outputs] == [[72, 105, 2], [72, 105, 33], [65, 66, 67, 68], [65, 66, 67, 68, 69]]
    assert [o.finish_reason for o in outputs] == ["stop", "stop", "stop", "length"]
    assert [o.text for o in outputs] == ["Hi", "Hi", "AB", "ABCDE"]


def test_ignore_eos_keeps_going(tiny_model):
    engine = LLMEngine(tiny_model, ByteTokenizer(eos_token_id=2), sampler=scripted_sampler({1: [2, 2, 2]}))
    (output,) = engine.generate([[5]], SamplingParams(max_tokens=3, seed=1, ignore_eos=True))
    assert output.token_ids == [2, 2, 2] and output.finish_reason == "length"


def test_context_length_stops_a_request(tiny_model):
    engine = LLMEngine(tiny_model, ByteTokenizer(), max_model_len=12)
    (output,) = engine.generate([list(range(1, 10))], SamplingParams(temperature=0, max_tokens=50))
    assert len(output.token_ids) == 3 and output.finish_reason == "length"


def test_incremental_detokenizer_holds_back_partial_characters_and_stop_prefixes():
    data = "né 🙂!".encode()
    detokenizer = IncrementalDetokenizer(lambda i: data[i : i + 1])
    pieces = [detokenizer.add_token(i) for i in range(len(data))]
    assert "".join(pieces) == "né 🙂!"
    assert "\ufffd" not in "".join(pieces) and pieces[1] == ""  # 'é' waits for its second byte
    stopper = IncrementalDetokenizer(lambda i: bytes([i]), stop=["END"])
    released = [stopper.add_token(b) for b in b"aEbENxEND tail"]
    assert "".join(released) == "aEbENx" and stopper.stopped
    assert "".join(released[:4]) == "aE"  # "aEbE": the last two characters wait (a stop string is 3 long)
    unfinished = IncrementalDetokenizer(lambda i: "🙂".encode()[:2])
    assert unfinished.add_token(0) == "" and unfinished.flush() == "\ufffd"


# ----- seeds, metrics, abort --------------------------------------------------------------------


def test_seeded_request_is_reproducible_whatever_the_batch(tiny_model, prompts_and_references):
    prompts, _ = prompts_and_references
    seeded = SamplingParams(temperature=1.0, max_tokens=8, seed=123)
    alone = LLMEngine(tiny_model, ByteTokenizer()).generate([prompts[0]], seeded)[0].token_ids
    others = [SamplingParams(temperature=1.0, max_tokens=8)] * 3
    batched = LLMEngine(tiny_model, ByteTokenizer()).generate(prompts[:4], [seeded] + others)[0].token_ids
    assert alone == batched


def test_generate_shows_a_progress_bar_when_asked(tiny_model, capsys):
    LLMEngine(tiny_model, ByteTokenizer()).generate([[1, 2], [3]], GREEDY, use_tqdm=True)
    assert "2/2" in capsys.readouterr().err


def test_metrics_are_filled_in(tiny_model, prompts_and_references):
    prompts, _ = prompts_and_references
    outputs = LLMEngine(tiny_model, ByteTokenizer(), max_num_seqs=2).generate(prompts[:4], GREEDY)
    for output in outputs:
        metrics = output.metrics
        assert metrics.num_prompt_tokens == len(output.prompt_token_ids)
        assert metrics.num_output_tokens == len(output.token_ids) == len(metrics.token_times)
        assert metrics.arrival_time <= metrics.first_scheduled_time <= metrics.first_token_time <= metrics.finish_time
        assert metrics.ttft > 0 and metrics.tpot > 0
    # With two seats, the last two requests queued behind the first two.
    assert outputs[3].metrics.queue_time > outputs[0].metrics.queue_time


def test_abort_frees_blocks_and_reports_once(tiny_model):
    engine = LLMEngine(tiny_model, ByteTokenizer())
    keep = engine.add_request([1, 2, 3], SamplingParams(temperature=0, max_tokens=5))
    gone = engine.add_request([4, 5, 6], SamplingParams(temperature=0, max_tokens=50))
    engine.step()
    assert engine.abort(gone) and not engine.abort(gone) and not engine.abort("never-added")
    reports = []
    while engine.has_unfinished():
        reports += engine.step()
    aborted = [r for r in reports if r.request_id == gone]
    assert len(aborted) == 1 and aborted[0].finished and aborted[0].finish_reason == "abort"
    assert sum(len(r.new_token_ids) for r in reports if r.request_id == keep) == 4
    assert engine.allocator.num_free_blocks == engine.allocator.num_blocks


# ----- bad input --------------------------------------------------------------------------------


def test_bad_input_raises_before_any_work(tiny_model):
    engine = LLMEngine(tiny_model, ByteTokenizer())
    with pytest.raises(ValueError, match="empty string"):
        engine.generate(["fine", ""])
    with pytest.raises(ValueError, match="prompt has no tokens"):
        engine.add_request([])
    with pytest.raises(ValueError, match="at most 255"):
        engine.generate([[1] * 256])
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=0)
    sneaky = SamplingParams()
    object.__setattr__(sneaky, "max_tokens", 0)  # past SamplingParams' own check: the engine checks too
    with pytest.raises(ValueError, match="max_tokens must be an integer >= 1"):
        engine.add_request([1], sneaky)
    with pytest.raises(ValueError, match="one per prompt"):
        engine.generate(["a", "b"], [GREEDY])
    with pytest.raises(ValueError, match=r"in \[0, 300\)"):
        engine.generate([[1, 300]])
    with pytest.raises(TypeError, match="string or a list of token ids"):
        engine.generate([3.5])
    assert not engine.has_unfinished() and engine.stats.num_steps == 0
    with pytest.raises(ValueError, match="attention_backend"):
        LLMEngine(tiny_model, ByteTokenizer(), attention_backend="cuda")
    with pytest.raises(ValueError, match="pool has 4"):
        LLMEngine(tiny_model, ByteTokenizer(), num_blocks=4, block_size=4).generate([[1] * 10], GREEDY)
    with pytest.raises(ValueError, match="allocator passed too"):
        LLMEngine(tiny_model, ByteTokenizer(), scheduler=Scheduler(SchedulerConfig(), BlockAllocator(8, 4)))


def test_num_blocks_from_a_memory_budget(tiny_model):
    bytes_per_block = 2 * TINY.num_layers * 16 * TINY.num_kv_heads * TINY.head_dim * 8  # float64
    engine = LLMEngine(tiny_model, ByteTokenizer(), kv_cache_memory_bytes=10 * bytes_per_block + 5)
    assert engine.allocator.num_blocks == 10 and engine.kv_cache.nbytes == 10 * bytes_per_block
    # Capped by what max_num_seqs full contexts could use: 2 x 256 / 16.
    capped = LLMEngine(tiny_model, ByteTokenizer(), max_num_seqs=2, kv_cache_memory_bytes=2**30)
    assert capped.allocator.num_blocks == 32
    with pytest.raises(ValueError, match="holds no block"):
        LLMEngine(tiny_model, ByteTokenizer(), kv_cache_memory_bytes=100)


# ----- a student's allocator through the protocol -----------------------------------------------


class MinimalAllocator:
    """The smallest allocator the engine accepts: a free list and block tables, no sharing."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size
        self.free_blocks = list(range(num_blocks))
        self.tables: dict = {}
        self.lengths: dict = {}

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def can_allocate(self, token_ids) -> bool:
        return self.blocks_needed(len(token_ids)) <= len(self.free_blocks)

    def allocate(self, seq_id, token_ids) -> int:
        self.tables[seq_id] = [self.free_blocks.pop() for _ in range(self.blocks_needed(len(token_ids)))]
        self.lengths[seq_id] = len(token_ids)
        return 0

    def can_append(self, seq_id) -> bool:
        return self.lengths[seq_id] % self.block_size != 0 or bool(self.free_blocks)

    def append_slot(self, seq_id):
        if self.lengths[seq_id] % self.block_size == 0:
            self.tables[seq_id].append(self.free_blocks.pop())
        self.lengths[seq_id] += 1
        return None

    def mark_computed(self, seq_id, token_ids, num_computed_tokens) -> None:
        pass

    def free(self, seq_id) -> None:
        self.free_blocks += self.tables.pop(seq_id)
        del self.lengths[seq_id]

    def block_table(self, seq_id) -> list[int]:
        return self.tables[seq_id]


def test_a_student_allocator_serves_through_the_engine(tiny_model, prompts_and_references):
    prompts, references = prompts_and_references
    allocator = MinimalAllocator(num_blocks=24, block_size=4)
    assert isinstance(allocator, AllocatorProtocol)
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32, max_model_len=256), allocator)
    engine = LLMEngine(tiny_model, ByteTokenizer(), allocator=allocator, scheduler=scheduler)
    outputs = engine.generate(prompts, GREEDY)
    assert [o.token_ids for o in outputs] == references
    assert engine.stats.num_preemptions > 0 and allocator.num_free_blocks == 24


# ----- the vectorized paged decode against plain attention --------------------------------------


def test_paged_decode_attention_matches_per_sequence_sdpa():
    torch.manual_seed(0)
    num_blocks, block_size, num_kv_heads, head_dim, num_q_heads = 12, 4, 2, 8, 6
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim)
    v_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim)
    seq_lens = [1, 7, 12]
    tables = [[3], [5, 0], [11, 2, 8]]
    padded = torch.tensor([t + [0] * (3 - len(t)) for t in tables], dtype=torch.int32)
    q = torch.randn(3, num_q_heads, head_dim)
    scale = head_dim**-0.5
    output = paged_decode_attention_torch(q, k_cache, v_cache, padded, torch.tensor(seq_lens, dtype=torch.int32), scale)
    for i, (table, length) in enumerate(zip(tables, seq_lens)):
        keys = k_cache[table].reshape(-1, num_kv_heads, head_dim)[:length].repeat_interleave(3, dim=1)
        values = v_cache[table].reshape(-1, num_kv_heads, head_dim)[:length].repeat_interleave(3, dim=1)
        weights = torch.softmax(torch.einsum("hd,thd->ht", q[i], keys) * scale, dim=-1)
        expected = torch.einsum("ht,thd->hd", weights, values)
        torch.testing.assert_close(output[i], expected, rtol=1e-5, atol=1e-5)  # fp32 reductions in another order


# ----- SmolLM2 against transformers (slow) ------------------------------------------------------

HF_MAX_NEW_TOKENS = 24

CHAT_QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in two sentences why the sky is blue.",
    "List three prime numbers larger than 50.",
    "How do I reverse a list in Python?",
    "Translate 'good morning, my friend' into Spanish.",
]
SHARED_SYSTEM_PROMPT = (
    "You are a patient teaching assistant for a course on how large language models are served. "
    "Students ask about tokenization, attention, the KV cache, paging, batching and sampling. "
    "Answer in plain words, give one concrete example with numbers when it helps, avoid jargon "
    "that was not introduced yet, and say so when a question is outside the course. Keep answers "
    "short: three sentences at most, unless the student asks for code, in which case give a short "
    "Python snippet with comments. Never invent references; if unsure, say what you would check."
)
SHARED_PREFIX_QUESTIONS = [
    "What is a KV cache?",
    "Why does decoding one token at a time use the GPU poorly?",
    "What does a block table map?",
    "When is prefix caching useful?",
]
TEXT_PROMPT_LENGTHS = [10, 60, 150, 260, 380, 500]


@pytest.fixture(scope="module")
def smollm2_prompts(smollm2):
    """16 token-id prompts of 10 to 500 tokens: chat questions, four sharing a long system prompt, real text."""
    from course_lib.corpus import load_corpus

    _, tokenizer = smollm2

    def chat(question, system=None):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
        return tokenizer.encode(tokenizer.apply_chat_template(messages, add_generation_prompt=True))

    prompts = [chat(q) for q in CHAT_QUESTIONS]
    prompts += [chat(q, SHARED_SYSTEM_PROMPT) for q in SHARED_PREFIX_QUESTIONS]
    text_ids = tokenizer.encode(load_corpus("stdlib-docstrings", max_bytes=60_000))
    for i, length in enumerate(TEXT_PROMPT_LENGTHS):
        start = 1000 * i  # different passages of the standard library's docstrings
        prompts.append(text_ids[start : start + length])
    return prompts


@pytest.fixture(scope="module")
def hf_greedy_references(hf_model, smollm2_prompts):
    """transformers' greedy tokens for each prompt, run one at a time (no padding), computed once."""
    references = []
    with torch.inference_mode():
        for prompt in smollm2_prompts:
            input_ids = torch.tensor([prompt])
            generated = hf_model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=HF_MAX_NEW_TOKENS,
                do_sample=False,
                pad_token_id=hf_model.generation_config.eos_token_id,
            )
            references.append(generated[0, len(prompt) :].tolist())
    return references


def _assert_same_as_transformers(outputs, references, prompts):
    for index, (output, reference) in enumerate(zip(outputs, references)):
        assert output.token_ids == reference, (
            f"request {index} ({len(prompts[index])} prompt tokens): ours {output.token_ids} "
            f"vs transformers {reference}"
        )


SMOLLM2_GREEDY = SamplingParams(temperature=0.0, max_tokens=HF_MAX_NEW_TOKENS)


@pytest.mark.slow
def test_smollm2_prompts_cover_the_required_range(smollm2, hf_model, smollm2_prompts):
    lengths = sorted(len(p) for p in smollm2_prompts)
    assert len(lengths) >= 16 and lengths[0] >= 10 and lengths[-1] >= 500
    _, tokenizer = smollm2
    eos = hf_model.generation_config.eos_token_id
    assert tokenizer.eos_token_id in (eos if isinstance(eos, list) else [eos])  # both stop on the same token


@pytest.mark.slow
def test_smollm2_greedy_equals_transformers_with_prefix_caching(smollm2, smollm2_prompts, hf_greedy_references):
    model, tokenizer = smollm2
    engine = LLMEngine(model, tokenizer, enable_prefix_caching=True)
    # One request with the shared system prompt first, so its blocks are computed when the others arrive.
    first = engine.generate([smollm2_prompts[len(CHAT_QUESTIONS)]], SMOLLM2_GREEDY)
    outputs = engine.generate(smollm2_prompts, SMOLLM2_GREEDY)
    _assert_same_as_transformers(first, hf_greedy_references[len(CHAT_QUESTIONS) :], smollm2_prompts[len(CHAT_QUESTIONS) :])
    _assert_same_as_transformers(outputs, hf_greedy_references, smollm2_prompts)
    shared_blocks = len(tokenizer.encode(SHARED_SYSTEM_PROMPT)) // 16
    assert engine.stats.num_prefix_cached_tokens >= len(SHARED_PREFIX_QUESTIONS) * shared_blocks * 16


@pytest.mark.slow
def test_smollm2_greedy_equals_transformers_without_prefix_caching(smollm2, smollm2_prompts, hf_greedy_references):
    model, tokenizer = smollm2
    engine = LLMEngine(model, tokenizer, enable_prefix_caching=False)
    outputs = engine.generate(smollm2_prompts, SMOLLM2_GREEDY)
    _assert_same_as_transformers(outputs, hf_greedy_references, smollm2_prompts)
    assert engine.stats.num_prefix_cached_tokens == 0


@pytest.mark.slow
def test_smollm2_greedy_equals_transformers_with_chunked_prefill(smollm2, smollm2_prompts, hf_greedy_references):
    model, tokenizer = smollm2
    engine = LLMEngine(model, tokenizer, max_num_batched_tokens=96, max_num_seqs=8, enable_prefix_caching=False)
    outputs = engine.generate(smollm2_prompts, SMOLLM2_GREEDY)
    _assert_same_as_transformers(outputs, hf_greedy_references, smollm2_prompts)
    assert engine.stats.num_partial_prefill_chunks >= 5  # the 500-token prompt alone needs 5 partial chunks


@pytest.mark.slow
def test_smollm2_greedy_equals_transformers_under_preemption(smollm2, smollm2_prompts, hf_greedy_references):
    model, tokenizer = smollm2
    longest = max(len(p) for p in smollm2_prompts) + HF_MAX_NEW_TOKENS
    # Room for the longest request and a little more: requests must give their blocks back.
    engine = LLMEngine(model, tokenizer, num_blocks=-(-longest // 16) + 6, enable_prefix_caching=False)
    outputs = engine.generate(smollm2_prompts, SMOLLM2_GREEDY)
    _assert_same_as_transformers(outputs, hf_greedy_references, smollm2_prompts)
    assert engine.stats.num_preemptions > 0
