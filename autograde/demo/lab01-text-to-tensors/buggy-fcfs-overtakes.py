"""Demo student: a waiting request that does not fit is skipped, and the ones behind it overtake it."""

DESCRIPTION = (
    "schedule() skips a waiting request whose blocks do not fit and goes on admitting the ones behind it "
    "(continue instead of break): first come, first served is broken, and a large request can wait forever. In "
    "the kit the visible admission test says that after the second request did not fit the reference asked the "
    "allocator nothing more, with the scenario so far and the first-come-first-served rule: loses the admission "
    "cell (3 points). Chapter 4 handed in as the reference: full marks there; expected 16/19"
)
BASE = "solution"
ANSWERS = {
    "scheduler": '''
class FCFSScheduler:
    """First come, first served; whole prompts; preemption by recompute.

    config: a SchedulerConfig; this scheduler reads max_num_seqs, max_num_batched_tokens and max_model_len.
    allocator: the block allocator (anything with the members of AllocatorProtocol).
    """

    def __init__(self, config, allocator):
        self.config = config
        self.allocator = allocator
        self.waiting = deque()  # not running, oldest first; a preempted request goes back to the front
        self.running = []       # admitted requests in admission order: the newest is last
        self.requests = {}      # request_id -> Request, every unfinished request

    def add(self, request):
        """Queue a new request (its status is WAITING)."""
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def has_unfinished(self):
        return bool(self.waiting or self.running)

    def finish_request(self, request_id, status):
        """Finish a waiting or running request from outside (the user cancelled it, a stop string)."""
        request = self.requests.get(request_id)
        if request is not None:
            self._finish(request, status)
        return request

    def schedule(self):
        """Plan one step and reserve its blocks. Returns a SchedulerOutput.

        1. Decodes: every running request runs its newest token, oldest request first:
           ScheduledChunk(request, request.num_tokens - 1, 1, samples=True). Before that, its token
           needs a slot: allocator.append_slot(request_id) (a (src, dst) pair it returns goes into
           output.blocks_to_copy). While allocator.can_append says no, preempt the NEWEST running
           request (self._preempt); if that is the request itself, it does not decode this step.
        2. Admissions, only in a step that preempted nobody: the waiting request at the front is
           admitted while len(self.running) < max_num_seqs, its whole prompt (request.num_tokens tokens)
           fits in the token budget left, and allocator.can_allocate(request.token_ids). Stop at the
           first request that does not fit: nobody overtakes it. Admitting means: allocate its
           blocks, move it to RUNNING, append it to self.running, and schedule
           ScheduledChunk(request, 0, request.num_tokens, samples=True).
        """
        output = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        for request in list(self.running):
            if request.status is not RequestStatus.RUNNING:
                continue  # preempted a moment ago to make room for an older request
            while request.status is RequestStatus.RUNNING and not self.allocator.can_append(request.request_id):
                self._preempt(self.running[-1], output)
            if request.status is not RequestStatus.RUNNING:
                continue  # it was the newest: it gave its own blocks back
            copy_pair = self.allocator.append_slot(request.request_id)
            if copy_pair is not None:
                output.blocks_to_copy.append(copy_pair)
            output.chunks.append(ScheduledChunk(request, request.num_tokens - 1, 1, samples=True))
            budget -= 1

        # A step that had to preempt is short of blocks: admitting now would only preempt again.
        for request in list(self.waiting):
            if output.preempted or len(self.running) >= self.config.max_num_seqs:
                break
            if request.num_tokens > budget or not self.allocator.can_allocate(request.token_ids):
                continue  # does not fit: try the next one
            self.waiting.remove(request)
            self.allocator.allocate(request.request_id, request.token_ids)
            move(request, RequestStatus.RUNNING)
            self.running.append(request)
            output.chunks.append(ScheduledChunk(request, 0, request.num_tokens, samples=True))
            budget -= request.num_tokens
        return output

    def _preempt(self, request, output):
        """Preemption by recompute: free the request's blocks, keep its tokens, requeue it at the front.

        Move it to PREEMPTED, set num_computed_tokens to 0 (its KV is gone), add 1 to
        request.num_preemptions and append it to output.preempted.
        """
        self.running.remove(request)
        self.allocator.free(request.request_id)
        move(request, RequestStatus.PREEMPTED)
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.appendleft(request)
        output.preempted.append(request)

    def update(self, output, sampled_token_ids):
        """After the model ran: sampled_token_ids[i] is the new token of output.chunks[i].

        For each chunk whose request is still RUNNING (the user may have cancelled it meanwhile):
        set num_computed_tokens = chunk.start + chunk.num_tokens, append the token to
        request.token_ids, and finish the request if self._stop_status says so.
        Returns the list of requests that finished in this step.
        """
        finished = []
        for chunk, token_id in zip(output.chunks, sampled_token_ids):
            request = chunk.request
            if request.status is not RequestStatus.RUNNING:
                continue
            request.num_computed_tokens = chunk.start + chunk.num_tokens
            request.token_ids.append(int(token_id))
            stop = self._stop_status(request)
            if stop is not None:
                self._finish(request, stop)
                finished.append(request)
        return finished

    def _stop_status(self, request):
        """The finished state the request's newest token puts it in, or None to go on.

        FINISHED_STOPPED: the last token is request.eos_token_id (unless request.params.ignore_eos),
        or one of request.params.stop_token_ids.
        FINISHED_LENGTH: request.num_output_tokens reached request.params.max_tokens, or
        request.num_tokens reached self.config.max_model_len.
        """
        last = request.token_ids[-1]
        if last == request.eos_token_id and not request.params.ignore_eos:
            return RequestStatus.FINISHED_STOPPED
        if last in request.params.stop_token_ids:
            return RequestStatus.FINISHED_STOPPED
        if request.num_output_tokens >= request.params.max_tokens or request.num_tokens >= self.config.max_model_len:
            return RequestStatus.FINISHED_LENGTH
        return None

    def _finish(self, request, status):
        """Take the request out of running (freeing its blocks) or waiting, move it to `status`, forget it."""
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
            self.allocator.free(request.request_id)
        else:
            self.waiting.remove(request)
        move(request, status)
        del self.requests[request.request_id]
''',
}
EXPECTED = {"04_paging": 11, "05_pipeline": 16}
