"""The instructor's platform: release, kits, recordings, grading and export (``course`` in the checkout).

The library students read and run is ``course_lib``; this package builds on it and is never imported
by it, and a student kit does not ship it (docs/architecture.md). Its commands are in ``commands/``,
run by ``cli`` (the checkout's ``course``).

One request's way, from ``course grade SUBMISSIONS`` to a row of the gradebook:

1. ``commands/grade.py`` reads the options (``course_lib.runner.limits`` parses ``--limits``,
   ``due`` the due times, the late rule and the LMS's receipt times, ``lms`` the roster), takes the
   ``--out`` folder for this run alone (``out_folder``) and records the due times in its ``ledger``.
   ``intake`` reads SUBMISSIONS (folders, the zips of ``course submit --zip`` read safely by
   ``unpack``, an LMS's bulk download named by ``lms``): every entry gets a line (graded as whom, or
   why not), and the hand-ins are laid out as ``<student>/<lab>/<notebook>.ipynb`` in ``OUT/unpacked``.
2. ``dispatch.grade`` finds them (``grade_lab.discover_submissions``), takes a ``snapshot`` of each
   (plain bytes and hashes), skips those a ``store`` already holds unchanged (``--resume``), and sends
   one task per (student, lab) to a Dask ``cluster`` (a local one for ``--jobs N``, or the
   instructor's), with a ``progress`` bar.
3. On a worker, ``worker.grade_task`` prepares the lab once: the ``release`` (nbgrader's
   ``generate_assignment`` from solutions/), the student ``edition`` of ``course_lib`` its kernels
   import (``marks`` finds the ``@exercise`` definitions to stub, ``answer_helpers`` the helpers that
   compute part of an answer) and a nbgrader workspace (``layout``).
4. ``grade_lab.Grader`` stages the notebooks (a renamed one is matched to its chapter) and runs
   ``nbgrader_job`` in a process of its own: nbgrader's ``autograde`` with this package's plug-ins
   (``preprocessors``): ``execute.IsolatedExecute`` runs the student's cells in a kernel of their own,
   ``course_lib.runner.student.StudentKernel`` (sandboxed, limited and watched: ``course_lib.runner``),
   and ``testcells`` runs each test cell here, in the grader, where the checks (``course_lib.checks``)
   call the student's objects over ``course_lib.runner.channel``. From a notebook's first hidden check
   on, ``withhold`` keeps only the grader's own words in its outputs; ``lost_points`` keeps the full
   words of every failure for the instructor alone.
5. ``results`` turns the scored cells into a ``LabResult`` (why each point was lost); ``feedback``
   writes the feedback pages safe to open (hidden tests scrubbed, student content shown as text).
6. The result goes back to the dispatcher, which writes it to the ``store`` the moment it arrives
   (one file per student and lab, with what intake learned of the hand-in; the instructor's record
   beside it) and a ``graded`` event to the ``ledger`` (the history of regrades). ``outputs`` then
   builds ``grades.csv``, ``report.json`` (``report``), the feedback pages' staff box and one nbgrader
   ``gradebook.db`` from those files and the ledger (formgrader's manual scores are read into it
   first): every grade is ``final``'s, the autograder's points with people's changes (``course
   adjust``), the late penalty and the due times (``due``) applied.
7. ``course export`` (``export``) turns them into a Canvas import file (each lab in the instructor's
   own column) or a CSV; ``course why`` prints the instructor's record of a student's lost points.

The rest: ``kit`` builds the student kit (the release notebooks, the edition of ``course_lib`` and
the manifest ``course check`` compares with), refusing one that leaks an answer, and keeps a kit's
git history from one deadline to the next; ``recording``
records the reference side of every visible check for the kit (``course release``); ``solve`` runs
the solution notebooks; ``authoring`` writes nbgrader source notebooks from Python; ``demos`` the
demo class (``demo/`` holds the demo students' specs, ``demo_submissions/`` their notebooks);
``knowledge`` holds each lab's written questions with their rubrics and model answers, and the scan
that keeps those out of what students read; ``marking`` is ``course mark``, the page on which TAs
grade the written answers question by question (docs/ta-grading.md).
"""

import sys

# Every grading process reads notebooks: keep jsonschema from compiling its IRI grammar (2.6 s a
# process; no notebook schema uses the format). See course_lib/handin/__init__.py.
sys.modules.setdefault("rfc3987_syntax", None)
