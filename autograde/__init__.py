"""The grading pipeline: release (nbgrader generate_assignment), autograde, feedback, reports.

Modules: ``layout`` (where things live), ``notebooks`` (reading, validating, normalizing),
``release``, ``solve``, ``autograde`` (the batch runner), ``preprocessors`` (nbgrader plug-ins
that make grades trustworthy), ``report``, ``demo`` (the bundled demo submissions) and
``authoring`` (helpers for writing nbgrader source notebooks).
"""
