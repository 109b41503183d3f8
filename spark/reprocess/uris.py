"""Local paths and URIs of the landing and the warehouse: one reading of both (light: the DAG file imports it)."""

from __future__ import annotations

import re
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
