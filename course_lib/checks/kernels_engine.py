"""Checks for Lab 0.3, chapter 5: the student's kernels as the engine's attention backend, and honest timing.

- ``check_backend_serves_smollm2``: ``LLMEngine`` with the student's backend (built next to the
  student's code with ``make``) generates greedily for a few short prompts; the tokens must equal
  the engine's torch backend's, and (locally) the backend's ``decode`` and ``store`` must really
  have been called, on batches of more than one sequence.
- ``check_time_paired``: the student's ``time_paired`` measures functions on a simulated GPU
  (``SimulatedDevice``) whose launches return at once, whose clock only moves when the work is
  done, that slows down as it runs, whose first call of each function compiles, and where another
  process now and then steals the device. Only a timer that synchronizes before reading the clock,
  warms up, alternates the two functions and takes medians gets the right numbers.
- ``check_decode_speed`` (GPU only): the backend's decode at batch 8, context 4096 (32 query / 8 KV
  heads of 128, bf16) against the course's reference kernel, output verified first, then paired
  alternated runs, median; a time below what the memory allows is rejected as not credible.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from course_lib.checks import call_student, expect_close, fail, is_remote, make, register_reference_names, \
    require_gpu, require_own_implementation, share, smollm2
from course_lib.checks.fixtures import recorded_check, reference
from course_lib.checks.kernels import call_kernel, is_close, measured_copy_bandwidth, paired_median_seconds, \
    require_credible

__all__ = [
    "SimulatedDevice",
    "check_backend_serves_smollm2",
    "check_decode_speed",
    "check_time_paired",
]

register_reference_names("time_paired", "paged_decode_attention_torch")


# ---------------------------------------------------------------------------------------------
# The backend inside the engine
# ---------------------------------------------------------------------------------------------


def _engine_settings(block_size: int, max_num_seqs: int, num_blocks: int) -> dict:
    # No prefix caching: every prompt's blocks are computed (and stored by the backend) from scratch.
    return {"block_size": block_size, "num_blocks": num_blocks, "max_num_seqs": max_num_seqs,
            "enable_prefix_caching": False}


def _torch_backend_tokens(prompts: list[str], max_tokens: int, block_size: int, max_num_seqs: int,
                          num_blocks: int) -> list[list[int]]:
    from course_lib.engine import LLMEngine
    from course_lib.sampling import SamplingParams

    model, tokenizer = smollm2()
    engine = LLMEngine(model, tokenizer, attention_backend="torch",
                       **_engine_settings(block_size, max_num_seqs, num_blocks))
    with torch.inference_mode():
        outputs = engine.generate(list(prompts), SamplingParams(temperature=0.0, max_tokens=max_tokens))
    return [list(output.token_ids) for output in outputs]


class _CountingBackend:
    """Forwards to the student's backend and counts what the engine asked of it (local checks only)."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self.decode_calls = 0
        self.store_calls = 0
        self.largest_decode_batch = 0

    def decode(self, q, k_cache, v_cache, block_tables, seq_lens, scale):
        self.decode_calls += 1
        self.largest_decode_batch = max(self.largest_decode_batch, int(q.shape[0]))
        return self._backend.decode(q, k_cache, v_cache, block_tables, seq_lens, scale)

    def store(self, k, v, k_cache, v_cache, slot_mapping):
        self.store_calls += 1
        return self._backend.store(k, v, k_cache, v_cache, slot_mapping)


