-- Erasure that every writer respects, history without text, and the owner-key fingerprint.

-- One row per erased owner: `epoch` rises by one with every erasure, in the same transaction (and under
-- the same per-owner advisory lock) that deletes the owner's rows. Every write carries the epoch its
-- writer started from and is refused when it is no longer current, so a hang-up digest, a session
-- digest or an edit that began before the erasure can never bring the caller back. The row holds no
-- caller content (the key is an HMAC) and lives `memory.retention_days`, longer than any writer that
-- could still hold an older epoch.
CREATE TABLE memory_erasures (
    owner_key text PRIMARY KEY,
    epoch bigint NOT NULL,
    erased_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX memory_erasures_expires_at ON memory_erasures (expires_at);

-- History keeps who changed what revision when, never the text: a line removed from memory must not
-- survive in an earlier revision. Each row expires by its own age.
ALTER TABLE memory_history DROP COLUMN content;
ALTER TABLE memory_history ADD COLUMN char_count integer NOT NULL DEFAULT 0;
ALTER TABLE memory_history ADD COLUMN session_id text;

-- Settings that must be the same for every process on this database. `owner_key_fingerprint` is an
-- HMAC of a fixed label under the owner-key secret: it proves a process holds the secret that wrote
-- the stored owner keys, without revealing it.
CREATE TABLE memory_settings (
    key text PRIMARY KEY,
    value text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
