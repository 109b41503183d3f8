"""The Hadoop ``FileSystem`` calls of a warehouse at a URI (:mod:`reprocess.storage.hadoop`), from either side of Spark.

- :class:`JvmFs`: a driver of this process (``spark-submit``, ``--master``) makes them through py4j.
- :class:`ConnectFs`: a Spark Connect client has no JVM, so the server's driver makes them. Each call goes as one
  relation of the Connect protocol (an extension read by ``reprocess.connect.StorePlugin``, in the jar
  ``reprocess connect-server`` puts on its class path) and comes back as its rows. The same ``FileSystem``, the
  same conditional creates (``If-None-Match: *`` and ``If-Match`` on S3A), only one gRPC round trip further away.

Both offer the calls below on string locations; a failed condition is ``False``, a missing file
:class:`FileNotFoundError` (``read``) or ``None`` (``status``).
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from reprocess.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

# What a failed condition raises: Hadoop's own class (the test filesystem, HDFS), S3A's for a 412 from S3.
CONFLICTS = ("org.apache.hadoop.fs.FileAlreadyExistsException", "org.apache.hadoop.fs.s3a.RemoteFileChangedException")
IF_ABSENT = "fs.option.create.conditional.overwrite"
IF_MATCH = "fs.option.create.conditional.overwrite.etag"
PLUGIN_CLASS = "reprocess.connect.StorePlugin"
PLUGIN_CONF = "spark.connect.extensions.relation.classes"
TYPE_URL = "type.googleapis.com/reprocess.StoreRequest"  # StorePlugin.TYPE_URL


class HadoopFs(Protocol):
    """The calls a warehouse at a URI makes on its store."""

    def open(self, uri: str, capabilities: list[str]) -> tuple[str, str, list[str]]:
        """``uri`` qualified, the filesystem's class, and which ``capabilities`` it does not declare for it."""

    def qualify(self, location: str) -> str: ...

    def uris(self, locations: Sequence[str]) -> list[str]:
        """Each location as Spark writes it in ``_metadata.file_path`` (Hadoop's ``Path.toUri``)."""

    def exists(self, location: str) -> bool: ...

    def status(self, location: str) -> tuple[str | None, int] | None:
        """(ETag, length), or None if absent."""

    def read(self, location: str) -> bytes: ...

    def write(self, location: str, data: bytes, condition: bool | str | None = None) -> bool:
        """Replace (``None``), create if absent (``True``) or replace if the ETag is ``condition``."""

    def put(self, files: Sequence[tuple[str, bytes]]) -> None:
        """Create or replace each (location, bytes), whole."""

    def list_files(self, location: str, recursive: bool) -> list[str]:
        """The files under ``location``, sorted; none if it does not exist."""

    def children(self, location: str) -> list[str]:
        """The names directly in ``location``, sorted; none if it does not exist."""

    def glob(self, pattern: str) -> list[str]: ...

    def delete(self, locations: Sequence[str], recursive: bool) -> None: ...


