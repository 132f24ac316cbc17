"""The providers: the request types, the retry policy, the settings, the deterministic model, and the two
SDK providers driven through the real openai and anthropic SDKs against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import socket
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ctxkeep.errors import CtxkeepError, ProviderError
from ctxkeep.providers import Completion, Model, Reply, Turn, get_model
from ctxkeep.providers.anthropic import AnthropicModel
from ctxkeep.providers.config import ProviderConfig, api_key, load_config, read_config
from ctxkeep.providers.deterministic import DeterministicModel
from ctxkeep.providers.failures import Endpoint, redact, server_detail, status_error
from ctxkeep.providers.openai import OpenAIModel
from ctxkeep.providers.retry import RetryPolicy, call_with_retry, parse_retry_after, retryable_status
from ctxkeep.providers.sdk import PLACEHOLDER_KEY, Connection
from ctxkeep.summarize import missing_sections
from ctxkeep.summarize.testing import fixed_summary, host_model

KEY = "sk-ctxkeep-TEST-7f3a9c1e5b2d8a64"
REQUEST = Completion(
    system="You summarize.",
    turns=(
        Turn(role="user", text="Fix /srv/app/main.py"),
        Turn(role="assistant", text="ok"),
        Turn(role="user", text="go"),
    ),
    max_tokens=64,
)
SDK_LOGGERS = ("openai", "anthropic", "httpx", "httpx2", "httpcore", "httpcore2")


# ── the request types ─────────────────────────────────────────────────────────────────────────────


def test_request_types_reject_bad_values() -> None:
    with pytest.raises(ValueError, match="'user' or 'assistant'"):
        Turn(role="system", text="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one turn"):
        Completion(system="s", turns=())
    with pytest.raises(ValueError, match="max_tokens"):
        Completion(system="s", turns=(Turn(role="user", text="x"),), max_tokens=0)
    with pytest.raises(ValueError, match="timeout"):
        Completion(system="s", turns=(Turn(role="user", text="x"),), timeout=0)
    with pytest.raises(TypeError, match="tuple of Turn"):
        Completion(system="s", turns=[Turn(role="user", text="x")])  # type: ignore[arg-type]


# ── the retry policy, with an injected sleep and a fake clock ─────────────────────────────────────


class FakeClock:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def failing(*errors: BaseException, result: str = "done") -> tuple[Callable[[], str], list[int]]:
    """A call that raises `errors` in turn, then returns `result`; and the list that counts its calls."""
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return result

    return call, calls


def retryable(status: int | None = 503, retry_after: float | None = None) -> ProviderError:
    return ProviderError("boom", provider="test", status_code=status, retryable=True, retry_after=retry_after)


def test_backoff_is_full_jitter_between_zero_and_a_doubling_ceiling() -> None:
    policy = RetryPolicy(attempts=7)
    assert [policy.delay(n, retry_after=None, random=lambda: 1.0) for n in range(1, 7)] == [0.5, 1, 2, 4, 5, 5]
    assert policy.delay(3, retry_after=None, random=lambda: 0.0) == 0.0
    rng = random.Random(4)
    for failures in (1, 2, 3, 4, 5):
        ceiling = min(5.0, 0.5 * 2 ** (failures - 1))
        delays = [policy.delay(failures, retry_after=None, random=rng.random) for _ in range(200)]
        assert all(0.0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling * 0.8 and min(delays) < ceiling * 0.2  # spread over the range, not fixed


def test_three_attempts_then_success_waits_within_bounds() -> None:
    clock = FakeClock()
    call, calls = failing(retryable(), retryable())
    result, attempts = call_with_retry(call, sleep=clock.sleep, random=random.Random(1).random)
    assert (result, attempts, len(calls)) == ("done", 3, 3)
    assert len(clock.sleeps) == 2
    assert 0 <= clock.sleeps[0] <= 0.5 and 0 <= clock.sleeps[1] <= 1.0
    assert clock.now - 1_700_000_000.0 <= 1.5


def test_gives_up_after_three_attempts_with_the_count() -> None:
    clock = FakeClock()
    call, calls = failing(retryable(500), retryable(500), retryable(500), retryable(500))
    with pytest.raises(ProviderError) as caught:
        call_with_retry(call, sleep=clock.sleep)
    assert (caught.value.status_code, caught.value.attempts, len(calls), len(clock.sleeps)) == (500, 3, 3, 2)
    assert "gave up after 3 attempts" in str(caught.value)
    assert caught.value.__context__ is None and caught.value.__cause__ is None


def test_retry_after_is_honoured_and_capped() -> None:
    clock = FakeClock()
    call, _ = failing(retryable(429, retry_after=7.0), retryable(429, retry_after=600.0))
    assert call_with_retry(call, sleep=clock.sleep, random=lambda: 1.0) == ("done", 3)
    assert clock.sleeps == [7.0, 30.0]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_no_retry_on_client_errors(status: int) -> None:
    clock = FakeClock()
    at = Endpoint(provider="openai", model="m", base_url="http://x", api_key_env="OPENAI_API_KEY")
    error = status_error(at, status, detail="no", headers={"retry-after": "1"}, now=clock.now, secrets=())
    assert not error.retryable and error.retry_after is None
    call, calls = failing(error)
    with pytest.raises(ProviderError) as caught:
        call_with_retry(call, sleep=clock.sleep)
    assert (len(calls), clock.sleeps, caught.value.attempts, caught.value.status_code) == (1, [], 1, status)


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 529])
def test_retry_on_transient_statuses(status: int) -> None:
    assert retryable_status(status)
    at = Endpoint(provider="openai", model="m", base_url="http://x", api_key_env="OPENAI_API_KEY")
    error = status_error(at, status, detail="", headers={}, now=0.0, secrets=())
    call, calls = failing(error)
    assert call_with_retry(call, sleep=FakeClock().sleep) == ("done", 2)
    assert len(calls) == 2


@pytest.mark.parametrize("cancel", [KeyboardInterrupt, asyncio.CancelledError])
def test_no_retry_on_cancel(cancel: type[BaseException]) -> None:
    clock = FakeClock()
    call, calls = failing(retryable(), cancel())
    with pytest.raises(cancel):
        call_with_retry(call, sleep=clock.sleep)
    assert len(calls) == 2 and len(clock.sleeps) == 1


def test_other_exceptions_are_not_retried() -> None:
    call, calls = failing(RuntimeError("bug"))
    with pytest.raises(RuntimeError):
        call_with_retry(call, sleep=FakeClock().sleep)
    assert len(calls) == 1


def test_parse_retry_after() -> None:
    now = 1_700_000_000.0
    in_two_minutes = email.utils.formatdate(now + 120, usegmt=True)
    assert parse_retry_after({"retry-after": "3"}, now=now) == 3.0
    assert parse_retry_after({"retry-after": "0.25"}, now=now) == 0.25
    assert parse_retry_after({"retry-after": in_two_minutes}, now=now) == pytest.approx(120.0)
    assert parse_retry_after({"retry-after": email.utils.formatdate(now - 60, usegmt=True)}, now=now) == 0.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}, now=now) == 1.5
    for junk in ("soon", "-4", "nan", "inf", ""):
        assert parse_retry_after({"retry-after": junk}, now=now) is None
    assert parse_retry_after({}, now=now) is None


def test_retry_policy_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="max_delay"):
        RetryPolicy(base_delay=2.0, max_delay=1.0)
    with pytest.raises(ValueError, match="base_delay"):
        RetryPolicy(base_delay=float("nan"))


# ── error messages ────────────────────────────────────────────────────────────────────────────────


def test_server_detail_reads_both_apis_error_bodies() -> None:
    assert server_detail({"error": {"message": "bad model", "type": "x"}}, "f") == "bad model"
    assert server_detail({"type": "error", "error": {"type": "x", "message": "overloaded"}}, "f") == "overloaded"
    assert server_detail({"error": "plain"}, "f") == "plain"
    assert server_detail("text", "fallback") == "fallback"
    assert redact(f"key {KEY} again {KEY}", KEY) == "key *** again ***"


def test_status_error_messages_say_the_fix_and_hide_the_key() -> None:
    at = Endpoint(provider="openai", model="gpt-x", base_url="http://h/v1", api_key_env="MY_KEY")
    long = f"Incorrect API key provided: {KEY}. " + "x" * 1000

    def message(status: int) -> str:
        return str(status_error(at, status, detail=long, headers={}, now=0.0, secrets=(KEY,)))

    assert "set MY_KEY to a valid key" in message(401)
    assert "check the key in MY_KEY" in message(403)
    assert "check the model name" in message(404) and "'gpt-x'" in message(404)
    assert "max_tokens" in message(400)
    assert "rate limiting" in message(429)
    assert "try again later" in message(503)
    for status in (400, 401, 403, 404, 429, 503):
        assert KEY not in message(status) and "***" in message(status)
        assert len(message(status)) < 600


# ── settings: code, environment, config file ──────────────────────────────────────────────────────


def test_load_config_env_over_file(tmp_path: Path) -> None:
    (tmp_path / "ctxkeep.toml").write_text(
        'model = "openai:qwen"\nbase_url = "http://file/v1"\napi_key_env = "QWEN_KEY"\ntimeout = 60\n'
        "[compaction]\nwhatever = 1\n"
    )
    assert load_config(environ={}, cwd=tmp_path) == ProviderConfig(
        model="openai:qwen", base_url="http://file/v1", api_key_env="QWEN_KEY", timeout=60
    )
    env = {"CTXKEEP_MODEL": "anthropic:claude-haiku-4-5", "CTXKEEP_BASE_URL": "http://env"}
    assert load_config(environ=env, cwd=tmp_path) == ProviderConfig(
        model="anthropic:claude-haiku-4-5", base_url="http://env", api_key_env="QWEN_KEY", timeout=60
    )
    assert load_config(environ={}, cwd=tmp_path / "..") == ProviderConfig()


def test_config_file_named_by_env(tmp_path: Path) -> None:
    (tmp_path / "other.toml").write_text('model = "deterministic"\n')
    assert load_config(environ={"CTXKEEP_CONFIG": "other.toml"}, cwd=tmp_path).model == "deterministic"
    with pytest.raises(ValueError, match=r"CTXKEEP_CONFIG names .*missing\.toml, which is not a file"):
        load_config(environ={"CTXKEEP_CONFIG": "missing.toml"}, cwd=tmp_path)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('modle = "openai:x"\n', "unknown setting modle; the settings are model, base_url"),
        ("timeout = -1\n", "timeout must be a positive number"),
        ('timeout = "60"\n', "timeout must be a positive number"),
        ("model = 3\n", "model must be a string"),
        ("model = \n", "not valid TOML"),
    ],
)
def test_config_file_errors_are_clear(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "ctxkeep.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as caught:
        read_config(path)
    assert str(path) in str(caught.value)


def test_a_key_pasted_into_api_key_env_is_not_echoed(tmp_path: Path) -> None:
    path = tmp_path / "ctxkeep.toml"
    path.write_text(f'api_key_env = "{KEY}"\n')
    with pytest.raises(ValueError, match="not the key itself") as caught:
        read_config(path)
    assert KEY not in str(caught.value)


def test_api_key_reads_the_named_variable() -> None:
    assert api_key("K", {"K": f" {KEY}\n"}) == KEY
    assert api_key("K", {"K": "  "}) is None
    assert api_key("K", {}) is None


def test_get_model_by_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("CTXKEEP_MODEL", "CTXKEEP_BASE_URL", "CTXKEEP_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(get_model("deterministic"), DeterministicModel)
    local = get_model("openai:llama", base_url="http://127.0.0.1:9/v1", api_key_env="CTXKEEP_TEST_ABSENT_KEY")
    assert isinstance(local, OpenAIModel) and local.name == "openai:llama"
    assert local._client.api_key == PLACEHOLDER_KEY
    monkeypatch.setenv("CTXKEEP_TEST_KEY", KEY)
    claude = get_model("anthropic:claude-haiku-4-5", api_key_env="CTXKEEP_TEST_KEY", timeout=5)
    assert isinstance(claude, AnthropicModel) and claude.name == "anthropic:claude-haiku-4-5" and claude.timeout == 5
    assert KEY not in repr(claude) and KEY not in repr(local)
    with pytest.raises(ValueError, match=r"no model chosen: .*CTXKEEP_MODEL"):
        get_model()
    for bad in ("gpt-4o", "openai:", "openai: ", "mistral:large", "deterministic:x", "deterministic:", ""):
        with pytest.raises(ValueError, match="'openai:<model>'"):
            get_model(bad)
    with pytest.raises(ValueError, match="takes no base_url"):
        get_model("deterministic", base_url="http://x")
    with pytest.raises(ProviderError, match="set the environment variable CTXKEEP_TEST_ABSENT_KEY"):
        get_model("openai:gpt-4o-mini", api_key_env="CTXKEEP_TEST_ABSENT_KEY")
    config = ProviderConfig(model="anthropic:claude-haiku-4-5", api_key_env="CTXKEEP_TEST_KEY")
    assert get_model(config=config).name == "anthropic:claude-haiku-4-5"


# ── the deterministic model ───────────────────────────────────────────────────────────────────────


def test_deterministic_model_replays_the_queue_then_summarizes() -> None:
    model = DeterministicModel(default=fixed_summary)
    assert isinstance(model, Model)
    failure = ProviderError("overloaded", provider="test", retryable=True)
    model.enqueue("first", failure, "second")
    assert model.complete(REQUEST) == Reply(text="first", model="deterministic")
    with pytest.raises(ProviderError, match="overloaded"):
        model.complete(REQUEST)
    assert model.complete(REQUEST).text == "second"
    summary = model.complete(REQUEST).text
    assert summary == fixed_summary(REQUEST) == host_model("deterministic").complete(REQUEST).text
    with pytest.raises(ProviderError, match="nothing is queued"):
        get_model("deterministic").complete(REQUEST)  # the provider's own is scripted only
    assert missing_sections(summary) == []
    assert "- go" in summary.split("## Goal")[1].split("##")[0]
    assert "`/srv/app/main.py`" in summary
    assert model.requests == [REQUEST] * 4
    with pytest.raises(TypeError, match="reply texts or ProviderErrors"):
        model.enqueue(3)  # type: ignore[arg-type]


# ── real SDKs against real HTTP servers on 127.0.0.1 ──────────────────────────────────────────────


@dataclass
class Step:
    """One scripted answer: status, JSON body (None: the API's success body), headers, seconds to stall."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    stall: float = 0.0


class FakeAPI:
    """An HTTP server on an ephemeral port of 127.0.0.1 that answers POSTs from a script and records them."""

    def __init__(self, success: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.success = success
        self.script: list[Step] = []
        self.seen: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.stop = threading.Event()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                api.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                step = api.script.pop(0) if api.script else Step()
                if step.stall and api.stop.wait(step.stall):
                    return
                payload = json.dumps(api.success(body) if step.body is None else step.body).encode()
                try:
                    self.send_response(step.status)
                    for name, value in {"content-type": "application/json", **step.headers}.items():
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client gave up (a timeout test): nothing to answer
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> FakeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def openai_success(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": body["model"] + "-served",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "## Goal\n- hi"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 21, "completion_tokens": 4, "total_tokens": 25},
    }


def anthropic_success(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": body["model"] + "-served",
        "content": [{"type": "text", "text": "## Goal\n"}, {"type": "text", "text": "- hi"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 21, "output_tokens": 4},
    }


@dataclass
class Kind:
    """One of the two SDK providers: how to serve it and how to make it."""

    name: str
    success: Callable[[dict[str, Any]], dict[str, Any]]
    path: str
    error_body: Callable[[str], dict[str, Any]]

    def make(self, url: str, clock: FakeClock, *, timeout: float | None = None) -> OpenAIModel | AnthropicModel:
        env = {"CTXKEEP_TEST_KEY": KEY}
        if self.name == "openai":
            at = Connection(base_url=url + "/v1", api_key_env="CTXKEEP_TEST_KEY", timeout=timeout)
            return OpenAIModel("gpt-test", at, sleep=clock.sleep, environ=env)
        at = Connection(base_url=url, api_key_env="CTXKEEP_TEST_KEY", timeout=timeout)
        return AnthropicModel("claude-test", at, sleep=clock.sleep, environ=env)


KINDS = [
    Kind("openai", openai_success, "/v1/chat/completions", lambda m: {"error": {"message": m}}),
    Kind(
        "anthropic",
        anthropic_success,
        "/v1/messages",
        lambda m: {"type": "error", "error": {"type": "api_error", "message": m}},
    ),
]


@pytest.fixture(params=KINDS, ids=[k.name for k in KINDS])
def kind(request: pytest.FixtureRequest) -> Kind:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log record at DEBUG, the SDKs' and the HTTP libraries' included; none may hold the key."""
    caplog.set_level(logging.DEBUG)
    for name in (*SDK_LOGGERS, "ctxkeep"):
        caplog.set_level(logging.DEBUG, logger=name)
    yield caplog
    records = caplog.get_records("setup") + caplog.get_records("call")
    assert records, "the SDKs log at DEBUG; no records means the capture is not working"
    formatter = logging.Formatter()
    for record in records:
        assert KEY not in formatter.format(record) and KEY not in repr(record.args) and KEY not in repr(vars(record))


def assert_hidden(error: BaseException, model: object) -> None:
    """The key is nowhere in the error (message, repr, attributes, traceback, chain) or the model's repr."""
    texts = [str(error), repr(error), repr(vars(error)), "".join(traceback.format_exception(error)), repr(model)]
    chained: BaseException | None = error
    while chained is not None:
        texts += [str(chained), repr(chained.args)]
        chained = chained.__cause__ or chained.__context__
    for text in texts:
        assert KEY not in text


def test_success(kind: Kind, logs: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    with FakeAPI(kind.success) as api:
        model = kind.make(api.url, clock)
        reply = model.complete(REQUEST)
    assert reply == Reply(
        text="## Goal\n- hi", model=f"{model.model}-served", input_tokens=21, output_tokens=4, attempts=1
    )
    assert clock.sleeps == [] and len(api.seen) == 1
    path, headers, body = api.seen[0]
    assert path == kind.path
    assert KEY in headers.get("authorization", "") + headers.get("x-api-key", "")  # the key was sent
    assert body["model"] == model.model and body["max_tokens"] == 64
    turns = [{"role": "user", "content": "Fix /srv/app/main.py"}, {"role": "assistant", "content": "ok"}]
    turns.append({"role": "user", "content": "go"})
    if kind.name == "openai":
        assert body["messages"] == [{"role": "system", "content": "You summarize."}, *turns]
        assert body["temperature"] == 0.0
    else:
        assert body["system"] == "You summarize." and body["messages"] == turns
    assert KEY not in repr(model)


def test_429_with_retry_after_then_success(kind: Kind, logs: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    with FakeAPI(kind.success) as api:
        api.script = [Step(status=429, body=kind.error_body("slow down"), headers={"retry-after": "2"})]
        reply = kind.make(api.url, clock).complete(REQUEST)
    assert reply.attempts == 2 and reply.text == "## Goal\n- hi"
    assert clock.sleeps == [2.0] and len(api.seen) == 2


def test_500_three_times_gives_up(kind: Kind, logs: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    with FakeAPI(kind.success) as api:
        api.script = [Step(status=500, body=kind.error_body(f"internal error near {KEY}")) for _ in range(4)]
        model = kind.make(api.url, clock)
        with pytest.raises(ProviderError) as caught:
            model.complete(REQUEST)
    error = caught.value
    assert (error.status_code, error.attempts, error.retryable, error.provider) == (500, 3, True, kind.name)
    assert len(api.seen) == 3 and len(clock.sleeps) == 2
    assert 0 <= clock.sleeps[0] <= 0.5 and 0 <= clock.sleeps[1] <= 1.0
    assert "HTTP 500" in str(error) and "internal error near ***" in str(error)
    assert_hidden(error, model)


def test_401_is_not_retried_and_names_the_variable(kind: Kind, logs: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    with FakeAPI(kind.success) as api:
        api.script = [Step(status=401, body=kind.error_body(f"Incorrect API key provided: {KEY}"))]
        model = kind.make(api.url, clock)
        with pytest.raises(ProviderError) as caught:
            model.complete(REQUEST)
    error = caught.value
    assert (error.status_code, error.attempts, error.retryable) == (401, 1, False)
    assert len(api.seen) == 1 and clock.sleeps == []
    assert "set CTXKEEP_TEST_KEY to a valid key" in str(error)
    assert_hidden(error, model)


def test_404_says_check_the_model_name(kind: Kind, logs: pytest.LogCaptureFixture) -> None:
    with FakeAPI(kind.success) as api:
        api.script = [Step(status=404, body=kind.error_body("model not found"))]
        model = kind.make(api.url, FakeClock())
        with pytest.raises(ProviderError, match="check the model name") as caught:
            model.complete(REQUEST)
    assert caught.value.status_code == 404 and len(api.seen) == 1
    assert f"no model {model.model!r}" in str(caught.value)


def test_a_server_slower_than_the_timeout(kind: Kind, logs: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    with FakeAPI(kind.success) as api:
        api.script = [Step(stall=3.0), Step(stall=3.0)]
        model = kind.make(api.url, clock, timeout=0.2)
        model.retry = RetryPolicy(attempts=2)
        with pytest.raises(ProviderError) as caught:
            model.complete(REQUEST)
    error = caught.value
    assert (error.status_code, error.retryable, error.attempts) == (None, True, 2)
    assert "did not answer within 0.2 s" in str(error) and "raise the timeout" in str(error)
    assert len(api.seen) == 2 and len(clock.sleeps) == 1
    assert_hidden(error, model)


def test_connection_refused(kind: Kind, logs: pytest.LogCaptureFixture) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago, and has no listener now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    clock = FakeClock()
    model = kind.make(f"http://127.0.0.1:{port}", clock)
    with pytest.raises(ProviderError) as caught:
        model.complete(REQUEST)
    error = caught.value
    assert (error.status_code, error.retryable, error.attempts) == (None, True, 3)
    assert f"cannot connect to {kind.name} at http://127.0.0.1:{port}" in str(error)
    assert "is the server at base_url running?" in str(error)
    assert isinstance(error, CtxkeepError)
    assert_hidden(error, model)


def test_get_model_from_the_environment_reaches_the_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTXKEEP_CONFIG", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeAPI(openai_success) as api:
        monkeypatch.setenv("CTXKEEP_MODEL", "openai:local-model")
        monkeypatch.setenv("CTXKEEP_BASE_URL", api.url + "/v1")
        reply = get_model().complete(REQUEST)
    assert reply.model == "local-model-served"
    assert api.seen[0][1]["authorization"] == f"Bearer {PLACEHOLDER_KEY}"
