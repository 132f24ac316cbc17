"""Exact identifiers: strings a summary must keep verbatim because nothing can rebuild them.

`find_identifiers` reads free text (paths, URLs, branches, hashes, ports, tickets, ids, error
codes); `value_identifiers` reads parsed tool-call arguments; `rank_identifiers` and
`extract_identifiers` order them, most important first; `without_redundant` leaves out those a
longer one already names. What counts as each kind, and why: docs/summarize.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

IdentifierKind: TypeAlias = Literal[
    "url", "branch", "uuid", "path", "host_port", "ticket", "hash", "number", "name", "value",
    "date", "money", "version", "region", "code", "symbol",
]  # fmt: skip
Weighted: TypeAlias = tuple[str, float]

# Names a dot file has (".env"): alone they are files, while ".py" alone is only an extension.
_DOTFILES = frozenset(
    {
        "babelrc", "bashrc", "coveragerc", "dockerignore", "editorconfig", "env", "envrc", "eslintrc", "flake8",
        "gitattributes", "gitignore", "gitmodules", "htaccess", "npmrc", "nvmrc", "prettierrc", "pylintrc", "zshrc",
    }
)  # fmt: skip
# Files with no extension that a relative path may end in ("docker/Dockerfile").
_BARE_FILES = frozenset(
    {
        "Containerfile", "Dockerfile", "Gemfile", "Jenkinsfile", "Justfile", "LICENSE", "Makefile", "Procfile",
        "README", "Rakefile", "Vagrantfile", "CODEOWNERS",
    }
)  # fmt: skip
# File extensions that make a bare name ("nginx.conf") a file rather than a word with a dot ("e.g.").
# fmt: off
KNOWN_EXTENSIONS = frozenset(
    {
        "c", "cc", "cfg", "cjs", "conf", "cpp", "cs", "css", "csv", "db", "diff", "dockerfile", "ex", "exs",
        "go", "gradle", "h", "heex", "hpp", "htm", "html", "ini", "ipynb", "java", "jpeg", "jpg", "js",
        "json", "jsonl", "jsx", "kt", "kts", "lock", "log", "lua", "md", "mdx", "mjs", "mm", "patch", "php", "pl",
        "png", "pony", "proto", "py", "pyi", "rb", "rs", "scss", "sh", "sql", "sqlite", "svelte", "svg", "swift",
        "tf", "toml", "traj", "ts", "tsx", "txt", "vue", "xml", "yaml", "yml", "zsh",
    }
    | _DOTFILES
)
# fmt: on

_CJK = "\u2e80-\u2fff\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_SEG = r"[A-Za-z0-9_.@+%=,-]+"
_LINE = r"(?::\d+(?::\d+)?)?"
_TRAILING = ".,;:!?'\"-"

# Each pattern starts with a literal or a character class, so the regex engine skips ahead to
# the places it can match; the "not preceded by" check comes right after that first character
# (a fixed-width lookbehind over it and the one before). Twice as fast as a leading lookbehind.
_X = r"[\s\S]"
# a backslash ends a URL: "\n" of text passed on escaped is not part of it
_URL = re.compile(rf"(?:https?|ftp|wss?|file)://[^\s<>\"'`\\{_CJK}]+|git@[A-Za-z0-9.-]+:[^\s<>\"'`\\{_CJK}]+")
_UUID = re.compile(
    rf"[0-9a-fA-F](?<![A-Za-z0-9_]{_X})[0-9a-fA-F]{{7}}-(?:[0-9a-fA-F]{{4}}-){{3}}[0-9a-fA-F]{{12}}(?![A-Za-z0-9_])"
)
_ANCHORED_PATH = re.compile(
    rf"[~./](?<![A-Za-z0-9_.~/\\-]{_X})(?:(?<=~)/|(?<=\.)\.?/|(?<=/)){_SEG}(?:/{_SEG})*/?{_LINE}"
)
_WINDOWS_PATH = re.compile(rf"[A-Za-z](?<![A-Za-z0-9_]{_X}):\\(?:[^\\\s:*?\"<>|{_CJK}]+\\)*[^\\\s:*?\"<>|{_CJK}]*")
_PORT_ANCHOR = re.compile(r":(?=\d{2,5}(?![0-9]))")
_HOST = re.compile(r"localhost|\d{1,3}(?:\.\d{1,3}){3}|\[[0-9A-Fa-f:]+\]|(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}")
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-")
_PORT_WORD = re.compile(r"(?:port|Port|PORT|端口号|端口)[ \t]*[:=：]?[ \t]*\d{2,5}(?![0-9])")
_EXTENSIONS = "|".join(sorted(KNOWN_EXTENSIONS, key=lambda e: (-len(e), e)))
_SEG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.@+%=,-")
# where a relative path can be: a slash after a name character, or a known extension
_RELATIVE_ANCHOR = re.compile(rf"/(?<=[A-Za-z0-9_.@+%=,-]/)|\.(?i:{_EXTENSIONS})(?![A-Za-z0-9_@+-])")
_RELATIVE_PATH = re.compile(
    rf"(?:{_SEG}(?:/{_SEG})+/?|{_SEG}/(?![A-Za-z0-9_.])"
    rf"|(?:[A-Za-z0-9_@+-][A-Za-z0-9_.@+-]*)?\.(?i:{_EXTENSIONS})(?![A-Za-z0-9_@+-])){_LINE}"
)
_TICKET_HASH = re.compile(r"#(?<![A-Za-z0-9_&#]#)\d{2,7}(?![A-Za-z0-9_])")
_TICKET_WORD = re.compile(
    r"(?:PR|MR|pull request|Pull request|Pull Request|issue|Issue|ISSUE|bug|Bug|ticket|Ticket)\s?#?\d{1,7}"
    r"(?![A-Za-z0-9_])"
)
_TICKET_KEY = re.compile(rf"[A-Z](?<![A-Za-z0-9_-]{_X})[A-Z0-9]{{1,9}}-\d{{2,7}}(?![A-Za-z0-9_-])")
_HASH = re.compile(rf"[0-9a-f](?<![A-Za-z0-9_./-]{_X})[0-9a-f]{{6,39}}(?![A-Za-z0-9_/])")
_NUMBER = re.compile(rf"[0-9](?<![A-Za-z0-9_.]{_X})\d{{5,}}(?![A-Za-z0-9_]|\.\d)")
# error codes and environment variables: COUPON_EXPIRED, GITHUB_TOKEN, $HOME, ${HOME}, and errno names
_ERRNO = "NOENT|ACCES|PERM|EXIST|NOTDIR|ISDIR|NOSPC|NOMEM|PIPE|AGAIN|ADDRINUSE|CONNREFUSED|CONNRESET|TIMEDOUT"
_NAME = re.compile(
    rf"[A-Z](?<![A-Za-z0-9_$]{_X})[A-Z0-9]*(?:_[A-Z0-9]+)+(?![A-Za-z0-9_])"
    rf"|E(?<![A-Za-z0-9_$]{_X})(?:{_ERRNO}|HOSTUNREACH|NOTFOUND)(?![A-Za-z0-9_])"
    r"|\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Z_][A-Z0-9_]+(?![A-Za-z0-9_]))"
)
# ISO dates and times: 2026-01-15, 2026-01-15T10:20:30Z, 2026-01-15 10:20
_DATE = re.compile(
    r"[12](?<![A-Za-z0-9_.:/-][12])\d{3}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
    r"(?:[T ](?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?(?![A-Za-z0-9_-])"
)
# money: $500, $1,250.00, €20, ¥300, 500 USD, 300 元
_MONEY = re.compile(
    r"[$€£¥](?<![A-Za-z0-9_$€£¥][$€£¥])\s?\d[\d,]*(?:\.\d+)?(?:\s?(?:k|K|M|bn|million|billion)\b)?"
    r"|\d(?<![A-Za-z0-9_.,]\d)[\d,]*(?:\.\d+)?\s?(?:USD|EUR|GBP|CNY|RMB|JPY|dollars|euros|元|美元|人民币)(?![A-Za-z])"
)
# versions: "Python 3.11", "node 20.1", "v1.2.3", "1.2.3", "3.11.4-rc1"
_VERSION = re.compile(
    r"(?:Python|python|Node(?:\.js)?|node|Go|Rust|rustc|Java|JDK|Ruby|PHP|Django|Flask|React|Vue|Angular|Postgres(?:QL)?"
    r"|MySQL|Redis|Ubuntu|Debian|Alpine|Elixir|Erlang/OTP|OTP|Phoenix|Rails|Kubernetes|k8s|Terraform|npm|pip|uv"
    r"|version|Version|ver\.?)\s?v?\d+(?:\.\d+)+(?:[-+][0-9A-Za-z.]+)?(?![0-9A-Za-z])"
    r"|v(?<![A-Za-z0-9_.]v)\d+(?:\.\d+){1,3}(?:[-+][0-9A-Za-z.]+)?(?![0-9A-Za-z.])"
    r"|\d(?<![A-Za-z0-9_.]\d)\d*\.\d+\.\d+(?:[-+][0-9A-Za-z.]+)?(?![0-9A-Za-z.])"
)
# cloud regions: us-east-1 (AWS), europe-west4 and us-central1-a (GCP), cn-hangzhou (Alibaba)
_REGION = re.compile(
    r"(?<![A-Za-z0-9_.-])(?:(?:us|eu|ap|sa|ca|me|af|il|mx)(?:-gov)?-(?:north|south|east|west|central"
    r"|northeast|northwest|southeast|southwest)-\d"
    r"|(?:us|europe|asia|australia|northamerica|southamerica|africa|me)-(?:north|south|east|west|central"
    r"|northeast|northwest|southeast|southwest)\d(?:-[a-f])?"
    r"|cn-(?:hangzhou|shanghai|beijing|shenzhen|qingdao|zhangjiakou|hongkong|chengdu))(?![A-Za-z0-9_-])"
)
# codes with digits: HAT136, XEWRD9, 3RK2T9, E501 (letters and digits, upper case, both kinds)
_CODE = re.compile(r"[A-Z0-9](?<![A-Za-z0-9_.$/-][A-Z0-9])[A-Z0-9]{3,11}(?![A-Za-z0-9_])(?!-\d)")
# symbols of code: CamelCase (AgentSession), lower camel (parseArgs), and calls (parse_args(), os.path.join())
_SYMBOL = re.compile(
    r"[A-Z](?<![A-Za-z0-9_$][A-Z])[a-z0-9]+(?:[A-Z][a-z0-9]+)+(?![A-Za-z0-9_])"
    r"|[a-z](?<![A-Za-z0-9_$.][a-z])[a-z0-9]+(?:[A-Z][a-z0-9]+)+(?![A-Za-z0-9_(])"
    r"|[A-Za-z_](?<![A-Za-z0-9_$.][A-Za-z_])(?:\w*_\w*|[a-z]+[A-Z]\w*|\w{2,}(?:\.[A-Za-z_]\w*)+)\(\)"
)
_BRANCH_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._/-]*[A-Za-z0-9])?"
_BRANCH_END = r"(?![A-Za-z0-9_/~^:-]|\.[A-Za-z0-9])"  # a full stop may end the sentence
_BRANCH_GIT = re.compile(
    rf"\bgit\s+(?:(?:checkout|switch)(?:\s+-[bBcC])?|branch(?:\s+-{{1,2}}[A-Za-z-]+)*|(?:merge|rebase)"
    rf"(?:\s+-{{1,2}}[A-Za-z-]+)*|(?:push|pull|fetch)(?:\s+-{{1,2}}[A-Za-z-]+)*\s+(?:origin|upstream))\s+"
    rf"({_BRANCH_NAME}){_BRANCH_END}"
)
_BRANCH_WORD = re.compile(
    # "branch main", "branch: main", "分支main"; not the "ing" of "branching"
    rf"(?:\b[Bb]ranch(?:es)?(?:[:：]\s*|\s+)|分支[:：]?\s*)(?:(`|'|\")({_BRANCH_NAME})(?=\1)|({_BRANCH_NAME}){_BRANCH_END})"
)
_NOT_BRANCHES = frozenset({"HEAD", "FETCH_HEAD", "ORIG_HEAD", "origin", "upstream"})
# fmt: off
_NOT_BRANCH_WORDS = frozenset({
    "and", "are", "but", "can", "for", "from", "has", "have", "into", "is", "its", "name", "names", "not", "off",
    "out", "that", "the", "then", "this", "to", "was", "which", "will", "with", "you", "protection", "protections",
    "rules", "list", "per", "instead", "first", "there", "here", "now", "yet", "again", "also", "only", "locally",
    "remotely", "should", "must", "would", "could", "when", "where", "while", "after", "before",
})
# fmt: on
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_WORD_CHARS = _ASCII_LETTERS | frozenset("0123456789_")

# Before a hash, on its line: words that say it names a commit.
_GIT_WORDS = re.compile(
    r"(?i)\b(?:git|commits?|committed|sha1?|hash|revert(?:ed|s)?|cherry-pick(?:ed)?|rebased?|merged?|head|rev"
    r"|parse|tag|blame|bisect|checkout|show|fixup|squash|amend(?:ed)?|reset|diff)\b|提交|哈希|版本"
)
# Right before a number: words that say it is an id, not a size, a count or a time.
_ID_WORDS = re.compile(
    r"(?i)(?:\b|_)(?:orders?|ids?|no|nr|num|number|tickets?|case|invoice|account|acct|customer|user|transaction"
    r"|txn|payment|ref|reference|confirmation|booking|reservation|request|req|job|build|run|pid|event|trace"
    r"|incident|shipment|tracking)(?:[\s_-]*(?:id|no\.?|nr|number|#))?[\s:=#'\"`*-]*(?:is\s+)?$"
    r"|(?:订单|单号|编号|工单|账号|号|号码)[\s:：]*$"
)
_CONTEXT_CHARS = 60
_CHUNK = re.compile(r"(?i)\bchunk[ _-]?id\b")
# fmt: off
# Upper-case words with digits that are names of standards, not codes; CamelCase words that are products.
_NOT_CODES = frozenset({"UTF8", "UTF16", "UTF32", "HTTP2", "HTTP3", "MP3", "MP4", "IPV4", "IPV6", "X509", "SHA1",
                        "SHA256", "SHA512", "MD5", "BASE64", "H264", "OAUTH2", "ES2015", "ES2020", "ES2022", "WIN32"})
_NOT_SYMBOLS = frozenset({"JavaScript", "TypeScript", "GitHub", "GitLab", "PostgreSQL", "MySQL", "MongoDB",
                          "YouTube", "LinkedIn", "PowerShell", "iPhone", "macOS", "WebSocket", "OpenAI", "ChatGPT",
                          "DeepSeek", "LangChain", "LangGraph", "FastAPI", "NumPy", "PyTorch", "VSCode", "README"})
# fmt: on

Finder: TypeAlias = Callable[[str], Iterator[tuple[int, str]]]


def _matches(pattern: re.Pattern[str], not_after: frozenset[str] = frozenset(), hint: str = "") -> Finder:
    """A finder for `pattern`; a match right after a character in `not_after` does not count."""

    def find(text: str) -> Iterator[tuple[int, str]]:
        if hint and hint not in text:
            return
        for m in pattern.finditer(text):
            if not (m.start() and text[m.start() - 1] in not_after):
                yield m.start(), m.group()

    return find


def _branches(text: str) -> Iterator[tuple[int, str]]:
    """Branch names after git commands that take one, or after the word "branch"."""
    if "git" in text:
        for m in _BRANCH_GIT.finditer(text):
            yield m.start(1), m.group(1)
    if "ranch" in text or "分支" in text:
        for m in _BRANCH_WORD.finditer(text):
            if m.group(2):
                yield m.start(2), m.group(2)
            elif re.search(r"[A-Za-z]", m.group(3)) and (
                re.search(r"[0-9_/-]", m.group(3)) or _named_branch(text, m.start(), m.group(3))
            ):
                yield m.start(3), m.group(3)


def _named_branch(text: str, at: int, word: str) -> bool:
    """True when a plain `word` after "branch" at `at` is a branch's name ("on branch refactor", "the
    refactor branch" is not looked at): the word is not one of the sentence's own words."""
    before = text[max(0, at - 12) : at].lower()
    return word.lower() not in _NOT_BRANCH_WORDS and len(word) >= 3 and not before.rstrip().endswith(("a", "new"))


