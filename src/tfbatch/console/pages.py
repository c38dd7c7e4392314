"""The console's HTML, rendered on the server. Everything shown passes through ``esc``.

Object keys, error messages, job and model names and log lines come from users and their
data; each is escaped here, at the one place text becomes markup, so a key such as
``<img onerror=...>.png`` shows as those characters. Pages hold only aggregates: a page of
jobs, a bounded progress series, the first lines of the error report, the log's tail.
"""

from __future__ import annotations

import time
from html import escape
from urllib.parse import quote, urlencode

from tfbatch.console.assets import CSS
from tfbatch.console.charts import progress_charts
from tfbatch.console.source import (
    JOB_STATUSES,
    EndpointRow,
    Failure,
    JobDetail,
    JobPage,
    JobRow,
    ModelRow,
    Point,
)


def esc(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def when(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(epoch)) if epoch else "—"


def job_href(base: str, name: str) -> str:
    return f"{base}/jobs/{quote(name, safe='')}"


def layout(title: str, body: str, *, base: str, static: bool = False) -> str:
    """A whole page. ``static``: the report file, with its style inline and no script or links."""
    if static:
        head_extra, nav, script = f"<style>{CSS}</style>", "", ""
    else:
        head_extra = f'<link rel="stylesheet" href="{esc(base)}/static/console.css">'
        nav = (f'<a href="{esc(base)}/jobs">Batch transform jobs</a><a href="{esc(base)}/endpoints">Endpoints</a>'
               f'<a href="{esc(base)}/models">Models</a>')
        script = f'<script src="{esc(base)}/static/console.js"></script>'
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)} · tfbatch</title>{head_extra}</head><body>"
            f'<header><span class="brand">tfbatch</span>{nav}</header>'
            f"<main><h1>{esc(title)}</h1>{body}</main>{script}</body></html>")


def status_cell(status: str) -> str:
    return f'<span class="status status-{esc(status)}">{esc(status)}</span>'


def _progress_text(row: JobRow) -> str:
    total = "?" if row.objects_total is None else f"{row.objects_total:,}"
    return f"{row.objects_done:,} / {total}"


def jobs_table(page: JobPage, *, base: str, status: str | None) -> str:
    head = ("<tr><th>Name</th><th>Status</th><th>Created</th><th>Started</th><th>Ended</th><th>Instances</th>"
            "<th>Objects done / total</th><th>Records/s</th><th>Failed records</th></tr>")
    rows = [head]
    for r in page.rows:
        rows.append(
            f'<tr data-job="{esc(r.name)}"><td><a href="{esc(job_href(base, r.name))}">{esc(r.name)}</a></td>'
            f"<td>{status_cell(r.status)}</td><td>{when(r.created)}</td><td>{when(r.started)}</td>"
            f'<td>{when(r.ended)}</td><td class="num">{r.instances}</td>'
            f'<td class="num objects">{_progress_text(r)}</td><td class="num">{r.records_per_second:,.1f}</td>'
            f'<td class="num">{r.failed_records:,}</td></tr>')
    first, last = page.offset + 1, page.offset + len(page.rows)
    shown = f"{first:,}–{last:,} of {page.total:,}" if page.rows else f"none of {page.total:,}"
    pager = [f'<nav class="pager"><span class="muted">{shown}</span> ']
    def link(offset: int, label: str) -> str:
        query = urlencode({k: v for k, v in (("status", status), ("offset", offset)) if v})
        return f'<a rel="{label.lower()}" href="{esc(base)}/jobs?{esc(query)}">{label}</a> '
    if page.offset > 0:
        pager.append(link(max(0, page.offset - page.limit), "Previous"))
    if last < page.total:
        pager.append(link(last, "Next"))
    pager.append("</nav>")
    return f'<table id="jobs">{"".join(rows)}</table>{"".join(pager)}'


