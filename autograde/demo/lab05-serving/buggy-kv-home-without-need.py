"""Demo student: the KV-aware balancer stays home whenever home has any room, whatever the request needs."""

DESCRIPTION = (
    "KVAwareRouter.choose keeps a request at its home replica while that replica has room > 0 and nobody waits "
    "there, without comparing the room with the request's need, so a long document follows its prefix home into a "
    "pool that cannot hold it. Loses the balancer's script cell (4 points: the 'home has free blocks, but fewer than "
    "this long request needs' script, with a hint to compare room with need); in the live burst the documents have "
    "no home and every chat fits at home, so the live cell keeps its 3, and kv_load and stranded_share keep theirs: "
    "expected 8/12"
)
BASE = "solution"
ANSWERS = {
    "kv_aware_router": '''
import math


class KVAwareRouter:
    """Route by KV-cache room; keep prefix affinity while the home replica has room."""

    def __init__(self, num_replicas, *, block_size=16):
        self.num_replicas = num_replicas
        self.block_size = block_size
        self.loads = [None] * num_replicas
        self.sent = [0] * num_replicas

    def report(self, replica, load):
        """Take a fresh report of one replica; forget what was sent to it before."""
        self.loads[replica] = dict(load)
        self.sent[replica] = 0

    def choose(self, prompt_token_ids, max_tokens, home):
        """int: the replica for this request."""
        if None in self.loads:
            raise ValueError("every replica must report before the first choice")
        need = math.ceil((len(prompt_token_ids) + max_tokens) / self.block_size)
        room = [load["blocks_free"] - sent for load, sent in zip(self.loads, self.sent)]
        if home is not None and room[home] > 0 and self.loads[home]["num_waiting"] == 0:
            chosen = home  # home still has room
        else:
            chosen = min(range(self.num_replicas),
                         key=lambda replica: (self.loads[replica]["num_waiting"], -room[replica], replica))
        self.sent[chosen] += need
        return chosen
''',
}
EXPECTED = {"06_kv_aware_balancing": 8}
