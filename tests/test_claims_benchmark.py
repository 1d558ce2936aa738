"""Tests of benchmarks/claims.py's counting, with a fake notebook runner (no kernel, no busy loops)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def claims_benchmark():
    spec = importlib.util.spec_from_file_location("claims_benchmark", ROOT / "benchmarks" / "claims.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def fake_runner(outcomes, stop_at=None):
    """run_one(path, log) that appends one claim per call, held as ``outcomes`` says in turn.

    ``stop_at``: the call (0-based) that raises KeyboardInterrupt instead, as Ctrl-C would.
    """
    calls = iter(range(10_000))

    def run_one(path, log):
        call = next(calls)
        if call == stop_at:
            raise KeyboardInterrupt
        record = {"statement": f"claim of {path.stem}", "held": outcomes[call], "measured": f"call {call}"}
        with Path(log).open("a") as out:
            out.write(json.dumps(record) + "\n")
        return 1.0 + call, []

    return run_one


def test_counts_how_often_each_claim_held(claims_benchmark, tmp_path):
    notebooks = [Path("lab/a.ipynb"), Path("lab/b.ipynb")]
    rounds = claims_benchmark.run_rounds(notebooks, 3, fake_runner([True, False, False, True, True, False]))
    assert rounds.done == 3
    assert rounds.tallies[("lab/a", "claim of a")].held == 2
    assert rounds.tallies[("lab/b", "claim of b")].held == 1
    assert rounds.seconds["lab/a"] == [1.0, 3.0, 5.0]


def test_a_stopped_run_counts_only_complete_rounds_and_keeps_their_log(claims_benchmark, tmp_path):
    notebooks = [Path("lab/a.ipynb"), Path("lab/b.ipynb")]
    kept = tmp_path / "claims.jsonl"
    # Round 1 runs a and b; round 2 runs a, then Ctrl-C comes during b: round 2 must not count.
    rounds = claims_benchmark.run_rounds(notebooks, 5, fake_runner([True, False, False], stop_at=3), kept)
    assert rounds.done == 1
    assert rounds.tallies[("lab/a", "claim of a")].held == 1, "the half round's a (not held) leaked into the count"
    assert rounds.seconds["lab/a"] == [1.0]
    lines = [json.loads(line) for line in kept.read_text().splitlines()]
    assert [line["measured"] for line in lines] == ["call 0", "call 1"]
    table = claims_benchmark._table(rounds.tallies, rounds.seconds, rounds.done, rounds.skipped)
    assert "| lab/a | claim of a | 1/1 |" in table
    assert "| lab/b | claim of b | 0/1 **below 9/10** |" in table
