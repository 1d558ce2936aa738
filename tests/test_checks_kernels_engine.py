"""The chapter 5 checks of Lab 0.3 (course_lib.checks.kernels_engine): the simulated GPU that grades
``time_paired`` catches each classic timing mistake; the engine check accepts the reference backend
and rejects a backend whose kernels ignore the engine's strided views (slow: SmolLM2 under the
interpreter).
"""

from __future__ import annotations

import pytest
import torch

from course_lib.checks import CheckFailed
from course_lib.checks import kernels_engine as checks
from tests.kernel_notebooks import SOLUTIONS, fails as _fails, demo_answers, replace_in_answer, student
from tests.notebook_answers import hidden_cases

ENGINE = "05_into_the_engine"
# The graded test's drifting device, written in its hidden region (the kit does not ship it).
DRIFTING = hidden_cases(SOLUTIONS / f"{ENGINE}.ipynb", "test_time_paired_hidden", "drifting", checks)


@pytest.fixture(scope="module")
def reference():
    return student(ENGINE)


# ---------------------------------------------------------------------------------------------
# The simulated GPU and time_paired
# ---------------------------------------------------------------------------------------------


def test_simulated_device_queues_work_until_synchronize():
    device = checks.SimulatedDevice({"a": 1.0}, launch_seconds=0.001)
    device.launch("a")
    assert device.clock() == pytest.approx(0.001) and device.clock_reads_while_busy == 1
    device.synchronize()
    assert device.clock() == pytest.approx(1.0)
    device.launch("a")
    device.launch("a")
    device.synchronize()
    assert device.clock() == pytest.approx(3.0) and device.longest_run() == 3


def test_simulated_device_drift_spikes_and_first_call():
    device = checks.SimulatedDevice({"a": 1.0, "b": 1.0}, drift=0.1, first_call_factor=10.0, spike_every=3,
                                    spike_factor=5.0, launch_seconds=0.0)
    costs = []
    for name in ("a", "b", "a", "b"):
        before = device.clock()
        device.launch(name)
        device.synchronize()
        costs.append(device.clock() - before)
    assert costs == pytest.approx([10.0, 11.0, 1.2 * 5, 1.3])


def test_reference_time_paired_passes_every_scenario(reference):
    for scenario in [*checks.SCENARIOS, DRIFTING]:
        checks.check_time_paired(reference["time_paired"], scenario)
    checks.check_time_paired(reference["time_paired"], "noisy", repeats=31, warmup=1)
    checks.check_time_paired(reference["time_paired"], DRIFTING, repeats=15, warmup=0, cost_scale=2.3)



def test_not_alternating_is_named():
    bad = student(ENGINE, {"time_paired": demo_answers("buggy-timing-not-alternated")[f"{ENGINE}/time_paired"]})
    _fails(checks.check_time_paired, bad["time_paired"], "steady", words=("in a row", "alternate"))


def test_pairs_always_in_the_same_order_are_named():
    bad = replace_in_answer(ENGINE, "time_paired", "        if pair % 2 == 0:", "        if True:")
    _fails(checks.check_time_paired, bad["time_paired"], "steady", words=("alternate their order", "A B A B"))


def test_the_mean_in_a_fixed_order_fails_the_visible_scenarios():
    bad = student(ENGINE, {"time_paired": demo_answers("buggy-timing-mean-fixed-order")[f"{ENGINE}/time_paired"]})
    _fails(checks.check_time_paired, bad["time_paired"], "steady", words=("alternate their order",))
    _fails(checks.check_time_paired, bad["time_paired"], "noisy", words=("alternate their order",))


def test_reading_the_clock_without_synchronizing_is_named():
    bad = replace_in_answer(ENGINE, "time_paired", "    wait = synchronize if synchronize is not None else (lambda: None)",
                            "    wait = lambda: None")
    _fails(checks.check_time_paired, bad["time_paired"], "asynchronous", words=("synchronize()",))


def test_the_mean_instead_of_the_median_is_named():
    bad = replace_in_answer(ENGINE, "time_paired", "return statistics.median(times_a), statistics.median(times_b)",
                            "return statistics.mean(times_a), statistics.mean(times_b)")
    checks.check_time_paired(bad["time_paired"], "steady")
    _fails(checks.check_time_paired, bad["time_paired"], "noisy", words=("median",))


