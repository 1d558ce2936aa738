"""Demo student: any unfinished request may move to any finished state."""

DESCRIPTION = (
    "move lets every unfinished request move to every finished state, so a WAITING request can become "
    "FINISHED_LENGTH and a PREEMPTED one FINISHED_STOPPED (only RUNNING may finish on its own tokens; the others "
    "only by being cancelled). The five moves the visible test used to try all come out right; it now tries every "
    "pair of states, and the hint lists the arrows that leave the state: loses test_move (2 points). Chapter 4 "
    "handed in as the reference: full marks there; expected 17/19"
)
BASE = "solution"
ANSWERS = {
    "move": '''
def move(request, new_status):
    """Move `request` along the state machine, or raise ValueError for a move the diagram does not allow."""
    finished = {RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_ABORTED}
    if request.status in finished:
        raise ValueError(f"request {request.request_id!r} has finished: it cannot move to {new_status.name}")
    legal_moves = {
        RequestStatus.WAITING: {RequestStatus.RUNNING} | finished,
        RequestStatus.RUNNING: {RequestStatus.PREEMPTED} | finished,
        RequestStatus.PREEMPTED: {RequestStatus.RUNNING} | finished,
    }
    if new_status not in legal_moves[request.status]:
        raise ValueError(f"request {request.request_id!r}: illegal move {request.status.name} -> {new_status.name}")
    request.status = new_status
''',
}
EXPECTED = {"04_paging": 11, "05_pipeline": 17}
