"""ctxkeep keeps an LLM agent's context window inside its budget without losing what it needs.

    with Session.open("workspace", window=32_000) as session:
        session.add(messages)
        step = session.prepare(system_prompt)   # before every reasoning step
        client.chat.completions.create(model=MODEL, messages=step.to_openai())

The names below are the public contract. The submodules (`ctxkeep.engine`, `ctxkeep.live`,
`ctxkeep.summarize.*`, ...) are internal: they may change in any release.
"""

from ctxkeep.async_session import AsyncSession
from ctxkeep.context import Context
from ctxkeep.engine import Compaction, Failure, Step
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
from ctxkeep.inputs import to_messages
from ctxkeep.memory.tools import MemoryTool, memory_tools
from ctxkeep.messages import (
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    repair,
    validate,
)
from ctxkeep.providers import Completion, Model, Reply, get_model
from ctxkeep.providers.deterministic import DeterministicModel
from ctxkeep.records import Usage
from ctxkeep.session import Session
from ctxkeep.settings import (
    CompactSettings,
    EngineSettings,
    MemorySettings,
    ModelSummarySettings,
    OffloadSettings,
    ToolPolicy,
)
from ctxkeep.store import Store
from ctxkeep.summarize import ExtractiveSummarizer, ModelSummarizer, Summarizer, SummaryRequest
from ctxkeep.tokens import Counter, get_counter

__version__ = "0.1.0"

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
