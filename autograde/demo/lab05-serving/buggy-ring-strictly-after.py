"""Demo student: the hash ring's walk starts at the first position strictly after the key."""

DESCRIPTION = (
    "HashRing.walk starts at bisect_right(positions, key), the first position > key instead of >= key: a key "
    "that equals a replica's position goes to the next replica. Random keys never hit a position exactly, so "
    "only the keys placed on positions show it: loses the ring cell (2 points); the router, whose keys are "
    "hashes of prompts, and prefix_key keep theirs: expected 5/7"
)
BASE = "solution"
ANSWERS = {
    "hash_ring": '''
import bisect


class HashRing:
    """Consistent hashing: replicas (ints) and keys on one circle of 64-bit positions."""

    def __init__(self, replicas, virtual_nodes=64):
        self.virtual_nodes = virtual_nodes
        self.positions = []
        self.owners = []
        for replica in replicas:
            self.add(replica)

    def add(self, replica):
        for index in range(self.virtual_nodes):
            position = stable_hash(f"{replica}#{index}".encode())
            at = bisect.bisect_left(self.positions, position)
            self.positions.insert(at, position)
            self.owners.insert(at, replica)

    def remove(self, replica):
        kept = [(p, o) for p, o in zip(self.positions, self.owners) if o != replica]
        self.positions = [p for p, _ in kept]
        self.owners = [o for _, o in kept]

    def walk(self, key):
        start = bisect.bisect_right(self.positions, key)
        order = []
        for step in range(len(self.positions)):
            owner = self.owners[(start + step) % len(self.positions)]
            if owner not in order:
                order.append(owner)
        return order
''',
}
EXPECTED = {"04_replicas": 5}
