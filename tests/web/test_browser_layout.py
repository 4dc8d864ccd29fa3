"""The pages a manager reads, in a real browser at a phone's width (390 px) and a desktop's
(1280 px): nothing overflows the viewport or its card sideways (a wide table scrolls inside its
card), every form field has a label, every page has a title, and the browser logs no error and
asks for nothing outside the server (no CDN). Playwright drives Debian's Chromium
(tests/browser.py); skipped when either is missing."""

from __future__ import annotations

from pprint import pformat
from typing import Any

from django.utils import timezone

from scheduler.estimates import store_estimates
from scheduler.models import Workload
from tests.api.fair_share_setup import olmo_waits_for_visions_protection
from tests.browser import log_in

# What a reader would find wrong on the page in front of them, as sentences.
FAULTS_JS = """() => {
  const faults = [];
  if (!document.title.trim()) faults.push('no <title>');
  const root = document.documentElement;
  if (root.scrollWidth > window.innerWidth) faults.push(`page ${root.scrollWidth}px wide`);
  const scrolls = (el) => ['auto', 'scroll', 'hidden'].includes(getComputedStyle(el).overflowX);
  for (const el of document.querySelectorAll('main *, header *')) {
    const r = el.getBoundingClientRect();
    if (!r.width) continue;
    for (let up = el.parentElement; up; up = up.parentElement) {
      if (scrolls(up)) break;
      if (up.classList.contains('panel') || up.tagName === 'HEADER' || up.tagName === 'MAIN') {
        const box = up.getBoundingClientRect();
        const name = (e) => `${e.tagName.toLowerCase()}.${e.className}`;
        if (r.right > box.right + 1) faults.push(`${name(el)} spills out of ${name(up)}`);
        break;
      }
    }
  }
  for (const el of document.querySelectorAll('input, select, textarea')) {
    if (el.type === 'hidden') continue;
    const named = el.labels.length || el.getAttribute('aria-label') || el.getAttribute('aria-labelledby');
    if (!named) faults.push(`${el.tagName.toLowerCase()} ${el.name} has no label`);
  }
  return [...new Set(faults)];
}"""


# The pyramid's chart reads at any width: a scale (0 to 100%) and its hours beside the drawing, in
# page text, a drawing that keeps its height on a phone, and the totals above it fit their card.
CHART_JS = """() => {
  const figure = document.querySelector('main figure.pyramid-chart');
  if (!figure) return ['no pyramid chart'];
  const faults = [];
  const drawing = figure.querySelector('svg').getBoundingClientRect();
  if (drawing.height < 120) faults.push(`drawing ${Math.round(drawing.height)}px tall`);
  const card = figure.closest('.panel');  // the totals above the chart wrap rather than widen their card
  if (card.scrollWidth > card.clientWidth) faults.push(`card scrolls: ${card.scrollWidth}px in ${card.clientWidth}px`);
  const text = figure.innerText;
  for (const label of ['100%', '0%', 'UTC']) if (!text.includes(label)) faults.push(`no ${label} on the chart`);
  return faults;
}"""


def test_pages_fit_phone_and_desktop_with_labels_titles_and_no_errors(
    live_server: Any,
    new_page: Any,
    researcher: Any,
    outsider: Any,
    manager: Any,
    submit_kwargs: Any,
    org_tree: Any,
    cluster: Any,
) -> None:
    waiting = olmo_waits_for_visions_protection(researcher, outsider, cluster, org_tree, submit_kwargs)
    store_estimates(cluster.pk, timezone.now())
    running = Workload.objects.filter(state="running").first()
    assert running is not None
    paths = ["/", "/workloads/", f"/workloads/{waiting.pk}/", f"/workloads/{running.pk}/", "/submit/"]
    paths += ["/budgets/", "/metrics/", "/clusters/", "/tokens/"]
    found: dict[str, list[str]] = {}
    heard: list[str] = []  # what the browser reports while a page loads
    for width in (390, 1280):
        page = new_page(viewport={"width": width, "height": 800})
        page.on("pageerror", lambda e: heard.append(f"script error: {e}"))
        # A request the next page's navigation aborts (a live panel's refresh) is no fault.
        page.on(
            "requestfailed",
            lambda r: None if r.failure == "net::ERR_ABORTED" else heard.append(f"failed request: {r.url}"),
        )
        page.on("response", lambda r: heard.append(f"{r.status}: {r.url}") if r.status >= 400 else None)
        page.on(
            "request",
            lambda r: None if r.url.startswith(live_server.url) else heard.append(f"outside: {r.url}"),
        )
        page.goto("/login/")
        found[f"{width} /login/"] = page.evaluate(FAULTS_JS)
        log_in(page, "manager")
        for path in paths:
            page.goto(path)
            found[f"{width} {path}"] = page.evaluate(FAULTS_JS) + heard[:]
            heard.clear()
        page.goto("/metrics/")
        found[f"{width} pyramid chart"] = page.evaluate(CHART_JS)
        page.click("header form[action$='/logout/'] button")
        page.wait_for_url(f"{live_server.url}/login/")
        found[f"{width} logout"] = heard[:]
        heard.clear()
        page.context.close()
    faults = {where: faults for where, faults in found.items() if faults}
    assert not faults, pformat(faults, width=120)
