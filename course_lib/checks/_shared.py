"""Helpers the lab check modules share (the public ones live in ``course_lib.checks``).

- ``expect_raises``: a documented exception must be raised, and with its documented type (an
  ``IndexError`` from an empty list is not the ``ValueError`` a docstring promises: a caller that
  catches the documented type would let it through).
- ``lend_config``: a ``ModelConfig`` for the student's code, built where that code runs
  (``checks.make``), never the check's own object.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable

from course_lib.checks import CheckFailed, fail, make, short_repr

__all__ = ["CountingModel", "expect_raises", "lend_config"]


def expect_raises(function: Callable, call: str, error_type: type[BaseException], /, *args: Any,
                  hint: str, message_names: tuple[str, ...] = (), **kwargs: Any) -> BaseException:
    """Call ``function(*args, **kwargs)``; fail unless it raises ``error_type`` (a subclass counts).

    call: how the feedback shows the call. hint: what to do instead. message_names: words of which
    the error message must contain at least one (the bad value, the argument's name...), so the
    error tells its reader what went wrong. Returns the exception.
    """
    try:
        result = function(*args, **kwargs)
    except NotImplementedError:
        raise
    except CheckFailed:
        raise
    except error_type as error:
        if message_names and not any(name in str(error) for name in message_names):
            fail(f"{call} raised {error_type.__name__}, but its message names none of {list(message_names)}",
                 expected=f"a message that names {message_names[0]!r}", got=str(error),
                 hint="write the error for its reader: what was given, and what is allowed.")
        return error
    except Exception as error:  # the wrong type: a caller that catches the documented one misses it
        fail(f"{call} raised {type(error).__name__}; the documented error is {error_type.__name__}",
             expected=error_type.__name__, got=f"{type(error).__name__}: {error}", hint=hint)
    fail(f"{call} returned instead of raising {error_type.__name__}", expected=error_type.__name__,
         got=short_repr(result), hint=hint)
    raise AssertionError("unreachable")


def lend_config(config: Any) -> Any:
    """``config`` (a ModelConfig) rebuilt with ``checks.make``, where the student's code runs."""
    from course_lib.model import ModelConfig

    return make(ModelConfig, **{field.name: getattr(config, field.name) for field in fields(ModelConfig)})


class CountingModel:
    """A model wrapper that counts, on the check's side, the positions each forward call runs.

    Hand it to an engine that runs on the check's side (``LLMEngine(CountingModel(model), ...)``):
    ``positions_per_call`` then says what the model really computed in each step, whatever the
    student's parts claim. Everything else (``config``, ``parameters()``, ``dtype``) is the model's.
    """

    def __init__(self, model: Any) -> None:
        self._model = model
        self.positions_per_call: list[int] = []

    def __call__(self, input_ids, positions=None, attention=None, logits_indices=None):
        self.positions_per_call.append(int(input_ids.numel()))
        return self._model(input_ids, positions, attention=attention, logits_indices=logits_indices)

    forward = __call__

    @property
    def num_positions(self) -> int:
        """Positions run through the model so far, all calls together."""
        return sum(self.positions_per_call)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)
