"""Data Docs in headless Chromium that cannot resolve any host but loopback: styled, populated, nothing outside.

The docs are built by the real validation path (``run_suites``), served from a loopback HTTP server,
and opened in Debian's Chromium. Every request the pages make (DevTools performance log and the
Resource Timing entries) must go to that server. Screenshots are written under the test's tmp_path.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest
from browser import LOOPBACK_ONLY, chromium, screenshot

from tailfill.proof.expectations import run_suites

pytestmark = pytest.mark.integration


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@pytest.fixture
def docs_site(tmp_path) -> Iterator[str]:
    """Data Docs of one passing and one failing suite, served on a free loopback port; the base URL."""
    ranges = pd.DataFrame({
        "partition": ["t[0]", "t[1]"], "range": ["[0, 10)", "[0, 5)"], "expected": [10, 5], "rows": [10, 5],
        "quarantined": [0, 0], "lost": [0, 0], "absent": [0, 0], "found": [10, 5], "distinct": [10, 5],
        "duplicates": [0, 0], "missing": [0, 0], "outside": [0, 0], "first_ok": [True, True],
        "last_ok": [True, True], "complete": [True, True]})
    frames = [("run_completeness", "run_ranges", ranges),
              ("table_tiling", "tiling", pd.DataFrame({"partition": ["t[0]"]}))]  # fails: columns missing
    _, _, index = run_suites(tmp_path / "ge", frames, "offline-r1")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(index.parent)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _requests(driver, base: str) -> list[str]:
    """URLs the pages under ``base`` asked for since the last call: DevTools' view and the page's Resource Timing.

    The browser's own pages (its new-tab page at start) are not ours: requests are kept by the document
    that made them.
    """
    sent = (json.loads(e["message"])["message"] for e in driver.get_log("performance"))
    asked = [m["params"]["request"]["url"] for m in sent
             if m["method"] == "Network.requestWillBeSent" and m["params"].get("documentURL", "").startswith(base)]
    return asked + driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")


def _assert_local_and_styled(driver, base: str) -> None:
    asked = _requests(driver, base)
    outside = sorted({u for u in asked if not u.startswith((base, "data:"))})
    assert not outside, f"{driver.current_url} reached outside: {outside}"
    assert any(u.endswith("/static/tailfill/css/bootstrap.min.css") for u in asked), asked
    # bootstrap's .sticky-top and Font Awesome's solid font, from the local copies
    assert driver.execute_script("return getComputedStyle(document.querySelector('nav.navbar')).position") == "sticky"
    assert driver.execute_script("return document.fonts.check('900 16px \"Font Awesome 6 Free\"')")
    logo = driver.execute_script("const i = document.querySelector('.navbar-brand img'); "
                                 "return [i.src, i.naturalWidth]")
    assert logo[0].startswith(base) and logo[1] > 0, logo


def test_data_docs_render_offline_with_only_local_requests(docs_site, tmp_path):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    rows_css = ".bootstrap-table tbody tr.clickable-row[data-href*='validations/']"
    # bootstrap-table may draw the table more than once: rows found in one drawing go stale in the next,
    # so each look at them reads them afresh, and a look that meets a stale row is simply repeated.
    settled = partial(WebDriverWait, timeout=20, ignored_exceptions=(StaleElementReferenceException,))

    def row_texts(d) -> list[str]:
        return [r.text for r in d.find_elements(By.CSS_SELECTOR, rows_css)]

    def open_tiling(d) -> bool:
        next(r for r in d.find_elements(By.CSS_SELECTOR, rows_css) if "tiling" in r.text).find_element(
            By.TAG_NAME, "td").click()
        return True

    with chromium(tmp_path, LOOPBACK_ONLY, performance_log=True) as driver:
        driver.get(docs_site + "index.html")
        # bootstrap-table (local JS) turns the index's data into clickable rows, one per validation
        texts = settled(driver).until(row_texts, "the validations list stayed empty: bootstrap-table did not run")
        screenshot(driver, tmp_path / "data-docs-index.png")
        assert len(texts) == 2, texts  # one per suite run
        assert all("offline-r1" in t for t in texts), texts
        _assert_local_and_styled(driver, docs_site)

        settled(driver).until(open_tiling)
        WebDriverWait(driver, 20).until(lambda d: "/validations/tailfill_table_tiling/" in d.current_url)
        WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "table tbody tr"))
        screenshot(driver, tmp_path / "data-docs-validation.png")
        _assert_local_and_styled(driver, docs_site)
        assert driver.find_elements(By.CSS_SELECTOR, "i.fas.fa-times"), "the failed expectations' marks are missing"
