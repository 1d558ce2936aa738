"""The instructor's ``course`` command: the platform's commands and the student's, in one list.

The checkout's console script ``course`` (``pyproject.toml``) runs ``main`` here. The platform's
commands live in ``autograde/commands/<name>.py``; the student's (``check``, ``submit``, ``chat``,
``bench``, ``serve``, ``loadtest``) are ``course_lib.cli``'s, the same modules a kit runs. A command
module defines ``HELP``, ``DESCRIPTION``, ``add_arguments(parser)`` and ``run(args) -> int``, and is
imported only when its command runs.
"""

from __future__ import annotations

import importlib
import sys

from course_lib import cli as student_cli

# The instructor's pipeline, in the order `course --help` shows it (the student's commands follow,
# then the book).
PLATFORM_COMMANDS = {
    "release": "Generate the student release (labs/) from the solution notebooks (solutions/).",
    "kit": "Build the student kit: the release notebooks and the student edition of course_lib.",
    "grade": "Autograde a folder of submissions and write grades, feedback and a report.",
    "why": "Show every point a student lost in full: the check's message, what their code returned, the traceback.",
    "adjust": "Change a grade by hand (a regrade, a cell's points, a penalty, an extension): kept with who, when and why.",
    "history": "List the ledger's events (gradings, people's changes, due times) with who, when and why.",
    "mark": "Grade written answers with their rubrics in a browser: one question at a time across the class.",
    "export": "Export the grades of a `course grade` output folder for an LMS (Canvas) or a spreadsheet.",
    "solve": "Run the solution notebooks and fail, naming the cell, if a test cell fails.",
    "book": "Build the book site (book/_build/html), optionally serving it on localhost.",
}

COMMANDS = {
    **{name: line for name, line in PLATFORM_COMMANDS.items() if name != "book"},
    **student_cli.COMMANDS,
    "book": PLATFORM_COMMANDS["book"],
}

DESCRIPTION = ("The LLM inference systems workbook: release labs, build student kits, grade submissions, "
               "mark written answers, solve the reference notebooks, chat with, serve and benchmark the engine, build the book.")


def _load(name: str):
    package = "autograde.commands" if name in PLATFORM_COMMANDS else "course_lib.commands"
    return importlib.import_module(f"{package}.{name}")


def main(argv: list[str] | None = None) -> int:
    return student_cli.run(argv, COMMANDS, _load, DESCRIPTION)


if __name__ == "__main__":
    sys.exit(main())
