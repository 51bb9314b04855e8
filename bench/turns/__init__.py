"""Turn-taking: when the caller has finished, what the server adds, and the wait a caller hears on the wire."""
