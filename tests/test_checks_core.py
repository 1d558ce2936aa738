"""The helpers every lab check module shares: call_student and one_thread."""

from __future__ import annotations

import pytest
import torch

from course_lib.checks import DEFAULT_CRASH_HINT, CheckFailed, call_student, one_thread, where_it_raised


def crash_on_empty(values: list[int], *, scale: int = 1) -> int:
    return values[0] * scale


def test_a_crash_names_the_call_the_error_and_the_default_hint():
    with pytest.raises(CheckFailed) as failure:
        call_student(crash_on_empty, "first", [], scale=3)
    assert str(failure.value) == ("first([], scale=3) raised IndexError: list index out of range\n"
                                  "  where: It raised outside your notebook's cells (in a library call your answer "
                                  "made): run the test cell in JupyterLab, where the traceback under it leads from "
                                  "your answer to that call.\n"
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


def _cell_function(source: str, filename: str):
    """A function defined as a notebook cell defines it: compiled under ipykernel's file name for the cell."""
    import linecache

    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict = {}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def test_a_crash_says_where_in_the_answer_it_raised_since_no_traceback_is_shown():
    # course check and the grader's pages show a check's message, not the traceback: "where" replaces it.
    cell = _cell_function("def first(values):\n    head = values[0]\n    return head\n", "/tmp/ipykernel_41/2803.py")
    with pytest.raises(CheckFailed) as failure:
        call_student(cell["first"], "first", [])
    assert "  where: It raised in your `first`, line 2 of its cell: `head = values[0]`." in str(failure.value)
    assert "traceback above" not in str(failure.value)
    earlier = _cell_function("def allocate(n):\n    raise KeyError(n)\n", "<04_paging.ipynb: answer cell 'block_allocator'>")
    with pytest.raises(CheckFailed, match=r"where: It raised in your `allocate`, line 2 of 04_paging.ipynb: answer "
                                          r"cell 'block_allocator': `raise KeyError\(n\)`"):
        call_student(earlier["allocate"], "allocate", 3)


def test_where_reads_a_graded_kernels_traceback_but_never_in_a_hidden_check():
    from course_lib.checks import _HIDDEN_CHECK

    error = ValueError("bad")
    error.remote_traceback = ('Traceback (most recent call last):\n  File "/x/course_lib/runner/kernel.py", line 9, in '
                              'serve\n    result = call()\n  File "/tmp/ipykernel_7/123.py", line 4, in encode\n'
                              '    ids = merges[pair]\nValueError: bad\n')
    assert where_it_raised(error) == "It raised in your `encode`, line 4 of its cell: `ids = merges[pair]`."
    token = _HIDDEN_CHECK.set(True)
    try:   # the kernel's traceback is the student's word there: it could carry the hidden inputs
        assert "encode" not in where_it_raised(error) and "not shown" in where_it_raised(error)
    finally:
        _HIDDEN_CHECK.reset(token)
