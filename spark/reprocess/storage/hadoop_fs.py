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
import logging
import os
import re
import uuid
from collections.abc import Iterator, Sequence
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
log = logging.getLogger(__name__)
Stamp = tuple[int, int | None, str | None]  # a file's length, modification time (ms) and ETag: HadoopFs.stamps


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

    def sizes(self, locations: Sequence[str]) -> list[int]:
        """The files' lengths (:class:`FileNotFoundError` if one is absent)."""

    def stamps(self, locations: Sequence[str]) -> dict[str, Stamp | None]:
        """Each file's (length, modification time in ms, ETag or None where the filesystem has none), or None for
        one that is not there: from one listing of each of their folders, so that a landing's many small files cost
        a request per folder, not one each. A file is found by its name in its folder's listing."""

    def read(self, location: str) -> bytes: ...

    def write(self, location: str, data: bytes, condition: bool | str | None = None) -> bool:
        """Replace (``None``), create if absent (``True``) or replace if the ETag is ``condition``."""

    def put(self, files: Sequence[tuple[str, bytes]]) -> None:
        """Create or replace each (location, bytes), whole."""

    def list_files(self, location: str, recursive: bool) -> list[str]:
        """The files under ``location``, sorted; none if it does not exist."""

    def children(self, location: str) -> list[str]:
        """The names directly in ``location``, sorted; none if it does not exist."""

    def entries(self, location: str) -> list[tuple[str, str, str, int]]:
        """What is directly in ``location``: (name, "dir"/"file"/"other", path, length), by name."""

    def decode_problem(self, location: str, fmt: str) -> tuple[str | None, int | None]:
        """Why a ``.gz`` or Parquet (``fmt``) landing file cannot be decoded at all (None if it can), and when it
        can, a ``.gz`` file's decoded length (None for others). An I/O error that is no decoding error (a timeout,
        throttling, a 403, a file gone since the listing) is raised: the run fails and the next one retries it; only
        a file that does not decode is quarantined whole, for good."""

    def decoded_chunks(self, location: str, size: int) -> Iterator[bytes] | None:
        """The file's bytes, gunzipped for a ``.gz`` file, ``size`` at a time from a stream (the file is never
        whole in memory); None where this side has no stream of it (a Spark Connect client: the server's store calls
        answer whole)."""

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


def session_fs(spark: Any) -> HadoopFs:
    """The store calls of ``spark``: its own driver's through py4j, or for a Spark Connect client, its server's."""
    from reprocess.sparkutil import is_remote

    return ConnectFs(spark) if is_remote(spark) else JvmFs(spark.sparkContext)


# Where the JVM throws when bytes do not decode: the gzip codec, the JDK's inflater, the Parquet reader. An error
# thrown anywhere else (the filesystem) is no corruption. A file that ends early (EOFException) is corrupt wherever
# it is noticed, as is a page Parquet calls corrupt (ParquetDecodingException, which Spark's vectorized reader throws
# from its own classes). The same prefix list is StorePlugin.DECODERS, for Connect clients.
_DECODERS = ("org.apache.hadoop.io.compress.", "java.util.zip.", "org.apache.parquet.")
_CORRUPT_WHEREVER = ("java.io.EOFException", "org.apache.parquet.io.ParquetDecodingException")


def does_not_decode(exc: Any) -> bool:
    """True when a Java exception says the bytes do not decode (see ``_DECODERS``), by its class or the frame
    that threw it."""
    if exc.getClass().getName() in _CORRUPT_WHEREVER:
        return True
    frames = exc.getStackTrace()
    return len(frames) > 0 and str(frames[0].getClassName()).startswith(_DECODERS)


