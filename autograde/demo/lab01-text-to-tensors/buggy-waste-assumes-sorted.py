"""Demo student: the waste count walks the reservations in the order given, as if sorted by start."""

DESCRIPTION = (
    "waste_breakdown measures the holes between the reservations in the order of the list, as if it were sorted "
    "by start: right on the worked example (listed in address order), wrong as soon as the list comes in any other "
    "order (holes come out negative). The visible tests now list the example pool out of order, with a hint that "
    "says to sort: loses both waste_breakdown cells (3 points), expected 7/10"
)
BASE = "solution"
ANSWERS = {
    "waste_breakdown": '''
def waste_breakdown(reservations, pool_slots, request_slots):
    """Count every slot of a contiguous pool by what it is doing."""
    counts = {"used": 0, "reserved_unused": 0, "internal": 0, "free": 0, "external": 0}
    cursor = 0
    holes = []
    for reservation in reservations:
        counts["used"] += reservation.num_tokens
        counts["reserved_unused"] += reservation.final_len - reservation.num_tokens
        counts["internal"] += reservation.size - reservation.final_len
        holes.append(reservation.start - cursor)
        cursor = reservation.start + reservation.size
    holes.append(pool_slots - cursor)
    for hole in holes:
        counts["free"] += hole
        if hole < request_slots:
            counts["external"] += hole
    return counts
''',
}
EXPECTED = {"03_kv_cache": 7}
