"""Reading ``py-spy record -f raw`` files, shared by the phase breakdowns in this folder.

A line is ``frame;frame;... COUNT``, root first. With ``--threads`` the first frame names the
thread; with ``--subprocesses`` a child's frames are nested under its parent's
(``process A;process B;thread;...``). A sample goes to the first phase whose marker appears
in one of its frames, searched from the leaf up: the leaf-most match names what the thread
was doing, whatever called it.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator, Sequence

Phases = Sequence[tuple[str, Sequence[str]]]


def samples(path: str) -> Iterator[tuple[list[str], int]]:
    """``(frames, count)`` per line; blank lines and lines without a count are skipped.
    A path ending in ``.gz`` is read through gzip (the committed profiles are kept so)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if stack:
                yield stack.split(";"), int(count)


def split_process(frames: list[str]) -> tuple[str, list[str]]:
    """The innermost ``process ...`` frame (the first frame when there is none) and the
    stack below the thread frame that follows it."""
    depth = 0
    while depth + 1 < len(frames) and frames[depth + 1].startswith("process "):
        depth += 1
    return frames[depth], frames[depth + 2:]


# Leaves of a thread that waits for work rather than doing it: a condition or event, an idle
# executor worker, a join, select/poll. A thread blocked in any other system call counts as busy.
IDLE_LEAVES = ("Condition.wait", "Event.wait", "_worker (", "wait (threading", "select", "poll (", "_wait_for_tstate")


def is_idle(stack: list[str]) -> bool:
    """Whether a thread's sample (its frames, outermost first) is a wait for work."""
    return not stack or any(mark in stack[-1] for mark in IDLE_LEAVES)


def split_thread(frames: list[str]) -> tuple[str | None, list[str]]:
    """The name of the innermost thread frame (``thread (ID): NAME``, after any ``process``
    frames of ``--subprocesses``) and the stack below it; (None, ``frames``) without one."""
    at = [k for k, frame in enumerate(frames) if frame.startswith("thread (")]
    if not at:
        return None, frames
    return re.sub(r"^thread \((0x)?[0-9a-fA-F]+\): ", "", frames[at[-1]]), frames[at[-1] + 1:]


def phase_of(frames: list[str], phases: Phases, other: str) -> str:
    for frame in reversed(frames):
        for phase, markers in phases:
            if any(m in frame for m in markers):
                return phase
    return other
