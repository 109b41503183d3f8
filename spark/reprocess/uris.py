"""Local paths and URIs of the landing and the warehouse: one reading of both (light: the DAG file imports it)."""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

# A URI's scheme: two characters at least (``C:/`` is a drive), then ``:/`` - Hadoop writes paths of a filesystem
# without an authority as ``viewfs:/landing/...``, with one slash.
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]+):/")


def remote_scheme(uri: str | Path) -> str | None:
    """The scheme of a location that is no local path (``s3a``, ``gs``, ``abfss``, ``hdfs``...), or None.

    A plain path and a ``file:`` URI are local: Python reads them. Any other URI is for the Spark job's Hadoop
    ``FileSystem``, with the connector jars its Spark image carries.
    """
    m = _SCHEME.match(str(uri))
    return m.group(1).lower() if m and m.group(1).lower() != "file" else None


def local_path(uri: str | Path) -> Path:
    """The local path of a plain path or a ``file:`` URI (``file:///x``, ``file:/x``, ``file://localhost/x``,
    percent-encoded or not); call it only where :func:`remote_scheme` is None."""
    text = str(uri)
    if text[:5].lower() == "file:":
        return Path(url2pathname(urlsplit(text).path))
    return Path(text)


def asset_uri(location: str, *parts: str) -> str:
    """The URI of ``location`` (a path, a ``file:`` URI or a URI), joined with ``parts``: what the DAGs name their
    Airflow assets (``/srv/wh``, ``ledger`` -> ``file:///srv/wh/ledger``; ``s3a://b/wh``, ``dlq`` -> ``s3a://b/wh/dlq``)."""
    base = location.rstrip("/") if remote_scheme(location) else f"file://{os.path.abspath(local_path(location))}"
    return "/".join((base, *parts))


# What java.net.URI's multi-argument constructors leave unquoted in a path (RFC 2396): unreserved and punctuation
# characters, '/', and "other" characters (non-ASCII that are neither controls nor spaces); '%' is always quoted.
_URI_PATH_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!~*'();:@&=+$,/")


def _java_uri_quote(path: str) -> str:
    out = []
    for ch in path:
        if ch in _URI_PATH_SAFE or (ord(ch) > 0x7F and not _java_space_or_control(ch)):
            out.append(ch)
        else:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
    return "".join(out)


def _java_space_or_control(ch: str) -> bool:
    """``Character.isSpaceChar(ch) || Character.isISOControl(ch)``."""
    return unicodedata.category(ch) in ("Zs", "Zl", "Zp") or ord(ch) <= 0x1F or 0x7F <= ord(ch) <= 0x9F


def local_file_uri(path: str) -> str:
    """The URI Spark gives a local file in ``_metadata.file_path``: ``file:`` and Hadoop's ``new Path(path)``,
    qualified by the local filesystem, of ``path`` (absolute, ``.`` and ``..`` resolved, repeated and trailing
    slashes dropped, characters quoted as java.net.URI quotes them). Computed here: it needs no JVM, so that a
    Spark Connect client can match the files it wrote."""
    normal = re.sub("/+", "/", os.path.abspath(path))
    return "file:" + _java_uri_quote(normal)
