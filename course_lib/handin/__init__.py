"""Handing work in: what a student runs before and when handing in (the grader's side is ``autograde``).

- ``check``: ``course check NOTEBOOK``: the visible tests in a fresh kernel, per exercise passed /
  failed / not attempted with the points at stake, and whether the file is the one to hand in;
- ``submit``: ``course submit --student ID [--zip]``: the folder layout ``course grade`` expects,
  ``<student>/<lab>/<notebook>.ipynb`` with nbgrader's ``timestamp.txt``, or a timestamped zip of it;
- ``manifest``: what the release of each notebook holds (test-cell checksums and sources), which
  ``course kit`` ships as ``course_lib/_release.json``;
- ``blame``: which answer a failing cell's error comes from (for ``course check``);
- ``stubs``: what a student sees when a cell reaches an exercise not written yet (an IPython extension);
- ``notebooks``: reading and validating notebook files, their nbgrader metadata, lab and student
  names, and which test cells need a GPU (shared with the grader, which imports them from here);
- ``update``: ``make update``: the next kit taken into the student's copy, never overwriting a
  notebook they changed (a script of the standard library alone: it runs before ``make setup``).

``course check`` runs a notebook in a fresh kernel with ``course_lib.runner``, the same runner the
grader uses. (``course grade`` reads the zips of ``course submit --zip`` with ``autograde.intake``.)
"""

import sys

# nbformat validates with jsonschema, which compiles a Lark grammar for its "iri" format whenever the
# optional rfc3987_syntax package is installed: 2.6 s in every process that reads a notebook (course
# check, course submit, each grading job). No notebook schema uses that format, so a None entry makes
# jsonschema's optional import fail at once. (autograde/__init__.py does the same for the grader.)
sys.modules.setdefault("rfc3987_syntax", None)

from course_lib.handin.check import CheckReport, check_notebook  # noqa: E402
from course_lib.handin.manifest import load_manifest, release_manifest, write_manifest  # noqa: E402

__all__ = ["CheckReport", "check_notebook", "load_manifest", "release_manifest", "write_manifest"]
