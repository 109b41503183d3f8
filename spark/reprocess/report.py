"""``reprocess report``: one self-contained HTML file about a warehouse's latest committed snapshot.

No Spark and no network: the data is read with pyarrow (:mod:`reprocess.storage.arrow`), the plots are
drawn with matplotlib's Agg canvas (no pyplot, no display) and embedded as base64 PNG. Every record
value is escaped with :func:`html.escape`: payloads, headers and error messages may contain markup.
"""

from __future__ import annotations

import base64
import html
import io
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprocess.dlq_stats import COLUMNS, dead_letter_keys, dlq_stats, read_dead_letters
from reprocess.ledger.states import DEAD_LETTERED, DELIVERED, REASON_CODES, STATES, WAITING
from reprocess.ops import ledger_stats
from reprocess.policy.durations import human
from reprocess.storage.arrow import iso_ms, open_snapshot, read_live, to_ms
from reprocess.storage.commit import private_files_default

if TYPE_CHECKING:
    from matplotlib.axes import Axes

REASON_COLORS = {"MAX_DELIVERIES_EXCEEDED": "#d9534f", "NON_RETRYABLE": "#f0ad4e", "NO_DEAD_LETTER_ADDRESS": "#5bc0de",
                 "NO_POLICY": "#9b59b6"}
STATE_COLORS = {WAITING: "#337ab7", DELIVERED: "#5cb85c", DEAD_LETTERED: "#d9534f"}
TOP_ADDRESSES = 8
_HOUR_MS = 3_600_000
_DAY_MS = 24 * _HOUR_MS


def _e(value: object) -> str:
    return html.escape("-" if value is None else str(value), quote=True)


