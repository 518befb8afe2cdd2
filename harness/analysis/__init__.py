"""Judging records: findings between runs (compare), the runs a record is compared with (pairing), change
points in a series. Pure functions over records and run metadata: no I/O, no backend."""
