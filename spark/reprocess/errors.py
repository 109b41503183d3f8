"""The one exception tree of reprocess.

    ReprocessError                 code="error"          exit 2   any other error reprocess raises on purpose
     +-- ConfigError               code="config"         exit 3   bad policy file, bad CLI value
     +-- ContractError             code="contract"       exit 4   landing data breaks the contract
     +-- ConservationError         code="conservation"   exit 5   a run would lose or double a message
     +-- TargetUnavailableError    code="target_down"    exit 6   the re-drive target itself is failing
     +-- CommitConflictError       code="conflict"       exit 7   another run holds the warehouse
     +-- OutOfOrderError           code="out_of_order"   exit 8   as-of before the last committed one (cycle.run)
     +-- ValidationFailedError     code="validation"     exit 9   a GX suite on the run's outputs failed
     +-- NotFoundError             code="not_found"      exit 10  an operator command asked for a record not there
     +-- StorageUnavailableError   code="storage"        exit 11  the warehouse's object store cannot be reached
     +-- WarehouseDamagedError     code="damaged"        exit 12  a file the snapshot lists is gone or unreadable
     +-- SparkOutOfMemoryError     code="out_of_memory"  exit 13  the driver (or an executor) ran out of heap

Every class carries a stable ``code`` (for logs, summaries and tests) and the CLI exit code
it maps to. Messages carry the evidence: the file, the policy, the key, the record.
"""

from __future__ import annotations

import re


class ReprocessError(Exception):
    """Base of every error reprocess raises on purpose."""

    code = "error"
    exit_code = 2


class ConfigError(ReprocessError):
    """A policy file or an option is invalid; raised before any work starts."""

    code = "config"
    exit_code = 3

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        policy: str | None = None,
        key: str | None = None,
    ) -> None:
        self.message = message  # without the [file= policy= key=] prefix
        self.file = file
        self.policy = policy
        self.key = key
        where = []
        if file is not None:
            where.append(f"file={file}")
        if policy is not None:
            where.append(f"policy={policy!r}")
        if key is not None:
            where.append(f"key={key!r}")
        prefix = f"[{' '.join(where)}] " if where else ""
        super().__init__(prefix + message)


class ContractError(ReprocessError):
    """Landing data that cannot be processed at all (not a single bad record: those are quarantined)."""

    code = "contract"
    exit_code = 4


class ConservationError(ReprocessError):
    """The books do not balance: committing would lose or double a message."""

    code = "conservation"
    exit_code = 5


class TargetUnavailableError(ReprocessError):
    """The re-drive target is failing as a whole (connection refused, timeouts, broker errors)."""

    code = "target_down"
    exit_code = 6


class CommitConflictError(ReprocessError):
    """Another run holds the warehouse lock or committed first."""

    code = "conflict"
    exit_code = 7


class ValidationFailedError(ReprocessError):
    """A GX suite on what a run would commit (ledger, DLQ, the run's balance) failed: a bug, nothing commits."""

    code = "validation"
    exit_code = 9


class NotFoundError(ReprocessError):
    """An operator command (``reprocess dlq show``) asked for a record the committed snapshot does not hold."""

    code = "not_found"
    exit_code = 10


class StorageUnavailableError(ReprocessError):
    """A warehouse on object storage could not be read (endpoint down, credentials refused, throttled): a retry may
    succeed, so the DAG tasks let Airflow retry it."""

    code = "storage"
    exit_code = 11


class WarehouseDamagedError(ReprocessError):
    """A file the committed snapshot lists is missing or is not valid Parquet: something outside reprocess deleted or
    overwrote it. Retrying does not help; the message names the warehouse, the snapshot and the file."""

    code = "damaged"
    exit_code = 12

    @classmethod
    def missing(cls, warehouse: str, version: int, path: str) -> WarehouseDamagedError:
        """``path``, listed by snapshot ``version`` of ``warehouse``, is not there."""
        return cls(f"warehouse {warehouse}: snapshot {version} lists {path}, which is not there "
                   "(deleted outside reprocess?)")

    @classmethod
    def unreadable(cls, warehouse: str, version: int, path: str, why: str = "") -> WarehouseDamagedError:
        """``path``, listed by snapshot ``version`` of ``warehouse``, does not decode as Parquet (``why``, if known)."""
        return cls(f"warehouse {warehouse}: snapshot {version} lists {path}, which is not a readable Parquet file"
                   + (f": {why}" if why else ""))


class SparkOutOfMemoryError(ReprocessError):
    """A Spark JVM ran out of heap (``java.lang.OutOfMemoryError``; in local mode the driver JVM then exits with
    Spark's code 52). Nothing is lost, as after any crash; the message says which heap and how to raise it."""

    code = "out_of_memory"
    exit_code = 13

    @classmethod
    def advice(cls, evidence: str, heap: str | None, master: str | None) -> SparkOutOfMemoryError:
        """The error for ``evidence`` (what showed it), with the driver's ``heap`` and the ``master`` if known."""
        return cls(out_of_memory_advice(evidence, heap, master))


def out_of_memory_advice(evidence: str, heap: str | None, master: str | None) -> str:
    """What to tell the operator of a run that ran out of heap: the evidence, the heap it had, what to raise.

    ``heap`` is the driver's ``spark.driver.memory`` (``None``: not known here, as for a Spark Connect client);
    ``master`` the Spark master (``local...`` runs the tasks in the driver's heap, anything else in executors).
    """
    local = master is None or master.startswith("local")
    if heap is None:
        had = "The driver runs in the Spark Connect server, whose heap is set where it starts."
        more = "Restart the server with more (reprocess connect-server --driver-memory) and run again"
    else:
        had = f"The driver had {heap} of heap" + (", and in local mode the tasks run in it." if local else ".")
        twice = _doubled(heap)
        more = (f"Set REPROCESS_DRIVER_MEMORY={twice} (twice this run's) and run again" if twice
                else f"Set REPROCESS_DRIVER_MEMORY above {heap} (say, twice it) and run again")
    if not local:
        more += f", or give the executors of {master} more (spark.executor.memory)"
    return (f"Spark ran out of memory ({evidence}). {had} Nothing is lost: a run stopped before its commit is "
            f"resumed or redone by the next run. {more}; the README's \"Sizing and speed\" gives the heap per batch "
            "size.")


def _doubled(size: str) -> str | None:
    """``2g`` -> ``4g``, ``1536m`` -> ``3072m``: twice the JVM size ``size``; None when ``size`` is not a number with
    a unit (Spark also takes ``2gb``, or ``2048`` as MiB, which ``REPROCESS_DRIVER_MEMORY`` does not)."""
    found = re.fullmatch(r"(\d+)([kKmMgGtT])", size.strip())
    return f"{int(found.group(1)) * 2}{found.group(2)}" if found else None
