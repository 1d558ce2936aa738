"""Checks for Lab 0.1, chapter 5 (the pipeline): request states, the allocator, the scheduler, the engine.

The student writes three things, checked here against :mod:`course_lib.scheduler` and :mod:`course_lib.paged`:

- ``move(request, new_status)``: one step of the request state machine (illegal moves raise ValueError);
- a scheduler class ``scheduler_cls(config, allocator)`` following ``SchedulerProtocol``: first come, first
  served, whole prompts (no chunking), decodes before admissions, preemption by recompute of the newest
  running request when a decode finds no free block. It is run on hand-made situations whose right answer
  is written out in the scenario, and (hidden) on random workloads with a fake model;
- and, at the end, the scheduler and the student's ``BlockAllocator`` inside ``LLMEngine`` serving SmolLM2,
  compared with the reference engine. The allocator is chapter 4's answer (graded there by
  :mod:`course_lib.checks.paging`), which the chapter imports with ``course_lib.chapters.answers_from``.

The scheduler checks give the student's scheduler the *reference* allocator, so a bug in the allocator
costs only chapter 4's cells and the engine's. That allocator stays on the check's side: the
scheduler gets it through ``checks.share`` (its methods only), so the blocks the check counts are
what the scheduler really took and gave back. Requests, configs and the engine that runs the
student's parts are built with ``checks.make``, where the student's code runs; what the student's
objects hold is read through their public attributes, never by testing their class.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

from course_lib.checks import (
    call_student,
    fail,
    is_remote,
    make,
    register_reference_names,
    require_own_implementation,
    share,
    short_repr,
    smollm2,
)
from course_lib.checks.fixtures import OffTheRecord, recorded_check, reference
from course_lib.paged import BlockAllocator, OutOfBlocksError
from course_lib.scheduler import Request, RequestStatus, SchedulerConfig, is_legal_transition
from course_lib.scheduler import Scheduler as ReferenceScheduler

__all__ = [
    "EOS",
    "FakeParams",
    "HINT_DECODE",
    "HINT_FIT",
    "SCHEDULER_SCENARIOS",
    "Scenario",
    "check_engine_matches_reference",
    "check_move",
    "check_move_all_pairs",
    "check_scheduler_random",
    "check_scheduler_scenario",
    "chat_prompts",
    "make_request",
    "preempted_ids",
    "serving_engine",
]

register_reference_names("BlockAllocator", "Scheduler", "set_status", "stop_status")

ReferenceAllocator = reference(BlockAllocator)
_reference_is_legal = reference(is_legal_transition)

# What a scheduler may call on the allocator it is given (the methods of AllocatorProtocol).
_ALLOCATOR_METHODS = ("blocks_needed", "can_allocate", "allocate", "can_append", "append_slot", "mark_computed",
                      "free", "block_table")
_SCHEDULER_MEMBERS = ("add", "schedule", "update", "finish_request", "has_unfinished")

EOS = 0
"""The end-of-sequence id of the fake requests the scheduler checks make."""

@dataclass(frozen=True)
class FakeParams:
    """The fields of SamplingParams a scheduler reads."""

    max_tokens: int = 4
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False


def make_request(request_id: Any, num_prompt_tokens: int, max_tokens: int = 4, *,
                 status: RequestStatus = RequestStatus.WAITING, **params) -> Request:
    """A request with a prompt of ``num_prompt_tokens`` ids in 1..50 (never EOS), in state ``status``.

    Built with ``checks.make``: when grading, it lives where the student's code runs.
    """
    prompt = [1 + (len(str(request_id)) * 7 + i) % 50 for i in range(num_prompt_tokens)]
    return make(Request, request_id, prompt, make(FakeParams, max_tokens=max_tokens, **params), eos_token_id=EOS,
                status=status)


def _require_own_class(cls: Any, name: str, reference_cls: type) -> None:
    """The re-export guard, plus: a subclass of the reference class inherits the answer, so it earns nothing."""
    require_own_implementation(cls, name)
    # Only locally: when grading, the student's kernel has no reference class to inherit from.
    if not is_remote(cls) and isinstance(cls, type) and issubclass(cls, reference_cls):
        fail(f"{name} is a subclass of the course's reference {reference_cls.__module__}.{reference_cls.__name__}.",
             hint="write the class yourself (it may subclass nothing, or the Protocol); inheriting the reference "
                  "earns no points.", show_values=False)


# A crash that means the pool ran out gets a hint of its own.
_OUT_OF_BLOCKS_HINTS = {
    OutOfBlocksError: ("the pool had no room: ask allocator.can_allocate(token_ids) before allocate, and "
                       "allocator.can_append(request_id) before append_slot (preempt when it says no)."),
}


def _call(function: Callable, name: str, *args: Any, copy_args: bool = True) -> Any:
    """call_student for this chapter: ``name`` already describes the call; OutOfBlocksError gets its own hint."""
    return call_student(function, name, *args, copy_args=copy_args, show_args=False, hints=_OUT_OF_BLOCKS_HINTS)


# ---------------------------------------------------------------------------------------------
# The state machine
# ---------------------------------------------------------------------------------------------


def _try_move(move: Callable, old: RequestStatus, new: RequestStatus) -> tuple[bool, RequestStatus, Exception | None]:
    """(raised ValueError?, status afterwards, other exception) for one move from ``old`` to ``new``."""
    request = make_request("r", 3, status=old)
    try:
        move(request, new)
    except NotImplementedError:
        raise
    except ValueError:
        return True, request.status, None
    except Exception as error:  # noqa: BLE001 - reported as feedback below
        return False, request.status, error
    return False, request.status, None


@recorded_check
def check_move(move: Callable, old: RequestStatus, new: RequestStatus) -> None:
    """``move(request, new)`` from status ``old``: a legal move sets the status, an illegal one raises ValueError."""
    require_own_implementation(move, "move")
    _check_one_move(move, old, new, _legal_targets(old))


def _legal_targets(old: RequestStatus) -> list[RequestStatus]:
    """The states the reference's diagram lets a request in ``old`` move to (asked before any comparison, so
    a failure's message in the kit comes from the recording)."""
    return [new for new in RequestStatus if _reference_is_legal(old, new)]


