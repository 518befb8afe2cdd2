"""Where a night's seconds go inside its worker processes: with ``CONVBENCH_PROFILE_DIR`` set, each worker runs
under cProfile and leaves ``worker-<pid>.prof`` there when it ends (scripts/night_profile.py reads them).

A diagnosis switch, not part of a measured night: cProfile slows the host side of short calls.
"""

from __future__ import annotations

import cProfile
import os
import time
from pathlib import Path

PROFILE_ENV = "CONVBENCH_PROFILE_DIR"


class WorkerProfile:
    """A worker's profile, started with the process and written once however the worker ends."""

    def __init__(self) -> None:
        folder = os.environ.get(PROFILE_ENV)
        self.path = Path(folder) / f"worker-{os.getpid()}.prof" if folder else None
        self.profile = cProfile.Profile() if self.path else None
        self.started = time.perf_counter()
        if self.profile is not None:
            self.profile.enable()

    def dump(self) -> None:
        """Write the profile (once); a profile that cannot be written costs the diagnosis, not the night."""
        if self.profile is None:
            return
        self.profile.disable()
        profile, self.profile = self.profile, None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            profile.dump_stats(str(self.path))
        except OSError:
            pass
