package idempotency

import (
	"context"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/rowset"
)

// widgetRow is insertWidget over input rows (package rowset): a Create whose
// batch may be merged with other requests' like batches.
var widgetRow = claim.NewRows(`INSERT INTO widgets (id) VALUES ($1)`, []rowset.Column{{Name: "id", Type: "text"}}, func(claimed string) string {
	return `
		INSERT INTO widgets (id) SELECT id FROM input WHERE ` + claimed + ` ORDER BY ord`
})

func insertWidgetRow(id string) func(*claim.Batch) {
	return func(b *claim.Batch) { b.Queue(widgetRow.With(id)) }
}

// Claims queued together are merged (package groupcommit): the claim is one
// statement over all their rows, and so is each statement after it. The
// claim takes each row's key on its own, and the statements after it write
// only the rows whose key it took: a retry's row among new claims gets no
// id and writes nothing, while the others' do, in one transaction. Here a
// first claim waits on a row lock with the one claim slot, while three new
// claims and a retry queue behind it.
func TestAMergedClaimWritesOnlyTheRowsWhoseKeyItTook(t *testing.T) {
	t.Parallel()
	e, pool, clk, reg := measuredEngine(t)
	ctx := context.Background()
	createWidgets(t, pool)
	// The retry's key, claimed elsewhere (this engine has no hint of it:
	// it claims, as a retry reaching another instance does).
	retry := Scope{Tenant: "t", Operation: "widgets.create", Key: "w_retry"}
	if _, ok, err := claimKey(ctx, pool, retry, []byte{1}, Resource{Type: "widget", ID: "w_retry"}, clk.Now(), time.Minute, nil); err != nil || !ok {
		t.Fatalf("claim the retry's key: %v %v", ok, err)
	}
	do := func(id string) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := e.Do(ctx, &recordingOp{}, Request{
				Scope:       Scope{Tenant: "t", Operation: "widgets.create", Key: id},
				Fingerprint: []byte{1}, Resource: Resource{Type: "widget", ID: id},
				Create: insertWidgetRow(id),
			})
			done <- err
		}()
		return done
	}
	holder := holdWidget(t, pool, "w_blocked")
	blocked := do("w_blocked")
	waitFor(t, func() bool { return waitingOnALock(t, pool) })
	news := []<-chan error{do("w_1"), do("w_2")}
	retried := do("w_retry")
	news = append(news, do("w_3"))
	waitFor(t, func() bool { return e.commits.(grouped).claims.Waiting() == 4 })
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range append(news, blocked) {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-retried; err == nil {
		t.Fatal("the retry of a key in use was answered as its first request")
	}
	for id, want := range map[string]bool{"w_1": true, "w_2": true, "w_3": true, "w_retry": false, "w_blocked": true} {
		if got := widgetExists(t, pool, id); got != want {
			t.Errorf("widget %s exists: %v, want %v", id, got, want)
		}
	}
	var claims int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT xid) FROM widgets WHERE id IN ('w_1', 'w_2', 'w_3')`).Scan(&claims); err != nil {
		t.Fatal(err)
	}
	if claims != 1 {
		t.Errorf("the queued claims wrote in %d transactions, want one", claims)
	}
	if got := byKind(t, reg, "paymentsapi_group_commit_merged_batches_total")["claims"].GetCounter().GetValue(); got != 4 {
		t.Errorf("%v claims' batches merged, want the 4 queued", got)
	}
}
