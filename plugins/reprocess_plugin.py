"""The "Dead letters" page in the Airflow UI (Browse > Dead letters).

A FastAPI app mounted by Airflow at /reprocess: an HTML page (counts per day and reason as a
chart, per address and reason, top error classes, the latest runs) and its JSON. Every endpoint
requires an authenticated Airflow user (the UI's session cookie or a bearer token) whom the auth manager lets read
the runs of the cycle DAG (``reprocess_failed_messages``), whose outputs the dead letters are. Each address
row links to a form pre-filled for the ``redrive_dead_letters`` DAG, which triggers it through
Airflow's REST API as the logged-in user.
"""

from __future__ import annotations

import html
import json
import logging
import os
from pathlib import Path

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag  # noqa: TC002 - FastAPI reads it
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from reprocess.errors import ReprocessError, StorageUnavailableError
from reprocess.limits import MIN_RATE_PER_SECOND

WAREHOUSE = os.environ.get("REPROCESS_WAREHOUSE",
                           str(Path(__file__).resolve().parents[1] / "demo-out" / "warehouse"))
COLORS = {"MAX_DELIVERIES_EXCEEDED": "#d9534f", "NON_RETRYABLE": "#f0ad4e", "NO_DEAD_LETTER_ADDRESS": "#5bc0de",
          "NO_POLICY": "#9b59b6"}

CYCLE_DAG = "reprocess_failed_messages"  # the DAG whose runs' outputs the dead letters are
# no /docs, /redoc or /openapi.json: FastAPI serves them without the login the two pages below require. Every route
# also asks the auth manager whether the user may read the cycle DAG's runs (403 if not): a login alone showed the
# dead letters' addresses and error classes to users a deployment scopes to other teams' DAGs.
app = FastAPI(title="reprocess: dead letters", docs_url=None, redoc_url=None, openapi_url=None,
              dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.RUN, CYCLE_DAG))])
CHART_DAYS = 60  # the newest days drawn (a bar each); the older ones are counted under the chart
TABLE_ADDRESSES = 100  # the addresses with the most dead letters listed; the rest are counted under the table
log = logging.getLogger(__name__)


@app.exception_handler(ReprocessError)
async def _unreadable(request: Request, exc: ReprocessError) -> Response:
    """A warehouse that cannot be read (its store down, a file the snapshot lists damaged): the page and the JSON say
    what and where, instead of a bare 500. 503 when a retry may help (the store), 500 otherwise."""
    status = 503 if isinstance(exc, StorageUnavailableError) else 500
    log.error("dead letters page: %s: %s", exc.code, exc)
    if request.url.path.endswith("/api/stats"):
        return JSONResponse({"error": exc.code, "detail": str(exc)}, status_code=status)
    return HTMLResponse(
        "<!doctype html><html><head><meta charset='utf-8'><title>Dead letters: the warehouse cannot be read</title>"
        f"</head><body><h1>The warehouse cannot be read</h1><p><code>{html.escape(exc.code)}</code>: "
        f"{html.escape(str(exc))}</p></body></html>", status_code=status)


def _stats() -> dict:
    from reprocess.dlq_stats import dlq_stats

    return dlq_stats(WAREHOUSE)


@app.get("/api/stats")
def stats(user: GetUserDep) -> dict:
    """Dead-letter counts and the latest runs, as JSON."""
    return _stats()


