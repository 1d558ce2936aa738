"""Demo student: the KV-aware balancer trusts each report alone and forgets what it sent since."""

DESCRIPTION = (
    "KVAwareRouter.choose computes room from the last report's blocks_free only, without subtracting the blocks of "
    "the requests it sent since, so every request of a burst sees the same report and goes to the same emptiest "
    "replica (the herd effect). Loses the balancer's script cell (4 points: the burst script, with a hint about the "
    "blocks sent since the report) and the live cell (3 points: both documents land on one replica); kv_load and "
    "stranded_share keep theirs: expected 5/12"
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

    def report(self, replica, load):
        """Take a fresh report of one replica."""
        self.loads[replica] = dict(load)

    def choose(self, prompt_token_ids, max_tokens, home):
        """int: the replica for this request."""
        if None in self.loads:
            raise ValueError("every replica must report before the first choice")
        need = math.ceil((len(prompt_token_ids) + max_tokens) / self.block_size)
        room = [load["blocks_free"] for load in self.loads]
        if home is not None and room[home] >= need and self.loads[home]["num_waiting"] == 0:
            return home
        return min(range(self.num_replicas), key=lambda replica: (self.loads[replica]["num_waiting"], -room[replica],
                                                                  replica))
''',
}
EXPECTED = {"06_kv_aware_balancing": 5}
