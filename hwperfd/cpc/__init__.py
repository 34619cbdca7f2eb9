"""Solaris libcpc on hwperfd: the <mount>/cpc node, cputrack(1), cpustat(1M)."""