def jobs_page(page: JobPage, *, base: str, status: str | None) -> str:
    filters = ['<div class="filters">Status: ']
    for value in (None, *JOB_STATUSES):
        query = urlencode({"status": value} if value else {})
        on = ' class="on"' if value == status else ""
        filters.append(f'<a{on} href="{esc(base)}/jobs{"?" + esc(query) if query else ""}">{esc(value or "all")}</a>')
    filters.append("</div>")
    query = urlencode({k: v for k, v in (("status", status), ("offset", page.offset)) if v})
    live = f"{base}/fragments/jobs" + (f"?{query}" if query else "")
    return layout("Batch transform jobs",
                  "".join(filters) + f'<div id="live" data-live="{esc(live)}">{jobs_table(page, base=base, status=status)}</div>',
                  base=base)


def _card(key: str, value: str, ident: str) -> str:
    return f'<div class="card"><div class="v" id="{ident}">{esc(value)}</div><div class="k">{esc(key)}</div></div>'


def job_live(detail: JobDetail, series: dict[int, list[Point]], failures: list[Failure], log: list[str]) -> str:
    """The part of a job page that changes while it runs; marked final once the job stopped."""
    r = detail.row
    final = ' data-final="1"' if r.final else ""
    out = [f'<div class="live-state" data-status="{esc(r.status)}"{final}>', job_body(detail),
           f"<p>Status: <span id=\"job-status\">{status_cell(r.status)}</span>"
           + (f' — <span class="error" id="job-message">{esc(detail.message)}</span>' if detail.message else "")
           + "</p>",
           '<div class="cards">',
           _card("objects done / total", _progress_text(r), "objects-done"),
           _card("records", f"{r.records:,}", "records"),
           _card("records/s", f"{r.records_per_second:,.1f}", "records-per-second"),
           _card("failed records", f"{r.failed_records:,}", "failed-records"),
           _card("failed objects", f"{r.failed_objects:,}", "failed-objects"),
           "</div>", progress_charts(series), instances_table(detail)]
    out.append(f"<h2>Failures</h2>{failures_table(failures, detail.error_report, final=r.final)}")
    out.append(f'<h2>Log</h2><pre class="log" id="log">{esc(chr(10).join(log)) or "(nothing logged)"}</pre>')
    out.append("</div>")
    return "".join(out)


def instances_table(detail: JobDetail) -> str:
    if not detail.instances:
        return ""
    rows = ["<tr><th>Instance</th><th>Objects</th><th>Records</th><th>Failed objects</th><th>Failed records</th></tr>"]
    for c in detail.instances:
        failed_records = "—" if c.failed_records is None else f"{c.failed_records:,}"
        rows.append(f'<tr><td>{c.instance}</td><td class="num">{c.objects:,}</td><td class="num">{c.records:,}</td>'
                    f'<td class="num">{c.failed_objects:,}</td><td class="num">{failed_records}</td></tr>')
    return f'<table id="instances">{"".join(rows)}</table>'


def failures_table(failures: list[Failure], error_report: str | None, *, final: bool = True) -> str:
    if not failures:
        # While a job runs, a source may only learn its failures from the error report at the end.
        text = "No failed records." if final else "No failed records reported yet."
        return f'<p class="muted" id="no-failures">{text}</p>'
    rows = ["<tr><th>Object</th><th>Record</th><th>Byte offset</th><th>Error</th></tr>"]
    for f in failures:
        rows.append(f'<tr><td class="object">{esc(f.object)}</td><td class="num">{esc(f.record if f.record is not None else "—")}</td>'
                    f'<td class="num">{esc(f.offset if f.offset is not None else "—")}</td>'
                    f'<td class="error">{esc(f.error)}</td></tr>')
    where = f'<p class="muted">First {len(failures)} shown; all in <code>{esc(error_report)}</code></p>' if error_report else ""
    return f'<table id="failures">{"".join(rows)}</table>{where}'


def key_values(rows: list[tuple[str, str]], ident: str) -> str:
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return f'<table id="{ident}">{body}</table>'


