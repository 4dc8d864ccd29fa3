"""The rule that maps an identity provider's groups to Fairway rights (``FAIRWAY_OIDC_GROUP_RULES``).

Pure (no models): ``config/settings.py`` parses the rule at start, so a malformed rule stops the
process with the variable's name instead of failing at someone's login. The rule is a JSON object,
group name → list of grants::

    {"ml-nlp": ["member:nlp"], "ml-nlp-leads": ["manager:nlp"], "hpc-ops": ["staff"],
     "hpc-root": ["superuser"]}

A grant is ``staff``, ``superuser`` (implies staff) or ``member:<budget path>`` /
``manager:<budget path>`` (a path as ``Budget.path`` or ``resolve_budget`` reads it, e.g.
``nlp/olmo``). What the IdP decides is only what the rule mentions (docs/deploy.md, "Single
sign-on"): see ``accounts.oidc.sync_rights``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

ROLES = ("member", "manager")  # accounts.models.Membership.Role, weakest first
FLAGS = ("staff", "superuser")


@dataclass(frozen=True)
class GroupRules:
    """Parsed rule: the grants of each group, and what the rule manages at all."""

    grants: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def budgets(self) -> set[str]:
        """Budget paths some group grants a role on: their memberships follow the IdP."""
        return {g.split(":", 1)[1] for grants in self.grants.values() for g in grants if ":" in g}

    @property
    def manages_staff(self) -> bool:
        return any(g in FLAGS for grants in self.grants.values() for g in grants)

    @property
    def manages_superuser(self) -> bool:
        return any(g == "superuser" for grants in self.grants.values() for g in grants)

    def rights(self, groups: list[str]) -> tuple[dict[str, str], bool, bool]:
        """(budget path → strongest role, staff, superuser) granted to a member of ``groups``."""
        roles: dict[str, str] = {}
        staff = superuser = False
        for group in groups:
            for grant in self.grants.get(group, ()):
                if grant == "superuser":
                    superuser = staff = True
                elif grant == "staff":
                    staff = True
                else:
                    role, path = grant.split(":", 1)
                    if ROLES.index(role) >= ROLES.index(roles.get(path, "member")):
                        roles[path] = role
        return roles, staff, superuser


def parse_group_rules(raw: str, name: str = "FAIRWAY_OIDC_GROUP_RULES") -> GroupRules:
    """Parse and validate the rule; raises ValueError naming ``name`` and the offending part."""
    if not raw.strip():
        return GroupRules()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{name} must be a JSON object: group name -> list of grants")
    grants: dict[str, tuple[str, ...]] = {}
    for group, items in data.items():
        if not group or not isinstance(items, list) or not all(isinstance(g, str) for g in items):
            raise ValueError(f"{name}: group {group!r} must map to a list of strings")
        for grant in items:
            role, _, path = grant.partition(":")
            if grant in FLAGS or (role in ROLES and path.strip("/")):
                continue
            raise ValueError(
                f"{name}: grant {grant!r} of group {group!r} is not staff, superuser, "
                "member:<budget path> or manager:<budget path>"
            )
        grants[group] = tuple(
            g if g in FLAGS else f"{g.split(':', 1)[0]}:{g.split(':', 1)[1].strip('/')}" for g in items
        )
    return GroupRules(grants)
