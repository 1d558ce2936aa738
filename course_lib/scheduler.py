"""Continuous batching: which requests run in the next step, and how many of their tokens.

Every request is a list of tokens (prompt, then the tokens generated so far) of which the first
``num_computed_tokens`` already have their keys and values in the KV cache. One engine step runs
some tokens of some requests; a request whose run reaches its last token gets one new token sampled.
A *decode* is the case where exactly one token is left to run (the one sampled last step); a
*prefill* runs many. Both are the same thing to the scheduler: "run the next n tokens".

Each ``schedule()`` spends a token budget (``max_num_batched_tokens``):

1. running requests that sampled a token last step (decodes) first, one token each; a decode whose
   sequence needs a new block and finds none preempts the newest running request (its blocks are freed and
   it goes back to the front of the waiting queue; its generated tokens are kept and recomputed
   later, "preemption by recompute");
2. then the rest of running requests' prompts (chunked prefill in progress);
3. then waiting requests, oldest first (or by priority), admitted only while ``max_num_seqs`` and
   the allocator's ``can_allocate`` allow; a prompt longer than the remaining budget is split
   into chunks over several steps (chunked prefill).

``update(output, sampled_token_ids)`` is the bookkeeping after the model ran: advance
``num_computed_tokens``, append the sampled tokens, finish requests that hit a stop condition,
and free their blocks.

How many tokens each prefill gets in a step is one function, ``build_batch(decode_ids,
prefill_queue, token_budget, chunked)`` (decode-maximal batching, Lab 0.2 chapter 5): the
scheduler asks it to plan every step, and takes a student's version as an argument. The
scheduler keeps what only it can know: which decodes have a slot, which waiting request's blocks
fit, and ``max_num_seqs``. ``Scheduler`` is the reference answer of Lab 0.1 chapter 5.

Speculative decoding (``course_lib.speculative``) adds three small things: with
``num_lookahead_slots = k`` a decode also reserves up to k more slots (for drafted tokens, within the
token budget and only while free blocks allow, never by preempting); a chunk may carry
``draft_token_ids`` that run after its last token; and ``update`` accepts a ``VerifiedTokens`` for
such a chunk (several tokens at once, and slots to give back through ``release_slots``).
"""

from __future__ import annotations

import bisect
import enum
import itertools
import time
import warnings
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from course_lib.exercises import exercise, is_locked, unlock_hint
from course_lib.metrics import RequestMetrics
from course_lib.paged import AllocatorProtocol

__all__ = [
    "BatchPlan",
    "Request",
    "RequestStatus",
    "ScheduledChunk",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerOutput",
    "SchedulerProtocol",
    "build_batch",
    "is_legal_transition",
    "VerifiedTokens",
]

CHUNKED_PREFILL_LAB = "lab02-prefill-vs-decode"


class RequestStatus(enum.Enum):
    """Where a request is in its life. Finished states say why it finished."""

    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "finished_stopped"  # eos, a stop token or a stop string
    FINISHED_LENGTH = "finished_length"  # max_tokens or the model's context length
    FINISHED_ABORTED = "finished_aborted"  # cancelled by the user

    @property
    def is_finished(self) -> bool:
        return self in _FINISHED

    @property
    def finish_reason(self) -> str | None:
        """The reason the engine reports: "stop", "length" or "abort"; None while unfinished."""
        return _FINISH_REASON.get(self)


_FINISHED = {RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_ABORTED}
_FINISH_REASON = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
}
@exercise("lab01-text-to-tensors", "05_pipeline", "move")
def is_legal_transition(old: RequestStatus, new: RequestStatus) -> bool:
    """Whether the state machine has an arrow from ``old`` to ``new``; every other move is a scheduler bug.

    WAITING -> RUNNING or FINISHED_ABORTED; RUNNING -> PREEMPTED or any finished state; PREEMPTED ->
    RUNNING or FINISHED_ABORTED. Finished states never move again.
    """
    finished = {RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_ABORTED}
    legal = {
        RequestStatus.WAITING: {RequestStatus.RUNNING, RequestStatus.FINISHED_ABORTED},
        RequestStatus.RUNNING: {RequestStatus.PREEMPTED} | finished,
        RequestStatus.PREEMPTED: {RequestStatus.RUNNING, RequestStatus.FINISHED_ABORTED},
    }
    return new in legal.get(old, set())


