"""The instructor's platform: release, kits, recordings, grading and export (``course`` in the checkout).

The library students read and run is ``course_lib``; this package builds on it and is never imported
by it, and a student kit does not ship it (docs/architecture.md). Its commands are in ``commands/``,
run by ``cli`` (the checkout's ``course``).

One request's way, from ``course grade SUBMISSIONS`` to a row of the gradebook:

1. ``commands/grade.py`` reads the options (``course_lib.runner.limits`` parses ``--limits``,
   ``course_lib.runner.sandbox`` finds the isolation this machine offers); ``unpack`` opens the zips
   of ``course submit --zip`` safely first.
2. ``dispatch.grade`` finds the submissions (``grade_lab.discover_submissions``:
   ``<student>/<lab>/<notebook>.ipynb``), takes a ``snapshot`` of each (plain bytes and hashes), skips
   those a ``store`` already holds unchanged (``--resume``), and sends one task per (student, lab) to
   a Dask ``cluster`` (a local one for ``--jobs N``, or the instructor's), with a ``progress`` bar.
3. On a worker, ``worker.grade_task`` prepares the lab once: the ``release`` (nbgrader's
   ``generate_assignment`` from solutions/), the student ``edition`` of ``course_lib`` its kernels
   import (``marks`` finds the ``@exercise`` definitions to stub, ``answer_helpers`` the helpers that
   compute part of an answer) and a nbgrader workspace (``layout``).
4. ``grade_lab.Grader`` runs ``nbgrader_job`` in a process of its own: nbgrader's ``autograde`` with
   this package's plug-ins (``preprocessors``): ``execute.IsolatedExecute`` runs the student's cells in
   a kernel of their own, ``course_lib.runner.student.StudentKernel`` (sandboxed, limited and watched:
   ``course_lib.runner``), and ``testcells`` runs each test cell here, in the grader, where the checks
   (``course_lib.checks``) call the student's objects over ``course_lib.runner.channel``. From a
   notebook's first hidden check on, ``withhold`` keeps only the grader's own words in its outputs.
5. ``results`` turns the scored cells into a ``LabResult`` (why each point was lost); ``feedback``
   writes the feedback pages safe to open (hidden tests scrubbed, student content shown as text).
6. The result goes back to the dispatcher, which writes it to the ``store`` the moment it arrives
   (one file per student and lab); ``outputs`` then builds ``grades.csv``, ``report.json`` (``report``)
   and one nbgrader ``gradebook.db`` from those files, with each lab's due time and how late each
   hand-in claims to be (``due``, ``course grade --due``).
7. ``course export`` (``export``) turns them into a Canvas import file or one row per notebook.

The rest: ``kit`` builds the student kit (the release notebooks, the edition of ``course_lib`` and
the manifest ``course check`` compares with), refusing one that leaks an answer; ``recording``
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
