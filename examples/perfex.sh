#!/bin/sh
# perfex(1): the counts of a command and every descendant it waited for, on
# stderr.  Run with the daemon mounted ($HWPERFD_MOUNT, default /run/hwperfd).
set -e
# README: begin
perfex -e 0 -e 25 ls -lR /usr/include > /dev/null   # cycles, L1 data cache misses
perfex -a -y ls -lR /usr/include > /dev/null        # all 32 events, costs and statistics
# README: end