@dataclass(eq=False)
class Request:
    """One generation request as the scheduler and engine see it.

    prompt_token_ids: the prompt. params: its SamplingParams (max_tokens, stop_token_ids,
    ignore_eos are read here). eos_token_id: the model's end-of-sequence id (None: never stops on eos).
    token_ids: prompt followed by the generated tokens. num_computed_tokens: leading tokens whose
    KV is in the cache. priority: lower runs first under the "priority" policy.
    arrival_order: the scheduler numbers requests as they are added (first come, first served).
    """

    request_id: Any
    prompt_token_ids: list[int]
    params: Any
    eos_token_id: int | None = None
    priority: int = 0
    arrival_time: float = field(default_factory=time.perf_counter)
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    num_preemptions: int = 0
    arrival_order: int = 0
    token_ids: list[int] = field(init=False)
    metrics: RequestMetrics = field(init=False)

    def __post_init__(self) -> None:
        self.prompt_token_ids = list(self.prompt_token_ids)
        self.token_ids = list(self.prompt_token_ids)
        self.metrics = RequestMetrics(arrival_time=self.arrival_time, num_prompt_tokens=len(self.prompt_token_ids))

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens."""
        return len(self.token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        """The generated tokens (a copy)."""
        return self.token_ids[len(self.prompt_token_ids) :]

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    @exercise("lab01-text-to-tensors", "05_pipeline", "move")
    def set_status(self, new_status: RequestStatus) -> None:
        """Move along the state machine; an illegal move (say FINISHED -> RUNNING) raises."""
        if not is_legal_transition(self.status, new_status):
            raise ValueError(f"request {self.request_id!r}: illegal transition {self.status.name} -> {new_status.name}")
        self.status = new_status

    @exercise("lab01-text-to-tensors", "05_pipeline", "scheduler")
    def stop_status(self, max_model_len: int) -> RequestStatus | None:
        """The finished state the last generated token puts the request in, or None to go on.

        Token-level stops only: eos (unless params.ignore_eos), params.stop_token_ids,
        params.max_tokens, and the context length. Stop *strings* need text; the engine checks them.
        """
        last = self.token_ids[-1]
        if last == self.eos_token_id and not self.params.ignore_eos:
            return RequestStatus.FINISHED_STOPPED
        if last in self.params.stop_token_ids:
            return RequestStatus.FINISHED_STOPPED
        if self.num_output_tokens >= self.params.max_tokens or self.num_tokens >= max_model_len:
            return RequestStatus.FINISHED_LENGTH
        return None


@dataclass(frozen=True)
class ScheduledChunk:
    """Tokens ``request.token_ids[start : start + num_tokens]`` run in this step.

    samples: True when the chunk reaches the request's last token, so the step samples a new token
    for it (always for a decode; for a prefill only its last chunk).
    num_lookahead_slots: slots reserved after a decode's token for drafted tokens (speculative decoding).
    draft_token_ids: drafted tokens that run after the request's last token: the chunk then covers
    positions start .. start + len(draft_token_ids) and every one of its rows gets logits.
    """

    request: Request
    start: int
    num_tokens: int
    samples: bool
    num_lookahead_slots: int = 0
    draft_token_ids: tuple[int, ...] = ()

    @property
    def token_ids(self) -> list[int]:
        """The tokens this chunk runs: the request's own, then its drafts."""
        end = self.start + self.num_tokens
        if not self.draft_token_ids:
            return self.request.token_ids[self.start : end]
        return (self.request.token_ids + list(self.draft_token_ids))[self.start : end]


@dataclass(frozen=True)
class VerifiedTokens:
    """What a speculative chunk produced, for ``Scheduler.update``: tokens to append (kept drafts and
    one more), how many leading tokens now have their KV computed, and how many of the chunk's slots
    held rejected drafts and go back to the pool."""

    token_ids: list[int]
    num_computed_tokens: int
    num_slots_to_free: int


