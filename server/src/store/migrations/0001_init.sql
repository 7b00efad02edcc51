-- Schema version 1 of the PostgreSQL store. Applied by `approval-server migrate`,
-- in one transaction together with its row in schema_migrations.

-- The deployment's identity, shared by every instance: server_id, the identity
-- key's public half and (unless kept in a file, --server-key) its secret half.
CREATE TABLE meta (
    k text PRIMARY KEY,
    v text NOT NULL
);

-- One row per proposal. `body` is the record's JSON exactly as serde wrote it (text,
-- not jsonb: jsonb would reorder keys and renormalise numbers of the payload). The
-- other columns are what indexes and conditional updates need.
CREATE TABLE records (
    id text PRIMARY KEY,
    agent text NOT NULL,
    status text NOT NULL,
    created bigint NOT NULL,
    deadline bigint,
    revision bigint NOT NULL,
    -- EXECUTING only: until when (database clock, unix milliseconds) the instance
    -- that claimed it is known alive. Renewed while the executor runs.
    lease_until bigint,
    body text NOT NULL
);
CREATE INDEX records_by_status ON records (status, created DESC, id DESC);
CREATE INDEX records_by_agent ON records (agent, created DESC, id DESC);
CREATE INDEX records_by_deadline ON records (deadline, id) WHERE deadline IS NOT NULL;
CREATE INDEX records_by_lease ON records (lease_until) WHERE lease_until IS NOT NULL;

-- PENDING records per agent, and in all under '' (never an agent name: those are
-- 1-64 characters). Kept by each write under the audit head's lock, so a create
-- checks the limits in O(1) rather than counting every pending record.
CREATE TABLE pending_counts (
    agent text PRIMARY KEY,
    n bigint NOT NULL CHECK (n >= 0)
);

-- Canonical policies by hash, written before any record that names them.
CREATE TABLE policies (
    hash text PRIMARY KEY,
    body text NOT NULL
);

-- The audit hash chain, and its head: one row, locked FOR UPDATE by every write
-- transaction, so appends from any number of instances form one chain.
CREATE TABLE audit (
    seq bigint PRIMARY KEY,
    entry text NOT NULL
);
CREATE TABLE audit_head (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    seq bigint NOT NULL,
    -- NULL until the first entry: the chain starts from audit::genesis().
    hash text
);
INSERT INTO audit_head (seq, hash) VALUES (0, NULL);

-- Notifications to deliver, queued in the same transaction as the change.
CREATE TABLE outbox (
    seq bigserial PRIMARY KEY,
    item text NOT NULL
);
