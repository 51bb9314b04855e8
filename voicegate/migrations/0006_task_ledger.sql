-- The task ledger (internal/memory/tasks.py): the live status of work the agent dispatched for a caller.
-- A session digest keeps only what was dispatched (kind, name, task id); the status lives here and moves
-- as the work does. An entry holds the deployer's name of the tool or transfer target and a status from a
-- fixed vocabulary: never a tool's arguments or result, never anything the caller said. A finished
-- entry expires `memory.task_terminal_days` after it finished, an open one with the caller's retention;
-- at most `memory.max_tasks` per owner. Erased, exported and swept with the owner's other rows.
CREATE TABLE memory_tasks (
    owner_key text NOT NULL,
    task_id text NOT NULL,
    session_id text,
    kind text NOT NULL,
    name text NOT NULL,
    status text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (owner_key, task_id)
);
CREATE INDEX memory_tasks_owner_created ON memory_tasks (owner_key, created_at);
CREATE INDEX memory_tasks_expires_at ON memory_tasks (expires_at);
