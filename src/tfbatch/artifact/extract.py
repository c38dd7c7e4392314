"""Extract a model archive without ever writing outside the target folder.

Every member is validated before the first byte is written, so a hostile archive is
refused whole rather than half-extracted. The check resolves member paths and link
targets through the symlinks the archive itself creates: a purely lexical check would
accept ``sub/c -> ../sub2`` followed by ``a -> sub/c/../..``, which the OS resolves
to the target's parent. Python's ``filter='data'`` runs as well, as a second line of
defence during extraction, together with a real-filesystem check of every destination.
"""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tfbatch.errors import ArtifactError, UnsafeArchive
from tfbatch.settings import Environment

# Symlink chains longer than this are treated as loops (Linux allows 40 hops too).
_MAX_LINK_HOPS = 40

TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar")


@dataclass(frozen=True)
class ArchiveLimits:
    """Caps checked while the archive is listed, before anything is written.

    The defaults are far above any real model (a large SavedModel has a few hundred files
    and tens of GB); they exist so that a tar of a million empty files or one declaring
    a petabyte fails with a message instead of filling memory or the disk.
    """

    max_members: int = 100_000
    max_total_bytes: int = 64 << 30

    @classmethod
    def from_env(cls) -> "ArchiveLimits":
        """The defaults, overridden by TFBATCH_ARCHIVE_MAX_MEMBERS / TFBATCH_ARCHIVE_MAX_BYTES."""
        env = Environment.read()
        given = {"max_members": env.archive_max_members, "max_total_bytes": env.archive_max_bytes}
        return cls(**{k: v for k, v in given.items() if v is not None})


def is_tar_name(name: str | os.PathLike) -> bool:
    """True when ``name`` ends like an archive ``safe_extract`` accepts."""
    return str(name).lower().endswith(TAR_SUFFIXES)


class _Escape(Exception):
    """Internal: a path resolves outside the target; the message says how."""


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


class _ArchiveTree:
    """Resolves paths the way the OS will once the archive's symlinks exist.

    Paths are tuples of components relative to the target root; the root itself is ().
    Every symlink in the archive is taken into account regardless of member order,
    which is stricter than the OS (a link extracted later cannot redirect an earlier
    member) but never laxer.
    """

    def __init__(self, symlinks: dict[tuple[str, ...], str]):
        self.symlinks = symlinks

    def resolve(self, start: tuple[str, ...], rel: str, follow_last: bool) -> tuple[str, ...]:
        if rel.startswith("/"):
            raise _Escape(f"absolute path {rel!r}")
        stack = list(start)
        queue = _parts(rel)
        hops = 0
        while queue:
            part = queue.pop(0)
            if part == "..":
                if not stack:
                    raise _Escape("'..' climbs above the extraction folder")
                stack.pop()
                continue
            candidate = tuple(stack + [part])
            link = self.symlinks.get(candidate)
            if link is not None and (queue or follow_last):
                hops += 1
                if hops > _MAX_LINK_HOPS:
                    raise _Escape("symlink loop")
                if link.startswith("/"):
                    raise _Escape(f"passes through symlink {'/'.join(candidate)!r} to absolute path {link!r}")
                # A link's target is relative to the directory holding the link.
                queue = _parts(link) + queue
                continue
            stack.append(part)
        return tuple(stack)


def _member_problem(member: tarfile.TarInfo, tree: _ArchiveTree) -> str | None:
    """Why ``member`` is unsafe, or None when it is fine."""
    name = member.name
    if name.startswith("/") or PurePosixPath(name).is_absolute() or (len(name) > 1 and name[1] == ":"):
        return "absolute path"
    if "\x00" in name:
        return "NUL byte in name"
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        kind = (
            "character device" if member.ischr()
            else "block device" if member.isblk()
            else "FIFO" if member.isfifo()
            else f"unsupported member type {member.type!r}"
        )
        return f"{kind} (only regular files, directories and links inside the archive are allowed)"
    try:
        parts = _parts(name)
        parent = tree.resolve((), "/".join(parts[:-1]), follow_last=True) if parts else ()
        if not parts or parts[-1] == "..":
            # "", ".", "a/..": the member names a directory that must stay inside.
            tree.resolve((), name, follow_last=True)
            if not member.isdir():
                return "a non-directory member would replace the extraction folder itself"
            return None
        # Regular files are opened for writing through an existing symlink of the same name.
        if member.issym():
            here = parent
        else:
            here = tree.resolve(parent, parts[-1], follow_last=True)
        if member.issym():
            if member.linkname.startswith("/"):
                return f"symlink to absolute path {member.linkname!r}"
            tree.resolve(here, member.linkname, follow_last=True)
        elif member.islnk():
            if member.linkname.startswith("/"):
                return f"hard link to absolute path {member.linkname!r}"
            # Hard link names are relative to the archive root, not to the link's folder.
            tree.resolve((), member.linkname, follow_last=True)
    except _Escape as exc:
        what = "symlink target" if member.issym() else "hard link target" if member.islnk() else "path"
        return f"{what} resolves outside the extraction folder: {exc}"
    return None


def _hard_link_problem(member: tarfile.TarInfo, files: set[tuple[str, ...]],
                       kinds: dict[tuple[str, ...], str]) -> str | None:
    """A hard link must name a regular file extracted before it (tar stores it that way).

    Anything else (a symlink, a folder, a later or missing member) makes tarfile fail
    half-way with KeyError or NotADirectoryError, or link through a symlink.
    """
    target = tuple(_parts(member.linkname))
    if target in files:
        return None
    kind = kinds.get(target)
    what = f"a {kind}" if kind else "not a member before it"
    return f"hard link to {member.linkname!r}, which is {what}; hard links must name an earlier regular file"