def _png(draw: Callable[[Axes], None], title: str) -> str:
    """An ``<img>`` holding the PNG of one plot drawn by ``draw`` on a fresh Agg figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.4), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=11, loc="left")
    draw(ax)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img class="plot" alt="{_e(title)}" src="data:image/png;base64,{data}">'


def _label(text: str) -> str:
    """A record value as a matplotlib label: '$' would start mathtext (and a bad formula fails the plot)."""
    return text.replace("$", r"\$")


def _nothing(ax: Axes, why: str) -> None:
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, color="#777")
    ax.set_xticks([])
    ax.set_yticks([])


def _bins(times_ms: Any) -> tuple[int, list[int]]:
    """Bin width (an hour when the span is at most 3 days, else a day) and every bin start from first to last."""
    lo, hi = int(min(times_ms)), int(max(times_ms))
    width = _HOUR_MS if hi - lo <= 3 * _DAY_MS else _DAY_MS
    first, last = lo - lo % width, hi - hi % width
    return width, list(range(first, last + width, width))


def _stacked_time(ax: Axes, times_ms: Any, groups: Any, colors: dict[str, str], unit: str) -> None:
    """Stacked bars of events per hour or day, one colour per group: event i at ``times_ms[i]`` (epoch ms) in
    ``groups[i]``. Counted with numpy: a report of a million dead letters holds no Python object per event."""
    import numpy as np

    if not len(times_ms):
        _nothing(ax, f"no {unit} yet")
        return
    times = np.asarray(times_ms, dtype=np.int64)
    width, starts = _bins(times)
    index = (times - times % width - starts[0]) // width
    names = np.asarray(groups, dtype=object)
    x = [_x(s) for s in starts]
    bottom = [0] * len(starts)
    handles, labels = [], []
    for group, color in colors.items():
        of_group = names == group
        if not of_group.any():
            continue
        h = [int(v) for v in np.bincount(index[of_group], minlength=len(starts))]
        handles.append(ax.bar(x, h, width=width * 0.85 / _DAY_MS, bottom=bottom, color=color, align="edge"))
        labels.append(_label(group))
        bottom = [b + v for b, v in zip(bottom, h, strict=True)]
    ax.set_xlim(_x(starts[0] - width), _x(starts[-1] + 2 * width))
    _date_axis(ax)
    ax.set_ylabel(f"{unit} per {'hour' if width == _HOUR_MS else 'day'} (UTC)")
    # given whole: matplotlib leaves out of a legend it collects the labels starting with '_' (an address may)
    ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def _address_colors(addresses: Counter[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Colours of the top addresses (plus 'other') and the mapping of every address to its group."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    palette = colormaps["tab10"]
    top = [a for a, _ in addresses.most_common(TOP_ADDRESSES)]
    colors = {a: to_hex(palette(i)) for i, a in enumerate(top)}
    group = {a: (a if a in colors else "other") for a in addresses}
    if len(addresses) > len(top):
        colors["other"] = "#999999"
    return colors, group


def _deliveries(ax: Axes, rows: list[dict[str, Any]]) -> None:
    from matplotlib.ticker import MaxNLocator

    if not rows:
        _nothing(ax, "empty ledger")
        return
    x = [r["deliveries"] for r in rows]
    bottom = [0] * len(rows)
    for state in STATES:
        h = [r[state] for r in rows]
        ax.bar(x, h, bottom=bottom, color=STATE_COLORS[state], label=state, width=0.8)
        bottom = [b + v for b, v in zip(bottom, h, strict=True)]
    ax.set_xlabel("deliveries so far")
    ax.set_ylabel("messages")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=8, frameon=False)


def _lateness(ax: Axes, runs: list[dict[str, Any]]) -> None:
    points = [(_x(r["as_of_ms"]), r["summary"]["lateness_ms"])
              for r in runs if (r.get("summary") or {}).get("lateness_ms", {}).get("p50") is not None]
    if not points:
        _nothing(ax, "no run has re-driven a due message yet")
        return
    x = [p[0] for p in points]
    p99_ms = [p[1]["p99"] if p[1]["p99"] is not None else p[1]["p50"] for p in points]
    name, scale = _unit([p[1]["p50"] for p in points] + p99_ms)
    p50 = [p[1]["p50"] / scale for p in points]
    p99 = [v / scale for v in p99_ms]
    ax.plot(x, p99, "s-", color="#d9534f", label="p99", markersize=7)
    ax.plot(x, p50, "o--", color="#337ab7", label="p50", markersize=4)
    positive = [v for v in p50 + p99 if v > 0]
    if positive and max(positive) / min(positive) > 100:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0, top=max(p99 + p50 + [0.0]) * 1.15 or 1)
    pad = max((max(x) - min(x)) * 0.05, 1 / 24)  # at least an hour each side (one run would span years)
    ax.set_xlim(min(x) - pad, max(x) + pad)
    ax.set_ylabel(f"re-drive - scheduled ({name})")
    ax.set_xlabel("run as-of (UTC)")
    ax.legend(fontsize=8, frameon=False)
    _date_axis(ax)


def _unit(values_ms: Sequence[float]) -> tuple[str, float]:
    """A readable unit for durations: hours, minutes or seconds, by the largest value."""
    top = max(values_ms, default=0)
    for name, ms in (("h", _HOUR_MS), ("min", 60_000)):
        if top >= 2 * ms:
            return name, float(ms)
    return "s", 1000.0


def _x(ms: int) -> float:
    """Matplotlib's date number (days since its epoch) of an epoch-millisecond instant."""
    import matplotlib.dates as mdates

    return float(mdates.date2num(datetime.fromtimestamp(ms / 1000, tz=UTC)))


def _date_axis(ax: Axes) -> None:
    import matplotlib.dates as mdates

    # in UTC, as the axes say and the bars are binned, whatever time zone matplotlib is configured with (matplotlibrc)
    locator = mdates.AutoDateLocator(tz=UTC)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=UTC))


