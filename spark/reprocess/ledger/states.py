"""The ledger's states and dead-letter reason codes, as plain strings (no pyspark import).

Shared by the Spark code (:mod:`reprocess.ledger.model` re-exports them) and the Spark-free
operator tooling (:mod:`reprocess.ops`, :mod:`reprocess.report`).
"""

from __future__ import annotations

WAITING = "WAITING_RETRY"
DELIVERED = "DELIVERED"
DEAD_LETTERED = "DEAD_LETTERED"
STATES = (WAITING, DELIVERED, DEAD_LETTERED)

MAX_DELIVERIES_EXCEEDED = "MAX_DELIVERIES_EXCEEDED"
NON_RETRYABLE = "NON_RETRYABLE"
NO_DEAD_LETTER_ADDRESS = "NO_DEAD_LETTER_ADDRESS"
# a waiting message failed again after the policy file stopped matching its address (no schedule to follow): it
# goes to the default dead-letter address, where an operator re-drives it once a policy matches again
NO_POLICY = "NO_POLICY"
REASON_CODES = (MAX_DELIVERIES_EXCEEDED, NON_RETRYABLE, NO_DEAD_LETTER_ADDRESS, NO_POLICY)
