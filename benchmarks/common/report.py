"""Writing benchmark results: the transform table (``results.md``) and any harness's JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

NAMES = {
    "a": "(a) tfbatch transform (CLI)",
    "b": "(b) tf.data by hand",
    "c": "(c) HTTP per image, SageMaker-style",
}


def print_and_save(result: Any, out: str | None) -> None:
    """Print ``result`` as JSON and, when ``out`` is given, write the same text there."""
    import json

    text = json.dumps(result, indent=2)
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")


def _f(value: Any, digits: int = 1, suffix: str = "") -> str:
    return "–" if value is None else f"{value:.{digits}f}{suffix}"


def _target_line(model: str, ratios: dict, targets: dict) -> str:
    parts = []
    for key, goal in targets.items():
        got = (ratios.get(key) or {}).get("steady")
        verdict = "not measured" if got is None else ("met" if got >= goal else "MISSED")
        parts.append(f"{key} ≥ {goal:g}×: {_f(got, 2, '×')} ({verdict})")
    return f"Targets for {model}: " + "; ".join(parts) if parts else ""


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    d = results["dataset"]
    lines = [
        "# Batch transform benchmark",
        "",
        f"Command: `{results['command']}`",
        "",
        f"Machine: {m.get('cpus')} vCPU ({m.get('cpu_model', 'unknown CPU')}), {m.get('memory_gb')} GB RAM, "
        f"no GPU; {m.get('platform')}; Python {m.get('python')}; TensorFlow {m.get('tensorflow', '?')}; "
        f"commit {m.get('git_commit') or '?'}. Started {results['started']}.",
        f"Load average before/after: {', '.join(f'{x:.2f}' for x in results['load_average_before'])} / "
        f"{', '.join(f'{x:.2f}' for x in results['load_average_after'])}."
        + (f" Note: {results['note']}" if results.get("note") else ""),
        "",
        f"Dataset: {d['count']} JPEGs, {d['bytes_min'] // 1024}–{d['bytes_max'] // 1024} KB "
        f"(median {d['bytes_median'] // 1024} KB), from {len(d['sources'])} photos shipped with "
        "scikit-image / scikit-learn.",
        f"Settings: {results['settings']}",
        "",
    ]
    for model, entry in results["models"].items():
        lines += [
            f"## {model}",
            "",
            "| contender | images/s steady | images/s incl. start-up | start-up to first output | after last output | wall | CPU ms/image steady | CPU ms/image incl. start-up | peak RSS | agrees with (b) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        rounds = entry.get("rounds") or []
        for run in entry["runs"]:
            name = NAMES.get(run["contender"], run["contender"])
            if len(rounds) > 1:
                name += f", round {run['extra'].get('round', 0) + 1}"
            if not run["ok"]:
                lines.append(f"| {name} | failed: {run['error']} | | | | | | | | |")
                continue
            agree = run["extra"].get("agreement_with_b")
            agree_text = "reference" if run["contender"] == "b" else (
                f"{agree['same_class']}/{agree['files']} classes, max Δp {agree['max_abs_prob_diff']:.1e}"
                if agree and agree.get("files") else "–")
            lines.append(
                f"| {name} | {_f(run['steady_images_per_s'])} | {_f(run['end_to_end_images_per_s'])} | "
                f"{_f(run['startup_s'], 1, ' s')} | {_f(run.get('shutdown_s'), 1, ' s')} | "
                f"{_f(run['wall_s'], 1, ' s')} | {_f(run['extra'].get('steady_cpu_ms_per_image'), 1)} | "
                f"{_f(run['extra'].get('cpu_ms_per_image'), 0)} | "
                f"{_f(run['peak_rss_mb'], 0, ' MB')} | "
                f"{agree_text} |"
            )
        lines.append("")
        median_of = f" (median of {len(rounds)} rounds)" if len(rounds) > 1 else ""
        for key, value in entry["ratios"].items():
            lines.append(f"- {key}{median_of}: {_f(value['steady'], 2, '×')} steady, "
                         f"{_f(value['end_to_end'], 2, '×')} incl. start-up")
            if len(rounds) > 1:
                each = ", ".join(f"{_f((r.get(key) or {}).get('steady'), 2, '×')}" for r in rounds)
                lines.append(f"  - steady, round by round: {each}")
        target = _target_line(model, entry["ratios"], entry.get("targets", {}))
        if target:
            lines.append(f"- {target}")
        lines.append("")
    return "\n".join(lines)


def write_markdown(results: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.write_text(markdown(results))
    return path
