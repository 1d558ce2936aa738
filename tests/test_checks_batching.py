"""The chapter-4 checks of Lab 0.2 (course_lib.checks.batching) accept the reference answers and reject
typical mistakes, the demo students' included, with feedback that names the mistake.

The answers come from the solution notebook's answer cells and the demo specs, run with exec in a
fresh namespace (the notebook itself is not run), so these tests stay fast.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import nbformat
import pytest

from course_lib.checks import CheckFailed
from course_lib.checks import batching as checks
from course_lib.sim import batching as sim
from tests.notebook_answers import answer_sources

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "lab02-prefill-vs-decode" / "04_batching.ipynb"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab02-prefill-vs-decode"
HAND_COST = sim.StepCost(overhead_s=0.010, per_prefill_token_s=0.001, per_decode_seq_s=0.0)
POLICY_ANSWERS = {"static": "static_batching", "dynamic": "dynamic_batching",
                  "continuous": "continuous_batching", "priority": "priority_batching"}


def _answer_sources() -> dict[str, str]:
    return answer_sources(SOLUTION)


def _student(replacements: dict[str, str] | None = None) -> dict:
    """The namespace a student's notebook would have: every answer cell run, some replaced."""
    namespace = {"__name__": "__main__"}
    for grade_id, source in _answer_sources().items():
        exec(compile((replacements or {}).get(grade_id, source), f"<answer {grade_id}>", "exec"), namespace)
    return namespace


def _demo(name: str) -> dict:
    return _student(runpy.run_path(str(DEMO_SPECS / f"{name}.py"))["ANSWERS"])


def _with(grade_id: str, source: str) -> dict:
    return _student({grade_id: source})


@pytest.fixture(scope="module")
def reference():
    return _student()


def _check_policy_everywhere(namespace: dict, policy: str) -> None:
    student = namespace[POLICY_ANSWERS[policy]]
    timeout_s = 0.05 if policy == "dynamic" else None
    for description, state in checks.crafted_states(policy):
        checks.check_policy_state(student, policy, state, timeout_s=timeout_s, description=description)
    for seed in range(2):
        workload = checks.random_workload(seed, num_priorities=3 if policy == "priority" else 1)
        checks.check_policy_run(student, policy, workload, max_batch_size=4, timeout_s=timeout_s)


@pytest.mark.parametrize("policy", sorted(POLICY_ANSWERS))
def test_reference_policies_pass(reference, policy):
    _check_policy_everywhere(reference, policy)


def test_reference_metrics_pass(reference):
    for values, q in (([5.0], 99), ([3.0, 1.0, 2.0], 0), ([0.0, 10.0], 90), ([1.0, 2.0, 3.0, 4.0], 50)):
        checks.check_percentile(reference["percentile"], values, q)
    for seed in range(3):
        checks.check_compute_metrics(reference["compute_metrics"], checks.random_traces(seed))
    checks.check_compute_metrics(reference["compute_metrics"], checks.simulated_traces(5))
    checks.check_compute_metrics(reference["compute_metrics"], checks.hand_traces())


def test_header_announces_the_points():
    notebook = nbformat.read(SOLUTION, as_version=4)
    points = sum(cell.metadata["nbgrader"].get("points", 0) for cell in notebook.cells
                 if cell.metadata.get("nbgrader", {}).get("grade"))
    assert f"**{points:g} points**" in notebook.cells[0].source


def test_demo_continuous_overfills_fails_with_the_batch_limit():
    student = _demo("buggy-continuous-overfills")["continuous_batching"]
    with pytest.raises(CheckFailed, match="at most 2 may join"):
        _check_policy_everywhere({"continuous_batching": student}, "continuous")
    with pytest.raises(CheckFailed, match="refused your policy"):
        checks.check_policy_run(student, "continuous", checks.random_workload(0), max_batch_size=4)


def test_demo_tpot_by_n_is_told_about_the_gaps():
    namespace = _demo("buggy-tpot-divides-by-n")
    with pytest.raises(CheckFailed, match=r"n - 1 gaps"):
        checks.check_compute_metrics(namespace["compute_metrics"], checks.random_traces(0))
    checks.check_percentile(namespace["percentile"], [0.0, 10.0], 90)  # the rest is right


def test_demo_nearest_rank_percentile_is_told_the_rule():
    namespace = _demo("buggy-percentile-nearest-rank")
    with pytest.raises(CheckFailed, match="nearest-rank"):
        checks.check_percentile(namespace["percentile"], [0.02, 0.03, 0.05, 0.07], 50)