def job_body(detail: JobDetail) -> str:
    r = detail.row
    about = [("Created", when(r.created)), ("Started", when(r.started)), ("Ended", when(r.ended)),
             ("Instances", str(r.instances)), ("Output", detail.output or "—")]
    if detail.error_report:
        about.append(("Error report", detail.error_report))
    settings = "".join(f"<tr><td>{esc(s.name)}</td><td>{esc(s.value)}</td><td>{esc(s.chosen_by or '—')}</td></tr>"
                       for s in detail.settings)
    return (key_values(about + list(detail.details), "job-details")
            + "<h2>Settings</h2>"
            + (f'<table id="settings"><tr><th>Setting</th><th>Value</th><th>Chosen by</th></tr>{settings}</table>'
               if settings else '<p class="muted" id="settings">Known once the job has run.</p>')
            + "<h2>Progress</h2>")


def job_page(detail: JobDetail, series, failures, log, *, base: str) -> str:
    # The whole body refreshes while the job runs (its end time and settings arrive at the end).
    live = f"{job_href(base, detail.row.name)}/live"
    body = f'<div id="live" data-live="{esc(live)}">{job_live(detail, series, failures, log)}</div>'
    return layout(f"Job {detail.row.name}", body, base=base)


def static_report_page(detail: JobDetail, series, failures, log) -> str:
    """The report file of one finished job: the same sections, no script, no server."""
    return layout(f"Job {detail.row.name}", job_live(detail, series, failures, log), base="", static=True)


def endpoints_table(rows: list[EndpointRow]) -> str:
    if not rows:
        return '<p class="muted" id="endpoints">No endpoints.</p>'
    out = ['<table id="endpoints"><tr><th>Name</th><th>Status</th><th>Model</th><th>Created</th><th>Worker</th>'
           "<th>Requests/s</th><th>P50 ms</th><th>P99 ms</th><th>Requests</th><th>Errors</th></tr>"]
    def ms(value: float | None) -> str:
        return "—" if value is None else f"{value:,.1f}"
    for e in rows:
        span = max(1, len(e.workers))
        lead = (f'<td rowspan="{span}">{esc(e.name)}</td><td rowspan="{span}">{status_cell(e.status)}</td>'
                f'<td rowspan="{span}">{esc(e.model)}</td><td rowspan="{span}">{when(e.created)}</td>')
        if not e.workers:
            out.append(f'<tr data-endpoint="{esc(e.name)}">{lead}<td colspan="6" class="muted">no workers</td></tr>')
        for k, w in enumerate(e.workers):
            out.append(f'<tr data-endpoint="{esc(e.name)}">{lead if k == 0 else ""}<td>{esc(w.worker)}</td>'
                       f'<td class="num">{w.requests_per_second:,.1f}</td><td class="num">{ms(w.p50_ms)}</td>'
                       f'<td class="num">{ms(w.p99_ms)}</td><td class="num">{w.requests:,}</td>'
                       f'<td class="num">{w.errors:,}</td></tr>')
    out.append("</table>")
    return "".join(out)


def endpoints_page(rows: list[EndpointRow], *, base: str) -> str:
    body = f'<div id="live" data-live="{esc(base)}/fragments/endpoints">{endpoints_table(rows)}</div>'
    return layout("Endpoints", body, base=base)


def models_page(rows: list[ModelRow], *, base: str) -> str:
    if not rows:
        return layout("Models", '<p class="muted" id="models">No models.</p>', base=base)
    body = ['<table id="models"><tr><th>Name</th><th>Artifact</th><th>Created</th><th>Details</th></tr>']
    for m in rows:
        details = "; ".join(f"{k}: {v}" for k, v in m.details)
        body.append(f"<tr><td>{esc(m.name)}</td><td>{esc(m.artifact)}</td><td>{when(m.created)}</td>"
                    f"<td>{esc(details)}</td></tr>")
    body.append("</table>")
    return layout("Models", "".join(body), base=base)


def message_page(title: str, text: str, *, base: str) -> str:
    return layout(title, f"<p>{esc(text)}</p>", base=base)

