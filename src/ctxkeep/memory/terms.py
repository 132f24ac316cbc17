"""Words for full-text search in any script: English words as they are, Chinese (and Japanese, Korean) as bigrams.

Chinese is written without spaces, so a word tokenizer sees a whole clause as one token and a query word
never matches it. Cutting every run of CJK characters into overlapping pairs (``用户喜欢`` -> ``用户 户喜
喜欢``) finds any word of two or more characters without a dictionary: the scheme of Lucene's CJK analyzer.
SQLite's trigram tokenizer would need three characters, and most Chinese words have two.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

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


def query_terms(query: str) -> list[str]:
    """The distinct words of `query` as the index stores them, in order, at most `MAX_QUERY_TERMS`."""
    seen: dict[str, None] = {}
    for term in _terms(query):
        seen.setdefault(term, None)
    return list(seen)[:MAX_QUERY_TERMS]


def match_term(term: str) -> str:
    """An FTS5 MATCH expression for one word: quoted, so it is never FTS5 syntax; a single CJK character
    matches the pairs it starts."""
    quoted = '"' + term.replace('"', '""') + '"'
    return quoted + "*" if len(term) == 1 and _CJK_RUN.fullmatch(term) else quoted


def match_query(query: str) -> str | None:
    """An FTS5 MATCH expression that finds chunks holding any word of `query` (None when it has none)."""
    terms = query_terms(query)
    return " OR ".join(match_term(t) for t in terms) if terms else None


def is_cjk(term: str) -> bool:
    """Whether `term` is Chinese, Japanese or Korean characters (a pair or a single one)."""
    return _CJK_RUN.fullmatch(term) is not None


def content_terms(terms: list[str]) -> list[str]:
    """`terms` without the common English words ("the", "how", "we") that say nothing of what is asked;
    all of them when every one is common."""
    kept = [t for t in terms if t not in STOPWORDS]
    return kept or terms


# Words in nearly every English note: a chunk holding only these does not match the question.
_COMMON = (
    "a an and are as at be been but by can could do does did for from had has have how i if in into is it its"
    " me my of on or our so than that the their them then there these they this those to us was we were what"
    " when where which who whom why will with would you your"
)
STOPWORDS = frozenset(_COMMON.split(" "))


def stems(texts: Sequence[str]) -> list[list[str]]:
    """Each of `texts` (`index_terms` output) as the words SQLite's full-text index keeps: ``porter unicode61``
    (lower case, accents off, English stems: "packages" -> "packag"), in order. The tokenizer's own output, read
    back through ``fts5vocab``, so an index kept elsewhere (PostgreSQL) finds what the SQLite index finds."""
    import sqlite3

    out: list[list[str]] = [[] for _ in texts]
    if not texts:
        return out
    db = sqlite3.connect(":memory:")
    try:
        db.execute("CREATE VIRTUAL TABLE words USING fts5(terms, tokenize='porter unicode61')")
        db.execute("CREATE VIRTUAL TABLE temp.instances USING fts5vocab(main, words, instance)")
        db.executemany("INSERT INTO words (rowid, terms) VALUES (?, ?)", [(i + 1, t) for i, t in enumerate(texts)])
        for term, doc in db.execute("SELECT term, doc FROM temp.instances ORDER BY doc, offset"):
            out[doc - 1].append(term)
    finally:
        db.close()
    return out
