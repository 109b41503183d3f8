"""reprocess: gives failed messages a second life.

The orchestrator-free core: policies and schedules, the Spark cycle, targets, validation.
It never imports Airflow (tests/test_imports.py proves it); DAGs, plugins and the CLI call it.
"""

from reprocess.errors import (
    CommitConflictError,
    ConfigError,
    ConservationError,
    ContractError,
    NotFoundError,
    ReprocessError,
    TargetUnavailableError,
)
from reprocess.policy import Action, Decision, Policy, PolicySet, Profile, decide, load_policies, schedule

__version__ = "0.1.0"

__all__ = [
    "Action",
    "CommitConflictError",
    "ConfigError",
    "ConservationError",
    "ContractError",
    "Decision",
    "NotFoundError",
    "Policy",
    "PolicySet",
    "Profile",
    "ReprocessError",
    "TargetUnavailableError",
    "__version__",
    "decide",
    "load_policies",
    "schedule",
]
