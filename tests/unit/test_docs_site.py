"""The docs site: MkDocs builds it with --strict, every page of the nav is there, and it loads nothing from
outside itself (no script, style sheet, font or image from another host), so it works offline."""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


class _Loads(HTMLParser):
    """Every URL an HTML page makes the browser load: src and srcset of any element, href of <link>."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if not value:
                continue
            if name == "src" or (name == "href" and tag == "link"):
                self.urls.append(value)
            elif name == "srcset":
                self.urls += [part.split()[0] for part in value.split(",") if part.strip()]


_CSS_URL = re.compile(r"""url\(\s*['"]?([^'")\s]+)|@import\s+['"]([^'"]+)""")


def loaded_urls(path: Path) -> list[str]:
    """The URLs a page (.html) or a style sheet (.css) loads."""
    text = path.read_text(errors="replace")
    if path.suffix == ".css":
        return [a or b for a, b in _CSS_URL.findall(text)]
    parser = _Loads()
    parser.feed(text)
    return parser.urls


def is_remote(url: str) -> bool:
    """Whether loading ``url`` reaches another machine (data: URIs and relative paths do not)."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https", "ftp", "ws", "wss") or url.startswith("//"):
        return (parts.hostname or "") not in LOCAL_HOSTS
    return False


def remote_loads(site: Path) -> list[str]:
    """``file: url`` for every page or style sheet of ``site`` that loads something from elsewhere."""
    return [f"{path.relative_to(site)}: {url}" for path in sorted(site.rglob("*"))
            if path.suffix in (".html", ".css") for url in loaded_urls(path) if is_remote(url)]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(REPO / "mkdocs.yml"), "--site-dir", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}{done.stderr}"
    return out


def _nav_pages(nav: list) -> list[str]:
    pages = []
    for entry in nav:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_page_of_the_nav_is_built(site):
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    pages = _nav_pages(config["nav"])
    assert len(pages) >= 12
    missing = [p for p in pages if not (site / p).with_suffix(".html").is_file()]
    assert missing == []
    assert "Pipeline reference" in (site / "reference" / "pipeline.html").read_text()


def test_every_doc_file_is_in_the_nav():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    in_nav = set(_nav_pages(config["nav"]))
    on_disk = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert on_disk - in_nav == set()


def test_the_built_site_loads_nothing_from_another_host(site):
    pages = list(site.rglob("*.html"))
    assert len(pages) >= 12 and any(loaded_urls(p) for p in pages)  # the check saw what the pages load
    assert remote_loads(site) == []


def test_the_check_catches_a_page_or_style_sheet_that_loads_from_a_cdn(tmp_path):
    (tmp_path / "page.html").write_text(
        '<html><head><link rel="stylesheet" href="https://cdn.example/x.css">'
        '<script src="//cdn.example/x.js"></script><script src="js/local.js"></script></head>'
        '<body><a href="https://example.org/">a link is not a load</a>'
        '<img srcset="img/a.png 1x, https://img.example/b.png 2x"></body></html>')
    (tmp_path / "style.css").write_text("@font-face{src:url(https://fonts.example/f.woff2)}"
                                        "a{background:url(data:image/png;base64,AAA)}"
                                        "b{background:url('../img/grid.png')}")
    (tmp_path / "local.html").write_text('<script src="http://127.0.0.1:8080/x.js"></script>')
    assert remote_loads(tmp_path) == [
        "page.html: https://cdn.example/x.css", "page.html: //cdn.example/x.js",
        "page.html: https://img.example/b.png", "style.css: https://fonts.example/f.woff2"]