def _chart(by_day: dict[str, dict[str, int]]) -> str:
    """A stacked bar per day and reason, as inline SVG (no JavaScript library): the newest CHART_DAYS days."""
    if not by_day:
        return "<p>No dead letters yet.</p>"
    days = list(by_day)[-CHART_DAYS:]  # by_day is sorted by day
    older = sum(sum(c.values()) for d, c in by_day.items() if d < days[0])
    note = (f"<p>{older} dead letters of {len(by_day) - len(days)} earlier days are not drawn: "
            "<code>reprocess dlq stats --until</code> counts them.</p>" if older else "")
    peak = max(sum(by_day[d].values()) for d in days) or 1  # of the days drawn: an older spike flattened them
    width, height, bar = 60 * len(days) + 40, 220, 40
    parts = [f'<svg role="img" aria-label="dead letters per day and reason" width="{width}" height="{height + 40}">']
    for i, day in enumerate(days):
        x, y = 30 + i * 60, height
        for reason, n in sorted(by_day[day].items()):
            h = int(n / peak * (height - 20))
            y -= h
            parts.append(f'<rect x="{x}" y="{y}" width="{bar}" height="{h}" fill="{COLORS.get(reason, "#999")}">'
                         f"<title>{html.escape(day)} {html.escape(reason)}: {n}</title></rect>")
        parts.append(f'<text x="{x}" y="{height + 15}" font-size="10"><title>{html.escape(day)}</title>'
                     f"{html.escape(day[5:])}</text>")
        parts.append(f'<text x="{x}" y="{y - 3}" font-size="10">{sum(by_day[day].values())}</text>')
    parts.append("</svg>")
    legend = " ".join(f'<span style="color:{c}">&#9632;</span> {r}' for r, c in COLORS.items())
    return "".join(parts) + f"<p>{legend}</p>" + note


WILD_ATTR = ' data-wild="1"'


def _wild(address: str) -> bool:
    """An address holding '*' or '#': as a pattern, it is a wildcard and matches other addresses too (the pattern
    language has no escape for them)."""
    return "*" in address or "#" in address


