"""The researchers' web UI: server-rendered pages, htmx for the live parts.

Pages read through the same scopes and reports as the API (``accounts.services``,
``scheduler.reports``) and change state only through service functions
(``do_submit_workload``, ``do_cancel_workload``, ``do_set_host_state``, token services), so the
UI cannot allow what the API refuses.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import secrets
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.core.exceptions import NON_FIELD_ERRORS
from django.core.paginator import EmptyPage, Paginator
from django.db import connection
from django.db.models import Prefetch, QuerySet
from django.forms.utils import ErrorDict
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST
from knox.models import AuthToken
from rest_framework.exceptions import ValidationError as DRFValidationError

from accounts.auth import sweep_expired_tokens
from accounts.models import User
from accounts.services import (
    accessible_budget_ids,
    do_create_personal_token,
    do_revoke_token,
    password_changed_words,
    submit_budget_paths,
)
from budgets.models import Budget
from budgets.services import budget_paths, load_tree
from budgets.statement import may_read_statement
from config.api import no_such
from config.errors import ServiceError
from config.one_read import one_read_view
from config.pagination import whole_number_problem
from fairway_cli.numbers import sample_age_text
from fairway_cli.words import (
    AVAILABILITY_MEANS,
    IMPACT_PER_BUDGET_MEANS,
    NO_PYRAMID_HOURS,
    NO_WORKLOADS_MATCH,
    NOT_MEASURED,
    RESUBMITTED_AS,
    RESUBMITTED_FROM,
    UNFUNDED_ATTEMPT,
    bulk_stopping_text,
    efficiency_lines,
    group_unchanged_text,
    hold_unchanged_text,
    idle_held_text,
    idle_words,
    nothing_to_change_text,
    running_limit_text,
    utilization_words,
)
from fairway_common.limits import DEFAULT_LOG_TAIL_BYTES
from scheduler import bulk
from scheduler.accounting import accounting, attempt_charged_gpu_seconds, silent_until, with_accounting
from scheduler.api.filters import WorkloadFilter, one_value_each
from scheduler.api.hosts import attempts_lost_at, hosts_queryset, pending_inventory, state_reason
from scheduler.api.params import REPEATED, cluster_only_params, given_twice, no_such_parameter_text, refuse_unknown
from scheduler.api.pyramid import pyramid_params
from scheduler.api.serializers import EVENT_ORDER, STOP_ENDS_AS, WorkloadDetailSerializer, WorkloadUpdateSerializer
from scheduler.bulk import do_bulk_action, require_filter
from scheduler.efficiency import workload_efficiency
from scheduler.gpu_report import current_sample, sampled_at, unreported_in
from scheduler.idle import idle_attempts, idle_of_workloads
from scheduler.lifecycle import DrainingHost, SilentHost, draining_hosts, silent_hosts
from scheduler.models import (
    GPU,
    ArrayGroup,
    Attempt,
    AttemptGPU,
    Cluster,
    Host,
    NotificationSettings,
    Workload,
    WorkloadEvent,
)
from scheduler.notifications import listed_kinds
from scheduler.notifications import save_settings as save_notification_settings
from scheduler.pyramid import DEFAULT_RANGE, pyramid_report
from scheduler.reports import budget_standings, estimate_words, explain_pending, occupancy
from scheduler.resubmit import exact_duration_text
from scheduler.services import (
    CHANGED_MEANWHILE,
    HOST_ACTIONS,
    LIMIT_STATES,
    can_cancel,
    do_cancel_group,
    do_cancel_scheduled_drain,
    do_cancel_workload,
    do_hold_group,
    do_release_workload,
    do_schedule_drain,
    do_set_host_state,
    do_submit_workload,
    do_update_workload,
    hold_changes,
    hold_workload,
    host_action_problem,
    host_actions,
    image_problem,
    limit_may_change,
    may_operate_hosts,
    may_raise_limit,
    may_read_private,
    may_release_admin_hold,
    no_drain_scheduled_text,
    scheduled_drain,
    scheduled_drain_note,
    unscheduled_verb_problem,
)
from scheduler.sizes import exact_size_text
from web.forms import (
    NotificationForm,
    SpecForm,
    SubmitForm,
    WorkloadEditForm,
    env_line_holds,
    form_initial,
    parse_submission,
    spec_example,
)
from web.templatetags.fairway import duration

logger = logging.getLogger(__name__)

PAGE_SIZE = 50


@dataclass(slots=True)
class Scope:
    """Who is asking: the budget tree, paths, the budgets they may use, and the leaves they may submit to."""

    user: User
    tree: dict[int, Budget]
    paths: dict[int, str]
    accessible: set[int]

    @property
    def submit_budgets(self) -> list[str]:
        return submit_budget_paths(self.user, self.tree, accessible=self.accessible)

    def may_see_private(self, workload: Workload) -> bool:
        return may_read_private(self.user, workload, self.accessible)


def _scope(request: HttpRequest) -> Scope:
    tree = load_tree()
    return Scope(request.user, tree, budget_paths(tree), accessible_budget_ids(request.user, tree))


def _render(request: HttpRequest, template: str, context: dict[str, Any], *, status: int = 200) -> HttpResponse:
    return render(request, template, {"now": timezone.now(), **context}, status=status)


def _refused_params(request: HttpRequest, known: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """The query parameters of a page that reads ``known`` (most read none) it refuses, in words by
    parameter as the API says them (:func:`refuse_unknown`; ``web/_param_errors.html`` lists them over
    the page, status 400), or {}. words47: ``/?clustr=a`` showed the dashboard as if filtered. A
    page's form posts its own fields: only a GET's query is read."""
    if request.method not in ("GET", "HEAD"):
        return {}
    try:
        refuse_unknown(request.GET, known, api=False)
    except DRFValidationError as refused:
        return _param_errors(refused)
    return {}


# --- dashboard -----------------------------------------------------------------------------------


@login_required
@one_read_view
def dashboard(request: HttpRequest) -> HttpResponse:
    """My workloads by state, my budgets' standing among their siblings, cluster occupancy."""
    scope = _scope(request)
    errors = _refused_params(request)
    mine = Workload.objects.filter(owner=request.user).select_related("cluster")
    by_state = Counter(mine.values_list("state", flat=True))
    live = list(mine.exclude(state__in=Workload.FINAL_STATES).order_by("-id")[:20])
    recent = list(mine.filter(state__in=Workload.FINAL_STATES).order_by("-finished_at", "-id")[:8])
    clusters = list(Cluster.objects.order_by("name"))
    member_of = scope.accessible | {a for b in scope.accessible for a in _ancestors(scope.tree, b)}
    standings = []
    for cluster in clusters:
        standing = budget_standings(cluster, scope.tree)
        rows = [b for b in standing.budgets if b.budget_id in member_of and b.parent_id is not None]
        if rows:
            standings.append((standing, rows))
    return _render(
        request,
        "web/dashboard.html",
        {
            "nav": "dashboard",
            "by_state": [(s, by_state.get(s, 0)) for s in Workload.State.values],
            "live": live,
            "recent": recent,
            "paths": scope.paths,
            "standings": standings,
            "occupancy": occupancy(clusters),
            "param_errors": errors,
        },
        status=400 if errors else 200,
    )


def _ancestors(tree: dict[int, Budget], budget_id: int) -> list[int]:
    out: list[int] = []
    node = tree.get(budget_id)
    while node is not None and node.parent_id is not None and node.parent_id not in out:
        out.append(node.parent_id)
        node = tree.get(node.parent_id)
    return out


# --- submit --------------------------------------------------------------------------------------


def _cluster_choices() -> tuple[list[str], list[str]]:
    clusters = list(Cluster.objects.order_by("name").values_list("name", flat=True))
    models = sorted(set(GPU.objects.registered().filter(host__removed_at__isnull=True).values_list("model", flat=True)))
    return clusters, models


SUBMIT_ONCE_S = 3600
"""How long a submit page's ``submit_token`` is remembered: a second POST of one page (a double
click, a reload that resends the form) within it creates nothing and leads to the first's workload."""


