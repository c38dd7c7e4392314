"""Reading and editing a job's ledger journals from tests (what a crash would leave behind)."""

from __future__ import annotations

import json
from pathlib import Path


def journal_files(out: Path) -> list[Path]:
    root = out / "_tfbatch" / "ledger"
    return sorted(p for p in root.rglob("*.jsonl") if p.is_file()) if root.exists() else []


def entries(out: Path) -> list[dict]:
    found = []
    for path in journal_files(out):
        for line in path.read_bytes().splitlines(keepends=True):
            if line.endswith(b"\n"):
                found.extend(json.loads(line)["entries"])
    return found


def done_keys(out: Path) -> list[str]:
    return [e["k"] for e in entries(out) if not e.get("retry")]


def forget(out: Path, key: str) -> None:
    """Drop ``key``'s entries, as if the job had been killed before its group committed."""
    for path in journal_files(out):
        lines = []
        for line in path.read_bytes().splitlines(keepends=True):
            record = json.loads(line)
            record["entries"] = [e for e in record["entries"] if e["k"] != key]
            lines.append(json.dumps(record).encode() + b"\n")
        path.write_bytes(b"".join(lines))