def _waiting(ax: Axes, by_hour: dict[str, int], as_of_ms: int | None) -> None:
    from matplotlib.ticker import MaxNLocator

    hours = {k: v for k, v in by_hour.items() if k != "?"}
    if not hours:
        _nothing(ax, "no message is waiting")
        return
    x = [_x(int(datetime.fromisoformat(k.replace("Z", "+00:00")).timestamp() * 1000)) for k in hours]
    hour = _HOUR_MS / _DAY_MS
    ax.bar(x, list(hours.values()), width=hour * 50 / 60, align="edge", color=STATE_COLORS[WAITING],
           label="waiting")
    lo, hi = min(x), max(x) + hour
    if as_of_ms is not None:
        as_of = _x(as_of_ms)
        ax.axvline(as_of, color="#d9534f", linestyle="--", label="snapshot as-of")
        lo, hi = min(lo, as_of), max(hi, as_of)
    pad = max((hi - lo) * 0.05, hour / 2)
    ax.set_xlim(lo - pad, hi + pad)
    ax.legend(fontsize=8, frameon=False)
    ax.set_ylabel("messages")
    ax.set_xlabel("hour of the next attempt (UTC)")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    _date_axis(ax)


def history_gaps(histories: Any) -> Any:
    """The times between consecutive failures of each message (ms, > 0), from the ledger's ``error_history`` column
    (an Arrow list of structs with ``failed_ms``, or Python lists of dicts); numpy, with no Python object per entry."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    column = histories if isinstance(histories, pa.ChunkedArray | pa.Array) else pa.array(histories)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    if not pa.types.is_list(column.type) or len(column) == 0:
        return np.array([], dtype=np.int64)
    owner = pc.list_parent_indices(column).to_numpy()
    failed = pc.struct_field(pc.list_flatten(column), "failed_ms")
    known = pc.is_valid(failed).to_numpy(zero_copy_only=False)
    owner, times = owner[known], pc.drop_null(failed).to_numpy().astype(np.int64)
    order = np.lexsort((times, owner))  # each message's failures in time order
    owner, times = owner[order], times[order]
    step = np.diff(times)
    return step[(np.diff(owner) == 0) & (step > 0)]


def _gaps(ax: Axes, gaps_ms: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    if not len(gaps_ms):
        _nothing(ax, "no message has failed twice yet")
        return
    import numpy as np

    name, scale = _unit([float(np.max(gaps_ms))])
    gaps = np.asarray(gaps_ms, dtype=np.float64) / scale
    # lo > 0 (gaps are): a lowest edge of 0.001 of the unit left out the gaps below it (1 s ones, shown in hours)
    lo, hi = float(gaps.min()), float(gaps.max())
    edges = np.geomspace(lo, hi * 1.001, 30) if hi > lo * 10 else np.linspace(0, hi * 1.05, 30)
    bins = [float(e) for e in edges]
    ax.hist(gaps, bins=bins, color="#5bc0de", edgecolor="#31708f")
    if hi > lo * 10:
        ax.set_xscale("log")
    ax.set_xlabel(f"time between consecutive failed deliveries of a message ({name})")
    ax.set_ylabel("delivery pairs")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]], num: Sequence[int] | range = ()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td{" class=n" if i in num else ""}>{_e(v)}</td>' for i, v in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>" if rows else "<p>none</p>"


def _preview(text: str | None, limit: int = 120) -> str:
    s = text or ""
    return s if len(s) <= limit else s[:limit] + "…"


_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1000px;color:#222}
h1{margin-bottom:.2em} h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.meta{color:#555} table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top} th{background:#f3f3f3}
td.n{text-align:right} td.p{font-family:monospace;max-width:28em;word-break:break-all} img.plot{max-width:100%}"""


