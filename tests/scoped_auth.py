"""The auth manager of the Airflow tests: Airflow's own SimpleAuthManager, except that the user ``outsider`` may read
no DAG, as a deployment's auth manager scopes its users to their teams' DAGs (SimpleAuthManager's roles let every
user read every DAG, so nothing else here can show a page refusing one)."""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

OUTSIDER = "outsider"


class ScopedAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        if user.get_name() == OUTSIDER:
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
