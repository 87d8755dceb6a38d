"""Relative links in README.md and docs/*.md point at files and headings that exist."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / 'README.md', *sorted((ROOT / 'docs').glob('*.md'))]
_FENCE = re.compile(r'^```.*?^```', re.M | re.S)
_CODE_SPAN = re.compile(r'`[^`\n]*`')
_LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')
_HEADING = re.compile(r'^#{1,6} (.+?)\s*$', re.M)


def _prose(text: str) -> str:
    """Markdown without fenced blocks and code spans, where link syntax is literal text."""
    return _CODE_SPAN.sub('', _FENCE.sub('', text))


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, -N repeats."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in _HEADING.findall(_FENCE.sub('', path.read_text(encoding='utf-8'))):
        slug = re.sub(r'[^\w\- ]', '', heading.replace('`', '').lower()).replace(' ', '-')
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f'{slug}-{count}')
    return anchors


def _relative_links(path: Path) -> list[str]:
    return [target for target in _LINK.findall(_prose(path.read_text(encoding='utf-8')))
            if not re.match(r'[a-z][a-z0-9+.-]*:', target)]


@pytest.mark.parametrize('doc', DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    """Every relative link names an existing path and, with a #fragment, an existing heading."""
    broken = []
    for target in _relative_links(doc):
        file_part, _, fragment = target.partition('#')
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists():
            broken.append(f'{target}: no such path')
        elif fragment and dest.suffix == '.md' and fragment not in _anchors(dest):
            broken.append(f'{target}: no heading #{fragment} in {dest.relative_to(ROOT)}')
    assert not broken, f'{doc.relative_to(ROOT)}: ' + '; '.join(broken)