class JvmFs:
    """Through py4j, in this process's driver JVM. One instance serves one root (a warehouse, a landing): its
    filesystem is the one :meth:`open` opens, or else that of the first location it is asked about."""

    def __init__(self, sc: Any) -> None:
        self._jvm: Any = sc._jvm
        self._conf = sc._jsc.hadoopConfiguration()
        self._filesystem: Any = None
        self._classes: dict[str, Any] = {}

    def _class(self, name: str) -> Any:
        """The JVM class ``name``, looked up once per instance (each lookup is a py4j round trip)."""
        if name not in self._classes:
            self._classes[name] = self._jvm.java.lang.Class.forName(name)
        return self._classes[name]

    def _at(self, location: str) -> tuple[Any, Any]:
        """``location``'s Hadoop ``Path`` and this root's ``FileSystem``."""
        path = self._jvm.org.apache.hadoop.fs.Path(str(location))
        if self._filesystem is None:
            self._filesystem = path.getFileSystem(self._conf)
        return path, self._filesystem

    def open(self, uri: str, capabilities: list[str]) -> tuple[str, str, list[str]]:
        from py4j.protocol import Py4JJavaError

        try:
            path, fs = self._at(uri)
        except Py4JJavaError as exc:
            raise no_filesystem(uri, exc.java_exception.toString()) from None
        missing = [c for c in capabilities if not fs.hasPathCapability(path, c)]
        return str(fs.makeQualified(path).toString()), str(fs.getClass().getName()), missing

    def qualify(self, location: str) -> str:
        path, fs = self._at(location)
        return str(fs.makeQualified(path).toString())

    def uris(self, locations: Sequence[str]) -> list[str]:
        return [str(self._jvm.org.apache.hadoop.fs.Path(p).toUri().toString()) for p in locations]

    def exists(self, location: str) -> bool:
        path, fs = self._at(location)
        return bool(fs.exists(path))

    def _file_status(self, location: str) -> Any:
        """Hadoop's ``FileStatus`` of ``location``, or None if it is absent."""
        from py4j.protocol import Py4JJavaError

        path, fs = self._at(location)
        try:
            return fs.getFileStatus(path)
        except Py4JJavaError as exc:
            if self._not_found(exc):
                return None
            raise

    def status(self, location: str) -> tuple[str | None, int] | None:
        st = self._file_status(location)
        if st is None:
            return None
        # only statuses that implement EtagSource have one (a bucket's); HDFS's, viewfs's and the local
        # filesystem's have no getEtag at all (the store plugin checks the same for a Connect client)
        tagged = self._class("org.apache.hadoop.fs.EtagSource").isInstance(st)
        etag = st.getEtag() if tagged else None
        return (None if etag is None else str(etag)), int(st.getLen())

    def sizes(self, locations: Sequence[str]) -> list[int]:
        out = []
        for location in locations:
            st = self._file_status(location)
            if st is None:
                raise FileNotFoundError(location)
            out.append(int(st.getLen()))
        return out

    def stamps(self, locations: Sequence[str]) -> dict[str, Stamp | None]:
        from py4j.protocol import Py4JJavaError

        tagged = self._class("org.apache.hadoop.fs.EtagSource")
        out: dict[str, Stamp | None] = {}
        for folder, names in by_folder(locations).items():
            path, fs = self._at(folder)
            try:
                listed = fs.listStatus(path)
            except Py4JJavaError as exc:
                if not self._not_found(exc):
                    raise
                listed = []
            wanted = dict(names)
            found: dict[str, Stamp] = {}
            for st in listed:  # each call a round trip: a file not asked for costs its name only
                name = str(st.getPath().getName())
                if name in wanted and st.isFile():  # only an EtagSource has getEtag (as in status)
                    etag = st.getEtag() if tagged.isInstance(st) else None
                    found[name] = (int(st.getLen()), int(st.getModificationTime()), None if etag is None else str(etag))
            out.update((location, found.get(name)) for name, location in names)
        return out

    def _not_found(self, exc: Any) -> bool:
        """Whether a Java error is a ``FileNotFoundException`` (or one of its kind: viewfs's
        ``NotInMountpointException``), as the store plugin's ``catch`` takes it."""
        return bool(self._class("java.io.FileNotFoundException").isInstance(exc.java_exception))

    def read(self, location: str) -> bytes:
        from py4j.protocol import Py4JJavaError

        path, fs = self._at(location)
        try:
            stream = fs.open(path)
        except Py4JJavaError as exc:
            if self._not_found(exc):
                raise FileNotFoundError(location) from None
            raise
        try:
            return bytes(self._jvm.org.apache.hadoop.io.IOUtils.readFullyToByteArray(stream))
        finally:
            stream.close()

    def write(self, location: str, data: bytes, condition: bool | str | None = None) -> bool:
        from py4j.protocol import Py4JJavaError

        path, fs = self._at(location)
        if condition is None:
            out = fs.create(path, True)
            try:
                out.write(bytearray(data))
            finally:
                out.close()
            return True
        builder = fs.createFile(path).overwrite(condition is not True)
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
        path, fs = self._at(location)
        if not fs.exists(path):
            return []
        it = fs.listFiles(path, recursive)
        out = []
        while it.hasNext():
            out.append(str(it.next().getPath().toString()))
        return sorted(out)

    def children(self, location: str) -> list[str]:
        path, fs = self._at(location)
        if not fs.exists(path):
            return []
        return sorted(str(st.getPath().getName()) for st in fs.listStatus(path))

    def entries(self, location: str) -> list[tuple[str, str, str, int]]:
        path, fs = self._at(location)
        if not fs.exists(path):
            return []
        out = []
        for st in fs.listStatus(path):
            kind = "dir" if st.isDirectory() else "file" if st.isFile() else "other"
            out.append((str(st.getPath().getName()), kind, str(st.getPath().toString()), int(st.getLen())))
        return sorted(out)

    def decode_problem(self, location: str, fmt: str) -> tuple[str | None, int | None]:
        from py4j.protocol import Py4JJavaError

        jvm = self._jvm
        path, _fs = self._at(location)
        decoded = None
        try:
            if fmt == "parquet":
                from reprocess.landing.contract import codec_problem

                reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(
                    jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(path, self._conf))
                try:  # a few calls per column chunk: a landing file holds few
                    codecs = {str(c.getCodec().name()) for b in reader.getFooter().getBlocks() for c in b.getColumns()}
                finally:
                    reader.close()
                return codec_problem(codecs), None
            elif location.endswith(".gz"):
                stream = self._decoded_stream(location)
                try:
                    decoded = int(stream.transferTo(jvm.java.io.OutputStream.nullOutputStream()))
                finally:
                    jvm.org.apache.hadoop.io.IOUtils.closeStream(stream)  # closes the file's stream too
        except Py4JJavaError as exc:
            if not does_not_decode(exc.java_exception):
                raise
            why = exc.java_exception.toString()
            return (f"not a readable Parquet file: {why}" if fmt == "parquet" else f"cannot decompress: {why}"), None
        return None, decoded

    def _decoded_stream(self, location: str) -> Any:
        """An open Java ``InputStream`` of the file's bytes, through its codec for a ``.gz`` file."""
        path, fs = self._at(location)
        raw = fs.open(path)
        if not location.endswith(".gz"):
            return raw
        try:
            return self._jvm.org.apache.hadoop.io.compress.CompressionCodecFactory(self._conf).getCodec(path) \
                .createInputStream(raw)
        except BaseException:
            self._jvm.org.apache.hadoop.io.IOUtils.closeStream(raw)
            raise

    def decoded_chunks(self, location: str, size: int) -> Iterator[bytes]:
        stream = self._decoded_stream(location)
        try:
            while chunk := bytes(stream.readNBytes(size)):
                yield chunk
        finally:
            self._jvm.org.apache.hadoop.io.IOUtils.closeStream(stream)

    def glob(self, pattern: str) -> list[str]:
        path, fs = self._at(pattern)
        return sorted(str(s.getPath().toString()) for s in fs.globStatus(path) or [])

    def delete(self, locations: Sequence[str], recursive: bool) -> None:
        for location in locations:
            path, fs = self._at(location)
            fs.delete(path, recursive)


