"""The ``course`` command: one subcommand per job, each in ``course_lib/commands/<name>.py``.

A command module defines ``HELP`` (one line), ``DESCRIPTION`` (the --help text),
``add_arguments(parser)`` and ``run(args) -> int`` (the exit code). Modules are imported only
when their command runs, so ``course --help`` is instant and a broken optional part (say the
book tooling) cannot stop grading.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Order shown in `course --help`: the instructor's pipeline first, then the engine, then docs.
# A student's kit lists only STUDENT_COMMANDS (below).
COMMANDS = {
    "release": "Generate the student release (labs/) from the solution notebooks (solutions/).",
    "kit": "Build the student kit: the release notebooks and the student edition of course_lib.",
    "grade": "Autograde a folder of submissions and write grades, feedback and a report.",
    "export": "Export the grades of a `course grade` output folder for an LMS (Canvas) or a spreadsheet.",
    "solve": "Run the solution notebooks and fail, naming the cell, if a test cell fails.",
    "check": "Run a notebook's visible tests in a fresh kernel and say whether it is ready to hand in.",
    "submit": "Pack your notebooks for handing in: <student>/<lab>/<notebook>.ipynb, as a folder or a zip.",
    "chat": "Chat with SmolLM2 in the terminal through the course's own engine.",
    "bench": "Run a benchmark (engine, kernel, bpe, decoding) and print its table.",
    "serve": "Serve SmolLM2 over an OpenAI-compatible HTTP API (streaming, metrics, replicas behind a router).",
    "loadtest": "Load-test a server on this machine: open-loop Poisson arrivals, latency percentiles, goodput.",
    "book": "Build the book site (book/_build/html), optionally serving it on localhost.",
}


# What a student's kit offers: the instructor's commands need solutions/ and the grader, which a
# kit does not have. (When the platform moves to its own package, this is the list course_lib keeps.)
STUDENT_COMMANDS = ("check", "submit", "chat", "bench", "serve", "loadtest")

DESCRIPTIONS = {
    "instructor": "The LLM inference systems workbook: release labs, build student kits, grade submissions, "
                  "solve the reference notebooks, chat with, serve and benchmark the engine, build the book.",
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
    """The commands of this edition of the library (all of them in the instructor's)."""
    from course_lib.exercises import is_student_edition, locked_labs

    if not is_student_edition():
        return COMMANDS
    return commands_for(locked_labs())


def _not_yet(name: str) -> str | None:
    """Why a student command is missing from this kit, or None (unknown, or an instructor's command)."""
    from course_lib.exercises import is_locked, is_student_edition, lab_title, unlock_hint

    if not is_student_edition():
        return None
    if name in COMMANDS and name not in STUDENT_COMMANDS:
        return f"`course {name}` is an instructor's command: it is not part of the student kit"
    needs = [lab for lab in RUNS_ON.get(name, ()) if is_locked(lab)]
    if needs:
        return (f"`course {name}` runs on the answers of {' and '.join(lab_title(lab) for lab in needs)}, which are "
                f"your exercises in this kit; {unlock_hint(needs[0])}")
    return None


def _load(name: str):
    return importlib.import_module(f"course_lib.commands.{name}")


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    from course_lib.exercises import is_student_edition

    parser = argparse.ArgumentParser(
        prog="course",
        description=DESCRIPTIONS["student" if is_student_edition() else "instructor"],
        epilog="Run `course COMMAND --help` for the options of one command.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_line in available_commands().items():
        if selected is not None and name != selected:
            sub.add_parser(name, help=help_line)
            continue
        module = _load(name)
        command_parser = sub.add_parser(
            name,
            help=help_line,
            description=getattr(module, "DESCRIPTION", help_line),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(command_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Import only the chosen command's module: the others may pull in heavy libraries.
    selected = next((a for a in argv if not a.startswith("-")), None)
    if selected not in available_commands():
        reason = _not_yet(selected) if selected else None
        if reason:
            print(f"course: {reason}. Run `course --help` for the commands of this kit.", file=sys.stderr)
            return 2
        selected = None
    parser = build_parser(selected)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(_load(args.command).run(args) or 0)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
