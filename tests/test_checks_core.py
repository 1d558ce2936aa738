"""The helpers every lab check module shares: call_student and one_thread."""

from __future__ import annotations

import pytest
import torch

from course_lib.checks import DEFAULT_CRASH_HINT, CheckFailed, call_student, one_thread


def crash_on_empty(values: list[int], *, scale: int = 1) -> int:
    return values[0] * scale


def test_a_crash_names_the_call_the_error_and_the_default_hint():
    with pytest.raises(CheckFailed) as failure:
        call_student(crash_on_empty, "first", [], scale=3)
    assert str(failure.value) == (f"first([], scale=3) raised IndexError: list index out of range\n"
                                  f"  hint: {DEFAULT_CRASH_HINT}")
    assert isinstance(failure.value.__cause__, IndexError)  # the traceback still reaches the answer


def test_show_args_false_uses_the_name_as_the_whole_call():
    with pytest.raises(CheckFailed, match=r"^first\(<the empty list>\) raised IndexError"):
        call_student(crash_on_empty, "first(<the empty list>)", [], show_args=False)


def test_the_hint_of_the_most_specific_error_type_wins():
    hints = {LookupError: "a lookup failed", IndexError: "an index was out of range"}
    with pytest.raises(CheckFailed, match="hint: an index was out of range"):
        call_student(crash_on_empty, "first", [], hints=hints)
    with pytest.raises(CheckFailed, match="hint: a lookup failed"):
        call_student(lambda mapping: mapping["missing"], "lookup", {}, hints=hints)
    with pytest.raises(CheckFailed, match=f"hint: {DEFAULT_CRASH_HINT}"):
        call_student(lambda: 1 / 0, "divide", hints=hints)


@pytest.mark.parametrize("error", [NotImplementedError("write me"), CheckFailed("already feedback")])
def test_not_written_yet_and_check_failures_pass_through_unchanged(error):
    def raise_it():
        raise error

    with pytest.raises(type(error)) as raised:
        call_student(raise_it, "raise_it")
    assert raised.value is error


def test_arguments_are_copies_unless_told_otherwise():
    def append_one(values: list[int], *, more: list[int]) -> list[int]:
        values.append(1)
        more.append(1)
        return values

    values, more = [0], [0]
    assert call_student(append_one, "append_one", values, more=more) == [0, 1]
    assert values == [0] and more == [0]
    assert call_student(append_one, "append_one", values, more=more, copy_args=False) is values
    assert values == [0, 1] and more == [0, 1]


def test_the_call_shows_the_arguments_as_given_not_as_the_answer_left_them():
    def clear_then_crash(values: list[int]) -> None:
        values.clear()
        raise ValueError("boom")

    with pytest.raises(CheckFailed, match=r"^clear_then_crash\(\[1, 2\]\) raised ValueError: boom"):
        call_student(clear_then_crash, "clear_then_crash", [1, 2])


def test_one_thread_restores_the_thread_count_even_after_an_error():
    original = torch.get_num_threads()
    torch.set_num_threads(2)  # so that "restored" differs from one thread even under OMP_NUM_THREADS=1
    try:
        with pytest.raises(RuntimeError), one_thread():
            assert torch.get_num_threads() == 1
            raise RuntimeError("inside the block")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(original)
