"""The instructor's commands of ``course`` (``autograde.cli``): release, kit, grade, export, solve, book."""