def test_static_that_never_gives_up_waiting_is_caught():
    namespace = _with("static_batching", '''
def static_batching(state):
    if state.running or len(state.waiting) < state.max_batch_size:
        return []
    return list(state.waiting[: state.max_batch_size])
''')
    with pytest.raises(CheckFailed, match="wait forever"):
        _check_policy_everywhere(namespace, "static")


def test_static_that_joins_a_running_batch_is_caught():
    namespace = _with("static_batching", '''
def static_batching(state):
    free = state.max_batch_size - len(state.running)
    if len(state.waiting) >= free or state.all_arrived:
        return list(state.waiting[:free])
    return []
''')
    with pytest.raises(CheckFailed, match="never adds to a batch that is running"):
        _check_policy_everywhere(namespace, "static")


def test_dynamic_with_strict_timeout_is_caught():
    namespace = _with("dynamic_batching", '''
def dynamic_batching(state, timeout_s):
    if state.running or not state.waiting:
        return []
    if len(state.waiting) >= state.max_batch_size or state.now - state.waiting[0].arrival_time > timeout_s:
        return list(state.waiting[: state.max_batch_size])
    return []
''')
    with pytest.raises(CheckFailed, match=r"now - arrival_time >= timeout_s"):
        _check_policy_everywhere(namespace, "dynamic")


def test_continuous_taking_the_newest_is_caught():
    namespace = _with("continuous_batching", '''
def continuous_batching(state):
    free = state.max_batch_size - len(state.running)
    return list(state.waiting[::-1][:free])
''')
    with pytest.raises(CheckFailed, match="arrival order"):
        _check_policy_everywhere(namespace, "continuous")


def test_priority_with_reversed_order_is_caught():
    namespace = _with("priority_batching", '''
def priority_batching(state):
    free = state.max_batch_size - len(state.running)
    return sorted(state.waiting, key=lambda r: (-r.priority, r.arrival_time))[:free]
''')
    with pytest.raises(CheckFailed, match="lower priority numbers first"):
        _check_policy_everywhere(namespace, "priority")


def test_a_crashing_policy_becomes_feedback():
    namespace = _with("continuous_batching", '''
def continuous_batching(state):
    return [state.waiting[0]]
''')
    with pytest.raises(CheckFailed, match="raised IndexError"):
        _check_policy_everywhere(namespace, "continuous")


def test_re_exporting_the_reference_earns_nothing():
    with pytest.raises(CheckFailed, match="reference"):
        checks.check_policy_state(sim.continuous_policy, "continuous", checks.crafted_states("continuous")[0][1])
    namespace = _with("continuous_batching", '''
from course_lib.sim.batching import continuous_policy

def continuous_batching(state):
    return continuous_policy(state)
''')
    with pytest.raises(CheckFailed, match="reference"):
        checks.check_policy_state(namespace["continuous_batching"], "continuous",
                                  checks.crafted_states("continuous")[1][1])


def test_percentile_mistakes_get_their_hint(reference):
    unsorted = _with("percentile", '''
def percentile(values, q):
    rank = (len(values) - 1) * q / 100
    lower = int(rank)
    upper = min(lower + 1, len(values) - 1)
    return values[lower] + (rank - lower) * (values[upper] - values[lower])
''')["percentile"]
    with pytest.raises(CheckFailed, match="sort the values first"):
        checks.check_percentile(unsorted, [9.0, 1.0, 7.0, 3.0], 50)


def test_metrics_mistakes_get_their_hint(reference):
    source = _answer_sources()["compute_metrics"]
    from_first_token = source.replace("min(t.arrival_time for t in traces)", "min(t.token_times[0] for t in traces)")
    assert from_first_token != source
    with pytest.raises(CheckFailed, match="earliest \\*arrival\\*"):
        checks.check_compute_metrics(_with("compute_metrics", from_first_token)["compute_metrics"],
                                     checks.random_traces(1))
    ttft_from_zero = source.replace("t.token_times[0] - t.arrival_time", "t.token_times[0]")
    assert ttft_from_zero != source
    with pytest.raises(CheckFailed, match="TTFT = token_times\\[0\\] - arrival_time"):
        checks.check_compute_metrics(_with("compute_metrics", ttft_from_zero)["compute_metrics"],
                                     checks.random_traces(2))
    keeps_one_token = source.replace("if len(t.token_times) >= 2", "if len(t.token_times) >= 1").replace(
        "/ (len(t.token_times) - 1)", "/ max(len(t.token_times) - 1, 1)")
    assert keeps_one_token != source
    with pytest.raises(CheckFailed, match="fewer than 2 tokens"):
        checks.check_compute_metrics(_with("compute_metrics", keeps_one_token)["compute_metrics"],
                                     checks.random_traces(0))


