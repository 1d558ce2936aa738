"""The engine: requests in, tokens out, one scheduled batch at a time.

One ``step()``:

1. ``scheduler.schedule()`` picks which tokens of which requests run (blocks already reserved);
2. the model runs them as one flat batch over the paged KV cache (``course_lib.model_runner``);
3. the sampler draws one token for every request whose chunk reached its end;
4. ``scheduler.update()`` appends the tokens, finishes requests that hit eos, a stop token,
   max_tokens or the context length, and frees their blocks;
5. the engine turns the new tokens into text (stop strings end a request here) and reports them.

With ``speculative=SpeculativeConfig(...)`` (``course_lib.speculative``) each decode also reserves
lookahead slots, a drafter fills them between steps 1 and 2, the forward verifies every request's
drafts at once, and step 4 appends each request's kept drafts plus one token and gives back the
slots of rejected drafts.

``generate(prompts, params)`` adds every prompt and steps until all are done. ``add_request`` +
``step`` is the streaming interface: each step returns the new tokens and text of every request
that got one.

The allocator, scheduler and sampler are arguments, so a student's own can serve the real model:
an allocator needs the members of ``course_lib.paged.AllocatorProtocol``, a scheduler those of
``course_lib.scheduler.SchedulerProtocol`` (it is handed ``course_lib.scheduler.Request`` objects),
a sampler is ``f(logits [num_seqs, vocab], params, generators) -> token ids [num_seqs]``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from course_lib.detokenizer import IncrementalDetokenizer
from course_lib.metrics import RequestMetrics
from course_lib.model_runner import AttentionBackend, ModelRunner, check_attention_backend
from course_lib.paged import AllocatorProtocol, BlockAllocator, PagedKVCache
from course_lib.sampling import SamplingParams, make_generator, sample
from course_lib.scheduler import Request, RequestStatus, Scheduler, SchedulerConfig, SchedulerOutput, SchedulerProtocol

__all__ = ["DEFAULT_KV_CACHE_MEMORY_BYTES", "EngineStats", "LLMEngine", "RequestOutput", "StepOutput"]

DEFAULT_KV_CACHE_MEMORY_BYTES = 512 * 2**20
"""KV pool size when ``num_blocks=None``: 512 MiB holds about 11,600 tokens of SmolLM2 in fp32."""


@dataclass(frozen=True)
class StepOutput:
    """What one step produced for one request (for streaming)."""

    request_id: Any
    new_token_ids: list[int]
    new_text: str
    finished: bool
    finish_reason: str | None  # "stop", "length", "abort" once finished


@dataclass
class RequestOutput:
    """The result of one prompt: generated tokens only (no prompt), text, why it ended, timings."""

    request_id: Any
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    metrics: RequestMetrics


@dataclass
class EngineStats:
    """Counters since the engine was built: what the scheduler really did."""

    num_steps: int = 0
    num_batched_tokens: int = 0
    num_generated_tokens: int = 0
    num_preemptions: int = 0
    num_prefix_cached_tokens: int = 0
    num_partial_prefill_chunks: int = 0  # prefill chunks that did not reach the end of their prompt
    num_drafted_tokens: int = 0  # speculative decoding: tokens proposed by the drafter and verified
    num_accepted_tokens: int = 0  # ... and the drafted tokens the verification kept

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens (None before any draft)."""
        return self.num_accepted_tokens / self.num_drafted_tokens if self.num_drafted_tokens else None


@dataclass
class _LiveRequest:
    """Engine-side state of an unfinished request: its detokenizer and random generator."""

    request: Request
    detokenizer: IncrementalDetokenizer
    generator: torch.Generator | None
    text_parts: list[str] = field(default_factory=list)


