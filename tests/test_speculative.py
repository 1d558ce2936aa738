"""course_lib.speculative against independent checks.

- The speculative sampling rule (``verify_draft``) is run as a real generation loop against
  position-dependent target and draft distributions; a chi-square test (our statistic, checked
  against the closed form) finds the emitted tokens distributed exactly as the target's, per
  position and jointly. Its companion tests show the same chi-square test rejects the classic wrong
  samplers (resampling from p instead of the residual, keeping every draft), so passing means something.
- With one-hot distributions the rule is greedy verification, and ``speculative_generate`` gives
  ``greedy_generate``'s tokens with both drafters.
- In ``LLMEngine``, speculative greedy outputs equal plain greedy outputs over seeded random
  workloads with preemption, prefix caching and chunked prefill on; rejected drafts' slots are given
  back after every step; sampled requests through the engine follow the model's distribution.

The tiny model runs in float64 so that batch composition cannot flip a near-tie (as in test_engine.py).
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course_lib import speculative as spec
from course_lib.checks import one_thread
from course_lib.engine import LLMEngine
from course_lib.model import LlamaModel, greedy_generate, random_weights
from course_lib.quantization import quantize_model
from course_lib.sampling import SamplingParams
from tests.tiny_models import ByteTokenizer, tiny_config

P_VALUE_FLOOR = 1e-4  # a correct sampler passes at this level; every wrong one below lands far under it


@pytest.fixture(autouse=True)
def one_thread_for_tiny_shapes():
    with one_thread():
        yield


# ----- the chi-square test itself ---------------------------------------------------------------------


def test_chi_square_statistic_and_p_value_match_closed_forms():
    # (10 - 25)^2 / 25 + (40 - 25)^2 / 25 + (50 - 50)^2 / 50 = 18
    assert spec.chi_square_statistic([10, 40, 50], [0.25, 0.25, 0.5]) == pytest.approx(18.0)
    assert spec.chi_square_statistic([3, 1], [1.0, 0.0]) == math.inf
    assert spec.chi_square_statistic([3, 0], [1.0, 0.0]) == 0.0
    for statistic in (0.5, 2.0, 9.0):  # with 2 degrees of freedom the survival function is exp(-x / 2)
        assert spec.chi_square_p_value(statistic, 2) == pytest.approx(math.exp(-statistic / 2), rel=1e-9)
    # 1 degree of freedom: P(Z^2 >= x) = erfc(sqrt(x / 2))
    assert spec.chi_square_p_value(3.84, 1) == pytest.approx(math.erfc(math.sqrt(3.84 / 2)), rel=1e-9)


def _p_value(tokens: list[int], probs: torch.Tensor) -> float:
    counts = torch.bincount(torch.tensor(tokens), minlength=probs.numel())
    expected = probs.double() / probs.double().sum()
    # Merge rare categories (expected count < 5) into one, as the chi-square approximation asks.
    keep = expected * len(tokens) >= 5
    observed = torch.cat([counts[keep].double(), counts[~keep].double().sum().view(1)])
    merged = torch.cat([expected[keep], expected[~keep].sum().view(1)])
    if float(merged[-1]) == 0:
        observed, merged = observed[:-1], merged[:-1]
    statistic = spec.chi_square_statistic(observed, merged)
    return spec.chi_square_p_value(statistic, len(merged) - 1)


# ----- the speculative sampling rule -----------------------------------------------------------------------


VOCAB, K, POSITIONS = 6, 3, 4


def _distributions(seed: int, rows: int, sharpness: float = 2.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.softmax(sharpness * torch.randn(rows, VOCAB, generator=generator, dtype=torch.float64), dim=-1)


TARGET = _distributions(1, POSITIONS + K + 1)  # p_t: the target's distribution at absolute position t
DRAFT = _distributions(2, POSITIONS + K + 1)   # q_t: the drafter's


def _generate(verify, num_runs: int, seed: int) -> list[list[int]]:
    """``num_runs`` speculative generations of POSITIONS tokens each; drafts drawn from q, rounds verified."""
    generator = torch.Generator().manual_seed(seed)
    runs = []
    with one_thread():  # module fixtures start before the autouse one-thread fixture
        return _generate_runs(verify, num_runs, generator, runs)


def _generate_runs(verify, num_runs, generator, runs):
    for _ in range(num_runs):
        tokens: list[int] = []
        while len(tokens) < POSITIONS:
            t = len(tokens)
            drafts = torch.multinomial(DRAFT[t : t + K], 1, generator=generator)[:, 0].tolist()
            uniforms = torch.rand(K + 1, generator=generator, dtype=torch.float64)
            emitted = verify(drafts, DRAFT[t : t + K], TARGET[t : t + K + 1], uniforms[:K], float(uniforms[K]))
            assert 1 <= len(emitted) <= K + 1
            tokens.extend(emitted)
        runs.append(tokens[:POSITIONS])
    return runs


@pytest.fixture(scope="module")
def reference_runs():
    return _generate(spec.verify_draft, num_runs=2000, seed=0)


@pytest.mark.parametrize("position", range(POSITIONS))
def test_each_emitted_token_follows_the_target_distribution(reference_runs, position):
    tokens = [run[position] for run in reference_runs]
    assert _p_value(tokens, TARGET[position]) > P_VALUE_FLOOR


def test_consecutive_tokens_are_jointly_distributed_like_the_target(reference_runs):
    # The target here ignores context, so tokens 0 and 1 must be independent with marginals p_0, p_1.
    pairs = [run[0] * VOCAB + run[1] for run in reference_runs]
    assert _p_value(pairs, torch.outer(TARGET[0], TARGET[1]).flatten()) > P_VALUE_FLOOR


def _resample_from_target(drafts, q, p, accept, uniform):
    keep = spec.acceptance_probabilities(drafts, q, p)
    for i, token in enumerate(drafts):
        if float(accept[i]) >= float(keep[i]):
            return drafts[:i] + [spec.sample_with_uniform(p[i], uniform)]  # bug: p, not the residual
    return drafts + [spec.sample_with_uniform(p[len(drafts)], uniform)]


def _keep_every_draft(drafts, q, p, accept, uniform):
    return drafts + [spec.sample_with_uniform(p[len(drafts)], uniform)]  # bug: no acceptance test at all


@pytest.mark.parametrize("wrong_verify", [_resample_from_target, _keep_every_draft])
def test_the_chi_square_test_rejects_a_wrong_sampler(wrong_verify):
    runs = _generate(wrong_verify, num_runs=1000, seed=0)
    assert _p_value([run[0] for run in runs], TARGET[0]) < 1e-6


def test_acceptance_probabilities_and_residual_by_hand():
    p = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    q = torch.tensor([[0.25, 0.5, 0.25], [0.0, 1.0, 0.0]])
    # draft 0 is token 0: min(1, 0.5 / 0.25) = 1; draft 1 is token 1: 0.1 / 1.0
    torch.testing.assert_close(spec.acceptance_probabilities([0, 1], q, torch.cat([p, p[:1]])),
                               torch.tensor([1.0, 0.1]))
    # max(p - q, 0) = [0.25, 0, 0] -> [1, 0, 0]
    torch.testing.assert_close(spec.residual_distribution(p[0], q[0]), torch.tensor([1.0, 0.0, 0.0]))
    torch.testing.assert_close(spec.residual_distribution(p[1], q[1]), torch.tensor([0.1, 0.0, 0.8]) / 0.9)
    torch.testing.assert_close(spec.residual_distribution(p[0], p[0]), p[0])  # nothing left: p itself


def test_sample_with_uniform_is_an_inverse_cdf():
    probs = torch.tensor([0.0, 0.5, 0.0, 0.25, 0.25])
    assert [spec.sample_with_uniform(probs, u) for u in (0.0, 0.49, 0.5, 0.74, 0.75, 0.999999)] == [1, 1, 3, 3, 4, 4]
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        spec.sample_with_uniform(probs, 1.0)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**16), st.integers(0, 5))
def test_one_hot_distributions_make_verify_draft_greedy(seed, num_drafts):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(num_drafts + 1, VOCAB, generator=generator)
    best = logits.argmax(dim=-1)
    # Drafts that follow the argmax for a while, then (maybe) stray.
    drafts = [int(best[i]) if torch.rand(1, generator=generator) < 0.7 else int((best[i] + 1) % VOCAB)
              for i in range(num_drafts)]
    one_hot_p = torch.nn.functional.one_hot(best, VOCAB).double()
    one_hot_q = torch.nn.functional.one_hot(torch.tensor(drafts, dtype=torch.long), VOCAB).double().reshape(num_drafts, VOCAB)
    got = spec.verify_draft(drafts, one_hot_q, one_hot_p, torch.rand(num_drafts, generator=generator),
                            float(torch.rand(1, generator=generator)))
    assert got == spec.greedy_verify(drafts, logits)


def test_verify_draft_keeps_all_and_adds_the_bonus_token():
    p = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    q = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    assert spec.verify_draft([1, 0], q, p, torch.tensor([0.99, 0.99]), 0.5) == [1, 0, 1]


# ----- drafts and their payoff --------------------------------------------------------------------------------


def test_ngram_draft_by_hand():
    text = [5, 6, 7, 8, 1, 2, 5, 6, 7]
    assert spec.ngram_draft(text, 3) == [8, 1, 2]               # "5 6 7" was followed by 8 1 2
    assert spec.ngram_draft(text, 10) == [8, 1, 2, 5, 6, 7]     # up to the end of the text
    assert spec.ngram_draft([1, 2, 3, 9, 2, 3, 4, 2, 3], 2) == [4, 2]  # the most recent "2 3" wins
    assert spec.ngram_draft([1, 2, 3, 4], 3) == []              # nothing recurs
    assert spec.ngram_draft([4, 4, 4], 2) == [4]                # the ending itself does not count
    assert spec.ngram_draft([1, 2, 9, 2], 2, max_ngram=3) == [9, 2]  # falls back to a 1-gram
    assert spec.ngram_draft([1, 2, 9, 2], 2, min_ngram=2) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=40), st.integers(0, 6))
def test_ngram_draft_continues_an_earlier_occurrence_of_the_ending(tokens, k):
    drafts = spec.ngram_draft(tokens, k)
    assert len(drafts) <= k
    if drafts:
        n_found = [n for n in range(3, 0, -1)
                   if any(tokens[s : s + n] == tokens[-n:] and tokens[s + n : s + n + k] == drafts
                          for s in range(len(tokens) - n))]
        assert n_found


@pytest.mark.parametrize("alpha, k", [(0.0, 4), (0.6, 1), (0.8, 4), (0.95, 7), (1.0, 3)])
def test_expected_tokens_per_step_matches_a_simulation(alpha, k):
    rng = random.Random(0)
    rounds = 20_000
    emitted = 0
    for _ in range(rounds):
        kept = 0
        while kept < k and rng.random() < alpha:
            kept += 1
        emitted += kept + 1
    assert spec.expected_tokens_per_step(alpha, k) == pytest.approx(emitted / rounds, rel=0.02)


def test_speculative_speedup_formula():
    assert spec.speculative_speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2, rel=1e-4)
    assert spec.speculative_speedup(0.0, 3, 0.0) == pytest.approx(1.0)
    assert spec.speculative_speedup(1.0, 4, 0.5, verify_cost=1.0) == pytest.approx(5 / 3)


@pytest.fixture(scope="module")
def tiny():
    config = tiny_config(vocab_size=40, max_position_embeddings=256, bos_token_id=None, eos_token_id=None)
    weights = {name: tensor.double() for name, tensor in random_weights(config, seed=0).items()}
    return LlamaModel(config, weights).eval()


@pytest.fixture(scope="module")
def tiny_int4(tiny):
    return quantize_model(tiny, "int4", kernel="dequantize")


def _repetitive_prompts(seed: int, count: int, vocab: int = 8) -> list[list[int]]:
    """Prompts over a few token ids, so n-grams recur and drafts get accepted (and rejected)."""
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randrange(1, 50))] for _ in range(count)]


def test_speculative_generate_equals_greedy_generate(tiny, tiny_int4):
    for prompt in _repetitive_prompts(1, 5):
        expected = greedy_generate(tiny, prompt, 25)
        stats = spec.SpeculationStats()
        ngram = spec.speculative_generate(tiny, prompt, 25, drafter=lambda ids, k: spec.ngram_draft(ids, k),
                                          num_draft_tokens=4, stats=stats)
        assert ngram == expected
        assert stats.num_emitted_tokens == len(expected) - 1 and stats.num_accepted_tokens <= stats.num_drafted_tokens
        drafted = spec.speculative_generate(tiny, prompt, 25, drafter=spec.ModelDrafter(tiny_int4), num_draft_tokens=3)
        assert drafted == expected


# ----- speculation inside the engine --------------------------------------------------------------------------


GREEDY = SamplingParams(temperature=0, max_tokens=24)


def _config(method: str, k: int, draft_model=None) -> spec.SpeculativeConfig:
    return spec.SpeculativeConfig(method=method, num_draft_tokens=k, draft_model=draft_model if method == "self" else None)


ENGINE_OPTIONS = [
    {},
    {"block_size": 4, "num_blocks": 26, "max_num_seqs": 6, "max_num_batched_tokens": 16},  # preemption, chunking
    {"block_size": 4, "num_blocks": 40, "enable_prefix_caching": False, "max_num_seqs": 8, "max_num_batched_tokens": 24},
]


@pytest.mark.parametrize("options", ENGINE_OPTIONS)
@pytest.mark.parametrize("method", spec.METHODS)
def test_engine_speculative_greedy_equals_plain_greedy(tiny, tiny_int4, options, method):
    prompts = _repetitive_prompts(2, 10)
    prompts += [prompts[0] + [1, 2, 3]] * 2  # shared prefixes: prefix-cache hits
    plain = LLMEngine(tiny, ByteTokenizer(), **options).generate(prompts, GREEDY)
    engine = LLMEngine(tiny, ByteTokenizer(), speculative=_config(method, 3, tiny_int4), **options)
    outputs = engine.generate(prompts, GREEDY)
    assert [o.token_ids for o in outputs] == [o.token_ids for o in plain]
    assert engine.stats.num_drafted_tokens > 0 and 0 < engine.stats.num_accepted_tokens <= engine.stats.num_drafted_tokens
    assert engine.stats.num_generated_tokens == sum(len(o.token_ids) for o in outputs)
    assert engine.allocator.num_free_blocks == engine.allocator.num_blocks
    if options.get("num_blocks") == 26:
        assert engine.stats.num_preemptions > 0 and engine.stats.num_prefix_cached_tokens > 0


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), k=st.integers(1, 5), block_size=st.sampled_from([2, 4, 8]),
       extra_blocks=st.integers(0, 20), budget=st.integers(8, 40), method=st.sampled_from(spec.METHODS))
def test_engine_speculative_greedy_equals_plain_on_random_workloads(tiny, tiny_int4, seed, k, block_size,
                                                                     extra_blocks, budget, method):
    rng = random.Random(seed)
    prompts = _repetitive_prompts(seed, rng.randrange(1, 8), vocab=rng.choice([4, 8, 40]))
    params = [SamplingParams(temperature=0, max_tokens=rng.randrange(1, 20)) for _ in prompts]
    longest = max(len(p) + q.max_tokens for p, q in zip(prompts, params))
    options = {"block_size": block_size, "num_blocks": -(-longest // block_size) + extra_blocks,
               "max_num_seqs": rng.randrange(1, 6), "max_num_batched_tokens": budget}
    plain = LLMEngine(tiny, ByteTokenizer(), **options).generate(prompts, params)
    engine = LLMEngine(tiny, ByteTokenizer(), speculative=_config(method, k, tiny_int4), **options)
    assert [o.token_ids for o in engine.generate(prompts, params)] == [o.token_ids for o in plain]
    assert engine.allocator.num_free_blocks == engine.allocator.num_blocks


def test_engine_gives_back_rejected_slots_after_every_step(tiny):
    engine = LLMEngine(tiny, ByteTokenizer(), block_size=4, num_blocks=64, max_num_batched_tokens=32,
                       speculative=_config("ngram", 4))
    for prompt in _repetitive_prompts(3, 6):
        engine.add_request(prompt, GREEDY)
    while engine.has_unfinished():
        engine.step()
        for request in engine.scheduler.running:
            if request.num_computed_tokens < request.num_tokens - 1:
                continue  # a prompt in chunked prefill holds slots for all its tokens
            assert request.num_computed_tokens == request.num_tokens - 1
            # Only the newest token lacks KV; it is the one without a slot (the next decode reserves it).
            assert engine.allocator.num_slots(request.request_id) == request.num_tokens - 1
            assert len(engine.allocator.block_table(request.request_id)) == engine.allocator.blocks_needed(request.num_tokens - 1)


def test_engine_stops_inside_accepted_drafts_like_plain(tiny):
    prompts = [[1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2], [5, 6, 5, 6, 5, 6, 5]]
    cases = [SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[3]),
             SamplingParams(temperature=0, max_tokens=7),
             SamplingParams(temperature=0, max_tokens=20, stop=["\x03\x01"])]
    for params in cases:
        plain = LLMEngine(tiny, ByteTokenizer()).generate(prompts, params)
        speculative = LLMEngine(tiny, ByteTokenizer(), speculative=_config("ngram", 5)).generate(prompts, params)
        for a, b in zip(speculative, plain):
            assert (a.token_ids, a.text, a.finish_reason) == (b.token_ids, b.text, b.finish_reason)


def test_engine_streams_several_tokens_per_step_and_aborts_cleanly(tiny):
    engine = LLMEngine(tiny, ByteTokenizer(), speculative=_config("ngram", 4))
    request_id = engine.add_request([1, 2, 3, 4] * 6, GREEDY)
    streamed = []
    while engine.has_unfinished():
        for output in engine.step():
            streamed.extend(output.new_token_ids)
    plain = LLMEngine(tiny, ByteTokenizer()).generate([[1, 2, 3, 4] * 6], GREEDY)[0]
    assert streamed == plain.token_ids
    assert engine.stats.num_steps < len(streamed)  # some step emitted more than one token
    engine.add_request([1, 2, 3, 4] * 6, GREEDY, request_id="a")
    engine.step()
    engine.step()
    assert engine.abort("a")
    assert [o.finish_reason for o in engine.step()] == ["abort"]
    assert engine.allocator.num_free_blocks == engine.allocator.num_blocks
    assert request_id == "0"


def test_engine_sampled_speculation_follows_the_model_distribution():
    """Sampled requests verify with verify_draft (one-hot drafts); their second token keeps the model's law."""
    config = tiny_config(vocab_size=5, max_position_embeddings=64, bos_token_id=None, eos_token_id=None)
    weights = {name: tensor.double() for name, tensor in random_weights(config, seed=5).items()}
    model = LlamaModel(config, weights).eval()
    prompt = [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1]  # n-gram drafts for every continuation
    with torch.inference_mode():
        first = torch.softmax(model(torch.tensor(prompt))[-1], dim=-1)
        second = torch.stack([torch.softmax(model(torch.tensor(prompt + [t]))[-1], dim=-1) for t in range(5)])
    joint = (first[:, None] * second).flatten()
    engine = LLMEngine(model, ByteTokenizer(), max_num_seqs=256, max_num_batched_tokens=4096,
                       speculative=_config("ngram", 2))
    params = [SamplingParams(temperature=1.0, max_tokens=3, seed=seed) for seed in range(1200)]
    outputs = engine.generate([prompt] * len(params), params)
    assert engine.stats.num_drafted_tokens > 0 and engine.stats.num_accepted_tokens > 0
    pairs = [o.token_ids[0] * 5 + o.token_ids[1] for o in outputs]
    assert _p_value(pairs, joint) > P_VALUE_FLOOR


