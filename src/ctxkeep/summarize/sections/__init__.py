"""The summary's format: its Markdown form (`markdown`), fitting it to a size (`fit`), and its JSON form
for models held to a schema (`structured`)."""
