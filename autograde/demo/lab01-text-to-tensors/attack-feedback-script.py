"""Demo student: correct answers whose outputs carry script and a fake verdict (02_training_vs_inference)."""

from autograde.demos import solution_cell

LAB = "lab01-text-to-tensors"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "Answers honestly, and its cells display HTML with a <script>, an <img onerror=...>, an SVG with "
    "onload, a link to an outside stylesheet and a green banner \"All tests passed: 77/77\"; it also adds "
    "its own markdown and raw HTML cells and puts script in its cells' metadata. The feedback page shows "
    "answer-cell outputs as text or plain images only, Markdown it did not get from the course as text, "
    "no script at all (and a policy that forbids any), and the verdict from the grader's results at the "
    "top; expected 12/12"
)
BASE = "solution"
SHOW = '''

from IPython.display import HTML, SVG, Javascript, display

display(HTML("<script>document.title='owned'</script><img src=x onerror=\\"alert('xss')\\">"
             "<link rel=stylesheet href=https://example.com/x.css>"
             "<div style='background:green;color:white'>All tests passed: 77/77</div>"))
display(SVG("<svg xmlns='http://www.w3.org/2000/svg' onload='alert(1)'><circle r='5'/></svg>"))
display(Javascript("alert('from the notebook')"))
'''
ANSWERS = {"inference_memory": _solution("02_training_vs_inference", "inference_memory") + SHOW}
EXPECTED = {"02_training_vs_inference": 12}
