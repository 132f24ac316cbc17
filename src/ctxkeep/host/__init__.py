"""What the hosts share: the host's messages in (`host.inputs`), what of a whole history is new
(`host.sync`), and the adapters' core (`host.core`): a session opened once, a history converted and
synced by what is new since the last call, the context mapped back onto the host's own items.

Empty on purpose: `host.inputs` and `host.sync` stand below the `Session` (which takes host messages),
`host.core` above it, so importing one part must not import the others.
"""
