package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/paymentsapi/paymentsapi/tools/bench/waldump"
)

// The WAL counters (pg_stat_wal) are the whole cluster's: a phase's count
// holds whatever else the cluster wrote meanwhile, such as autovacuum
// cleaning up an earlier phase's database. So each phase also reads its
// own WAL, from the position where it started to where it ended, with
// pg_waldump, and keeps the records of its own database: what its payments
// cost, their autovacuum and relay included, and nothing of the others'.

// walShare is the WAL records of one database in a phase's span.
type walShare struct {
	Bytes, FPI, Records int64
}

// add returns s + o.
func (s walShare) add(o walShare) walShare {
	return walShare{Bytes: s.Bytes + o.Bytes, FPI: s.FPI + o.FPI, Records: s.Records + o.Records}
}

// walPosition is the cluster's current WAL insert position.
func (m *monitor) walPosition(ctx context.Context) (string, error) {
	var lsn string
	if err := m.conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		return "", fmt.Errorf("read the WAL position: %w", err)
	}
	return lsn, nil
}

// walOf sums the WAL between from and to that database db wrote: records
// with a block of one of its relations, and those without a block (a
// commit) of a transaction that wrote one. It must run before a checkpoint
// may recycle the segments (the next phase's).
func (m *monitor) walOf(ctx context.Context, db, from, to string) (walShare, error) {
	var oid, flushed string
	if err := m.conn.QueryRow(ctx, "SELECT oid::text FROM pg_database WHERE datname = $1", db).Scan(&oid); err != nil {
		return walShare{}, fmt.Errorf("database %s: %w", db, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := m.conn.QueryRow(ctx, "SELECT (pg_current_wal_flush_lsn() >= $1::pg_lsn)::text", to).Scan(&flushed); err != nil {
			return walShare{}, err
		}
		if flushed == "true" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var share walShare
	err := waldump.Read(ctx, m.cluster.BinDir(), filepath.Join(m.cluster.DataDir(), "pg_wal"), from, to, sumWAL(&share, oid))
	return share, err
}

// sumWAL adds to s each record of database oid (see walOf), in the order
// pg_waldump prints them.
func sumWAL(s *walShare, oid string) func(waldump.Record) {
	ours := map[string]bool{} // transactions that wrote a block of oid
	return func(r waldump.Record) {
		switch {
		case r.DB == oid:
			if r.Tx != "0" {
				ours[r.Tx] = true
			}
		case r.DB == "" && r.Tx != "0" && ours[r.Tx]:
		default:
			return
		}
		s.Bytes += r.Len
		s.Records++
		s.FPI += int64(r.FPIs)
	}
}
