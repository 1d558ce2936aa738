"""One student's nbgrader work in one process: ``autograde``, then ``generate_feedback``.

``python -m autograde.nbgrader_job --config WORKSPACE/nbgrader_config.py LAB STUDENT``

Grading a class one student at a time (one Dask task each) would otherwise start two nbgrader
processes per student, and importing nbgrader, nbconvert and the checks costs seconds each time:
here the two run through nbgrader's own ``NbGraderAPI`` (what formgrader calls), in the main thread
of a process of their own, as ``nbgrader autograde`` would (test cells still get their time limit
from a signal, which works only in a main thread). The last line on stdout is a JSON object:
``{"autograde": {"success": ..., "error": ...}, "feedback": {...}}``; the exit code is 0 when
autograding succeeded.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

MARKER = "COURSE-NBGRADER-JOB "


# The last line of a traceback in nbgrader's log: "AttributeError: ...", "nbformat.NotJSONError: ..."
_EXCEPTION_LINE = re.compile(r"^\s*[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(:.*)?$")


def _summary(outcome: dict) -> dict:
    log = outcome.get("log") or ""
    errors = [line for line in log.splitlines() if "ERROR" in line][-5:]
    raised = [line.strip()[:300] for line in log.splitlines() if _EXCEPTION_LINE.match(line)][-1:]
    return {"success": bool(outcome.get("success")) and "There was an error processing" not in log,
            "error": (outcome.get("error") or "").strip().splitlines()[-1:] + raised + errors}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("lab")
    parser.add_argument("student")
    args = parser.parse_args(argv)

    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(args.config.name, path=str(args.config.parent)).load_config()
    coursedir = CourseDirectory(config=config)
    api = NbGraderAPI(coursedir=coursedir, config=config)
    autograde = _summary(api.autograde(args.lab, args.student, force=True, create=True))
    feedback = _summary(api.generate_feedback(args.lab, args.student, force=True)) if autograde["success"] else None
    print(MARKER + json.dumps({"autograde": autograde, "feedback": feedback}), flush=True)
    return 0 if autograde["success"] else 1


if __name__ == "__main__":
    sys.exit(main())
