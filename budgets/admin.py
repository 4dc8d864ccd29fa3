"""Admin of the share tree: paths, shares, normalized shares, holds, archive."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db import router, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path as url_path
from django.urls import reverse

from budgets.admin_search import BudgetPathSearchMixin
from budgets.models import Budget, ShareBoost, ShareChange, UsageEntry
from budgets.services import (
    BudgetError,
    active_boosts,
    apply_due_boosts,
    boost_problem,
    boost_words,
    budget_paths,
    do_archive_budget,
    do_end_boost,
    do_schedule_boost,
    do_set_hold,
    do_set_shares,
    load_tree,
    lone_shares_note,
    normalized_shares,
    record_move_and_cap,
    request_ticks_everywhere,
    tree_order,
    wait_for_ticks,
)
from config.admin_ids import AdminIdsMixin
from fairway_cli.numbers import instant_text, percent_text


def _standings() -> dict[str, dict[int, Any]]:
    """Cluster name → budget id → its standing on that cluster (``scheduler.reports.budget_standings``,
    the budgets page's and ``budgets/tree/``'s one computation), clusters by name. The list's share
    and entitlement read it, so an archived budget counts while it has work on that cluster and
    drops out (0) once it has none there, as the tick counts it (DESIGN.md §3.7; left40: the list
    normalized over the organisation's work and showed a dropped-out budget as if live)."""
    from budgets.tree_memo import shared_tree
    from scheduler.models import Cluster
    from scheduler.reports import budget_standings

    tree = shared_tree()
    return {
        c.name: {b.budget_id: b for b in budget_standings(c, tree).budgets} for c in Cluster.objects.order_by("name")
    }


EDITABLE_FIELDS = [
    "name",
    "parent",
    "shares",
    "hold",
    "cap_gpu_hours",
    "cap_period_days",
    "on_cap",
    "max_submitted_per_user",
    "description",
]
STALE_GUARDED_FIELDS = [f for f in EDITABLE_FIELDS if f != "shares"]
"""The change form's fields judged from the value its page showed (``BudgetAdminForm``)."""
"""Budget fields leadership edits in the admin (the form and the change page list them once)."""


class BudgetAdminForm(forms.ModelForm):
    change_note = forms.CharField(
        required=False,
        max_length=500,
        label="Reason for the change",
        help_text="Kept in the audit history with a change of shares, hold, parent, cap or submission limit.",
    )

    class Meta:
        model = Budget
        fields = EDITABLE_FIELDS
        # Leadership met "Cap gpu hours", "Cap period days" and "On cap" with no word of what they
        # do (tryout36). Here, not on the model: help texts there would be a migration.
        labels = {
            "cap_gpu_hours": "Cap (GPU-hours)",
            "cap_period_days": "Cap period (days)",
            "max_submitted_per_user": "Submission limit per user",
        }
        help_texts = {
            # try43: the first budget made silently became the root, and the second program was refused.
            "parent": "Empty only for the organisation's root, the first budget made (e.g. the lab's name); "
            "programs go under it, projects under them.",
            "shares": "Weight among its siblings, a whole number ≥ 1: its share of each cluster is "
            "shares ÷ the live siblings' shares × its parent's share.",
            "hold": "Start no new attempts of this budget or anything under it; running work carries on.",
            "cap_gpu_hours": "Most allocated GPU-hours this budget and everything under it may use in the "
            "cap period, all clusters together. Empty: no cap.",
            "cap_period_days": "The rolling period the cap counts over, in days (e.g. 30: the last 30 days).",
            "on_cap": "Once the cap is reached, its new work runs unallocated (free, preemptible) or waits "
            "until its usage falls below the cap.",
            "max_submitted_per_user": "Most pending + running workloads a user may hold when submitting "
            "here (their workloads in every budget count). Empty: FAIRWAY_MAX_SUBMITTED_PER_USER; 0: no limit.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A PositiveIntegerField's form field offers 0 (``min="0"``); the model needs >= 1
        # (MinValueValidator(1), the budget_shares_positive constraint): the input says so too.
        shares = self.fields.get("shares")
        if shares is not None:
            shares.min_value = 1
            shares.widget.attrs["min"] = 1
            # The shares the page showed, posted back: what the admin changed is judged from them,
            # not from the row at the save (brk56: a temporary share started meanwhile, 1 → 3, and a
            # form opened before it, saved for its description, set 1 again and ended the boost).
            # A client that does not post them is judged from the row, as before.
            shown = not self.is_bound or self.add_initial_prefix("shares") in self.data
            shares.show_hidden_initial = self.instance.pk is not None and shown
        # The values the page showed, posted back (hidden initial): what the admin changed is
        # judged from them, not from the row at the save. A page opened before someone else held
        # the budget (or released, renamed, moved or capped it), saved afterwards for its
        # description, wrote the old value back (nvml56; shares have brk56's rule of their own).
        # A client that does not post them is judged from the row, as before.
        for name in STALE_GUARDED_FIELDS:
            field = self.fields.get(name)
            if field is not None:
                shown = not self.is_bound or self.add_initial_prefix(name) in self.data
                field.show_hidden_initial = self.instance.pk is not None and shown


class ShareChangeInline(admin.TabularInline):
    """The budget's audit history, newest first, read-only."""

    model = ShareChange
    fk_name = "budget"
    extra = 0
    fields = ["when", "change", "actor_name", "note"]
    readonly_fields = fields
    ordering = ["-at", "-id"]
    can_delete = False
    verbose_name = "change"
    # every kind it lists, by the kinds' own words (admin47: "history of shares, holds and archiving"
    # while it listed moves, caps and submission limits too)
    verbose_name_plural = f"history of changes: {', '.join(str(label) for label in ShareChange.Kind.labels)}"

    @admin.display(description="at")
    def when(self, obj: ShareChange) -> str:
        return instant_text(obj.at)

    @admin.display(description="change")
    def change(self, obj: ShareChange) -> str:
        return obj.change_text()

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ShareBoostForm(forms.ModelForm):
    """Schedule a temporary share: :func:`budgets.services.boost_problem`'s rule, read under the
    budget's row lock (the admin's POST runs in one transaction: ``ShareBoostAdmin.changeform_view``)."""

    class Meta:
        model = ShareBoost
        fields = ["budget", "shares", "starts_at", "ends_at", "note"]
        help_texts = {
            "shares": "The budget's shares while the temporary share is active, a whole number ≥ 1.",
            "starts_at": "When it begins (UTC); empty: now.",
            "ends_at": "When the budget's shares return to the value they had before (UTC).",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["starts_at"].required = False
        self.fields["starts_at"].initial = None
        self.fields["shares"].min_value = 1
        self.fields["shares"].widget.attrs["min"] = 1

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        budget = data.get("budget")
        if budget is None or self.errors:
            return data
        budget = Budget.objects.select_for_update().get(pk=budget.pk)
        problem = boost_problem(budget, data.get("shares"), data.get("starts_at"), data.get("ends_at"))
        if problem is not None:
            _code, field, message = problem
            raise forms.ValidationError({field: message})
        return data


class WhatIfForm(forms.Form):
    shares = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 14, "cols": 60, "style": "font-family: monospace"}),
        help_text="The simulator's shares file: 'shares:' then one 'path: N' per budget (path below the root).",
    )
    window = forms.CharField(initial="7d", max_length=20, help_text="The recorded demand replayed, e.g. 7d, 36h, 2w.")
    cluster = forms.ChoiceField(required=False)