def render_report(warehouse: str, newest: int = 20) -> tuple[str, dict[str, Any]]:
    """The report's HTML and a small summary of it (snapshot, as-of, plots, dead letters, messages).

    Everything comes from one snapshot, even if a run commits while the report is being built.
    """
    wh, snap = open_snapshot(warehouse)
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    # Kept in Arrow and numpy: a Python dict per dead letter (with its payload) took 2.8 GB for 300,000 of them.
    # Only the newest rows are Python objects, and only they carry their payloads (_with_payloads). The DLQ is read
    # once, for the counts, the plots and the newest rows.
    table = read_dead_letters(wh, snap, None, [*COLUMNS, "deliveries"])
    keys = dead_letter_keys(table)  # grouped as the tables count them: the plots left out what the tables counted
    stats = dlq_stats(warehouse, runs=20, snapshot=snap, keys=keys)
    led = ledger_stats(warehouse, oldest=10, snapshot=snap)
    dead = table.slice(0, newest).to_pylist()
    gaps = history_gaps(read_live(wh, snap, "ledger", ["error_history"])["error_history"])
    times = pc.fill_null(pc.cast(pc.cast(keys["at"], pa.timestamp("ms")), pa.int64()), 0).to_numpy()
    reasons = keys["reason"].to_numpy()
    addresses = keys["address"].to_numpy()
    addr_colors, _ = _address_colors(Counter(dict(zip(*np_unique(addresses), strict=True))))
    address_groups = np.where(np.isin(addresses, [a for a in addr_colors if a != "other"]), addresses, "other")
    reason_colors = {**REASON_COLORS, **{r: "#777777" for r in stats["by_reason"] if r not in REASON_COLORS}}
    plots = {
        "by_reason": _png(lambda ax: _stacked_time(ax, times, reasons, reason_colors, "dead letters"),
                          "Dead letters over time, by reason"),
        "by_address": _png(lambda ax: _stacked_time(ax, times, address_groups, addr_colors, "dead letters"),
                           "Dead letters over time, by original address"),
        "deliveries": _png(lambda ax: _deliveries(ax, led["deliveries"]), "Deliveries per message, by state"),
        "lateness": _png(lambda ax: _lateness(ax, snap.runs), "Schedule lateness per run (p50, p99)"),
        "waiting": _png(lambda ax: _waiting(ax, led["waiting"]["by_next_attempt_hour"], snap.as_of_ms),
                        "Waiting messages by next-attempt hour"),
        "gaps": _png(lambda ax: _gaps(ax, gaps), "Realised retry intervals (ledger error history)"),
    }
    reasons = [r for r in REASON_CODES if r in stats["by_reason"]]
    overview = [("ledger messages", led["messages"]), *led["states"].items(), ("dead letters (DLQ)", stats["total"]),
                ("waiting, overdue at the as-of", led["waiting"]["overdue"]), ("runs committed", len(snap.runs)),
                ("latest run", snap.runs[-1]["run_id"] if snap.runs else None)]
    oldest = [(o["message_id"], o["address"], o["deliveries"], o["first_failed_at"],
               human(o["age_ms"]) if o["age_ms"] is not None else None, o["next_attempt_at"])
              for o in led["waiting"]["oldest"]]
    sections = [
        "<h1>reprocess report</h1>",
        f'<p class="meta">Warehouse <code>{_e(warehouse)}</code>, snapshot {_e(snap.version)}, '
        f"as of {_e(iso_ms(snap.as_of_ms))}.</p>",
        "<h2>Summary</h2>", _table(("", "value"), overview, num=(1,)),
        "<h2>Dead letters</h2>", plots["by_reason"], plots["by_address"],
        "<h3>By reason</h3>", _table(("reason", "dead letters"), list(stats["by_reason"].items()), num=(1,)),
        "<h3>By original address</h3>",
        _table(("address", "total", *reasons),
               [(a, sum(c.values()), *(c.get(r, 0) for r in reasons)) for a, c in stats["by_address"].items()],
               num=tuple(range(1, 2 + len(reasons)))),
        "<h3>By dead-letter address</h3>",
        _table(("dead-letter address", "dead letters"), list(stats["by_dead_letter_address"].items()), num=(1,)),
        "<h3>Top error classes</h3>",
        _table(("error class", "dead letters"), stats["top_error_classes"], num=(1,)),
        f"<h3>Newest {len(dead)} of {table.num_rows}</h3>", _newest(_with_payloads(wh, snap, dead)),
        "<h2>Ledger</h2>", plots["deliveries"],
        _table(("policy", "profile", "total", *STATES),
               [(p, v["profile"], v["total"], *(v[s] for s in STATES)) for p, v in led["policies"].items()],
               num=(2, 3, 4, 5)),
        "<h2>Schedule</h2>", plots["lateness"], plots["waiting"], plots["gaps"],
        "<h3>Oldest waiting messages</h3>",
        _table(("message id", "address", "deliveries", "first failed", "age at the as-of", "next attempt"), oldest,
               num=(2,)),
        "<h2>Latest runs</h2>",
        _table(("run", "kind", "as of", "ingested", "due", "delivered", "rescheduled", "dead-lettered",
                "lateness p50", "lateness p99"), [_run_row(r) for r in stats["latest_runs"]], num=range(3, 10)),
    ]
    page = (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>reprocess report: {_e(warehouse)}</title><style>{_CSS}</style></head>\n<body>\n"
            + "\n".join(sections) + "\n</body></html>\n")
    return page, {"snapshot": snap.version, "as_of": iso_ms(snap.as_of_ms), "plots": len(plots),
                  "dead_letters": stats["total"], "messages": led["messages"]}


