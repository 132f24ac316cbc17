"""Exact identifiers: found verbatim (also glued to Chinese text), ranked deterministically; files of commands."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkeep.messages import Message, ToolCall, ToolResult
from ctxkeep.summarize.facts.collect import collect_facts
from ctxkeep.summarize.facts.identifiers import (
    Identifier,
    extract_identifiers,
    find_identifiers,
    rank_identifiers,
    value_identifiers,
    without_redundant,
)
from ctxkeep.summarize.facts.shell import COMMAND_HEAD_CHARS, command_head, command_paths, command_targets


def found(text: str) -> list[tuple[str, str]]:
    return [(i.text, i.kind) for i in find_identifiers(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see https://example.com/a?b=1, then", [("https://example.com/a?b=1", "url")]),
        ("(docs at https://x.org/p_(a))", [("https://x.org/p_(a)", "url")]),
        ("clone git@github.com:owner/repo.git now", [("git@github.com:owner/repo.git", "url")]),
        ("id 019b7f04-0b04-7cd3-b739-bfa632f7459e.", [("019b7f04-0b04-7cd3-b739-bfa632f7459e", "uuid")]),
        ("edit /etc/nginx/nginx.conf.", [("/etc/nginx/nginx.conf", "path")]),
        ("in ~/x/y and ./b/c and ../up/z.md", [("~/x/y", "path"), ("./b/c", "path"), ("../up/z.md", "path")]),
        ("at src/a.py:12 and main.tsx:3:4", [("src/a.py:12", "path"), ("main.tsx:3:4", "path")]),
        ("open nginx.conf, AGENTS.md and .env", [("nginx.conf", "path"), ("AGENTS.md", "path"), (".env", "path")]),
        ("see docker/Dockerfile and src/a/b.rs", [("docker/Dockerfile", "path"), ("src/a/b.rs", "path")]),
        ("--- a/app/timeutil.py\n+++ b/app/timeutil.py", [("app/timeutil.py", "path"), ("app/timeutil.py", "path")]),
        (r"C:\Users\x\a.txt", [(r"C:\Users\x\a.txt", "path")]),
        ("on localhost:8080 and 127.0.0.1:5432", [("localhost:8080", "host_port"), ("127.0.0.1:5432", "host_port")]),
        ("db.internal:6379 or [::1]:8080", [("db.internal:6379", "host_port"), ("[::1]:8080", "host_port")]),
        ("port 3000 and PORT=5000", [("port 3000", "host_port"), ("PORT=5000", "host_port")]),
        ("fixes #123, PR 45 and issue #7", [("#123", "ticket"), ("PR 45", "ticket"), ("issue #7", "ticket")]),
        ("see PROJ-123", [("PROJ-123", "ticket")]),
        ("commit a1b2c3d and 3f9a2b1c4d5e", [("a1b2c3d", "hash"), ("3f9a2b1c4d5e", "hash")]),
        ("ran git show b3a4dbe", [("b3a4dbe", "hash")]),
        ("x " + "b3a4dbed50a3ad1d9d91853c71fb3e044bdf7c65", [("b3a4dbed50a3ad1d9d91853c71fb3e044bdf7c65", "hash")]),
        ("order 1234567 of 12345", [("1234567", "number")]),
        ("Order ID: 20240517993 and invoice no. 4471920", [("20240517993", "number"), ("4471920", "number")]),
        ("answer 422 with COUPON_EXPIRED", [("COUPON_EXPIRED", "name")]),
        # ${db_url} is a template's placeholder, filled in elsewhere: not an identifier
        (
            "set GITHUB_TOKEN, $HOME and ${db_url}; got ENOENT",
            [("GITHUB_TOKEN", "name"), ("$HOME", "name"), ("ENOENT", "name")],
        ),
        ("due 2026-01-15, ran at 2026-01-15T10:20:30Z", [("2026-01-15", "date"), ("2026-01-15T10:20:30Z", "date")]),
        (
            "Never exceed $500 (or €1,250.50, 300 USD).",
            [("$500", "money"), ("€1,250.50", "money"), ("300 USD", "money")],
        ),
        (
            "on Python 3.11 with v1.2.3 and 3.11.4-rc1",
            [("Python 3.11", "version"), ("v1.2.3", "version"), ("3.11.4-rc1", "version")],
        ),
        (
            "deploy to us-east-1, europe-west4-a, cn-hangzhou",
            [("us-east-1", "region"), ("europe-west4-a", "region"), ("cn-hangzhou", "region")],
        ),
        ("flights HAT136 and 3RK2T9; E501", [("HAT136", "code"), ("3RK2T9", "code"), ("E501", "code")]),
        (
            "AgentSession and parseArgs call parse_args()",
            [("AgentSession", "symbol"), ("parseArgs", "symbol"), ("parse_args()", "symbol")],
        ),
        ("we are on branch refactor now", [("refactor", "branch")]),
        ("git checkout -b fix/coupon-expiry", [("fix/coupon-expiry", "branch")]),
        ("git push --set-upstream origin spotter-dov 2>&1", [("spotter-dov", "branch")]),
        ("The current branch spotter-dov has no upstream branch.", [("spotter-dov", "branch")]),
        ("On branch `main`, then git merge --no-ff release-2.1.", [("main", "branch"), ("release-2.1", "branch")]),
    ],
)
def test_kinds(text: str, expected: list[tuple[str, str]]) -> None:
    assert found(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "and/or input/output",  # words with a slash
        "run /clear first",  # a slash command
        "e.g. i.e. v. 3 or 1.2",  # dotted words, a bare x.y
        "on 2024/05/20, 1/2 of it",  # dates and fractions
        "deadbeef cafebabe",  # hex words without a digit
        "UTF-8 and SHA-1",  # short keys
        "&#123; and a#12",  # an HTML entity and a glued hash sign
        "12345 and x1234567",  # short or glued numbers
        "xhttps://example.com",  # not the start of a URL
        "add .ex and .py files, not .json",  # bare extensions
        "look in src/, lib/, app/services/ and a/b/c",  # directories name no file
        "use Ecto.Adapters.SQL for .json/.jsonl",  # a module, extensions
        "-rw-r--r-- 1 dev dev 100877 Mar 14 and mode 100644",  # sizes and file modes
        "took 1710403200 ms, 3000000 rows",  # timestamps and counts
        "rid=53cb0f4b cart 6c1e9a0f42b7, x-request-id: 91aa04c3e5d8",  # hex words outside git
        "see #1 and #2",  # list numbers
        "GET / HTTP/1.1 from client=Shop/3",  # a protocol version
        "r.json() and foo()",  # a one-letter receiver and a bare short call
        "color: #a1b2c3; background #FFF; fill=#00ff00",  # CSS colours
        "Chunk ID: 3f2a1b9c4d",  # a chunk id of a tool's output
        "UTF8, HTTP2 and MP4; JavaScript on GitHub",  # standards and products
        "the branch is protected; a new branch and the branch name",  # words after "branch"
        "2026-13-45 and 12026-01-01",  # not dates
        "cat x > /dev/null",  # a device
        "the branch is green; git checkout -- .; git rebase -i HEAD~3",  # no branch names
        "MAX and A_B and X_1",  # short capitals
    ],
)
def test_not_identifiers(text: str) -> None:
    assert found(text) == []


def test_glued_to_chinese_text() -> None:
    text = "请修改/etc/nginx/nginx.conf第3行，访问https://example.com/a了解，端口8080，提交a1b2c3d4，订单号123456789已发货（见/data/x.csv）。"
    assert [i.text for i in find_identifiers(text)] == [
        "/etc/nginx/nginx.conf",
        "https://example.com/a",
        "端口8080",
        "a1b2c3d4",
        "123456789",
        "/data/x.csv",
    ]


def test_an_earlier_kind_claims_its_characters() -> None:
    text = "see https://h.io/a1b2c3d4/x.py and /tmp/019b7f04-0b04-7cd3-b739-bfa632f7459e.jsonl"
    assert found(text) == [
        ("https://h.io/a1b2c3d4/x.py", "url"),
        ("/tmp/019b7f04-0b04-7cd3-b739-bfa632f7459e.jsonl", "path"),
    ]


def test_rank_by_best_source_then_mentions_then_newest() -> None:
    texts = [
        ("user names /x/y.py and #12", 3.0),
        ("assistant names https://a.b/c twice: https://a.b/c", 2.0),
        ("assistant names /srv/z.py", 2.0),
        ("tool result: /tmp/r.log /tmp/r.log /tmp/r.log /tmp/s.log", 0.5),
        ("user again: #12, issue #7", 3.0),
    ]
    # the best source first (#12, issue #7, /x/y.py from the user), then mentions (#12 twice),
    # then the newest (issue #7 came after /x/y.py); a tool result never outranks the user or the assistant
    assert extract_identifiers(texts) == [
        "#12",
        "issue #7",
        "/x/y.py",
        "https://a.b/c",
        "/srv/z.py",
        "/tmp/r.log",
        "/tmp/s.log",
    ]
    assert extract_identifiers(texts, limit=2) == ["#12", "issue #7"]
    assert extract_identifiers([]) == []
    path = Identifier(text="/a/b.py", kind="path", start=0)
    assert rank_identifiers([(path, 0.5)] * 5 + [(Identifier(text="PR 3", kind="ticket", start=0), 2.0)]) == [
        "PR 3",
        "/a/b.py",
    ]


def test_without_redundant_keeps_the_longest_name_of_each_thing() -> None:
    items = [
        "pricing.py",
        "app/services/pricing.py",
        "#482",
        "issue #482",
        "port 8081",
        "Port 8081",
        "port 9000",
        "Port 9000",
        "localhost:8081",
        "/etc/hosts",
        "/srv/etc/hosts",
        "services/pricing.py",
        "tests/test_a.py",
    ]
    assert without_redundant(items, known=["/repo/tests/test_a.py"]) == [
        "app/services/pricing.py",
        "issue #482",
        "port 9000",
        "localhost:8081",
        "/etc/hosts",  # an absolute path is never another's suffix
        "/srv/etc/hosts",
    ]
    assert without_redundant(["a.py", "a.py"]) == ["a.py"]


def test_value_identifiers_take_opaque_ids_whole() -> None:
    args = {
        "reservation_id": "JG7FMM",
        "user_id": "mia_li_3668",
        "cabin": "economy",
        "flights": [{"flight_number": "HAT136", "date": "2024-05-20"}],
        "amount": 150,
        "order": 1234567,
        "order_id": "7654321",
        "timeout": 120000,
        "max_tokens": 200000,
        "model": "gpt-4o",
        "note": "see /tmp/a.log please",
        "ok": True,
    }
    pairs = [(i.text, i.kind, short) for i, short in value_identifiers(args)]
    assert pairs == [
        ("JG7FMM", "code", True),
        ("mia_li_3668", "value", True),
        ("HAT136", "code", True),
        ("2024-05-20", "date", True),
        ("1234567", "number", True),
        ("7654321", "number", True),
        ("/tmp/a.log", "path", True),
    ]
    long_content = {"content": "x" * 300 + " /srv/app/main.py"}
    assert [(i.text, short) for i, short in value_identifiers(long_content)] == [("/srv/app/main.py", False)]
    ranked = rank_identifiers((i, 1.0) for i, _ in value_identifiers(args))
    assert ranked[:2] == ["/tmp/a.log", "7654321"]  # all equal otherwise: the newest first


@pytest.mark.parametrize(
    ("command", "read", "written"),
    [
        ("cat a.txt | grep x > out.log 2>&1", ["a.txt"], ["out.log"]),
        ("sed -n '1,200p' src/main.py && sed -i 's/a/b/' c.py", ["src/main.py"], ["c.py"]),
        ("sed -i '' 's/x/y/g' a.ts b.ts", [], ["a.ts", "b.ts"]),
        ("sed -e 's/a/b/' -e 's/c/d/' in.txt", ["in.txt"], []),
        ("head -n 20 d.md; tail -f /var/log/x.log", ["d.md", "/var/log/x.log"], []),
        ("nl -ba src/x.py | sed -n '10,20p'", ["src/x.py"], []),
        ("cat > types/README.md << 'EOF'\n# Title\ncat inside.txt\nEOF\nls", [], ["types/README.md"]),
        ("echo hi | tee -a log.txt >> all.log", [], ["log.txt", "all.log"]),
        ("FOO=1 sudo cat /etc/hosts; touch new.py", ["/etc/hosts"], ["new.py"]),
        ("cat *.log $HOME/x > /dev/null", [], []),
        ("echo 'unbalanced", [], []),
        ('python -c "\nimport sys\nprint(1)\n" | tee out.txt', [], ["out.txt"]),
    ],
)
def test_command_paths(command: str, read: list[str], written: list[str]) -> None:
    assert command_paths(command) == (read, written)


@pytest.mark.parametrize(
    ("command", "targets"),
    [
        ("cd /repo && pytest -x tests/a.py 2>&1 | tail -5", [("pytest", {"tests/a.py"})]),
        (
            "ruff check app tests && ruff format --check app",
            [("ruff check", {"app", "tests"}), ("ruff format", {"app"})],
        ),
        ("FOO=1 sudo git push --set-upstream origin x > log.txt", [("git push", {"origin", "x"})]),
        ("pytest -x -q", [("pytest", set())]),
        ("git commit -m \"$(cat <<'EOF'\nfix: a\n\nbody\nEOF\n)\"", [("git commit", {"$(cat   ; )"})]),
        ("echo 'unbalanced", []),
    ],
)
def test_command_targets(command: str, targets: list[tuple[str, set[str]]]) -> None:
    assert command_targets(command) == [(program, frozenset(ops)) for program, ops in targets]


def test_command_head_is_the_identifying_prefix_of_a_command() -> None:
    assert command_head("  ls -la /srv  ") == "ls -la /srv"  # a short one-line command is its own head
    heredoc = "git commit -m \"$(cat <<'EOF'\nfix: things\n\nmore\nEOF\n)\""
    assert command_head(heredoc) == "git commit -m \"$(cat <<'EOF'"
    long_line = "git add " + " ".join(f"src/module_{i}.py" for i in range(40))
    head = command_head(long_line)
    assert len(head) == COMMAND_HEAD_CHARS and long_line.startswith(head)
    assert command_head(head) == head  # a head is its own head, so a shortened summary reads back unchanged


_SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8).filter(
    lambda s: s[0].isalnum()
)
_PATHS = st.builds(
    lambda segs, ext: "/" + "/".join(segs) + "." + ext,
    st.lists(_SEGMENT, min_size=1, max_size=4),
    st.sampled_from(["py", "conf", "md", "json", "ts"]),
)
_CJK = st.text(alphabet="请修改第行文件见的了中", min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(before=_CJK, path=_PATHS, after=_CJK)
def test_a_path_between_chinese_characters_comes_out_whole(before: str, path: str, after: str) -> None:
    assert [i.text for i in find_identifiers(before + path + after)] == [path]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab1/.:#-_ 请x9fe@~\\port")), max_size=60))
def test_identifiers_are_verbatim_ordered_and_disjoint(text: str) -> None:
    idents = find_identifiers(text)
    end = -1
    for ident in idents:
        assert text[ident.start : ident.start + len(ident.text)] == ident.text
        assert ident.start >= end
        end = ident.start + len(ident.text)
    assert find_identifiers(text) == idents


def test_hex_dates_and_symbols_of_tool_output_count_only_when_named_elsewhere() -> None:
    log = "2026-01-15T10:20:30Z worker commit 9f8e7d6c5b started; AgentSession ready"

    def conv(command: str, said: str) -> list[Message]:
        call = ToolCall.from_input(id="c1", name="Bash", input={"command": command})
        return [
            Message.of("user", "Check the worker."),
            Message(role="assistant", content=(call,)),
            Message(role="tool", content=(ToolResult(call_id="c1", content=log),)),
            Message.of("assistant", said),
        ]

    quiet = collect_facts(conv("tail worker.log", "It started.")).identifiers
    assert not {"9f8e7d6c5b", "2026-01-15T10:20:30Z", "AgentSession"} & set(quiet)
    named = collect_facts(conv("tail worker.log", "Commit 9f8e7d6c5b runs AgentSession.")).identifiers
    assert {"9f8e7d6c5b", "AgentSession"} <= set(named)
    git = collect_facts(conv("git log -1", "It started.")).identifiers
    assert "9f8e7d6c5b" in git  # git printed it: a commit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # what an agent would not look for again: a script's arguments, a shebang's interpreter
        ('for f in "$1" "$2"; do echo "$0: $f"; done', []),
        ('case :ets.match(@table, {:"$1", id}) do', []),
        ("#!/usr/bin/env python3", []),
        ("#!/bin/bash", []),
        # a dollar amount, a branch, a URL ended by an escaped newline, an installed tool are kept
        ("the refund is $5 per bag", [("$5", "money")]),
        ("on branch main, branching later", [("main", "branch")]),
        (r"see https://github.com/o/r)\n\nMaybe", [("https://github.com/o/r", "url")]),
        ("installed to /usr/local/bin/ctxkeep", [("/usr/local/bin/ctxkeep", "path")]),
    ],
)
def test_identifiers_leave_out_what_no_one_would_look_for(text: str, expected: list[tuple[str, str]]) -> None:
    assert found(text) == expected


def test_an_identifier_is_not_cut_where_a_long_result_stops_being_read() -> None:
    text = "x " * 1_490 + "see https://github.com/owner/repository/issues/12345 for details"
    msgs = [
        Message(role="assistant", content=(ToolCall.from_input(id="c1", name="fetch", input={"q": "issue"}),)),
        Message(role="tool", content=(ToolResult(call_id="c1", content=text),)),
    ]
    ids = collect_facts(msgs).identifiers
    assert not any(
        i.startswith("https://github.co") and i != "https://github.com/owner/repository/issues/12345" for i in ids
    )
