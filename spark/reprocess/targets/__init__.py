"""Re-drive targets: one interface, one module per target.

A target takes the due messages of a run (a DataFrame with ``message_id, address, payload, headers,
delivery, ...``) and returns one outcome per message: ``message_id, delivery, ok, error_class,
error_message``. ``parse_target`` turns a ``--target`` spec into a target.
"""

from reprocess.targets.base import OUTCOME_SCHEMA, Target, TargetUnavailable, parse_target

__all__ = ["OUTCOME_SCHEMA", "Target", "TargetUnavailable", "parse_target"]
