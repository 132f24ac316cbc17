"""ctxkeep keeps an LLM agent's context window inside its budget without losing what it needs.

Start with `ctxkeep.formats.load` (read a transcript), `ctxkeep.messages` (the message model,
`validate` and `repair`) and `ctxkeep.tokens.get_counter` (exact token counts).
"""

__version__ = "0.1.0"