def test_engine_refuses_what_speculation_cannot_serve(tiny):
    from course_lib.paged import BlockAllocator
    from course_lib.scheduler import Scheduler, SchedulerConfig

    allocator = BlockAllocator(32, 16)
    with pytest.raises(ValueError, match="course's Scheduler"):
        LLMEngine(tiny, ByteTokenizer(), allocator=allocator, scheduler=Scheduler(SchedulerConfig(), allocator),
                  speculative=_config("ngram", 2))

    class NoRelease:
        def __init__(self):
            self._inner = BlockAllocator(32, 16)
            self.num_blocks, self.block_size = 32, 16

        def __getattr__(self, name):
            if name == "release_slots":
                raise AttributeError(name)
            return getattr(self._inner, name)

    with pytest.raises(ValueError, match="release_slots"):
        LLMEngine(tiny, ByteTokenizer(), allocator=NoRelease(), speculative=_config("ngram", 2))
    with pytest.raises(ValueError, match="method"):
        spec.SpeculativeConfig(method="medusa")
    with pytest.raises(ValueError, match="num_draft_tokens"):
        spec.SpeculativeConfig(num_draft_tokens=0)


def test_locked_references_need_the_students_functions(tiny, monkeypatch):
    monkeypatch.setattr(spec, "is_locked", lambda lab: True)
    with pytest.raises(RuntimeError, match="commit_fn"):
        LLMEngine(tiny, ByteTokenizer(), speculative=_config("ngram", 2))
    with pytest.raises(RuntimeError, match="draft_fn"):
        LLMEngine(tiny, ByteTokenizer(), speculative=spec.SpeculativeConfig("ngram", 2, commit_fn=spec.commit_verified))
    config = spec.SpeculativeConfig("ngram", 2, commit_fn=spec.commit_verified, draft_fn=spec.ngram_draft)
    outputs = LLMEngine(tiny, ByteTokenizer(), speculative=config).generate([[1, 2, 1, 2, 1]], GREEDY)
    assert outputs[0].token_ids == greedy_generate(tiny, [1, 2, 1, 2, 1], 24)


