"""The docs/ site and the README's links (issue 30 item 5): `mkdocs build --strict` fails on a broken link, a missing
anchor or a page left out of the nav, and every relative link in README.md names a file (and heading) that exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import markdown
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def nav_pages(nav: list) -> list[str]:
    """Every page file the mkdocs.yml nav names, in order (nested sections flattened)."""
    pages: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages.extend(nav_pages(value) if isinstance(value, list) else [value])
    return pages


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (fenced code skipped, so a `# comment` there is no heading)."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    return {github_slug(m) for m in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, flags=re.M)}


def relative_links(path: Path) -> list[str]:
    """href/src targets of a Markdown file as rendered (links in code are text, not links), external ones left out."""
    html = markdown.markdown(path.read_text(), extensions=["tables", "fenced_code"])
    targets = re.findall(r'(?:href|src)="([^"]*)"', html)
    return [t for t in targets if not urlsplit(t).scheme and not t.startswith("//")]


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_exists():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    listed = nav_pages(config["nav"])
    on_disk = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(listed) == on_disk, f"not in nav: {set(on_disk) - set(listed)}; missing: {set(listed) - set(on_disk)}"
    assert len(listed) == len(set(listed)), "a page is listed twice"


def test_mkdocs_strict_build_has_no_broken_link(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(REPO / "mkdocs.yml"),
                             "-d", str(tmp_path / "site")], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").is_file()


def test_every_relative_link_in_the_readme_points_at_an_existing_file_and_heading():
    readme = REPO / "README.md"
    broken = []
    for target in relative_links(readme):
        parts = urlsplit(target)
        file = (REPO / unquote(parts.path)).resolve() if parts.path else readme
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(REPO) if file.is_relative_to(REPO) else file}")
        elif parts.fragment and file.suffix == ".md" and parts.fragment not in headings(file):
            broken.append(f"{target}: no heading #{parts.fragment} in {file.relative_to(REPO)}")
    assert not broken, "\n".join(broken)


def test_link_checks_catch_a_broken_link(tmp_path):
    """The README checker itself: a missing file and a missing heading are found, a good link passes."""
    page = tmp_path / "page.md"
    page.write_text("# A title: here\n\n[ok](#a-title-here) [gone](nope.md) [web](https://example.org) `[c](x.md)`\n")
    assert relative_links(page) == ["#a-title-here", "nope.md"]
    assert headings(page) == {"a-title-here"}
