-- Schema version 2 of the PostgreSQL store (issue #31): leadership of background
-- tasks as a lease row on the database's clock, replacing session advisory locks.
-- A frozen instance (SIGSTOP, a paused VM) kept its advisory lock as long as its TCP
-- connection stayed open, and no other instance ever took over its sweeps and
-- notification delivery. Applied by `approval-server migrate`. Stop every instance
-- of an older build first: they lead by advisory lock and would not see this table.

-- One row per background task ('sweep', 'outbox'). `holder` is the leading instance
-- (a random id per process), `epoch` counts leadership terms (it grows whenever the
-- lease passes to another holder or lapsed), and `expires_at` is on the database's
-- clock: the holder renews it; anyone may take a row whose `expires_at` has passed.
CREATE TABLE leadership (
    task text PRIMARY KEY,
    holder text NOT NULL,
    epoch bigint NOT NULL CHECK (epoch > 0),
    expires_at timestamptz NOT NULL
);
