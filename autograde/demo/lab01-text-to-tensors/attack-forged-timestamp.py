"""Demo student: correct answers with a timestamp.txt that is not a timestamp (02_training_vs_inference)."""

DESCRIPTION = (
    "Answers honestly, but its timestamp.txt holds an early date followed by a second line of HTML. The "
    "file used to go into the gradebook as written; now it is parsed and refused (several lines are not "
    "one timestamp): no hand-in time is recorded for this submission and the report says why, while "
    "its notebook is graded as usual; expected 12/12"
)
BASE = "solution"
FILES = {"timestamp.txt": "2001-01-01 00:00:00.000000 UTC\n<script>alert('gradebook')</script>\n"}
EXPECTED = {"02_training_vs_inference": 12}
