"""The operators' console: clusters, hosts (cordon/drain/resume), GPUs, workloads, attempts, events."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Count, OuterRef, Q, QuerySet, Subquery
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.text import capfirst

from budgets.admin_search import BudgetPathSearchMixin
from budgets.models import UsageEntry
from config.admin_ids import AdminIdsMixin
from config.errors import ServiceError
from fairway_cli.numbers import duration_text, gpu_time_text, instant_text
from fairway_cli.words import efficiency_lines
from scheduler.accounting import attempt_charged_gpu_seconds, silent_until
from scheduler.efficiency import efficiency_of_attempts
from scheduler.gpu_report import unreported
from scheduler.lifecycle import do_approve_host_inventory
from scheduler.models import (
    GPU,
    ArrayGroup,
    Attempt,
    AttemptGPU,
    Cluster,
    ClusterHourlyMetrics,
    Host,
    HostEvent,
    JoinToken,
    Mount,
    Notification,
    NotificationSettings,
    Workload,
    WorkloadEvent,
)
from scheduler.services import (
    SCHEDULED_DRAIN_FORM,
    HostError,
    check_labels,
    do_cancel_scheduled_drain,
    do_cancel_workload,
    do_create_join_token,
    do_hold_workload,
    do_release_workload,
    do_remove_host,
    do_revoke_host_token,
    do_rotate_host_token,
    do_schedule_drain,
    do_set_host_state,
    drain_time,
    hold_changes,
    no_drain_scheduled_text,
    removal_problem,
    scheduled_drain,
    scheduled_drain_note,
)


class ReadOnlyMixin:
    """Rows written only by services: viewable, never edited, added or deleted here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _each(
    request: HttpRequest, rows: Iterable[Any], act: Callable[[Any], object], label: Callable[[Any], str], done_msg: str
) -> None:
    """Apply a service to each selected row: a refusal is shown per row, the count of the others
    once (``done_msg`` with ``{n}``)."""
    done = 0
    for row in rows:
        try:
            act(row)
            done += 1
        except ServiceError as exc:
            messages.error(request, f"{label(row)}: {exc.message}")
    if done:
        messages.success(request, done_msg.format(n=done))


@admin.register(Cluster)
class ClusterAdmin(AdminIdsMixin, admin.ModelAdmin):
    list_display = ["name", "host_count", "gpu_count", "allow_root_workloads", "description"]
    search_fields = ["name"]
    actions = ["create_join_token"]
    # Written by the estimates run only: an operator adding a cluster was offered it to fill in (tryout48).
    readonly_fields = ["estimated_at"]

    def has_join_permission(self, request: HttpRequest) -> bool:
        """A join token lets a machine join the cluster (and run its users' work): it needs the
        permission to add join tokens, not merely to see the clusters (brk40)."""
        return bool(request.user.has_perm("scheduler.add_jointoken"))

    @admin.action(description="Create a join token (single use, valid 1 h) for a new host", permissions=["join"])
    def create_join_token(self, request: HttpRequest, queryset: QuerySet[Cluster]) -> None:
        from scheduler.agent_install import public_url

        for cluster in queryset:
            row, token = do_create_join_token(request.user, cluster, note=f"admin action by {request.user}")
            until = instant_text(row.expires_at, absolute=True)
            messages.warning(
                request,
                f"{cluster.name}: join token {token} (shown once; valid until {until}). "
                f"On the new host, as root: curl -fsSL {public_url(request)}/agent/install.sh | "
                f"FAIRWAY_JOIN_TOKEN={token} bash -s --",
            )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Cluster]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                n_hosts=Count("hosts", filter=Q(hosts__removed_at__isnull=True), distinct=True),
                n_gpus=Count(
                    "hosts__gpus",
                    filter=Q(hosts__removed_at__isnull=True, hosts__gpus__removed_at__isnull=True),
                    distinct=True,
                ),
            )
        )

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, Any, Any, Any]:
        """Django's, with a cluster's usage history (its usage entries and hourly metrics, PROTECT:
        sec63) said in one line per cluster instead of a line per row: such a cluster is kept."""
        deleted, counts, perms, protected = super().get_deleted_objects(objs, request)
        history = [line for cluster in objs if (line := usage_history_line(cluster))]
        if history:
            rows = {capfirst(m._meta.verbose_name) for m in (UsageEntry, ClusterHourlyMetrics)}
            protected = [*history, *(p for p in protected if str(p).split(":", 1)[0] not in rows)]
        return deleted, counts, perms, protected

    @admin.display(description="hosts", ordering="n_hosts")
    def host_count(self, obj: Cluster) -> int:
        return obj.n_hosts

    @admin.display(description="scheduled drain", ordering="drain_at")
    def scheduled_drain_shown(self, obj: Host) -> str:
        """The one wording of a scheduled drain (``services.scheduled_drain``), "-" when none."""
        shown = scheduled_drain(obj)
        return shown["summary"] if shown else "-"

    @admin.display(description="last heartbeat", ordering="last_heartbeat")
    def heartbeat_shown(self, obj: Host) -> str:
        """As the clusters page, ``fairway hosts`` and every sentence write an instant
        (``14:05:09 UTC``): the list read "Dec. 6, 2026, 9:19 a.m." beside them (try37)."""
        return instant_text(obj.last_heartbeat) or "never"

    @admin.display(description="GPUs", ordering="n_gpus")
    def gpu_count(self, obj: Cluster) -> int:
        return obj.n_gpus