def _arrows(old: RequestStatus, targets: list[RequestStatus]) -> str:
    if not targets:
        return f"no arrow leaves {old.name}: a finished request never moves again"
    return f"the arrows from {old.name} go to {', '.join(target.name for target in targets)} and nowhere else"


def _check_one_move(move: Callable, old: RequestStatus, new: RequestStatus, targets: list[RequestStatus]) -> None:
    raised, after, other = _try_move(move, old, new)
    legal = new in targets
    where = f"move(request, {new.name}) on a request in state {old.name}"
    if other is not None:
        fail(f"{where} raised {type(other).__name__}: {other}",
             expected=new.name if legal else "ValueError (an illegal move)", got=type(other).__name__,
             hint="signal an illegal move with raise ValueError(...), nothing else; " + _arrows(old, targets) + ".")
    if legal:
        if raised:
            fail(f"{where} raised ValueError, but {old.name} -> {new.name} is a legal move.",
                 expected=new.name, got="ValueError",
                 hint=f"look at the diagram of section 1 again: {_arrows(old, targets)}.")
        if after is not new:
            fail(f"{where}: the status did not change.", expected=new.name, got=after.name,
                 hint="after checking, set request.status = new_status.")
    else:
        if not raised:
            fail(f"{where} should raise ValueError: {old.name} -> {new.name} is not a legal move.",
                 expected="ValueError", got=f"no error, status now {after.name}",
                 hint=f"{_arrows(old, targets)} (see the diagram of section 1); every other move is a scheduler "
                      "bug, and move must refuse it.")
        if after is not old:
            fail(f"{where} raised ValueError but changed the status anyway.", expected=old.name, got=after.name,
                 hint="check first, then assign: an illegal move must leave the request as it was.")


@recorded_check
def check_move_all_pairs(move: Callable) -> None:
    """Every (old, new) pair of states, legal and illegal: the diagram's arrows and nothing else."""
    require_own_implementation(move, "move")
    arrows = {old: _legal_targets(old) for old in RequestStatus}
    for old in RequestStatus:
        for new in RequestStatus:
            _check_one_move(move, old, new, arrows[old])


# ---------------------------------------------------------------------------------------------
# The student's allocator (chapter 4's answer), built for the engine
# ---------------------------------------------------------------------------------------------


