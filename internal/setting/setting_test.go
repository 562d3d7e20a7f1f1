package setting_test

import (
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/setting"
)

// A setting's value is what was loaded, else its default; a duration is
// positive, and a value of the wrong type is an error, not a zero.
func TestValueIsTheLoadedOneOrTheDefault(t *testing.T) {
	ttl := setting.Duration("SOME_TTL", "168h", "how long")
	if ttl.Flag() != "some-ttl" {
		t.Errorf("flag %q, want some-ttl", ttl.Flag())
	}
	if d, err := setting.Value[time.Duration](nil, ttl); err != nil || d != 168*time.Hour {
		t.Errorf("default: %v %v", d, err)
	}
	if d, err := setting.Value[time.Duration](setting.Values{"SOME_TTL": time.Hour}, ttl); err != nil || d != time.Hour {
		t.Errorf("loaded: %v %v", d, err)
	}
	if _, err := setting.Value[int](nil, ttl); err == nil {
		t.Error("read as an int: no error")
	}
	for _, v := range []string{"0s", "-1h", "a week"} {
		if _, err := ttl.Parse(v); err == nil {
			t.Errorf("%q: read", v)
		}
	}
}
