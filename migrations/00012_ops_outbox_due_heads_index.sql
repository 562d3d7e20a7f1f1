-- +goose NO TRANSACTION
-- +goose Up

-- What the relay claims (issue 9 item 8): due heads (00009), in the order
-- they are due, then in insertion order. Events waiting behind an earlier
-- unpublished event of their aggregate are not in it, so a parked or
-- backing-off event costs the claim nothing, however many events wait
-- behind it. Built CONCURRENTLY, like 00005, so payments are not blocked
-- while a large outbox is indexed; the DROP before the CREATE removes what
-- a failed build left.
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_due_head_idx;
CREATE INDEX CONCURRENTLY outbox_events_due_head_idx ON outbox_events (next_attempt_at, seq)
    WHERE published_at IS NULL AND parked_at IS NULL AND head;

-- The claim's index before heads (00005); no other query uses it.
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_due_idx;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_events_due_idx ON outbox_events (next_attempt_at, seq)
    WHERE published_at IS NULL AND parked_at IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_due_head_idx;
