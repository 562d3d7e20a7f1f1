-- +goose NO TRANSACTION
-- +goose Up

-- Clean-up deletes inbox rows INBOX_RETENTION after they were received
-- (internal/cleanup, issue 9 item 9), rejected ones excepted: they wait for
-- a person. This index finds them by age without reading the inbox's recent
-- rows. Built CONCURRENTLY (the ledger inserts while a large inbox is
-- indexed); the DROP removes what a failed build left.
DROP INDEX CONCURRENTLY IF EXISTS inbox_received_idx;
CREATE INDEX CONCURRENTLY inbox_received_idx ON inbox (received_at)
    WHERE outcome <> 'rejected';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS inbox_received_idx;
