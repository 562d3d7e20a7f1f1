package idempotency

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// lockOrderScopes are the scopes whose group-commit order the processes
// compare.
var lockOrderScopes = []Scope{
	{Tenant: "t_1", Operation: "create_payment", Key: "k-1"},
	{Tenant: "t_1", Operation: "create_payment", Key: "k-2"},
	{Tenant: "t_2", Operation: "create_refund", Key: "k-1"},
	{Tenant: "t_1", Operation: "create_paymen", Key: "tk-1"}, // the separators count
}

const envLockOrderChild = "PAYMENTSAPI_TEST_LOCK_ORDER_CHILD"

// Two instances must put the same keys in one order in their groups
// (lockOrder), so that their groups take those keys' locks in one order
// and cannot deadlock on them: the order of a scope is the same in
// another process, whatever that process's hash seeds (a seeded hash,
// maphash say, differs in every process).
func TestLockOrderIsTheSameInEveryProcess(t *testing.T) {
	orders := func() string {
		var b strings.Builder
		for _, s := range lockOrderScopes {
			fmt.Fprintf(&b, "%d\n", lockOrder(s))
		}
		return b.String()
	}
	if os.Getenv(envLockOrderChild) != "" {
		fmt.Print("orders:\n" + orders())
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockOrderIsTheSameInEveryProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envLockOrderChild+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the other process: %v\n%s", err, out)
	}
	_, theirs, ok := strings.Cut(string(out), "orders:\n")
	if !ok {
		t.Fatalf("the other process printed no orders:\n%s", out)
	}
	mine := orders()
	if !strings.HasPrefix(theirs, mine) {
		t.Fatalf("another process orders the scopes\n%s\nthis one\n%s", theirs, mine)
	}
	seen := map[string]bool{}
	for _, o := range strings.Fields(mine) {
		if seen[o] {
			t.Fatalf("two scopes share the order %s: the separators must count", o)
		}
		seen[o] = true
	}
}