def _build_allocator(allocator_cls: type, num_blocks: int, block_size: int):
    """``allocator_cls(num_blocks, block_size)`` with every member the engine calls (chapter 4 checked the rest)."""
    allocator = _call(allocator_cls, f"BlockAllocator(num_blocks={num_blocks}, block_size={block_size})",
                      num_blocks, block_size)
    missing = [name for name in ("block_size", "num_blocks", "num_free_blocks", "blocks_needed", "can_allocate",
                                 "allocate", "can_append", "append_slot", "mark_computed", "free", "block_table",
                                 "fork", "slot") if not hasattr(allocator, name)]
    if missing:
        fail("your BlockAllocator lacks members the engine (or this chapter) uses: " + ", ".join(missing),
             hint="this chapter runs the BlockAllocator of your saved 04_paging.ipynb: keep every method of chapter "
                  "4's skeleton there (mark_computed included), save it, and run the answers_from cell again.",
             show_values=False)
    if allocator.num_blocks != num_blocks or allocator.block_size != block_size:
        fail("BlockAllocator(num_blocks, block_size) should keep its arguments as .num_blocks and .block_size.",
             expected=(num_blocks, block_size), got=(allocator.num_blocks, allocator.block_size))
    return allocator


# ---------------------------------------------------------------------------------------------
# The scheduler on hand-made situations
# ---------------------------------------------------------------------------------------------


def _chunk_summary(output: Any) -> list[tuple[Any, int, int, bool]]:
    """The plan as plain (request_id, start, num_tokens, samples) tuples, read once."""
    try:
        chunks = list(output.chunks)
        return [(c.request.request_id, c.start, c.num_tokens, c.samples) for c in chunks]
    except AttributeError:
        fail("schedule() must return a SchedulerOutput whose chunks are ScheduledChunk(request, start, num_tokens, "
             "samples)", expected="SchedulerOutput", got=short_repr(output))
        raise


def preempted_ids(output: Any) -> list[Any]:
    """The ids of the requests a SchedulerOutput says were preempted, in its order."""
    return [request.request_id for request in list(output.preempted)]


class _Harness:
    """The student's scheduler on the reference allocator, driven step by step with a fake model."""

    def __init__(self, scheduler_cls: type, *, num_blocks: int, block_size: int = 4, max_num_seqs: int = 8,
                 max_num_batched_tokens: int = 64, max_model_len: int = 1000) -> None:
        _require_own_class(scheduler_cls, "the scheduler class", ReferenceScheduler)
        # The check's own allocator: the scheduler calls its methods, the check reads its state.
        self.allocator = ReferenceAllocator(num_blocks, block_size, enable_prefix_caching=False)
        config = make(SchedulerConfig, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                      enable_chunked_prefill=False, max_model_len=max_model_len)
        self.setup = (f"pool of {num_blocks} blocks of {block_size} tokens, max_num_seqs={max_num_seqs}, "
                      f"max_num_batched_tokens={max_num_batched_tokens}")
        self.scheduler = _call(scheduler_cls, "scheduler_cls(config, allocator)", config,
                               share(self.allocator, *_ALLOCATOR_METHODS), copy_args=False)
        missing = [name for name in _SCHEDULER_MEMBERS if not hasattr(self.scheduler, name)]
        if missing:
            fail(f"your scheduler lacks {missing}: the engine calls add, schedule, update, finish_request and "
                 "has_unfinished.", show_values=False, hint="keep every method of the skeleton.")
        self.requests: dict[Any, Request] = {}
        self.history: list[str] = []

    def _run(self, method: str, call: str, *args: Any, hint: str = "") -> Any:
        """The scheduler's ``method(*args)``; in the kit, a path the recording does not know gets the scenario's
        account (what happened so far, the rule at stake) on top of what the reference did there."""
        try:
            return _call(getattr(self.scheduler, method), call, *args, copy_args=False)
        except OffTheRecord as error:
            raise error.in_context(f"while your scheduler ran {call} {self.context()}", hint or None) from None

    def add(self, request: Request) -> None:
        self.requests[request.request_id] = request
        self._run("add", f"add({request.request_id!r})", request)
        self.history.append(f"add {request.request_id} ({request.num_tokens} prompt tokens, "
                            f"max_tokens {request.params.max_tokens})")

    def context(self) -> str:
        return f"[{self.setup}; so far: " + ("; ".join(self.history) or "nothing") + "]"

    def schedule(self, expected: list[tuple[Any, int, int, bool]], hint: str) -> Any:
        output = self._run("schedule", "schedule()", hint=hint)
        got = _chunk_summary(output)
        if got != expected:
            fail("schedule() planned the wrong chunks, as (request_id, start, num_tokens, samples) "
                 + self.context(), expected=expected, got=got, hint=hint)
        self.history.append("step " + ", ".join(f"{rid}:{n}" for rid, _, n, _ in got))
        return output

    def update(self, output: Any, tokens: list[int], expected_finished: list[Any], hint: str) -> None:
        finished = self._run("update", f"update(output, {tokens})", output, tokens, hint=hint)
        got = [r.request_id for r in list(finished or [])]
        if sorted(map(str, got)) != sorted(map(str, expected_finished)):
            fail(f"update(output, {tokens}) returned the wrong finished requests " + self.context(),
                 expected=expected_finished, got=got, hint=hint)
        self.history.append(f"sampled {tokens}")

    def expect(self, condition: bool, what: str, hint: str) -> None:
        if not condition:
            fail(what + " " + self.context(), hint=hint, show_values=False)

    def expect_status(self, request_id: Any, status: RequestStatus, hint: str) -> None:
        got = self.requests[request_id].status
        if got is not status:
            fail(f"status of request {request_id!r} " + self.context(), expected=status.name, got=got.name, hint=hint)

    def expect_free_blocks(self, expected: int, hint: str) -> None:
        got = self.allocator.num_free_blocks
        if got != expected:
            fail("free blocks in the pool " + self.context(), expected=expected, got=got, hint=hint)


