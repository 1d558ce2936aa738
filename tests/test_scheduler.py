"""Scheduler: the request state machine, hand-checked steps, and hypothesis workloads on a fake model."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.paged import BlockAllocator
from course_lib.scheduler import Request, RequestStatus, Scheduler, SchedulerConfig, SchedulerProtocol

EOS = 0


@dataclass(frozen=True)
class Params:
    """The fields of SamplingParams the scheduler reads."""

    max_tokens: int = 4
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False


def make_request(request_id, num_prompt_tokens, max_tokens=4, priority=0, **params) -> Request:
    prompt = [1 + (request_id_hash(request_id) + i) % 50 for i in range(num_prompt_tokens)]
    return Request(request_id, prompt, Params(max_tokens=max_tokens, **params), eos_token_id=EOS, priority=priority)


def request_id_hash(request_id) -> int:
    return sum(map(ord, str(request_id)))


def make_scheduler(num_blocks=64, block_size=4, prefix_caching=False, **config) -> Scheduler:
    allocator = BlockAllocator(num_blocks, block_size, enable_prefix_caching=prefix_caching)
    return Scheduler(SchedulerConfig(**config), allocator)


def run_step(scheduler: Scheduler, next_token=lambda chunk: 7):
    """One step with a fake model: every sampling chunk gets ``next_token(chunk)``."""
    output = scheduler.schedule()
    tokens = [next_token(chunk) for chunk in output.chunks if chunk.samples]
    finished = scheduler.update(output, tokens)
    return output, finished


# ----- the request state machine --------------------------------------------------------------


def test_request_state_machine_allows_the_lifecycle_and_rejects_the_rest():
    request = make_request("a", 3)
    assert request.status is RequestStatus.WAITING
    request.set_status(RequestStatus.RUNNING)
    request.set_status(RequestStatus.PREEMPTED)
    request.set_status(RequestStatus.RUNNING)
    request.set_status(RequestStatus.FINISHED_LENGTH)
    assert request.is_finished and request.status.finish_reason == "length"
    with pytest.raises(ValueError, match="illegal transition FINISHED_LENGTH -> RUNNING"):
        request.set_status(RequestStatus.RUNNING)
    waiting = make_request("b", 3)
    with pytest.raises(ValueError, match="WAITING -> FINISHED_STOPPED"):
        waiting.set_status(RequestStatus.FINISHED_STOPPED)


def test_stop_conditions():
    request = make_request("a", 3, max_tokens=3, stop_token_ids=(42,))
    request.token_ids.append(5)
    assert request.stop_status(max_model_len=100) is None
    request.token_ids.append(42)
    assert request.stop_status(100) is RequestStatus.FINISHED_STOPPED
    request.token_ids[-1] = EOS
    assert request.stop_status(100) is RequestStatus.FINISHED_STOPPED
    request.token_ids[-1] = 6
    assert request.stop_status(request.num_tokens) is RequestStatus.FINISHED_LENGTH  # context full
    request.token_ids.append(6)
    assert request.stop_status(100) is RequestStatus.FINISHED_LENGTH  # max_tokens
    ignoring = make_request("b", 3, ignore_eos=True)
    ignoring.token_ids.append(EOS)
    assert ignoring.stop_status(100) is None


def test_config_is_validated():
    with pytest.raises(ValueError, match="max_num_seqs"):
        SchedulerConfig(max_num_seqs=0)
    with pytest.raises(ValueError, match="max_num_batched_tokens .* must be >= max_num_seqs"):
        SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=4)
    with pytest.raises(ValueError, match="policy"):
        SchedulerConfig(policy="lifo")
    with pytest.raises(TypeError, match="SchedulerConfig"):
        Scheduler({"max_num_seqs": 4}, BlockAllocator(4, 4))


def test_add_rejects_requests_that_could_never_run():
    scheduler = make_scheduler(num_blocks=4, block_size=4, max_model_len=64, max_num_batched_tokens=32)
    with pytest.raises(ValueError, match="more than the whole pool"):
        scheduler.add(make_request("big", 10, max_tokens=10))  # 20 tokens = 5 blocks > 4
    with pytest.raises(ValueError, match="no room to generate"):
        scheduler.add(make_request("long", 64))
    no_chunking = make_scheduler(enable_chunked_prefill=False, max_num_seqs=4, max_num_batched_tokens=8)
    with pytest.raises(ValueError, match="exceeds max_num_batched_tokens"):
        no_chunking.add(make_request("a", 9))
    scheduler.add(make_request("ok", 3))
    with pytest.raises(ValueError, match="already queued"):
        scheduler.add(make_request("ok", 3))


def test_reference_scheduler_satisfies_the_protocol():
    assert isinstance(make_scheduler(), SchedulerProtocol)


# ----- hand-checked steps ---------------------------------------------------------------------


def test_decodes_come_first_then_prefill_chunks_in_the_remaining_budget():
    scheduler = make_scheduler(max_num_seqs=4, max_num_batched_tokens=8)
    scheduler.add(make_request("a", 3, max_tokens=5))
    output, _ = run_step(scheduler)
    assert [(c.request.request_id, c.start, c.num_tokens, c.samples) for c in output.chunks] == [("a", 0, 3, True)]
    scheduler.add(make_request("b", 20))  # longer than the budget: chunked
    output, _ = run_step(scheduler)
    assert [(c.request.request_id, c.start, c.num_tokens, c.samples) for c in output.chunks] == [
        ("a", 3, 1, True),
        ("b", 0, 7, False),
    ]
    output, _ = run_step(scheduler)
    assert [(c.request.request_id, c.start, c.num_tokens) for c in output.chunks] == [("a", 4, 1), ("b", 7, 7)]
    output, _ = run_step(scheduler)
    assert [(c.request.request_id, c.start, c.num_tokens, c.samples) for c in output.chunks] == [
        ("a", 5, 1, True),
        ("b", 14, 6, True),  # the last chunk samples b's first token
    ]
    assert scheduler.running[1].num_output_tokens == 1


def test_without_chunked_prefill_a_prompt_waits_for_a_budget_it_fits_whole():
    scheduler = make_scheduler(max_num_seqs=4, max_num_batched_tokens=8, enable_chunked_prefill=False)
    scheduler.add(make_request("a", 8, max_tokens=3))
    scheduler.add(make_request("b", 8))
    output, _ = run_step(scheduler)
    assert [c.request.request_id for c in output.chunks] == ["a"]
    output, _ = run_step(scheduler)  # a's decode uses 1 of 8 tokens: b's 8 do not fit
    assert [c.request.request_id for c in output.chunks] == ["a"]


def test_max_num_seqs_limits_admission():
    scheduler = make_scheduler(max_num_seqs=2, max_num_batched_tokens=64)
    for name in "abc":
        scheduler.add(make_request(name, 3))
    output, _ = run_step(scheduler)
    assert [c.request.request_id for c in output.chunks] == ["a", "b"]
    assert [r.request_id for r in scheduler.waiting] == ["c"]


def test_admission_waits_until_blocks_fit():
    scheduler = make_scheduler(num_blocks=4, block_size=4, max_num_seqs=4, max_num_batched_tokens=64)
    scheduler.add(make_request("a", 8, max_tokens=2))  # 2 blocks now, up to 3
    scheduler.add(make_request("b", 9, max_tokens=2))  # needs 3 blocks: only 2 free
    output, _ = run_step(scheduler)
    assert [c.request.request_id for c in output.chunks] == ["a"]
    run_step(scheduler)  # a finishes (max_tokens=2) and frees its blocks
    output, _ = run_step(scheduler)
    assert [c.request.request_id for c in output.chunks] == ["b"]


def test_preemption_frees_the_newest_and_requeues_it_in_front():
    # 3 blocks of 2 tokens. a and b take one block each; then both need a second block.
    scheduler = make_scheduler(num_blocks=3, block_size=2, max_num_seqs=4, max_num_batched_tokens=16)
    scheduler.add(make_request("a", 2, max_tokens=4))
    scheduler.add(make_request("b", 2, max_tokens=4))
    run_step(scheduler)  # a, b prefilled, one block each; each sampled a third token
    output, _ = run_step(scheduler)  # a takes the last free block; b finds none and preempts itself
    assert [r.request_id for r in output.preempted] == ["b"]
    assert [c.request.request_id for c in output.chunks] == ["a"]
    b = output.preempted[0]
    assert b.status is RequestStatus.PREEMPTED and b.num_computed_tokens == 0 and b.num_output_tokens == 1
    assert scheduler.waiting[0] is b  # back in front of the queue
    while scheduler.has_unfinished():
        run_step(scheduler)
    assert b.status is RequestStatus.FINISHED_LENGTH and b.num_output_tokens == 4
    assert scheduler.allocator.num_free_blocks == 3


def test_priority_policy_admits_lower_values_first():
    scheduler = make_scheduler(max_num_seqs=1, max_num_batched_tokens=64, policy="priority")
    scheduler.add(make_request("low", 3, priority=5))
    scheduler.add(make_request("high", 3, priority=0))
    output, _ = run_step(scheduler)
    assert [c.request.request_id for c in output.chunks] == ["high"]


def test_finish_request_frees_blocks_of_running_and_waiting_requests():
    scheduler = make_scheduler(max_num_seqs=1)
    scheduler.add(make_request("a", 3))
    scheduler.add(make_request("b", 3))
    run_step(scheduler)
    assert scheduler.finish_request("a", RequestStatus.FINISHED_ABORTED).status is RequestStatus.FINISHED_ABORTED
    assert scheduler.finish_request("b", RequestStatus.FINISHED_ABORTED) is not None
    assert scheduler.finish_request("nobody", RequestStatus.FINISHED_ABORTED) is None
    assert not scheduler.has_unfinished()
    assert scheduler.allocator.num_free_blocks == scheduler.allocator.num_blocks


def test_prefix_cache_hits_skip_computed_tokens():
    scheduler = make_scheduler(block_size=4, prefix_caching=True, max_num_seqs=4, max_num_batched_tokens=64)
    first = make_request("x", 10, max_tokens=1)
    scheduler.add(first)
    run_step(scheduler)
    second = Request("y", first.prompt_token_ids + [3], Params(max_tokens=1), eos_token_id=EOS)
    scheduler.add(second)
    output, _ = run_step(scheduler)
    assert output.num_cached_tokens == 8 and output.chunks[0].start == 8 and output.chunks[0].num_tokens == 3


# ----- property tests with a fake model -------------------------------------------------------


workloads = st.lists(
    st.tuples(
        st.integers(1, 40),  # prompt length
        st.integers(1, 12),  # max_tokens
        st.integers(0, 3),  # priority
        st.integers(0, 6),  # arrival step
    ),
    min_size=1,
    max_size=12,
)
configs = st.fixed_dictionaries(
    {
        "max_num_seqs": st.integers(1, 6),
        "extra_budget": st.integers(0, 40),
        "enable_chunked_prefill": st.booleans(),
        "policy": st.sampled_from(["fcfs", "priority"]),
        "block_size": st.sampled_from([1, 2, 4, 8]),
        "spare_blocks": st.integers(0, 20),
        "prefix_caching": st.booleans(),
    }
)


def simulate(workload, config, seed, sample_eos=True):
    """Run a workload to the end on a fake model; check the scheduler's promises at every step.

    The fake model samples random tokens (eos among them when ``sample_eos``).
    """
    rng = random.Random(seed)
    longest = max(prompt + max_tokens for prompt, max_tokens, _, _ in workload)
    block_size = config["block_size"]
    num_blocks = -(-longest // block_size) + config["spare_blocks"]  # the biggest request fits alone
    budget = config["max_num_seqs"] + config["extra_budget"]
    if not config["enable_chunked_prefill"]:
        budget = max(budget, max(prompt + max_tokens for prompt, max_tokens, _, _ in workload))
    scheduler = make_scheduler(
        num_blocks=num_blocks,
        block_size=block_size,
        prefix_caching=config["prefix_caching"],
        max_num_seqs=config["max_num_seqs"],
        max_num_batched_tokens=budget,
        enable_chunked_prefill=config["enable_chunked_prefill"],
        policy=config["policy"],
        max_model_len=10_000,
    )
    allocator = scheduler.allocator
    requests = []
    for index, (prompt_len, max_tokens, priority, arrival) in enumerate(workload):
        # Shared prompt starts, so prefix caching gets hits.
        prompt = [1 + (j if j < 8 else index + j) % 30 for j in range(prompt_len)]
        requests.append((arrival, Request(index, prompt, Params(max_tokens=max_tokens), eos_token_id=EOS, priority=priority)))

    total_work = sum(r.num_tokens + r.params.max_tokens for _, r in requests)
    step_limit = 4 * total_work * len(requests) + 20  # recompute can repeat work, but only so often
    first_scheduled: dict[int, int] = {}
    step = 0
    while step < step_limit and (scheduler.has_unfinished() or any(arrival >= step for arrival, _ in requests)):
        for arrival, request in requests:
            if arrival == step:
                scheduler.add(request)
        output = scheduler.schedule()
        assert output.num_batched_tokens <= budget
        assert len(scheduler.running) <= config["max_num_seqs"]
        assert len({id(c.request) for c in output.chunks}) == len(output.chunks)  # one chunk per request
        if scheduler.has_unfinished():
            assert output.chunks, "an empty step while requests are unfinished"
        for request in scheduler.running:
            assert allocator.num_slots(request.request_id) == request.num_tokens  # exactly: no slot too many
        for chunk in output.chunks:
            request = chunk.request
            assert request.status is RequestStatus.RUNNING
            assert chunk.start == request.num_computed_tokens and chunk.num_tokens >= 1
            assert chunk.start + chunk.num_tokens <= request.num_tokens
            assert allocator.num_slots(request.request_id) >= request.num_tokens  # blocks reserved
            first_scheduled.setdefault(request.request_id, step)
        vocab = [EOS, 5, 6, 7, 8, 9, 10, 11] if sample_eos else [5, 6, 7]
        tokens = [rng.choice(vocab) for c in output.chunks if c.samples]
        scheduler.update(output, tokens)
        in_tables = {block for r in scheduler.running for block in allocator.block_table(r.request_id)}
        held = {block for block, count in enumerate(allocator.ref_counts) if count > 0}
        assert in_tables == held  # only running requests hold blocks: nothing leaks
        step += 1

    assert step < step_limit, "the workload did not finish: a request starved or the scheduler stalled"
    for _, request in requests:
        assert request.is_finished
        assert 1 <= request.num_output_tokens <= request.params.max_tokens
        last = request.token_ids[-1]
        assert last == EOS or request.num_output_tokens == request.params.max_tokens
    assert allocator.num_free_blocks == allocator.num_blocks
    assert all(count == 0 for count in allocator.ref_counts)
    if config["policy"] == "fcfs":
        # First come, first served: nobody starts before a request that arrived earlier.
        arrival_rank = {r.request_id: (arrival, i) for i, (arrival, r) in enumerate(requests)}
        by_arrival = sorted(first_scheduled, key=arrival_rank.get)
        start_steps = [first_scheduled[i] for i in by_arrival]
        assert start_steps == sorted(start_steps), start_steps
    return scheduler


@settings(max_examples=120, deadline=None)
@given(workload=workloads, config=configs, seed=st.integers(0, 2**16))
def test_every_workload_finishes_within_limits(workload, config, seed):
    simulate(workload, config, seed)


def test_tight_pool_forces_preemption_and_everyone_still_finishes():
    workload = [(6, 12, 0, 0)] * 5
    config = {
        "max_num_seqs": 5,
        "extra_budget": 20,
        "enable_chunked_prefill": True,
        "policy": "fcfs",
        "block_size": 2,
        "spare_blocks": 4,
        "prefix_caching": False,
    }
    scheduler = simulate(workload, config, seed=1, sample_eos=False)
    assert scheduler.num_preemptions > 0


# ----- the batch planner is a function the scheduler takes (Lab 0.2 chapter 5) -------------------


def _planned(build_batch, chunked=True, budget=16):
    from course_lib.paged import BlockAllocator
    from course_lib.sampling import SamplingParams
    from course_lib.scheduler import Request, Scheduler, SchedulerConfig

    allocator = BlockAllocator(64, 4)
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=budget,
                                          enable_chunked_prefill=chunked), allocator, build_batch=build_batch)
    for index, length in enumerate((5, 30)):
        scheduler.add(Request(f"r{index}", list(range(1, length + 1)), SamplingParams(max_tokens=3)))
    return scheduler, scheduler.schedule()


def test_the_scheduler_plans_with_the_build_batch_it_is_given():
    from course_lib.scheduler import build_batch

    calls = []

    def recording(decode_ids, prefill_queue, token_budget, chunked=True):
        calls.append((list(decode_ids), list(prefill_queue), token_budget, chunked))
        return build_batch(decode_ids, prefill_queue, token_budget, chunked)

    _, output = _planned(recording)
    assert [(chunk.request.request_id, chunk.num_tokens) for chunk in output.chunks] == [("r0", 5), ("r1", 11)]
    assert calls[-1] == ([], [("r0", 5), ("r1", 30)], 16, True)


def _when_both_queued(wrong_plan):
    """A planner that answers like the reference until both prompts are in its queue, then ``wrong_plan``."""
    from course_lib.scheduler import build_batch

    def plan(decode_ids, prefill_queue, token_budget, chunked=True):
        if [request_id for request_id, _ in prefill_queue] == ["r0", "r1"]:
            return wrong_plan
        return build_batch(decode_ids, prefill_queue, token_budget, chunked)

    return plan


@pytest.mark.parametrize("wrong_plan, message", [
    ([("r1", 11), ("r0", 5)], None),
    ([("r0", 5), ("r1", 40)], "tokens; it has 30 left"),
    ([("r0", 5), ("nobody", 3)], "not \\(or no longer\\) in the prefill queue"),
    ([("r0", 5), ("r1", 12)], "more than the token budget"),
    ("r0", "pairs"),
])
def test_the_scheduler_refuses_a_plan_it_cannot_run(wrong_plan, message):
    if message is None:   # the order of prefills does not matter to the engine
        _planned(_when_both_queued(wrong_plan))
        return
    with pytest.raises(ValueError, match=message):
        _planned(_when_both_queued(wrong_plan))


def test_without_lab_02_chunked_prefill_is_off_with_a_warning(monkeypatch):
    import course_lib.scheduler as scheduler_module

    monkeypatch.setattr(scheduler_module, "is_locked", lambda lab: lab == "lab02-prefill-vs-decode")
    with pytest.warns(UserWarning, match="chunked prefill is off"):
        scheduler, output = _planned(None, chunked=True, budget=32)
    assert scheduler.config.enable_chunked_prefill is False
    assert [(chunk.request.request_id, chunk.num_tokens) for chunk in output.chunks] == [("r0", 5)]   # r1 waits whole
