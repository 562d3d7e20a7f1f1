package rowset

import (
	"strings"
	"testing"
)

func TestManyIsDerivedFromTheOneRowText(t *testing.T) {
	s := New([]Column{{"id", "text"}, {"amount", "bigint"}, {"at", "timestamp with time zone"}},
		"\n, ins AS (INSERT INTO t SELECT id, amount, at FROM input ORDER BY ord RETURNING id)\nSELECT input.ord FROM input JOIN ins USING (id)")
	one := s.SQL()
	if !strings.Contains(one, "WITH input (ord, id, amount, at) AS (VALUES (1::bigint, $1::text, $2::bigint, $3::timestamp with time zone))\n, ins AS") {
		t.Fatalf("one-row text:\n%s", one)
	}
	many, ok := Many(one)
	if !ok {
		t.Fatal("no many-row text")
	}
	want := "WITH input (ord, id, amount, at) AS (SELECT u.ord, u.id, u.amount, u.at FROM unnest($1::text[], $2::bigint[], $3::timestamp with time zone[]) WITH ORDINALITY AS u (id, amount, at, ord))\n, ins AS"
	if !strings.HasPrefix(many, want) || !strings.HasSuffix(many, "JOIN ins USING (id)") {
		t.Fatalf("many-row text:\n%s", many)
	}
	for _, other := range []string{"SELECT 1", "-- rowset: id text\nSELECT $1", "-- rowset: id\nWITH input"} {
		if _, ok := Many(other); ok {
			t.Errorf("Many(%q) found a many-row text", other)
		}
	}
}

func TestNewRefusesWhatManyCouldNotUnnest(t *testing.T) {
	for _, cols := range [][]Column{nil, {{"ids", "text[]"}}, {{"ord", "bigint"}}, {{"Id", "text"}}, {{"id", "numeric(12,2)"}}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%v) did not panic", cols)
				}
			}()
			New(cols, " SELECT 1")
		}()
	}
}
