"""A pending reason in a few words, for every list that shows one (the web's workload list and
dashboard, ``fairway ls``): one function, so a workload kept out by CPUs alone never reads "not
enough GPUs" in a list while its page says "Not enough CPUs for it".

In the CLI's package because the CLI imports nothing of the server, while the server may import it
(as it does ``fairway_cli.numbers``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fairway_cli.numbers import duration_text, gpu_hours_text, gpu_time_text, instant_text, percent_text

REASON_WORDS = {
    "unschedulable": "no host can ever fit it",
    "dependency": "waits for other workloads",
    "held": "budget on hold",
    "budget_capped": "budget capped",
    "awaiting_preemption": "others are leaving for it",
    "reserved_for_other": "GPUs reserved for a larger job",
    "protected_work": "waiting for protection to end",
    "fair_share": "other budgets go first",
    "insufficient_gpus": "not enough GPUs",
    "not_yet_considered": "not considered yet",  # just submitted, changed or released (try46)
}
"""Each pending reason code (DESIGN.md §3.8) in a few words, without what its ``resources`` add."""

RETRIES_WORDS = "re-runs after its own non-zero exit; a stop (timeout, preemption, drain, cancel) never uses one"
"""What ``retries`` does, in the one wording of the submit form, the workload page and ``fairway
submit|update|resubmit --help`` (docs/jobs.md, "Retries"; tryout49: "re-runs after a non-zero exit"
read as a promise to re-run work stopped at its wall-time limit, which ends exit 143)."""

MAINTENANCE_WORDS = "GPUs reserved for maintenance"
"""``reserved_for_other`` where a scheduled drain alone keeps it out (:func:`drain_only`; docs/deploy.md
"Scheduled drains"): the lists' words, its page's "reserved for maintenance" (list59: the lists read
"GPUs reserved for a larger job" while the page named the drain)."""

NOT_SCHEDULABLE_WORDS = "not schedulable"
"""A free GPU no workload can be given now (its host is not active, or it reports unhealthy): the
occupancy bar's grey part (the API's ``unavailable``) and the GPU grid's grey tiles, in one wording
(left51: the bar read "unavailable" above a grid legend reading "host not schedulable")."""

COMMAND_TOO_LONG = "The command is too long to send to its host."
"""``exec``'s ``invalid_command`` of a command past what one message to the agent carries (the
API's, ``scheduler.execs``), and ``fairway exec -it``'s of one past the server's websocket frame
(the same 256 KiB: ``fairway_cli.session``, brk61)."""

LEAVE_OUT_ATTEMPT = "leave out the attempt to run in it"
"""What ``exec``'s ``not_running`` says to do where the ``attempt`` asked for is not the running one
(``scheduler.execs.not_running_words``): the API's field; ``fairway exec`` says its flag
instead (:data:`FLAG_OF_FIELD`, left60)."""

LEAVE_OUT_RANK = "leave out the rank"
"""What ``exec``'s ``invalid_rank`` says to do of an attempt on one host (``scheduler.execs.exec_host``, exl61)."""

FLAG_OF_FIELD = {LEAVE_OUT_ATTEMPT: "leave out --attempt to run in it", LEAVE_OUT_RANK: "leave out --rank"}
"""The server's words naming an API field → the CLI's, naming the flag the person typed (as
``fairway_cli.cli.MISSING_WORDS`` names ``-M`` for ``min_runtime``)."""


UNAVAILABLE_STATUS = 503
"""The status of a server unavailable for a moment: an API request's 503, a websocket's close 4503
(4000 + the status) or its upgrade's HTTP 503."""
UNAVAILABLE_TEXT = "the server is unavailable for a moment (503): try again shortly"
"""What the CLI says wherever a server answers 503 (an API request's, a websocket's close 4503 or its
upgrade's HTTP 503: ``exec_unavailable``, ``database_unavailable``, ``database_busy``, ``overloaded``):
nothing was wrong with the request; the CLI exits ``EXIT_TEMPFAIL`` (75) then (cli46)."""


def unavailable_text(said: str) -> str:
    """A 503's words as the CLI says them (``said``: the server's words and code, or the CLI's own
    of an answer not in Fairway's format), then :data:`UNAVAILABLE_TEXT` on a line of its own."""
    return f"{said}\n  {UNAVAILABLE_TEXT}"


THROTTLED_STATUS = 429
"""The status of a person's requests or sessions throttled for a moment: an API request's 429
(``throttled``: the request rate, ``FAIRWAY_THROTTLE_*``; ``exec_busy``: the commands and sessions at
once), a websocket's close 4429 or its upgrade's HTTP 429."""
THROTTLED_WORDS = "your requests or sessions are over the server's limit for a moment (429)"
"""What the CLI says wherever a server answers 429, before when to try again (:func:`throttled_text`):
nothing was wrong with the request; the CLI exits ``EXIT_TEMPFAIL`` (75), as for a 503 (cli46b)."""
TRY_LATER_STATUSES = (UNAVAILABLE_STATUS, THROTTLED_STATUS)
"""The statuses that say "try again later" (exit 75): a 503 and a 429, each in its one wording
(:func:`try_later_text`)."""


