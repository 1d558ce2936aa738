"""Written questions ("knowledge checks"): their rubrics, and where they are asked.

A lab's written questions are answered in words, in nbgrader *manually graded answer* cells of its
solution notebooks (the prompt, the model answer and the points live there, and nbgrader's release
replaces the model answer by "YOUR ANSWER HERE"), and graded by a TA with a rubric (``course mark``,
``autograde/marking/``). Each lab's rubrics are one file here, ``<lab>.toml`` (the format:
``questions``): for every question its criteria with points and the partial credit a TA may give,
and the notes for TAs.

Why the rubrics are here and not in ``solutions/<lab>/``: nbgrader's ``generate_assignment`` copies
every file of ``solutions/<lab>/`` into the release, and cell metadata with it, so a rubric there
would reach ``labs/`` and every kit unless something remembered to remove it; ``autograde/`` never
leaves the instructor's checkout. And a rubric edited mid-term (a TA meets a partial answer nobody
foresaw) changes no solution notebook, so it makes no recording stale and asks for no new release.
``leaks`` finds a model answer or a rubric's wording in a folder that must not hold them (a kit, a
release, feedback not yet released).
"""

from autograde.knowledge.questions import (  # noqa: F401  (the package's public names)
    KNOWLEDGE_DIR,
    SOLUTIONS_DIR,
    Criterion,
    LabQuestions,
    PartialCredit,
    Placement,
    RubricError,
    WrittenQuestion,
    insert_question,
    labs_with_questions,
    load_lab,
    load_questions_file,
)
