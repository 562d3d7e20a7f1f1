package idempotency

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// A refusal of a command as it stands (what the provider would refuse
// today) refuses a new key, but not a key already recorded: that one is
// answered from its record, so a retry gets the answer it was given then.
func TestARefusalRefusesOnlyANewKey(t *testing.T) {
	t.Parallel()
	e, _, _ := testEngine(t)
	ctx := context.Background()
	op := finishingOp{resumes: &atomic.Int32{}}
	refused := errors.New("the provider would refuse this now")
	recorded := Scope{Tenant: "t", Operation: "finish", Key: "k-old"}
	if _, err := e.Do(ctx, op, Request{Scope: recorded, Fingerprint: []byte{1}, Resource: Resource{Type: "thing", ID: "th_1"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.RefuseNew(ctx, op, recorded, refused); err != nil {
		t.Errorf("a recorded key: %v, want it left to its record", err)
	}
	fresh := Scope{Tenant: "t", Operation: "finish", Key: "k-new"}
	if err := e.RefuseNew(ctx, op, fresh, refused); !errors.Is(err, refused) {
		t.Errorf("a new key: %v, want the refusal", err)
	}
	other := Scope{Tenant: "another tenant", Operation: "finish", Key: "k-old"}
	if err := e.RefuseNew(ctx, op, other, refused); !errors.Is(err, refused) {
		t.Errorf("another tenant's key of the same name: %v, want the refusal", err)
	}
	if err := e.RefuseNew(ctx, op, fresh, nil); err != nil {
		t.Errorf("no refusal: %v", err)
	}
}
