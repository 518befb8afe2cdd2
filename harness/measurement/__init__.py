"""Measuring one call: timing (device events, host clock), GPU clocks, numerics against the float64 reference,
output hashes and digests, and the environment fingerprint of a run. Imports only harness.core."""
