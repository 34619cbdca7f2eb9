#!/usr/bin/env bash
# Install what a fresh Debian machine lacks to build, run and test hwperfd,
# then hwperfd itself: the Python package (pip) and the C side - headers,
# libperfex, libhwperf, hwperfd.pc, man pages - under ${PREFIX:-/usr/local}.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
# systemd: systemd-analyze, which rates and checks the unit; strace: the unit test
# records the system calls the daemon makes under the unit's restrictions.
for pkg in fuse3 libfuse3-dev pkg-config gcc make util-linux man-db groff-base systemd strace; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -e '.[test]'
# perfex through a launcher that starts the interpreter without site and its
# .pth hooks (python3 -IS), in place of pip's entry-point script (docs/speed.md, perfex start-up).
python3 -m hwperfd.perfex.launcher "$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/perfex"
make -s -C examples
make -s -C lib
make -s -C lib install PREFIX="${PREFIX:-/usr/local}" >/dev/null
