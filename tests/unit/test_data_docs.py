"""Data Docs work offline: every script, stylesheet and image a page loads is a file of the site itself."""

from __future__ import annotations

import re

import pandas as pd

from tailfill.proof.data_docs import SITE_ASSETS, make_offline, offline_page
from tailfill.proof.expectations import run_suites

# What a page loads: <script src>, <link href> (stylesheets, icons), <img src>.
LOADED = re.compile(r"""<(?:script|link|img)\b[^>]*?\b(?:src|href)\s*=\s*["']([^"']*)["']""", re.IGNORECASE)


def _frames() -> list[tuple[str, str, pd.DataFrame]]:
    ranges = pd.DataFrame({
        "partition": ["t[0]"], "range": ["[0, 10)"], "expected": [10], "rows": [10], "quarantined": [0],
        "lost": [0], "absent": [0], "found": [10], "distinct": [10], "duplicates": [0], "missing": [0],
        "outside": [0], "first_ok": [True], "last_ok": [True], "complete": [True]})
    return [("run_completeness", "run_ranges", ranges),
            ("table_tiling", "tiling", pd.DataFrame({"partition": ["t[0]"]}))]  # fails: columns missing


def test_built_pages_load_only_files_of_the_site(tmp_path):
    _, _, index = run_suites(tmp_path, _frames(), "r1")
    site = index.parent
    pages = sorted(site.rglob("*.html"))
    assert {p.relative_to(site).parts[0] for p in pages} >= {"index.html", "expectations", "validations"}

    for page in pages:
        text = page.read_text()
        assert "dataContextId" not in text and "great-expectations-web-assets" not in text, page
        loaded = LOADED.findall(text)
        assert any(url.endswith(f"{SITE_ASSETS}/css/bootstrap.min.css") for url in loaded), page
        for url in loaded:
            target = (page.parent / url).resolve()
            assert target.is_relative_to(site.resolve()) and target.is_file(), f"{page.relative_to(site)}: {url}"
    assert "great-expectations-web-assets" not in (site / "static/styles/data_docs_default_styles.css").read_text()
    assert (site / SITE_ASSETS / "NOTICE.md").is_file() and (site / SITE_ASSETS / "licenses/jquery.txt").is_file()


def test_a_second_build_leaves_the_pages_as_they_were(tmp_path):
    _, _, index = run_suites(tmp_path, _frames(), "r1")
    before = {p: p.read_text() for p in index.parent.rglob("*.html")}

    make_offline(index.parent)

    assert {p: p.read_text() for p in index.parent.rglob("*.html")} == before


def test_an_unknown_outside_resource_is_dropped_and_named():
    page = ('<link rel="stylesheet" href="https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"/>\n'
            '<script src="https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js" '
            'integrity="sha384-x" crossorigin="anonymous"></script>\n'
            '<script src="//cdn.example.com/new.js"></script>\n<img src="http://example.com/pixel.gif">\n'
            '<a href="https://greatexpectations.io">Great Expectations</a>')

    text, dropped = offline_page(page, "../")

    assert dropped == ["//cdn.example.com/new.js", "http://example.com/pixel.gif"]
    assert text == ('<link rel="stylesheet" href="../static/tailfill/css/bootstrap.min.css"/>\n'
                    '<script src="../static/tailfill/js/bootstrap.min.js"></script>\n\n\n'
                    '<a href="https://greatexpectations.io">Great Expectations</a>')  # a link is not a fetch


def test_a_validation_builds_its_own_pages_and_the_index_lists_the_newest(tmp_path, monkeypatch):
    """A run's validation renders its pages and the index, never an earlier run's page again (its cost does not
    grow with the runs before it); the index lists the newest ``INDEX_LIMIT`` validations; every page is offline."""
    from tailfill.proof import expectations

    monkeypatch.setattr(expectations, "INDEX_LIMIT", 4, raising=False)  # two runs of two suites
    for run in ("r1", "r2", "r3"):
        _, _, index = run_suites(tmp_path, _frames(), run)
    site = index.parent
    earlier = {p: (p.stat().st_mtime_ns, p.read_text()) for p in (site / "validations").rglob("*.html")}
    assert len(earlier) == 6  # two suites, three runs

    run_suites(tmp_path, _frames(), "r4")

    pages = {p: (p.stat().st_mtime_ns, p.read_text()) for p in (site / "validations").rglob("*.html")}
    assert {p: v for p, v in pages.items() if p in earlier} == earlier  # not one earlier page rewritten
    new = [p for p in pages if p not in earlier]
    assert len(new) == 2 and all(p.relative_to(site).parts[2] == "r4" for p in new), new
    text = index.read_text()
    assert "r4" in text and "r3" in text and "r2" not in text and "r1" not in text
    for page in [index, *new]:
        assert all(not url.startswith(("http:", "https:", "//")) for url in LOADED.findall(page.read_text())), page
