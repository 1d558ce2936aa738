"""Demo student: the course's stream parser and quantile, borrowed (01_metrics_from_the_wire)."""

DESCRIPTION = (
    "Hands in course_lib.wire.parse_stream through a module attribute and histogram_quantile through "
    "an object that forwards with __getattr__. In the student edition both are stubs naming the "
    "exercise: their cells fail, request_metrics (written honestly) keeps its points; expected 2/7"
)
BASE = "solution"
ANSWERS = {
    "parse_stream": '''
import course_lib.wire


def parse_stream(timed_lines):
    return course_lib.wire.parse_stream(timed_lines)
''',
    "histogram_quantile": '''
from course_lib import wire


class Forward:
    def __getattr__(self, name):
        return getattr(wire, name)

    def __call__(self, q, buckets):
        return self.histogram_quantile(q, buckets)


histogram_quantile = Forward()
''',
}
EXPECTED = {"01_metrics_from_the_wire": 2}
