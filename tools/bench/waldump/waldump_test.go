package waldump

import "testing"

// A record's fields as pg_waldump 15 prints them: a block with an image, a
// split with two, a commit with none.
func TestParseReadsARecordsFields(t *testing.T) {
	for _, c := range []struct {
		line string
		want Record
	}{
		{"rmgr: Heap        len (rec/tot):    238/  1525, tx:    1152009, lsn: 1/2A21C6D8, prev 1/2A21C670, desc: INSERT off 10 flags 0x0C, blkref #0: rel 1663/16384/16499 blk 81325 FPW",
			Record{RMgr: "Heap", Desc: "INSERT", Len: 1525, Tx: "1152009", DB: "16384", Rel: "16499", FirstFPI: true, FPIs: 1}},
		{"rmgr: Btree       len (rec/tot):     64/  2064, tx:    1152012, lsn: 1/2A225BC0, prev 1/2A225B88, desc: SPLIT_L level 0, blkref #0: rel 1663/16384/16508 blk 3897, blkref #1: rel 1663/16384/16508 blk 3898 FPW, blkref #2: rel 1663/16384/16508 blk 3899 FPW",
			Record{RMgr: "Btree", Desc: "SPLIT_L", Len: 2064, Tx: "1152012", DB: "16384", Rel: "16508", FPIs: 2}},
		{"rmgr: Transaction len (rec/tot):     46/    46, tx:    1152009, lsn: 1/2A225B28, prev 1/2A225AF0, desc: COMMIT 2026-11-27 16:25:00.842789 UTC",
			Record{RMgr: "Transaction", Desc: "COMMIT", Len: 46, Tx: "1152009"}},
	} {
		got, ok := Parse(c.line)
		if !ok || got != c.want {
			t.Errorf("Parse(%.40q...) = %+v, %v; want %+v", c.line, got, ok, c.want)
		}
	}
	if _, ok := Parse("pg_waldump: first record is after 0/1D43B50"); ok {
		t.Error("a line that is not a record was read as one")
	}
}
