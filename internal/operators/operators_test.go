package operators

import (
	"strings"
	"testing"
)

// OPERATOR_KEYS names each operator once, by a name the audit can print;
// a malformed entry is refused without printing its secret.
func TestParseAndAuthenticate(t *testing.T) {
	k, err := Parse(" alice:sk_alice_secret , bob@ops:sk_bob_secret ")
	if err != nil || k.Len() != 2 {
		t.Fatalf("Parse: %v, %d operators", err, k.Len())
	}
	if name, ok := k.Authenticate("sk_bob_secret"); !ok || name != "bob@ops" {
		t.Errorf("bob's secret: %q %v", name, ok)
	}
	if _, ok := k.Authenticate("sk_alice_secreT"); ok {
		t.Error("a wrong secret authenticated")
	}
	if _, ok := (Keys{}).Authenticate(""); ok {
		t.Error("no operators, and an empty secret authenticated")
	}
	for _, bad := range []string{"alice", "alice:", ":sk_x", "a b:sk_x", "alice:sk_1,alice:sk_2"} {
		_, err := Parse(bad)
		if err == nil {
			t.Errorf("Parse(%q) accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), "sk_") {
			t.Errorf("Parse(%q): the error prints a secret: %v", bad, err)
		}
	}
}
