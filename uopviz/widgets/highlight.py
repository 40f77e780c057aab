"""Syntax highlighting of kernel sources as HTML.

Two engines: pygments (precise lexing; used for reports, when installed) and a one-pass regex
highlighter for comments, keywords, types and numbers, 20-50 times faster, which the tuner uses so
that applying an opt redraws the sources within its time budget.  Both colour like pygments'
default style, so the two look alike."""

from __future__ import annotations

import html
import re

#: backend name -> pygments lexer alias
LEXERS = {"c": "c", "opencl": "c", "cuda": "cuda", "llvm": "llvm", "python": "python", "ptx": "c"}

_FALLBACK_KEYWORDS = {
    "c": r"\b(void|int|float|double|half|bool|char|unsigned|long|for|if|else|return|const|restrict|"
    r"static|inline|struct|__kernel|__global|__local|__global__|__shared__|extern|__syncthreads|barrier)\b",
    "python": r"\b(def|return|for|in|range|if|else|elif|import|from|as|while|and|or|not|None|True|False|"
    r"lambda)\b",
    "llvm": r"\b(define|declare|ret|br|label|phi|load|store|getelementptr|add|fadd|mul|fmul|icmp|fcmp|call|"
    r"alloca|i1|i8|i32|i64|float|double|ptr|void)\b",
}


def highlight(source: str, backend: str, precise: bool = False) -> str:
    """``source`` as an HTML ``<pre>`` with inline colours for ``backend``'s language: pygments when
    ``precise`` and installed, else the fast highlighter."""
    alias = LEXERS.get(backend, "text")
    if not precise:
        return fallback_highlight(source, alias)
    try:
        from pygments import highlight as pygments_highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import get_lexer_by_name
    except ImportError:
        return fallback_highlight(source, alias)
    try:
        lexer = get_lexer_by_name(alias)
    except Exception:  # noqa: BLE001 - an unknown alias falls back to plain text
        lexer = get_lexer_by_name("text")
    formatter = HtmlFormatter(noclasses=True, nobackground=True, style="default")
    return _unwrapped(pygments_highlight(source, lexer, formatter))


#: Notebook output areas wrap <pre> text; code keeps its lines (the pane scrolls sideways instead).
PRE_STYLE = "white-space:pre;word-wrap:normal;overflow-wrap:normal;margin:0;padding:4px 0;line-height:1.35"


def _unwrapped(fragment: str) -> str:
    if '<pre style="' in fragment:
        return fragment.replace('<pre style="', f'<pre style="{PRE_STYLE};', 1)
    return fragment.replace("<pre>", f'<pre style="{PRE_STYLE}">', 1)


def fallback_highlight(source: str, language: str) -> str:
    """The fast highlighter: comments, keywords and numbers coloured as pygments' default style does."""
    keywords = _FALLBACK_KEYWORDS.get(language, _FALLBACK_KEYWORDS["c"])
    comment = (
        r"(#.*$)"
        if language == "python"
        else r"(//.*$|/\*.*?\*/|;.*$)"
        if language == "llvm"
        else r"(//.*$|/\*.*?\*/)"
    )
    token = re.compile(f"{comment}|{keywords}|(\\b\\d+(?:\\.\\d+)?(?:[eE][+-]?\\d+)?f?\\b)", re.MULTILINE)
    out, position = [], 0
    for match in token.finditer(source):
        out.append(html.escape(source[position : match.start()]))
        text = html.escape(match.group(0))
        if match.group(1):
            out.append(f'<span style="color:#3D7B7B;font-style:italic">{text}</span>')
        elif match.group(2):
            out.append(f'<span style="color:#008000;font-weight:bold">{text}</span>')
        else:
            out.append(f'<span style="color:#666666">{text}</span>')
        position = match.end()
    out.append(html.escape(source[position:]))
    return f'<pre style="{PRE_STYLE}">{"".join(out)}</pre>'
