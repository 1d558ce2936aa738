"""Handing work in: what a student runs before and when handing in, and what the grader accepts.

- ``check``: ``course check NOTEBOOK``: the visible tests in a fresh kernel, per exercise passed /
  failed / not attempted with the points at stake, and whether the file is the one to hand in;
- ``submit``: ``course submit --student ID [--zip]``: the folder layout ``course grade`` expects,
  ``<student>/<lab>/<notebook>.ipynb`` with nbgrader's ``timestamp.txt``, or a timestamped zip of it;
- ``unpack``: ``course grade`` on such zips: unpacked with path, link and size checks first;
- ``manifest``: what the release of each notebook holds (test-cell checksums and sources), which
  ``course kit`` ships as ``course_lib/_release.json``.
"""

from course_lib.handin.check import CheckReport, check_notebook
from course_lib.handin.manifest import load_manifest, release_manifest, write_manifest

__all__ = ["CheckReport", "check_notebook", "load_manifest", "release_manifest", "write_manifest"]
