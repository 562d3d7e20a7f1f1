package main

import (
	"math"
	"strings"
	"testing"

	"github.com/paymentsapi/paymentsapi/tools/bench/waldump"
)

// A phase's own WAL is its database's records: those with one of its blocks,
// and the commits of its transactions; another database's records (its
// autovacuum, say) and the cluster's own (a checkpoint) are left out.
func TestSumWALKeepsOneDatabasesRecords(t *testing.T) {
	dump := strings.Join([]string{
		"rmgr: Heap        len (rec/tot):    238/  1525, tx:    1152009, lsn: 1/2A21C6D8, prev 1/2A21C670, desc: INSERT off 10 flags 0x0C, blkref #0: rel 1663/16384/16499 blk 81325 FPW",
		"rmgr: Btree       len (rec/tot):     55/    55, tx:    1152009, lsn: 1/2A21CCD0, prev 1/2A21C6D8, desc: INSERT_LEAF off 52, blkref #0: rel 1663/16384/16507 blk 75",
		"rmgr: Heap2       len (rec/tot):     59/  8251, tx:          0, lsn: 1/2A21D000, prev 1/2A21CCD0, desc: PRUNE latestRemovedXid 5 nredirected 0 ndead 1, blkref #0: rel 1663/16999/17001 blk 3 FPW",
		"rmgr: Transaction len (rec/tot):     46/    46, tx:    1152009, lsn: 1/2A225B28, prev 1/2A225AF0, desc: COMMIT 2026-11-27 16:25:00.842789 UTC",
		"rmgr: Transaction len (rec/tot):     46/    46, tx:    1152011, lsn: 1/2A225B58, prev 1/2A225B28, desc: COMMIT 2026-11-27 16:25:00.842789 UTC",
		"rmgr: Standby     len (rec/tot):     50/    50, tx:          0, lsn: 1/2A225B88, prev 1/2A225B58, desc: RUNNING_XACTS nextXid 1152012",
		"rmgr: Btree       len (rec/tot):     64/  2064, tx:    1152012, lsn: 1/2A225BC0, prev 1/2A225B88, desc: SPLIT_L level 0, blkref #0: rel 1663/16384/16508 blk 3897 FPW, blkref #1: rel 1663/16384/16508 blk 3898 FPW",
		"",
	}, "\n")
	var got walShare
	if err := waldump.Scan(strings.NewReader(dump), sumWAL(&got, "16384")); err != nil {
		t.Fatal(err)
	}
	want := walShare{Bytes: 1525 + 55 + 46 + 2064, FPI: 3, Records: 4}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// The targets judge a phase's own WAL when it was read, the cluster's
// counters when it was not.
func TestWALPerOpPrefersTheDatabasesOwn(t *testing.T) {
	p := phase{Ops: 10, DB: counters{WALBytes: 9000}}
	if got := p.walPerOp(); got != 900 {
		t.Fatalf("without its own: %v, want 900", got)
	}
	p.OwnWAL = walShare{Bytes: 6000, Records: 40}
	if got := p.walPerOp(); got != 600 || math.IsNaN(got) {
		t.Fatalf("with its own: %v, want 600", got)
	}
}
