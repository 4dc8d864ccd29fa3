"""try43: an admin who is a member of no budget was told at login "you may submit to: nlp/olmo,
vision" and could submit there, while the README's endpoint table said `POST workloads/` is for
"members of the (leaf) budget". Superusers may submit to any leaf (DESIGN.md, "Submission limit":
exempt from the limit too); the README now says so, and this holds it."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.mark.django_db
def test_a_superuser_submits_to_a_budget_without_a_membership(org_tree: Any, cluster: Any, api_client_for: Any) -> None:
    from accounts.models import Membership, User

    boss = User.objects.create_user("boss", is_staff=True, is_superuser=True)
    assert not Membership.objects.filter(user=boss).exists()
    body = {"budget": "vision/sam", "gpu_count": 1, "gpu_model": "A100", "min_runtime": "1h", "command": ["true"]}
    answer = api_client_for(boss).post("/api/v1/workloads/", body, format="json")
    assert answer.status_code == 201, answer.content
    plain = User.objects.create_user("plain")
    answer = api_client_for(plain).post("/api/v1/workloads/", body, format="json")
    assert answer.status_code in (400, 403), answer.content
