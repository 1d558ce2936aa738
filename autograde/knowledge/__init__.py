"""Written questions ("knowledge checks"): their rubrics, model answers, and where they go.

A lab's written questions are answered in words, in nbgrader *manually graded answer* cells, and
graded by a TA with a rubric (``course mark``, ``autograde/marking/``). Each lab has one file here,
``<lab>.toml`` (the format: ``questions``), that holds for every question its rubric (criteria with
points and the partial credit a TA may give), the notes for TAs, and, until the question's cells
are in the solution notebook, its prompt, model answer and place. A question whose answer is one
number is not a written question: the file describes it as an autograded exercise instead
(``[[autograded]]``), to be built like every other exercise (a reference, checks, demo students).

Why here and not in ``solutions/<lab>/``: nbgrader's ``generate_assignment`` copies every file of
``solutions/<lab>/`` into the release, so a rubric there would reach ``labs/`` and every kit unless
something remembered to remove it; ``autograde/`` never leaves the instructor's checkout. And a
rubric edited mid-term (a TA meets a partial answer nobody foresaw) changes no solution notebook,
so it makes no recording stale and asks for no new release. ``leaks`` finds a model answer or a
rubric's wording in a folder that must not hold them (a kit, a release, feedback not yet released).
"""

from autograde.knowledge.questions import (  # noqa: F401  (the package's public names)
    KNOWLEDGE_DIR,
    AutogradedExercise,
    Criterion,
    LabQuestions,
    PartialCredit,
    Placement,
    RubricError,
    WrittenQuestion,
    labs_with_questions,
    load_lab,
    load_questions_file,
)
