"""Turn-taking models: Silero VAD (is this voice?) and Smart Turn (has the caller finished?), and their weights."""
