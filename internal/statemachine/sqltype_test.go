package statemachine

import (
	"testing"
	"time"
)

// A move's columns are written over input rows (package rowset), whose
// parameters need an SQL type: derived from the value's Go type, named
// types and pointers included, or given.
func TestColumnSQLType(t *testing.T) {
	type code string
	type cents int64
	now := time.Now()
	s := "x"
	for _, c := range []struct {
		col  Column
		want string
	}{
		{Column{Value: "x"}, "text"},
		{Column{Value: code("x")}, "text"},
		{Column{Value: &s}, "text"},
		{Column{Value: int64(1)}, "bigint"},
		{Column{Value: cents(1)}, "bigint"},
		{Column{Value: int16(1)}, "bigint"},
		{Column{Value: uint64(1)}, "numeric"},
		{Column{Value: 1.5}, "double precision"},
		{Column{Value: true}, "boolean"},
		{Column{Value: now}, "timestamptz"},
		{Column{Value: &now}, "timestamptz"},
		{Column{Value: []byte("x")}, "bytea"},
		{Column{Value: nil, Type: "text"}, "text"},
	} {
		if got := c.col.sqlType(); got != c.want {
			t.Errorf("%T: %s, want %s", c.col.Value, got, c.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("a nil value without a Type did not panic")
		}
	}()
	Column{Name: "held_by"}.sqlType()
}
