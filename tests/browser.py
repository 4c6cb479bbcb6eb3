"""Debian's headless Chromium for the UI tests: a fresh profile, and nothing of it left running afterwards."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from processes import kill_marked, processes_with

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1400,1000")
# Every host name but loopback fails to resolve: a page reaching outside shows as a failed request.
LOOPBACK_ONLY = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost"


@contextlib.contextmanager
def chromium(tmp_path: Path, *flags: str, performance_log: bool = False) -> Iterator:
    """A selenium driver for headless Chromium with ``flags`` added; the DevTools performance log on request."""
    from selenium import webdriver  # the dev extra's selenium; chromium + chromium-driver from Debian
    from selenium.webdriver.chrome.service import Service

    for binary in (CHROMIUM, CHROMEDRIVER):
        assert Path(binary).exists(), f"{binary} missing: apt-get install -y chromium chromium-driver"
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    marker = f"TAILFILL_E2E_BROWSER={profile}"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, *flags, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    if performance_log:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    env = dict(os.environ, TAILFILL_E2E_BROWSER=str(profile), SE_OFFLINE="true", SE_AVOID_STATS="true")
    service = Service(CHROMEDRIVER, env=env, log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        with contextlib.suppress(Exception):
            driver.quit()
        deadline = time.monotonic() + 10
        while processes_with(marker.encode()) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = kill_marked(marker.encode())
        if left:
            print(f"killed leftover browser processes: {left}")
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(driver, path: Path) -> Path:
    """Save what ``driver`` shows as ``path`` (a test artefact; path printed), checked not blank."""
    assert driver.save_screenshot(str(path)), f"screenshot {path} failed"
    print(f"screenshot: {path}")
    assert path.stat().st_size > 10_000, f"{path} looks empty"
    return path