def usage_history_line(cluster: Cluster) -> str:
    """Why ``cluster`` cannot be deleted for its usage history, or "" when it holds none."""
    entries = UsageEntry.objects.filter(cluster=cluster).count()
    hours = ClusterHourlyMetrics.objects.filter(cluster=cluster).count()
    if not entries and not hours:
        return ""
    counted = ((entries, "usage entry", "usage entries"), (hours, "hour of metrics", "hours of metrics"))
    what = " and ".join(f"{n} {word if n == 1 else plural}" for n, word, plural in counted if n)
    return (
        f"{cluster.name}: {what}, its usage history (budgets' statements, the standing and the metrics "
        "read it), is kept: a retired cluster stays, with its hosts removed"
    )


def _gpu_report(gpu: GPU) -> str:
    """ "reported", or "missing from the agent's last report since …" (``scheduler.gpu_report``):
    the words of the API, the clusters page and ``fairway hosts``."""
    gap = unreported(gpu)
    return gap.text if gap else "reported"


class GPUInline(admin.TabularInline):
    model = GPU
    extra = 0
    fields = ["index", "uuid", "model", "memory_mb", "health", "report", "nominated_for", "removed_at"]
    readonly_fields = fields
    can_delete = False

    @admin.display(description="in the agent's report")
    def report(self, obj: GPU) -> str:
        return _gpu_report(obj)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class HostEventInline(ReadOnlyMixin, admin.TabularInline):
    model = HostEvent
    extra = 0
    fields = ["when", "kind", "actor", "message", "data"]
    readonly_fields = fields
    ordering = ["-id"]  # newest recorded first (HostEvent's order, reversed), whatever "at" says

    @admin.display(description="at")
    def when(self, obj: HostEvent) -> str:
        """As the row's own name and every surface write an instant (``instant_text``): Django's
        minutes read "01:08 UTC" under "joined of host 2 at … 01:09:00 UTC" (try58)."""
        return instant_text(obj.at)


class HostForm(forms.ModelForm):
    """The host's change page: its labels follow the rule of a join (:func:`check_labels`), so an
    edit cannot store what a join refuses (a control or invisible character, an empty key)."""

    class Meta:
        model = Host
        fields = ["labels"]

    def clean_labels(self) -> dict[str, str]:
        try:
            return check_labels(self.cleaned_data.get("labels"))
        except HostError as exc:
            raise ValidationError(exc.message, code=exc.code) from None


ADMIN_ACTION = "admin action"
"""A host action's reason when the admin gave none: its actor is recorded beside it already (lead47:
"drain scheduled … by admin: admin action by admin"), as a budget action's note."""