# The hints of admission and of decoding, which many scenarios give (the hidden ones too).
HINT_FIT = ("admit waiting requests oldest first while allocator.can_allocate(request.token_ids) says their blocks "
            "fit, len(running) < max_num_seqs and the whole prompt fits the token budget left; stop at the first "
            "request that does not fit (first come, first served: nobody overtakes it).")
HINT_DECODE = ("every running request decodes first (one token: start = num_tokens - 1, samples=True), in the order "
               "they were admitted; newly admitted prompts come after, whole (start 0, samples=True).")


def _scenario_all_fit(h: _Harness) -> None:
    for rid, length in (("a", 5), ("b", 6), ("c", 7)):
        h.add(make_request(rid, length))
    output = h.schedule([("a", 0, 5, True), ("b", 0, 6, True), ("c", 0, 7, True)], HINT_FIT)
    for rid in "abc":
        h.expect_status(rid, RequestStatus.RUNNING, "an admitted request moves WAITING -> RUNNING (use move).")
    h.expect_free_blocks(20 - 6, "each admitted prompt takes ceil(len / block_size) blocks with allocator.allocate.")
    h.update(output, [11, 12, 13], [], "nothing stops after one token (max_tokens is 4, no eos).")
    for rid, length, token in (("a", 5, 11), ("b", 6, 12), ("c", 7, 13)):
        request = h.requests[rid]
        h.expect(request.token_ids[-1] == token and request.num_tokens == length + 1,
                 f"after update, request {rid!r} should end with its sampled token {token}",
                 "update appends each sampled token (one per chunk with samples=True, in chunk order).")
        h.expect(request.num_computed_tokens == length,
                 f"after update, request {rid!r}.num_computed_tokens should be {length} (its whole prompt ran)",
                 "set num_computed_tokens = chunk.start + chunk.num_tokens.")


def _scenario_blocks_run_out(h: _Harness) -> None:
    h.add(make_request("a", 8))   # 2 blocks
    h.add(make_request("b", 9))   # 3 blocks: only 2 left after a
    h.add(make_request("c", 3))   # 1 block: would fit, but b is first in line
    h.schedule([("a", 0, 8, True)], HINT_FIT)
    h.expect_status("b", RequestStatus.WAITING, "a request whose blocks do not fit stays WAITING.")
    h.expect_status("c", RequestStatus.WAITING, HINT_FIT)
    h.expect_free_blocks(2, "only the admitted request takes blocks.")


def _scenario_decodes_first(h: _Harness) -> None:
    h.add(make_request("a", 4))
    h.add(make_request("b", 5))
    output = h.schedule([("a", 0, 4, True), ("b", 0, 5, True)], HINT_FIT)
    h.update(output, [30, 31], [], "nothing stops yet.")
    h.add(make_request("c", 2))
    output = h.schedule([("a", 4, 1, True), ("b", 5, 1, True), ("c", 0, 2, True)], HINT_DECODE)
    # a had 4 tokens in 1 block: its 5th token needed a second block.
    h.expect_free_blocks(10 - 2 - 2 - 1, "a decode whose last block is full gets a new one: call allocator.append_slot "
                         "for every decode, before the model writes the token's keys and values.")
    h.update(output, [40, 41, 42], [], "nothing stops yet.")
    h.expect(h.requests["a"].token_ids[-2:] == [30, 40], "request 'a' should end with its two sampled tokens [30, 40]",
             "update appends one token per chunk with samples=True, in the order of output.chunks.")


