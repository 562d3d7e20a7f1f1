package app_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/setting"
)

// The modules' settings are part of the public contract: each is listed
// with its default in docs/configuration.md, and AUTHORIZATION_TTL keeps
// the name, flag and default it has always had.
func TestModuleSettingsAreDocumentedAndKeepTheirNames(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]setting.Setting{}
	for _, s := range app.Settings() {
		if _, twice := names[s.Name]; twice {
			t.Errorf("%s is declared twice", s.Name)
		}
		names[s.Name] = s
		if row := "| `" + s.Name + "` | `" + s.Default + "` |"; !strings.Contains(string(doc), row) {
			t.Errorf("docs/configuration.md has no row %q", row)
		}
	}
	ttl, ok := names["AUTHORIZATION_TTL"]
	if !ok {
		t.Fatal("no module declares AUTHORIZATION_TTL")
	}
	if d, err := setting.Value[time.Duration](nil, ttl); err != nil || d != 168*time.Hour || ttl.Flag() != "authorization-ttl" {
		t.Errorf("AUTHORIZATION_TTL: default %v (%v), flag -%s; want 168h, -authorization-ttl", d, err, ttl.Flag())
	}
}
