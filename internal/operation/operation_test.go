package operation_test

import (
	"context"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

// stub is an operation that does nothing, named name.
type stub struct{ name string }

func (s stub) Name() string                                                         { return s.name }
func (stub) Resume(context.Context, *idempotency.Owner) (idempotency.Result, error) { return nil, nil }
func (stub) Render(idempotency.Result) (idempotency.Response, error) {
	return idempotency.Response{}, nil
}
func (stub) Routes(chi.Router, operation.HTTP) {}
func (stub) Problem(error) *problem.Problem    { return nil }

// port is what stubs export to each other.
type port interface{ Name() string }

func module(name, resource string) operation.Module {
	return operation.Module{Name: name, Resource: operation.Resource{Type: resource, IDField: resource + "Id"},
		New: func(operation.Env) (operation.Instance, error) { return stub{name}, nil }}
}

// Build builds the modules in order, each seeing those before it, and
// refuses a list the rest of the service could not tell apart.
func TestBuildRefusesWhatCannotBeToldApart(t *testing.T) {
	ok := []operation.Module{module("create_a", "a"), module("create_b", "b")}
	ok[1].New = func(env operation.Env) (operation.Instance, error) {
		if _, err := operation.Lookup[port](env, "create_a"); err != nil {
			return nil, err
		}
		return stub{"create_b"}, nil
	}
	if ops, err := operation.Build(ok, operation.Env{}); err != nil || len(ops) != 2 {
		t.Fatalf("a good list: %v %v", ops, err)
	}
	misnamed := module("create_c", "c")
	misnamed.New = func(operation.Env) (operation.Instance, error) { return stub{"create_d"}, nil }
	noIDField := module("create_e", "e")
	noIDField.Resource.IDField = ""
	for name, mods := range map[string][]operation.Module{
		"two of one name":          {module("create_a", "a"), module("create_a", "b")},
		"two of one resource type": {module("create_a", "a"), module("create_b", "a")},
		"a port built later":       {ok[1], ok[0]},
		"a misnamed build":         {misnamed},
		"no id field":              {noIDField},
	} {
		if _, err := operation.Build(mods, operation.Env{}); err == nil {
			t.Errorf("%s: built", name)
		} else if strings.TrimSpace(err.Error()) == "" {
			t.Errorf("%s: an empty error", name)
		}
	}
}