def _submit_once(request: HttpRequest) -> tuple[str, HttpResponse | None]:
    """Claim the page's ``submit_token`` for this submission (``cache.add``: one claim wins, across
    web processes through Redis). Returns the claim's key ("" without a token), and for a token
    already claimed the answer: a redirect to the workload the first POST created (waiting up to
    2 s for it), else to the workloads list."""
    token = request.POST.get("submit_token", "")
    if not (token.isascii() and token.replace("-", "").replace("_", "").isalnum() and 16 <= len(token) <= 64):
        return "", None
    key = f"web-submit:{request.user.pk}:{token}"
    if cache.add(key, 0, SUBMIT_ONCE_S):
        return key, None
    for _ in range(20):
        created = cache.get(key)
        if created:
            messages.info(request, f"This form was already submitted: #{created}, nothing submitted again.")
            return key, redirect("web-workload", pk=created)
        if created is None and cache.add(key, 0, SUBMIT_ONCE_S):  # the first was refused: judge this afresh
            return key, None
        time.sleep(0.1)
    messages.info(request, "This form was already submitted; nothing submitted again.")
    return key, redirect("web-workloads")


def _again(request: HttpRequest) -> tuple[Workload | None, str]:
    """The workload the submit page submits again ("Submit again": ``?again=N``, then the form's
    ``again``) and "", or None and what is wrong with ``again`` in words ("" without one): not a
    workload id, or none such (left55: a bare 404, the typed form lost). Whether the person may read
    its spec is :func:`submit`'s to ask (``Scope.may_see_private``)."""
    raw = (request.POST if request.method == "POST" else request.GET).get("again", "")
    if not raw:
        return None, ""
    if not _is_pk(raw):
        return None, f"{raw[:40]!r} is not a workload id: nothing to submit again."
    old = Workload.objects.select_related("cluster").filter(pk=int(raw)).first()
    return (old, "") if old is not None else (None, f"No workload #{int(raw)}: nothing to submit again.")


def _offered(choices: list[str], value: Any) -> list[str]:
    """``choices`` with ``value`` among them (a resubmitted workload's own, kept chosen)."""
    return choices if not value or value in choices else [*choices, value]


