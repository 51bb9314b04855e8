-- Caller memory. Every row is keyed by owner_key (an HMAC of the caller's verified identity, never a
-- raw phone number) and carries expires_at: reads filter on it, the sweeper deletes past it, and
-- `voicegate memory delete` removes every row of an owner from every table below.

-- One row per owner and document: `user` (explicit preferences) and `memory` (facts and the digest).
CREATE TABLE memories (
    owner_key text NOT NULL,
    scope text NOT NULL CHECK (scope IN ('user', 'memory')),
    content text NOT NULL,
    char_count integer NOT NULL,
    format text NOT NULL DEFAULT 'markdown' CHECK (format IN ('markdown', 'text')),
    revision bigint NOT NULL,
    embedding vector(256),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    source_session text,
    PRIMARY KEY (owner_key, scope)
);
CREATE INDEX memories_expires_at ON memories (expires_at);

-- The lines of each document with their embeddings, for recall and per-turn retrieval. Searched per
-- owner (an exact scan of a few dozen rows through the primary key), so no global ANN index: a global
-- index would return other owners' nearest neighbours and then filter them all away.
CREATE TABLE memory_items (
    owner_key text NOT NULL,
    scope text NOT NULL,
    position integer NOT NULL,
    text text NOT NULL,
    embedding vector(256) NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (owner_key, scope, position)
);
CREATE INDEX memory_items_expires_at ON memory_items (expires_at);

-- Earlier revisions of each document (bounded per document), for audit and undo.
CREATE TABLE memory_history (
    owner_key text NOT NULL,
    scope text NOT NULL,
    revision bigint NOT NULL,
    content text NOT NULL,
    source text NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (owner_key, scope, revision)
);
CREATE INDEX memory_history_expires_at ON memory_history (expires_at);

-- Optional per-call digests (topics and a gist of at most 50 characters) for the recall tool.
CREATE TABLE session_digests (
    id bigserial PRIMARY KEY,
    owner_key text NOT NULL,
    session_id text NOT NULL,
    topics text[] NOT NULL DEFAULT '{}',
    gist text NOT NULL CHECK (char_length(gist) <= 50),
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX session_digests_owner ON session_digests (owner_key, created_at DESC);
CREATE INDEX session_digests_expires_at ON session_digests (expires_at);
