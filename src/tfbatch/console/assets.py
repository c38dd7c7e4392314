"""The console's style sheet and its one script, served from the console's own routes.

Kept as strings in a module so they ship inside the wheel with no package-data rules, and
so the pages can be served with a Content-Security-Policy that allows no inline script:
even a markup-escaping mistake elsewhere could not run code.
"""

from __future__ import annotations

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1b1b1b; background: #f6f7f9; }
header { background: #232f3e; color: #fff; padding: 8px 16px; display: flex; gap: 18px; align-items: baseline; }
header a { color: #fff; text-decoration: none; } header .brand { font-weight: 600; font-size: 16px; }
main { padding: 12px 16px; max-width: 1200px; }
table { border-collapse: collapse; background: #fff; width: 100%; margin: 8px 0 16px; }
th, td { border-bottom: 1px solid #e3e5e8; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #eef0f3; font-weight: 600; } #jobs td, #endpoints td { white-space: nowrap; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.status { font-weight: 600; } .status-Completed, .status-InService { color: #1d8102; }
.status-Failed, .status-Stopped { color: #d13212; } .status-InProgress, .status-Creating { color: #0073bb; }
.cards { display: flex; gap: 12px; flex-wrap: wrap; } .card { background: #fff; padding: 8px 12px; min-width: 120px; }
.card .v { font-size: 20px; font-weight: 600; } .card .k { color: #555; font-size: 12px; }
.charts { display: flex; flex-wrap: wrap; } svg.chart { background: #fff; margin: 4px 8px 8px 0; } svg.chart text { font-size: 11px; fill: #444; }
svg.chart .chart-title { font-size: 13px; fill: #1b1b1b; font-weight: 600; } svg.chart .grid { stroke: #e3e5e8; }
pre.log { background: #111; color: #ddd; padding: 8px; max-height: 320px; overflow: auto; white-space: pre-wrap; }
.filters a { margin-right: 8px; } .filters a.on { font-weight: 700; } .muted { color: #666; }
.error { color: #b00020; white-space: pre-wrap; word-break: break-word; } nav.pager { margin: 8px 0; }
"""

# Every element with data-live is refreshed from the URL in it; the server renders the
# fragment (escaped there, in one place). A fragment holding data-final stops the polling,
# so a stopped job's page stays as it was last drawn.
JS = """
(function () {
  function poll(el) {
    var every = parseInt(el.getAttribute('data-every') || '2000', 10);
    function tick() {
      fetch(el.getAttribute('data-live'), {credentials: 'same-origin', cache: 'no-store'})
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (html !== null) { el.innerHTML = html; }
          if (!el.querySelector('[data-final]')) { setTimeout(tick, every); }
        })
        .catch(function () { setTimeout(tick, every * 2); });
    }
    if (!el.querySelector('[data-final]')) { setTimeout(tick, every); }
  }
  document.querySelectorAll('[data-live]').forEach(poll);
})();
"""
