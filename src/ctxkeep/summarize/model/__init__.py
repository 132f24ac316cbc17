"""The model-written summary: the prompts (`prompts`), long histories in parts (`chunks`), the quality audit
(`audit`), what every summary gets appended (`augment`), and the summarizer that runs them (`summarizer`)."""
