"""A process that forks, waits and counts signals on command, for lifecycle tests.

Commands on stdin, one per line; every answer is one line on stdout:
  fork                 -> child pid (the child blocks until told to exit)
  exit PID             -> the child exits now; answers "ok"
  wait PID             -> the child exits while we block in waitpid; answers "reaped"
  reap PID             -> waitpid on an already-exited child; answers "reaped"
  enable SPEC THRESH SIG -> our own counters on slot 0 with a threshold and signal; answers gen
  signals N            -> waits (up to 10 s) for N overflow signals; answers the count
                          (each delivery, as the kernel made it: CPython may run
                          its handler once for several)
"""

import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.environ.get("HWPERFD_SRC", "."))

children: dict[int, int] = {}  # pid -> write end of its pipe
received = 0
armed = 0  # the overflow signal
# CPython's C-level handler writes the signal's number here at each delivery.
deliveries, woken = os.pipe()
os.set_blocking(deliveries, False)
os.set_blocking(woken, False)


def on_signal(signum, frame):
    pass


def count() -> int:
    global received
    try:
        received += os.read(deliveries, 4096).count(armed)
    except BlockingIOError:
        pass
    return received


def answer(text) -> None:
    print(text, flush=True)


for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    verb = words[0]
    if verb == "fork":
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        os.close(r)
        children[pid] = w
        answer(pid)
    elif verb == "exit":
        os.write(children[int(words[1])], b"x")
        answer("ok")
    elif verb == "wait":
        pid = int(words[1])
        threading.Timer(0.3, os.write, (children[pid], b"x")).start()
        os.waitpid(pid, 0)
        answer("reaped")
    elif verb == "reap":
        os.waitpid(int(words[1]), 0)
        answer("reaped")
    elif verb == "enable":
        from hwperfd.client import ProcessCounters

        spec, threshold, sig = map(int, words[1:4])
        if sig:
            armed = sig
            signal.set_wakeup_fd(woken, warn_on_full_buffer=False)
            signal.signal(sig, on_signal)
        pc = ProcessCounters()
        answer(pc.enable({0: spec}, {0: threshold}, sig))
    elif verb == "signals":
        deadline = time.monotonic() + 10
        while count() < int(words[1]) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # and no more than that
        answer(count())
    elif verb == "quit":
        break
