"""Terminal rendering of the operator documents of :mod:`reprocess.ops` and :mod:`reprocess.dlq_stats`.

Record values come from upstream consumers: control characters are shown escaped (``\\x1b``), never
sent to the terminal as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reprocess.ledger.states import REASON_CODES, STATES
from reprocess.policy.durations import human

_CELL_MAX = 48


def printable(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` with control characters escaped (newlines and tabs kept when ``keep_newlines``)."""
    s = "" if text is None else str(text)
    out = []
    for ch in s:
        if keep_newlines and ch in "\n\t":
            out.append(ch)
        elif ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 or ch in "\u2028\u2029":
            out.append(ch.encode("unicode_escape").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


def _cell(value: object, width: int = _CELL_MAX) -> str:
    s = "-" if value is None else printable(value)
    return s if len(s) <= width else s[: width - 1] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[int] = (),
          whole: Sequence[int] = ()) -> list[str]:
    """Aligned columns; column indexes in ``right`` are right-aligned (numbers); those in ``whole`` are never cut (a
    message id: one cut with '…' was copied into ``dlq show``, which found no such message)."""
    cells = [[_cell(v, len(printable(v)) if i in whole and v is not None else _CELL_MAX) for i, v in enumerate(row)]
             for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(widths[i]) if i in right else v.ljust(widths[i])
                         for i, v in enumerate(values)).rstrip()

    return [line(list(headers)), *(line(r) for r in cells)]


def _head(doc: dict[str, Any]) -> str:
    return f"{printable(doc['warehouse'])} (snapshot {doc['snapshot']}, as of {doc['as_of']})"


def _filters(f: dict[str, Any]) -> str:
    parts = [f"address {f['address']}" if f.get("address") else "",
             "reason " + "|".join(f["reasons"]) if f.get("reasons") else "",
             f"since {f['since']}" if f.get("since") else "", f"until {f['until']}" if f.get("until") else ""]
    kept = [p for p in parts if p]
    return ("; filter: " + ", ".join(kept)) if kept else ""


def render_dead_letters(doc: dict[str, Any]) -> str:
    """``reprocess dlq list``: one line per dead letter, newest first."""
    lines = [f"dead letters in {_head(doc)}{printable(_filters(doc['filter']))}: {doc['matched']} matched"
             + (f", newest {doc['shown']} shown (raise --limit for more)" if doc["shown"] < doc["matched"] else "")]
    if doc["dead_letters"]:
        rows = [(d["dead_lettered_at"], d["message_id"], d["original_address"], d["dead_letter_address"],
                 d["reason_code"], d["deliveries"], d["last_error_class"]) for d in doc["dead_letters"]]
        lines += table(("dead-lettered at", "message id", "original address", "dlq address", "reason", "deliveries",
                        "last error"), rows, right=(5,), whole=(1,))
    return "\n".join(lines) + "\n"


def render_dead_letter(doc: dict[str, Any]) -> str:
    """``reprocess dlq show``: one dead letter in full."""
    fields = [
        ("original address", doc["original_address"]), ("dead-letter address", doc["dead_letter_address"]),
        ("reason", doc["reason_code"]), ("deliveries", doc["deliveries"]),
        ("policy", f"{doc['policy']} ({doc['profile']})"),
        ("first failed", doc["first_failed_at"]), ("last failed", doc["last_failed_at"]),
        ("dead-lettered", f"{doc['dead_lettered_at']} by run {doc['run_id']}"),
        ("last error", f"{doc['last_error_class'] or '-'}: {doc['last_error_message'] or '-'}"),
        ("consumer group", doc["consumer_group"]), ("ordering key", doc["ordering_key"]), ("extra", doc["extra"]),
    ]
    lines = [f"dead letter {printable(doc['message_id'])} in {_head(doc)}"]
    lines += [f"  {k:<20} {printable('-' if v is None else v)}" for k, v in fields]
    if doc.get("records_with_this_id", 1) > 1:
        lines.append(f"  ({doc['records_with_this_id']} DLQ records carry this id; the newest is shown)")
    lines.append(f"  headers ({len(doc['headers'])})")
    lines += [f"    {printable(k)}: {printable(v)}" for k, v in sorted(doc["headers"].items())]
    lines.append(f"  error history ({len(doc['error_history'])}, oldest first)")
    rows = [(e["delivery"], e["failed_at"], e["error_class"], e["error_message"]) for e in doc["error_history"]]
    lines += ["    " + x for x in table(("delivery", "failed at", "error class", "message"), rows, right=(0,))]
    payload = doc["payload"] or ""
    lines.append(f"  payload ({len(payload.encode('utf-8'))} bytes)")
    lines += ["    " + x for x in printable(payload, keep_newlines=True).split("\n")]
    return "\n".join(lines) + "\n"


