"""The loopback guard's process-tree check with real child processes (the unit tier has the
in-process cases: tests/unit/serve/test_loopback_peers.py)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tfbatch.tfs.peers import ProcessTreePeers

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


CONNECT = """
import socket, sys
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print(sock.getsockname()[1], flush=True)
sys.stdin.read()
"""


@linux_only
def test_a_descendant_started_after_the_first_check_is_found():
    # The descendants are listed once and listed again only on a miss: a second child, started
    # after the first was checked, must still count as ours.
    server = socket.create_server(("127.0.0.1", 0))
    peers = ProcessTreePeers()
    try:
        for _ in range(2):
            child = subprocess.Popen([sys.executable, "-c", CONNECT, str(server.getsockname()[1])],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                port = int(child.stdout.readline())
                accepted, address = server.accept()
                assert address[1] == port
                assert peers.is_ours(address, server.getsockname())
                accepted.close()
            finally:
                child.stdin.close()
                child.wait(timeout=30)
    finally:
        server.close()