def validate_members(members: list[tarfile.TarInfo], archive: str) -> None:
    """Raise UnsafeArchive naming the first unsafe member; write nothing."""
    files: set[tuple[str, ...]] = set()
    kinds: dict[tuple[str, ...], str] = {}
    link_problems: dict[int, str] = {}  # reported after escapes, which say more
    for m in members:
        key = tuple(_parts(m.name))
        if m.islnk():
            problem = _hard_link_problem(m, files, kinds)
            if problem:
                link_problems[id(m)] = problem
            files.add(key)
        elif m.isreg():
            files.add(key)
        else:
            files.discard(key)  # a later member of the same name replaces the file
            kinds[key] = "symlink" if m.issym() else "directory" if m.isdir() else "special file"
    symlinks: dict[tuple[str, ...], str] = {}
    for m in members:
        if m.issym():
            key = tuple(_parts(m.name))
            if key in symlinks:
                raise UnsafeArchive(f"archive '{archive}': refusing member '{m.name}': the same symlink appears twice")
            symlinks[key] = m.linkname
    for m in members:
        if not m.issym():
            continue
        key = tuple(_parts(m.name))
        # Keying links by their literal name is only sound when the name itself does not
        # pass through '..' or another link; real SavedModel archives never need either.
        if ".." in key:
            raise UnsafeArchive(f"archive '{archive}': refusing member '{m.name}': symlink name contains '..'")
        for i in range(1, len(key)):
            if key[:i] in symlinks:
                raise UnsafeArchive(
                    f"archive '{archive}': refusing member '{m.name}': "
                    f"symlink placed inside another symlink '{'/'.join(key[:i])}'"
                )
    tree = _ArchiveTree(symlinks)
    for m in members:
        problem = _member_problem(m, tree) or link_problems.get(id(m))
        if problem:
            raise UnsafeArchive(f"archive '{archive}': refusing member '{m.name}': {problem}")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _extraction_filter(archive: str, root: str):
    """filter= callable: tarfile's data filter plus a check against the real filesystem.

    The real check catches what the archive alone cannot show: symlinks that already
    exist in a reused target folder.
    """

    def check(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
        try:
            member = tarfile.data_filter(member, dest)
        except tarfile.FilterError as exc:
            raise UnsafeArchive(f"archive '{archive}': refusing member '{exc.tarinfo.name}': {exc}") from None
        target = os.path.join(dest, member.name)
        parent = os.path.realpath(os.path.dirname(target.rstrip("/")))
        final = os.path.realpath(target) if not member.issym() else parent
        for p in (parent, final):
            if not _inside(p, root):
                raise UnsafeArchive(
                    f"archive '{archive}': refusing member '{member.name}': "
                    f"it would be written to {p}, outside {root}"
                )
        return member

    return check


def _list_members(tar: tarfile.TarFile, archive: str, limits: ArchiveLimits) -> list[tarfile.TarInfo]:
    """Members, refusing the archive as soon as it passes a cap (listing is streamed)."""
    members: list[tarfile.TarInfo] = []
    total = 0
    for member in tar:
        members.append(member)
        if len(members) > limits.max_members:
            raise UnsafeArchive(
                f"archive '{archive}' has more than {limits.max_members} members "
                f"(TFBATCH_ARCHIVE_MAX_MEMBERS); refusing it before extraction"
            )
        if member.isreg():
            total += member.size
            if total > limits.max_total_bytes:
                raise UnsafeArchive(
                    f"archive '{archive}' holds more than {limits.max_total_bytes} bytes of files "
                    f"(at member '{member.name}', {member.size} bytes; TFBATCH_ARCHIVE_MAX_BYTES); "
                    "refusing it before extraction"
                )
    return members


def safe_extract(
    archive: str | os.PathLike, target: str | os.PathLike, limits: ArchiveLimits | None = None
) -> Path:
    """Extract a .tar.gz/.tgz/.tar (any tar compression tarfile reads) into ``target``.

    Raises UnsafeArchive, before writing anything, for absolute paths, ``..`` escapes,
    symlinks or hard links resolving outside ``target``, hard links to anything but an
    earlier regular file, devices and FIFOs, and archives over ``limits`` (members, bytes;
    default from the environment); ArtifactError for a file that is not a readable tar
    archive. Returns the resolved target.
    """
    limits = limits or ArchiveLimits.from_env()
    archive_s = str(archive)
    root = Path(target).resolve()
    try:
        tar = tarfile.open(archive_s, mode="r:*")
    except FileNotFoundError:
        raise ArtifactError(f"archive '{archive_s}' does not exist") from None
    except (tarfile.ReadError, tarfile.CompressionError, EOFError, OSError) as exc:
        raise ArtifactError(
            f"archive '{archive_s}' is not a readable tar archive (expected .tar.gz, .tgz or .tar): {exc}"
        ) from None
    with tar:
        try:
            members = _list_members(tar, archive_s, limits)
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise ArtifactError(f"archive '{archive_s}' is truncated or corrupt: {exc}") from None
        validate_members(members, archive_s)
        root.mkdir(parents=True, exist_ok=True)
        try:
            tar.extractall(root, members=members, filter=_extraction_filter(archive_s, str(root)))
        except (tarfile.TarError, EOFError) as exc:
            raise ArtifactError(f"archive '{archive_s}' could not be extracted: {exc}") from None
    return root
