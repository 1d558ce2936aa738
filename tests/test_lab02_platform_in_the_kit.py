"""The plots and simulators that Lab 0.2's notebooks call work in the student kit.

In the kit every reference marked ``@exercise`` for Lab 0.2 is a stub until the lab is unlocked,
so a plot or a simulator that quietly calls one (a percentile for a legend, a policy for a default)
breaks in front of a student who did write the exercise. Here every function of the ``viz`` and
``sim`` modules is read for the names it uses; none may resolve to a Lab 0.2 answer, except the
module's own marked references (which the student replaces) and what a caller passes in.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import pytest

import course_lib.sim
import course_lib.viz
from course_lib.exercises import exercise_of

LAB = "lab02-prefill-vs-decode"


def _modules() -> list[str]:
    names = []
    for package in (course_lib.viz, course_lib.sim):
        names.append(package.__name__)
        names += [f"{package.__name__}.{info.name}" for info in pkgutil.iter_modules(package.__path__)]
    return names


def _names_used(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _names_used(constant)
    return names


def _is_lab02_answer(obj: object) -> bool:
    marker = exercise_of(obj)
    return marker is not None and marker.lab == LAB


@pytest.mark.parametrize("module_name", _modules())
def test_platform_functions_call_no_lab02_answer(module_name):
    module = importlib.import_module(module_name)
    problems = []
    for name, function in vars(module).items():
        if not inspect.isfunction(function) or function.__module__ != module_name or _is_lab02_answer(function):
            continue
        for used in _names_used(function.__code__):
            target = vars(module).get(used)
            if target is not None and _is_lab02_answer(target):
                problems.append(f"{name} uses {used} ({exercise_of(target).where()})")
    assert not problems, f"{module_name}: " + "; ".join(problems)
