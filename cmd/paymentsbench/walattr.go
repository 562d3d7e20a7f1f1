package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
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

// walRecord is what walShares reads of one pg_waldump line: its
// transaction, total length, the database of its first block (-1 without
// one) and its full-page images.
var walRecord = regexp.MustCompile(`^rmgr: \w+\s+len \(rec/tot\):\s+\d+/\s*(\d+), tx:\s+(\d+),.*?(?:blkref #0: rel \d+/(\d+)/\d+|$)`)

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
	cmd := exec.CommandContext(ctx, filepath.Join(m.cluster.BinDir(), "pg_waldump"),
		"-p", filepath.Join(m.cluster.DataDir(), "pg_wal"), "-s", from, "-e", to)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return walShare{}, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return walShare{}, fmt.Errorf("pg_waldump: %w", err)
	}
	share, err := sumWAL(out, oid)
	if werr := cmd.Wait(); werr != nil && err == nil {
		err = fmt.Errorf("pg_waldump: %w: %s", werr, strings.TrimSpace(stderr.String()))
	}
	return share, err
}

// sumWAL sums the records of pg_waldump's output that belong to database
// oid (see walOf).
func sumWAL(r io.Reader, oid string) (walShare, error) {
	var s walShare
	ours := map[string]bool{} // transactions that wrote a block of oid
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		m := walRecord.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		tx, db := m[2], m[3]
		switch {
		case db == oid:
			if tx != "0" {
				ours[tx] = true
			}
		case db == "" && tx != "0" && ours[tx]:
		default:
			continue
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		s.Bytes += n
		s.Records++
		s.FPI += int64(strings.Count(line, " FPW"))
	}
	return s, sc.Err()
}
