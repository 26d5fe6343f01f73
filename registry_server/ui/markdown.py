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


# Sections of the card `hub bundle` writes that the adapter page shows beside it, better
# (facts, metric tiles and chart, heatmap, the "Use it" panel with the real namespace).
SHOWN_ELSEWHERE = frozenset({"model details", "validation metrics", "layer ablation",
                             "how to use"})
LICENSE = re.compile(r"^license:[ \t]*['\"]?([^'\"\r\n#]+?)['\"]?[ \t]*$", re.MULTILINE)


def card_license(text: str) -> str | None:
    """The `license:` of a card's YAML front matter, if it has one."""
    front = FRONT_MATTER.match(text or "")
    found = LICENSE.search(front.group(0)) if front else None
    return found.group(1).strip() if found else None


@lru_cache(maxsize=256)
def render_card(text: str, skip: frozenset[str] = frozenset()) -> Markup:
    """Safe HTML for a model card (cached by text: a version's card never changes), without
    the level-2 sections titled (any case) as in `skip`. Tables and code blocks scroll inside
    a keyboard-focusable box, so a phone can reach all of them."""
    tokens = _drop_sections(_MD.parse(strip_front_matter(text)), skip)
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(int(token.tag[1]) + 1, 6)}"
        elif token.type == "inline":
            for child in token.children or ():
                if child.type == "link_open":
                    child.attrSet("rel", LINK_REL)
    html = _CLEANER.clean(_MD.renderer.render(tokens, _MD.options, {}))
    # After cleaning, so the wrapper and tabindex are ours, never the card author's.
    html = (html.replace("<table>", '<div class="table-scroll" tabindex="0" role="region" '
                                    'aria-label="Table from the model card"><table>')
            .replace("</table>", "</table></div>").replace("<pre>", '<pre tabindex="0">'))
    return Markup(html)


def _drop_sections(tokens: list, skip: frozenset[str]) -> list:
    """`tokens` without each `## Title` section (up to the next # or ## heading) in `skip`."""
    if not skip:
        return tokens
    kept, dropping = [], False
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.tag in ("h1", "h2"):
            title = tokens[i + 1].content.strip().lower()
            dropping = token.tag == "h2" and title in skip
        if not dropping:
            kept.append(token)
    return kept
