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
     +-- DiskFullError             code="no_space"       exit 14  a disk the run writes to is full
     +-- LandingChangedError       code="landing_changed" exit 15 a landing file changed while the run read it

Every class carries a stable ``code`` (for logs, summaries and tests) and the CLI exit code
it maps to. Messages carry the evidence: the file, the policy, the key, the record.
"""

from __future__ import annotations


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


class OutOfOrderError(ReprocessError):
    """A run's as-of is before the warehouse's last committed as-of (cycle.run): a retry of the run has the same
    as-of, and the committed one never moves back."""

    code = "out_of_order"
    exit_code = 8


class ValidationFailedError(ReprocessError):
    """A GX suite on what a run would commit (ledger, DLQ, the run's balance) failed: a bug, nothing commits."""

    code = "validation"
    exit_code = 9
    data_docs: str | None = None  # where the failed run's Data Docs are


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
    Spark's code 52). Nothing is lost, as after any crash; the message says which heap and how to raise it
    (:func:`reprocess.spark_env.out_of_memory_advice`)."""

    code = "out_of_memory"
    exit_code = 13


class DiskFullError(ReprocessError):
    """A disk the run writes to filled up (``No space left on device``: the warehouse's, or Spark's local directory
    where it spills and shuffles). Nothing is lost, as after any crash; the message says where, if the error did."""

    code = "no_space"
    exit_code = 14


class LandingChangedError(ReprocessError):
    """A landing file read in splits changed, or went, between the read's first pass (which numbers its lines) and
    the end of the read: the contract forbids it (a landed file never changes). Nothing is committed; the next run,
    or the DAG task's retry, lists the landing again and reads the files as they are then."""

    code = "landing_changed"
    exit_code = 15


# The errors no retry of a job can change, each with what it says of the job: a DAG task fails at once on them,
# through spark-submit (reprocess.submit.FINAL_EXITS, by exit code) as on Spark Connect
# (reprocess.orchestration.run_on_connect). A failed conservation or GX check after a re-drive leaves its run
# prepared with its outcomes recorded: a retry resumes it and fails the same way, sending nothing again.
FINAL_ERRORS: dict[type[ReprocessError], str] = {
    ConfigError: "refused its configuration",
    ContractError: "found a broken landing contract",
    ConservationError: "found books that do not balance (a bug; nothing committed)",
    OutOfOrderError: "was asked for an as-of before the warehouse's last committed one",
    ValidationFailedError: "failed a GX suite on what it would commit (nothing committed)",
    WarehouseDamagedError: "found a damaged warehouse file",
}
