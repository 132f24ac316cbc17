"""The facts a summary is made of, read from the messages themselves: exact identifiers (`identifiers`),
shell commands (`shell`), tool runs and their outcomes (`runs`), and everything else (`collect`)."""
