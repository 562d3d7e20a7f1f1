package pgcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/pgcluster"
)

// count returns the rows of t on url.
func count(t *testing.T, url string) int {
	t.Helper()
	n, err := rows(url)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func rows(url string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n)
	return n, err
}

func exec(t *testing.T, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
}

// A synchronous standby has every acknowledged commit when the primary
// crashes; the multi-host URL reaches it once promoted.
func TestSynchronousCrashThenPromote(t *testing.T) {
	p := pgcluster.Start(t, pgcluster.Options{Synchronous: true})
	exec(t, p.URL(), "CREATE TABLE t (id int); INSERT INTO t SELECT generate_series(1, 10)")
	crashThenPromote(t, p, 10)
}

// crashThenPromote crashes p's primary, promotes its standby, and checks
// that the multi-host URL reaches want rows of t.
func crashThenPromote(t *testing.T, p *pgcluster.Pair, want int) {
	t.Helper()
	p.Primary.Crash()
	p.Promote()
	if n := count(t, p.URL()); n != want {
		t.Fatalf("%d rows after the failover, want %d", n, want)
	}
}

// A detached standby lacks the primary's last commits once promoted.
func TestDetachedStandbyLosesTheTail(t *testing.T) {
	p := pgcluster.Start(t, pgcluster.Options{})
	exec(t, p.URL(), "CREATE TABLE t (id int); INSERT INTO t SELECT generate_series(1, 10)")
	// Let the standby apply the table before cutting it off.
	deadline := time.Now().Add(10 * time.Second)
	for n, err := rows(p.Standby.URL()); err != nil || n != 10; n, err = rows(p.Standby.URL()) {
		if time.Now().After(deadline) {
			t.Fatalf("standby did not catch up: %d rows, %v", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.Detach()
	exec(t, p.URL(), "INSERT INTO t SELECT generate_series(11, 15)") // lost
	crashThenPromote(t, p, 10)
}

// A frozen primary keeps its port open: the multi-host URL with a connect
// timeout still reaches the promoted standby.
func TestFrozenPrimaryThenPromote(t *testing.T) {
	p := pgcluster.Start(t, pgcluster.Options{Synchronous: true})
	exec(t, p.URL(), "CREATE TABLE t (id int); INSERT INTO t SELECT generate_series(1, 3)")
	p.Primary.Freeze()
	p.Promote()
	start := time.Now()
	if n := count(t, p.URL()+"&connect_timeout=2"); n != 3 {
		t.Fatalf("%d rows, want 3", n)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("connecting past the frozen primary took %s", d)
	}
}