def current_shares_yaml() -> str:
    """Today's live tree in the what-if shares format (every budget below a root, by path); a
    budget under a temporary share says so in a comment (try56: it read as a lasting share)."""
    tree = load_tree()
    paths = budget_paths(tree)
    boosts = active_boosts()
    lines = ["shares:"]
    for bid in sorted(
        (b.id for b in tree.values() if b.parent_id is not None and b.archived_at is None), key=lambda i: paths[i]
    ):
        note = f"  # temporary: {boost_words(boosts[bid])}" if bid in boosts else ""
        lines.append(f"  {shares_key(paths[bid])}: {tree[bid].shares}{note}")
    return "\n".join(lines) + "\n"


def shares_key(path: str) -> str:
    """``path`` as a key of the shares YAML: bare where YAML reads it back as that text, else
    double-quoted (brk51b: a budget named ``a: b``, ``x #y`` or ``[a]`` is a name the budget rule
    takes, and the page's own shares, run unchanged, were "not valid YAML")."""
    import json

    import yaml

    from fairway_common import strict_yaml

    try:  # read back as the shares file is read (strict_yaml, the one reader)
        node = strict_yaml.compose(f"{path}: 0")
    except (yaml.YAMLError, RecursionError):
        node = None
    if isinstance(node, yaml.MappingNode) and len(node.value) == 1:
        key = node.value[0][0]
        if isinstance(key, yaml.ScalarNode) and key.style is None and key.value == path:
            return path
    return json.dumps(path, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


def run_what_if(shares_text: str, window: str, cluster: str | None) -> dict[str, Any]:
    """The what-if over the recorded demand (docs/simulation.md, ``simulate --from-db``) through the
    simulator's public functions. Raises ValueError (BudgetFileError, SimulationError included)
    with a message naming the line of a bad shares text. Reads only; writes nothing."""
    from django.utils import timezone

    from scheduler.api.params import demand_window
    from scheduler.sim.dbdemand import actual_from_standing, load_demand
    from scheduler.sim.whatif import parse_shares, whatif

    span = demand_window(window)
    now = timezone.now()
    demand = load_demand(cluster or None, span, now)
    budgets = parse_shares(shares_text, demand.budgets, name="shares")
    result = whatif(demand, budgets)
    actual_from_standing(result, cluster or None, span, now)
    return result


class ParentListFilter(admin.RelatedFieldListFilter):
    """The "By parent" filter: the budgets that have sub-budgets, by path in tree order, from the process's
    budget tree (the default listed every budget, each ``str()`` walking its parents: a query per
    level per budget, twice a page)."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> list[tuple[int, str]]:
        from budgets.tree_memo import shared_tree

        tree = shared_tree()
        parents = {b.parent_id for b in tree.values()}
        return [(pk, tree[pk].path) for pk in tree_order(tree) if pk in parents]


class BudgetChangeList(ChangeList):
    """The page's budgets with their parents from the process's budget tree, so each row's
    ``str()`` (the action checkbox's label: the path) walks no parent by query."""

    def get_results(self, request: HttpRequest) -> None:
        from budgets.tree_memo import shared_tree

        super().get_results(request)
        tree = shared_tree()
        for budget in self.result_list:
            if budget.parent_id in tree:
                budget.parent = tree[budget.parent_id]


@admin.register(Budget)
class BudgetAdmin(AdminIdsMixin, BudgetPathSearchMixin, admin.ModelAdmin):
    budget_path_lookup = "id"
    form = BudgetAdminForm
    inlines = [ShareChangeInline]
    change_list_template = "admin/budgets/budget/change_list.html"
    list_display = ["path", "shares_now", "normalized_share", "entitlement", "hold", "archived", "cap"]
    list_filter = ["hold", ("archived_at", admin.EmptyFieldListFilter), "on_cap", ("parent", ParentListFilter)]
    search_fields = ["name", "description"]
    autocomplete_fields = ["parent"]
    readonly_fields = ["temporary_shares", "archived_at", "created_at"]
    fields = [
        *EDITABLE_FIELDS,
        "change_note",
        "temporary_shares",
        "archived_at",
        "created_at",
    ]
    actions = ["hold_budgets", "release_budgets", "archive_budgets", "download_statement"]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return BudgetChangeList

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None):  # noqa: ANN201
        # One tree load per page instead of a parent walk per row. The admin instance is shared by
        # threads; a concurrent page may see the other's maps, which hold the same request-independent data.
        self._paths = budget_paths()
        self._standings = _standings()
        self._shares = {} if self._standings else normalized_shares()  # no cluster: the organisation's
        self._boosts = active_boosts()
        return super().changelist_view(request, extra_context)

    def changeform_view(
        self, request: HttpRequest, object_id: str | None = None, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        """A save of an existing budget first waits for the ticks in flight (``wait_for_ticks``), in
        the transaction Django's own view then nests in: a cap (or a hold, or a move under a held or
        capped parent) saved while a tick ran took effect after the tick's starts, which the tick
        decided on the budget as it was (brk39), as a hold did (brk38). Before the form's checks,
        which take the parent's row lock (``Budget.clean``): tick locks first, as ``do_set_hold``
        takes them (docs/locking.md), so a hold elsewhere and this save never wait for each other."""
        if request.method != "POST" or object_id is None:
            return super().changeform_view(request, object_id, form_url, extra_context)
        with transaction.atomic(using=router.db_for_write(self.model)):
            wait_for_ticks()
            return super().changeform_view(request, object_id, form_url, extra_context)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Budget | None = None,
    ) -> HttpResponse:
        """A refused save names the budget as it is: the form's checks had set the refused parent or
        name on ``obj``, and the heading and breadcrumbs read "robotics/large" of a move refused under
        an archived budget, as if it had moved (lead47)."""
        if obj is not None and obj.pk is not None and context["adminform"].form.errors:
            saved = Budget.objects.filter(pk=obj.pk).first()
            if saved is not None:
                context["subtitle"], context["original"] = str(saved), saved
        return super().render_change_form(request, context, add, change, form_url, obj)

    def save_model(self, request: HttpRequest, obj: Budget, form: Any, change: bool) -> None:
        note = form.cleaned_data.get("change_note", "")
        if not change:
            super().save_model(request, obj, form, change)
            request_ticks_everywhere()
            return
        # Shares and hold go through the services, which record who changed what (ShareChange).
        new_shares, new_hold = obj.shares, obj.hold
        if "shares" in form.changed_data:
            obj.shares = form.initial["shares"]
        if "hold" in form.changed_data:
            obj.hold = form.initial["hold"]
        # Only the fields this page changed: the row was read before its lock, and writing every
        # column back undid what committed meanwhile (an archive: the budget live again, brk34).
        changed = [f for f in EDITABLE_FIELDS if f in form.changed_data and f not in ("shares", "hold")]
        obj.save(update_fields=changed)
        record_move_and_cap(obj, {f: form.initial.get(f) for f in changed}, request.user, note)
        if "shares" in form.changed_data:  # from what the page showed: an active boost ends (brk56)
            do_set_shares(request.user, obj, new_shares, note)
            if lone := lone_shares_note(obj):  # saved, and moving no share of a cluster (try58)
                messages.warning(request, lone)
        if new_hold != obj.hold:
            do_set_hold(obj, new_hold, actor=request.user, note=note)
        obj.shares, obj.hold = new_shares, new_hold
        request_ticks_everywhere()  # shares, holds and caps reorder every cluster's queue

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view(self.what_if_view)
        return [url_path("what-if/", view, name="budgets_budget_what_if"), *super().get_urls()]

    def what_if_view(self, request: HttpRequest) -> HttpResponse:
        """What-if of changed shares over the recorded demand; reads only, changes nothing."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        from scheduler.models import Cluster

        clusters = list(Cluster.objects.order_by("name").values_list("name", flat=True))
        result: dict[str, Any] | None = None
        error = ""
        if request.method == "POST":
            form = WhatIfForm(request.POST)
        else:
            form = WhatIfForm(initial={"shares": current_shares_yaml(), "window": "7d"})
        form.fields["cluster"].choices = [(c, c) for c in clusters]
        if len(clusters) == 1:
            form.fields["cluster"].widget = forms.HiddenInput()
            form.fields["cluster"].initial = clusters[0]
        if request.method == "POST" and form.is_valid():
            try:
                result = run_what_if(
                    form.cleaned_data["shares"], form.cleaned_data["window"], form.cleaned_data["cluster"] or None
                )
            except ValueError as exc:  # BudgetFileError and SimulationError are ValueErrors
                error = str(exc)
        context = {
            **self.admin_site.each_context(request),
            "title": "What-if: changed shares over the recorded demand",
            "opts": self.model._meta,
            "form": form,
            "result": result,
            "error": error,
            "changelist_url": reverse("admin:budgets_budget_changelist"),
        }
        return TemplateResponse(request, "admin/budgets/budget/what_if.html", context)

    def get_ordering(self, request: HttpRequest) -> list[Any]:
        """Tree order (each budget followed by its sub-budgets, siblings live first, then by name:
        ``services.tree_order``, the budgets page's order) from the process's budget tree
        (``tree_memo``: no query while no budget changed), as one CASE on the id; a budget newer
        than that tree goes last, by name."""
        from django.db.models import Case, IntegerField, Value, When

        from budgets.tree_memo import shared_tree

        order = tree_order(shared_tree())
        if not order:
            return ["name"]
        position = Case(
            *(When(pk=pk, then=Value(n)) for n, pk in enumerate(order)),
            default=Value(len(order)),
            output_field=IntegerField(),
        )
        return [position.asc(), "name", "pk"]

    @admin.display(description="temporary shares")
    def temporary_shares(self, obj: Budget) -> str:
        """The budget's temporary shares not ended yet, in the words of every surface (scheduled ones:
        from when), or "–"; scheduled under "Temporary shares" (a form field would post with the
        budget's own; an inline would too)."""
        if obj.pk is None:
            return "–"
        boosts = obj.share_boosts.filter(ended_at__isnull=True).order_by("starts_at")
        return "; ".join(boost_words(b) for b in boosts) or "–"

    @admin.display(description="shares", ordering="shares")
    def shares_now(self, obj: Budget) -> str:
        """The shares, and a temporary share's words while one is active: "3 (share 3 until … (then
        1))" (try56: a plain "3" read as a lasting share; the budgets page said it was temporary)."""
        boost = getattr(self, "_boosts", {}).get(obj.pk)
        return f"{obj.shares} ({boost_words(boost)})" if boost is not None else str(obj.shares)

    @admin.display(description="path")
    def path(self, obj: Budget) -> str:
        return getattr(self, "_paths", {}).get(obj.pk) or obj.path

    @admin.display(description="normalized share")
    def normalized_share(self, obj: Budget) -> str:
        """As the budgets page's "share of cluster" and ``fairway budgets``' SHARE (one decimal; the
        list's ``66.67%`` beside the page's ``66.7%``, try38), from the clusters' standings: one
        figure where every cluster gives the same, else ``name: figure`` per cluster (an archived
        budget with work on one cluster only). No cluster: the organisation's
        (``budgets.services.normalized_shares``, as ``GET budgets/``)."""
        standings = getattr(self, "_standings", None)
        if standings is None:
            standings = _standings()
        if not standings:
            shares = getattr(self, "_shares", None) or normalized_shares()
            return percent_text(float(shares.get(obj.pk, 0)), 1)
        texts = {
            name: percent_text(b.normalized_share, 1) if (b := by_id.get(obj.pk)) is not None else "–"
            for name, by_id in standings.items()
        }
        if len(set(texts.values())) == 1:
            return next(iter(texts.values()))
        return " · ".join(f"{name}: {text}" for name, text in texts.items())

    @admin.display(description="entitlement (GPU-h per window)")
    def entitlement(self, obj: Budget) -> str:
        """``E(b) = s(b) × registered GPUs × W`` per cluster (DESIGN.md §1), the standing's (as the
        budgets page shows it), in the words every surface uses (``gpu_hours_text``: ``56.0``, not
        the list's whole ``56``, try38)."""
        from fairway_cli.numbers import gpu_hours_text

        standings = getattr(self, "_standings", None)
        if standings is None:
            standings = _standings()
        return (
            " · ".join(
                f"{name}: {gpu_hours_text(b.entitlement_gpu_hours)}"
                for name, by_id in standings.items()
                if (b := by_id.get(obj.pk)) is not None
            )
            or "–"
        )

    @admin.display(boolean=True, description="archived")
    def archived(self, obj: Budget) -> bool:
        return obj.archived

    @admin.display(description="cap", ordering="cap_gpu_hours")
    def cap(self, obj: Budget) -> str:
        """The cap in the budgets page's and ``fairway budgets``' words (``1 GPU-h / 7 d, then
        held``; "–" without one): the list's "Cap gpu hours" column gave no period and its "On cap"
        column named a consequence for every budget without a cap (try37), led by its use in the
        period and marked ``(reached)`` as there (try40: the list alone showed neither)."""
        from scheduler.reports import cap_words

        if obj.cap_gpu_hours is None:
            return "–"
        standings = getattr(self, "_standings", None)
        if standings is None:
            standings = _standings()
        # A cap counts its usage on every cluster: each cluster's standing says the same words
        # (the budgets page's ``cap_text``). No cluster: nothing has run, nothing is used.
        for by_id in standings.values():
            if (b := by_id.get(obj.pk)) is not None and b.cap_text:
                return str(b.cap_text)
        return cap_words(obj.cap_gpu_hours, obj.cap_period_days, obj.on_cap, False, 0.0)

    def has_delete_permission(self, request: HttpRequest, obj: Budget | None = None) -> bool:
        # Budgets with workloads are archived, never deleted (DESIGN.md §3.7).
        return obj is not None and not obj.workloads.exists() and super().has_delete_permission(request, obj)

    @admin.action(description="Hold: start no new attempts", permissions=["change"])
    def hold_budgets(self, request: HttpRequest, queryset: QuerySet[Budget]) -> None:
        for budget in queryset:
            do_set_hold(budget, True, actor=request.user, note="admin action")
        messages.success(request, f"{queryset.count()} budget(s) on hold.")

    @admin.action(description="Release hold", permissions=["change"])
    def release_budgets(self, request: HttpRequest, queryset: QuerySet[Budget]) -> None:
        for budget in queryset:
            do_set_hold(budget, False, actor=request.user, note="admin action")
        messages.success(request, f"{queryset.count()} budget(s) released.")

    @admin.action(description="Archive (refuse new submissions; running work carries on)", permissions=["change"])
    def archive_budgets(self, request: HttpRequest, queryset: QuerySet[Budget]) -> None:
        archived = 0
        for budget in queryset:
            try:
                do_archive_budget(budget, actor=request.user, note="admin action")
            except BudgetError as exc:  # the root (brk63): it archived the whole organisation for good
                messages.error(request, exc.message)
            else:
                archived += 1
        if archived:
            messages.success(request, f"{archived} budget(s) archived with their sub-budgets.")

    @admin.action(description="Download statement (CSV, last 30 days)")
    def download_statement(self, request: HttpRequest, queryset: QuerySet[Budget]) -> HttpResponse:
        """The accounting statement of the selected budgets (each with its subtree), one CSV."""
        from budgets.statement import budget_statement, parse_range, statement_csv, statement_file_name

        since, until = parse_range(None, None)
        parts = []
        chosen = sorted(queryset, key=lambda b: b.path)
        for n, budget in enumerate(chosen):
            text = statement_csv(budget, budget_statement(budget, since, until))
            parts.append(text if n == 0 else text.split("\n", 1)[1])
        response = HttpResponse("".join(parts), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = (
            f'attachment; filename="{statement_file_name([b.path for b in chosen], since, until)}"'
        )
        return response


@admin.register(ShareBoost)
class ShareBoostAdmin(AdminIdsMixin, BudgetPathSearchMixin, admin.ModelAdmin):
    """Temporary shares ("deadline boosts", docs/standing.md): scheduled here, applied and undone by
    the clock through the share-edit service. Who may change a budget may schedule one; a scheduled
    one may be deleted before it starts; none is edited (schedule another instead)."""

    form = ShareBoostForm
    list_display = ["budget_path", "shares", "starts_shown", "ends_shown", "base_shares", "state", "actor_name", "note"]
    list_filter = [("ended_at", admin.EmptyFieldListFilter)]
    search_fields = ["budget__name", "note", "actor_name"]
    autocomplete_fields = ["budget"]
    actions = ["end_now"]

    @admin.display(description="budget", ordering="budget__name")
    def budget_path(self, obj: ShareBoost) -> str:
        from budgets.tree_memo import paths_of, shared_tree

        return paths_of(shared_tree()).get(obj.budget_id) or str(obj.budget)

    @admin.display(description="from", ordering="starts_at")
    def starts_shown(self, obj: ShareBoost) -> str:
        """As its state and every surface write an instant (``instant_text``): Django's minutes
        read "Dec 7 2026 01:13 UTC" beside "until 02:30:00 UTC" (try58)."""
        return instant_text(obj.starts_at)

    @admin.display(description="until", ordering="ends_at")
    def ends_shown(self, obj: ShareBoost) -> str:
        return instant_text(obj.ends_at)

    @admin.display(description="state")
    def state(self, obj: ShareBoost) -> str:
        return boost_words(obj) if obj.ended_at is None else "ended"

    def _may_edit_budgets(self, request: HttpRequest) -> bool:
        return request.user.has_perm("budgets.change_budget")

    def has_end_permission(self, request: HttpRequest) -> bool:
        return self._may_edit_budgets(request)

    @admin.action(
        description="End now (an active one: back to its 'then' shares; a scheduled one: canceled)", permissions=["end"]
    )
    def end_now(self, request: HttpRequest, queryset: QuerySet[ShareBoost]) -> None:
        """End the selected temporary shares now, as their end would (``do_end_boost``: the
        clock's path, under each budget's row lock, at most once)."""
        chosen = list(queryset.order_by("pk"))
        ended = [b for b in chosen if do_end_boost(request.user, b)]
        words = f"{len(ended)} temporary share(s) ended now" + (f": {'; '.join(map(str, ended))}" if ended else "")
        if skipped := len(chosen) - len(ended):
            words += f"; {skipped} had ended already"
        messages.success(request, words + ".")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and self._may_edit_budgets(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: ShareBoost | None = None) -> bool:
        if obj is not None and obj.applied_at is not None:
            return False  # active or ended: an explicit edit of the shares ends one early
        return super().has_delete_permission(request, obj) and self._may_edit_budgets(request)

    def delete_model(self, request: HttpRequest, obj: ShareBoost) -> None:
        self.delete_queryset(request, ShareBoost.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ShareBoost]) -> None:
        """Delete scheduled boosts read again under their budgets' row locks, then their own (the
        clock's order, ``budgets.services._step_boost``): one it started since the page's check is
        refused, nothing deleted (brk56: deleted once started, the budget kept the boosted shares)."""
        with transaction.atomic(using=router.db_for_write(self.model)):
            ids = list(queryset.values_list("pk", flat=True))
            budgets = ShareBoost.objects.filter(pk__in=ids).values_list("budget_id", flat=True)
            list(Budget.objects.select_for_update().filter(pk__in=list(budgets)).order_by("pk").values_list("pk"))
            boosts = list(ShareBoost.objects.select_for_update().filter(pk__in=ids).order_by("pk"))
            if started := [b for b in boosts if b.applied_at is not None]:
                words = "; ".join(str(b) for b in started)
                raise PermissionDenied(f"Started meanwhile, not deleted (an edit of the shares ends one): {words}.")
            ShareBoost.objects.filter(pk__in=[b.pk for b in boosts]).delete()

    def changeform_view(
        self, request: HttpRequest, object_id: str | None = None, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        if request.method != "POST":
            return super().changeform_view(request, object_id, form_url, extra_context)
        with transaction.atomic(using=router.db_for_write(self.model)):  # the form's lock holds until saved
            return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: ShareBoost, form: Any, change: bool) -> None:
        data = form.cleaned_data
        try:
            saved = do_schedule_boost(
                request.user, data["budget"], data["shares"], data["ends_at"], data.get("starts_at"), data["note"]
            )
        except BudgetError as exc:  # checked by the form under the same lock: not expected
            raise PermissionDenied(str(exc)) from exc
        obj.pk = saved.pk
        obj.refresh_from_db()
        if lone := lone_shares_note(saved.budget):  # scheduled, and moving no share of a cluster (try58)
            messages.warning(request, lone)
        transaction.on_commit(apply_due_boosts)  # one starting now need not wait for the clock


def budget_path_of(obj: ShareChange | UsageEntry) -> str:
    """``obj``'s budget's path from the process's budget tree (its ``str()`` walked the parents by
    query beyond the one level ``select_related`` reached: queries per row). The lists' budget column."""
    from budgets.tree_memo import paths_of, shared_tree

    return paths_of(shared_tree()).get(obj.budget_id) or str(obj.budget)


@admin.register(UsageEntry)
class UsageEntryAdmin(AdminIdsMixin, BudgetPathSearchMixin, admin.ModelAdmin):
    list_display = ["budget_path", "cluster", "start", "end", "gpus", "gpu_seconds", "note"]
    list_filter = ["cluster"]
    search_fields = ["budget__name", "note"]
    list_select_related = ["budget", "cluster"]
    autocomplete_fields = ["budget"]
    date_hierarchy = "end"

    @admin.display(description="budget", ordering="budget__name")
    def budget_path(self, obj: UsageEntry) -> str:
        return budget_path_of(obj)


class ChangedBudgetListFilter(admin.RelatedFieldListFilter):
    """The share changes' "By budget" filter: the live budgets that have share changes, by path in
    tree order (the default listed every budget, archived ones and never-changed ones included, by
    ``str()``: hundreds in a big lab, each path a query per level). One query for the ids with
    changes; the paths come from the process's budget tree. An archived budget's changes are found
    by :class:`BudgetStateListFilter` or by its path in the search box."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> list[tuple[int, str]]:
        from budgets.tree_memo import paths_of, shared_tree

        changed = set(ShareChange.objects.values_list("budget_id", flat=True).distinct().order_by())
        tree = shared_tree()
        paths = paths_of(tree)
        return [(pk, paths[pk]) for pk in tree_order(tree) if pk in changed and tree[pk].archived_at is None]


class ActorListFilter(admin.RelatedOnlyFieldListFilter):
    """The share changes' "By actor" filter: the users who made changes, and the changes made by
    no account, named for what they are (Django's empty choice read "-", tryout45): a change a
    command or a migration made (no actor), or one whose user was deleted since (its
    ``actor_name`` stays on the row)."""

    EMPTY = "no account (a command, or a deleted user)"

    def __init__(self, field: Any, request: HttpRequest, params: Any, model: Any, model_admin: Any, field_path: str):
        super().__init__(field, request, params, model, model_admin, field_path)
        self.empty_value_display = self.EMPTY


class BudgetStateListFilter(admin.SimpleListFilter):
    """Share changes of live budgets, or of archived ones (which the "By budget" list leaves out)."""

    title = "budget state"
    parameter_name = "budget_state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("live", "live"), ("archived", "archived")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[ShareChange]) -> QuerySet[ShareChange]:
        if self.value() == "live":
            return queryset.filter(budget__archived_at__isnull=True)
        if self.value() == "archived":
            return queryset.filter(budget__archived_at__isnull=False)
        return queryset


@admin.register(ShareChange)
class ShareChangeAdmin(AdminIdsMixin, BudgetPathSearchMixin, admin.ModelAdmin):
    """Audit history: who changed which budget's shares (or hold, archive) when. Read-only. The search
    box finds a budget by its path (``nlp/olmo``) or any part of it, as the pages show it."""

    list_display = ["when", "budget_path", "change", "actor_name", "note"]
    list_filter = [
        ("budget", ChangedBudgetListFilter),
        BudgetStateListFilter,
        ("actor", ActorListFilter),
        "kind",
        ("at", admin.DateFieldListFilter),
    ]
    search_fields = ["budget__name", "actor_name", "note"]
    date_hierarchy = "at"

    @admin.display(description="at", ordering="at")
    def when(self, obj: ShareChange) -> str:
        """The instant as every page writes it (``12:33:44 UTC``; Django's "Dec. 6, 2026, 12:33 p.m." before)."""
        return instant_text(obj.at)

    @admin.display(description="change", ordering="kind")
    def change(self, obj: ShareChange) -> str:
        return obj.change_text()

    @admin.display(description="budget", ordering="budget__name")
    def budget_path(self, obj: ShareChange) -> str:
        return budget_path_of(obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
