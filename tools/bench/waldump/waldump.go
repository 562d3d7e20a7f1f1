// Package waldump reads PostgreSQL's WAL through pg_waldump, record by
// record, for the benchmarks that say where a payment's WAL goes
// (tools/bench/walflow by relation, tools/paymentsbench by database).
package waldump

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
)

// Record is what the benchmarks read of one WAL record.
type Record struct {
	RMgr string // resource manager, e.g. Heap, Btree, Transaction
	Desc string // the record's kind within it, e.g. INSERT, COMMIT
	Len  int64  // total length, full-page images included
	Tx   string // its transaction id; "0" for none
	// DB and Rel are the database and relfilenode of its first block;
	// empty for a record without one (a commit, a checkpoint).
	DB, Rel string
	// FirstFPI: its first block came with a full-page image; FPIs counts
	// the images of all its blocks.
	FirstFPI bool
	FPIs     int
}

// line is one record as pg_waldump prints it.
var line = regexp.MustCompile(`^rmgr: (\w+)\s+len \(rec/tot\):\s+\d+/\s*(\d+), tx:\s+(\d+),.*?desc: (\w+)(?:.*?blkref #0: rel \d+/(\d+)/(\d+)(?: fork \w+)? blk \d+( FPW)?)?`)

// Parse reads one line of pg_waldump's output; false if it is not a record.
func Parse(s string) (Record, bool) {
	m := line.FindStringSubmatch(s)
	if m == nil {
		return Record{}, false
	}
	n, _ := strconv.ParseInt(m[2], 10, 64)
	return Record{
		RMgr: m[1], Len: n, Tx: m[3], Desc: m[4], DB: m[5], Rel: m[6],
		FirstFPI: m[7] != "", FPIs: strings.Count(s, " FPW"),
	}, true
}

// Scan calls fn with each record of r, pg_waldump's output.
func Scan(r io.Reader, fn func(Record)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if rec, ok := Parse(sc.Text()); ok {
			fn(rec)
		}
	}
	return sc.Err()
}

// Read runs binDir's pg_waldump over walDir from one position to another
// and calls fn with each record, as it reads them.
func Read(ctx context.Context, binDir, walDir, from, to string, fn func(Record)) error {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "pg_waldump"), "-p", walDir, "-s", from, "-e", to)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pg_waldump: %w", err)
	}
	err = Scan(out, fn)
	if werr := cmd.Wait(); werr != nil && err == nil {
		err = fmt.Errorf("pg_waldump: %w: %s", werr, strings.TrimSpace(stderr.String()))
	}
	return err
}