def render_dlq_stats(doc: dict[str, Any]) -> str:
    """``reprocess dlq stats``: counts by reason, by original address (and reason), by day."""
    reasons = [r for r in REASON_CODES if r in doc["by_reason"]] + sorted(set(doc["by_reason"]) - set(REASON_CODES))
    lines = [f"dead letters in {_head(doc)}{printable(_filters(doc['filter']))}: {doc['total']}"]
    if not doc["total"]:
        return lines[0] + "\n"
    lines += ["", "by reason"]
    lines += ["  " + x for x in table(("reason", "dead letters"), list(doc["by_reason"].items()), right=(1,))]
    for title, key, data in (("by original address", "address", doc["by_address"]),
                             ("by day of dead-lettering (UTC)", "day", doc["by_day"])):
        lines += ["", title]
        rows = [(k, sum(c.values()), *(c.get(r, 0) for r in reasons)) for k, c in data.items()]
        lines += ["  " + x for x in table((key, "total", *reasons), rows, right=tuple(range(1, 2 + len(reasons))))]
    if doc["top_error_classes"]:
        lines += ["", "top error classes"]
        lines += ["  " + x for x in table(("error class", "dead letters"), doc["top_error_classes"], right=(1,))]
    return "\n".join(lines) + "\n"


def render_ledger_stats(doc: dict[str, Any]) -> str:
    """``reprocess ledger stats``."""
    w = doc["waiting"]
    check = {True: "", False: " (DIFFERS from the last run's summary)", None: ""}[doc["matches_last_run_summary"]]
    lines = [f"ledger of {_head(doc)}: {doc['messages']} messages",
             "  " + ", ".join(f"{s} {n}" for s, n in doc["states"].items()) + check]
    if not doc["messages"]:
        return "\n".join(lines) + "\n"
    lines += ["", "by policy"]
    lines += ["  " + x for x in table(("policy", "profile", "total", *STATES),
                                      [(p, v["profile"], v["total"], *(v[s] for s in STATES))
                                       for p, v in doc["policies"].items()], right=(2, 3, 4, 5))]
    lines += ["", "deliveries per message"]
    lines += ["  " + x for x in table(("deliveries", "messages", *STATES),
                                      [(d["deliveries"], d["messages"], *(d[s] for s in STATES))
                                       for d in doc["deliveries"]], right=(0, 1, 2, 3, 4))]
    lines += ["", f"waiting: {w['total']}, overdue at the as-of: {w['overdue']}"]
    if w["by_next_attempt_hour"]:
        lines += ["  " + x for x in table(("next attempt hour (UTC)", "messages"),
                                          list(w["by_next_attempt_hour"].items()), right=(1,))]
    if w["oldest"]:
        lines += ["", "oldest waiting (by first failure)"]
        rows = [(o["message_id"], o["address"], o["deliveries"], o["first_failed_at"],
                 human(o["age_ms"]) if o["age_ms"] is not None else None, o["next_attempt_at"]) for o in w["oldest"]]
        lines += ["  " + x for x in table(("message id", "address", "deliveries", "first failed", "age",
                                           "next attempt"), rows, right=(2,), whole=(0,))]
    return "\n".join(lines) + "\n"