def _scenario_finish_frees_blocks(h: _Harness) -> None:
    h.add(make_request("a", 8, max_tokens=1))
    h.add(make_request("b", 8))
    output = h.schedule([("a", 0, 8, True)], HINT_FIT)
    h.update(output, [7], ["a"], "a request stops when it has max_tokens output tokens; update returns it.")
    h.expect_status("a", RequestStatus.FINISHED_LENGTH, "max_tokens reached is FINISHED_LENGTH.")
    h.expect_free_blocks(3, "a finished request's blocks go back to the pool at once: allocator.free(request_id).")
    h.schedule([("b", 0, 8, True)], "the blocks a finished request gave back let the next one in. " + HINT_FIT)


def _scenario_preemption(h: _Harness) -> None:
    h.add(make_request("a", 4))   # 1 block each, both full
    h.add(make_request("b", 4))
    h.add(make_request("c", 4))
    h.add(make_request("d", 4))   # waits: max_num_seqs is 3
    output = h.schedule([("a", 0, 4, True), ("b", 0, 4, True), ("c", 0, 4, True)], HINT_FIT)
    h.update(output, [10, 11, 12], [], "nothing stops yet.")
    # Each decode needs a second block; 1 is free: a takes it, c (newest) is preempted so b gets c's block.
    output = h.schedule([("a", 4, 1, True), ("b", 4, 1, True)],
                        "a decode that finds no free block preempts the NEWEST running request (the last admitted) "
                        "and frees its blocks; if the decode's own request is the newest, it preempts itself.")
    h.expect_status("c", RequestStatus.PREEMPTED, "a preempted request moves RUNNING -> PREEMPTED.")
    preempted = preempted_ids(output)
    h.expect(preempted == ["c"], f"output.preempted should be ['c'], got {preempted}",
             "append each preempted request to output.preempted (the engine counts them).")
    h.expect(h.requests["c"].num_computed_tokens == 0 and h.requests["c"].token_ids[-1] == 12,
             "a preempted request keeps its tokens (the sampled 12 included) but num_computed_tokens goes back to 0",
             "preemption by recompute: the KV is dropped, the tokens are kept and will run again as one prompt.")
    h.expect_free_blocks(0, "a and b each hold 2 blocks now; c's block went back to the pool and to b.")
    h.update(output, [EOS, 20], ["a"], "eos stops a.")
    # a freed 2 blocks; b decodes (room in its block); c comes back first in line with its 5 tokens.
    h.schedule([("b", 5, 1, True), ("c", 0, 5, True)],
               "a preempted request goes back to the FRONT of the waiting queue and runs all its tokens again "
               "(prompt + generated) as one prompt; d, behind it, still waits (no block left for it).")
    h.expect_status("c", RequestStatus.RUNNING, "PREEMPTED -> RUNNING when it is admitted again.")
    h.expect_status("d", RequestStatus.WAITING, "d arrived after c: first come, first served.")


@dataclass(frozen=True)
class Scenario:
    """A hand-made situation for ``check_scheduler_scenario``: the pool and limits, and ``run(h)``.

    ``run`` drives the student's scheduler through ``h`` (the check's harness) and writes out the
    right answer at every step: ``h.add(make_request(...))``, ``h.schedule(expected chunks, hint)``,
    ``h.update(output, sampled tokens, expected finished ids, hint)``, ``h.expect_status``,
    ``h.expect_free_blocks``, ``h.expect``; ``h.requests`` and ``h.allocator`` are what it watches.
    """

    run: Callable[[_Harness], None]
    num_blocks: int
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 64
    max_model_len: int = 1000


SCHEDULER_SCENARIOS = {
    "all_fit": Scenario(_scenario_all_fit, num_blocks=20),
    "blocks_run_out": Scenario(_scenario_blocks_run_out, num_blocks=4),
    "decodes_first": Scenario(_scenario_decodes_first, num_blocks=10),
    "finish_frees_blocks": Scenario(_scenario_finish_frees_blocks, num_blocks=3),
    "preemption": Scenario(_scenario_preemption, num_blocks=4, max_num_seqs=3),
}
"""The visible tests' situations, by name, each with its right answer written out (the graded tests'
further situations are written in their hidden regions: this module ships in the kit)."""