@admin.register(Host)
class HostAdmin(AdminIdsMixin, admin.ModelAdmin):
    form = HostForm
    list_display = [
        "name",
        "cluster",
        "state_shown",
        "drain_now",
        "scheduled_drain_shown",
        "gpu_count",
        "gpu_model",
        "heartbeat_shown",
        "agent_version",
    ]
    list_filter = ["cluster", "state", "drain_now", ("removed_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "labels"]
    list_select_related = ["cluster", "drain_at_by"]
    readonly_fields = [
        "cluster",
        "name",
        "state",
        "state_before_offline",
        "drain_now",
        "scheduled_drain_shown",
        "agent_version",
        "heartbeat_shown",
        "removed_shown",
        "pending_inventory",
        "isolation",
        "created_shown",
    ]
    fields = [*readonly_fields, "labels"]
    inlines = [GPUInline, HostEventInline]
    actions = [
        "cordon",
        "drain",
        "drain_now_action",
        "resume",
        "schedule_drain",
        "cancel_scheduled_drain",
        "approve_inventory",
        "rotate_token",
        "revoke_token",
        "remove_hosts",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # hosts register with a token (seed_demo --hosts, agent install), shown once

    def save_model(self, request: HttpRequest, obj: Host, form: Any, change: bool) -> None:
        """Write only the fields the page changed (its labels): the row was read before any lock,
        and writing every column back undid what committed meanwhile: a token revoked or rotated
        (the old token connected again), a state, a heartbeat, a link generation (brk34)."""
        obj.save(update_fields=[f for f in form.changed_data if f not in self.readonly_fields])

    def has_delete_permission(self, request: HttpRequest, obj: Host | None = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Host]:
        first_model = GPU.objects.registered().filter(host=OuterRef("pk")).order_by("index").values("model")[:1]
        n_gpus = Count("gpus", filter=Q(gpus__removed_at__isnull=True))
        return super().get_queryset(request).annotate(n_gpus=n_gpus, model=Subquery(first_model))

    @admin.display(description="state", ordering="state")
    def state_shown(self, obj: Host) -> str:
        """The host's state, or that it left its cluster: a removed host read "Drained" with its
        GPUs beside hosts that count, where the clusters list, the clusters page and ``fairway
        hosts`` leave it out (try37)."""
        if obj.removed_at is not None:
            return f"removed {instant_text(obj.removed_at)}: not in the cluster (its GPUs count nowhere)"
        return str(obj.get_state_display())

    @admin.display(description="scheduled drain", ordering="drain_at")
    def scheduled_drain_shown(self, obj: Host) -> str:
        """The one wording of a scheduled drain (``services.scheduled_drain``), "-" when none."""
        shown = scheduled_drain(obj)
        return shown["summary"] if shown else "-"

    @admin.display(description="last heartbeat", ordering="last_heartbeat")
    def heartbeat_shown(self, obj: Host) -> str:
        """As the clusters page, ``fairway hosts`` and every sentence write an instant
        (``14:05:09 UTC``): the list read "Dec. 6, 2026, 9:19 a.m." beside them (try37)."""
        return instant_text(obj.last_heartbeat) or "never"

    @admin.display(description="removed at")
    def removed_shown(self, obj: Host) -> str:
        """When it left the cluster for good, written as every instant (try58), "-" when it has not."""
        return instant_text(obj.removed_at) or "-"

    @admin.display(description="created at")
    def created_shown(self, obj: Host) -> str:
        return instant_text(obj.created_at)

    @admin.display(description="GPUs", ordering="n_gpus")
    def gpu_count(self, obj: Host) -> int:
        return obj.n_gpus

    @admin.display(description="model", ordering="model")
    def gpu_model(self, obj: Host) -> str:
        return obj.model or "-"

    def _set_state(
        self, request: HttpRequest, queryset: QuerySet[Host], state: str, *, drain_now: bool = False
    ) -> None:
        reason = ADMIN_ACTION

        def act(host: Host) -> None:
            after = do_set_host_state(request.user, host, state, reason, drain_now=drain_now)
            if change := scheduled_drain_note(host, after):  # left59: a resume cancelled it unsaid
                messages.info(request, f"{host.name}: {change}.")

        _each(request, queryset, act, lambda host: host.name, "{n} host(s) updated.")

    @admin.action(description="Cordon: no new work, running work stays", permissions=["change"])
    def cordon(self, request: HttpRequest, queryset: QuerySet[Host]) -> None:
        self._set_state(request, queryset, Host.State.CORDONED)

    @admin.action(description="Drain: no new work, attempts leave as their protection ends", permissions=["change"])
    def drain(self, request: HttpRequest, queryset: QuerySet[Host]) -> None:
        self._set_state(request, queryset, Host.State.DRAINING)

    @admin.action(description="Drain now: stop everything, ignoring protection (audited)", permissions=["change"])
    def drain_now_action(self, request: HttpRequest, queryset: QuerySet[Host]) -> None:
        self._set_state(request, queryset, Host.State.DRAINING, drain_now=True)

    @admin.action(description="Resume: back to active", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Host]) -> None:
        self._set_state(request, queryset, Host.State.ACTIVE)

    @admin.action(description="Schedule a drain (or a drain now) for a later time", permissions=["change"])
    def schedule_drain(self, request: HttpRequest, queryset: QuerySet[Host]) -> TemplateResponse | None:
        """Asks for the time (``services.drain_time``'s form), drain or drain now and a reason, then
        schedules it on each host (``services.do_schedule_drain``; a refusal per host, nothing changed
        there). The tick applies it at that time (docs/deploy.md, "Scheduled drains")."""
        if request.POST.get("confirm") != "yes":
            hosts = list(queryset.select_related("cluster", "drain_at_by").order_by("name"))
            context = {
                **self.admin_site.each_context(request),
                "title": f"Schedule a drain of {len(hosts)} host{'s' if len(hosts) != 1 else ''}",
                "hosts": [(h, scheduled_drain(h)) for h in hosts],
                "form_words": SCHEDULED_DRAIN_FORM,
                "opts": self.model._meta,
            }
            return TemplateResponse(request, "admin/scheduler/host/schedule_drain.html", context)
        at = request.POST.get("at", "")
        drain_now = request.POST.get("drain_now") == "on"
        reason = request.POST.get("reason", "") or ADMIN_ACTION
        try:  # the service's reading of the time, not the text typed (brk58: a 500 past year 9999 in UTC)
            when = instant_text(drain_time(at))
        except HostError:
            when = ""  # refused: each host says so below, and none is scheduled
        _each(
            request,
            queryset,
            lambda host: do_schedule_drain(request.user, host, at, reason, drain_now=drain_now),
            lambda host: host.name,
            "{n} host(s): " + ("drain now" if drain_now else "drain") + f" scheduled at {when}.",
        )
        return None

    @admin.action(description="Cancel the scheduled drain", permissions=["change"])
    def cancel_scheduled_drain(self, request: HttpRequest, queryset: QuerySet[Host]) -> None:
        for host in queryset.filter(drain_at__isnull=True).order_by("name"):  # a no-op, said (left59)
            messages.info(request, no_drain_scheduled_text(host))
        _each(
            request,
            queryset.filter(drain_at__isnull=False),
            lambda host: do_cancel_scheduled_drain(request.user, host, ADMIN_ACTION),
            lambda host: host.name,
            "{n} host(s): scheduled drain canceled.",
        )

    @admin.action(
        description="Approve the GPU inventory the agent reported (resumes a host it cordoned)", permissions=["change"]
    )
    def approve_inventory(self, request: HttpRequest, queryset: QuerySet[Host]) -> None:
        """Each host's outcome in its own words: what was registered, which GPUs left, and the state
        it is in now (try41: "GPU inventory of 1 host(s) approved." said neither)."""
        for host in queryset:
            try:
                approved = do_approve_host_inventory(request.user, host)
            except ServiceError as exc:
                messages.error(request, f"{host.name}: {exc.message}")
                continue
            event = approved.events.filter(kind="inventory_approved").latest("id")
            messages.success(request, f"{approved.name}: {event.message}; the host is {approved.state}.")

    @admin.action(
        description="Rotate the host token (shown once; closes the agent's connections at once)", permissions=["change"]
    )
    def rotate_token(self, request: HttpRequest, queryset: QuerySet[Host]) -> None:
        for host in queryset:
            try:
                token = do_rotate_host_token(request.user, host)
            except ServiceError as exc:
                messages.error(request, f"{host.name}: {exc.message}")
                continue
            messages.warning(
                request,
                f"{host.name}: new host token {token} (shown once). Put it in the agent's config "
                "(token:) and restart the agent; its open connections were closed.",
            )

    @admin.action(
        description="Revoke the host token (closes the agent's connections; refused until rotated)",
        permissions=["change"],
    )
    def revoke_token(self, request: HttpRequest, queryset: QuerySet[Host]) -> None:
        _each(
            request,
            queryset,
            lambda host: do_revoke_host_token(request.user, host),
            lambda host: host.name,
            "Token of {n} host(s) revoked; their agent connections were closed.",
        )

    @admin.action(
        description="Remove from the cluster for good (decommissioned; refused while it holds an attempt)",
        permissions=["change"],
    )
    def remove_hosts(self, request: HttpRequest, queryset: QuerySet[Host]) -> TemplateResponse | None:
        """Asks first (a removal cannot be undone and the name stays taken; ``fairway hosts
        remove`` asks for ``--yes``): a page naming each host and its state, then the removal."""
        if request.POST.get("confirm") != "yes":
            hosts = list(queryset.select_related("cluster").order_by("name"))
            for host in hosts:  # said before the click, in the refusal's words (lead47)
                host.refusal = removal_problem(host)  # type: ignore[attr-defined] -- for the page only
            removable = sum(host.refusal is None for host in hosts)  # type: ignore[attr-defined]
            count = len(hosts)
            hosts_word, their = ("host", "its") if count == 1 else ("hosts", "their")
            title = f"Remove {count} {hosts_word} from {their} cluster for good?"
            context = {
                **self.admin_site.each_context(request),
                "title": title,
                "hosts": hosts,
                "removable": removable,
                "opts": self.model._meta,
            }
            return TemplateResponse(request, "admin/scheduler/host/remove_confirmation.html", context)
        _each(
            request,
            queryset,
            lambda host: do_remove_host(request.user, host, ADMIN_ACTION),
            lambda host: host.name,
            "{n} host(s) removed from their cluster.",
        )


@admin.register(GPU)
class GPUAdmin(AdminIdsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["__str__", "model", "memory_mb", "health", "report", "uuid", "nominated_for", "removed_at"]
    list_filter = ["health", "model", "host__cluster", ("removed_at", admin.EmptyFieldListFilter)]
    search_fields = ["uuid", "host__name"]
    list_select_related = ["host"]
    readonly_fields = ["report"]  # on the change page too, beside its (then empty) last sample

    @admin.display(description="in the agent's report")
    def report(self, obj: GPU) -> str:
        return _gpu_report(obj)


class AttemptInline(ReadOnlyMixin, admin.TabularInline):
    model = Attempt
    extra = 0
    fields = [
        "number",
        "host",
        "allocated",
        "unfunded",
        "placed_at",
        "started_at",
        "protected_until",
        "stop_reason",
        "ended_at",
        "end_reason",
        "exit_code",
        "charged_gpu_seconds",
    ]
    readonly_fields = fields
    ordering = ["number"]


class WorkloadEventInline(ReadOnlyMixin, admin.TabularInline):
    model = WorkloadEvent
    extra = 0
    fields = ["at", "kind", "actor", "message", "data"]
    readonly_fields = fields
    ordering = ["id"]  # recorded order, as the page, the API and ``fairway show`` (EVENT_ORDER)


@admin.register(Workload)
class WorkloadAdmin(AdminIdsMixin, BudgetPathSearchMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "id",
        "name",
        "owner",
        "budget",
        "cluster",
        "gpu_count",
        "gpu_model",
        "min_runtime",
        "state",
        "pending",
        "hold",
        "submitted",
    ]
    list_filter = ["state", "cluster", "pending_reason", "hold", "gpu_model"]
    search_fields = ["name", "owner__username", "budget__name"]
    list_select_related = ["owner", "budget__parent", "cluster"]
    date_hierarchy = "submitted_at"
    inlines = [AttemptInline, WorkloadEventInline]
    actions = ["cancel", "hold_action", "release"]
    exclude = ["env"]  # may hold secrets; the API masks them for members

    @admin.display(description="minimum runtime", ordering="min_runtime_s")
    def min_runtime(self, obj: Workload) -> str:
        """As the pages write it (``1h``; ``0 (unallocated)``): the list read ``3600`` (try40)."""
        return duration_text(obj.min_runtime_s) if obj.min_runtime_s else "0 (unallocated)"

    @admin.display(description="submitted", ordering="submitted_at")
    def submitted(self, obj: Workload) -> str:
        return instant_text(obj.submitted_at)

    @admin.display(description="pending reason", ordering="pending_reason")
    def pending(self, obj: Workload) -> str:
        """In the words of the workloads page and ``fairway ls`` (``web.templatetags.fairway.pending_words``):
        the list read the policy's codes, ``fair_share`` for "other budgets go first" (try63)."""
        if obj.state != Workload.State.PENDING:
            return "-"
        from web.templatetags.fairway import pending_words

        return pending_words(obj)

    @admin.action(description="Cancel (pending: at once; running: stop, charged until released)")
    def cancel(self, request: HttpRequest, queryset: QuerySet[Workload]) -> None:
        _each(
            request,
            queryset,
            lambda workload: do_cancel_workload(request.user, workload),
            lambda workload: f"#{workload.pk}",
            "{n} workload(s) canceled or stopping.",
        )

    @admin.action(description="Hold (pending only; an admin's hold: only an admin releases it)")
    def hold_action(self, request: HttpRequest, queryset: QuerySet[Workload]) -> None:
        # a workload already held as firmly is passed over, not counted as held (brk47)
        _each(
            request,
            [w for w in queryset.select_related("budget") if hold_changes(request.user, w)],
            lambda workload: do_hold_workload(request.user, workload),
            lambda workload: f"#{workload.pk}",
            "{n} workload(s) held.",
        )

    @admin.action(description="Release (held pending workloads: back in their place in the queue)")
    def release(self, request: HttpRequest, queryset: QuerySet[Workload]) -> None:
        _each(
            request,
            queryset,
            lambda workload: do_release_workload(request.user, workload),
            lambda workload: f"#{workload.pk}",
            "{n} workload(s) released.",
        )


class AttemptGPUInline(ReadOnlyMixin, admin.TabularInline):
    model = AttemptGPU
    extra = 0
    fields = ["gpu", "rank", "open"]
    readonly_fields = fields


@admin.register(Attempt)
class AttemptAdmin(AdminIdsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "id",
        "workload",
        "number",
        "host",
        "funding",
        "started",
        "protected",
        "stop_reason",
        "ended",
        "end_reason",
        "charged",
    ]
    list_filter = ["end_reason", "allocated", "unfunded", "host__cluster"]
    search_fields = ["workload__name", "host__name"]
    list_select_related = ["workload", "host"]
    inlines = [AttemptGPUInline]
    readonly_fields = ["efficiency"]

    # Instants and GPU-time as the pages and the CLI write them (try40: "noon", "p.m." and raw
    # GPU-seconds here, "12:00:15 UTC" and "1.23 GPU-h" there).
    @admin.display(description="funding", ordering="allocated")
    def funding(self, obj: Attempt) -> str:
        return "unfunded" if obj.unfunded else "allocated" if obj.allocated else "unallocated"

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: Attempt) -> str:
        return instant_text(obj.started_at) or "-"

    @admin.display(description="protected until", ordering="protected_until")
    def protected(self, obj: Attempt) -> str:
        return instant_text(obj.protected_until) or "-"

    @admin.display(description="ended", ordering="ended_at")
    def ended(self, obj: Attempt) -> str:
        return instant_text(obj.ended_at) or "-"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Attempt]:
        return super().get_queryset(request).prefetch_related("gpu_links__gpu__host")

    @admin.display(description="efficiency")
    def efficiency(self, obj: Attempt) -> str:
        """Its efficiency as the API, ``fairway seff`` and the workload page say it
        (``scheduler.efficiency``; an ended one's kept before its samples are pruned, util47)."""
        found = efficiency_of_attempts([obj.pk]).get(obj.pk)
        if found is None:
            return "-"
        return "; ".join(f"{label}: {words}" for label, words in efficiency_lines(found.as_data()))

    @admin.display(description="charged", ordering="charged_gpu_seconds")
    def charged(self, obj: Attempt) -> str:
        """A closed attempt's stored charge; an open one's so far, as its workload's page and the API
        count it (``accounting.attempt_charged_gpu_seconds``; it read "running" here, try63)."""
        if not obj.allocated or obj.unfunded:
            return "not charged"
        links = obj.gpu_links.all()
        seconds = attempt_charged_gpu_seconds(obj, len(links), until=silent_until(links))
        return gpu_time_text(seconds) if obj.ended_at or seconds else "–"


@admin.register(WorkloadEvent)
class WorkloadEventAdmin(AdminIdsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["recorded_at", "workload", "kind", "actor", "message"]
    list_filter = ["kind"]
    search_fields = ["workload__name", "message"]
    list_select_related = ["workload", "actor"]
    date_hierarchy = "at"
    ordering = ["-id"]  # newest recorded first; its "at" column sorts the same way

    @admin.display(description="at", ordering="id")
    def recorded_at(self, obj: WorkloadEvent) -> Any:
        """``at`` as stamped, sorted by the order the events were recorded (``EVENT_ORDER``): a
        tick stamps its events with its start, so ``at`` need not grow with the id, and sorted by
        ``at`` a placement read before the end that allowed it. Written as every instant
        (``instant_text``; Django's minutes read "01:08 UTC" for the event "at … 01:09:00 UTC", try58)."""
        return instant_text(obj.at)


@admin.register(HostEvent)
class HostEventAdmin(AdminIdsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["recorded_at", "host", "kind", "actor", "message"]
    list_filter = ["kind", "host__cluster"]
    search_fields = ["host__name", "message"]
    list_select_related = ["host", "actor"]
    date_hierarchy = "at"
    ordering = ["-id"]  # newest recorded first, as the workload event list

    @admin.display(description="at", ordering="id")
    def recorded_at(self, obj: HostEvent) -> Any:
        """``at`` as stamped, sorted by the order the events were recorded (as ``recorded_at`` of
        the workload event list), written as every instant (try58)."""
        return instant_text(obj.at)


@admin.register(JoinToken)
class JoinTokenAdmin(AdminIdsMixin, ReadOnlyMixin, admin.ModelAdmin):
    """Join tokens are created by the cluster action or ``manage.py create_join_token``; only hashes are kept."""

    list_display = ["id", "cluster", "created_at", "expires_at", "created_by", "used_at", "host", "note"]
    list_filter = ["cluster", ("used_at", admin.EmptyFieldListFilter)]
    list_select_related = ["cluster", "created_by", "host"]
    exclude = ["token_hash"]
    actions = ["revoke"]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        """The rows are read-only here (``has_change_permission`` is False for everyone); expiring
        one needs the permission to change join tokens, not merely to see them (brk40)."""
        return bool(request.user.has_perm("scheduler.change_jointoken"))

    @admin.action(description="Revoke (expire now) the selected unused tokens", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[JoinToken]) -> None:
        from django.utils import timezone

        done = queryset.filter(used_at__isnull=True).update(expires_at=timezone.now())
        messages.success(request, f"{done} join token(s) revoked.")


@admin.register(Mount)
class MountAdmin(AdminIdsMixin, admin.ModelAdmin):
    """The storage catalog (docs/jobs.md): host paths are set here only, by admins; ``clean``
    refuses relative paths, ``..`` and a misplaced ``{user}``."""

    list_display = ["name", "cluster", "host_path", "container_path", "read_only", "access"]
    list_filter = ["cluster", "access", "read_only"]
    filter_horizontal = ["budgets"]
    search_fields = ["name", "host_path", "container_path"]


@admin.register(ArrayGroup)
class ArrayGroupAdmin(AdminIdsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["id", "name", "owner", "cluster", "spec", "limit", "created_at"]
    list_filter = ["cluster"]


@admin.register(NotificationSettings)
class NotificationSettingsAdmin(AdminIdsMixin, admin.ModelAdmin):
    list_display = ["user", "email_kinds", "webhook_kinds", "webhook_url"]
    # A webhook typed without a scheme reads as https (Django 6's default; Django 5.2 warns
    # while the default is still http).
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}


@admin.register(Notification)
class NotificationAdmin(AdminIdsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["key", "user", "channel", "state", "tries", "last_error", "sent_at"]
    list_filter = ["state", "channel"]