MAX_RETRY_AFTER_S = 600
"""The longest ``Retry-After`` the CLI honours: a longer one (or an HTTP date) is read as this."""


def retry_after_s(value: str | None) -> float | None:
    """A ``Retry-After`` header's seconds (RFC 9110 §10.2.3), at most :data:`MAX_RETRY_AFTER_S`;
    None without one. An HTTP date is read as the most (the CLI does not read the server's clock).
    The one reading of the server's seconds: an API answer's header, a websocket upgrade's, a
    websocket refusal's close reason (``fairway_cli.session.close_retry_after``, ws47)."""
    if not value:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return float(min(int(text[:6]), MAX_RETRY_AFTER_S))
    return float(MAX_RETRY_AFTER_S)


def try_again_words(retry_after: float | None) -> str:
    """When to try again: in the server's ``Retry-After`` seconds, when it gave them."""
    return f"try again in {round(retry_after)} s" if retry_after else "try again shortly"


def throttled_text(said: str, retry_after: float | None = None) -> str:
    """A 429's words as the CLI says them (``said``: the server's words and code), then
    :data:`THROTTLED_WORDS` and when to try again (:func:`try_again_words`) on a line of its own."""
    return f"{said}\n  {THROTTLED_WORDS}: {try_again_words(retry_after)}"


def try_later_text(status: int, said: str, retry_after: float | None = None) -> str:
    """The words of a ``status`` of :data:`TRY_LATER_STATUSES`: a 429's (:func:`throttled_text`) or a
    503's (:func:`unavailable_text`)."""
    return throttled_text(said, retry_after) if status == THROTTLED_STATUS else unavailable_text(said)


def in_flags(message: str) -> str:
    """A server's ``message`` as the CLI says it: each field it names the flag that sets it
    (:data:`FLAG_OF_FIELD`)."""
    for field, flag in FLAG_OF_FIELD.items():
        message = message.replace(field, flag)
    return message


HOLD_WORDS = {"user": "held by its owner", "admin": "held by an admin"}
"""A workload's own hold (reason ``held`` with ``hold`` set; docs/jobs.md "Hold and release") in
a few words, by kind: a user hold (its owner's or a budget manager's, which its owner may release)
or an admin's. ``held`` alone is its budget's hold."""

UNFUNDED_ATTEMPT = "this attempt runs unfunded: its budget reached its cap, so it is neither protected nor charged"
"""Said beside an allocated workload's minimum runtime while its open attempt runs unfunded
(DESIGN.md §3.7), on its page and in ``fairway show``, which otherwise read "protected and charged";
the web list's mark's title."""


UNFUNDED_ESTIMATE = "unfunded: its budget is at its cap then, so it starts neither protected nor charged"
"""Said after a pending workload's estimated start where the estimate starts it unfunded at its
budget's downgrade cap (the stored ``estimate_unfunded``, DESIGN.md §3.7; arrayq46: "by 14:05" read
as a protected, charged start): its page, ``fairway show`` and the API's ``estimated_start_words``."""


def unfunded_text(text: str, unfunded: Any) -> str:
    """``text`` followed by `` (unfunded)`` where the work runs, or would start, unfunded at its
    budget's downgrade cap (DESIGN.md §3.7: no protection, no charge; :data:`UNFUNDED_ATTEMPT` says
    it in full): a quote's start (:func:`quote_start_text`, unfunded46) and a list's minimum
    runtime while its open attempt runs unfunded (``fairway ls``' MIN-RUNTIME ``10m (unfunded)``,
    the web list's, from the API's ``accounting.unfunded``; words46: they read as protected work)."""
    return f"{text} (unfunded)" if unfunded else text


def side_label(path: str, after_this_one: bool) -> str:
    """A side of a fair-share comparison as "why pending" names it (the API's ``label``, the page's
    table, ``fairway show``): the pending workload's own budget, when its ``gpus × M`` is counted
    in committed and ratio as rule 2 compares them (DESIGN.md §3.2: the ratio after admission),
    reads ``nlp/olmo, after this one``, so its numbers are not taken for ``fairway budgets``' (left56)."""
    return f"{path}, after this one" if after_this_one else path


def end_words(reason: str, exit_code: int | None) -> str:
    """How an attempt ended: ``failed (exit 1)``, ``lost``. ``fairway show``'s REASON column and
    ``fairway wait``'s last line of a workload (the list row's ``last_end``) both say it so."""
    return reason + (f" (exit {exit_code})" if exit_code is not None else "")