def test_commit_verified_by_hand():
    # Last token at position 10, drafts at 11..13; two kept, then the correction 9.
    assert spec.commit_verified(10, [4, 5, 6], 2, 9) == ([4, 5, 9], 13, 1)
    assert spec.commit_verified(10, [4, 5, 6], 3, 7) == ([4, 5, 6, 7], 14, 0)   # all kept: bonus token
    assert spec.commit_verified(10, [4, 5, 6], 0, 8) == ([8], 11, 3)
    assert spec.commit_verified(0, [], 0, 3) == ([3], 1, 0)


def test_engine_rejects_a_commit_it_cannot_apply(tiny):
    def claims_the_newest_token_ran(start, drafts, accepted, next_token):
        tokens, computed, free = spec.commit_verified(start, drafts, accepted, next_token)
        return tokens, computed + 1, free

    config = spec.SpeculativeConfig("ngram", 3, commit_fn=claims_the_newest_token_ran)
    with pytest.raises(ValueError, match="has not run yet"):
        LLMEngine(tiny, ByteTokenizer()).generate  # noqa: B018 - the engine below is the one under test
        LLMEngine(tiny, ByteTokenizer(), speculative=config).generate([[1, 2, 1, 2, 1, 2]], GREEDY)


@pytest.mark.slow
def test_smollm2_engine_speculative_greedy_equals_plain(smollm2):
    model, tokenizer = smollm2
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": "Repeat exactly: the quick brown fox jumps over the lazy dog."}]),
        tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}]),
        "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    ]
    params = SamplingParams(temperature=0, max_tokens=24)
    plain = LLMEngine(model, tokenizer, num_blocks=64).generate(prompts, params)
    engine = LLMEngine(model, tokenizer, num_blocks=64, speculative=spec.SpeculativeConfig("ngram", 4))
    outputs = engine.generate(prompts, params)
    assert [o.token_ids for o in outputs] == [o.token_ids for o in plain]
    assert engine.stats.num_accepted_tokens > 0
    assert engine.stats.num_steps < LLMEngine(model, tokenizer, num_blocks=64).stats.num_steps + sum(
        len(o.token_ids) for o in plain)
