"""Retry policies: the config file, address matching, the reference schedules and their Spark twins."""

from reprocess.policy.config import NonRetryableRule, Policy, PolicySet, load_policies, parse_policies
from reprocess.policy.reference import Action, Decision, Step, decide, max_deliveries, schedule
from reprocess.policy.settings import Jitter, Profile

__all__ = [
    "Action",
    "Decision",
    "Jitter",
    "NonRetryableRule",
    "Policy",
    "PolicySet",
    "Profile",
    "Step",
    "decide",
    "load_policies",
    "max_deliveries",
    "parse_policies",
    "schedule",
]