SHORT_NAMES = {"cpus": "CPUs", "memory": "memory"}
"""How words name each resource a reason says is short (the pending detail's ``resources``:
``scheduler.policy.reason_hosts.RESOURCES``); the server's sentences use the same names."""


def short_words(resources: Iterable[str] | None) -> str:
    """The resources a reason says are short, in words: ``CPUs``, ``memory``, ``CPUs and memory``;
    "" for none."""
    return " and ".join(SHORT_NAMES.get(r, str(r)) for r in resources or ())


def drain_only(reason: str | None, detail: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The scheduled drain (``{host, at}``: epoch seconds) that alone keeps a pending workload out:
    reason ``reserved_for_other`` whose ``detail`` (its ``pending_detail``, or the keys ``drain`` and
    ``reserved_for`` of it) names a ``drain`` and reserves the room for no other workload (the
    policy's ``reasons._with_drain``); None otherwise. The page's "reserved for maintenance"
    (``scheduler.reports``), the API list's ``pending_drain`` and the lists' words read it."""
    drain = (detail or {}).get("drain")
    if reason != "reserved_for_other" or not isinstance(drain, Mapping) or (detail or {}).get("reserved_for"):
        return None
    return drain


def drain_words(drain: Mapping[str, Any]) -> str:
    """:data:`MAINTENANCE_WORDS` with the host and its drain's instant, short for a list's cell:
    ``GPUs reserved for maintenance (h1 drains Dec 8 08:00:00 UTC)``."""
    at = instant_text(drain.get("at"))
    return f"{MAINTENANCE_WORDS} ({drain.get('host')} drains{' ' + at if at else ''})"


def in_brackets(words: str) -> str:
    """``words`` put in brackets after other words (``pending (…)``): brackets inside become square
    ones, so they nest readably (lt61: ``pending (GPUs reserved for maintenance (gpu1 drains …))``)."""
    return f"({words.replace('(', '[').replace(')', ']')})"


def host_state_words(host: Mapping[str, Any]) -> str:
    """A host's state as ``fairway hosts`` says it (its STATE column, ``fairway hosts NAME``'s
    ``state:``, an action's answer), the one wording: ``draining (drain now)``; a drain scheduled
    for later adds ``(drain scheduled)`` or ``(drain now scheduled)`` (pf63: the column read only
    ``active``); its instant, who and why are the server's ``scheduled_drain.summary``, said beside."""
    words = str(host.get("state") or "") + (" (drain now)" if host.get("drain_now") else "")
    scheduled = host.get("scheduled_drain")
    if isinstance(scheduled, Mapping):
        words += " (drain now scheduled)" if scheduled.get("drain_now") else " (drain scheduled)"
    return words


REASON_ACTIONS = {"draining": "drain asked", "drain_now": "drain now asked", "inventory_held": "inventory held"}
"""The API's ``state_reason.kind`` (the host event that took it out of placement) as the action."""


def host_reason_words(reason: Mapping[str, Any], *, offline: bool = False) -> str:
    """Why a host is cordoned or drained (the API's ``state_reason``), the one wording of it (the
    API's ``summary``, ``fairway hosts``, the clusters page): ``cordoned by admin at 14:05:09 UTC:
    fan``; a scheduled drain says when it was asked, for when, and when it began (lt61: one asked at
    03:53 for 04:23:44 read "drain now asked by admin at 04:23:49", the time the tick applied it).
    ``offline``: the host is offline, the reason that of the state it returns to (try41)."""
    by = f" by {reason['by']}" if reason.get("by") else ""
    message = reason.get("message") or "no reason given"
    kind = str(reason.get("kind") or "")
    # the operator's action, true while the host drains and once it is drained (tryout35)
    action = REASON_ACTIONS.get(kind, kind.replace("_", " "))
    scheduled = reason.get("scheduled")
    if isinstance(scheduled, Mapping) and scheduled.get("asked_at"):
        when = (
            f" at {instant_text(scheduled['asked_at'])} for {instant_text(scheduled.get('at'))}, "
            f"began {instant_text(reason.get('at'))}"
        )
    else:
        when = f" at {instant_text(reason.get('at'))}"
    back = " (from when its agent is back)" if offline else ""
    return f"{action}{by}{when}: {message}{back}"


def reason_words(
    reason: str | None,
    resources: Iterable[str] | None = None,
    group_limit: Any = None,
    hold: Any = None,
    drain: Mapping[str, Any] | None = None,
) -> str:
    """A pending workload's reason in a few words: ``not enough CPUs`` for ``insufficient_gpus``
    whose ``resources`` say CPUs are what is short (its GPUs could be made free), any other reason
    followed by ``(CPUs short)`` when CPUs or memory made it worse than GPUs alone would (the
    detail page's ``scheduler.reports.short_sentence`` says the same at length). ``not considered yet``
    without a reason; an unknown code as given. ``group_limit``: the ``%N`` of an array member's
    ``dependency`` that is its group's limit (``pending_detail.limit``): ``array at its limit
    (%2)``, where "waits for other workloads" read as an ``after`` wait (try37). ``hold``: the
    workload's own hold (``user``, ``admin``; :data:`HOLD_WORDS`), which ``held`` then names
    instead of its budget's. ``drain``: the scheduled drain that alone keeps it out
    (:func:`drain_only`, the API list's ``pending_drain``): :func:`drain_words` for
    ``reserved_for_other`` (list59)."""
    if not reason:
        return REASON_WORDS["not_yet_considered"]
    if reason == "held" and hold in HOLD_WORDS:
        return HOLD_WORDS[hold]
    if reason == "dependency" and isinstance(group_limit, int) and not isinstance(group_limit, bool):
        return f"array at its limit (%{group_limit})"
    if reason == "reserved_for_other" and isinstance(drain, Mapping):
        words = drain_words(drain)
    else:
        words = REASON_WORDS.get(reason, reason)
    short = short_words(resources)
    if not short:
        return words
    if reason == "insufficient_gpus":
        return f"not enough {short}"
    return f"{words} ({short} short)"


__all__ = [
    "HOLD_WORDS",
    "MAINTENANCE_WORDS",
    "REASON_WORDS",
    "REASON_ACTIONS",
    "SHORT_NAMES",
    "drain_only",
    "drain_words",
    "host_reason_words",
    "in_brackets",
    "reason_words",
    "short_words",
]


def silent_host_words(silent: Mapping[str, Any]) -> str:
    """An open attempt's offline host in one line, as the workload page and ``fairway show``
    write it: ``silent`` is one of the API's ``silent_hosts`` (``host``, ``last_heartbeat``,
    ``lost_at``: datetimes or ISO strings), from ``scheduler.lifecycle.silent_hosts``."""
    since = instant_text(silent.get("last_heartbeat")) or "its registration"
    return (
        f"host {silent['host']} silent since {since}; ends lost at {instant_text(silent['lost_at'])} "
        "unless it returns (charged up to its last heartbeat)"
    )


def draining_host_words(draining: Mapping[str, Any]) -> str:
    """An open attempt's draining host in one line, as the workload page and ``fairway show``
    write it: ``draining`` is one of the API's ``draining_hosts`` (``host``, ``drain_now``,
    ``stops_at``, ``drains_at``: datetimes, ISO strings or None), from
    ``scheduler.lifecycle.draining_hosts``. A drain scheduled for later (``drains_at``; fake46)
    stops the attempt then, or at its protection's end (``stops_at``) if that is later."""
    drains_at = instant_text(draining.get("drains_at"))
    when = instant_text(draining.get("stops_at"))
    if drains_at:
        drain = f"drains now at {drains_at}" if draining.get("drain_now") else f"drains at {drains_at}"
        stop = "then" if when == drains_at else f"when its protection ends, at {when}"
    else:
        drain = "drains now" if draining.get("drain_now") else "is draining"
        stop = f"when its protection ends, at {when}" if when else "at the next tick"
    return f"host {draining['host']} {drain}: this attempt is stopped {stop}, and the workload goes back to the queue"


def no_attempt_text(state: str, final: bool) -> str:
    """What a workload without an attempt says of it (the API's ``no_attempt``, its page, ``fairway
    seff``): a pending one may still get one; a finished one (``final``) never ran, which "no
    attempt yet" did not say of a workload canceled before it started (try55, brk58)."""
    if final:
        return f"This workload ended {state} without an attempt: it never ran."
    return "This workload has no attempt yet."


def idle_words(idle: Mapping[str, Any], *, absolute: bool = False) -> str:
    """An idle attempt in a few words, on every surface (the workload page, ``fairway ls`` and
    ``show``, the ``idle`` event): ``idle for 1h 20m (GPUs < 1 % since 10:05:00 UTC)``. ``idle``:
    the API's ``idle`` object (``seconds``, ``since``, ``threshold_pct``), from ``scheduler.idle``;
    ``absolute``: the instant in full (a stored event's message)."""
    minutes = int(idle.get("seconds") or 0) // 60 * 60
    since = instant_text(idle.get("since"), absolute=absolute)
    return f"idle for {duration_text(minutes, ' ')} (GPUs < {float(idle.get('threshold_pct') or 0):g} % since {since})"


def idle_held_text(idle: Mapping[str, Any], *, absolute: bool = False) -> str:
    """:func:`idle_words` with the GPU-time held idle: ``idle for 1h 20m (GPUs < 1 % since …):
    10.67 GPU-h held idle`` (``fairway ls`` and ``show``, the workload page), written as its
    charged GPU-time is (:func:`gpu_time_text`; left60: "12.0 GPU-hours" beside "12.01 GPU-h")."""
    held = int(idle.get("gpus") or 0) * int(idle.get("seconds") or 0)
    return f"{idle_words(idle, absolute=absolute)}: {gpu_time_text(held)} held idle"


IMPACT_PER_BUDGET_MEANS = "delivered allocated GPU-hours against what was owed, min(entitlement, demand)"
"""What the metrics page's and ``fairway metrics``' impact per budget shows (``pyramid_report``'s ``budgets``)."""

NO_WORKLOADS_MATCH = "no workloads match"
"""An empty workload list: the web list's and ``fairway ls --all``'s (or with ``--state``)."""
NO_UNFINISHED_WORKLOADS = "no unfinished workloads match: `fairway ls --all` lists finished ones too"
"""An empty ``fairway ls`` of its default, the unfinished states (try50b: a bare header once all of a
researcher's work had ended, nothing saying where it went)."""
NO_PYRAMID_HOURS = (
    "no hour of this range was rolled up: the clock rolls up each hour of a cluster once it has ended,"
    " none before the cluster existed"
)
"""What the metrics page and ``fairway metrics`` say of a cluster's range with no hour to show: only
a range that ends before the current hour can be one (try50b: the page said "No hourly roll-up
yet: the clock computes one every hour.", the CLI "no hour counted yet", of a range before the
cluster existed, which no later roll-up fills)."""
AVAILABILITY_MEANS = "GPU healthy, host active, in the states at each hour's roll-up (the current hour's: now)"
"""What the pyramid's availability counts, on the metrics page and in ``fairway metrics``: sampled,
not replayed (docs/standing.md, "Availability is sampled"; try58: a host draining for the last
minutes read as unavailable for the whole hour, "45%" for a cluster up all along, unexplained)."""

NOT_MEASURED = "not measured"
"""How every surface says a figure of efficiency had no sample to come from (docs/jobs.md
"Efficiency"): never 0 %, never a dash."""


UTILIZATION_WHY = {
    "no_own_minute": (
        "its GPUs were shared with other jobs in every minute it held them",
        "so far its GPUs were shared with other jobs in every minute it held them",
    ),
    "never_started": ("never started", "never started"),  # failed_to_start: nothing of it ran (words46)
    # a server before util46 (the minutes it held whole only)
    "no_whole_minute": ("held no whole minute", "held no whole minute so far"),
}
"""Why an attempt's utilization is not measured, ended and running (the API's
``efficiency.utilization_why``, ``scheduler.efficiency``; docs/jobs.md "Efficiency"): a minute
sample is the GPU's, so a minute in which another attempt held the GPU too is not its own
(util63, util46); an attempt that ended without its agent ever starting it (``failed_to_start``)
ran nothing (words46: it read "held no whole minute"). ``no_sample`` needs no words of its own:
the "Not measured" line says the GPU-time held had no utilization reading."""


def utilization_words(value: Any, why: str | None = None, *, running: bool = False) -> str:
    """A mean GPU utilization (0..1, the API's ``efficiency.utilization``) as ``63%``, or
    :data:`NOT_MEASURED` when None, with ``why`` in words (:data:`UTILIZATION_WHY`): ``not measured
    yet (so far its GPUs were shared …)`` (``fairway history``'s column, the workload page's)."""
    if value is not None:
        return percent_text(value)
    said = UTILIZATION_WHY.get(why or "")
    if said is None:
        return NOT_MEASURED
    return f"{NOT_MEASURED} yet ({said[1]})" if running else f"{NOT_MEASURED} ({said[0]})"


NOT_MEASURED_CELL = "n/m"
""":data:`NOT_MEASURED` in a table's cell (``fairway history``'s UTIL), marked for its note under
the table, which gives :func:`utilization_words` in full (tryout47b: the cell held the whole
sentence, stretching the table to about 200 columns)."""


def utilization_cells(rows: Iterable[tuple[Any, str | None]]) -> tuple[list[str], list[str]]:
    """The cells of a table's utilization column, one per ``(utilization, utilization_why)``, and
    the notes to print under it: a measured one as :func:`utilization_words` writes it; one not
    measured as ``n/m*`` (``n/m**`` … for each other wording, in the order met) with a note
    ``n/m*: not measured (its GPUs were shared …)`` once."""
    marks: dict[str, str] = {}
    cells: list[str] = []
    for value, why in rows:
        words = utilization_words(value, why)
        if value is not None:
            cells.append(words)
            continue
        cells.append(marks.setdefault(words, NOT_MEASURED_CELL + "*" * (len(marks) + 1)))
    return cells, [f"{mark}: {words}" for words, mark in marks.items()]


def _share_words(part: float) -> str:
    """A share that is not none as a percentage that never reads as none: ``less than 1%``."""
    return "less than 1%" if 0 < part < 0.005 else percent_text(part)


def efficiency_lines(e: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The API's ``efficiency`` object (``scheduler.efficiency``) as ``(label, words)`` lines, like
    Slurm's ``seff``: ``fairway show``'s "Efficiency" block, ``fairway seff`` and the workload page."""
    held = gpu_time_text(float(e.get("gpu_hours") or 0) * 3600)  # as charged GPU-time (left60)
    gpus = int(e.get("gpus") or 0)
    if gpus:
        held += f" ({gpus} GPU{'s' if gpus != 1 else ''}"
        held += ", so far)" if e.get("running") else ")"
    said = utilization_words(e.get("utilization"), e.get("utilization_why"), running=bool(e.get("running")))
    lines = [("GPU-time held", held), ("GPU utilization", said)]
    if e.get("utilization") is not None:
        lines[-1] = ("GPU utilization", f"{lines[-1][1]} (mean over the measured GPU-time)")
    idle = e.get("idle")
    pct = float(e.get("idle_threshold_pct") or 0)
    lines.append(
        (
            "Idle minutes",
            NOT_MEASURED if idle is None else f"{_share_words(idle)} of the measured GPU-time under {pct:g} %",
        )
    )
    peak, total = e.get("memory_peak_mb"), e.get("memory_total_mb")
    if peak is None:
        memory = NOT_MEASURED
    elif total:
        memory = f"{peak / 1024:.1f} of {total / 1024:.1f} GiB ({percent_text(peak / total)})"
    else:
        memory = f"{peak / 1024:.1f} GiB"
    lines.append(("Peak GPU memory", memory))
    missing = e.get("not_measured")
    if missing:
        lines.append(
            (NOT_MEASURED.capitalize(), f"{_share_words(missing)} of the GPU-time held had no utilization reading")
        )
    return lines


RESUBMITTED_FROM = "resubmitted from"
RESUBMITTED_AS = "resubmitted as"
"""How every surface names a resubmission's origin and its copies (docs/jobs.md "Submit again"):
the page's labels, and the words of :func:`resubmitted_from_text` and :func:`resubmitted_as_text`
(left50: "again from", "submitted again from" and "resubmitted from" said one thing)."""


def resubmitted_from_text(pk: int) -> str:
    """``resubmitted from #12``: the origin of a workload submitted again from #12 (its
    ``submitted`` event, ``fairway resubmit``'s answer, ``fairway show``)."""
    return f"{RESUBMITTED_FROM} #{pk}"


def resubmitted_as_text(pks: Iterable[int]) -> str:
    """``resubmitted as #13, #14``: the workloads submitted again from one (``fairway show``)."""
    return f"{RESUBMITTED_AS} " + ", ".join(f"#{pk}" for pk in pks)


def nothing_to_change_text(pk: int) -> str:
    """``Nothing to change: #12 already asks that.``: an update whose values are the workload's own
    (no event, no new version; ``do_update_workload``), said by its web page and ``fairway update``
    (the API's ``changed: false``; left52: the CLI said "now asks …")."""
    return f"Nothing to change: #{pk} already asks that."


def group_unchanged_text(group: int, verb: str) -> str:
    """``Nothing to change: no pending member of array group 7 to hold.``: a group's ``hold``,
    ``release`` or ``update`` (``verb``) that changed no member (the API's ``changed: false``;
    left55: ``fairway hold --group`` said "0 pending members held"), as
    :func:`nothing_to_change_text` says it of one workload."""
    which = "held" if verb == "release" else "pending"
    return f"Nothing to change: no {which} member of array group {group} to {'change' if verb == 'update' else verb}."


def hold_unchanged_text(w: Mapping[str, Any], me: str) -> str:
    """What ``fairway hold`` and the workload's page say of a workload its hold changed nothing
    of (``w``: its API answer's ``hold`` and ``held_by``), held already by an admin (left51), by
    another (a user hold) or by the requester ``me`` (left53)."""
    if w.get("held_by") == me:
        return "already held by you: nothing changed"
    if w["hold"] == "admin":
        by = f" ({w['held_by']})" if w.get("held_by") else ""
        return f"already held by an admin{by}: nothing changed; only an admin may release it"
    return f"already held by {w.get('held_by') or 'its owner or a manager'} (user hold): nothing changed"


def budget_hint_text(ref: object, live_paths: Iterable[str]) -> str:
    """What to add to "No budget 'olmo'." so the person knows what to type: of ``live_paths`` (the
    paths below the root the hint may name: live budgets, and archived ones where they are read,
    the filters and statements), those whose own name, their last part, is the last
    part of ``ref`` in any case (``" Budgets are named by their path: did you mean nlp/olmo?"``),
    or "" when none is. A leaf's name alone does not resolve (``budgets.services.resolve_budget``
    walks paths from below the root), and the same name may sit under two programs. The server's
    (``budgets.services.budget_hint``) and ``fairway statement``'s (left52) one rule."""
    if not isinstance(ref, str):
        return ""
    parts = [p for p in ref.strip().strip("/").split("/") if p]
    if not parts:
        return ""
    last = parts[-1].casefold()
    paths = sorted(path for path in live_paths if path.rsplit("/", 1)[-1].casefold() == last)
    if not paths:
        return ""
    shown = " or ".join(paths[:3]) + (f" (or {len(paths) - 3} more)" if len(paths) > 3 else "")
    return f" Budgets are named by their path: did you mean {shown}?"


def unknown_budget_text(ref: str, live_paths: Iterable[str]) -> str:
    """The one sentence of an unknown budget: ``No budget 'olmo'.`` and :func:`budget_hint_text`."""
    return f"No budget {ref!r}.{budget_hint_text(ref, live_paths)}"


def boost_text(shares: int, until: Any, then_shares: int | None, now: Any = None, *, starts: Any = None) -> str:
    """A budget's temporary share as every surface shows it (the budgets page, ``fairway budgets``,
    the API's ``boost_text``, the admin): ``share 3 until Dec 20 00:00:00 UTC (then 1)``; the
    instants in :func:`~fairway_cli.numbers.instant_text`'s words. ``starts``: one not begun yet
    (the admin), ``share 3 from Dec 18 09:00:00 UTC until Dec 20 00:00:00 UTC``."""
    then = f" (then {then_shares})" if then_shares is not None else ""
    since = f" from {instant_text(starts, now)}" if starts is not None else ""
    return f"share {shares}{since} until {instant_text(until, now)}{then}"


def boost_cell(shares: int, until: Any, then_shares: int | None, now: Any = None) -> str:
    """A temporary share in a table's cell, short: ``3 → 1 @18:00`` (``@Dec 20 00:00`` another day):
    its end as :func:`boost_text` says it, to the minute. ``fairway budgets``' SHARES, whose
    footnote is the whole sentence (pages46: the sentence made the cell about 50 characters)."""
    at = instant_text(until, now)
    at = at[: -len(":00 UTC")] if at.endswith(" UTC") else at
    then = f" → {then_shares}" if then_shares is not None else ""
    return f"{shares}{then} @{at}"


LIMIT_PASSED = "already run longer: it stops at the next pass, timeout"
"""Said of a started workload whose wall-time limit was changed below the time it has run: the
``updated`` event (its ``data.passed``), ``fairway update`` and the page's message."""


def running_limit_text(limit: str, passed: bool) -> str:
    """What a change of a started workload's wall-time limit did (``limit``: the new one in the
    surface's duration words, "none" for none; ``passed``: it has run longer already, its event's
    ``data.passed``): ``fairway update`` and the page's message (brk55: neither said it stops now)."""
    return f"wall-time limit now {limit}, counted from its start" + (f" ({LIMIT_PASSED})" if passed else "")


def bulk_stopping_text(n: int, *, done: bool) -> str:
    """A bulk cancel's started work (``stopping``: ``n`` of its ids), in parentheses after its count:
    a preview's (``done`` false: they would be asked to stop) or the cancel's. Nothing of a charge:
    each attempt's funding decides it (brk55: the page's preview said "charged until then" of
    unallocated work). ``fairway cancel`` by filters and the page's bulk cancel alike."""
    if done:
        return f"({n} asked to stop: they end canceled once their GPUs are released)"
    return f"({n} started: they would be asked to stop, and end canceled once their GPUs are released)"


def occupancy_words(busy: int, gpus: int) -> str:
    """A cluster's GPUs held by attempts right now, as every surface says it (the dashboard, the
    clusters and metrics pages, the API's ``occupancy_text``): ``7 of 8 GPUs occupied (88%)``
    (words63: the three pages said it three ways)."""
    return f"{busy} of {gpus} GPU{'s' if gpus != 1 else ''} occupied ({percent_text(busy / gpus if gpus else 0.0)})"


def occupancy_now_text(o: Mapping[str, Any]) -> str:
    """A cluster's occupancy right now with its split, as the metrics page ends and ``fairway
    metrics`` says it (left51: the CLI lacked it): ``8 of 20 GPUs occupied (40%): 8 by allocated
    work (40%), 0 by unallocated work``. ``o``: the API's ``metrics/`` entry (``Occupancy.as_dict``)."""
    gpus = o.get("gpus") or 0
    allocated = o.get("allocated") or 0
    share = percent_text(allocated / gpus if gpus else 0.0)
    unallocated = o.get("unallocated") or 0
    return f"{o['occupancy_text']}: {allocated} by allocated work ({share}), {unallocated} by unallocated work"


def ordinal_text(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``11th``, ``22nd``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def rank_words(rank: int | None, siblings: int) -> str:
    """A budget's rank among its live siblings as the pages and ``fairway budgets``/``share`` show
    it: ``3rd of 3``; "" for a root or a budget without a rank (words63: the CLI printed ``3/3``)."""
    return f"{ordinal_text(rank)} of {siblings}" if rank else ""


def why_waits_text(reason: str, estimated_start: Any, unfunded: Any = False) -> str:
    """A pending workload's reason and its estimated start, as the lists (dashboard, workloads
    page) and ``fairway ls``/``wait`` write them: ``other budgets go first · by 14:05:09 UTC``
    (words63: the CLI wrote ``…; by …``), `` (unfunded)`` after it where the estimate starts it
    unfunded at its budget's downgrade cap (the API's ``estimate_unfunded``, arrayq46)."""
    if not estimated_start:
        return reason
    return f"{reason} · by {unfunded_text(instant_text(estimated_start), unfunded)}"


def standing_heading_words(cluster: str, gpus: int, window_s: int, entitled_gpu_hours: float) -> str:
    """A cluster's standing as the budgets page and ``fairway budgets``/``share`` head it:
    ``default: 20 GPUs × 7d = 3,360 GPU-h per window`` (the root's entitlement; words63: the page
    wrote "GPU-hours per window", the CLI "20 GPUs, window 7d")."""
    window = duration_text(window_s)
    return f"{cluster}: {gpus} GPUs × {window} = {gpu_hours_text(entitled_gpu_hours)} GPU-h per window"


def quote_start_text(line: Mapping[str, Any], waits_for: Iterable[int] = (), why_none: str = "") -> str:
    """A quote line's start (DESIGN.md §3.8) as the API's ``start_text``, the submit form's "Starts
    by" column and ``fairway submit --quote``'s STARTS BY write it (quote46: the form and the CLI
    each built it from the line's fields): ``now``; the estimated start, an upper bound
    (``14:05:09 UTC``); either followed by `` (unfunded)`` where the work starts at its budget's
    downgrade cap (``unfunded``: no protection, no charge; unfunded46); with no start, ``none: waits
    for #12`` (its ``after`` work not ended), ``none: <why_none>`` (the server's reason no start can
    come, ``budget nlp is on hold``), or ``none before <the search's end>``. ``line``: the API's line
    (or its fields: ``starts_now``, ``estimated_start``, ``unfunded``, ``searched_until``)."""
    if line.get("starts_now"):
        return unfunded_text("now", line.get("unfunded"))
    if line.get("estimated_start"):
        return unfunded_text(instant_text(line["estimated_start"]), line.get("unfunded"))
    if waits_for:
        return "none: waits for " + ", ".join(f"#{wid}" for wid in waits_for)
    if why_none:
        return f"none: {why_none}"
    return f"none before {instant_text(line['searched_until'])}"


def occupancy_parts_text(total: Mapping[str, Any]) -> str:
    """The pyramid's occupancy split, ``30% allocated, 36% unallocated``, in the metrics page's and
    ``fairway metrics``' one wording, beside the whole's :func:`percent_text` (``66%``). The parts
    are rounded so that they add up to the whole's percentage (largest remainder, ties to the
    first): rounded alone, 30.3% and 35.4% read "30% allocated, 35% unallocated" beside a whole of
    66% (tryout49). Where the parts are not the whole's (an older server's figures, one missing),
    each keeps its own rounding."""
    texts = [percent_text(total.get(key)) for key in ("occupancy_allocated", "occupancy_unallocated")]
    try:
        whole = float(total["occupancy"])
        values = [float(total["occupancy_allocated"]), float(total["occupancy_unallocated"])]
    except (KeyError, TypeError, ValueError):
        return f"{texts[0]} allocated, {texts[1]} unallocated"
    if abs(sum(values) - whole) < 1e-4:
        scaled = [v * 100 for v in values]
        rounded = [int(s // 1) for s in scaled]
        need = int(percent_text(whole).rstrip("%")) - sum(rounded)
        if 0 <= need <= len(rounded):
            for i in sorted(range(len(scaled)), key=lambda i: -(scaled[i] - rounded[i]))[:need]:
                rounded[i] += 1
            texts = [f"{r}%" for r in rounded]
    return f"{texts[0]} allocated, {texts[1]} unallocated"