@recorded_check
def check_scheduler_scenario(scheduler_cls: type, scenario: str | Scenario) -> None:
    """Run a ``Scenario``, or one of ``SCHEDULER_SCENARIOS`` by name, on the student's scheduler
    (block_size 4, the reference allocator)."""
    if isinstance(scenario, str):
        if scenario not in SCHEDULER_SCENARIOS:
            raise ValueError(f"scenario must be a Scenario or one of {sorted(SCHEDULER_SCENARIOS)}, got {scenario!r}")
        scenario = SCHEDULER_SCENARIOS[scenario]
    harness = _Harness(scheduler_cls, num_blocks=scenario.num_blocks, max_num_seqs=scenario.max_num_seqs,
                       max_num_batched_tokens=scenario.max_num_batched_tokens, max_model_len=scenario.max_model_len)
    scenario.run(harness)


# ---------------------------------------------------------------------------------------------
# The scheduler on random workloads with a fake model
# ---------------------------------------------------------------------------------------------


def _fake_next_token(token_ids: list[int], vocab_size: int = 40) -> int:
    """The fake model: a token that depends only on the sequence so far (so never on the batch)."""
    return (31 * token_ids[-1] + 7 * len(token_ids) + (token_ids[-2] if len(token_ids) > 1 else 0)) % vocab_size


def _expected_output(prompt: list[int], max_tokens: int) -> list[int]:
    tokens = list(prompt)
    while True:
        tokens.append(_fake_next_token(tokens))
        if tokens[-1] == EOS or len(tokens) - len(prompt) >= max_tokens:
            return tokens[len(prompt):]


