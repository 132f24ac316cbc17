"""Exact identifiers: strings a summary must keep verbatim because nothing can rebuild them.

`find_identifiers` reads free text; the kinds are matched in this order, and a kind matched
earlier claims its characters, so a hash or a UUID inside a path is not found again on its own:

    url        https://example.com/a?b=1   git@github.com:owner/repo.git
    path       /etc/nginx/nginx.conf  ~/x  ./a/b  C:\\x\\y  src/a.py:12  a/b/c  nginx.conf  src/
               (relative paths need an extension, two slashes or a trailing slash; a bare file
               name needs a known extension; "/clear" alone is a slash command, not a path)
    uuid       019b7f04-0b04-7cd3-b739-bfa632f7459e
    host_port  localhost:8080  10.0.0.1:5432  db.internal:6379  [::1]:8080  port 3000  端口8080
    ticket     #123  PR 45  issue #7  PROJ-123
    hash       a1b2c3d  (7 to 40 lowercase hex digits, at least one digit and one letter)
    number     1234567  (six digits or more)

Boundaries are ASCII-only: CJK characters count as word characters for ``\\b``, so an identifier
glued to Chinese text (``请修改/etc/nginx/nginx.conf第3行``) would otherwise be missed or swallow
its neighbours. `value_identifiers` reads parsed tool-call arguments, where a whole short value
such as ``JG7FMM`` or ``mia_li_3668`` is an identifier too. `extract_identifiers` and
`rank_identifiers` order them, most important first.
`command_paths` finds the files a shell command reads or writes (``cat X``, ``sed -i X``, ``> X``).

`command_head` is the identifying part of a shell command, what a summary keeps verbatim when it has
no room for the whole command: the command itself when it is one line of at most
`COMMAND_HEAD_CHARS` characters; else its first line, cut to that many characters. For a heredoc
(``git commit -m "$(cat <<'EOF'`` ... ``EOF``) that is the line that starts it; the body is
message or file text, kept whole in the archive.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

__all__ = [
    "COMMAND_HEAD_CHARS",
    "KNOWN_EXTENSIONS",
    "Identifier",
    "IdentifierKind",
    "Weighted",
    "command_head",
    "command_paths",
    "extract_identifiers",
    "find_identifiers",
    "rank_identifiers",
    "value_identifiers",
]

IdentifierKind: TypeAlias = Literal["url", "uuid", "path", "host_port", "ticket", "hash", "number", "value"]
Weighted: TypeAlias = tuple[str, float]

# File extensions that make a bare name ("nginx.conf") a file rather than a word with a dot ("e.g.").
# fmt: off
KNOWN_EXTENSIONS = frozenset(
    {
        "c", "cc", "cfg", "cjs", "conf", "cpp", "cs", "css", "csv", "db", "diff", "dockerfile", "env", "ex", "exs",
        "gitignore", "go", "gradle", "h", "heex", "hpp", "htm", "html", "ini", "ipynb", "java", "jpeg", "jpg", "js",
        "json", "jsonl", "jsx", "kt", "kts", "lock", "log", "lua", "md", "mdx", "mjs", "mm", "patch", "php", "pl",
        "png", "pony", "proto", "py", "pyi", "rb", "rs", "scss", "sh", "sql", "sqlite", "svelte", "svg", "swift",
        "tf", "toml", "traj", "ts", "tsx", "txt", "vue", "xml", "yaml", "yml", "zsh",
    }
)
# fmt: on

# How much a kind counts when ranking, so a URL named once outranks a long number named once.
_KIND_WEIGHT: dict[str, float] = {
    "url": 1.0,
    "uuid": 1.0,
    "path": 1.0,
    "host_port": 1.0,
    "ticket": 0.9,
    "hash": 0.8,
    "value": 0.8,
    "number": 0.5,
}

_CJK = "\u2e80-\u2fff\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_SEG = r"[A-Za-z0-9_.@+%=,-]+"
_LINE = r"(?::\d+(?::\d+)?)?"
_TRAILING = ".,;:!?'\"-"

# Each pattern starts with a literal or a character class, so the regex engine skips ahead to
# the places it can match; the "not preceded by" check comes right after that first character
# (a fixed-width lookbehind over it and the one before). Twice as fast as a leading lookbehind.
_X = r"[\s\S]"
_URL = re.compile(rf"(?:https?|ftp|wss?|file)://[^\s<>\"'`{_CJK}]+|git@[A-Za-z0-9.-]+:[^\s<>\"'`{_CJK}]+")
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
_PORT_WORD = re.compile(r"(?:port|Port|PORT|端口号|端口)\s*[:=：]?\s*\d{2,5}(?![0-9])")
_EXTENSIONS = "|".join(sorted(KNOWN_EXTENSIONS, key=lambda e: (-len(e), e)))
_SEG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.@+%=,-")
# where a relative path can be: a slash after a name character, or a known extension
_RELATIVE_ANCHOR = re.compile(rf"/(?<=[A-Za-z0-9_.@+%=,-]/)|\.(?i:{_EXTENSIONS})(?![A-Za-z0-9_@+-])")
_RELATIVE_PATH = re.compile(
    rf"(?:{_SEG}(?:/{_SEG})+/?|{_SEG}/(?![A-Za-z0-9_.])"
    rf"|(?:[A-Za-z0-9_@+-][A-Za-z0-9_.@+-]*)?\.(?i:{_EXTENSIONS})(?![A-Za-z0-9_@+-])){_LINE}"
)
_TICKET_HASH = re.compile(r"#(?<![A-Za-z0-9_&#]#)\d{1,7}(?![A-Za-z0-9_])")
_TICKET_WORD = re.compile(
    r"(?:PR|MR|pull request|Pull request|Pull Request|issue|Issue|ISSUE|bug|Bug|ticket|Ticket)\s?#?\d{1,7}"
    r"(?![A-Za-z0-9_])"
)
_TICKET_KEY = re.compile(rf"[A-Z](?<![A-Za-z0-9_-]{_X})[A-Z0-9]{{1,9}}-\d{{2,7}}(?![A-Za-z0-9_-])")
_HASH = re.compile(rf"[0-9a-f](?<![A-Za-z0-9_./-]{_X})[0-9a-f]{{6,39}}(?![A-Za-z0-9_/])")
_NUMBER = re.compile(rf"[0-9](?<![A-Za-z0-9_.]{_X})\d{{5,}}(?![A-Za-z0-9_]|\.\d)")
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_WORD_CHARS = _ASCII_LETTERS | frozenset("0123456789_")

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
        if start and text[start - 1] in "~/\\":
            continue  # part of an anchored path, found by its own pass
        full = _RELATIVE_PATH.match(text, start)
        if full:
            end = full.end()
            yield start, full.group()


_PASSES: tuple[tuple[IdentifierKind, Finder], ...] = (
    ("url", _matches(_URL, _WORD_CHARS)),
    ("path", _matches(_ANCHORED_PATH)),
    ("path", _matches(_WINDOWS_PATH, hint=":\\")),
    ("path", _relative_paths),
    ("uuid", _matches(_UUID)),
    ("host_port", _host_ports),
    ("host_port", _matches(_PORT_WORD, _ASCII_LETTERS)),
    ("ticket", _matches(_TICKET_WORD, _ASCII_LETTERS)),
    ("ticket", _matches(_TICKET_HASH)),
    ("ticket", _matches(_TICKET_KEY)),
    ("hash", _matches(_HASH)),
    ("number", _matches(_NUMBER)),
)
# A whole argument value that is an opaque id: letters and digits mixed, no spaces.
_VALUE_ID = re.compile(r"(?=[^\s]*[0-9])(?=[^\s]*[A-Za-z])[A-Za-z0-9][A-Za-z0-9_.:@#/+-]{2,99}")
_SHORT_VALUE = 200  # argument values longer than this are content (file text, patches), ranked lower
_LONG_VALUE_SCAN = 4_000  # and only their head is searched: the file itself keeps the rest


@dataclass(frozen=True, kw_only=True, slots=True)
class Identifier:
    """One identifier found in a text: its exact text, its kind and where it starts."""

    text: str
    kind: IdentifierKind
    start: int


def find_identifiers(text: str) -> list[Identifier]:
    """Every identifier in `text`, in order of position, each occurrence once."""
    found: list[Identifier] = []
    claimed = bytearray(len(text))  # 1 where an earlier match took the character
    for kind, finder in _PASSES:
        for at, matched in finder(text):
            start, value = _clean(kind, matched, at)
            if not value or not _accept(kind, value):
                continue
            end = start + len(value)
            if 1 in claimed[start:end]:
                continue
            claimed[start:end] = b"\x01" * (end - start)
            found.append(Identifier(text=value, kind=kind, start=start))
    found.sort(key=lambda i: i.start)
    return found


def _clean(kind: str, value: str, start: int) -> tuple[int, str]:
    """Drop sentence punctuation glued to the end, and a closing bracket the identifier did not open."""
    if kind in ("url", "path"):
        while value and value[-1] in _TRAILING + ")]}":
            closer = value[-1]
            opener = {")": "(", "]": "[", "}": "{"}.get(closer)
            if opener and value.count(opener) >= value.count(closer):
                break
            value = value[:-1]
    return start, value


def _accept(kind: str, value: str) -> bool:
    if kind == "path":
        return _is_path(value)
    if kind == "host_port":
        host = value.rsplit(":", 1)[0]
        # "main.py:12" is a file and line, left for the path pass
        return "." not in host or host.rsplit(".", 1)[-1].lower() not in KNOWN_EXTENSIONS or host[0].isdigit()
    if kind == "hash":
        return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
    if kind == "url":
        return len(value) > value.find("//") + 3 if "//" in value else True
    return True


def _is_path(value: str) -> bool:
    bare = re.sub(r"(?::\d+)+$", "", value)
    if not any(c.isalpha() for c in bare):
        return False  # 2024/05/20, 1/2
    if bare[:2] in ("~/", "./", "..") or re.match(r"[A-Za-z]:\\", bare):
        return len(bare) > 2
    if bare.endswith("/") and not bare.startswith("/"):
        return True  # "src/": a directory
    parts = bare.strip("/").split("/")
    last = parts[-1]
    ext = last.rsplit(".", 1)[-1].lower() if "." in last else ""
    has_ext = ext in KNOWN_EXTENSIONS or (bool(ext) and len(parts) > 1 and ext.isalnum() and len(ext) <= 8)
    if bare.startswith("/"):
        return len(parts) >= 2 or has_ext  # "/clear" is a slash command, "/etc/hosts" a path
    if len(parts) == 1:
        return ext in KNOWN_EXTENSIONS and not bare.startswith("..")
    return has_ext or len(parts) >= 3 or bare.endswith("/")


def value_identifiers(value: Any) -> list[tuple[Identifier, bool]]:
    """Identifiers in parsed tool-call arguments, each with whether it came from a short value.

    A short string value that is itself an opaque id (``JG7FMM``, ``credit_card_2929732``) is taken
    whole, as kind "value"; other strings are searched with `find_identifiers`; integers of six
    digits or more count. Long values (file contents, patches) are searched too, but flagged.
    """
    out: list[tuple[Identifier, bool]] = []
    for text in _strings(value):
        short = len(text) <= _SHORT_VALUE
        found = find_identifiers(text[:_LONG_VALUE_SCAN])
        stripped = text.strip()
        if short and not any(i.text == stripped for i in found) and _VALUE_ID.fullmatch(stripped):
            found.insert(0, Identifier(text=stripped, kind="value", start=text.find(stripped)))
        out.extend((i, short) for i in found)
    return out


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool):
        return
    elif isinstance(value, int):
        if abs(value) >= 100_000:
            yield str(value)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def rank_identifiers(found: Iterable[tuple[Identifier, float]], *, limit: int | None = None) -> list[str]:
    """Identifier texts, deduplicated, most important first, from (identifier, weight) pairs.

    An identifier scores the sum of the weights of its occurrences, times a weight for its kind
    (a long number counts half). Ties keep the order of first appearance, so the same input always
    gives the same order.
    """
    score: dict[str, float] = {}
    for ident, weight in found:
        score[ident.text] = score.get(ident.text, 0.0) + weight * _KIND_WEIGHT[ident.kind]
    ranked = sorted(score, key=lambda k: -score[k])  # sorted() is stable: ties stay in first-seen order
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


# --- shell commands ----------------------------------------------------------------------

_READERS = frozenset({"cat", "head", "tail", "less", "more", "nl", "bat", "sed", "view", "wc", "tac"})
_OPTIONS_WITH_VALUE = {"head": {"-n", "-c"}, "tail": {"-n", "-c"}, "sed": {"-e", "-f"}, "nl": {"-b", "-w", "-s"}}
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"})
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_NOT_A_FILE = re.compile(r"[*?\[\]{}$`]|^-|^&|^/dev/")

# Room for a command with a few paths on it; dozens of these still fit in a summary.
COMMAND_HEAD_CHARS = 200


def command_head(command: str) -> str:
    """The identifying part of a shell command, a verbatim prefix of it (see the module docstring).

    ``command_head("ls -la")`` is ``"ls -la"``; a multi-line or longer command gives its first line,
    cut to `COMMAND_HEAD_CHARS` characters.
    """
    first = command.strip().split("\n", 1)[0].rstrip()
    return first[:COMMAND_HEAD_CHARS].rstrip()


def command_paths(command: str) -> tuple[list[str], list[str]]:
    """Files a shell command reads and files it writes, as written in the command.

    Reads: the file arguments of ``cat``, ``head``, ``tail``, ``less``, ``nl``, ``wc`` and ``sed``
    (without ``-i``). Writes: ``>``/``>>`` targets, ``tee`` arguments, ``sed -i`` files, ``touch``.
    Globs, variables and options are left out; a command that cannot be split gives nothing.
    """
    read: list[str] = []
    written: list[str] = []
    for words in _simple_commands(_without_heredoc_bodies(command)):
        _scan(words, read, written)
    return _unique(read), _unique(written)


def _without_heredoc_bodies(command: str) -> str:
    lines = command.split("\n")
    out: list[str] = []
    waiting: list[str] = []
    for line in lines:
        if waiting:
            if line.strip() == waiting[0]:
                waiting.pop(0)
            continue
        out.append(line)
        waiting.extend(m.group(2) for m in _HEREDOC.finditer(line))
    return "\n".join(_HEREDOC.sub(" ", line) for line in out)


def _simple_commands(command: str) -> list[list[str]]:
    # a newline ends a command like ";" does (a newline inside quotes only changes text we skip)
    command = command.replace("\\\n", " ").replace("\n", " ; ")
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return []  # unbalanced quotes: better no files than wrong ones
    commands: list[list[str]] = [[]]
    for token in tokens:
        if token in _SEPARATORS:
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def _scan(words: list[str], read: list[str], written: list[str]) -> None:
    args: list[str] = []
    redirects: list[str] = []  # written after the command's own files, as they usually come last
    i = 0
    while i < len(words):
        word = words[i]
        if word in (">", ">>", ">|", "&>", "&>>") and i + 1 < len(words):
            target = words[i + 1]
            if not target.startswith("&") and _looks_like_file(target):
                redirects.append(target)
            i += 2
            continue
        if word in ("<", "<<<") and i + 1 < len(words):
            if word == "<" and _looks_like_file(words[i + 1]):
                read.append(words[i + 1])
            i += 2
            continue
        if re.fullmatch(r"\d?>&?\d?|\d?>>|\d", word):
            i += 1
            continue
        args.append(word)
        i += 1
    while args and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", args[0]):
        args = args[1:]  # FOO=1 cmd
    name = args[0].rsplit("/", 1)[-1] if args else ""
    if name in ("sudo", "time", "command", "exec", "env") and len(args) > 1:
        _scan(args[1:], read, written)
    elif name in ("tee", "touch"):
        written.extend(a for a in args[1:] if _looks_like_file(a) and not a.startswith("-"))
    elif name in _READERS:
        files, in_place = _file_operands(name, args[1:])
        (written if in_place else read).extend(files)
    written.extend(redirects)


def _file_operands(name: str, args: list[str]) -> tuple[list[str], bool]:
    takes_value = _OPTIONS_WITH_VALUE.get(name, set())
    in_place = False
    script_given = False
    operands: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg.startswith("-") and arg != "-":
            if name == "sed" and (arg.startswith("-i") or arg == "--in-place"):
                in_place = True
            if name == "sed" and arg in ("-e", "-f"):
                script_given = True
            if arg in takes_value:
                skip = True
            continue
        if arg and "\n" not in arg:  # `sed -i ''` (macOS) passes an empty suffix
            operands.append(arg)
    if name == "sed" and not script_given and operands:
        operands = operands[1:]  # the first operand is the script
    return [o for o in operands if _looks_like_file(o)], in_place


def _looks_like_file(word: str) -> bool:
    return bool(word) and not _NOT_A_FILE.search(word) and any(c.isalnum() for c in word)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
