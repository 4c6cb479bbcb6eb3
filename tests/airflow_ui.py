"""The Airflow UI in headless Chromium for the end-to-end tests (with the ``browser`` and ``shot`` fixtures of
``tests/conftest.py``): logging in, filling and submitting a DAG's trigger form, and waiting for a page or a plugin
tab (an iframe) to show some text."""

from __future__ import annotations

__all__ = ["frame_refresh", "frame_text", "login", "open_trigger_form", "page_text", "set_field",
           "submit_trigger_form", "wait_for_tab", "wait_for_text"]


def login(browser, airflow) -> None:
    """Log in through the simple auth manager's page (the UI redirects to it: a lookup during that
    navigation is tried again)."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 45, ignored_exceptions=(WebDriverException,))
    browser.get(airflow.url + "/")
    wait.until(ec.visibility_of_element_located((By.NAME, "username"))).send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys("admin")
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(lambda d: "/auth/login" not in d.current_url)


def open_trigger_form(browser, airflow, dag_id: str, field: str):
    """Open the params form of ``dag_id`` (the DAG page's Trigger button); its input named ``field`` (a param's
    ``element_<name>``) once it shows."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 45)
    browser.get(f"{airflow.url}/dags/{dag_id}")
    wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "[data-testid=trigger-dag-button]"))).click()
    return wait.until(ec.visibility_of_element_located((By.NAME, field)))


def set_field(browser, field, value: str) -> None:
    """Replace what the form's input ``field`` holds by ``value`` (then Tab), and wait until it holds it."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    field.click()
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(value, Keys.TAB)
    WebDriverWait(browser, 45).until(lambda d: field.get_attribute("value") == value)


def submit_trigger_form(browser) -> None:
    """Submit the open params form once its button is enabled (``AirflowServer.new_runs`` finds the run)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    submit = browser.find_element(By.CSS_SELECTOR, "[data-testid=trigger-dag-submit]")
    WebDriverWait(browser, 45).until(lambda d: submit.is_enabled())
    submit.click()


def page_text(browser) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.TAG_NAME, "body").text


def wait_for_text(browser, shot, name: str, *texts: str, timeout: float = 60) -> str:
    """Wait until the page shows every one of ``texts``, then screenshot it as ``name``.

    On timeout the screenshot is taken all the same and the error quotes what the page showed.
    """
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(browser, timeout).until(lambda d: all(t in page_text(d) for t in texts))
    except TimeoutException:
        path = shot(f"{name}-timeout")
        raise AssertionError(f"{browser.current_url} did not show {texts} within {timeout:.0f} s (see {path}):\n"
                             f"{page_text(browser)[:3000]}") from None
    shot(name)
    return page_text(browser)




def _in_frame(browser, read, *texts: str):
    """``read(browser)`` inside the first iframe of the page (a plugin tab) showing every one of ``texts``, or None."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    for frame in browser.find_elements(By.TAG_NAME, "iframe"):
        try:
            browser.switch_to.frame(frame)
            if all(t in page_text(browser) for t in texts):
                return read(browser)
        except WebDriverException:
            continue
        finally:
            browser.switch_to.default_content()
    return None


def frame_text(browser, *texts: str) -> str | None:
    """The text of the first iframe of the page (a plugin tab) showing every one of ``texts``, or None."""
    return _in_frame(browser, page_text, *texts)


def wait_for_tab(browser, shot, name: str, *texts: str, timeout: float = 60) -> str:
    """Wait until a plugin tab (an iframe of the Airflow UI) shows every one of ``texts``; screenshot the page."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        text = WebDriverWait(browser, timeout).until(lambda d: frame_text(d, *texts))
    except TimeoutException:
        path = shot(f"{name}-timeout")
        frames = frame_text(browser) or "(no iframe)"
        raise AssertionError(f"{browser.current_url}: no tab showed {texts} within {timeout:.0f} s (see {path}):\n"
                             f"{page_text(browser)[:1500]}\n--- iframe:\n{frames[:1500]}") from None
    shot(name)
    return text


def frame_refresh(browser, *texts: str) -> tuple[str | None, int] | None:
    """Of the first iframe showing every one of ``texts``: its ``<body data-refresh>`` and how many
    ``<meta http-equiv=refresh>`` it holds (the tab's own timers); None when no iframe shows them."""
    from selenium.webdriver.common.by import By

    def read(frame) -> tuple[str | None, int]:
        return (frame.find_element(By.TAG_NAME, "body").get_attribute("data-refresh"),
                len(frame.find_elements(By.CSS_SELECTOR, 'meta[http-equiv="refresh" i]')))

    return _in_frame(browser, read, *texts)
