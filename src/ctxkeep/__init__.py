"""ctxkeep keeps an LLM agent's context window inside its budget without losing what it needs.

    with Session.open("workspace", window=32_000) as session:
        session.add(messages)
        step = session.prepare(system_prompt)   # before every reasoning step
        client.chat.completions.create(model=MODEL, messages=step.to_openai())

The names below are the public contract. The submodules (`ctxkeep.engine`, `ctxkeep.live`,
`ctxkeep.summarize.*`, ...) are internal: they may change in any release.
"""

# Not `typing.TYPE_CHECKING`: importing `typing` costs every command, `ctxkeep --help` included, a few ms.
# Type checkers treat any name TYPE_CHECKING as true; it is deleted below so the namespace stays `__all__`.
TYPE_CHECKING = False
if TYPE_CHECKING:  # what mypy and IDEs see; at run time `__getattr__` imports each name on first use
    from typing import Any

    from ctxkeep.async_session import AsyncSession
    from ctxkeep.context import Context
    from ctxkeep.errors import (
        CtxkeepError,
        FormatError,
        MessageError,
        PinnedOverBudgetError,
        ProviderError,
        StorageError,
        SummaryError,
        TokenizerError,
        UnknownFormatError,
        WorkspaceError,
        WorkspaceLockedError,
    )
    from ctxkeep.folder import LocalFolder, MemoryFolder
    from ctxkeep.formats import Conversation, Transcript, load
    from ctxkeep.formats.agentscope import from_agentscope, to_agentscope
    from ctxkeep.formats.anthropic import from_anthropic, to_anthropic
    from ctxkeep.formats.openai import from_openai, to_openai
    from ctxkeep.host.inputs import to_messages
    from ctxkeep.memory.tools import MemoryTool, memory_tools
    from ctxkeep.messages import Block, ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall, ToolResult
    from ctxkeep.pairing import repair, validate
    from ctxkeep.providers import Completion, Model, Reply, get_model
    from ctxkeep.providers.deterministic import DeterministicModel
    from ctxkeep.session import Session
    from ctxkeep.settings import (
        CompactSettings,
        DurabilitySettings,
        EngineSettings,
        MemorySettings,
        ModelSummarySettings,
        OffloadSettings,
        ToolPolicy,
    )
    from ctxkeep.step import Compaction, Failure, Step, Usage
    from ctxkeep.store import Store
    from ctxkeep.summarize import ExtractiveSummarizer, ModelSummarizer, Summarizer, SummaryRequest
    from ctxkeep.tokens import Counter, get_counter

del TYPE_CHECKING

__version__ = "0.1.0"

# Where each public name lives. Importing them all here would cost every command (`ctxkeep --help`
# included) the engine, the summarizer, every importer and the tokenizer: ~0.5 s.
_HOMES: dict[str, str] = {
    "AsyncSession": "ctxkeep.async_session",
    "Block": "ctxkeep.messages",
    "CompactSettings": "ctxkeep.settings",
    "Compaction": "ctxkeep.step",
    "Completion": "ctxkeep.providers",
    "Context": "ctxkeep.context",
    "Conversation": "ctxkeep.formats",
    "Counter": "ctxkeep.tokens",
    "CtxkeepError": "ctxkeep.errors",
    "DeterministicModel": "ctxkeep.providers.deterministic",
    "DurabilitySettings": "ctxkeep.settings",
    "EngineSettings": "ctxkeep.settings",
    "ExtractiveSummarizer": "ctxkeep.summarize",
    "Failure": "ctxkeep.step",
    "FormatError": "ctxkeep.errors",
    "ImageBlock": "ctxkeep.messages",
    "LocalFolder": "ctxkeep.folder",
    "MemoryFolder": "ctxkeep.folder",
    "MemorySettings": "ctxkeep.settings",
    "MemoryTool": "ctxkeep.memory.tools",
    "Message": "ctxkeep.messages",
    "MessageError": "ctxkeep.errors",
    "Model": "ctxkeep.providers",
    "ModelSummarizer": "ctxkeep.summarize",
    "ModelSummarySettings": "ctxkeep.settings",
    "OffloadSettings": "ctxkeep.settings",
    "PinnedOverBudgetError": "ctxkeep.errors",
    "ProviderError": "ctxkeep.errors",
    "Reply": "ctxkeep.providers",
    "Session": "ctxkeep.session",
    "Step": "ctxkeep.step",
    "StorageError": "ctxkeep.errors",
    "Store": "ctxkeep.store",
    "Summarizer": "ctxkeep.summarize",
    "SummaryError": "ctxkeep.errors",
    "SummaryRequest": "ctxkeep.summarize",
    "TextBlock": "ctxkeep.messages",
    "ThinkingBlock": "ctxkeep.messages",
    "TokenizerError": "ctxkeep.errors",
    "ToolCall": "ctxkeep.messages",
    "ToolPolicy": "ctxkeep.settings",
    "ToolResult": "ctxkeep.messages",
    "Transcript": "ctxkeep.formats",
    "UnknownFormatError": "ctxkeep.errors",
    "Usage": "ctxkeep.step",
    "WorkspaceError": "ctxkeep.errors",
    "WorkspaceLockedError": "ctxkeep.errors",
    "from_agentscope": "ctxkeep.formats.agentscope",
    "from_anthropic": "ctxkeep.formats.anthropic",
    "from_openai": "ctxkeep.formats.openai",
    "get_counter": "ctxkeep.tokens",
    "get_model": "ctxkeep.providers",
    "load": "ctxkeep.formats",
    "memory_tools": "ctxkeep.memory.tools",
    "repair": "ctxkeep.pairing",
    "to_agentscope": "ctxkeep.formats.agentscope",
    "to_anthropic": "ctxkeep.formats.anthropic",
    "to_messages": "ctxkeep.host.inputs",
    "to_openai": "ctxkeep.formats.openai",
    "validate": "ctxkeep.pairing",
}

__all__ = [
    "AsyncSession",
    "Block",
    "CompactSettings",
    "Compaction",
    "Completion",
    "Context",
    "Conversation",
    "Counter",
    "CtxkeepError",
    "DeterministicModel",
    "DurabilitySettings",
    "EngineSettings",
    "ExtractiveSummarizer",
    "Failure",
    "FormatError",
    "ImageBlock",
    "LocalFolder",
    "MemoryFolder",
    "MemorySettings",
    "MemoryTool",
    "Message",
    "MessageError",
    "Model",
    "ModelSummarizer",
    "ModelSummarySettings",
    "OffloadSettings",
    "PinnedOverBudgetError",
    "ProviderError",
    "Reply",
    "Session",
    "Step",
    "StorageError",
    "Store",
    "Summarizer",
    "SummaryError",
    "SummaryRequest",
    "TextBlock",
    "ThinkingBlock",
    "TokenizerError",
    "ToolCall",
    "ToolPolicy",
    "ToolResult",
    "Transcript",
    "UnknownFormatError",
    "Usage",
    "WorkspaceError",
    "WorkspaceLockedError",
    "from_agentscope",
    "from_anthropic",
    "from_openai",
    "get_counter",
    "get_model",
    "load",
    "memory_tools",
    "repair",
    "to_agentscope",
    "to_anthropic",
    "to_messages",
    "to_openai",
    "validate",
]


def __getattr__(name: str) -> "Any":  # quoted: `Any` exists only for type checkers
    """Import a public name's module on first access (PEP 562) and keep the name here."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ctxkeep' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names with the module's own, loaded or not, so completion sees them all."""
    return sorted({*globals(), *__all__})