class LLMEngine:
    """Continuous-batching inference over a paged KV cache.

    model: ``LlamaModel`` (``course_lib.model.load_smollm2``); tokenizer: ``BPETokenizer``.
    block_size, num_blocks: the KV pool. ``num_blocks=None`` sizes it from ``kv_cache_memory_bytes``
    (default 512 MiB), capped at what ``max_num_seqs`` full-context sequences could ever use.
    max_num_seqs, max_num_batched_tokens, enable_chunked_prefill, policy: see ``SchedulerConfig``.
    enable_prefix_caching: reuse the KV of full blocks shared with earlier prompts.
    attention_backend: "torch" (SDPA), "naive", "flash" (the prefill attention of
    ``course_lib.attention``), "triton" (the paged-attention kernels, for a GPU), or your own
    kernels: an object with ``decode(q, k_cache, v_cache, block_tables, seq_lens, scale)`` and
    optionally ``store(k, v, k_cache, v_cache, slot_mapping)`` (``course_lib.model_runner.AttentionBackend``).
    allocator / scheduler / sampler: replacements for the reference parts. A scheduler needs the
    allocator it was built with to be passed too, since the engine reads block tables from it;
    with an allocator given, block_size, num_blocks and enable_prefix_caching are the allocator's.
    kv_cache_memory_bytes: the memory budget that sizes the pool when num_blocks is None.
    max_model_len: context length (default: the model's ``max_position_embeddings``).
    speculative: a ``course_lib.speculative.SpeculativeConfig`` to draft and verify tokens (needs the
    course's scheduler; the allocator must have ``release_slots``). With temperature 0 the outputs
    are the same as without it.

    Serving with your own parts::

        allocator = MyAllocator(num_blocks=256, block_size=16)
        scheduler = MyScheduler(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=256), allocator)
        engine = LLMEngine(model, tokenizer, allocator=allocator, scheduler=scheduler)
        outputs = engine.generate(["Hello!"], SamplingParams(temperature=0, max_tokens=20))
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        block_size: int = 16,
        num_blocks: int | None = None,
        max_num_seqs: int = 32,
        max_num_batched_tokens: int = 1024,
        enable_prefix_caching: bool = True,
        enable_chunked_prefill: bool = True,
        policy: str = "fcfs",
        attention_backend: str | AttentionBackend = "torch",
        scheduler: SchedulerProtocol | None = None,
        allocator: AllocatorProtocol | None = None,
        sampler: Callable[..., torch.Tensor] | None = None,
        kv_cache_memory_bytes: int = DEFAULT_KV_CACHE_MEMORY_BYTES,
        max_model_len: int | None = None,
        speculative=None,
    ) -> None:
        check_attention_backend(attention_backend)
        config = model.config
        self.model = model
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len or config.max_position_embeddings
        if not 2 <= self.max_model_len <= config.max_position_embeddings:
            raise ValueError(f"max_model_len must be in [2, {config.max_position_embeddings}], got {max_model_len}")
        dtype, device = _dtype_and_device(model)

        if speculative is not None and scheduler is not None:
            raise ValueError("speculative decoding needs the course's Scheduler (it reserves lookahead slots "
                             "for drafts); leave scheduler=None")
        if scheduler is not None and allocator is None:
            raise ValueError(
                "a custom scheduler needs its allocator passed too: "
                "LLMEngine(model, tokenizer, allocator=a, scheduler=MyScheduler(config, a))"
            )
        if allocator is None:
            if num_blocks is None:
                num_blocks = self._blocks_for_budget(config, block_size, dtype, max_num_seqs, kv_cache_memory_bytes)
            allocator = BlockAllocator(num_blocks, block_size, enable_prefix_caching=enable_prefix_caching)
        elif num_blocks is not None and num_blocks != allocator.num_blocks:
            raise ValueError(f"num_blocks={num_blocks} disagrees with the allocator's {allocator.num_blocks}; pass one")
        if scheduler is None:
            scheduler_config = SchedulerConfig(
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens,
                enable_chunked_prefill=enable_chunked_prefill,
                policy=policy,
                max_model_len=self.max_model_len,
                num_lookahead_slots=0 if speculative is None else speculative.num_draft_tokens,
            )
            scheduler = Scheduler(scheduler_config, allocator)
        self.allocator = allocator
        self.scheduler = scheduler
        self.sampler = sampler or sample
        self.kv_cache = PagedKVCache(config, allocator.num_blocks, allocator.block_size, dtype, device)
        self.runner = ModelRunner(model, self.kv_cache, attention_backend)
        self.speculator = None
        if speculative is not None:
            from course_lib.speculative import Speculator

            if not callable(getattr(allocator, "release_slots", None)):
                raise ValueError("speculative decoding needs an allocator with release_slots (to give back the "
                                 "slots of rejected drafts), like course_lib.paged.BlockAllocator")
            self.speculator = Speculator(speculative, model, self.kv_cache, attention_backend)
        self.attention_backend = attention_backend
        self.eos_token_id = getattr(tokenizer, "eos_token_id", None)
        if self.eos_token_id is None:
            self.eos_token_id = config.eos_token_id
        self.stats = EngineStats()
        self.last_plan: SchedulerOutput | None = None
        """The plan of the latest step that ran the model (read-only: for monitors such as the server's
        engine view, which show which chunk of which request ran and who was preempted)."""
        self._live: dict[Any, _LiveRequest] = {}
        self._aborted_outputs: list[StepOutput] = []
        self._request_counter = itertools.count()

    def _blocks_for_budget(self, config, block_size: int, dtype, max_num_seqs: int, memory_bytes: int) -> int:
        """Blocks that fit in ``memory_bytes``, but no more than max_num_seqs full contexts need."""
        # Written out: PagedKVCache.bytes_per_block answers part of a Lab 0.1 exercise and is a stub in the
        # student kit until that lab unlocks; the engine must size its pool in every kit.
        element_size = torch.empty((), dtype=dtype).element_size()
        bytes_per_block = 2 * config.num_layers * block_size * config.num_kv_heads * config.head_dim * element_size
        if memory_bytes < bytes_per_block:
            raise ValueError(f"kv_cache_memory_bytes={memory_bytes} holds no block (one block is {bytes_per_block} bytes)")
        most_ever_used = max_num_seqs * -(-self.max_model_len // block_size)
        return min(memory_bytes // bytes_per_block, most_ever_used)

    # ----- adding requests -------------------------------------------------------------------

    def add_request(self, prompt, params: SamplingParams | None = None, request_id=None, priority: int = 0):
        """Queue one prompt (a string or a list of token ids); returns its request id."""
        request = self._make_request(prompt, params, request_id, priority)
        self._enqueue(request)
        return request.request_id

    def _make_request(self, prompt, params, request_id, priority) -> Request:
        """Validate everything about one request without touching the engine's state."""
        params = SamplingParams() if params is None else params
        max_tokens = getattr(params, "max_tokens", None)
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"params.max_tokens must be an integer >= 1, got {max_tokens!r}")
        prompt_token_ids = self._prompt_token_ids(prompt)
        if len(prompt_token_ids) >= self.max_model_len:
            raise ValueError(
                f"prompt has {len(prompt_token_ids)} tokens; the context is {self.max_model_len}, "
                f"so a prompt may have at most {self.max_model_len - 1}"
            )
        longest = min(len(prompt_token_ids) + max_tokens, self.max_model_len)
        if self.allocator.blocks_needed(longest) > self.allocator.num_blocks:
            raise ValueError(
                f"a request of {len(prompt_token_ids)} prompt tokens and max_tokens={max_tokens} may need "
                f"{self.allocator.blocks_needed(longest)} KV blocks; the pool has {self.allocator.num_blocks}"
            )
        if request_id is None:
            request_id = str(next(self._request_counter))
        if request_id in self._live:
            raise ValueError(f"request_id {request_id!r} is already in use")
        return Request(request_id, prompt_token_ids, params, eos_token_id=self.eos_token_id, priority=priority)

    def _prompt_token_ids(self, prompt) -> list[int]:
        if isinstance(prompt, str):
            if not prompt:
                raise ValueError("prompt is an empty string")
            token_ids = self.tokenizer.encode(prompt)
        elif isinstance(prompt, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            token_ids = list(prompt)
            vocab_size = self.model.config.vocab_size
            if any(not 0 <= t < vocab_size for t in token_ids):
                raise ValueError(f"prompt token ids must be in [0, {vocab_size})")
        else:
            raise TypeError(f"a prompt must be a string or a list of token ids, got {type(prompt).__name__}")
        if not token_ids:
            raise ValueError("prompt has no tokens")
        return token_ids

    def _enqueue(self, request: Request) -> None:
        self.scheduler.add(request)
        detokenizer = IncrementalDetokenizer(self.tokenizer.decode_token_bytes, request.params.stop)
        self._live[request.request_id] = _LiveRequest(request, detokenizer, make_generator(request.params.seed))

    # ----- running ---------------------------------------------------------------------------

    def has_unfinished(self) -> bool:
        """True while any request waits or runs (or an abort has not been reported by ``step`` yet)."""
        return self.scheduler.has_unfinished() or bool(self._aborted_outputs)

    def abort(self, request_id) -> bool:
        """Cancel a request; the next ``step`` reports it finished with reason "abort".

        Returns False if no unfinished request has that id.
        """
        live = self._live.pop(request_id, None)
        if live is None:
            return False
        self.scheduler.finish_request(request_id, RequestStatus.FINISHED_ABORTED)
        live.request.metrics.record_finish(time.perf_counter())
        text = live.detokenizer.flush()
        live.text_parts.append(text)
        self._aborted_outputs.append(StepOutput(request_id, [], text, True, "abort"))
        return True

    @torch.inference_mode()
    def step(self) -> list[StepOutput]:
        """Run one scheduled batch; return the new token (and text) of every request that got one."""
        outputs, self._aborted_outputs = self._aborted_outputs, []
        if not self.scheduler.has_unfinished():
            return outputs
        plan = self.scheduler.schedule()
        if plan.is_empty:
            raise RuntimeError(
                "the scheduler planned an empty step although requests are unfinished; "
                "it must schedule at least one token whenever has_unfinished() is True"
            )
        start_time = time.perf_counter()
        if plan.blocks_to_copy:
            self.kv_cache.copy_blocks(plan.blocks_to_copy)
        block_tables = [self.allocator.block_table(chunk.request.request_id) for chunk in plan.chunks]
        if self.speculator is not None:
            plan.chunks = self.speculator.propose(plan.chunks, block_tables, self.scheduler)
            # Unused lookahead slots went back to the pool: read the tables again.
            block_tables = [self.allocator.block_table(chunk.request.request_id) for chunk in plan.chunks]
        logits = self.runner.run(plan.chunks, block_tables)
        sampling_chunks = [chunk for chunk in plan.chunks if chunk.samples]
        requests = [chunk.request for chunk in sampling_chunks]
        params = [r.params for r in requests]
        generators = [self._live[r.request_id].generator for r in requests]
        num_tokens_before = [r.num_tokens for r in requests]
        if self.speculator is None:
            token_ids = self.sampler(logits, params, generators).tolist()
        else:
            drafted, accepted = self.speculator.num_drafted_tokens, self.speculator.num_accepted_tokens
            token_ids = self.speculator.sample(sampling_chunks, logits, self.sampler, params, generators)
            self.stats.num_drafted_tokens += self.speculator.num_drafted_tokens - drafted
            self.stats.num_accepted_tokens += self.speculator.num_accepted_tokens - accepted
        self.scheduler.update(plan, token_ids)
        now = time.perf_counter()

        for chunk in plan.chunks:
            chunk.request.metrics.record_scheduled(start_time)
        num_new_tokens = 0
        for request, before in zip(requests, num_tokens_before):
            output = self._emit(request, request.token_ids[before:], now)
            num_new_tokens += len(output.new_token_ids)
            outputs.append(output)
        self._count(plan, num_new_tokens)
        self.last_plan = plan
        return outputs

    def _count(self, plan, num_new_tokens: int) -> None:
        stats = self.stats
        stats.num_steps += 1
        stats.num_batched_tokens += plan.num_batched_tokens
        stats.num_generated_tokens += num_new_tokens
        stats.num_preemptions += len(plan.preempted)
        stats.num_prefix_cached_tokens += plan.num_cached_tokens
        stats.num_partial_prefill_chunks += sum(1 for chunk in plan.chunks if not chunk.samples)

    def _emit(self, request: Request, new_token_ids: list[int], now: float) -> StepOutput:
        """Detokenize the step's new tokens (one, or several with speculation), apply stop strings,
        and finish the request's bookkeeping."""
        live = self._live[request.request_id]
        # A token that stopped the request (eos, a stop token id) is its last and adds no text.
        stopped_by_token = request.status is RequestStatus.FINISHED_STOPPED
        pieces = []
        for index, token_id in enumerate(new_token_ids):
            request.metrics.record_token(now)
            if not (stopped_by_token and index == len(new_token_ids) - 1):
                pieces.append(live.detokenizer.add_token(token_id))
            if live.detokenizer.stopped:
                # A stop string ended the text here: later tokens of this step never happened.
                del request.token_ids[len(request.token_ids) - len(new_token_ids) + index + 1 :]
                new_token_ids = new_token_ids[: index + 1]
                if not request.is_finished:
                    self.scheduler.finish_request(request.request_id, RequestStatus.FINISHED_STOPPED)
                else:
                    # Finished by a later token of the same step (say max_tokens); the stop string came first.
                    request.status = RequestStatus.FINISHED_STOPPED
                break
        new_text = "".join(pieces)
        if request.is_finished:
            new_text += live.detokenizer.flush()
            request.metrics.record_finish(now)
            del self._live[request.request_id]
        live.text_parts.append(new_text)
        return StepOutput(request.request_id, list(new_token_ids), new_text, request.is_finished,
                          request.status.finish_reason)

    # ----- the batch interface ---------------------------------------------------------------

    def generate(self, prompts, params=None, *, use_tqdm: bool = False) -> list[RequestOutput]:
        """Generate for every prompt; returns one ``RequestOutput`` per prompt, in order.

        prompts: a string, a list of token ids, or a list of either. params: one SamplingParams for
        all prompts, or a list with one per prompt (None: ``SamplingParams()``). Everything is
        validated before any request is queued, so a bad prompt leaves the engine untouched.
        """
        if isinstance(prompts, str) or (
            isinstance(prompts, (list, tuple)) and prompts and all(isinstance(t, int) for t in prompts)
        ):
            prompts = [prompts]
        if not isinstance(prompts, (list, tuple)) or not prompts:
            raise ValueError("prompts must be a non-empty list of strings or token-id lists")
        if params is None or isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        elif not isinstance(params, (list, tuple)) or len(params) != len(prompts):
            got = len(params) if isinstance(params, (list, tuple)) else type(params).__name__
            raise ValueError(f"params must be one SamplingParams or a list of {len(prompts)} (one per prompt), got {got}")
        if self.has_unfinished():
            raise RuntimeError("generate() needs an idle engine; finish or abort the requests added with add_request")

        requests = [self._make_request(prompt, p, None, 0) for prompt, p in zip(prompts, params)]
        for request in requests:
            self._enqueue(request)
        lives = [self._live[r.request_id] for r in requests]
        progress = _progress_bar(len(requests)) if use_tqdm else None
        while self.has_unfinished():
            for output in self.step():
                if output.finished and progress is not None:
                    progress.update(1)
        if progress is not None:
            progress.close()
        return [
            RequestOutput(
                request_id=live.request.request_id,
                prompt_token_ids=list(live.request.prompt_token_ids),
                token_ids=live.request.output_token_ids,
                text="".join(live.text_parts),
                finish_reason=live.request.status.finish_reason,
                metrics=live.request.metrics,
            )
            for live in lives
        ]


def _dtype_and_device(model) -> tuple[torch.dtype, torch.device]:
    parameter = next(model.parameters(), None)
    dtype = getattr(model, "dtype", None) or (parameter.dtype if parameter is not None else torch.float32)
    device = getattr(model, "device", None) or (parameter.device if parameter is not None else torch.device("cpu"))
    return dtype, torch.device(device)


def _progress_bar(total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="requests", unit="req")
