"""Offline Data Docs: Great Expectations' pages pointed at local copies of what they load from the internet.

GE 1.24.1 writes pages that load bootstrap, jQuery, bootstrap-table, Font Awesome … from public CDNs
and its logo from S3 with the context's id (a tracking request); offline they render unstyled with an
empty validations list. :func:`make_offline` copies the files in ``data_docs_assets/`` (sources and
licences in its NOTICE.md) into the site and rewrites every page to use them. Any other outside
script, stylesheet or image is dropped, so a page requests nothing outside the site.
"""

from __future__ import annotations

import logging
import re
import shutil
from importlib import resources
from pathlib import Path

ASSETS = "data_docs_assets"  # beside this module, installed as package data
SITE_ASSETS = "static/tailfill"  # where the copies go inside a Data Docs site
LOGO = "static/images/logo-long.png"  # GE copies its own logo there

# Each outside resource GE 1.24.1 writes, and the copies that replace it (none: dropped, as the vega
# trio is: only chart-drawing expectations use it, and Tailfill's suites have none).
LOCAL: dict[str, tuple[str, ...]] = {
    "https://code.jquery.com/jquery-3.7.1.min.js": ("js/jquery.min.js",),
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": ("js/popper.min.js",),
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": ("css/bootstrap.min.css",),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": ("js/bootstrap.min.js",),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": ("css/bootstrap-table.min.css",),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": ("js/bootstrap-table.min.js",),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js":
        ("js/bootstrap-table-filter-control.min.js",),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css":
        ("css/bootstrap-table-filter-control.min.css",),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css":
        ("css/bootstrap-table-filter-control.min.css",),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css":
        ("css/bootstrap-datepicker.min.css",),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js":
        ("js/bootstrap-datepicker.min.js",),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css":
        ("css/bootstrap-prefers-dark.min.css",),
    # The pages use solid icons only (``fas``): the core and solid stylesheets, not all five fonts.
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css":
        ("css/fontawesome.min.css", "css/solid.min.css"),
    "https://cdn.jsdelivr.net/npm/vega@5": (),
    "https://cdn.jsdelivr.net/npm/vega-lite@5": (),
    "https://cdn.jsdelivr.net/npm/vega-embed@6": (),
}

GE_IMAGE = re.compile(r"https://great-expectations-web-assets\.s3[^\"')\s]*")  # logos, one with dataContextId
TAG = re.compile(r"<(?P<tag>script|link|img)\b(?P<attrs>[^>]*)>(?P<close>\s*</script>)?", re.IGNORECASE)
URL_ATTR = re.compile(r"""\b(?:src|href)\s*=\s*["'](?P<url>[^"']*)["']""", re.IGNORECASE)
CHECKS = re.compile(r"""\s(?:integrity|crossorigin)\s*=\s*["'][^"']*["']""", re.IGNORECASE)
OUTSIDE = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)
MTIME_SLACK_S = 2.0  # a file's time may lag the clock by up to a tick of the file system: older by less still counts
SITE_STATIC = re.compile(r"^(?:\.\./|\./)*static/")  # GE counts the depth wrong for some (a validation's favicon)

log = logging.getLogger(__name__)


def assets_dir() -> Path:
    """The vendored CSS/JS/fonts shipped with tailfill (a real folder: the package is installed unzipped)."""
    return Path(str(resources.files("tailfill.proof") / ASSETS))


def offline_page(text: str, to_root: str) -> tuple[str, list[str]]:
    """``text`` (a page or stylesheet ``to_root`` below the site root, e.g. ``"../../"``) using local copies.

    Returns the new text and the outside URLs dropped because no copy stands in for them.
    """
    dropped: list[str] = []
    text = GE_IMAGE.sub(to_root + LOGO, text)

    def local(match: re.Match) -> str:
        attrs = match["attrs"]
        found = URL_ATTR.search(attrs)
        if not found:
            return match[0]
        url = found["url"]
        if SITE_STATIC.match(url):
            return match[0].replace(url, SITE_STATIC.sub(f"{to_root}static/", url), 1)
        if not OUTSIDE.match(url):
            return match[0]
        if url not in LOCAL:
            dropped.append(url)
        attrs = CHECKS.sub("", attrs)  # integrity/crossorigin: a file:// page could not load the copy with them
        close = match["close"] or ""
        return "\n".join(f"<{match['tag']}{attrs.replace(url, f'{to_root}{SITE_ASSETS}/{copy}')}>{close}"
                         for copy in LOCAL.get(url, ()))

    return TAG.sub(local, text), dropped


def make_offline(site: Path, since: float | None = None) -> None:
    """Copy the vendored assets into the Data Docs ``site`` and point every page (and GE's stylesheets) at them;
    with ``since`` (a time), only the files written since then (a build rewrites the pages it built, the index
    and GE's stylesheets), so that the pages of earlier builds are not read again."""
    shutil.copytree(assets_dir(), site / SITE_ASSETS, dirs_exist_ok=True)
    for path in [*site.rglob("*.html"), *(site / "static" / "styles").glob("*.css")]:
        if since is not None and path.stat().st_mtime < since - MTIME_SLACK_S:
            continue
        before = path.read_text(encoding="utf-8")
        after, dropped = offline_page(before, "../" * (len(path.relative_to(site).parts) - 1))
        if dropped:
            log.warning("Data Docs %s: dropped outside resources with no local copy: %s", path, ", ".join(dropped))
        if after != before:
            path.write_text(after, encoding="utf-8")
