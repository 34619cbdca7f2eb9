"""What both the command line (daemon.py) and the wiring (service.py) say to
the one who started the daemon: a set-up error, and systemd's readiness.  It
sits below both, so that neither imports the other back."""

from __future__ import annotations

import os
import socket


class SetupError(Exception):
    """A problem the user must fix; printed as one line, exit status 1."""


def notify(message: str) -> None:
    """systemd's sd_notify, in the few lines the protocol needs."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(message.encode())