def np_unique(values: Any) -> tuple[list[str], list[int]]:
    """The distinct ``values`` (a numpy array of strings) and how often each occurs."""
    import numpy as np

    names, counts = np.unique(values, return_counts=True)
    return [str(n) for n in names], [int(c) for c in counts]


def _with_payloads(wh: Any, snap: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (dead letters) with their payloads, read file by file and kept only for them: the report shows the
    newest few, and read with every dead letter the payloads took gigabytes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from reprocess.storage.arrow import read_live_file

    ids = pa.array(sorted({r["message_id"] for r in rows}), pa.string())
    found: dict[tuple[Any, Any], Any] = {}
    for path in wh.live_files("dlq", snap) if rows else []:
        table = read_live_file(wh, snap, path, ["message_id"])
        if not pc.any(pc.is_in(table["message_id"], value_set=ids)).as_py():
            continue  # a file without any of them: its payloads are never read
        hits = read_live_file(wh, snap, path, ["message_id", "dead_lettered_at", "payload"],
                              keep=lambda batch: pc.is_in(batch["message_id"], value_set=ids))
        for r in hits.to_pylist():
            found[(r["message_id"], r["dead_lettered_at"])] = r.get("payload")
    return [{**r, "payload": found.get((r["message_id"], r["dead_lettered_at"]))} for r in rows]


def _newest(rows: list[dict[str, Any]]) -> str:
    cells = "".join(
        f"<tr><td>{_e(iso_ms(to_ms(d['dead_lettered_at'])))}</td><td>{_e(d['message_id'])}</td>"
        f"<td>{_e(d['original_address'])}</td><td>{_e(d['reason_code'])}</td><td class=n>{_e(d['deliveries'])}</td>"
        f"<td>{_e(d['last_error_class'])}</td><td class=p>{_e(_preview(d['payload']))}</td></tr>" for d in rows)
    head = "".join(f"<th>{h}</th>" for h in ("dead-lettered at", "message id", "original address", "reason",
                                             "deliveries", "last error", "payload (start)"))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{cells}</tbody></table>" if rows else "<p>none</p>"


def _run_row(r: dict[str, Any]) -> tuple[object, ...]:
    lat = r.get("lateness_ms") or {}
    dl = r.get("dead_lettered")
    return (r["run_id"], r["kind"], r.get("as_of"), r.get("ingested"), r.get("due"), r.get("delivered"),
            r.get("rescheduled"), dl.get("total") if isinstance(dl, dict) else None,
            human(lat["p50"]) if lat.get("p50") is not None else None,
            human(lat["p99"]) if lat.get("p99") is not None else None)


def write_report(warehouse: str, out: str | Path, newest: int = 20, private: bool | None = None) -> dict[str, Any]:
    """Write the report to ``out`` (atomically: a temporary file renamed into place); return its summary.

    The newest dead letters' payloads are previewed in it: with ``private`` (default ``$REPROCESS_PRIVATE_FILES``)
    the file is owner-only (0600).
    """
    from reprocess.files import publish_file

    page, summary = render_report(warehouse, newest=newest)
    path = Path(out)
    private = private_files_default() if private is None else private
    publish_file(path, page, replace=True, mode=0o600 if private else 0o644)  # a bad --out: a clear error
    return {"out": str(path), "bytes": len(page.encode("utf-8")), **summary}
