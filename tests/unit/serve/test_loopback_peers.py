"""The loopback guard's pieces with real in-process sockets (no child process: that is the
integration tier's tests/integration/serve/test_loopback_auth.py)."""

from __future__ import annotations

import base64
import socket
import sys

import pytest

from tfbatch.tfs.loopback_auth import LoopbackGuard, token_ok
from tfbatch.tfs.peers import ProcessTreePeers, parse_grpc_peer, proc_address, socket_inode

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/net/tcp")


@pytest.fixture
def connection():
    """A listening socket on 127.0.0.1 and a client connected to it, both held by this process."""
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    yield client.getsockname(), server.getsockname(), client
    for s in (client, accepted, server):
        s.close()


def test_own_connection_is_recognised(connection):
    client, server, _ = connection
    assert ProcessTreePeers().is_ours(client, server)


def test_wrong_pairing_or_unknown_port_is_not(connection):
    client, server, _ = connection
    peers = ProcessTreePeers()
    assert not peers.is_ours(("127.0.0.1", 1), server)
    assert not peers.is_ours(("10.1.2.3", client[1]), server)
    assert not peers.is_ours(("not an address", 5), server)


# A process tree this test is not part of (a pid no process has: any real root's tree might
# include pytest); the subprocess cases are in tests/integration/serve/test_loopback_auth.py.
NOBODY = 2**22 + 17


def test_connection_held_by_another_tree_is_refused(connection):
    client, server, _ = connection
    assert not ProcessTreePeers(root_pid=NOBODY).is_ours(client, server)


@linux_only
def test_closed_socket_is_no_longer_ours(connection):
    client, server, sock = connection
    peers = ProcessTreePeers()
    assert peers.is_ours(client, server)  # cached by inode now
    sock.close()
    assert not peers.is_ours(client, server)  # the 4-tuple has no live owner any more


@linux_only
def test_proc_table_lookup():
    local, remote = proc_address("127.0.0.1", 40000), proc_address("127.0.0.1", 8080)
    assert local == "0100007F:9C40" and remote == "0100007F:1F90"
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 111 1\n"
        "   1: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 222 1\n"
        "   2: 0100007F:9C41 0100007F:1F90 06 00000000:00000000 03:00000000 00000000     0        0 0 3\n"
    )
    assert socket_inode(table, local, remote) == 222
    assert socket_inode(table, remote, local) == 111
    assert socket_inode(table, proc_address("127.0.0.1", 40001), remote) is None  # TIME_WAIT: no owner
    assert proc_address("::1", 1) == "00000000000000000000000001000000:0001"


def test_grpc_peer_strings():
    assert parse_grpc_peer("ipv4:127.0.0.1:5000") == ("127.0.0.1", 5000)
    assert parse_grpc_peer("ipv6:%5B::1%5D:5000") == ("::1", 5000)
    assert parse_grpc_peer("ipv6:[::1]:5000") == ("::1", 5000)
    assert parse_grpc_peer("unix:/tmp/sock") is None
    assert parse_grpc_peer("ipv4:127.0.0.1:x") is None


def test_token_forms():
    basic = base64.b64encode(b"tfbatch:s3cret").decode()
    assert token_ok("Bearer s3cret", "s3cret")
    assert token_ok(f"Basic {basic}", "s3cret")
    assert not token_ok("Bearer s3cre", "s3cret")
    assert not token_ok("Basic !!!", "s3cret")
    assert not token_ok(f"Basic {base64.b64encode(b's3cret').decode()}", "s3cret")  # no ':' -> no password
    assert not token_ok("Token s3cret", "s3cret")
    assert not token_ok(None, "s3cret")


def test_guard_needs_a_token_and_checks_both_ways(connection):
    client, server, _ = connection
    with pytest.raises(ValueError):
        LoopbackGuard("")
    stranger = LoopbackGuard("t", ProcessTreePeers(root_pid=NOBODY))
    assert not stranger.allows(None, client, server)
    assert stranger.allows("Bearer t", None, None)
    assert LoopbackGuard("t").allows(None, client, server)


@pytest.mark.parametrize("target", ["127.0.0.1", "localhost", "0.0.0.0"])
def test_grpc_interceptor_with_real_dual_stack_sockets(target):
    """gRPC opens IPv6 sockets for IPv4 peers (listed in tcp6 as ::ffff:127.0.0.1); the
    seed's handler dials 0.0.0.0. Our own channel passes bare; a stranger tree needs the token."""
    from concurrent import futures

    import grpc

    from tfbatch.tfs.loopback_auth import LoopbackAuthInterceptor

    def serve(guard):
        port = []
        handler = grpc.method_handlers_generic_handler(
            "t.T", {"Echo": grpc.unary_unary_rpc_method_handler(lambda req, ctx: b"ok:" + req)}
        )
        server = grpc.server(futures.ThreadPoolExecutor(2),
                             interceptors=[LoopbackAuthInterceptor(guard, lambda: ("127.0.0.1", port[0]))])
        server.add_generic_rpc_handlers((handler,))
        port.append(server.add_insecure_port("127.0.0.1:0"))
        server.start()
        return server, port[0]

    for guard, bare_ok in ((LoopbackGuard("t"), True), (LoopbackGuard("t", ProcessTreePeers(root_pid=NOBODY)), False)):
        server, port = serve(guard)
        try:
            with grpc.insecure_channel(f"{target}:{port}") as channel:
                echo = channel.unary_unary("/t.T/Echo")
                if bare_ok:
                    assert echo(b"x", timeout=10) == b"ok:x"
                else:
                    with pytest.raises(grpc.RpcError) as info:
                        echo(b"x", timeout=10)
                    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert echo(b"y", timeout=10, metadata=[("authorization", "Bearer t")]) == b"ok:y"
        finally:
            server.stop(None)


@linux_only
def test_kernel_lookup_and_proc_table_agree(connection):
    # The exact lookup (socket diagnostics over netlink) and the /proc/net/tcp reader it
    # replaces find the same inode: the one the client socket has.
    import os

    from tfbatch.tfs import peers

    client, server, sock = connection
    inode = os.fstat(sock.fileno()).st_ino
    assert peers._proc_inode(4, client, server) == inode
    assert peers._diag_inode(4, client, server) in (inode, peers._NO_DIAG)
    assert peers._diag_inode(4, ("127.0.0.1", 1), server) in (None, peers._NO_DIAG)
    assert peers._diag_inode(4, server, client) not in (inode, None)  # the accepted end: another socket

