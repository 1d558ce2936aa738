"""Demo student: the course's own Triton kernel as its vector_add (01_triton_basics)."""

DESCRIPTION = (
    "Keeps the reference softmax but hands in course_lib.kernels.vector_add (through a lambda, so "
    "the object is not the library's) as its vector_add. In the student edition that kernel is a "
    "stub naming the exercise: both vector_add cells fail, and so does add_kernel's compile cell (there is no "
    "add_kernel to compile); expected 6/11"
)
BASE = "solution"
ANSWERS = {
    "vector_add": '''
import course_lib.kernels.vector_add as library

vector_add = lambda x, y: library.vector_add(x, y)
''',
}
EXPECTED = {"01_triton_basics": 6}
