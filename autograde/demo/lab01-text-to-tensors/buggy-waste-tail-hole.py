"""Demo student: the waste count forgets the free hole after the last reservation."""

DESCRIPTION = (
    'waste_breakdown counts only the holes in front of each reservation, not the free tail of the pool: '
    'loses both waste_breakdown cells, nothing else: expected 7/10'
)
BASE = "solution"
ANSWERS = {
    'waste_breakdown': '''
def waste_breakdown(reservations, pool_slots, request_slots):
    """Count every slot of a contiguous pool by what it is doing.

    Args:
        reservations: list of Reservation(request_id, start, size, num_tokens, final_len), any order,
            non-overlapping, all inside [0, pool_slots).
        pool_slots: int, slots in the whole pool.
        request_slots: int, slots the next request needs in one piece.
    Returns:
        dict[str, int] with keys "used", "reserved_unused", "internal", "free", "external";
        used + reserved_unused + internal + free == pool_slots, external <= free.
    """
    counts = {"used": 0, "reserved_unused": 0, "internal": 0, "free": 0, "external": 0}
    cursor = 0  # first slot after the reservations seen so far, in address order
    holes = []
    for reservation in sorted(reservations, key=lambda r: r.start):
        counts["used"] += reservation.num_tokens
        counts["reserved_unused"] += reservation.final_len - reservation.num_tokens
        counts["internal"] += reservation.size - reservation.final_len
        holes.append(reservation.start - cursor)
        cursor = reservation.start + reservation.size
    for hole in holes:
        counts["free"] += hole
        if hole < request_slots:
            counts["external"] += hole
    return counts

''',
}
EXPECTED = {'03_kv_cache': 7}