def _page(s: dict) -> str:
    reasons = list(COLORS)
    rows = "".join(
        f"<tr><td>{html.escape(a)}</td>" + "".join(f"<td>{c.get(r, 0)}</td>" for r in reasons)
        + f'<td><a class="redrive" href="#" data-address="{html.escape(a)}"{WILD_ATTR if _wild(a) else ""}>'
          "Re-drive&hellip;</a></td></tr>"
        for a, c in list(s["by_address"].items())[:TABLE_ADDRESSES])  # most dead letters first
    rest = list(s["by_address"].values())[TABLE_ADDRESSES:]
    more = (f"<p>{sum(sum(c.values()) for c in rest)} dead letters of {len(rest)} more addresses are not listed: "
            "<code>reprocess dlq stats</code> lists them all.</p>" if rest else "")
    errors = "".join(f"<tr><td>{html.escape(e)}</td><td>{n}</td></tr>" for e, n in s["top_error_classes"])
    runs = "".join(
        f"<tr><td>{html.escape(r['run_id'])}</td><td>{html.escape(str(r.get('as_of') or ''))}</td>"
        + "".join(f"<td>{'' if r.get(k) is None else r[k]}</td>" for k in ("ingested", "due", "delivered"))  # None:
        + f"<td>{(r.get('dead_lettered') or {}).get('total', r.get('moved', ''))}</td></tr>"  # a re-drive's
        for r in s["latest_runs"])
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Dead letters</title>
<style>body{{font-family:sans-serif;margin:1.5em}} table{{border-collapse:collapse;margin-bottom:1.5em}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}} th{{background:#f3f3f3}}
form{{border:1px solid #ccc;padding:1em;max-width:40em}} label{{display:block;margin:.4em 0}}</style></head>
<body><h1>Dead letters</h1>
<p>{s['total']} dead letters in <code>{html.escape(s['warehouse'])}</code> (snapshot {s['snapshot']}).</p>
<h2>Per day and reason</h2>{_chart(s['by_day'])}
<h2>Per address and reason</h2>
<table id="by-address"><tr><th>original address</th>{''.join(f'<th>{r}</th>' for r in reasons)}<th></th></tr>{rows}
</table>{more}
<form id="redrive-form" hidden><h3>Re-drive dead letters (DAG <code>redrive_dead_letters</code>)</h3>
<label>Address pattern <input name="address_pattern" required></label>
<p id="redrive-wild" hidden><strong>This address holds '*' or '#', which a pattern reads as a wildcard:</strong> it
also re-drives the dead letters of every other address it matches (and a '*' or '#' inside a word is refused).
Narrow it with reason codes and dates, and check the count in the audit.</p>
<label>Reason codes <select name="reason_codes" multiple>{''.join(f'<option>{r}</option>' for r in reasons)}</select>
</label>
<label>Dead-lettered from <input name="date_from" placeholder="YYYY-MM-DD"></label>
<label>Dead-lettered to <input name="date_to" placeholder="YYYY-MM-DD"></label>
<label>Max messages <input name="max_messages" type="number" min="1"></label>
<label>Rate (messages/s) <input name="rate_per_second" type="number" min="{MIN_RATE_PER_SECOND}" step="any"
placeholder="as fast as the target takes them"></label>
<label><input name="reset_deliveries" type="checkbox"> reset deliveries to 0</label>
<button type="submit">Trigger re-drive</button> <span id="redrive-result"></span></form>
<h2>Top error classes</h2><table id="errors"><tr><th>error class</th><th>dead letters</th></tr>{errors}</table>
<h2>Latest runs</h2><table id="runs"><tr><th>run</th><th>as of</th><th>ingested</th><th>due</th><th>delivered</th>
<th>dead-lettered / moved</th></tr>{runs}</table>
<script>
const form = document.getElementById("redrive-form");
document.querySelectorAll("a.redrive").forEach(a => a.addEventListener("click", e => {{
  e.preventDefault(); form.reset(); form.hidden = false; form.address_pattern.value = a.dataset.address;
  document.getElementById("redrive-wild").hidden = !a.dataset.wild; form.scrollIntoView();
}}));
// Airflow's API beside this page, under the same base URL (a deployment may serve Airflow under a path)
const api = location.pathname.replace(/\\/reprocess\\/?$/, "") + "/api/v2/dags/redrive_dead_letters/dagRuns";
form.addEventListener("submit", async e => {{
  e.preventDefault();
  const button = form.querySelector("button"), result = document.getElementById("redrive-result");
  if (button.disabled) return;  // a second click while the first is sent: each would be a request of its own
  button.disabled = true; result.textContent = "sending...";
  const f = new FormData(form), num = k => f.get(k) ? Number(f.get(k)) : null;
  const conf = {{address_pattern: f.get("address_pattern"), reason_codes: f.getAll("reason_codes"),
    date_from: f.get("date_from") || null, date_to: f.get("date_to") || null, max_messages: num("max_messages"),
    rate_per_second: num("rate_per_second"), reset_deliveries: f.get("reset_deliveries") === "on"}};
  try {{
    const r = await fetch(api, {{method: "POST", headers: {{"Content-Type": "application/json"}},
      body: JSON.stringify({{logical_date: null, conf}})}});
    const text = await r.text();
    let body = null;
    try {{ body = JSON.parse(text); }} catch (_) {{}}  // a proxy's HTML error page
    result.textContent = r.ok && body ? "triggered " + body.dag_run_id
      : "refused (HTTP " + r.status + "): " + (body ? JSON.stringify(body.detail) : text.slice(0, 200));
  }} catch (err) {{
    result.textContent = "not sent: " + err;
  }} finally {{
    button.disabled = false;
  }}
}});
</script></body></html>"""


@app.get("/", response_class=HTMLResponse)
def page(user: GetUserDep) -> str:
    """The dead-letters page."""
    return _page(_stats())


class ReprocessPlugin(AirflowPlugin):
    name = "reprocess"
    fastapi_apps = [{"app": app, "url_prefix": "/reprocess", "name": "reprocess dead letters"}]
    external_views = [{"name": "Dead letters", "href": "reprocess/", "url_route": "dead-letters",
                       "destination": "nav", "category": "browse"}]


__all__ = ["ReprocessPlugin", "app", "json"]