@recorded_check
def check_backend_serves_smollm2(student_backend: Any, prompts: list[str], max_tokens: int, *,
                                 block_size: int = 16, max_num_seqs: int = 4) -> None:
    """``LLMEngine(model, tokenizer, attention_backend=student_backend)`` must generate, greedily, the same
    tokens as the torch backend for every prompt (plain text, kept short: the kernels run under the
    interpreter on a CPU), calling the backend's ``decode`` and ``store``."""
    from course_lib.engine import LLMEngine
    from course_lib.model import load_smollm2
    from course_lib.sampling import SamplingParams

    for method in ("decode", "store"):
        if not callable(getattr(student_backend, method, None)):
            fail(f"the backend has no method {method}(...)", expected=f"{method}(...)", got="missing",
                 hint="an AttentionBackend has decode(q, k_cache, v_cache, block_tables, seq_lens, scale) and "
                      "store(k, v, k_cache, v_cache, slot_mapping).")
    require_own_implementation(type(student_backend) if not is_remote(student_backend) else student_backend,
                               "the backend")
    prompts = list(prompts)
    _, tokenizer = smollm2()
    longest = max(len(tokenizer.encode(prompt)) for prompt in prompts) + max_tokens
    num_blocks = len(prompts) * -(-longest // block_size) + 2
    counting = None if is_remote(student_backend) else _CountingBackend(student_backend)
    backend = student_backend if counting is None else counting
    settings = _engine_settings(block_size, max_num_seqs, num_blocks)
    setup = (f"{len(prompts)} prompts of up to {longest - max_tokens} tokens, max_tokens={max_tokens}, "
             f"block_size={block_size}, max_num_seqs={max_num_seqs}")
    # The engine runs next to the student's backend, on a model built there (when grading: the
    # student's kernel loads its own SmolLM2; what the check compares is only the tokens it returns).
    model, kernel_tokenizer = make(load_smollm2) if is_remote(student_backend) else smollm2()
    engine = make(LLMEngine, model, kernel_tokenizer, attention_backend=backend, **settings)
    greedy = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    with torch.inference_mode():
        outputs = call_kernel(engine.generate, f"LLMEngine(..., attention_backend=your backend).generate ({setup})",
                              list(prompts), greedy, copy_args=False)
    generated = [list(output.token_ids) for output in outputs]
    if counting is not None:
        if counting.store_calls == 0 or counting.decode_calls == 0:
            fail(f"the engine served the prompts without calling the backend ({setup})",
                 expected="decode and store calls", got=f"{counting.decode_calls} decode, {counting.store_calls} store calls")
    expected = reference(_torch_backend_tokens)(list(prompts), max_tokens, block_size, max_num_seqs, num_blocks)
    for index, (tokens, wanted) in enumerate(zip(generated, expected)):
        if tokens == wanted:
            continue
        where = next((i for i, (a, b) in enumerate(zip(tokens, wanted)) if a != b), min(len(tokens), len(wanted)))
        hint = ("the first generated token comes from the prefill (torch SDPA), every later one from your decode "
                "attention over the cache your store wrote. ")
        hint += ("so already the prefill's stored keys and values are wrong: check store (slot -> block, offset; "
                 "strided k and v)." if where == 0 else
                 "A wrong later token: check decode with strided q, several sequences of different lengths, and the "
                 "store of the newest token (its key must be in the cache before attention runs).")
        fail(f"prompt {index} ({prompts[index]!r}): your backend's greedy tokens differ from the torch backend's "
             f"from token {where} on ({setup})", expected=wanted, got=tokens, hint=hint)
    if counting is not None and len(prompts) > 1 and counting.largest_decode_batch < 2:
        fail(f"decode was never called with more than one sequence ({setup})", show_values=False,
             hint="the engine batches decodes: your decode must take all the sequences of a call at once.")


# ---------------------------------------------------------------------------------------------
# Honest timing, on a simulated GPU
# ---------------------------------------------------------------------------------------------


class SimulatedDevice:
    """A GPU as a timer sees it, in simulated seconds.

    ``launch(name)`` queues a kernel and returns at once (it costs ``launch_seconds`` of wall time);
    ``synchronize()`` waits until the queue is empty; ``clock()`` reads the simulated time. A call's
    cost is ``cost[name]`` times: ``first_call_factor`` on the first call of each function
    (compilation), ``spike_factor`` on every ``spike_every``-th call of the session (another process
    on the device), and ``1 + drift * (calls so far)`` (the device heats up and clocks down).
    """

    def __init__(self, costs: dict[str, float], *, drift: float = 0.0, first_call_factor: float = 1.0,
                 spike_every: int = 0, spike_factor: float = 1.0, launch_seconds: float = 2e-6) -> None:
        self.costs = dict(costs)
        self.drift = drift
        self.first_call_factor = first_call_factor
        self.spike_every = spike_every
        self.spike_factor = spike_factor
        self.launch_seconds = launch_seconds
        self.now = 0.0
        self.busy_until = 0.0
        self.calls: list[str] = []
        self.clock_reads_while_busy = 0

    def launch(self, name: str) -> None:
        cost = self.costs[name] * (1 + self.drift * len(self.calls))
        if name not in self.calls:
            cost *= self.first_call_factor
        self.calls.append(name)
        if self.spike_every and len(self.calls) % self.spike_every == 0:
            cost *= self.spike_factor
        self.busy_until = max(self.busy_until, self.now) + cost
        self.now += self.launch_seconds

    def synchronize(self) -> None:
        self.now = max(self.now, self.busy_until)

    def clock(self) -> float:
        if self.busy_until > self.now:
            self.clock_reads_while_busy += 1
        return self.now

    def longest_run(self) -> int:
        """The most consecutive calls of one function (1 or 2 when the calls alternate)."""
        longest = run = 0
        previous = None
        for name in self.calls:
            run = run + 1 if name == previous else 1
            longest, previous = max(longest, run), name
        return longest


class _Launcher:
    def __init__(self, device: SimulatedDevice, name: str) -> None:
        self.device, self.name = device, name

    def __call__(self) -> None:
        self.device.launch(self.name)


class _Synchronize:
    def __init__(self, device: SimulatedDevice) -> None:
        self.device = device

    def __call__(self) -> None:
        self.device.synchronize()


class _Clock:
    def __init__(self, device: SimulatedDevice) -> None:
        self.device = device

    def __call__(self) -> float:
        return self.device.clock()


SCENARIOS = {
    # name: (costs of a and b in seconds, SimulatedDevice settings, what it catches). The visible tests'
    # devices; the graded tests write theirs in their hidden regions (this module ships in the kit).
    "steady": ({"a": 2e-3, "b": 1e-3}, {}, "a quiet device: the medians are the costs"),
    "asynchronous": ({"a": 3e-3, "b": 1.5e-3}, {"launch_seconds": 1e-6},
                     "launches return at once: without synchronize() the clock measures nothing"),
    "noisy": ({"a": 2e-3, "b": 1e-3}, {"first_call_factor": 200.0, "spike_every": 6, "spike_factor": 30.0},
              "the first call compiles and every 6th call is disturbed: only medians after a warm-up are right"),
}


@recorded_check
def check_time_paired(student_time_paired: Callable, scenario: str | tuple[dict, dict, str], repeats: int = 20,
                      warmup: int = 2, *, cost_scale: float = 1.0) -> None:
    """``time_paired(run_a, run_b, repeats, warmup=..., clock=..., synchronize=...)`` on a simulated GPU
    (one of ``SCENARIOS`` by name, or a (costs, device settings, purpose) of the same form, with every
    cost multiplied by ``cost_scale``) must return the true median cost of each function; on a device
    that drifts, where no cost stays true, the true ratio of the two."""
    require_own_implementation(student_time_paired, "time_paired")
    if isinstance(scenario, str):
        if scenario not in SCENARIOS:
            raise ValueError(f"scenario must be (costs, device settings, purpose) or one of {sorted(SCENARIOS)}, "
                             f"got {scenario!r}")
        scenario = SCENARIOS[scenario]
    if not cost_scale > 0:
        raise ValueError(f"cost_scale must be > 0, got {cost_scale!r}")
    base_costs, settings, purpose = scenario
    costs = {name: cost * cost_scale for name, cost in base_costs.items()}
    device = SimulatedDevice(costs, **settings)
    run_a, run_b = share(_Launcher(device, "a"), "__call__"), share(_Launcher(device, "b"), "__call__")
    clock, synchronize = share(_Clock(device), "__call__"), share(_Synchronize(device), "__call__")
    call = (f"time_paired(run_a, run_b, {repeats}, warmup={warmup}, clock=..., synchronize=...) on a simulated GPU "
            f"({purpose}; true costs: a {costs['a'] * 1e3:g} ms, b {costs['b'] * 1e3:g} ms)")
    result = call_student(student_time_paired, call, run_a, run_b, repeats, warmup=warmup, clock=clock,
                          synchronize=synchronize, copy_args=False, show_args=False)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        fail(f"{call} must return (median_seconds_a, median_seconds_b)", expected="(float, float)", got=result)
    median_a, median_b = result
    calls_a, calls_b = device.calls.count("a"), device.calls.count("b")
    if (calls_a, calls_b) != (repeats + warmup, repeats + warmup):
        fail(f"{call}: each function must run warmup + repeats = {repeats + warmup} times",
             expected=(repeats + warmup, repeats + warmup), got=(calls_a, calls_b),
             hint="warm-up calls first (untimed), then `repeats` timed calls of each.")
    if device.clock_reads_while_busy:
        fail(f"{call}: the clock was read {device.clock_reads_while_busy} times while launched work was still "
             "running", show_values=False,
             hint="a launch returns before the kernel finishes: call synchronize() before every clock reading "
                  "(before starting the timer, and again after the call, before stopping it).")
    if device.longest_run() > 2:
        fail(f"{call}: the same function ran {device.longest_run()} times in a row", show_values=False,
             hint="alternate the two: time A then B, then B then A, and so on, so both see the same conditions.")
    timed = device.calls[2 * warmup:]
    promised = [name for pair in range(repeats) for name in (("a", "b") if pair % 2 == 0 else ("b", "a"))]
    if timed != promised:
        pair = next(i // 2 for i, (got, wanted) in enumerate(zip(timed, promised)) if got != wanted)
        shown = " ".join(timed[:8]).upper()
        fail(f"{call}: the timed calls must alternate their order, A B, then B A, then A B...; yours ran "
             f"{shown}{' ...' if len(timed) > 8 else ''} (pair {pair} is in the wrong order)", show_values=False,
             hint="the function that runs second in a pair always runs on a warmer, more drifted device: swap the "
                  "order every pair (A then B for even pairs, B then A for odd ones) so neither is always first.")
    if settings.get("drift"):
        expect_close(float(median_b) / float(median_a), costs["b"] / costs["a"], f"{call}: median_b / median_a",
                     rel=0.05, hint="alternate the calls so the device's drift hits both functions alike.")
        return
    for name, got in (("a", median_a), ("b", median_b)):
        expect_close(got, costs[name], f"{call}: the median seconds of {name}", rel=0.02,
                     hint="time each call on its own (synchronize, clock, call, synchronize, clock), leave the "
                          "warm-up calls out, and return the median of each function's times, not the mean "
                          "(one disturbed call moves a mean, not a median).")


# ---------------------------------------------------------------------------------------------
# GPU: the backend's decode speed
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_decode_speed(student_backend: Any, num_seqs: int = 8, context: int = 4096, *,
                       min_fraction_of_reference: float = 1 / 3) -> None:
    """GPU: ``student_backend.decode`` at ``num_seqs`` sequences of ``context`` tokens (32 query / 8 KV heads of
    128, bf16, blocks of 16) must match the reference kernel, then run at least ``min_fraction_of_reference``
    as fast (median of paired, alternated runs), and no faster than the memory allows."""
    from course_lib.checks.kernels_paged import paged_case
    from course_lib.kernels.paged_attention import decode_attention_traffic, paged_decode_attention

    require_gpu("timing your decode kernel")
    case = paged_case([context] * num_seqs, 32, 8, 128, 16, dtype=torch.bfloat16, spare_blocks=0)
    q, k_cache, v_cache, tables, lens, scale = (t.cuda() if torch.is_tensor(t) else t for t in case.args())
    call = f"your backend's decode at batch {num_seqs}, context {context}, 32/8 heads of 128, bf16 (GPU)"
    got = call_kernel(student_backend.decode, call, q, k_cache, v_cache, tables, lens, scale, copy_args=False)
    # The reference kernel is both the oracle and the baseline here, so this check runs only where the
    # reference is present (the instructor edition, or a kit with Lab 0.3 unlocked): timings cannot be replayed.
    reference_kernel = reference(paged_decode_attention)
    expected = reference_kernel(q, k_cache, v_cache, tables, lens, scale)
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape or not is_close(got.float().cpu(),
                                                                                      expected.float().cpu(),
                                                                                      torch.bfloat16):
        fail(f"{call} does not match the reference kernel; its speed is not measured", show_values=False,
             hint="pass the CPU checks first.")
    student, reference_seconds = paired_median_seconds(
        lambda: student_backend.decode(q, k_cache, v_cache, tables, lens, scale),
        lambda: reference_kernel(q, k_cache, v_cache, tables, lens, scale))
    num_bytes, _ = decode_attention_traffic([context] * num_seqs, 16, 32, 8, 128, 2)
    copy_rate = measured_copy_bandwidth()
    require_credible(call, student, num_bytes, copy_rate)
    if student * min_fraction_of_reference > reference_seconds:
        fail(f"{call}: median {student * 1e6:.0f} us ({num_bytes / student / copy_rate:.0%} of the copy bandwidth), "
             f"the reference kernel {reference_seconds * 1e6:.0f} us ({num_bytes / reference_seconds / copy_rate:.0%})",
             show_values=False,
             hint="enough programs to fill the GPU (choose_num_splits picks the splits: 8 sequences x 8 KV heads are "
                  "64 programs without them, for 132 SMs), and one load of each K/V tile per KV head, shared by "
                  "the group's query heads.")

