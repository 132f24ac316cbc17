"""Shell commands as a summary reads them: the files a command reads and writes (`command_paths`), what
each of its commands runs on (`command_targets`), and its identifying part (`command_head`).

Commands are split with `shlex`; heredoc bodies are left out (they are message or file text), and
a command that cannot be split gives nothing rather than wrong files.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

_READERS = frozenset({"cat", "head", "tail", "less", "more", "nl", "bat", "sed", "view", "wc", "tac"})
_OPTIONS_WITH_VALUE = {"head": {"-n", "-c"}, "tail": {"-n", "-c"}, "sed": {"-e", "-f"}, "nl": {"-b", "-w", "-s"}}
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"})
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_NOT_A_FILE = re.compile(r"[*?\[\]{}$`]|^-|^&|^/dev/")
_WRAPPERS = frozenset({"sudo", "time", "command", "exec", "env", "nohup"})
_SUBCOMMAND = re.compile(r"[a-z][a-z0-9_-]*(?::[a-z0-9_-]+)*")

# Programs whose exit status 1 answers "no" (no line matched, the test is false, the files differ, no such
# program or process), not "it failed": their errors exit 2 or more. `git diff` only with --quiet/--exit-code.
_QUESTIONS = frozenset({
    "grep", "egrep", "fgrep", "zgrep", "rg", "ag", "ack", "git grep", "test", "[", "[[", "diff", "cmp", "which",
    "type", "pgrep", "pidof", "git diff",
})  # fmt: skip
_EXIT_CODE_OPTIONS = frozenset({"--quiet", "--exit-code", "-q"})

# Room for a command with a few paths on it; dozens of these still fit in a summary.
COMMAND_HEAD_CHARS = 200


def command_head(command: str) -> str:
    """The identifying part of a shell command, a verbatim prefix of it: what a summary keeps when it has no
    room for the whole command (a heredoc's body is message or file text, kept whole in the archive).

    ``command_head("ls -la")`` is ``"ls -la"``; a multi-line or longer command gives its first line,
    cut to `COMMAND_HEAD_CHARS` characters.
    """
    first = command.strip().split("\n", 1)[0].rstrip()
    return first[:COMMAND_HEAD_CHARS].rstrip()


def asks_yes_or_no(command: str) -> bool:
    """True when one of the commands of `command` (a pipe's filters included) is a question whose exit status
    1 means "no": ``grep``/``rg`` that matched nothing, ``test``/``[``, ``diff``/``cmp`` of files that differ,
    ``which``/``command -v``/``type`` of no such program, ``pgrep`` of no such process, ``git diff --quiet``.
    Such a command's exit 1 is an answer, not a failure; a command that cannot be split is not one."""
    for words, _ in _simple_commands(_without_heredoc_bodies(command)):
        args = _arguments(words)[0]
        while len(args) > 1 and args[0].rsplit("/", 1)[-1] in _WRAPPERS - {"command"}:
            args = _arguments(args[1:])[0]
        if not args:
            continue
        name = args[0].rsplit("/", 1)[-1]
        if name == "command" and "-v" in args[1:2]:
            return True
        if name == "git" and len(args) > 1:
            name = f"git {args[1]}"
            if name == "git diff" and not _EXIT_CODE_OPTIONS & set(args[2:]):
                continue
        if name in _QUESTIONS:
            return True
    return False


def command_paths(command: str) -> tuple[list[str], list[str]]:
    """Files a shell command reads and files it writes, as written in the command.

    Reads: the file arguments of ``cat``, ``head``, ``tail``, ``less``, ``nl``, ``wc`` and ``sed``
    (without ``-i``). Writes: ``>``/``>>`` targets, ``tee`` arguments, ``sed -i`` files, ``touch``.
    Globs, variables and options are left out; a command that cannot be split gives nothing.
    """
    read: list[str] = []
    written: list[str] = []
    for words, _ in _simple_commands(_without_heredoc_bodies(command)):
        _scan(words, read, written)
    return _unique(read), _unique(written)


def command_targets(command: str) -> list[tuple[str, frozenset[str]]]:
    """What each command of a shell command line runs on, as (program, operands).

    The program is the command's name with the subcommand right after it (``git push``, ``ruff
    check``, ``mix test``); the operands are the other words that are not options, redirections or
    variable settings (an option's value counts: ``-m msg``). ``cd`` and the filters a pipe feeds
    (``| tail -20``) are left out; a command that cannot be split gives ``[]``::

        command_targets("cd /repo && pytest -x tests/a.py 2>&1 | tail -5")  # [("pytest", {"tests/a.py"})]
    """
    out: list[tuple[str, frozenset[str]]] = []
    for words, piped in _simple_commands(_without_heredoc_bodies(command)):
        args = _arguments(words)[0]
        while len(args) > 1 and args[0].rsplit("/", 1)[-1] in _WRAPPERS:
            args = _arguments(args[1:])[0]
        if piped or not args or args[0] == "cd":
            continue
        program, rest = args[0], args[1:]
        if rest and _SUBCOMMAND.fullmatch(rest[0]):
            program, rest = f"{program} {rest[0]}", rest[1:]
        out.append((program, frozenset(a for a in rest if not (a.startswith("-") and a != "-"))))
    return out


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


def _simple_commands(command: str) -> list[tuple[list[str], bool]]:
    """The words of each simple command, and whether a pipe feeds it."""
    # a newline ends a command like ";" does (a newline inside quotes only changes text we skip)
    command = command.replace("\\\n", " ").replace("\n", " ; ")
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return []  # unbalanced quotes: better no files than wrong ones
    commands: list[tuple[list[str], bool]] = [([], False)]
    for token in tokens:
        if token in _SEPARATORS:
            commands.append(([], token in ("|", "|&")))
        else:
            commands[-1][0].append(token)
    return [c for c in commands if c[0]]


def _arguments(words: list[str]) -> tuple[list[str], list[str], list[str]]:
    """A simple command's words without redirections and leading ``VAR=value`` settings; then the
    files it reads with ``<`` and those it writes with ``>``."""
    args: list[str] = []
    read: list[str] = []
    written: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word in (">", ">>", ">|", "&>", "&>>") and i + 1 < len(words):
            target = words[i + 1]
            if not target.startswith("&") and _looks_like_file(target):
                written.append(target)
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
    return args, read, written


def _scan(words: list[str], read: list[str], written: list[str]) -> None:
    args, redirect_read, redirects = _arguments(words)
    read.extend(redirect_read)
    name = args[0].rsplit("/", 1)[-1] if args else ""
    if name in _WRAPPERS and len(args) > 1:
        _scan(args[1:], read, written)
    elif name in ("tee", "touch"):
        written.extend(a for a in args[1:] if _looks_like_file(a) and not a.startswith("-"))
    elif name in _READERS:
        files, in_place = _file_operands(name, args[1:])
        (written if in_place else read).extend(files)
    written.extend(redirects)  # after the command's own files, as they usually come last


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