@dataclass
class SchedulerOutput:
    """One step's plan: the chunks to run (decodes first), in the order the batch lays them out.

    preempted: requests preempted while planning this step. blocks_to_copy: (src, dst) block copies
    the engine must do before the forward (copy-on-write). num_cached_tokens: prefix-cache hits of
    the requests admitted in this step.
    """

    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)
    num_cached_tokens: int = 0

    @property
    def num_batched_tokens(self) -> int:
        return sum(chunk.num_tokens for chunk in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks


@runtime_checkable
class SchedulerProtocol(Protocol):
    """What ``LLMEngine`` calls on a scheduler, once per step: ``schedule``, run the model, ``update``."""

    def add(self, request: Request) -> None:
        """Queue a new request (status WAITING)."""
        ...

    def schedule(self) -> SchedulerOutput:
        """Plan the next step: which tokens of which requests run (blocks already reserved)."""
        ...

    def update(self, output: SchedulerOutput, sampled_token_ids: Sequence[int]) -> list[Request]:
        """After the forward: ``sampled_token_ids`` has one id per chunk with ``samples`` True, in order.

        Advance num_computed_tokens, append the tokens, finish requests that stop (freeing
        their blocks). Returns the requests that finished in this step.
        """
        ...

    def finish_request(self, request_id: Any, status: RequestStatus) -> Request | None:
        """Finish a waiting or running request from outside (abort, a stop string); free its blocks.

        Returns the request, or None if no unfinished request has that id.
        """
        ...

    def has_unfinished(self) -> bool:
        """True while any request waits or runs."""
        ...


BatchPlan = list[tuple[Hashable, int]]
"""One step's plan: ``(request_id, num_tokens)`` pairs, decodes first."""


@exercise("lab02-prefill-vs-decode", "05_beyond_the_basics", "build_batch")
def build_batch(decode_ids: Sequence[Hashable], prefill_queue: Sequence[tuple[Hashable, int]], token_budget: int,
                chunked: bool = True) -> BatchPlan:
    """Fill one step under decode-maximal batching: every decode first, then prompt tokens in queue order.

    decode_ids: the requests that decode this step (1 token each), in order. prefill_queue:
    ``(request_id, tokens left)`` pairs, oldest first. With ``chunked`` each prompt takes
    ``min(tokens left, budget left)`` while budget is left, so at most the last one is cut into a
    chunk; without it a prompt runs whole or not at all, and the first one that does not fit ends
    the batch (nobody overtakes it). Returns ``(request_id, num_tokens)`` pairs, none with 0 tokens.
    Raises ValueError when the decodes alone exceed ``token_budget``.
    """
    if not isinstance(token_budget, int) or isinstance(token_budget, bool) or token_budget < 1:
        raise ValueError(f"token_budget must be an integer >= 1, got {token_budget!r}")
    if len(decode_ids) > token_budget:
        raise ValueError(f"{len(decode_ids)} decodes do not fit in token_budget {token_budget}")
    batch: BatchPlan = [(request_id, 1) for request_id in decode_ids]
    budget = token_budget - len(decode_ids)
    for request_id, tokens_left in prefill_queue:
        if budget == 0:
            break
        if not chunked and tokens_left > budget:
            break  # the head of the line does not fit whole: it waits, and so does everyone behind it
        num_tokens = min(tokens_left, budget)
        batch.append((request_id, num_tokens))
        budget -= num_tokens
    return batch


_reference_build_batch = build_batch


def _check_plan(plan: Any, decode_ids: Sequence[Hashable], prefill_queue: Sequence[tuple[Hashable, int]],
                token_budget: int) -> BatchPlan:
    """The plan a build_batch returned, checked against what the engine can run; ValueError otherwise."""
    try:
        pairs = [(request_id, num_tokens) for request_id, num_tokens in plan]
    except (TypeError, ValueError):
        raise ValueError(f"build_batch must return a list of (request_id, num_tokens) pairs, got {plan!r}") from None
    expected_decodes = [(request_id, 1) for request_id in decode_ids]
    if pairs[: len(decode_ids)] != expected_decodes:
        raise ValueError(f"build_batch must start with every decode, one token each, in order: expected "
                         f"{expected_decodes}, got {pairs[: len(decode_ids)]}")
    tokens_left = dict(prefill_queue)
    seen = set()
    for request_id, num_tokens in pairs[len(decode_ids):]:
        if request_id not in tokens_left or request_id in seen:
            raise ValueError(f"build_batch planned {request_id!r}, which is not (or no longer) in the prefill queue")
        if not isinstance(num_tokens, int) or isinstance(num_tokens, bool) or not 1 <= num_tokens <= tokens_left[request_id]:
            raise ValueError(f"build_batch gave {request_id!r} {num_tokens!r} tokens; it has {tokens_left[request_id]} "
                             "left (1 at least)")
        seen.add(request_id)
    total = sum(num_tokens for _, num_tokens in pairs)
    if total > token_budget:
        raise ValueError(f"build_batch planned {total} tokens, more than the token budget ({token_budget})")
    return pairs


_POLICIES = ("fcfs", "priority")


@dataclass(frozen=True)
class SchedulerConfig:
    """Limits of one step and the admission policy.

    max_num_seqs: requests running at once (holding KV blocks).
    max_num_batched_tokens: tokens run in one step, all requests together (the token budget);
    must be >= max_num_seqs so every running decode fits in every step.
    enable_chunked_prefill: split prompts longer than the remaining budget over several steps;
    without it a prompt runs whole, so it must fit the budget.
    policy: "fcfs" (first come, first served) or "priority" (lower ``Request.priority`` first,
    then arrival order; preemption then picks the lowest priority running request).
    max_model_len: the context length; a request stops ("length") when it reaches it.
    num_lookahead_slots: extra slots a decode reserves for drafted tokens (speculative decoding; 0: off).
    """

    max_num_seqs: int = 32
    max_num_batched_tokens: int = 1024
    enable_chunked_prefill: bool = True
    policy: str = "fcfs"
    max_model_len: int = 8192
    num_lookahead_slots: int = 0

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                f"({self.max_num_seqs}) so every running request can decode in every step"
            )
        if self.policy not in _POLICIES:
            raise ValueError(f"policy must be one of {_POLICIES}, got {self.policy!r}")
        if not isinstance(self.enable_chunked_prefill, bool):
            raise TypeError(f"enable_chunked_prefill must be a bool, got {self.enable_chunked_prefill!r}")
        lookahead = self.num_lookahead_slots
        if not isinstance(lookahead, int) or isinstance(lookahead, bool) or lookahead < 0:
            raise ValueError(f"num_lookahead_slots must be an integer >= 0, got {lookahead!r}")


