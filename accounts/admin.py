"""Admin of users and memberships."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin

from accounts.models import Membership, OidcIdentity, User


class MembershipInline(admin.TabularInline):
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
class UserAdmin(DjangoUserAdmin):
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


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "budget", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["user__username", "budget__name"]
    autocomplete_fields = ["user", "budget"]
    list_select_related = ["user", "budget"]
