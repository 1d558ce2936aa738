"""The student's ``course`` command: one subcommand per job, each in ``course_lib/commands/<name>.py``.

This is the ``course`` of a student kit (its ``pyproject.toml`` points here): ``check`` and ``submit``,
and the commands that run the course's engine (``chat``, ``bench``, ``serve``, ``loadtest``). The
instructor's checkout runs ``autograde.cli`` instead, which adds the platform's commands (``release``,
``kit``, ``grade``, ``export``, ``mark``, ``solve``, ``book``, in ``autograde/commands/``) to these; the
library never imports ``autograde``, so a kit works without it.

A command module defines ``HELP`` (one line), ``DESCRIPTION`` (the --help text),
``add_arguments(parser)`` and ``run(args) -> int`` (the exit code). Modules are imported only
when their command runs, so ``course --help`` is instant and a broken optional part (say the
book tooling) cannot stop grading.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# The student's commands, in the order `course --help` shows them.
COMMANDS = {
    "check": "Run a notebook's visible tests in a fresh kernel and say whether it is ready to hand in.",
    "submit": "Pack your notebooks for handing in: <student>/<lab>/<notebook>.ipynb, as a folder or a zip.",
    "chat": "Chat with SmolLM2 in the terminal through the course's own engine.",
    "bench": "Run a benchmark (engine, kernel, bpe, decoding, view) and print its table.",
    "serve": "Serve SmolLM2 over an OpenAI-compatible HTTP API (streaming, metrics, replicas behind a router).",
    "loadtest": "Load-test a server on this machine: open-loop Poisson arrivals, latency percentiles, goodput.",
}
STUDENT_COMMANDS = tuple(COMMANDS)

# The instructor's commands live in the autograde package (autograde/commands/, run by autograde.cli),
# which a kit does not have: named here only so that asking for one says so.
INSTRUCTOR_COMMANDS = ("release", "kit", "grade", "why", "adjust", "history", "mark", "export", "solve", "book")

DESCRIPTIONS = {
    "instructor": "The LLM inference systems workbook, the student's commands: check and hand in notebooks, chat "
                  "with, serve and benchmark the engine (the checkout's `course`, autograde.cli, also releases, "
                  "builds kits, grades, explains and adjusts grades, marks written answers, exports, solves and "
                  "builds the book).",
    "student": "The LLM inference systems workbook: the commands of your kit (check a notebook's visible tests, "
               "pack your notebooks for handing in, and what the labs unlocked so far let you run).",
}


# Student commands that run the course's engine or server, and the labs whose answers they run on:
# in a kit where such a lab is still locked (its answers are stubs) the command cannot work yet.
RUNS_ON = {
    "chat": ("lab01-text-to-tensors",),
    "bench": ("lab01-text-to-tensors",),
    "serve": ("lab01-text-to-tensors",),
    "loadtest": ("lab05-serving",),
}


def commands_for(locked) -> dict[str, str]:
    """The student commands usable in a kit that locks ``locked`` (help lines by name)."""
    return {name: COMMANDS[name] for name in STUDENT_COMMANDS
            if not any(lab in locked for lab in RUNS_ON.get(name, ()))}


def available_commands() -> dict[str, str]:
    """The student commands of this edition of the library (all of them in the instructor's)."""
    from course_lib.exercises import is_student_edition, locked_labs

    if not is_student_edition():
        return dict(COMMANDS)
    return commands_for(locked_labs())


def _not_yet(name: str) -> str | None:
    """Why a command is missing here, or None (an unknown name)."""
    from course_lib.exercises import is_locked, is_student_edition, lab_title, unlock_hint

    if not is_student_edition():
        if name in INSTRUCTOR_COMMANDS:
            return (f"`course {name}` is an instructor's command of the autograde package: run it as "
                    f"`python -m autograde.cli {name}` (the checkout's `course` after `make setup`)")
        return None
    if name in INSTRUCTOR_COMMANDS:
        return f"`course {name}` is an instructor's command: it is not part of the student kit"
    needs = [lab for lab in RUNS_ON.get(name, ()) if is_locked(lab)]
    if needs:
        return (f"`course {name}` runs on the answers of {' and '.join(lab_title(lab) for lab in needs)}, which are "
                f"your exercises in this kit; {unlock_hint(needs[0])}")
    return None


def _load(name: str):
    return importlib.import_module(f"course_lib.commands.{name}")


def build_parser(selected: str | None = None, commands: dict[str, str] | None = None, load=None,
                 description: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``commands`` (default: this edition's student commands); only ``selected``'s
    module is imported (``load(name)`` imports a command's module)."""
    from course_lib.exercises import is_student_edition

    commands = available_commands() if commands is None else commands
    load = load or _load
    if description is None:
        description = DESCRIPTIONS["student" if is_student_edition() else "instructor"]
    parser = argparse.ArgumentParser(
        prog="course",
        description=description,
        epilog="Run `course COMMAND --help` for the options of one command.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_line in commands.items():
        if selected is not None and name != selected:
            sub.add_parser(name, help=help_line)
            continue
        module = load(name)
        command_parser = sub.add_parser(
            name,
            help=help_line,
            description=getattr(module, "DESCRIPTION", help_line),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(command_parser)
    return parser


def run(argv: list[str] | None, commands: dict[str, str], load, description: str | None = None,
        not_yet=lambda name: None) -> int:
    """Parse ``argv`` against ``commands`` and run the chosen one (``autograde.cli`` runs its own
    list through this); ``not_yet(name)`` says why a known name is not offered, or None."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # Import only the chosen command's module: the others may pull in heavy libraries.
    selected = next((a for a in argv if not a.startswith("-")), None)
    if selected not in commands:
        reason = not_yet(selected) if selected else None
        if reason:
            print(f"course: {reason}. Run `course --help` for the commands offered here.", file=sys.stderr)
            return 2
        selected = None
    parser = build_parser(selected, commands, load, description)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(load(args.command).run(args) or 0)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    return run(argv, available_commands(), _load, not_yet=_not_yet)


if __name__ == "__main__":
    sys.exit(main())