def _host_ports(text: str) -> Iterator[tuple[int, str]]:
    """host:port, found from the colon back: far fewer colons than places a host name could start."""
    for m in _PORT_ANCHOR.finditer(text):
        colon = m.start()
        start = colon
        if start and text[start - 1] == "]":
            start = text.rfind("[", max(0, colon - 48), colon)
        else:
            while start and text[start - 1] in _HOST_CHARS:
                start -= 1
        if start < 0 or start == colon or (start and text[start - 1] in _WORD_CHARS):
            continue
        host = _HOST.fullmatch(text, start, colon)
        port = re.match(r":\d{2,5}", text[colon:])
        if host and port:
            yield start, text[start:colon] + port.group()


def _relative_paths(text: str) -> Iterator[tuple[int, str]]:
    """Relative paths and bare file names, found from a slash or an extension back to where they start."""
    end = 0
    for m in _RELATIVE_ANCHOR.finditer(text):
        if m.start() < end:
            continue
        start = m.start()
        while start and text[start - 1] in _SEG_CHARS:
            start -= 1
        if start and text[start - 1] in "~/\\$":
            continue  # part of an anchored path, found by its own pass, or of a variable
        full = _RELATIVE_PATH.match(text, start)
        if full:
            end = full.end()
            yield start, full.group()


