-- What the agent did on each call, kept with the call's session digest for the recall tool: a JSON
-- array of at most 10 small objects ({"action": "tool", "name": ..., "status": "ok"|"error"} or
-- {"action": "transfer", "target": ..., "status": ...}), never a tool's arguments or result. It lives,
-- is capped per owner, erased and exported with its row.
ALTER TABLE session_digests ADD COLUMN actions jsonb NOT NULL DEFAULT '[]';
