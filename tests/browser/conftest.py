"""A real server and Debian's Chromium driven by Playwright, one of each per test module.

Chromium comes from apt (./dev installs it); Playwright never downloads a browser here.
"""

from __future__ import annotations

import html
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from playwright.sync_api import Browser, Frame, Page, ViewportSize, sync_playwright

from app.db import SessionFactory, create_db_engine, create_session_factory
from app.integrations.framing import CACHE_SECONDS
from app.integrations.platforms import add_platform
from app.main import create_app
from app.settings import Settings
from tests.app.conftest import REPO
from tests.conftest import ScopeDatabase
from tests.servers import HTTP_TIMEOUT_SECONDS, app_in_thread

CHROMIUM = os.environ.get("LOOPGRADE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # One renderer process for every site. Driven by Playwright, a frame whose navigations
    # move it between processes (the LMS's frame: the tool's site, the LMS's own login page,
    # the tool again) now and then never sends its next request: 9 of 40 runs of that flow
    # stalled so, none of 40 with this switch, none of 25 in Chromium without Playwright.
    # Process isolation is no part of what these tests check (cookies, frames, pages are).
    "--disable-site-isolation-trials",
]
SCREENSHOTS = Path(os.environ.get("LOOPGRADE_SCREENSHOTS", REPO / "build" / "screenshots"))
DESKTOP: ViewportSize = {"width": 1280, "height": 860}
PHONE: ViewportSize = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def server_settings(
    tmp_path_factory: pytest.TempPathFactory, scope_database: ScopeDatabase
) -> Iterator[Settings]:
    """The module's server's settings, on a database of the module's own. No pool of its own:
    the app grades through the session's shared warm pool (tests/conftest.py), not a pool per
    module whose two zygotes import torch (seconds of CPU each)."""
    data_dir = tmp_path_factory.mktemp("browser") / "data"
    with scope_database(data_dir) as database_url:
        yield Settings(data_dir=data_dir, database_url=database_url, sandbox_pool_size=0)


@pytest.fixture(scope="module")
def module_sessions(server_settings: Settings) -> Iterator[SessionFactory]:
    engine = create_db_engine(server_settings.database_url)
    yield create_session_factory(engine)
    engine.dispose()


@pytest.fixture(scope="module")
def base_url(server_settings: Settings) -> Iterator[str]:
    """The app served by uvicorn on a free 127.0.0.1 port, for the whole module."""
    with app_in_thread(create_app(server_settings)) as url:
        yield url


# One Chromium for the whole package (each test opens a context of its own): a launch costs a
# second or more of CPU. Not the session's: tests/lti starts a Playwright of its own, and two
# in one thread refuse each other.
@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: 'apt-get install chromium' (./dev test does)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(autouse=True)
def contexts_closed_after_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """What a test opened in the package's Chromium goes with the test, as it went with the
    module's Chromium: a renderer per context left open would stay until the package ends."""
    browser = request.getfixturevalue("browser") if "browser" in request.fixturenames else None
    yield
    if browser is not None:
        for context in browser.contexts:
            context.close()


def new_page(browser: Browser, base_url: str, *, phone: bool = False) -> Page:
    context = browser.new_context(
        base_url=base_url,
        viewport=PHONE if phone else DESKTOP,
        is_mobile=phone,
        has_touch=phone,
        accept_downloads=True,
    )
    context.set_default_timeout(15_000)
    return context.new_page()


def signed_in_page(
    browser: Browser, base_url: str, email: str, password: str, *, phone: bool = False
) -> Page:
    """A new page (its own context) signed in through the sign-in form, on the home page."""
    page = new_page(browser, base_url, phone=phone)
    page.goto("/sign-in")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base_url}/")
    return page


def wait_until_framing_allowed(app_url: str, origin: str) -> None:
    """The app reads the registered platforms for its frame-ancestors at most every
    CACHE_SECONDS: a platform added behind its back (here straight into the database) may
    frame it only once the app has read them again, and a refused frame is not retried."""
    deadline = time.monotonic() + 6 * CACHE_SECONDS
    policy = ""
    while time.monotonic() < deadline:
        policy = httpx.get(f"{app_url}/", timeout=HTTP_TIMEOUT_SECONDS).headers.get(
            "content-security-policy", ""
        )
        if origin in policy:
            return
        time.sleep(0.5)
    raise AssertionError(f"the app's pages never named {origin} in frame-ancestors: {policy}")


