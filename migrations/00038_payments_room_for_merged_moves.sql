-- +goose Up

-- payments (issue 22): more room on each page for a payment's move. Since
-- a group's payments are created by one statement (and so land on the same
-- page) and moved by one statement a few milliseconds later, a page's rows
-- are moved together, while the versions they replace are still visible
-- to transactions in flight and cannot be pruned yet. At fillfactor 90
-- (00015) one move in ten found no room on its page (bench/walflow, 16
-- workers: 437 of 4,000 not HOT): a new version on another page, an entry
-- in each of the table's four indexes and a lock record. At 80, 97 of
-- 4,000 (5,705 against 5,655 bytes of WAL per payment); at 70, 1%, for a
-- table a seventh larger again. Payments are kept for ever, so the room is
-- paid for once per page; only pages filled from now on get it. Setting a
-- fillfactor takes a lock that neither reads nor writes wait for.
ALTER TABLE payments SET (fillfactor = 80);

-- +goose Down
ALTER TABLE payments SET (fillfactor = 90);
