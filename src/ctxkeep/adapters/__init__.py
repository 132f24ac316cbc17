"""One-line adapters that run ctxkeep before every model call of an agent framework.

Each framework has its own module, imported only when used, and its own optional extra
(``pip install 'ctxkeep[langchain]'``...). Every adapter does the same three things on each call:
take what is new in the framework's full history (it hands over all of it every time; an `Intake` of
`ctxkeep.host.core` converts and adds only the new items), `Session.prepare` with the call's system
prompt and tool schemas, and hand the compacted context back in the framework's own types. Sync hosts
get a `Session`, async hosts an `AsyncSession`, so the event loop
never waits on disk or on a summarizer.
"""