def _is_pk(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 18


@login_required
@never_cache  # the page shows back the secret env typed (a refusal, a quote): kept from caches (brk31)
def submit(request: HttpRequest) -> HttpResponse:
    """The submit form (or a pasted YAML spec); field errors come from ``do_submit_workload``."""
    scope = _scope(request)
    clusters, models = _cluster_choices()
    budgets = scope.submit_budgets
    kwargs = {"budgets": budgets, "clusters": clusters, "models": models}
    again, again_problem = _again(request)  # "Submit again": the workload whose spec the form holds
    if again is not None and not scope.may_see_private(again):
        # The API's refusal (scheduler.resubmit), said on the workload's page: a bare "403
        # Forbidden" gave no reason and Django logged a traceback (brk45, as brk42's host actions).
        from scheduler.resubmit import RESUBMIT_FORBIDDEN

        logger.warning("submit again of #%s refused: %s may not read its spec", again.pk, request.user)
        messages.error(request, RESUBMIT_FORBIDDEN)
        return redirect("web-workload", pk=again.pk)
    again_path = scope.paths.get(again.budget_id, str(again.budget_id)) if again is not None else ""
    if again is not None:
        from scheduler.resubmit import workload_spec

        initial, _secrets = form_initial(workload_spec(again, again_path))
        # Its budget, cluster and GPU model stay chosen where no longer offered (a budget left, a
        # model removed): the select showed, and submitted, another one; the service refuses
        # them in the API's words (not_a_member, unknown_model), or the person picks another (brk45).
        kwargs = {
            "budgets": _offered(budgets, initial["budget"]),
            "clusters": _offered(clusters, initial["cluster"]),
            "models": _offered(models, initial["gpu_model"]),
        }
        form = SubmitForm(initial=initial, **kwargs)
    else:
        form = SubmitForm(**kwargs)
    example_models = (
        sorted(
            set(
                GPU.objects.filter(host__cluster__name=clusters[0], host__removed_at__isnull=True).values_list(
                    "model", flat=True
                )
            )
        )
        if clusters
        else []
    )
    example_cluster = Cluster.objects.filter(name=clusters[0]).first() if clusters else None
    example_image = not (example_cluster and example_models and image_problem(example_cluster, example_models[0]))
    spec_form = SpecForm(initial={"spec": spec_example(budgets, clusters, example_models, image=example_image)})
    spec_errors: list[str] = []
    quote_lines: list[Any] = []
    quote_terms: Any = None
    mode = "form"
    limited = False
    if again_problem and request.method == "POST":  # the form as typed, with the reason; nothing done
        mode = "spec" if "spec" in request.POST else "form"
        if mode == "spec":
            spec_form = SpecForm(request.POST)
            spec_errors.append(again_problem)
        else:
            form = SubmitForm(request.POST, quote="quote" in request.POST, **kwargs)
            form.is_valid()
            form.add_error(None, again_problem)
    elif again_problem:  # a new submission's form, with the reason (404: no such workload)
        messages.error(request, again_problem)
    elif request.method == "POST":
        mode = "spec" if "spec" in request.POST else "form"
        quote = "quote" in request.POST
        try:
            if mode == "spec":
                spec_form = SpecForm(request.POST)
                data = spec_form.submission() if spec_form.is_valid() else None
            else:
                form = SubmitForm(request.POST, quote=quote, **kwargs)
                form.is_valid()
                data = form.submission()
                if form.errors:
                    _all_problems(request.user, form, data, quote=quote)
                    data = None
                elif again is not None:
                    from scheduler.resubmit import resubmission_data

                    # the form holds the whole env; the owner's ticked "keep" fills the blank secrets
                    typed = data
                    data = resubmission_data(
                        request.user,
                        again,
                        typed,
                        budget_path=again_path,
                        accessible=scope.accessible,
                        keep_secrets=request.POST.get("keep_secrets") == "1",
                        whole_env=True,
                    )
                    if "min_runtime" not in typed:  # left blank for a quote: the ladder, not the old one's
                        data.pop("min_runtime", None)
            if data is not None:
                service_kwargs, errors = parse_submission(data, quote=quote)
                if service_kwargs is not None and quote:
                    # A quote (DESIGN.md §3.8): validated like the submission, nothing written;
                    # counted in the API's quote throttle (one log per user, config.throttling).
                    from config.throttling import quote_wait
                    from scheduler.estimates import do_quote

                    wait = quote_wait(request)
                    if wait is not None:
                        raise ServiceError(
                            "throttled", None, f"Too many quotes: try again in {math.ceil(wait)} s.", status=429
                        )
                    _quoted, quote_lines, quote_terms = do_quote(request.user, **service_kwargs)
                elif service_kwargs is not None:
                    # A double click posted the page twice: two workloads, both charged (break29)
                    once, already = _submit_once(request)
                    if already is not None:
                        return already
                    try:
                        workload = do_submit_workload(request.user, **service_kwargs, resubmitted_from=again)
                    except BaseException:
                        if once:
                            cache.delete(once)
                        raise
                    if once:
                        cache.set(once, workload.pk, SUBMIT_ONCE_S)
                    # its budget's hold, written at once: in its page's words (tryout47b)
                    held = explain_pending(workload).sentence if workload.pending_reason and not workload.hold else ""
                    messages.success(
                        request, f"Submitted {workload.name} (#{workload.pk}).{' ' + held if held else ''}"
                    )
                    return redirect("web-workload", pk=workload.pk)
                else:
                    raise _as_service_error(errors)
        except ServiceError as exc:
            # A limit (the per-user submission limit, the quote rate) answers 429, as the API does:
            # the form is fine, the request came too soon or too many (left44: the page said 400).
            limited = exc.status == 429
            for problem in exc.problems:
                field = problem.field if problem.field in form.fields else None
                if mode == "form":
                    form.add_error(field, problem.message)
                else:
                    spec_errors.append(f"{problem.field}: {problem.message}" if problem.field else problem.message)
    param_errors = _refused_params(request, ("again",))  # ?again= alone (given twice: refused too)
    refused = bool(form.errors or spec_errors or spec_form.errors or param_errors)
    status = 429 if limited else 400 if refused else 404 if again_problem else 200
    return _render(
        request,
        "web/submit.html",
        {
            "nav": "submit",
            "form": form,
            "spec_form": spec_form,
            "spec_errors": spec_errors,
            "mode": mode,
            "quote_lines": quote_lines,
            "quote_terms": quote_terms,
            "submit_token": secrets.token_urlsafe(24),
            "again": again,
            "again_secrets": _secret_names(again),
            # one NAME=value a line: a value with a line break cannot come back through the form
            "again_multiline": _unformable_env(again),
            "again_owner": again is not None and again.owner_id == request.user.pk,
            "keep_secrets": request.POST.get("keep_secrets") == "1",
            "param_errors": param_errors,
        },
        status=status,
    )


def _unformable_env(workload: Workload | None) -> list[str]:
    """The plain variables of ``workload`` whose ``NAME=value`` line the form's env parser does not
    read back as that value (a line break of any kind, blanks at its end): the page names them. Not
    its secrets, which the form never holds (blank; the owner's "keep" reuses them server-side)."""
    return [
        name
        for name, entry in ((workload.env or {}) if workload else {}).items()
        if not entry.get("secret") and not env_line_holds(name, entry.get("value", ""))
    ]


def _secret_names(workload: Workload | None) -> list[str]:
    """The names of ``workload``'s secret variables (none without one)."""
    return [n for n, e in ((workload.env or {}) if workload else {}).items() if e.get("secret")]


def _all_problems(user: User, form: SubmitForm, data: dict[str, Any], *, quote: bool = False) -> None:
    """Add to ``form`` every problem the API's parser and the service find in ``data`` on fields the
    form did not already refuse, so one answer lists them all. Nothing is created: the service
    checks it as a quote does (``dry_run``; brk42: a submission in a transaction rolled back was
    counted as a submission by ``fairway_submission_duration_seconds``)."""
    from scheduler.estimates import quoted_submission

    service_kwargs, errors = parse_submission(data, quote=quote)
    problems = [(field, message) for field, messages in errors.items() for message in messages]
    if service_kwargs is not None:
        try:  # a quote is checked as do_quote checks it
            do_submit_workload(user, dry_run=True, **(quoted_submission(service_kwargs) if quote else service_kwargs))
        except ServiceError as exc:
            problems += [(p.field, p.message) for p in exc.problems]
    for field, message in problems:
        if field in form.fields and field not in form.errors:
            form.add_error(field, message)
        elif field not in form.fields and message not in form.non_field_errors():
            form.add_error(None, f"{field}: {message}" if field else message)


def _as_service_error(errors: dict[str, list[str]]) -> ServiceError:
    from config.errors import FieldProblem

    problems = [FieldProblem("invalid", field, message) for field, msgs in errors.items() for message in msgs]
    return ServiceError.from_problems(problems or [FieldProblem("invalid", None, "Invalid submission.")])


# --- workloads -----------------------------------------------------------------------------------


def _list_filters(
    request: HttpRequest, queryset: QuerySet[Workload], extra: tuple[str, ...] = ()
) -> tuple[dict[str, str], WorkloadFilter, list[str]]:
    """The workload list's filters of the request's query (its params, the filter set over
    ``queryset``, the problems in words), as the list page and its bulk actions read them;
    ``extra``: the page's own parameters besides the filters."""
    params, twice = one_value_each(request.GET)
    filters = list(WorkloadFilter.base_filters)
    # ?user=rita (the column says "user"; the filter is owner=, as the API's) listed everyone's
    # workloads as if they were rita's (brk30): a parameter that filters nothing is named too.
    unknown = [k for k in params if k not in {*filters, *extra}]
    params = {k: v for k, v in params.items() if v and k in filters}
    filtered = WorkloadFilter(params, queryset=queryset, request=request)
    # A filter the API refuses (400, naming the value) was dropped here without a word: the page
    # of ?budget=nlp/olmoo listed every workload as if they were that budget's. Name it, list none.
    errors = [f"{k}: {no_such_parameter_text([*filters, *extra])}" for k in unknown]  # the API's words
    errors += [f"{k}: {REPEATED}" for k in twice]
    errors += [f"{field}: {message}" for field, messages in filtered.errors.items() for message in messages]
    return params, filtered, errors


@login_required
def workloads(request: HttpRequest) -> HttpResponse:
    """Every workload (queue transparency), filtered by state, budget, owner, cluster; 50 a page."""
    scope = _scope(request)
    queryset = with_accounting(Workload.objects.select_related("owner", "cluster")).order_by("-id")
    params, filtered, errors = _list_filters(request, queryset, ("page",))
    # ?page= by the API's rule for limit and offset (config.pagination): Paginator.get_page read
    # ?page=abc or ?page=-1 as page 1 and ?page=999 as the last page, an answer to another question
    # (left37). A malformed page is named as a filter is (400); one past the last redirects to the
    # last, its filters kept, as Django's admin does (left52: a 404 after the list shrank, a
    # canceled batch); page 1 of an empty list is that empty page.
    raw_page = request.GET.get("page") or "1"
    if problem := whole_number_problem("page", raw_page, 1):
        errors.append(f"page: {problem}")
    if errors:
        raw_page = "1"  # the list shows none, and says why
    paginator = Paginator(filtered.qs if not errors else queryset.none(), PAGE_SIZE)
    try:
        page = paginator.page(int(raw_page))
    except EmptyPage:
        last = {**params, "page": paginator.num_pages} if paginator.num_pages > 1 else params
        return redirect(f"{reverse('web-workloads')}?{urlencode(last)}" if last else reverse("web-workloads"))
    now = timezone.now()
    idle = idle_of_workloads([w.pk for w in page if w.state == Workload.State.RUNNING], now)
    for w in page:
        w.acct = accounting(w, now)
        w.idle_text = idle_words(idle[w.pk].as_data()) if w.pk in idle else ""
    context = {
        "nav": "workloads",
        "page": page,
        "paths": scope.paths,
        "filters": params,
        # Encoded: ``owner=j+doe`` came back from the rows' refresh and page links as "j doe" (brk31)
        "query": urlencode(params),
        "states": Workload.State.values,
        "budget_choices": sorted(scope.paths.values()),
        "clusters": list(Cluster.objects.order_by("name").values_list("name", flat=True)),
        "filter_errors": errors,
        "unfunded_note": UNFUNDED_ATTEMPT,  # the title of a minimum runtime marked unfunded (words46)
        "no_match_text": NO_WORKLOADS_MATCH,  # as `fairway ls` says it (try50b)
        # the bulk actions only where one may change something: not on a list of ended work alone
        # (try61: ?state=succeeded offered "Cancel these 15", whose preview said "0 to cancel")
        "bulk_offered": bool(params and not errors and filtered.qs.exclude(state__in=Workload.FINAL_STATES).exists()),
    }
    if request.htmx and request.htmx.target == "workload-rows":
        return _render(request, "web/_workload_rows.html", context)  # 200: htmx swaps no 4xx
    return _render(request, "web/workloads.html", context, status=400 if errors else 200)


BULK_VERBS = {"cancel": ("Cancel", "Canceled"), "hold": ("Hold", "Held"), "release": ("Release", "Released")}


@login_required
@require_http_methods(["GET", "POST"])
def workloads_bulk(request: HttpRequest) -> HttpResponseBase:
    """Cancel, hold or release the workloads the list shows with the query's filters
    (docs/jobs.md "Bulk actions"): GET previews them (``do_bulk_action(dry_run=True)``: the
    count, the skips) with a confirmation button; its POST acts on the ids previewed, then back to
    the list with the same filters."""
    action = request.GET.get("action", "")
    params, filtered, errors = _list_filters(request, Workload.objects.all(), ("action",))
    # ?action=hold&action=cancel was read as its last value, silently (left52): refused as a filter given twice
    errors += [f"{k}: {REPEATED}" for k in given_twice(request.GET, ("action",))]
    if action not in BULK_VERBS:
        errors.append(f"action: one of {', '.join(BULK_VERBS)}")
    if not errors:
        try:
            require_filter(params, WorkloadFilter.base_filters)
        except ServiceError as exc:
            errors.append(exc.message)
    back = f"{reverse('web-workloads')}?{urlencode(params)}"
    context: dict[str, Any] = {
        "nav": "workloads",
        "errors": errors,
        "back": back,
        "action": action,
        "here": request.get_full_path(),
    }
    if errors:
        return _render(request, "web/bulk.html", context, status=400)
    workloads = filtered.qs
    if request.method == "POST":
        raw = request.POST.get("ids", "")
        parts = [part for part in raw.split(",") if part]
        if given_twice(request.POST, ("ids",)):
            context["errors"] = [f"ids: {REPEATED}"]
            return _render(request, "web/bulk.html", context, status=400)
        if not all(part.isascii() and part.isdigit() and len(part) <= 18 for part in parts):
            context["errors"] = ["ids: workload ids, comma-separated"]
            return _render(request, "web/bulk.html", context, status=400)
        if len(parts) > (most := bulk.bulk_max()):  # the API's cap of its ids (BulkActionSerializer), read when asked
            context["errors"] = [f"ids: at most {most:,} workloads in one bulk action: narrow the filter"]
            return _render(request, "web/bulk.html", context, status=400)
        workloads = workloads.filter(pk__in=[int(part) for part in parts])
    try:
        outcome = do_bulk_action(request.user, action, workloads, dry_run=request.method != "POST")
    except ServiceError as exc:
        context["errors"] = [exc.message]
        return _render(request, "web/bulk.html", context, status=400)
    if request.method == "POST":
        done = f"{BULK_VERBS[action][1]} {len(outcome.changed)} workloads"
        if outcome.stopping:
            done += f" {bulk_stopping_text(len(outcome.stopping), done=True)}"
        left: dict[str, int] = {}
        for _pk, code in outcome.skipped:  # each skip's reason, as the preview lists them (brk51b: "changed meanwhile"
            left[code] = left.get(code, 0) + 1  # said of ids posted that were never one's to change)
        for code, count in left.items():
            done += f"; {count} left as they are ({code}: {outcome.reasons[code].rstrip('.')})"
        messages.success(request, done + ".")
        return redirect(back)
    skips: dict[str, list[int]] = {}
    for pk, code in outcome.skipped:
        skips.setdefault(code, []).append(pk)
    context |= {
        "outcome": outcome,
        "verb": BULK_VERBS[action][0],
        "ids": ",".join(map(str, outcome.changed)),
        "stopping_words": bulk_stopping_text(len(outcome.stopping), done=False),
        "skips": [(code, outcome.reasons[code], pks) for code, pks in skips.items()],
        "filters": params,
    }
    return _render(request, "web/bulk.html", context)


def _found(model: Any, kind: str, **lookup: Any) -> Any:
    """The one row ``lookup`` names, else a 404 saying what was looked for in the API's words, "No
    workload 99." (``config.api.no_such``; tryout49: Django's "No Workload matches the given
    query." behind its bare "Not Found" page)."""
    rows = model if isinstance(model, QuerySet) else model._default_manager.all()
    try:
        return rows.get(**lookup)
    except rows.model.DoesNotExist:
        raise Http404(str(no_such(kind, next(iter(lookup.values()))).detail)) from None


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler404`` (config.urls): the site's page, with its navigation, saying what was not found
    (a view's :func:`_found` words, else the path); the API answers its own JSON 404s."""
    said = exception.args[0] if exception.args and isinstance(exception.args[0], str) else ""
    message = said if said.startswith("No ") else f"Nothing at {request.path}."
    try:
        return render(request, "web/not_found.html", {"message": message}, status=404)
    except Exception:  # noqa: BLE001 -- e.g. the database down under the user's lookup: Django's page
        from django.views import defaults

        return defaults.page_not_found(request, exception)


def _workload(pk: int) -> Workload:
    return _found(
        Workload.objects.select_related("owner", "cluster", "budget", "held_by").prefetch_related(
            Prefetch(
                "attempts",
                queryset=Attempt.objects.select_related("host")
                .prefetch_related(
                    Prefetch("gpu_links", queryset=AttemptGPU.objects.select_related("gpu__host").order_by("rank"))
                )
                .order_by("number"),
            ),
            Prefetch("events", queryset=WorkloadEvent.objects.select_related("actor").order_by(*EVENT_ORDER)),
        ),
        "workload",
        pk=pk,
    )


@dataclass(slots=True)
class Lane:
    attempt: Attempt
    left: float
    width: float
    protected_width: float
    gpus: list[str]
    hosts: list[str]
    utilization: str
    """Its mean GPU utilization over the time held, or "not measured" (``scheduler.efficiency``)."""
    charged_gpu_seconds: int
    idle: str = ""
    """An open attempt idle on every GPU (:func:`scheduler.idle.idle_attempts`, as the API's ``idle``
    and ``fairway show``), in words: ``idle for 1h 20m (GPUs < 1 % since …): 2.67 GPU-hours held idle``."""
    silent: list[SilentHost] = dataclasses.field(default_factory=list)
    """An open attempt's hosts that are offline (:func:`scheduler.lifecycle.silent_hosts`, as the
    API's ``silent_hosts`` and ``fairway show``), so "running" with a growing charge is not all
    the page says."""
    draining: list[DrainingHost] = dataclasses.field(default_factory=list)
    """An open attempt's draining hosts before its stop (:func:`scheduler.lifecycle.draining_hosts`,
    as the API's ``draining_hosts`` and ``fairway show``): when it is stopped and requeued."""


def _timeline(workload: Workload, now: datetime) -> tuple[list[Lane], datetime | None, datetime]:
    """Attempts as bars on one time axis, from the workload's submission to now (or its end)."""
    attempts = list(workload.attempts.all())
    start = workload.submitted_at
    end = workload.finished_at or now
    for a in attempts:
        end = max(end, a.ended_at or now)
    span = max((end - start).total_seconds(), 1.0)
    running = [a.pk for a in attempts if a.ended_at is None]
    idle = idle_attempts(running, now) if running and workload.state == Workload.State.RUNNING else {}
    efficiency = workload_efficiency(workload, now)  # one query for every attempt
    lanes = []
    for a in attempts:
        begin = a.started_at or a.placed_at
        finish = a.ended_at or now
        left = max(0.0, (begin - start).total_seconds() / span * 100)
        width = max(0.4, (finish - begin).total_seconds() / span * 100)
        protected = 0.0
        if a.protected_until and a.started_at:
            protected = max(
                0.0, min((a.protected_until - a.started_at).total_seconds(), (finish - begin).total_seconds())
            )
            protected = protected / span * 100
        links = list(a.gpu_links.all())
        held = efficiency.attempts.get(a.pk)
        lanes.append(
            Lane(
                attempt=a,
                left=round(left, 3),
                width=round(min(width, 100 - left), 3),
                protected_width=round(protected, 3),
                gpus=[f"{link.gpu.host.name}:{link.gpu.index}" for link in a.ordered_gpu_links()],
                hosts=a.host_names(),
                utilization=utilization_words(
                    held.utilization if held is not None else None,
                    held.utilization_why if held is not None else None,
                    running=a.ended_at is None,
                ),
                charged_gpu_seconds=attempt_charged_gpu_seconds(a, len(links), now, silent_until(links)),
                idle=idle_held_text(idle[a.pk].as_data()) if a.pk in idle else "",
                silent=silent_hosts(a, links),
                draining=draining_hosts(a, links),
            )
        )
    return lanes, start, end


def _workload_context(
    request: HttpRequest, workload: Workload, scope: Scope, edit_form: WorkloadEditForm | None = None
) -> dict[str, Any]:
    now = timezone.now()
    lanes, axis_start, axis_end = _timeline(workload, now)
    serializer = WorkloadDetailSerializer(
        context={"request": request, "accessible_budget_ids": scope.accessible, "budget_paths": scope.paths}
    )
    open_attempt = next((a for a in workload.attempts.all() if a.ended_at is None), None)
    why = explain_pending(workload, now)
    form = edit_form or WorkloadEditForm(initial=_edit_values(workload, scope))
    may_control = workload.state not in Workload.FINAL_STATES and can_cancel(request.user, workload)
    return {
        "nav": "workloads",
        "w": workload,
        "budget_path": scope.paths.get(workload.budget_id, str(workload.budget_id)),
        "env": serializer.get_env(workload),
        "may_see_private": scope.may_see_private(workload),
        "can_cancel": may_control,
        # docs/jobs.md "Hold and release": whoever may cancel it holds a pending one (an admin a
        # user-held one: an admin's hold replaces it); an admin's hold only an admin releases
        "can_hold": may_control and workload.state == Workload.State.PENDING and hold_changes(request.user, workload),
        "can_release": may_control
        and workload.state == Workload.State.PENDING
        and bool(workload.hold)
        and (workload.hold != "admin" or may_release_admin_hold(request.user)),
        # The parts of the explanation: the sentences, the numbers, the blocking work (linked).
        "why": why.sentences,
        "why_numbers": why.numbers,
        "why_sides": [side for k in ("budget", "other_budget") if (side := why.numbers.get(k))],
        "why_blocking": why.blocking,
        "estimate": estimate_words(workload),
        "lanes": lanes,
        # docs/jobs.md "Efficiency": the words of fairway show and fairway seff
        "efficiency": efficiency_lines(workload_efficiency(workload, now).total.as_data()) if lanes else [],
        "axis_start": axis_start,
        "axis_end": axis_end,
        "events": list(workload.events.all()),
        "final": workload.state in Workload.FINAL_STATES,
        "open_attempt": open_attempt,
        "unfunded_note": UNFUNDED_ATTEMPT,
        "has_attempts": bool(lanes),
        "cancel_requested": bool(open_attempt and open_attempt.stop_reason == Attempt.EndReason.CANCELED),
        "dependencies": list(workload.dependencies.select_related("after").order_by("after_id")),
        **_group_actions(request.user, workload),
        "resubmissions": list(workload.resubmissions.order_by("id").values_list("id", flat=True)),
        "resubmitted_from_label": RESUBMITTED_FROM,  # the words of every surface (fairway_cli.words)
        "resubmitted_as_label": RESUBMITTED_AS,
        # docs/jobs.md: a pending workload's request changes; of a started one only its wall-time limit
        "can_update": (workload.state == Workload.State.PENDING or limit_may_change(workload, open_attempt))
        and can_cancel(request.user, workload),
        "limit_only": workload.state in LIMIT_STATES,
        "may_raise_limit": may_raise_limit(request.user),
        "edit_form": form,
        "edit_fields": [form["max_runtime"]] if workload.state in LIMIT_STATES else form.visible_fields(),
    }


def _group_actions(user: User, workload: Workload) -> dict[str, bool]:
    """Which of the group's buttons the workload's page offers: each only where it would change a
    member (try46: a finished group offered "Cancel the group", "Hold the group" and "Release the
    group" alike, and a held one "Hold the group"), as the member's own buttons follow its state."""
    if workload.group_id is None or not can_cancel(user, workload):
        return {"can_cancel_group": False, "can_hold_group": False, "can_release_group": False}
    live = list(
        Workload.objects.filter(group_id=workload.group_id)
        .exclude(state__in=Workload.FINAL_STATES)
        .only("state", "hold", "owner_id", "budget_id")
    )
    # one member of each budget and hold asked (a manager's rule reads the budget): a few, not one per member
    pending = list({(w.budget_id, w.hold): w for w in live if w.state == Workload.State.PENDING}.values())
    return {
        "can_cancel_group": bool(live),
        # the service's rule (brk50: an admin's hold, which replaces user holds, was offered only on unheld members)
        "can_hold_group": any(hold_changes(user, w) for w in pending),
        "can_release_group": any(w.hold and (w.hold != "admin" or may_release_admin_hold(user)) for w in pending),
    }


def _edit_values(workload: Workload, scope: Scope) -> dict[str, str]:
    """The edit form's fields filled with the workload's request as it is."""
    return {
        "name": workload.name,
        "budget": scope.paths.get(workload.budget_id, str(workload.budget_id)),
        "gpu_count": str(workload.gpu_count),
        "gpu_model": workload.gpu_model,
        "min_runtime": exact_duration_text(workload.min_runtime_s),
        "max_runtime": exact_duration_text(workload.max_runtime_s),
        "retries": str(workload.retries),
        "cpus": str(workload.cpus) if workload.cpus is not None else "",
        "memory": exact_size_text(workload.memory_bytes),
        "shared_memory": exact_size_text(workload.shared_memory_bytes),
        "version": str(workload.spec_version),
    }


@login_required
def workload(request: HttpRequest, pk: int) -> HttpResponse:
    """One workload: state, why pending and the estimated start, attempts, events, log tail, cancel."""
    scope = _scope(request)
    context = _workload_context(request, _workload(pk), scope)
    if request.htmx and request.htmx.target == "workload-live":
        # 286 tells htmx to stop polling: a finished workload no longer changes.
        return _render(request, "web/_workload_live.html", context, status=286 if context["final"] else 200)
    context["param_errors"] = errors = _refused_params(request)
    return _render(request, "web/workload.html", context, status=400 if errors else 200)


@login_required
@require_POST
def cancel(request: HttpRequest, pk: int) -> HttpResponseBase:
    target = _found(Workload, "workload", pk=pk)
    try:
        done = do_cancel_workload(request.user, target)
        if done.state == Workload.State.CANCELED:
            messages.success(request, f"Canceled {target.name} (#{target.pk}).")
        else:
            # The API's ``stop`` words, as `fairway cancel` prints them: the release said once (try50)
            # and an attempt its budget's cap made unfunded not called charged.
            attempt = Attempt.objects.filter(workload=done, ended_at__isnull=True).first()
            charged = (
                "charged until then"
                if attempt is not None and attempt.charged_until_release
                else "unfunded: not charged"
                if done.allocated
                else "unallocated: never charged"
            )
            ends_as = STOP_ENDS_AS.get(attempt.stop_reason, "canceled") if attempt is not None else "canceled"
            messages.success(
                request,
                f"Stop issued for {target.name} (#{target.pk}): it ends {ends_as} once its GPUs are "
                f"released ({charged}).",
            )
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect("web-workload", pk=pk)


@login_required
@require_POST
def update(request: HttpRequest, pk: int) -> HttpResponseBase:
    """The workload page's edit form: ``do_update_workload`` with the fields parsed as the API
    parses them; a refusal shows the page again with the typed values and each error beside its
    field (400; 403 and 409 as the API answers them)."""
    target = _found(Workload, "workload", pk=pk)
    form = WorkloadEditForm(request.POST)
    shown: WorkloadEditForm | None = form
    status = 400
    if form.is_valid():
        serializer = WorkloadUpdateSerializer(data=form.body())
        if serializer.is_valid():
            try:
                done = do_update_workload(
                    request.user, target, serializer.to_changes(), seen_version=form.cleaned_data["version"]
                )
            except ServiceError as exc:
                problems: dict[str, list[str]] = {}
                for problem in exc.problems:
                    problems.setdefault(problem.field or "", []).append(problem.message)
                for message in form.show_problems(problems):
                    messages.error(request, message)
                status = exc.status
                if exc.code == CHANGED_MEANWHILE:
                    shown = None  # the request as it is now, at its version (the typed one is refused again)
            else:
                if done.spec_version == target.spec_version:  # the service changed nothing (try50)
                    messages.info(request, nothing_to_change_text(done.pk))
                elif done.state in LIMIT_STATES:
                    limit = duration(done.max_runtime_s) if done.max_runtime_s else "none"
                    event = WorkloadEvent.objects.filter(workload=done, kind="updated").order_by("-id").first()
                    passed = bool(event is not None and (event.data or {}).get("passed"))
                    messages.success(request, f"Changed {done.name} (#{done.pk}): {running_limit_text(limit, passed)}.")
                else:
                    messages.success(
                        request, f"Changed {done.name} (#{done.pk}): it keeps its place in its budget's queue."
                    )
                return redirect("web-workload", pk=pk)
        else:
            for message in form.show_problems({f: [str(m) for m in msgs] for f, msgs in serializer.errors.items()}):
                messages.error(request, message)
    else:
        for field in form.hidden_fields():  # its error has no place beside a field: a message (left50)
            for message in field.errors:
                messages.error(request, message)
    scope = _scope(request)
    return _render(request, "web/workload.html", _workload_context(request, _workload(pk), scope, shown), status=status)


@login_required
@require_POST
def hold(request: HttpRequest, pk: int, verb: str) -> HttpResponseBase:
    """Hold (``verb`` ``hold``) or release (``release``) workload ``pk``: its page's buttons."""
    target = _found(Workload, "workload", pk=pk)
    try:
        if verb == "hold":
            done, changed = hold_workload(request.user, target)
            if not changed:  # a page shown before another's hold (brk55): `fairway hold`'s words
                held_by = done.held_by.username if done.held_by else None
                said = hold_unchanged_text({"hold": done.hold, "held_by": held_by}, request.user.get_username())
                messages.info(request, f"{target.name} (#{target.pk}) {said}")
            else:
                messages.success(
                    request, f"Held {target.name} (#{target.pk}, {done.hold} hold): it does not start until released."
                )
        else:
            do_release_workload(request.user, target)
            messages.success(request, f"Released {target.name} (#{target.pk}): back in its place in the queue.")
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect("web-workload", pk=pk)


@login_required
@require_POST
def hold_group(request: HttpRequest, pk: int, verb: str) -> HttpResponseBase:
    """Hold or release every pending member of array group ``pk``; back to the group's list."""
    group = _found(ArrayGroup, "array group", pk=pk)
    try:
        n = len(do_hold_group(request.user, group, release=verb == "release"))
        if not n:  # a stale page's button: said as the CLI says it (left55)
            messages.info(request, group_unchanged_text(group.pk, verb))
        else:
            messages.success(
                request, f"{'Held' if verb == 'hold' else 'Released'} {n} workloads of array group {group.pk}."
            )
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect(f"{reverse('web-workloads')}?group={group.pk}")


@login_required
@require_POST
def cancel_group(request: HttpRequest, pk: int) -> HttpResponseBase:
    """Cancel every member of array group ``pk`` not final yet; back to the group's list."""
    group = _found(ArrayGroup, "array group", pk=pk)
    try:
        n = len(do_cancel_group(request.user, group))
        messages.success(request, f"Canceled {n} workloads of array group {group.pk}.")
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect(f"{reverse('web-workloads')}?group={group.pk}")


def _logs_context(user: User, pk: int) -> tuple[Workload, Attempt | None, bool]:
    target = _found(Workload.objects.select_related("budget"), "workload", pk=pk)
    allowed = may_read_private(user, target, accessible_budget_ids(user))
    attempt = target.attempts.order_by("-number").first() if allowed else None
    return target, attempt, allowed


@login_required
async def workload_logs(request: HttpRequest, pk: int) -> HttpResponse:
    """The live log tail (htmx partial): asked of the agent in a worker thread, so a slow agent
    never holds up the server's other pages."""
    from scheduler.gateway import attempt_log_tails

    user = await request.auser()
    target, attempt, allowed = await sync_to_async(_logs_context)(user, pk)

    def tails(attempt_id: int) -> list[Any]:
        try:
            return attempt_log_tails(attempt_id, DEFAULT_LOG_TAIL_BYTES)
        finally:
            connection.close()  # a pooled thread of its own: its connection must not outlive the request

    parts = []
    if allowed and attempt is not None:
        parts = await sync_to_async(tails, thread_sensitive=False)(attempt.pk)
    live = attempt is not None and attempt.ended_at is None
    return await sync_to_async(render)(
        request,
        "web/_logs.html",
        {"w": target, "attempt": attempt, "parts": parts, "allowed": allowed, "live": live},
        # 286: htmx stops polling once the workload is finished (its last log no longer grows).
        status=286 if target.state in Workload.FINAL_STATES else 200,
    )


# --- budgets, clusters, metrics --------------------------------------------------------------------


@login_required
@one_read_view
def budgets(request: HttpRequest) -> HttpResponse:
    """The share tree per cluster: shares as %, entitlement per window, usage, ratio, rank, attainment."""
    scope = _scope(request)
    errors: dict[str, list[str]] = {}
    try:
        clusters = cluster_only_params(request.GET, api=False)  # budgets/tree/'s reading (pages46: ?cluster=nope a 200)
    except DRFValidationError as refused:
        errors, clusters = _param_errors(refused), list(Cluster.objects.order_by("name"))
    standings = [budget_standings(c, scope.tree, curve_points=CURVE_POINTS) for c in clusters]
    plots = {s.cluster: {b.budget_id: _usage_plot(b) for b in s.budgets} for s in standings}
    return _render(
        request,
        "web/budgets.html",
        {
            "nav": "budgets",
            "standings": standings,
            "plots": plots,
            "accessible": scope.accessible,
            "window_s": _window_s(),
            "statements": _statement_links(scope),
            "param_errors": errors,
            "cluster_asked": "" if errors else request.GET.get("cluster", ""),
            "cluster_names": list(Cluster.objects.order_by("name").values_list("name", flat=True)),
        },
        status=400 if errors else 200,
    )


def _param_errors(refused: DRFValidationError) -> dict[str, list[str]]:
    """A page's query parameters the API's parser refused (``scheduler.api.params``), in words by
    parameter, as the page lists them over its default view with status 400."""
    detail = refused.detail if isinstance(refused.detail, dict) else {"parameters": refused.detail}
    return {field: [str(m) for m in messages] for field, messages in detail.items()}


def _statement_links(scope: Scope) -> list[tuple[str, str]]:
    """(path, URL) of the statement CSV of every budget the user may read one of (the API's rule,
    ``budgets.statement.may_read_statement``: members of the budget or above it, admins), by path.
    tryout36: a member found no statement in the UI, only ``GET /api/v1/budgets/{id}/statement.csv``
    with a budget id to look up."""
    readable = [pk for pk in scope.tree if may_read_statement(scope.user, pk, scope.accessible)]
    return sorted((scope.paths[pk], f"/api/v1/budgets/{pk}/statement.csv") for pk in readable if pk in scope.paths)


CURVE_POINTS = 29
"""Points of each budget's usage-against-entitlement plot over the window (every 6 h of 7 days)."""


def _usage_plot(b: Any, width: int = 160, height: int = 36) -> dict[str, str]:
    """SVG points of a budget's cumulative usage and of its entitlement accruing evenly across the
    window (the same server-side SVG as the metrics chart: no script, no CDN)."""
    curve = b.usage_curve_gpu_hours
    top = max([b.entitlement_gpu_hours, *curve, 1e-9])
    n = max(2, len(curve))
    step = width / (n - 1)
    usage = " ".join(f"{i * step:.1f},{height - v / top * height:.1f}" for i, v in enumerate(curve))
    ent = f"0,{height} {width},{height - b.entitlement_gpu_hours / top * height:.1f}"
    return {"usage": usage, "entitlement": ent, "width": str(width), "height": str(height)}


def _window_s() -> int:
    from django.conf import settings

    return int(settings.FAIRWAY["LOOKBACK_WINDOW_S"])


def _host_rows(queryset: QuerySet[Host]) -> list[dict[str, Any]]:
    now = timezone.now()
    rows = []
    hosts = list(queryset)
    # the GPUs held idle (docs/jobs.md "Idle GPUs"; try56: found only in `fairway ls --idle`)
    open_ids = [link.attempt_id for h in hosts for g in h.gpus.all() for link in g.attempt_links.all() if link.open]
    idle = idle_attempts(open_ids, now) if open_ids else {}
    for host in hosts:
        gpus = []
        attempts: dict[int, Attempt] = {}
        for gpu in host.gpus.all():
            link = next((link for link in gpu.attempt_links.all() if link.open), None)
            if link is not None:
                attempts[link.attempt_id] = link.attempt
            if gpu.health == GPU.Health.UNHEALTHY:
                css = "unhealthy"
            elif link is not None:
                css = "alloc" if link.attempt.allocated and not link.attempt.unfunded else "unalloc"
            elif host.state != Host.State.ACTIVE:
                css = "off"
            else:
                css = "free"
            if gpu.health == GPU.Health.DEGRADED:
                css += " degraded"
            held_idle = idle.get(link.attempt_id) if link is not None else None
            if held_idle is not None:
                css += " idle-held"
            gap = unreported_in(host.pending_inventory, gpu.uuid)  # no sample: it says so (gpu_report)
            gpus.append(
                {
                    "gpu": gpu,
                    "css": css,
                    "workload": link.attempt.workload_id if link else None,
                    "unreported": gap.text if gap else "",
                    "idle": held_idle.text if held_idle is not None else "",
                    "util": _util_text(gpu.last_sample),
                    # a free GPU's temperature: none from a stale sample (left50, gpu_report)
                    "temp": current_sample(gpu.last_sample, now).get("temperature_c"),
                }
            )
        protected = [a.protected_until for a in attempts.values() if a.protected_until and a.protected_until > now]
        reason = state_reason(host)
        rows.append(
            {
                "host": host,
                "gpus": gpus,
                "model": gpus[0]["gpu"].model if gpus else "",
                "open_attempts": len(attempts),
                "protected_until": max(protected) if protected else None,
                "state_reason": reason,
                "pending_inventory": pending_inventory(host),
                "attempts_lost_at": attempts_lost_at(host, len(attempts)),
                "idle": [
                    f"#{idle[a].workload_id} {idle_held_text(idle[a].as_data())}" for a in sorted(attempts) if a in idle
                ],
                "scheduled_drain": scheduled_drain(host),
                "actions": host_actions(host),  # the buttons: the actions that apply now
            }
        )
    return rows


def _util_text(sample: Any) -> str:
    """A GPU's latest utilization for its tile's tooltip: ``42.0% util``, ``util not measured``
    when its sample holds none (NVML could not read it: a MIG-mode GPU, nvml56), "" without a sample;
    then the sample's age, ``sampled 12s ago`` (util49: one is stored every few heartbeats)."""
    if not isinstance(sample, dict) or not sample:
        return ""
    value = current_sample(sample, timezone.now()).get("utilization_pct")  # a stale one: not measured (left50)
    util = f"util {NOT_MEASURED}" if value is None else f"{value}% util"
    at = sampled_at(sample)
    return f"{util}, sampled {sample_age_text(at)}" if at else util


@login_required
@one_read_view
def clusters(request: HttpRequest, name: str | None = None) -> HttpResponse:
    """Clusters with occupancy and their hosts: GPU health grid, states, drain progress; admin actions."""
    errors: dict[str, list[str]] = {}
    cluster_list = [_found(Cluster, "cluster", name=name)] if name is not None else []
    try:  # the API's metrics/ reading (?cluster=, its one parameter); a cluster's own page reads none
        if name is None:
            cluster_list = cluster_only_params(request.GET, api=False)
        else:
            refuse_unknown(request.GET, [], api=False)
    except DRFValidationError as refused:
        errors = _param_errors(refused)
        cluster_list = cluster_list or list(Cluster.objects.order_by("name"))
    occ = {o.cluster: o for o in occupancy(cluster_list)}
    sections = [
        {"cluster": c, "occupancy": occ[c.name], "hosts": _host_rows(hosts_queryset().filter(cluster=c))}
        for c in cluster_list
    ]
    return _render(
        request,
        "web/clusters.html",
        # the actions' column, by the rule the action view and the API apply (brk42: every staff member saw it)
        {
            "nav": "clusters",
            "sections": sections,
            "operates_hosts": may_operate_hosts(request.user),
            "param_errors": errors,
        },
        status=400 if errors else 200,
    )


@login_required
@require_POST
def host_action(request: HttpRequest, name: str, verb: str) -> HttpResponseBase:
    """Cordon, drain, drain now or resume a host: admins (staff) with ``change_host`` only, as in
    the admin and the API (``services.may_operate_hosts``; brk42: any staff member, a view-only one
    included). Anyone else is sent back to the cluster page with the reason (a bare "403
    Forbidden" before, and a traceback logged by Django's handler for PermissionDenied): a warning
    line is logged."""
    if verb not in HOST_ACTIONS and verb != "cancel-drain":
        raise Http404(f"no host action {verb!r}")
    host = _found(Host, "host", name=name)
    if not may_operate_hosts(request.user):
        logger.warning("host action %s on %s refused: %s may not change hosts", verb, host.name, request.user)
        refusal = "only admins with the change_host permission cordon, drain or resume hosts."
        messages.error(request, f"{host.name}: {refusal}")
        return redirect(reverse("web-cluster", kwargs={"name": host.cluster.name}))
    back = redirect(reverse("web-cluster", kwargs={"name": host.cluster.name}))
    at = request.POST.get("at", "").strip()
    if at and (problem := unscheduled_verb_problem(host, verb)):  # one form: Enter submits its first button
        messages.error(request, problem)
        return back
    if verb == "cancel-drain" or at:
        # a drain at a later time (docs/deploy.md, "Scheduled drains"), or its cancel: the services' rules
        try:
            if verb == "cancel-drain" and host.drain_at is None:  # the page refuses what changes nothing
                messages.error(request, no_drain_scheduled_text(host))
            elif verb == "cancel-drain":
                do_cancel_scheduled_drain(request.user, host, request.POST.get("reason", ""))
                messages.success(request, f"{host.name}: scheduled drain canceled.")
            else:
                reason = request.POST.get("reason", "")
                shown = scheduled_drain(
                    do_schedule_drain(request.user, host, at, reason, drain_now=verb == "drain-now")
                )
                messages.success(request, f"{host.name}: {shown['summary'] if shown else 'drain scheduled'}.")
        except ServiceError as exc:
            messages.error(request, exc.message)
        return back
    if problem := host_action_problem(host, verb):  # the rule of the page's buttons
        messages.error(request, problem)
        return back
    state, now = HOST_ACTIONS[verb]
    try:
        # The whole reason: the service refuses one over 500 characters, as the API does (it was cut here: brk30)
        after = do_set_host_state(request.user, host, state, request.POST.get("reason", ""), drain_now=now)
        done = {"cordon": "cordoned", "drain": "draining", "drain-now": "draining now", "resume": "resumed"}[verb]
        if change := scheduled_drain_note(host, after):  # left59: a resume cancelled it unsaid
            done += f" ({change})"
        messages.success(request, f"{host.name}: {done}.")
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect(reverse("web-cluster", kwargs={"name": host.cluster.name}))


PYRAMID_SERIES = (
    ("availability", "#2f6f4f"),
    ("occupancy", "#2b6cb0"),
    ("utilization", "#b7791f"),
    ("impact", "#6b46c1"),
)
"""The four metrics of DESIGN.md §8 and their colours in the chart."""


def _pyramid_chart(hours: list[dict[str, Any]], width: int = 720, height: int = 160) -> list[dict[str, str]]:
    """SVG polyline points (0–1 on the y axis) of each metric over the hours, oldest first; with
    one hour (a new cluster's first, the current one so far) each metric is a level line across
    the chart, which spans that hour, ``dots`` at its ends (a line on the frame's edge, 0 or 100%,
    read as nothing drawn: left59)."""
    if not hours:
        return []
    dots = len(hours) == 1
    if dots:
        hours = [hours[0], hours[0]]
    n = len(hours)
    step = width / max(1, n - 1)
    out = []
    for key, colour in PYRAMID_SERIES:
        # An hour whose value is unknown (utilization not measured) breaks the line: one
        # polyline per run of known hours, never a drop to 0.
        runs: list[list[tuple[float, float]]] = [[]]
        for i, h in enumerate(hours):
            if h[key] is None:
                runs.append([])
            else:
                runs[-1].append((i * step, height - float(h[key]) * height))
        for run in runs:
            if len(run) == 1:  # a lone known hour: a short dash, a single point draws nothing
                run.append((min(width, run[0][0] + 4.0), run[0][1]))
            if run:
                points = " ".join(f"{x:.1f},{y:.1f}" for x, y in run)
                out.append({"name": key, "colour": colour, "points": points, "dots": dots})
    return out


@login_required
@one_read_view
def metrics(request: HttpRequest) -> HttpResponse:
    """Occupancy now, per cluster, and the four-metric pyramid of the last 7 days, or of the range
    and cluster its ``since``, ``until`` and ``cluster`` name as the API's (``pyramid_params``;
    tryout46), hourly roll-ups and the current, partial hour, with each budget's delivered and owed
    GPU-hours. A bad parameter: the last 7 days, its error said, status 400."""
    now = timezone.now()
    errors: dict[str, list[str]] = {}
    try:
        since, until, clusters = pyramid_params(request.GET, now, api=False)
    except DRFValidationError as refused:
        errors = _param_errors(refused)
        since, until, clusters = now - DEFAULT_RANGE, now, list(Cluster.objects.order_by("name"))
    pyramids = []
    for report in pyramid_report(clusters, since, until, now):
        hours = report["hours"]
        # The chart's first and last points (hour starts), written under it as its time axis.
        ends = [datetime.fromisoformat(hours[i]["hour"]) for i in (0, -1)] if hours else [None, None]
        if len(hours) == 1:  # the chart spans the one hour: its start and end (left59: "01:00 … 01:00")
            ends[1] = ends[0] + timedelta(hours=1)
        pyramids.append({**report, "chart": _pyramid_chart(hours), "chart_from": ends[0], "chart_to": ends[1]})
    return _render(
        request,
        "web/metrics.html",
        {
            "nav": "metrics",
            "availability_means": AVAILABILITY_MEANS,
            "no_hours_text": NO_PYRAMID_HOURS,
            "impact_means": IMPACT_PER_BUDGET_MEANS,
            "occupancy": occupancy(clusters),
            "pyramids": pyramids,
            "series": PYRAMID_SERIES,
            "default_range": not errors and not request.GET.get("since") and not request.GET.get("until"),
            "range_errors": errors,
            "range_form": {k: request.GET.get(k, "") for k in ("since", "until", "cluster")},
            "cluster_names": list(Cluster.objects.order_by("name").values_list("name", flat=True)),
        },
        status=400 if errors else 200,
    )


# --- personal API tokens --------------------------------------------------------------------------


@login_required
@never_cache  # a new token's plaintext is shown once: kept from caches (brk31)
def tokens(request: HttpRequest) -> HttpResponse:
    """Create (shown once), list and revoke personal API tokens."""
    created = None
    error = None
    if request.method == "POST":
        try:
            if "revoke" in request.POST:
                do_revoke_token(request.user, request.POST["revoke"])
                messages.success(request, "Token revoked: it stopped working.")
                return redirect("web-tokens")
            days = request.POST.get("expiry_days") or None
            if days is not None and not (days.isascii() and days.isdigit() and len(days) < 6):
                raise ServiceError("invalid_expiry", "expiry_days", "Give a number of days, or leave it empty.")
            _instance, created = do_create_personal_token(
                request.user, request.POST.get("name", ""), int(days) if days else None
            )
        except ServiceError as exc:
            error = exc.message
    sweep_expired_tokens(request.user)
    rows = AuthToken.objects.filter(user=request.user).select_related("info").order_by("-created")
    param_errors = _refused_params(request)
    return _render(
        request,
        "web/tokens.html",
        {"nav": "tokens", "rows": rows, "created": created, "error": error, "param_errors": param_errors},
        status=400 if error or param_errors else 200,
    )


@login_required
def notifications(request: HttpRequest) -> HttpResponse:
    """What the user is told, per event kind, by email and/or webhook (docs/jobs.md)."""
    pref = NotificationSettings.objects.filter(user=request.user).first()
    initial = (
        {
            "email_kinds": listed_kinds(pref.email_kinds),
            "webhook_kinds": listed_kinds(pref.webhook_kinds),
            "webhook_url": pref.webhook_url,
        }
        if pref
        else {}
    )
    form = NotificationForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:  # under the settings row lock, like the API's PUT (docs/locking.md)
            save_notification_settings(request.user, form.cleaned_data)
        except ServiceError as exc:
            form.add_error(exc.field, exc.message)
        else:
            messages.success(request, "Notification settings saved.")
            return redirect("web-notifications")
    param_errors = _refused_params(request)
    return _render(
        request,
        "web/notifications.html",
        {"nav": "notifications", "form": form, "email": request.user.email, "param_errors": param_errors},
        status=400 if form.errors or param_errors else 200,
    )


# --- log in ---------------------------------------------------------------------------------------


class _ThrottledRequest:
    """What the API's login throttles read of a request (``META``, ``headers``, ``user``, ``data``),
    for a form."""

    def __init__(self, request: HttpRequest) -> None:
        self.META = request.META
        self.headers = request.headers
        self.user = getattr(request, "user", None)
        self.data = request.POST


class LoginView(auth_views.LoginView):
    """The web log-in page, with the API login's throttles (``accounts.api.views``): every attempt
    per client address (``FAIRWAY_THROTTLE_LOGIN``, ``FAIRWAY_TRUSTED_PROXIES``) and failed ones
    per (user name, address) (``FAIRWAY_THROTTLE_LOGIN_USER``; sec63), the same counters (in Redis
    when REDIS_URL is set): trying passwords on the page and the API together gets no more tries.
    Over a limit: 429, the form with an error and ``Retry-After``; the password is not checked."""

    template_name = "web/login.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["sso_name"] = settings.FAIRWAY_OIDC_PROVIDER_NAME if settings.OIDC_ENABLED else ""
        context["sso_failed"] = settings.OIDC_ENABLED and self.request.GET.get("sso") == "failed"
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        from accounts.api.views import LoginFailureThrottle, LoginThrottle

        probe = _ThrottledRequest(request)
        waits = []
        per_address, self.failures = LoginThrottle(), LoginFailureThrottle()
        if not per_address.allow_request(probe, self):
            waits.append(per_address.wait() or 60.0)
        # A place in the pair's failures is taken before the form checks the password (one atomic
        # step: sso46); refused by the address already, the pair's count is only read for the wait.
        if not (self.failures.allow_request(probe, self) if waits else self.failures.take(probe)):
            waits.append(self.failures.wait() or 60.0)
        if not waits:
            return super().post(request, *args, **kwargs)
        wait_s = max(1, int(math.ceil(max(waits))))
        form = self.get_form()
        form.cleaned_data = {}
        form._errors = ErrorDict()  # noqa: SLF001 -- not validated: the password is not checked when throttled
        form.add_error(None, f"Too many login attempts: try again in {wait_s} seconds.")
        response = self.render_to_response(self.get_context_data(form=form), status=429)
        response["Retry-After"] = str(wait_s)
        return response

    def form_valid(self, form: Any) -> HttpResponse:
        self.failures.succeeded(_ThrottledRequest(self.request))
        return super().form_valid(form)

    def form_invalid(self, form: Any) -> HttpResponse:
        if not form.has_error(NON_FIELD_ERRORS, "invalid_login"):  # the password was not checked
            self.failures.give_back()
        return super().form_invalid(form)  # else the place taken is the failure


def admin_password_change(request: HttpRequest) -> HttpResponse:
    """The admin's own "Change password" page (``/admin/password_change/``, before
    ``admin.site.urls``): the admin's, then what the change ended
    (``accounts.services.password_changed_words``), shown on the page it leads to. Its form saves
    ``request.user``, whose ``save`` ends the login tokens (``accounts.models.User.save``)."""
    response = admin.site.admin_view(admin.site.password_change, cacheable=True)(request)
    ended = getattr(request.user, "login_tokens_ended", None)
    if ended is not None:
        messages.info(request, password_changed_words(ended))
    return response


class AdminLoginView(LoginView):
    """The admin's log-in page (``/admin/login/``, before ``admin.site.urls``): :class:`LoginView`
    with its throttles and counters, and the admin's form (staff only), template and context, as
    ``AdminSite.login`` makes them. auth47: the admin's own page checked passwords with no
    throttle, so an admin's was guessed there without end while ``/login/`` and the API said 429."""

    template_name = "admin/login.html"
    authentication_form = AdminAuthenticationForm

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if admin.site.has_permission(request):  # already in: the admin's index, as AdminSite.login
            return redirect("admin:index")
        return super().get(request, *args, **kwargs)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context |= {
            **admin.site.each_context(self.request),
            "title": "Log in",
            "subtitle": None,
            "app_path": self.request.get_full_path(),
            "username": self.request.user.get_username(),
        }
        if REDIRECT_FIELD_NAME not in self.request.GET and REDIRECT_FIELD_NAME not in self.request.POST:
            context[REDIRECT_FIELD_NAME] = reverse("admin:index")
        return context
