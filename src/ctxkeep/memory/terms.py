"""Words for full-text search in any script: English words as they are, Chinese (and Japanese, Korean) as bigrams.

Chinese is written without spaces, so a word tokenizer sees a whole clause as one token and a query word
never matches it. Cutting every run of CJK characters into overlapping pairs (``用户喜欢`` -> ``用户 户喜
喜欢``) finds any word of two or more characters without a dictionary: the scheme of Lucene's CJK analyzer.
SQLite's trigram tokenizer would need three characters, and most Chinese words have two.
"""

from __future__ import annotations

import re

# Han, kana, Hangul, and the CJK compatibility range: scripts written without spaces between words.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+", re.UNICODE)
_CJK_RUN = re.compile(rf"[{_CJK}]+")
# A query of hundreds of words is a pasted document, not a question: its first words are enough.
MAX_QUERY_TERMS = 64


def index_terms(text: str) -> str:
    """`text` as the words the full-text index stores, separated by spaces."""
    return " ".join(_terms(text))


def _terms(text: str) -> list[str]:
    out: list[str] = []
    for token in _TOKEN.findall(text):
        if _CJK_RUN.fullmatch(token):
            out.extend(token[i : i + 2] for i in range(max(1, len(token) - 1)))
        else:
            out.append(token.lower())
    return out


def match_query(query: str) -> str | None:
    """An FTS5 MATCH expression that finds chunks holding any word of `query` (None when it has none).

    Each word is quoted, so nothing in a query is FTS5 syntax; a single CJK character matches the pairs it
    starts.
    """
    seen: dict[str, None] = {}
    for term in _terms(query):
        seen.setdefault(term, None)
    terms = list(seen)[:MAX_QUERY_TERMS]
    if not terms:
        return None
    parts = []
    for term in terms:
        quoted = '"' + term.replace('"', '""') + '"'
        parts.append(quoted + "*" if len(term) == 1 and _CJK_RUN.fullmatch(term) else quoted)
    return " OR ".join(parts)
