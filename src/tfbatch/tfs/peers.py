"""Is a loopback TCP client this process, or one of its descendants?

Handler scripts dial the loopback TFS endpoints without credentials (SageMaker's scripts
build ``grpc.insecure_channel('localhost:<port>')`` themselves), so the endpoints cannot
demand a token from them. What they can demand is that the other end of the connection
belongs to this job: the kernel knows which socket a client port is, and which processes
hold that socket. Any other local process (another user's, or a same-user web app that an
attacker drives into requesting ``localhost``) holds no such socket and must show the token.

On Linux the answer comes from the kernel's socket diagnostics (an exact 4-tuple -> socket
inode lookup over a ``NETLINK_SOCK_DIAG`` socket, what ``ss`` uses; ``/proc/net/tcp[6]``
where that is refused) and ``/proc/<pid>/fd`` (who holds that inode), for this process and
its descendants. Elsewhere (no ``/proc``) psutil's per-process connection lists answer the
same question, more slowly.

Cost matters: a handler that calls ``requests.post`` opens a connection per record, and each
new connection is checked on the server's event loop. Reading and splitting
``/proc/net/tcp``, which lists every TCP socket of the host's network namespace (the
job's own closed connections too, for a minute in TIME_WAIT), took 4-9 ms a connection on
the dev VM; the exact lookup takes ~25 µs.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
import sys
import threading
from collections import OrderedDict
from urllib.parse import unquote

import psutil

_PROC_NET = {4: "/proc/net/tcp", 6: "/proc/net/tcp6"}
_CACHE_SIZE = 4096


def parse_grpc_peer(peer: str) -> tuple[str, int] | None:
    """``ipv4:127.0.0.1:5000`` / ``ipv6:%5B::1%5D:5000`` -> ("127.0.0.1", 5000); None if not TCP."""
    scheme, _, rest = peer.partition(":")
    if scheme not in ("ipv4", "ipv6"):
        return None
    host, _, port = unquote(rest).rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        return None


def proc_address(host: str, port: int) -> str:
    """An address as ``/proc/net/tcp[6]`` prints it: each 32-bit word of the address in host
    byte order, then the port, all in upper-case hex."""
    ip = ipaddress.ip_address(host)
    if ip.version == 4:
        words: tuple[int, ...] = struct.unpack("=I", ip.packed)
        return f"{words[0]:08X}:{port:04X}"
    words = struct.unpack("=4I", ip.packed)
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


def socket_inode(table: str, local: str, remote: str) -> int | None:
    """The inode of the socket whose local and remote addresses (``proc_address`` form) match,
    in the text of a ``/proc/net/tcp[6]`` table."""
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 9 and fields[1] == local and fields[2] == remote:
            inode = int(fields[9])
            return inode or None  # 0: a socket in TIME_WAIT, owned by nobody
    return None


def _find_inode(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The client socket's inode. An IPv4 client may sit in either table: gRPC, for one, opens
    dual-stack IPv6 sockets, listed in tcp6 with IPv4-mapped addresses (::ffff:127.0.0.1)."""
    try:
        ip = ipaddress.ip_address(client[0])
        server_ip = ipaddress.ip_address(server[0])
    except ValueError:
        return None
    ip, server_ip = _unmap(ip), _unmap(server_ip)
    candidates = []
    if ip.version == 4 and server_ip.version == 4:
        candidates.append((4, str(ip), str(server_ip)))
        candidates.append((6, f"::ffff:{ip}", f"::ffff:{server_ip}"))
    else:
        candidates.append((6, str(ip), str(server_ip)))
    for version, local, remote in candidates:
        inode = _diag_inode(version, (local, client[1]), (remote, server[1]))
        if inode is _NO_DIAG:
            inode = _proc_inode(version, (local, client[1]), (remote, server[1]))
        if inode is not None:
            return inode
    return None


def _proc_inode(version: int, client: tuple[str, int], server: tuple[str, int]) -> int | None:
    try:
        with open(_PROC_NET[version]) as f:
            table = f.read()
    except OSError:
        return None
    return socket_inode(table, proc_address(*client), proc_address(*server))


# Socket diagnostics (linux/sock_diag.h, linux/inet_diag.h): one request for one socket.
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_NLMSG_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_NO_COOKIE = 0xFFFFFFFF
_DIAG_INODE_AT = _NLMSG_HEADER.size + 4 + 48 + 16  # inet_diag_msg: 4 bytes, sockid, 4 words, inode
_NO_DIAG = object()  # the kernel refused the lookup itself: read /proc instead
_diag_refused = False


