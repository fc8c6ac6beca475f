"""User text inside Streamlit's Markdown, shown as the characters typed and never interpreted.

``st.markdown``, ``st.info`` and friends render Markdown: a description such as ``**bold**`` would be
bold, and ``![](http://host/pixel.png)`` would make every browser that opens the page fetch that
image. Every ASCII punctuation character may be backslash-escaped in CommonMark, so escaping them
all leaves nothing for the renderer to act on (links, images, emphasis, headings, HTML, maths) but
bare URLs, which GitHub-flavoured Markdown links after resolving escapes: those get a zero-width space.
"""

from __future__ import annotations

import html
import re

_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


_AUTOLINK = re.compile(r"(?i)\b(https?|ftp)(?=://)|\b(www)(?=\.)|(?=@)")
"""Where GitHub-flavoured Markdown would turn bare text into a link (``http://…``, ``www.…``, ``a@b.c``):
it does so after escapes are resolved, so backslashes alone do not stop it."""


def plain(text: object) -> str:
    """``text`` escaped so Streamlit's Markdown shows it literally, on one line. A zero-width space
    breaks each would-be autolink (the text reads the same), and every punctuation character is escaped."""
    text = _AUTOLINK.sub(lambda m: (m.group(0) or "") + "\u200b", " ".join(str(text).split()))
    return _PUNCTUATION.sub(r"\\\1", text)


def chart_text(text: object) -> str:
    """``text`` for a Plotly label or title: Plotly renders a subset of HTML there (``<a href>``, ``<b>``,
    ``<span style>``), so ``<``, ``>`` and ``&`` become entities and the text shows as typed."""
    return html.escape(str(text), quote=False)
