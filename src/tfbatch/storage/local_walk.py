"""Listing a local input folder in S3's key order, with a fixed policy for symbolic links.

A local tree is not an object store: links can make one file appear under many keys
(diamonds) or a folder contain itself (loops). The policy keeps "one object, one key":

- a link whose target lies inside the listed tree is not listed: the target is listed
  under its own name, so a tree full of aliases still processes each file once;
- a link to a file outside the tree is listed under the link's key, once per target
  (a second link to the same file is not listed);
- a link to a folder is followed only with ``follow_symlinks`` (``--follow-symlinks``),
  then walked once whatever the number of links to it; a link to an ancestor (a loop)
  is never followed.

Everything left out is logged with its reason, since "nothing silently skipped" holds for
listing as for records. The bookkeeping grows with the number of links and folders, not
with the number of files, so a 10-million-file tree costs no more memory than before.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

log = logging.getLogger(__name__)


class _Walk:
    def __init__(self, root: str, name_prefix: str, follow_symlinks: bool):
        self.root = root
        self.name_prefix = name_prefix
        self.follow = follow_symlinks
        self.real_root = os.path.realpath(root).rstrip("/") + "/"
        self.root_uri = root if root.endswith("/") else root + "/"
        self.dirs_seen: set[tuple[int, int]] = set()
        self.link_targets: set[tuple[int, int]] = set()

    def inside_tree(self, real: str) -> bool:
        """Whether the walk reaches ``real`` (a resolved path) by its own, link-free name."""
        if not real.startswith(self.real_root):
            return False
        first = real[len(self.real_root):].split("/", 1)[0]
        return first.startswith(self.name_prefix)

    def scan(self, folder: str, rel: str, name_prefix: str) -> Iterator[tuple[str, str, int | None]]:
        st = os.stat(folder)
        self.dirs_seen.add((st.st_dev, st.st_ino))
        entries = []
        with os.scandir(folder) as it:
            for entry in it:
                if name_prefix and not entry.name.startswith(name_prefix):
                    continue
                kind, link = self.classify(entry, rel + entry.name)
                if kind is not None:
                    # Sorting a folder as "name/" gives S3's order of full keys:
                    # "a-b" (0x2d) before "a/x" (0x2f) before "a0".
                    entries.append((entry.name + "/" if kind == "dir" else entry.name, entry, kind, link))
        entries.sort(key=lambda e: e[0])
        for sort_name, entry, kind, link in entries:
            key = rel + sort_name
            # Links are de-duplicated here, in key order, so the first key always wins.
            if link is not None and not self.first_visit(rel + entry.name, kind, *link):
                continue
            if kind == "dir":
                yield from self.scan(entry.path, key, "")
            else:
                try:
                    size = entry.stat().st_size
                except OSError:
                    size = None
                yield self.root_uri + key, key, size

    def classify(self, entry: os.DirEntry, key: str) -> tuple[str | None, tuple | None]:
        """("file" | "dir" | None, (target, ident) for a link to outside the tree)."""
        try:
            link = entry.is_symlink()
            is_dir = entry.is_dir()
            is_file = not is_dir and entry.is_file()
        except OSError:
            return None, None
        if not link:
            return ("dir" if is_dir else ("file" if is_file else None)), None  # sockets, fifos: not objects
        if not (is_dir or is_file):
            log.warning("input %s: symbolic link to nothing readable, not listed", key)
            return None, None
        real = os.path.realpath(entry.path)
        if self.inside_tree(real):
            log.info("input %s: link to %s, which is listed under its own name", key, real)
            return None, None
        if is_dir and not self.follow:
            log.info("input %s: link to folder %s not followed (pass --follow-symlinks)", key, real)
            return None, None
        if is_dir:
            here = os.path.realpath(os.path.dirname(entry.path)).rstrip("/") + "/"
            if here.startswith(real.rstrip("/") + "/"):
                log.warning("input %s: link to folder %s, which contains it (a loop), not followed", key, real)
                return None, None
        st = os.stat(real)
        return ("dir" if is_dir else "file"), (real, (st.st_dev, st.st_ino))

    def first_visit(self, key: str, kind: str, real: str, ident: tuple[int, int]) -> bool:
        seen = self.dirs_seen if kind == "dir" else self.link_targets
        if ident in seen:
            log.info("input %s: link to %s, already listed through another path, not listed again", key, real)
            return False
        seen.add(ident)
        return True


def walk_local(prefix: str, *, follow_symlinks: bool = False) -> Iterator[tuple[str, str, int | None]]:
    """(uri, key, size) of every file under a local prefix (a folder, or a name prefix in one)."""
    if os.path.isdir(prefix):
        root = prefix.rstrip("/") or "/"
        name_prefix = ""
    else:
        root, name_prefix = os.path.split(prefix)
        if not os.path.isdir(root):
            return
    walk = _Walk(root, name_prefix, follow_symlinks)
    yield from walk.scan(root, "", name_prefix)
