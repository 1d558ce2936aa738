"""The notebook runner: a notebook's cells in a fresh kernel process, and the channel to it.

``course check`` (in a kit) and the grader (``autograde``) run a student's notebook the same way:
one kernel process per notebook, where every line of student code runs, and a channel over which
the checks of a test cell call into the student's objects and get plain data back. It is part of
the library because a kit has no ``autograde`` and still runs ``course check``; it decides none of
a check's verdicts (the recordings of ``course release`` leave it out of their fingerprints).

- ``student``: the caller's side of one kernel (``StudentKernel``: start it, run cells, time limits);
- ``kernel``: the kernel process itself (``python -m course_lib.runner.kernel``);
- ``channel``: the wire between them: plain data, tensors and handles, nothing else;
- ``sandbox``: where a kernel runs (a sandbox hiding the instructor's files and the network, or none);
- ``limits``, ``watchdog``: what one kernel may use, and the eye on its processes;
- ``bounded``: student output within byte limits;
- ``relay``: the byte relay that lets a sandboxed kernel reach one server a check runs.
"""