def _diag_inode(version: int, client: tuple[str, int], server: tuple[str, int]) -> object:
    """The inode of the TCP socket ``client`` -> ``server`` from the kernel's exact lookup; None
    when there is no such socket (or it is in TIME_WAIT, owned by nobody); ``_NO_DIAG`` when
    socket diagnostics are not available (a sandbox, another kernel)."""
    global _diag_refused
    if _diag_refused:
        return _NO_DIAG
    family = socket.AF_INET if version == 4 else socket.AF_INET6
    src, dst = ipaddress.ip_address(client[0]).packed, ipaddress.ip_address(server[0]).packed
    sockid = (struct.pack("!HH", client[1], server[1]) + src.ljust(16, b"\0") + dst.ljust(16, b"\0")
              + struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE))
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid
    message = _NLMSG_HEADER.pack(_NLMSG_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as sock:
            sock.settimeout(1.0)
            sock.sendto(message + request, (0, 0))
            answer = sock.recv(8192)
    except OSError:
        _diag_refused = True
        return _NO_DIAG
    if len(answer) < _NLMSG_HEADER.size + 4:
        return None
    kind = _NLMSG_HEADER.unpack_from(answer)[1]
    if kind == _NLMSG_ERROR:
        error = -struct.unpack_from("=i", answer, _NLMSG_HEADER.size)[0]
        if error in (errno.ENOENT, 0):
            return None
        _diag_refused = True  # EPERM, EINVAL, ...: this kernel will not answer
        return _NO_DIAG
    if kind != _SOCK_DIAG_BY_FAMILY or len(answer) < _DIAG_INODE_AT + 4:
        return None
    inode = struct.unpack_from("=I", answer, _DIAG_INODE_AT)[0]
    return inode or None


def _unmap(ip):
    return getattr(ip, "ipv4_mapped", None) or ip


def _holds_inode(pid: int, target: str) -> bool:
    fd_dir = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:  # exited, or not ours to look at
        return False
    for name in names:
        try:
            if os.readlink(f"{fd_dir}/{name}") == target:
                return True
        except OSError:  # closed while we looked
            continue
    return False


def _born(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


class ProcessTreePeers:
    """Answers ``is_ours(client, server)`` for TCP connections to one of our listening sockets.

    Verdicts are cached by socket inode: an inode names one live socket, so a foreign process
    that later gets the same client port has a different inode and is checked afresh.
    """

    def __init__(self, root_pid: int | None = None):
        self.root_pid = root_pid or os.getpid()
        self._linux = sys.platform.startswith("linux") and os.path.exists(_PROC_NET[4])
        self._ours: OrderedDict[int, None] = OrderedDict()
        self._children: list[tuple[int, float]] = []
        self._lock = threading.Lock()

    @property
    def supported(self) -> bool:
        return self._linux or hasattr(psutil.Process, "net_connections")

    def is_ours(self, client: tuple[str, int], server: tuple[str, int]) -> bool:
        try:
            host = ipaddress.ip_address(client[0])
        except ValueError:
            return False
        if not _unmap(host).is_loopback:
            return False  # only a loopback client can be a local process we can look up
        if self._linux:
            return self._linux_is_ours(client, server)
        return self._psutil_is_ours(client, server)

    def _linux_is_ours(self, client: tuple[str, int], server: tuple[str, int]) -> bool:
        inode = _find_inode(client, server)
        if inode is None:
            return False
        with self._lock:
            if inode in self._ours:
                self._ours.move_to_end(inode)
                return True
        target = f"socket:[{inode}]"
        for pid, born in self._tree():
            if _holds_inode(pid, target) and (born is None or _born(pid) == born):
                with self._lock:
                    self._ours[inode] = None
                    while len(self._ours) > _CACHE_SIZE:
                        self._ours.popitem(last=False)
                return True
        return False

    def _tree(self):
        """(pid, start time) of this process (None: no check), the descendants found last
        time, then any found now. Listing the descendants reads every process's /proc entry:
        it is done again only when no known process holds the socket (a new worker, or not
        ours). A descendant counts only while its start time is the one listed, so a pid
        the kernel gave to another process since is not taken for ours."""
        yield self.root_pid, None
        known = self._children
        yield from known
        now = []
        try:
            for child in psutil.Process(self.root_pid).children(recursive=True):
                try:
                    now.append((child.pid, child.create_time()))
                except psutil.Error:
                    continue
        except psutil.Error:
            return
        self._children = now
        seen = set(known)
        yield from (entry for entry in now if entry not in seen)

    def _psutil_is_ours(self, client: tuple[str, int], server: tuple[str, int]) -> bool:
        want_local, want_remote = _norm(client), _norm(server)
        try:
            root = psutil.Process(self.root_pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.Error:
            return False
        for proc in processes:
            try:
                conns = proc.net_connections(kind="tcp")
            except psutil.Error:
                continue
            for c in conns:
                if c.laddr and c.raddr and _norm(c.laddr) == want_local and _norm(c.raddr) == want_remote:
                    return True
        return False


def _norm(addr) -> tuple[str, int]:
    return (str(_unmap(ipaddress.ip_address(addr[0]))), int(addr[1]))
