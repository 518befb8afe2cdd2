"""The CPU image built once per test run for every test that needs it (the Docker integration tests, the Slurm
Docker night): builds are taken one at a time, so the second one finds the first one's layers instead of building
them again beside it on the same two cores."""

from __future__ import annotations

import fcntl

BUILD_LOCK = "/tmp/convbench-docker-build.lock"


def build_cpu_image(client, matrix) -> str:
    """The id of the CPU row's image, built (or found in the engine's cache) under the run-wide lock."""
    from harness.deploy import images

    with open(BUILD_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return images.build(client, matrix, matrix.rows["cpu"])