_PASSES: tuple[tuple[IdentifierKind, Finder], ...] = (
    ("url", _matches(_URL, _WORD_CHARS)),
    ("branch", _branches),
    ("path", _matches(_ANCHORED_PATH)),
    ("path", _matches(_WINDOWS_PATH, hint=":\\")),
    ("path", _relative_paths),
    ("uuid", _matches(_UUID)),
    ("host_port", _host_ports),
    ("host_port", _matches(_PORT_WORD, _ASCII_LETTERS)),
    ("ticket", _matches(_TICKET_WORD, _ASCII_LETTERS)),
    ("ticket", _matches(_TICKET_HASH)),
    ("ticket", _matches(_TICKET_KEY)),
    ("date", _matches(_DATE)),
    ("region", _matches(_REGION)),
    ("version", _matches(_VERSION)),
    ("money", _matches(_MONEY)),
    ("hash", _matches(_HASH)),
    ("number", _matches(_NUMBER)),
    ("name", _matches(_NAME)),
    ("code", _matches(_CODE)),
    ("symbol", _matches(_SYMBOL)),
)
# A colour of CSS or a theme (#fff, #a1b2c3), not a ticket or a commit.
_COLOUR = re.compile(r"#(?:[0-9a-fA-F]{3,4}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})$")
_COLOUR_WORDS = re.compile(r"(?i)colou?r|background|fill|stroke|border|theme|style|css|rgb|hex|[:=]\s*$")
# A whole argument value that is an opaque id: letters and digits mixed, no spaces.
_VALUE_ID = re.compile(r"(?=[^\s]*[0-9])(?=[^\s]*[A-Za-z])[A-Za-z0-9][A-Za-z0-9_.:@#/+-]{2,99}")
_SHORT_VALUE = 200  # argument values longer than this are content (file text, patches), ranked lower
_LONG_VALUE_SCAN = 4_000  # and only their head is searched: the file itself keeps the rest
# Argument keys whose values are settings or measures, not ids: {"timeout": 120000}, {"model": "gpt-4o"}.
_MEASURE_KEY = re.compile(
    r"(?i)timeout|limit|offset|max|min|size|count|lines?$|length|width|height|depth|delay|sleep|wait|interval"
    r"|seconds|_ms$|bytes|tokens|budget|page|top_?k|temperature|seed|model|retries|port"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Identifier:
    """One identifier found in a text: its exact text, its kind and where it starts."""

    text: str
    kind: IdentifierKind
    start: int


def find_identifiers(text: str, *, git: bool = False) -> list[Identifier]:
    """Every identifier in `text`, in order of position, each occurrence once.

    `git` says the whole text is git's (the output of a git command), so a short hex word is a
    commit there without a git word next to it.
    """
    found: list[Identifier] = []
    claimed = bytearray(len(text))  # 1 where an earlier match took the character
    for kind, finder in _PASSES:
        for at, matched in finder(text):
            start, value = _clean(kind, matched, at)
            if not value or not _accept(kind, value, text, start, git):
                continue
            end = start + len(value)
            if 1 in claimed[start:end]:
                continue
            claimed[start:end] = b"\x01" * (end - start)
            found.append(Identifier(text=value, kind=kind, start=start))
    found.sort(key=lambda i: i.start)
    return found


def _clean(kind: str, value: str, start: int) -> tuple[int, str]:
    """Drop sentence punctuation glued to the end, a closing bracket the identifier did not open,
    and the ``a/`` or ``b/`` a diff puts before a file name."""
    if kind in ("url", "path"):
        while value and value[-1] in _TRAILING + ")]}":
            closer = value[-1]
            opener = {")": "(", "]": "[", "}": "{"}.get(closer)
            if opener and value.count(opener) >= value.count(closer):
                break
            value = value[:-1]
    if kind == "path" and value[:2] in ("a/", "b/") and "." in value.rsplit("/", 1)[-1]:
        return start + 2, value[2:]
    return start, value


def _accept(kind: str, value: str, text: str, start: int, git: bool) -> bool:
    end = start + len(value)
    if kind == "money" and _POSITIONAL.fullmatch(value):
        # "$0", and "$1" glued to a quote or a brace, are a script's arguments, not dollars
        return value != "$0" and not (text[start - 1 : start] + text[end : end + 1]).strip()
    if kind == "path":
        # "r.json()" is a method call, not a file
        return _is_path(value) and not ("/" not in value and text[end : end + 1] == "(")
    if kind == "branch":  # "git checkout a1b2c3d" names a commit, left for the hash pass
        return value not in _NOT_BRANCHES and not _is_path(value) and not re.fullmatch(r"[0-9a-f]{7,40}", value)
    if kind == "host_port":
        host = value.rsplit(":", 1)[0]
        # "main.py:12" is a file and line, left for the path pass
        return "." not in host or host.rsplit(".", 1)[-1].lower() not in KNOWN_EXTENSIONS or host[0].isdigit()
    if kind == "ticket" and value.startswith("#") and _COLOUR.match(value):
        return not _COLOUR_WORDS.search(_line_before(text, start))
    if kind == "hash":
        if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
            return False
        if start and text[start - 1] == "#" and _COLOUR.match("#" + value):
            return False  # a colour, #a1b2c3d
        before = _line_before(text, start)
        if _CHUNK.search(before):
            return False  # a chunk id of a tool's output
        return git or len(value) == 40 or bool(_GIT_WORDS.search(before))
    if kind == "code":
        letters = sum(c.isalpha() for c in value)
        glued = start and text[start - 1] == "#"  # a colour (#A1B2C3) or a ticket
        return 1 <= letters < len(value) and value not in _NOT_CODES and not glued
    if kind == "symbol":
        return len(value) >= 6 and value not in _NOT_SYMBOLS
    if kind == "number":
        return bool(_ID_WORDS.search(_line_before(text, start)))
    if kind == "name":  # ${...} is a template's placeholder, filled in elsewhere
        return len(value) >= 4 and sum(c.isalpha() for c in value) >= 3 and not value.startswith("${")
    if kind == "url":
        return len(value) > value.find("//") + 3 if "//" in value else True
    return True


_POSITIONAL = re.compile(r"\$\d")
_INTERPRETER = re.compile(r"/(?:usr/(?:local/)?)?bin/(?:env|sh|bash|zsh|dash|python[\d.]*|node|perl|ruby)")


def _line_before(text: str, start: int) -> str:
    """The text before `start` on its line, at most `_CONTEXT_CHARS` characters of it."""
    begin = max(0, start - _CONTEXT_CHARS)
    newline = text.rfind("\n", begin, start)
    return text[(newline + 1 if newline >= 0 else begin) : start]


def _is_path(value: str) -> bool:
    bare = re.sub(r"(?::\d+)+$", "", value)
    if not any(c.isalpha() for c in bare) or bare.endswith(("/", "\\")):
        return False  # 2024/05/20, 1/2; a directory ("lib/") names no file
    if bare[:2] in ("~/", "./", "..") or re.match(r"[A-Za-z]:\\", bare):
        return len(bare) > 2
    parts = bare.strip("/").split("/")
    last = parts[-1]
    ext = last.rsplit(".", 1)[-1].lower() if "." in last else ""
    has_ext = ext in KNOWN_EXTENSIONS or (
        bool(ext) and len(parts) > 1 and ext.isalnum() and len(ext) <= 8 and any(c.isalpha() for c in ext)
    )
    if bare.startswith("/"):
        if bare.startswith("/dev/") or _INTERPRETER.fullmatch(bare):
            return False  # /dev/null; /usr/bin/env of a shebang line: nothing to find again
        return len(parts) >= 2 or has_ext  # "/clear" is a slash command, "/etc/hosts" a path
    if last.startswith(".") and last.count(".") == 1:
        return last[1:].lower() in _DOTFILES  # ".env" is a file, ".py" an extension
    if len(parts) == 1:  # "Ecto.Adapters.SQL" is a module, "AGENTS.md" a file
        return ext in KNOWN_EXTENSIONS and last.rsplit(".", 1)[-1].islower() and not bare.startswith("..")
    return has_ext or last in _BARE_FILES


def value_identifiers(value: Any) -> list[tuple[Identifier, bool]]:
    """Identifiers in parsed tool-call arguments, each with whether it came from a short value.

    A short string value that is itself an opaque id (``JG7FMM``, ``credit_card_2929732``) is taken
    whole, as kind "value"; other strings are searched with `find_identifiers`; a number of six
    digits or more (an integer, or a string of digits) counts unless its key names a setting or a
    measure (``timeout``, ``limit``, ``model``). Long values (file contents, patches) are searched
    too, but flagged.
    """
    out: list[tuple[Identifier, bool]] = []
    for key, text in _strings(value):
        short = len(text) <= _SHORT_VALUE
        stripped = text.strip()
        if stripped.isdigit() and stripped.isascii():
            if len(stripped) >= 6 and not _MEASURE_KEY.search(key):
                out.append((Identifier(text=stripped, kind="number", start=text.find(stripped)), True))
            continue
        found = find_identifiers(text[:_LONG_VALUE_SCAN])
        if (
            short
            and not _MEASURE_KEY.search(key)
            and not any(i.text == stripped for i in found)
            and _VALUE_ID.fullmatch(stripped)
        ):
            found.insert(0, Identifier(text=stripped, kind="value", start=text.find(stripped)))
        out.extend((i, short) for i in found)
    return out


def _strings(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """(key, text) of every string and integer in `value`; the key is that of the nearest mapping."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, bool):
        return
    elif isinstance(value, int):
        yield key, str(value)
    elif isinstance(value, dict):
        for k, item in value.items():
            yield from _strings(item, str(k))
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item, key)


def rank_identifiers(found: Iterable[tuple[Identifier, float]], *, limit: int | None = None) -> list[str]:
    """Identifier texts, deduplicated, most important first, from (identifier, weight) pairs in the
    order they occur.

    The weight says where an occurrence is from (the summarizer gives user text and tool-call
    arguments most, then assistant text, then tool results). An identifier ranks by the best
    weight among its occurrences, then by how many there are, then by how late the last one is:
    the newest first. The same input always gives the same order.
    """
    best: dict[str, float] = {}
    count: dict[str, int] = {}
    last: dict[str, int] = {}
    for j, (ident, weight) in enumerate(found):
        best[ident.text] = max(weight, best.get(ident.text, weight))
        count[ident.text] = count.get(ident.text, 0) + 1
        last[ident.text] = j
    ranked = sorted(best, key=lambda k: (-best[k], -count[k], -last[k]))
    return ranked[:limit] if limit is not None else ranked


def extract_identifiers(texts: Iterable[str | Weighted], *, limit: int | None = None) -> list[str]:
    """The identifiers in `texts`, deduplicated, most important first (see `rank_identifiers`).

    Each text may come with a weight, ``(text, weight)``; a bare text weighs 1.0.
    """

    def occurrences() -> Iterator[tuple[Identifier, float]]:
        for entry in texts:
            text, weight = (entry, 1.0) if isinstance(entry, str) else entry
            for ident in find_identifiers(text):
                yield ident, weight

    return rank_identifiers(occurrences(), limit=limit)


_PORT_NUMBER = re.compile(r"(?:port|Port|PORT|端口号|端口)[ \t]*[:=：]?[ \t]*(\d{2,5})")


def without_redundant(texts: Iterable[str], *, known: Iterable[str] = ()) -> list[str]:
    """`texts` in order, each once, without those another text or one of `known` already names.

    A file name or a relative path is named by a longer path that ends with it (``pricing.py`` by
    ``app/services/pricing.py``), ``#482`` by ``issue #482``, ``port 8081`` by ``localhost:8081``
    (and by an earlier ``Port 8081``). An absolute path is never named by another: ``/etc/hosts``
    and ``/srv/etc/hosts`` are different files.
    """
    items = list(dict.fromkeys(texts))
    named: set[str] = set()
    ports: set[str] = set()
    for other in [*items, *known]:
        for m in re.finditer(r"[/\\ ]", other):
            named.add(other[m.end() :])
        host_port = re.search(r":(\d{2,5})$", other)
        if host_port and not _PORT_NUMBER.fullmatch(other):
            ports.add(host_port.group(1))
    out: list[str] = []
    for item in items:
        port = _PORT_NUMBER.fullmatch(item)
        if port:
            if port.group(1) in ports:
                continue
            ports.add(port.group(1))  # "Port 8081" after "port 8081"
        elif item in named and not item.startswith(("/", "~")):
            continue
        out.append(item)
    return out
