"""Target specs without their passwords, for logs, summaries and errors: no pyspark here, so the DAG files, which
mask the deployment's target as they are parsed (reprocess.spark_env.mask_target_password), load none."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

_USERINFO = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@\[]*):(?P<secret>.*)@(?P<rest>[^@]*)$", re.DOTALL)


def redact(spec: str) -> str:
    """The spec without its password (for logs, summaries, errors)."""
    try:
        u = urlsplit(spec)
    except ValueError:  # an unclosed '[': of an IPv6 host, or of a password ('a[b'), masked to the last '@'
        return masked_to_last_at(spec)
    if userinfo_cut_short(u):
        return masked_to_last_at(spec)
    if u.password is None:
        return spec
    # from the text, not u.port: a port out of range raises there, and the error naming it must not
    user, host = u.netloc.rsplit("@", 1)
    return urlunsplit((u.scheme, f"{user.split(':', 1)[0]}:***@{host}", u.path, u.query, u.fragment))


def masked_to_last_at(spec: str) -> str:
    """``spec`` with everything between its user's ':' and its last '@' masked (the spec unchanged without)."""
    odd = _USERINFO.match(spec)
    return spec if odd is None else f"{odd['head']}:***@{odd['rest']}"


def userinfo_cut_short(u: Any) -> bool:
    """Whether urlsplit's reading ``u`` of a spec may have ended its user or host at a '/', '?', '#' or '@' of a
    password: an '@' in the path or fragment (where none belongs: ``amqp://svc:Xk9/q#Tz@rabbit``,
    a password 'a@b/c' written bare), or in a query with no '=' before it (a password of digits, a '?', then more),
    or after a host whose "port" is not digits (a password ``Pw?k=1`` after the user's ':', then ``@broker``: the
    "port" is the password up to its '?'). A query's own '@' in a value (``?destination=/queue/a@b``, after a host
    with or without a port, or an empty one) is not one."""
    if "@" in u.path + u.fragment:
        return True
    if "@" not in u.query or "@" in u.netloc:
        return False
    host = u.netloc.rsplit("]", 1)[-1]  # past an IPv6 address's colons
    port = host.rsplit(":", 1)[1] if ":" in host else ""
    return "=" not in u.query.split("@", 1)[0] or not (port == "" or port.isdigit())  # "host:" is the default port


def target_password(spec: str) -> str | None:
    """The password a target ``spec`` holds, as :func:`redact` masks it (None without one)."""
    try:
        u = urlsplit(spec)
        cut_short = userinfo_cut_short(u)
    except ValueError:
        cut_short = True
    if cut_short:
        odd = _USERINFO.match(spec)
        return odd["secret"] if odd is not None and odd["secret"] else None
    return u.password


__all__ = ["masked_to_last_at", "redact", "target_password", "userinfo_cut_short"]
