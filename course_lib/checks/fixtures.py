"""The reference side of a check, recorded for the student kit.

A check compares a student's answer with what the course's reference computes. In the student
kit the references of locked labs are stubs, so the kit's visible tests cannot compute the
expected values; instead they replay what the reference computed, recorded by ``course release``
when the visible tests ran on the reference answers.

Two markers, used in every ``course_lib.checks`` module:

- ``reference(obj)`` wraps a reference function or class, or any helper that computes expected
  values with one (``reference(_reference_greedy)``). Every call through it, and for a class
  every method call and attribute read on its instances, is the *reference side* of a check.
- ``@recorded_check`` marks a public check function, the unit a test cell calls. Its plain
  arguments (numbers, strings, lists, tensors; never the student's objects) name the recording.

Three modes, fixed when this module is imported:

- instructor edition (the default): both markers return what they wrap; nothing is recorded.
- recording (``COURSE_RECORD_FIXTURES`` names a file): ``course release`` runs each lab's visible
  tests on the reference answers; each ``recorded_check`` call appends, under its key, the
  sequence of reference interactions and their results to that file.
- student edition (``course_lib/_edition.json`` exists): ``reference`` objects replay those
  results in order, checking that each interaction is the one recorded. A student answer that
  leads a check somewhere the reference never went gets a CheckFailed that says so.

Rules for check authors: compare a student's result before passing it to a reference (so a wrong
answer fails with the usual message, not with "the check went off the recorded path"), keep the
arguments of visible checks deterministic, and route every use of a locked reference through
``reference``: the kit's visible tests run them with every reference stubbed.
"""

from __future__ import annotations

from typing import Callable, TypeVar

__all__ = ["recorded_check", "reference"]

Wrapped = TypeVar("Wrapped")


def reference(obj: Wrapped) -> Wrapped:
    """The reference side of a check (see the module docstring); the object itself in the instructor edition."""
    return obj


def recorded_check(function: Callable) -> Callable:
    """Mark a public check function whose reference side the student kit replays."""
    return function