def test_check_arguments_are_validated():
    with pytest.raises(ValueError, match="policy must be one of"):
        checks.crafted_states("fifo")
    with pytest.raises(ValueError, match="timeout_s"):
        checks.check_policy_state(lambda state, timeout_s: [], "dynamic", checks.crafted_states("dynamic")[0][1])



def test_plain_inputs_for_the_recorded_checks(reference):
    """Test cells describe workloads and traces as tuples; the hand example by name."""
    assert all(len(spec) == 5 for spec in checks.random_workload(0))
    checks.check_policy_states(reference["static_batching"], "static")
    checks.check_policy_run(reference["static_batching"], "static", "hand", max_batch_size=2, cost="hand")
    checks.check_policy_run(reference["dynamic_batching"], "dynamic", "hand", max_batch_size=2, timeout_s=0.005,
                            cost="hand")
    hand = checks.hand_traces()
    assert [spec[0] for spec in hand] == [0, 1, 2, 3]
    simulated = sim.simulate([sim.SimRequest(*spec) for spec in checks.HAND_WORKLOAD], sim.continuous_policy,
                             max_batch_size=2, cost=checks.HAND_COST)
    for written, trace in zip(hand, simulated.traces, strict=True):
        assert written[:3] == (trace.request_id, trace.arrival_time, trace.num_prompt_tokens)
        assert written[3] == pytest.approx(trace.token_times, abs=1e-12)
    checks.check_compute_metrics(reference["compute_metrics"], [(0, 0.0, 5, [0.5]), (1, 0.2, 5, [0.9])])
    with pytest.raises(ValueError, match="'hand'"):
        checks.check_policy_run(reference["static_batching"], "static", "other", max_batch_size=2)


def test_a_policy_sees_a_state_built_for_it_and_answers_by_request_id(reference):
    seen = []

    def spy(state):
        seen.append(state)
        return reference["continuous_batching"](state)

    state = checks.crafted_states("continuous")[1][1]
    checks.check_policy_state(spy, "continuous", state)
    assert seen[0] == state and seen[0] is not state   # equal in value, built with checks.make

    def answers_with_copies(state):
        import dataclasses

        return [dataclasses.replace(request) for request in reference["continuous_batching"](state)]

    checks.check_policy_run(answers_with_copies, "continuous", checks.random_workload(1), max_batch_size=4)


@pytest.mark.slow
def test_engine_traces_are_the_engines_schedule_on_a_clock_that_no_machine_changes():
    first, again = checks.engine_traces(2, num_requests=3), checks.engine_traces(2, num_requests=3)
    assert first == again
    assert [trace.arrival_time for trace in first] == sorted(trace.arrival_time for trace in first)
    assert all(len(trace.token_times) == 6 for trace in first)
    # max_num_seqs=2: the third request waits for a place, so its first token comes later than one step's cost.
    assert first[2].token_times[0] - first[2].arrival_time > 2 * checks.STEP_CLOCK.overhead_s


@pytest.mark.slow
def test_metrics_of_a_real_engine_run(reference):
    checks.check_compute_metrics_on_engine(reference["compute_metrics"], max_num_seqs=2, num_requests=3)
    with pytest.raises(CheckFailed, match="n - 1 gaps"):
        checks.check_compute_metrics_on_engine(_demo("buggy-tpot-divides-by-n")["compute_metrics"], max_num_seqs=2,
                                               num_requests=3)


def test_priority_by_a_stable_sort_on_priority_alone_is_right():
    """The lab promises state.waiting in (arrival_time, request_id) order, so ties need no key of their own."""
    stable = _with("priority_batching", (
        "def priority_batching(state):\n"
        "    free_places = state.max_batch_size - len(state.running)\n"
        "    return sorted(state.waiting, key=lambda r: r.priority)[:free_places]\n"))
    _check_policy_everywhere(stable, "priority")
    for seed in range(30, 33):
        checks.check_policy_run(stable["priority_batching"], "priority",
                                checks.random_workload(seed, num_priorities=3), max_batch_size=4)


def test_every_waiting_queue_keeps_the_promised_order():
    """What makes the stable sort right: the simulator and the hand-made states keep arrival order."""
    for policy in ("static", "dynamic", "continuous", "priority"):
        for _, state in checks.crafted_states(policy):
            order = [(r.arrival_time, r.request_id) for r in state.waiting]
            assert order == sorted(order), (policy, order)
    seen = []

    def recording(state):
        seen.append([(r.arrival_time, r.request_id) for r in state.waiting])
        return sim.continuous_policy(state)

    workload = sim.poisson_workload(40, rate_per_s=30.0, seed=3, num_priorities=3)
    sim.simulate(workload, recording, max_batch_size=3)
    assert seen and all(order == sorted(order) for order in seen)
