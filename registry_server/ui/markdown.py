"""Model cards as safe HTML: Markdown rendered by markdown-it-py with raw HTML disabled, then
sanitised by bleach (an allow-list of tags, attributes and URL schemes) as a second wall.

The YAML front matter (Hugging Face metadata) is not shown; the page shows the manifest itself.
Card headings move down one level, so the page keeps a single <h1> (the adapter's name).
"""

from __future__ import annotations

import re
from functools import lru_cache

import bleach
from markdown_it import MarkdownIt
from markupsafe import Markup

FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(?:.*?\r?\n)?(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)",
                          re.DOTALL)
TAGS = frozenset({"p", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "blockquote", "pre",
                  "code", "em", "strong", "s", "a", "img", "table", "thead", "tbody", "tr",
                  "th", "td", "hr", "br"})
ATTRIBUTES = {"a": ["href", "title", "rel"], "img": ["src", "alt", "title"],
              "code": ["class"], "ol": ["start"]}
PROTOCOLS = frozenset({"http", "https", "mailto"})
LINK_REL = "nofollow ugc noopener"


def strip_front_matter(text: str) -> str:
    """`text` without a leading `---` ... `---` YAML block."""
    return FRONT_MATTER.sub("", text, count=1)


_MD = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
_CLEANER = bleach.Cleaner(tags=TAGS, attributes=ATTRIBUTES, protocols=PROTOCOLS, strip=True)


@lru_cache(maxsize=256)
def render_card(text: str) -> Markup:
    """Safe HTML for a model card (cached by text: a version's card never changes)."""
    tokens = _MD.parse(strip_front_matter(text))
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(int(token.tag[1]) + 1, 6)}"
        elif token.type == "inline":
            for child in token.children or ():
                if child.type == "link_open":
                    child.attrSet("rel", LINK_REL)
    html = _MD.renderer.render(tokens, _MD.options, {})
    return Markup(_CLEANER.clean(html))
