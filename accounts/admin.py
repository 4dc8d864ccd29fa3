"""Admin of users and memberships."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.forms import UserChangeForm
from django.http import HttpRequest

from accounts.models import (
    POSIX_GROUPS_HELP,
    Membership,
    OidcIdentity,
    User,
    parse_posix_groups,
    system_gids,
    system_uid,
)
from accounts.services import password_changed_words
from budgets.admin_search import BudgetPathSearchMixin
from config.admin_ids import AdminIdsMixin
from scheduler.models import Cluster


class UserPosixForm(UserChangeForm):
    """The admin's user form, with the extra group ids typed as an admin writes them (``2000,
    2001``; a JSON list too) and shown that way: Django's JSON field refused ``2000, 2001`` with
    "Enter a valid JSON." and ``wheel`` likewise, instead of saying what a group list is."""

    posix_groups = forms.CharField(required=False, label="Posix groups", help_text=POSIX_GROUPS_HELP)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.initial["posix_groups"] = ", ".join(str(g) for g in self.instance.posix_groups or [])

    def clean_posix_groups(self) -> list[int]:
        return parse_posix_groups(self.cleaned_data.get("posix_groups") or "")

    def clean(self) -> dict[str, Any]:
        """A system group (gid 0, or below ``FAIRWAY_POSIX_MIN_GID``: ``disk``, ``docker``,
        ``shadow``) as the gid or an extra group is root-equivalent on a host: every agent refuses
        the start unless the cluster's ``allow_root_workloads`` and the host's
        ``isolation.allow_root`` both allow it (sec41, as a system uid), so it is refused here
        while no cluster does. Each agent still checks its own consent and ``GID_MIN``."""
        cleaned = super().clean()
        root_allowed = Cluster.objects.filter(allow_root_workloads=True).exists
        if cleaned.get("posix_uid") == 0 and not root_allowed():
            # try43: uid 0 was saved without a word while gid 0 was refused; every agent refuses its starts.
            self.add_error(
                "posix_uid",
                "uid 0 is root on GPU hosts; agents refuse it unless the cluster's allow_root_workloads and the"
                " host's isolation.allow_root are both on, and no cluster allows root workloads. Set the"
                " person's own uid (getent passwd NAME), or leave it empty to map the name on each host.",
            )
        uid = cleaned.get("posix_uid")
        if uid and system_uid(uid) and not root_allowed():
            # left45: a system account (www-data, postgres) was saved; every agent refuses its starts.
            low = settings.FAIRWAY_POSIX_MIN_UID
            self.add_error(
                "posix_uid",
                f"uid {uid} is a system account (below {low}, FAIRWAY_POSIX_MIN_UID: the hosts' first normal"
                " uid, isolation.nss_min_uid); agents refuse it unless the cluster's allow_root_workloads and"
                " the host's isolation.allow_root are both on, and no cluster allows root workloads. Set the"
                " person's own uid (getent passwd NAME), or leave it empty to map the name on each host.",
            )
        gid = cleaned.get("posix_gid")
        for field, gids in (("posix_gid", [] if gid is None else [gid]), ("posix_groups", cleaned.get("posix_groups"))):
            system = system_gids(gids or [])
            if system and not root_allowed():
                self.add_error(
                    field,
                    f"{', '.join(map(str, system))}: a system group (gid 0, or below {settings.FAIRWAY_POSIX_MIN_GID})"
                    " is root-equivalent on GPU hosts; agents refuse it unless the cluster's allow_root_workloads"
                    " and the host's isolation.allow_root are both on, and no cluster allows root workloads."
                    " Use a group from the host's normal range (getent group).",
                )
        return cleaned


class MembershipInline(AdminIdsMixin, admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["budget"]
    fields = ["budget", "role", "created_at"]
    readonly_fields = ["created_at"]


class OidcIdentityInline(admin.TabularInline):
    """The single sign-on identities linked to the account (accounts/oidc.py); delete one to unlink."""

    model = OidcIdentity
    extra = 0
    fields = ["issuer", "subject", "created_at", "last_login_at"]
    readonly_fields = fields


@admin.register(User)
class UserAdmin(AdminIdsMixin, DjangoUserAdmin):
    form = UserPosixForm
    inlines = [MembershipInline, OidcIdentityInline]
    list_display = ["username", "email", "first_name", "last_name", "posix_uid", "is_staff", "is_active", "last_login"]
    fieldsets = (
        *DjangoUserAdmin.fieldsets,
        (
            "POSIX identity on GPU hosts",
            {
                "fields": ["posix_uid", "posix_gid", "posix_groups"],
                "description": "Attempts run under this uid/gid/groups on every host. Empty: the host maps "
                "the user name through NSS/LDAP (getent passwd), else uses a dedicated fw-&lt;name&gt; account.",
            },
        ),
    )

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        """Log, and after a password change (the user's "Reset password" page, which logs the saved
        user) say what it ended (``accounts.services.password_changed_words``)."""
        entry = super().log_change(request, obj, message)
        if getattr(obj, "login_tokens_ended", None) is not None:
            messages.info(request, password_changed_words(obj.login_tokens_ended))
        return entry


@admin.register(Membership)
class MembershipAdmin(AdminIdsMixin, BudgetPathSearchMixin, admin.ModelAdmin):
    list_display = ["user", "budget", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["user__username", "budget__name"]
    autocomplete_fields = ["user", "budget"]
    list_select_related = ["user", "budget"]