@contextmanager
def framing_lms(app_url: str, sessions: SessionFactory) -> Iterator[str]:
    """An LMS on another loopback origin, registered as a platform, whose page
    `/frame?src=PATH` frames PATH of the app as an LMS frames a tool; yields its origin once
    the app may be framed by it."""
    lms = FastAPI()

    @lms.get("/frame", response_class=HTMLResponse)
    def frame(src: str) -> str:
        return (
            '<!doctype html><html lang="en"><title>LMS</title><main><h1>LMS</h1>'
            f'<iframe title="loopgrade" src="{html.escape(app_url + src)}" '
            'width="900" height="700"></iframe></main></html>'
        )

    with app_in_thread(lms) as origin:
        with sessions.begin() as session:
            add_platform(
                session,
                issuer=origin,
                client_id="loopgrade",
                deployment_ids=["1"],
                auth_url=f"{origin}/auth",
                token_url=f"{origin}/token",
                jwks_url=f"{origin}/jwks",
            )
        wait_until_framing_allowed(app_url, origin)
        yield origin


def screenshot(page: Page, name: str) -> Path:
    """A full-page screenshot under build/screenshots (or $LOOPGRADE_SCREENSHOTS), to look at."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


AXE_SOURCE = (Path(__file__).parent / "assets" / "axe.min.js").read_text(encoding="utf-8")
# axe-core's tags for the WCAG 2.0, 2.1 and 2.2 success criteria at levels A and AA.
WCAG_22_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]


def assert_no_axe_violations(page: Page | Frame) -> None:
    """axe-core finds no WCAG 2.2 A/AA violation on the page (or frame) as it is now.

    axe is evaluated through the DevTools protocol, which the page's Content-Security-Policy
    (scripts from 'self' only) does not govern; the app never serves it.
    """
    page.evaluate(AXE_SOURCE)
    violations = page.evaluate(
        """async (tags) => {
          const result = await axe.run(document, {runOnly: {type: 'tag', values: tags}});
          return result.violations.map(v => ({
            id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 5).map(n => n.target.join(' ') + ': ' + n.failureSummary),
          }));
        }""",
        WCAG_22_AA,
    )
    assert violations == [], f"{page.url}: axe-core found WCAG 2.2 AA violations: {violations}"


def assert_accessible_basics(page: Page) -> None:
    """axe-core finds nothing (WCAG 2.2 AA), and more: every visible form control has a label;
    the page has one h1; nothing overflows sideways."""
    assert_no_axe_violations(page)
    problems = page.evaluate(
        """() => {
          const out = [];
          for (const el of document.querySelectorAll('input, select, textarea')) {
            if (el.type === 'hidden') continue;
            const labelled = (el.labels && el.labels.length) || el.getAttribute('aria-label')
              || el.getAttribute('aria-labelledby');
            if (!labelled) out.push('unlabelled ' + el.tagName + ' ' + (el.name || el.id));
          }
          const h1 = document.querySelectorAll('h1').length;
          if (h1 !== 1) out.push(h1 + ' h1 elements');
          const root = document.documentElement;
          if (root.scrollWidth > root.clientWidth + 1)
            out.push('wider than the viewport: ' + root.scrollWidth + ' > ' + root.clientWidth);
          return out;
        }"""
    )
    assert problems == [], f"{page.url}: {problems}"


# Every live region's text as it changes ([aria-live] other than "off", and the roles that are
# live by themselves), including regions added later: what a screen reader would say unasked.
RECORD_ANNOUNCEMENTS = """() => {
  window.loopgradeAnnouncements = [];
  const live = '[aria-live]:not([aria-live="off"]), [role="status"], [role="alert"], [role="log"]';
  const said = new Map();
  const listen = () => {
    for (const region of document.querySelectorAll(live)) {
      const text = region.textContent.replace(/\\s+/g, ' ').trim();
      if (said.get(region) === text) continue;
      said.set(region, text);
      if (text) window.loopgradeAnnouncements.push((region.id || region.tagName) + ': ' + text);
    }
  };
  for (const region of document.querySelectorAll(live)) {
    said.set(region, region.textContent.replace(/\\s+/g, ' ').trim());
  }
  new MutationObserver(listen).observe(document.body, {
    subtree: true, childList: true, characterData: true, attributes: true,
  });
}"""


def record_announcements(page: Page | Frame) -> None:
    """From now on, note each live region's new text (read them with `announcements`)."""
    page.evaluate(RECORD_ANNOUNCEMENTS)


def announcements(page: Page | Frame) -> list[str]:
    """The live regions' texts since `record_announcements`, as "<region id>: <text>"."""
    return list(page.evaluate("window.loopgradeAnnouncements"))
