"""Prose paragraphs of HTML pages (documentation, mail bodies): code, tables and navigation left out."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from recipes.corpus.textclean import TAG, squash

_VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
_SKIP_TAGS = frozenset({"pre", "script", "style", "nav", "code-block", "table", "head"})
_SKIP_CLASS = re.compile(r"\b(?:sphinxsidebar|related|footer|highlight|wy-nav-side|rst-footer-buttons"
                         r"|toctree-wrapper|headerlink|admonition-title)\b")


class _ProseParser(HTMLParser):
    """Collect the text of ``<p>`` elements outside code, tables, navigation and sidebars."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []
        self.paragraphs: list[str] = []
        self.cur: list[str] | None = None
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            if tag == "br" and self.cur is not None:
                self.cur.append(" ")
            return
        a = dict(attrs)
        skip = (tag in _SKIP_TAGS or bool(_SKIP_CLASS.search(a.get("class") or ""))
                or a.get("role") in ("navigation", "search", "contentinfo"))
        if tag == "p":
            self._close_p()
            if not self.skip:
                self.cur = []
        self.stack.append((tag, skip))
        self.skip += skip

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID or not any(t == tag for t, _ in self.stack):
            return
        while self.stack:
            t, skip = self.stack.pop()
            self.skip -= skip
            if t == "p":
                self._close_p()
            if t == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.cur is not None and not self.skip:
            self.cur.append(data)

    def _close_p(self) -> None:
        if self.cur is not None:
            text = squash("".join(self.cur))
            if text:
                self.paragraphs.append(text)
        self.cur = None


def html_paragraphs(markup: str) -> list[str]:
    """Prose paragraphs (``<p>`` text) of an HTML page, without code blocks, tables,
    navigation, sidebars and footers."""
    parser = _ProseParser()
    parser.feed(markup)
    parser.close()
    parser._close_p()
    return parser.paragraphs


def html_text(markup: str) -> str:
    """All text of an HTML fragment, block elements as paragraph breaks."""
    s = re.sub(r"<(script|style)\b.*?</\1\s*>", " ", markup, flags=re.S | re.I)
    s = re.sub(r"</?(?:p|div|br|tr|li|h\d|table|blockquote)\b[^>]*>", "\n\n", s, flags=re.I)
    return html.unescape(TAG.sub(" ", s))
