#!/usr/bin/env bash
# Host packages for the Slurm tests (run by scripts/test.sh before the tests): Debian's slurmctld, slurmd,
# slurm-client and munge. The tests start their own small cluster (tests/slurm_cluster.py) and stop it; this only
# installs. Idempotent; when it cannot act (not root, no apt) it says why and exits 0, so the `slurm` tests skip
# with that reason instead of failing the suite.
set -u -o pipefail
say() { echo "host-slurm: $*"; }
if [ "$(id -u)" != 0 ]; then say "not root: cannot install Slurm here; the slurm tests will skip"; exit 0; fi
need=()
for b in slurmctld slurmd sbatch munged; do
  command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || need+=("$b")
done
if [ ${#need[@]} -eq 0 ]; then say "slurmctld, slurmd, slurm-client and munge already installed"; exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then say "no apt-get to install ${need[*]}; the slurm tests will skip"; exit 0; fi
say "installing slurmctld slurmd slurm-client munge"
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null; }; then
  say "apt-get could not install Slurm; the slurm tests will skip"
fi
exit 0
