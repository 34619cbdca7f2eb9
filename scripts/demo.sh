#!/usr/bin/env bash
# Install hwperfd, mount it at ${HWPERFD_MOUNT:-/run/hwperfd} and show it counting.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh

mount="${HWPERFD_MOUNT:-/run/hwperfd}"
export HWPERFD_MOUNT="$mount"
if ! grep -q " $mount fuse.hwperfd " /proc/self/mountinfo; then
    python3 -m hwperfd >/tmp/hwperfd.log 2>&1 &
    echo "hwperfd started (pid $!, log /tmp/hwperfd.log)"
    for _ in $(seq 100); do [ -e "$mount/control" ] && break; sleep 0.1; done
fi
echo "--- $mount/control"
cat "$mount/control"
echo "--- the r10k_counters(5) example, unchanged (it opens /proc/%05d), counting itself:"
hwperfd-run examples/bin/r10k_counters
echo "--- the Python client on a busy child process:"
python3 - <<'PY'
import os, subprocess, time
from hwperfd.client import ProcessCounters, user
child = subprocess.Popen(["python3", "-c", "sum(i*i for i in range(10**7))"])
with ProcessCounters(child.pid) as pc:
    gen = pc.enable({0: user(0), 15: user(15), 25: user(9)})  # cycles, graduated instructions, L1 D misses
    time.sleep(0.3)
    print(pc.summary())
child.wait()
PY
echo "--- perfex -y on a shell pipeline:"
perfex -y -e 0 -e 25 sh -c 'seq 300000 | sort -n | tail -1'
echo "--- the system-wide view, through syssgi(SGI_EVENTCTR, ...):"
examples/bin/syssgi_sys 2>&1 | head -20 || true
echo "--- the global counters with IRIX's ecadmin and ecstats:"
ecadmin -e cycles,25 && ecstats -a -s 1 1 && ecadmin -r
echo "hwperfd is mounted at $mount; stop it with: kill \$(pgrep -f 'python3 -m hwperfd')"
