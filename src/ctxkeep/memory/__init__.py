"""Long-term memory: MEMORY.md and the day logs, their search index, the agent's memory tools, the memory flush
before compaction, the daily consolidation, and the workspace rules put back after a compaction (docs/memory.md).
"""