def by_folder(locations: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
    """``locations`` by their folder, each as (its name, the location): the last ``/`` divides them, as Hadoop's
    ``Path.getParent`` and ``getName`` do (a listing's paths have no trailing ``/``)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for location in locations:
        folder, name = location.rstrip("/").rsplit("/", 1)
        if _ROOT.fullmatch(folder):  # a file at a filesystem's root: its folder is the root, "/" (getParent)
            folder += "/"
        out.setdefault(folder, []).append((name, location))
    return out


_ROOT = re.compile(r"[A-Za-z][\w+.-]*:(//[^/]*)?")  # a scheme and authority with no path: s3a://bucket, cfile:


def plugin_request(session: ConnectSession, op: str, **args: Any) -> list[Any]:
    """One request ``op`` with ``args`` to the Connect server's ``reprocess.connect.StorePlugin``: its rows. A
    :class:`ConfigError` that says how to load the plugin when the server has none."""
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
        return DataFrame(_Request(), session).collect()
    except PySparkException as exc:
        if "NO_HANDLER_FOR_EXTENSION" in str(exc):
            raise ConfigError(
                f"the Spark Connect server cannot make the Hadoop calls of a warehouse at a URI: it has no "
                f"{PLUGIN_CLASS}. Start it with `reprocess connect-server` (which loads it from the jar `make "
                f"venv` builds), or set {PLUGIN_CONF}={PLUGIN_CLASS} with that jar on its driver's class path",
                key="--remote") from None
        raise


class ConnectFs:
    """Through the Spark Connect server's driver JVM (``reprocess.connect.StorePlugin``): one request per call."""

    STAMPS = "stamps"  # the request of stamps (a plugin built before it refuses it: a status per file instead)

    def __init__(self, session: ConnectSession) -> None:
        self._session = session

    def _call(self, op: str, **args: Any) -> list[Any]:
        return plugin_request(self._session, op, **args)

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

    def sizes(self, locations: Sequence[str]) -> list[int]:
        if not locations:
            return []
        rows = self._call("sizes", paths=list(locations))  # a row per file in order, n = -1 for an absent one
        for location, row in zip(locations, rows, strict=True):
            if row.n < 0:
                raise FileNotFoundError(location)
        return [int(r.n) for r in rows]

    def stamps(self, locations: Sequence[str]) -> dict[str, Stamp | None]:
        from pyspark.errors import PySparkException

        groups = list(by_folder(locations).items())
        if not groups:
            return {}
        try:  # a row per file of each folder: b holds its folder's index, name, modification time and ETag
            rows = self._call(self.STAMPS, paths=[folder for folder, _names in groups])
        except PySparkException as exc:
            if f"unknown request {self.STAMPS}\n" not in f"{exc}\n":
                raise
            # a server started with a plugin from before the request: the lengths alone, in one request
            log.warning("the Spark Connect server's %s cannot stamp landing files (a build from before the request): "
                        "their lengths alone tell a changed file; restart the server from this version's venv",
                        PLUGIN_CLASS)
            rows = self._call("sizes", paths=list(locations))  # a row per file in order, n = -1 for an absent one
            return {location: None if row.n < 0 else (int(row.n), None, None)
                    for location, row in zip(locations, rows, strict=True)}
        found: dict[tuple[int, str], Stamp] = {}
        for row in rows:
            meta = json.loads(bytes(row.b))
            found[(meta["i"], meta["name"])] = (int(row.n), int(meta["mtime"]), meta["etag"])
        return {location: found.get((i, name)) for i, (_folder, names) in enumerate(groups)
                for name, location in names}

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
        rows = self._call("children", path=location)
        return sorted((str(r.s).rstrip("/").rsplit("/", 1)[-1], str(r.k), str(r.s), int(r.n)) for r in rows)

    def decode_problem(self, location: str, fmt: str) -> tuple[str | None, int | None]:
        rows = self._call("decodes", path=location, fmt=fmt)
        if rows and rows[0].k == "problem":
            return str(rows[0].s), None
        return None, int(rows[0].n) if rows else None

    def decoded_chunks(self, location: str, size: int) -> None:
        return None

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