def hadoop_fs(uri: str) -> HadoopFs:
    """The store calls of the Spark session this process runs: its own driver's, else the Connect server's."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is not None:
        return JvmFs(sc)
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.getActiveSession() or ConnectSession._get_default_session()
    if session is not None:
        return ConnectFs(session)
    raise ConfigError(f"warehouse {uri} is a URI: it is read and written through a Spark driver's Hadoop "
                      "FileSystem, and this command has none (commands without Spark need a warehouse on a local or "
                      "shared POSIX filesystem)", key="--warehouse")


class JvmFs:
    """Through py4j, in this process's driver JVM."""

    def __init__(self, sc: Any) -> None:
        self._jvm: Any = sc._jvm
        self._conf = sc._jsc.hadoopConfiguration()
        self._fs: Any = None

    def _path(self, location: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(str(location))

    def open(self, uri: str, capabilities: list[str]) -> tuple[str, str, list[str]]:
        from py4j.protocol import Py4JJavaError

        path = self._path(uri)
        try:
            self._fs = path.getFileSystem(self._conf)
        except Py4JJavaError as exc:
            raise no_filesystem(uri, exc.java_exception.toString()) from None
        missing = [c for c in capabilities if not self._fs.hasPathCapability(path, c)]
        return str(self._fs.makeQualified(path).toString()), str(self._fs.getClass().getName()), missing

    def qualify(self, location: str) -> str:
        return str(self._fs.makeQualified(self._path(location)).toString())

    def uris(self, locations: Sequence[str]) -> list[str]:
        return [str(self._path(p).toUri().toString()) for p in locations]

    def exists(self, location: str) -> bool:
        return bool(self._fs.exists(self._path(location)))

    def status(self, location: str) -> tuple[str | None, int] | None:
        from py4j.protocol import Py4JJavaError

        try:
            st = self._fs.getFileStatus(self._path(location))
        except Py4JJavaError as exc:
            if exc.java_exception.getClass().getName() == "java.io.FileNotFoundException":
                return None
            raise
        etag = st.getEtag()
        return (None if etag is None else str(etag)), int(st.getLen())

    def read(self, location: str) -> bytes:
        from py4j.protocol import Py4JJavaError

        try:
            stream = self._fs.open(self._path(location))
        except Py4JJavaError as exc:
            if exc.java_exception.getClass().getName() == "java.io.FileNotFoundException":
                raise FileNotFoundError(location) from None
            raise
        try:
            return bytes(self._jvm.org.apache.hadoop.io.IOUtils.readFullyToByteArray(stream))
        finally:
            stream.close()

    def write(self, location: str, data: bytes, condition: bool | str | None = None) -> bool:
        from py4j.protocol import Py4JJavaError

        if condition is None:
            out = self._fs.create(self._path(location), True)
            try:
                out.write(bytearray(data))
            finally:
                out.close()
            return True
        builder = self._fs.createFile(self._path(location)).overwrite(condition is not True)
        builder = builder.must(IF_ABSENT, True) if condition is True else builder.must(IF_MATCH, condition)
        try:
            out = builder.build()
            try:
                out.write(bytearray(data))
            finally:
                out.close()  # an object store checks the condition here, when the object is put
        except Py4JJavaError as exc:
            if exc.java_exception.getClass().getName() in CONFLICTS:
                return False
            raise
        return True

    def put(self, files: Sequence[tuple[str, bytes]]) -> None:
        for location, data in files:
            self.write(location, data)

    def list_files(self, location: str, recursive: bool) -> list[str]:
        path = self._path(location)
        if not self._fs.exists(path):
            return []
        it = self._fs.listFiles(path, recursive)
        out = []
        while it.hasNext():
            out.append(str(it.next().getPath().toString()))
        return sorted(out)

    def children(self, location: str) -> list[str]:
        path = self._path(location)
        if not self._fs.exists(path):
            return []
        return sorted(str(st.getPath().getName()) for st in self._fs.listStatus(path))

    def glob(self, pattern: str) -> list[str]:
        return sorted(str(s.getPath().toString()) for s in self._fs.globStatus(self._path(pattern)) or [])

    def delete(self, locations: Sequence[str], recursive: bool) -> None:
        for location in locations:
            self._fs.delete(self._path(location), recursive)


class ConnectFs:
    """Through the Spark Connect server's driver JVM (``reprocess.connect.StorePlugin``): one request per call."""

    def __init__(self, session: ConnectSession) -> None:
        self._session = session

    def _call(self, op: str, **args: Any) -> list[Any]:
        from pyspark.errors import PySparkException
        from pyspark.sql.connect.dataframe import DataFrame
        from pyspark.sql.connect.plan import LogicalPlan

        # the nonce: the server caches plans by their bytes, and a repeated call (a listing, say) must run again
        payload = json.dumps({"op": op, "nonce": uuid.uuid4().hex, **args}).encode("utf-8")

        class _Request(LogicalPlan):
            def __init__(self) -> None:
                super().__init__(None)

            def plan(self, session: Any) -> Any:
                rel = self._create_proto_relation()
                rel.extension.type_url = TYPE_URL
                rel.extension.value = payload
                return rel

        try:
            return DataFrame(_Request(), self._session).collect()
        except PySparkException as exc:
            if "NO_HANDLER_FOR_EXTENSION" in str(exc):
                raise ConfigError(
                    f"the Spark Connect server cannot make the Hadoop calls of a warehouse at a URI: it has no "
                    f"{PLUGIN_CLASS}. Start it with `reprocess connect-server` (which loads it from the jar `make "
                    f"venv` builds), or set {PLUGIN_CONF}={PLUGIN_CLASS} with that jar on its driver's class path",
                    key="--remote") from None
            raise

    def open(self, uri: str, capabilities: list[str]) -> tuple[str, str, list[str]]:
        from pyspark.errors import PySparkException

        try:
            rows = self._call("open", path=uri, caps=capabilities)
        except PySparkException as exc:
            if "No FileSystem for scheme" in str(exc) or "ClassNotFoundException" in str(exc):
                raise no_filesystem(uri, str(exc).splitlines()[0]) from None
            raise
        found = {r.k: r.s for r in rows if r.k != "capability"}
        return found["root"], found["class"], [r.s for r in rows if r.k == "capability" and not r.n]

    def qualify(self, location: str) -> str:
        return str(self._call("qualify", paths=[location])[0].s)

    def uris(self, locations: Sequence[str]) -> list[str]:
        return [str(r.s) for r in self._call("uris", paths=list(locations))] if locations else []

    def exists(self, location: str) -> bool:
        return self.status(location) is not None

    def status(self, location: str) -> tuple[str | None, int] | None:
        rows = self._call("status", path=location)
        return (rows[0].s, int(rows[0].n)) if rows else None

    def read(self, location: str) -> bytes:
        rows = self._call("read", path=location)
        if not rows:
            raise FileNotFoundError(location)
        return bytes(rows[0].b)

    def write(self, location: str, data: bytes, condition: bool | str | None = None) -> bool:
        cond: dict[str, Any] = {} if condition is None else {"if": condition}
        rows = self._call("write", path=location, data=base64.b64encode(data).decode("ascii"), **cond)
        return bool(rows[0].n)

    def put(self, files: Sequence[tuple[str, bytes]]) -> None:
        if files:  # in one request: Data Docs are some thirty files
            self._call("put", files=[[f, base64.b64encode(data).decode("ascii")] for f, data in files])

    def list_files(self, location: str, recursive: bool) -> list[str]:
        return sorted(str(r.s) for r in self._call("list", path=location, recursive=recursive))

    def children(self, location: str) -> list[str]:
        return sorted(name for name, _kind, _path, _len in self.entries(location))

    def entries(self, location: str) -> list[tuple[str, str, str, int]]:
        """What is directly in ``location``: (name, "dir"/"file"/"other", path, length), by name."""
        rows = self._call("children", path=location)
        return sorted((str(r.s).rstrip("/").rsplit("/", 1)[-1], str(r.k), str(r.s), int(r.n)) for r in rows)

    def decode_problem(self, location: str, fmt: str) -> str | None:
        """Why a ``.gz`` or Parquet landing file cannot be decoded at all (None if it can), checked in the server's
        driver as :func:`reprocess.cycle.landing_batch._hadoop_problem` checks it in ours."""
        rows = self._call("decodes", path=location, fmt=fmt)
        return str(rows[0].s) if rows else None

    def glob(self, pattern: str) -> list[str]:
        return sorted(str(r.s) for r in self._call("glob", path=pattern))

    def delete(self, locations: Sequence[str], recursive: bool) -> None:
        if locations:
            self._call("delete", paths=list(locations), recursive=recursive)


def no_filesystem(uri: str, reason: str) -> ConfigError:
    from reprocess.uris import remote_scheme

    return ConfigError(f"warehouse {uri}: this Spark has no Hadoop FileSystem for {remote_scheme(uri)}:// ({reason}); "
                       "the deployment's Spark image must carry the connector jars", key="--warehouse")


def upload(fs: HadoopFs, local: str, dest: str) -> None:
    """The files under the local folder ``local`` written below ``dest`` (a folder URI), each whole."""
    files = []
    for folder, _dirs, names in os.walk(local):
        for name in names:
            src = os.path.join(folder, name)
            rel = os.path.relpath(src, local).replace(os.sep, "/")
            with open(src, "rb") as fh:
                files.append((dest.rstrip("/") + "/" + rel, fh.read()))
    fs.put(files)