@recorded_check
def check_scheduler_random(scheduler_cls: type, seed: int, num_requests: int = 12) -> None:
    """A random workload to the end: limits hold at every step, everything finishes, nothing leaks.

    Requests arrive over the first steps; the pool is just big enough for the largest request, so
    blocks run out and preemption happens. Each request's output must be what the fake model gives it
    alone (the schedule may change *when* a token is computed, never *which* token).
    """
    rng = random.Random(seed)
    block_size = rng.choice([2, 4, 8])
    workload = [(rng.randint(1, 30), rng.randint(1, 12), rng.randint(0, 6)) for _ in range(num_requests)]
    longest = max(p + m for p, m, _ in workload)
    num_blocks = -(-longest // block_size) + rng.randint(0, 8)
    max_num_seqs = rng.randint(1, 6)
    budget = max(longest, max_num_seqs) + rng.randint(0, 20)
    harness = _Harness(scheduler_cls, num_blocks=num_blocks, block_size=block_size, max_num_seqs=max_num_seqs,
                       max_num_batched_tokens=budget)
    allocator, scheduler = harness.allocator, harness.scheduler
    setup = f"random workload (seed {seed}): {harness.setup}, requests (prompt, max_tokens, arrival step) {workload}"
    requests = []
    for index, (prompt_len, max_tokens, arrival) in enumerate(workload):
        prompt = [1 + (index * 13 + j * 5) % 39 for j in range(prompt_len)]
        requests.append((arrival, make(Request, index, prompt, make(FakeParams, max_tokens=max_tokens),
                                       eos_token_id=EOS)))
    step_limit = 4 * sum(p + m for p, m, _ in workload) * num_requests + 20
    step = 0
    while step < step_limit and (_call(scheduler.has_unfinished, "has_unfinished()", copy_args=False)
                                 or any(arrival >= step for arrival, _ in requests)):
        for arrival, request in requests:
            if arrival == step:
                _call(scheduler.add, f"add({request.request_id})", request, copy_args=False)
        output = _call(scheduler.schedule, "schedule()", copy_args=False)
        where = f"step {step} of a {setup}"
        chunks = _chunk_summary(output)
        num_batched_tokens = sum(num_tokens for _, _, num_tokens, _ in chunks)
        if not chunks and scheduler.has_unfinished():
            fail(f"schedule() planned nothing while requests are unfinished ({where})", show_values=False,
                 hint="the engine would stop here: some request must run every step (a pool that fits the largest "
                      "request alone always lets the oldest one in once the others are preempted or finished).")
        if num_batched_tokens > budget:
            fail(f"the step runs more tokens than max_num_batched_tokens ({where})", expected=f"<= {budget}",
                 got=num_batched_tokens, hint=HINT_FIT)
        if len(chunks) > max_num_seqs:
            fail(f"more than max_num_seqs requests ran in one step ({where})", expected=f"<= {max_num_seqs}",
                 got=len(chunks), hint=HINT_FIT)
        if len({rid for rid, *_ in chunks}) != len(chunks):
            fail(f"a request appears twice in one step ({where})", expected="one chunk per request", got=chunks)
        by_id = {request.request_id: request for _, request in requests}
        for request_id, start, num_tokens, samples in chunks:
            request = by_id[request_id]
            status, num_computed, num_request_tokens = request.status, request.num_computed_tokens, request.num_tokens
            if status is not RequestStatus.RUNNING:
                fail(f"request {request_id} is scheduled in state {status.name} ({where})",
                     expected="RUNNING", got=status.name, hint="move a request to RUNNING when you admit it.")
            if start != num_computed or start + num_tokens != num_request_tokens or not samples:
                fail(f"request {request_id}'s chunk does not run exactly its uncomputed tokens ({where})",
                     expected=(request_id, num_computed, num_request_tokens - num_computed, True),
                     got=(request_id, start, num_tokens, samples), hint=HINT_DECODE)
            if not allocator.has_sequence(request_id) or allocator.num_slots(request_id) < num_request_tokens:
                fail(f"request {request_id} runs without blocks for all its {num_request_tokens} tokens "
                     f"({where})", show_values=False,
                     hint="allocate at admission, allocator.append_slot before every decode.")
        tokens = [_fake_next_token(list(by_id[request_id].token_ids)) for request_id, _, _, samples in chunks
                  if samples]
        _call(scheduler.update, f"update(output, {tokens})", output, tokens, copy_args=False)
        held = {block for block, count in enumerate(allocator.ref_counts) if count > 0}
        running = [r.request_id for _, r in requests if r.status is RequestStatus.RUNNING]
        in_tables = {block for request_id in running for block in allocator.block_table(request_id)}
        if held != in_tables:
            fail(f"blocks are held by requests that are not running ({where})", expected=sorted(in_tables),
                 got=sorted(held), hint="free the blocks of every request that finishes or is preempted.")
        step += 1
    if step >= step_limit:
        fail(f"the workload did not finish in {step_limit} steps: a {setup}", show_values=False,
             hint="a request starved or the scheduler stalls (is a preempted request ever admitted again?).")
    for (prompt_len, max_tokens, _), (_, request) in zip(workload, requests):
        token_ids = list(request.token_ids)
        prompt, output_ids = token_ids[:prompt_len], token_ids[prompt_len:]
        expected = _expected_output(prompt, max_tokens)
        status = request.status
        if output_ids != expected or not status.is_finished:
            fail(f"request {request.request_id} ended with the wrong tokens or unfinished ({setup})",
                 expected=expected, got=(output_ids, status.name),
                 hint="append each sampled token once; a preempted request keeps its tokens; stop at eos or max_tokens.")
    if allocator.num_free_blocks != num_blocks:
        fail(f"blocks leaked: after every request finished ({setup})", expected=num_blocks,
             got=allocator.num_free_blocks, hint="free a request's blocks when it finishes.")


# ---------------------------------------------------------------------------------------------
# The whole engine on SmolLM2
# ---------------------------------------------------------------------------------------------


def chat_prompts(questions: list[str]) -> list[str]:
    """Each question as SmolLM2's chat prompt (system + user turn + the assistant header)."""
    _, tokenizer = smollm2()
    return [tokenizer.apply_chat_template([{"role": "user", "content": q}]) for q in questions]


def serving_engine(allocator: Any, scheduler: Any, sampler: Callable | None = None):
    """``LLMEngine`` serving SmolLM2 with these parts (built with ``checks.make`` where the parts live)."""
    from course_lib.engine import LLMEngine

    model, tokenizer = smollm2()
    return LLMEngine(model, tokenizer, allocator=allocator, scheduler=scheduler, sampler=sampler)


_REFERENCE_OUTPUTS: dict[tuple, list[list[int]]] = {}


def _reference_greedy(prompts: tuple[str, ...], max_tokens: int) -> list[list[int]]:
    """The reference engine's greedy tokens for each prompt (cached: the hidden tests reuse them)."""
    from course_lib.engine import LLMEngine
    from course_lib.sampling import SamplingParams

    key = (prompts, max_tokens)
    if key not in _REFERENCE_OUTPUTS:
        model, tokenizer = smollm2()
        engine = LLMEngine(model, tokenizer, kv_cache_memory_bytes=64 * 2**20)
        outputs = engine.generate(list(prompts), SamplingParams(temperature=0.0, max_tokens=max_tokens), use_tqdm=False)
        _REFERENCE_OUTPUTS[key] = [list(o.token_ids) for o in outputs]
    return _REFERENCE_OUTPUTS[key]


def _serve(engine, prompts: list[str], params, step_limit: int) -> list[list[int]]:
    """``engine.generate`` one step at a time, giving up after ``step_limit`` steps (a scheduler that never
    finishes its requests would otherwise loop forever). Returns each prompt's generated token ids."""
    # The engine's StepOutputs cross by value from the student's kernel, and the grader rebuilds them only
    # from a module it has loaded: without this, a student who handed in this chapter without the
    # earlier ones (which load it) lost test_engine to "course_lib.engine is not loaded in the grader".
    import course_lib.engine  # noqa: F401

    request_ids = [engine.add_request(prompt, params) for prompt in prompts]
    tokens: dict[Any, list[int]] = {request_id: [] for request_id in request_ids}
    for _ in range(step_limit):
        if not engine.has_unfinished():
            return [tokens[request_id] for request_id in request_ids]
        for output in list(engine.step()):
            tokens[output.request_id].extend(list(output.new_token_ids))
    raise RuntimeError(f"requests were still unfinished after {step_limit} steps; does update append the sampled "
                       "tokens and finish requests at max_tokens?")


@recorded_check
def check_engine_matches_reference(allocator_cls: type, scheduler_cls: type, questions: list[str], *,
                                   max_tokens: int = 12, num_blocks: int = 12, block_size: int = 16,
                                   max_num_seqs: int = 4, max_num_batched_tokens: int = 256,
                                   require_preemption: bool = False) -> None:
    """Serve ``questions`` (as SmolLM2 chat prompts) greedily through ``LLMEngine`` with the student's
    allocator and scheduler.

    Compares the generated token ids with the reference engine's, token for token, and checks that
    every block is back in the pool at the end (and, with ``require_preemption``, that the small pool
    made the scheduler preempt). A graded notebook leaves ``require_preemption`` off: the engine runs
    where the student's code runs, so its statistics can be patched; the points for preempting come
    from the scheduler checks, where the grader holds the allocator.
    """
    from course_lib.sampling import SamplingParams

    _require_own_class(allocator_cls, "BlockAllocator", BlockAllocator)
    _require_own_class(scheduler_cls, "the scheduler class", ReferenceScheduler)
    prompts = chat_prompts(list(questions))
    allocator = _build_allocator(allocator_cls, num_blocks, block_size)
    config = make(SchedulerConfig, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                  enable_chunked_prefill=False, max_model_len=smollm2()[0].config.max_position_embeddings)
    scheduler = _call(scheduler_cls, "scheduler_cls(config, allocator)", config, allocator, copy_args=False)
    engine = make(serving_engine, allocator, scheduler)
    greedy = make(SamplingParams, temperature=0.0, max_tokens=max_tokens)
    setup = (f"{len(prompts)} prompts, max_tokens={max_tokens}, {num_blocks} blocks of {block_size}, "
             f"max_num_seqs={max_num_seqs}")
    generated = _call(lambda: _serve(engine, prompts, greedy, step_limit=10 * len(prompts) * (max_tokens + 2)),
                      "LLMEngine(model, tokenizer, allocator=your allocator, scheduler=your scheduler) serving "
                      f"({setup})")
    expected = _reference_greedy_tokens(tuple(prompts), max_tokens)
    num_preemptions = engine.stats.num_preemptions
    for index, (tokens, reference_tokens) in enumerate(zip(generated, expected)):
        if tokens != reference_tokens:
            where = next((i for i, (a, b) in enumerate(zip(tokens, reference_tokens)) if a != b),
                         min(len(tokens), len(reference_tokens)))
            fail(f"prompt {index}: your engine's greedy tokens differ from the reference engine's from token {where} "
                 f"on ({setup}, {num_preemptions} preemptions)", expected=reference_tokens, got=tokens,
                 hint="if the scheduler and allocator checks pass, look at the allocator's block tables and slots "
                      "(a token written into another request's block changes what that request sees), and at what a "
                      "preempted request runs when it comes back.")
    free = allocator.num_free_blocks
    if free != num_blocks:
        fail(f"after every request finished, blocks are still held ({setup})", expected=num_blocks, got=free,
             hint="free a request's blocks when it finishes.")
    if require_preemption and num_preemptions == 0:
        fail(f"no request was preempted although the pool is too small for all at once ({setup})",
             show_values=False, hint="a decode that finds no free block must preempt the newest running request.")


_reference_greedy_tokens = reference(_reference_greedy)