def test_timing_the_warmup_too_is_caught():
    bad = replace_in_answer(ENGINE, "time_paired", "    for _ in range(warmup):\n        run_a()\n        run_b()\n",
                            "")
    _fails(checks.check_time_paired, bad["time_paired"], "steady", words=("warmup + repeats",))


def test_unknown_scenario_is_a_clear_error(reference):
    with pytest.raises(ValueError, match=r"scenario must be \(costs, device settings, purpose\) or one of"):
        checks.check_time_paired(reference["time_paired"], "sunny")


# ---------------------------------------------------------------------------------------------
# The backend in the engine
# ---------------------------------------------------------------------------------------------


def test_a_backend_without_store_is_told_what_is_missing():
    class DecodeOnly:
        def decode(self, q, k_cache, v_cache, block_tables, seq_lens, scale):
            raise AssertionError("never called")

    _fails(checks.check_backend_serves_smollm2, DecodeOnly(), ["Hi"], 2, words=("store",))


@pytest.mark.slow
def test_reference_backend_serves_smollm2(reference):
    with torch.inference_mode():
        checks.check_backend_serves_smollm2(reference["KernelBackend"](), ["The capital of France is", "Hi!"],
                                            max_tokens=3, block_size=4)


@pytest.mark.slow
def test_kernels_that_ignore_the_engine_strides_are_caught():
    bad = student(ENGINE, demo_answers("buggy-kernels-assume-contiguous"))   # chapter 4's kernels, imported
    _fails(checks.check_backend_serves_smollm2, bad["KernelBackend"](), ["The capital of France is"], max_tokens=2,
           block_size=4, words=("differ from the torch backend's",))


@pytest.mark.slow
def test_a_backend_that_hands_decode_to_torch_is_refused():
    source = (
        "from course_lib.model_runner import paged_decode_attention_torch\n\n"
        "class KernelBackend:\n"
        "    def decode(self, q, k_cache, v_cache, block_tables, seq_lens, scale):\n"
        "        return paged_decode_attention_torch(q, k_cache, v_cache, block_tables, seq_lens, scale)\n\n"
        "    def store(self, k, v, k_cache, v_cache, slot_mapping):\n"
        "        return store_kv(k, v, k_cache, v_cache, slot_mapping)\n"
    )
    bad = student(ENGINE, {"KernelBackend": source})
    _fails(checks.check_backend_serves_smollm2, bad["KernelBackend"](), ["Hi"], 2, words=("reference",))


def test_speed_check_needs_a_gpu(reference):
    from course_lib.checks import NeedsGPU

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(NeedsGPU):
        checks.check_decode_speed(reference["KernelBackend"]())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_speed_check_passes_the_reference_backend_on_a_gpu(reference):
    checks.check_decode_speed(reference["KernelBackend"]())


def test_hard_coded_medians_fail_on_other_costs():
    source = ("def time_paired(run_a, run_b, repeats=20, *, warmup=2, clock=time.perf_counter, synchronize=None):\n"
              "    wait = synchronize or (lambda: None)\n"
              "    for _ in range(warmup):\n        run_a()\n        run_b()\n"
              "    for pair in range(repeats):\n"
              "        for run in ((run_a, run_b) if pair % 2 == 0 else (run_b, run_a)):\n"
              "            wait()\n            clock()\n            run()\n            wait()\n            clock()\n"
              "    return 0.002, 0.001\n")
    cheat = student(ENGINE, {"time_paired": source})
    checks.check_time_paired(cheat["time_paired"], "steady")      # the visible scenario's costs...
    _fails(checks.check_time_paired, cheat["time_paired"], "steady", cost_scale=0.37, words=("median seconds",))


def test_a_pure_torch_backend_launches_no_kernel():
    from course_lib.checks import kernels as kernel_checks

    def torch_only_generate():
        return [1, 2, 3]

    with pytest.raises(CheckFailed, match="without launching a Triton kernel"):
        kernel_checks.call_kernel(torch_only_generate, "generate()")