def _without_chunking(config: SchedulerConfig) -> SchedulerConfig:
    from dataclasses import replace

    return replace(config, enable_chunked_prefill=False)


@exercise("lab01-text-to-tensors", "05_pipeline", "scheduler")
class Scheduler:
    """Continuous batching with a token budget, chunked prefill and preemption by recompute.

    The waiting and running lists are both kept sorted by ``_order_key`` (arrival order, or
    priority then arrival), so "admit next" is the front of ``waiting`` and "preempt" is the back
    of ``running``: under FCFS the newest running request is the one that gives its blocks back.

    build_batch: the function that plans each step's tokens (``build_batch``'s signature); None
    takes this module's. Its plans are checked (every decode first, no more tokens than a request
    has left, the budget kept) and a wrong one raises ValueError.
    """

    def __init__(self, config: SchedulerConfig, allocator: AllocatorProtocol, *,
                 build_batch: Callable[..., Any] | None = None) -> None:
        if not isinstance(config, SchedulerConfig):
            raise TypeError(f"config must be a SchedulerConfig, got {type(config).__name__}")
        if build_batch is None and is_locked(CHUNKED_PREFILL_LAB):
            # Without Lab 0.2's reference, plan whole prompts (the rule of Lab 0.1's scheduler).
            if config.enable_chunked_prefill:
                warnings.warn("chunked prefill is off: it runs on build_batch, your exercise in Lab 0.2 chapter 5; "
                              "pass yours as Scheduler(config, allocator, build_batch=...), or wait: "
                              + unlock_hint(CHUNKED_PREFILL_LAB), stacklevel=2)
                config = _without_chunking(config)
        self.config = config
        self.allocator = allocator
        self.build_batch = build_batch
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self._requests: dict[Any, Request] = {}
        # Token slots the allocator holds for each running request. A request whose tokens outnumber
        # its slots has just sampled a token: it is a decode and needs one more slot.
        self._num_slots: dict[Any, int] = {}
        self._arrivals = itertools.count()
        self.num_preemptions = 0

    def _order_key(self, request: Request) -> tuple[int, ...]:
        if self.config.policy == "priority":
            return (request.priority, request.arrival_order)
        return (request.arrival_order,)

    # ----- the protocol ----------------------------------------------------------------------

    def add(self, request: Request) -> None:
        """Queue a request; raises ValueError if it could never run under this config and pool."""
        if request.request_id in self._requests:
            raise ValueError(f"request_id {request.request_id!r} is already queued or running")
        if request.status is not RequestStatus.WAITING or request.num_computed_tokens:
            raise ValueError(f"request {request.request_id!r} must be new (WAITING, nothing computed)")
        if request.num_tokens < 1:
            raise ValueError(f"request {request.request_id!r} has an empty prompt")
        if request.num_tokens >= self.config.max_model_len:
            raise ValueError(
                f"request {request.request_id!r}: prompt of {request.num_tokens} tokens leaves no room to generate "
                f"within max_model_len {self.config.max_model_len}"
            )
        if not self.config.enable_chunked_prefill and request.num_tokens > self.config.max_num_batched_tokens:
            raise ValueError(
                f"request {request.request_id!r}: prompt of {request.num_tokens} tokens exceeds "
                f"max_num_batched_tokens ({self.config.max_num_batched_tokens}); enable chunked prefill or raise the budget"
            )
        longest = min(request.num_tokens + request.params.max_tokens, self.config.max_model_len)
        if self.allocator.blocks_needed(longest) > self.allocator.num_blocks:
            raise ValueError(
                f"request {request.request_id!r} may grow to {longest} tokens = "
                f"{self.allocator.blocks_needed(longest)} blocks, more than the whole pool ({self.allocator.num_blocks})"
            )
        request.arrival_order = next(self._arrivals)
        self._requests[request.request_id] = request
        bisect.insort(self.waiting, request, key=self._order_key)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        """Plan one step: decodes, then running prefills, then new admissions, within the budget."""
        output = SchedulerOutput()
        budget = self.config.max_num_batched_tokens

        # 1. Decodes (the token sampled last step). Iterate by index: preemption removes from the back.
        decoding: list[Request] = []
        index = 0
        while index < len(self.running):
            request = self.running[index]
            if request.num_tokens > self._num_slots[request.request_id]:
                if not self._reserve_decode_slot(request, output):
                    break  # the request preempted itself: everything after it is gone too
                decoding.append(request)
            index += 1
        decode_ids = [request.request_id for request in decoding]
        # 1b. Speculative decoding: lookahead slots for drafts, only once every decode has its own slot
        # (so drafts never take a block another decode needed). They come out of the step's budget
        # before the planner shares what is left.
        lookahead: dict[Any, int] = {}
        if self.config.num_lookahead_slots:
            for request in decoding:
                spare = budget - len(decoding)
                lookahead[request.request_id] = self._reserve_lookahead_slots(request, output, spare)
                budget -= lookahead[request.request_id]

        # 2. Prefills in progress (their blocks were reserved at admission), oldest first.
        queue = [(request, request.num_tokens - request.num_computed_tokens)
                 for request in self.running if request not in decoding]

        # 3. Admissions, while the planner would give the next waiting request tokens. Not in a step
        # that preempted: the pool is tight, and re-admitting the request just preempted would only
        # recompute it to preempt it again.
        while not output.preempted and self.waiting and len(self.running) < self.config.max_num_seqs:
            request = self.waiting[0]
            # Whole prompt length, before prefix-cache hits: hits only shrink it, so a request the
            # planner takes at this length it also takes after them.
            trial = self._plan(decode_ids, queue + [(request, request.num_tokens)], budget)
            if all(request_id != request.request_id for request_id, _ in trial):
                break
            if not self.allocator.can_allocate(request.token_ids):
                break  # head-of-line blocking keeps the order fair: nobody overtakes the oldest
            num_cached = self.allocator.allocate(request.request_id, request.token_ids)
            self._num_slots[request.request_id] = request.num_tokens
            self.waiting.pop(0)
            request.num_computed_tokens = num_cached
            request.num_cached_tokens += num_cached
            output.num_cached_tokens += num_cached
            request.set_status(RequestStatus.RUNNING)
            bisect.insort(self.running, request, key=self._order_key)
            queue.append((request, request.num_tokens - num_cached))

        by_id = {request.request_id: request for request in decoding}
        by_id.update((request.request_id, request) for request, _ in queue)
        for request_id, num_tokens in self._plan(decode_ids, queue, budget):
            request = by_id[request_id]
            if request in decoding:
                output.chunks.append(ScheduledChunk(request, request.num_computed_tokens, 1, True,
                                                    lookahead.get(request_id, 0)))
            else:
                output.chunks.append(self._chunk(request, num_tokens))
        return output

    def _plan(self, decode_ids: list[Any], queue: list[tuple[Request, int]], budget: int) -> BatchPlan:
        """The step's ``(request_id, num_tokens)`` pairs, from ``build_batch`` (checked)."""
        prefill_queue = [(request.request_id, tokens_left) for request, tokens_left in queue]
        chunked = self.config.enable_chunked_prefill
        if self.build_batch is None and is_locked(CHUNKED_PREFILL_LAB):
            return self._whole_prompts(decode_ids, prefill_queue, budget)
        plan = (self.build_batch or _reference_build_batch)(list(decode_ids), prefill_queue, budget, chunked)
        return _check_plan(plan, decode_ids, prefill_queue, budget)

    @staticmethod
    def _whole_prompts(decode_ids: list[Any], prefill_queue: list[tuple[Any, int]], budget: int) -> BatchPlan:
        """Decodes, then whole prompts in order while they fit (Lab 0.1's rule: no chunking)."""
        plan = [(request_id, 1) for request_id in decode_ids]
        budget -= len(decode_ids)
        for request_id, tokens_left in prefill_queue:
            if tokens_left > budget:
                break
            plan.append((request_id, tokens_left))
            budget -= tokens_left
        return plan

    def update(self, output: SchedulerOutput, sampled_token_ids: Sequence[int]) -> list[Request]:
        """Advance the scheduled requests by what ran; append sampled tokens; finish and free stoppers."""
        sampled = iter(sampled_token_ids)
        finished: list[Request] = []
        for chunk in output.chunks:
            request = chunk.request
            token_id = next(sampled) if chunk.samples else None
            if request.status is not RequestStatus.RUNNING:
                continue  # finished from outside (aborted) since it was scheduled
            if isinstance(token_id, VerifiedTokens):
                if self._commit_verified(request, token_id):
                    finished.append(request)
                continue
            request.num_computed_tokens = chunk.start + chunk.num_tokens
            if token_id is not None:
                request.token_ids.append(int(token_id))
            self.allocator.mark_computed(request.request_id, request.token_ids, request.num_computed_tokens)
            if chunk.samples:
                stop = request.stop_status(self.config.max_model_len)
                if stop is not None:
                    self._finish(request, stop)
                    finished.append(request)
        return finished

    def release_slots(self, request: Request, num_slots: int) -> None:
        """Give back the request's last ``num_slots`` reserved slots (unused lookahead, rejected drafts)."""
        if not isinstance(num_slots, int) or num_slots < 0:
            raise ValueError(f"num_slots must be an integer >= 0, got {num_slots!r}")
        if request.status is not RequestStatus.RUNNING or not num_slots:
            return
        held = self._num_slots[request.request_id]
        if held - num_slots < request.num_computed_tokens:
            raise ValueError(f"request {request.request_id!r}: releasing {num_slots} of its {held} slots would drop "
                             f"the KV of computed tokens (it has {request.num_computed_tokens})")
        self.allocator.release_slots(request.request_id, num_slots)
        self._num_slots[request.request_id] = held - num_slots

    def finish_request(self, request_id: Any, status: RequestStatus) -> Request | None:
        """Finish a waiting or running request now (abort, stop string); free its blocks."""
        if not status.is_finished:
            raise ValueError(f"status must be a finished state, got {status.name}")
        request = self._requests.get(request_id)
        if request is None:
            return None
        self._finish(request, status)
        return request

    # ----- helpers ---------------------------------------------------------------------------

    def _chunk(self, request: Request, num_tokens: int) -> ScheduledChunk:
        start = request.num_computed_tokens
        return ScheduledChunk(request, start, num_tokens, samples=start + num_tokens == request.num_tokens)

    def _reserve_decode_slot(self, request: Request, output: SchedulerOutput) -> bool:
        """Make room for the request's newest token, preempting from the back of ``running``.

        Returns False if the request itself had to be preempted.
        """
        while not self.allocator.can_append(request.request_id):
            victim = self.running[-1]
            self._preempt(victim, output)
            if victim is request:
                return False
        copy = self.allocator.append_slot(request.request_id)
        self._num_slots[request.request_id] += 1
        if copy is not None:
            output.blocks_to_copy.append(copy)
        return True

    def _reserve_lookahead_slots(self, request: Request, output: SchedulerOutput, spare: int) -> int:
        """Reserve up to ``num_lookahead_slots`` more slots after a decode's token, for drafts.

        Never more than the request could still use (a round emits at most drafts + 1 tokens, within
        max_tokens and the context length) or than the budget's ``spare`` tokens, and never by
        preempting: under memory pressure speculation simply drafts less.
        """
        wanted = min(
            self.config.num_lookahead_slots,
            spare,
            request.params.max_tokens - request.num_output_tokens - 1,
            self.config.max_model_len - request.num_tokens - 1,
        )
        reserved = 0
        while reserved < wanted and self.allocator.can_append(request.request_id):
            copy = self.allocator.append_slot(request.request_id)
            if copy is not None:
                output.blocks_to_copy.append(copy)
            reserved += 1
        self._num_slots[request.request_id] += reserved
        return reserved

    def _commit_verified(self, request: Request, verified: VerifiedTokens) -> bool:
        """Apply one speculative chunk's result; returns True if the request finished.

        Tokens are appended one at a time with the usual stop checks, so a draft after eos or past
        max_tokens never enters the sequence. The slots of rejected drafts go back to the pool.
        """
        request.num_computed_tokens = verified.num_computed_tokens
        for token_id in verified.token_ids:
            request.token_ids.append(int(token_id))
            stop = request.stop_status(self.config.max_model_len)
            if stop is not None:
                self._finish(request, stop)
                return True
        self.release_slots(request, verified.num_slots_to_free)
        self.allocator.mark_computed(request.request_id, request.token_ids, request.num_computed_tokens)
        return False

    def _preempt(self, request: Request, output: SchedulerOutput) -> None:
        """Preemption by recompute: drop the KV, keep the tokens, requeue at the front."""
        self.running.remove(request)
        self.allocator.free(request.request_id)
        del self._num_slots[request.request_id]
        request.set_status(RequestStatus.PREEMPTED)
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        output.preempted.append(request)
        bisect.insort(self.waiting, request, key=self._order_key)

    def _finish(self, request: Request, status: RequestStatus) -> None:
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
            self.allocator.free(request.request_id)
            del self._num_slots[request.request_id]
        else:
            self.waiting.remove(request)
        request.set_status(status)
        del self._requests[request.request_id]
