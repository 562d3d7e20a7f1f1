package operation_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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

// Build builds each module after those it uses, and refuses a list the
// rest of the service could not tell apart or could not wire.
func TestBuildRefusesWhatCannotBeToldApartOrWired(t *testing.T) {
	ok := []operation.Module{module("create_a", "a"), using(module("create_b", "b"), "create_a")}
	for name, mods := range map[string][]operation.Module{"listed in order": ok, "listed in reverse": {ok[1], ok[0]}} {
		if ops, err := operation.Build(mods, operation.Env{}); err != nil || len(ops) != 2 || ops[0].Name() != mods[0].Name {
			t.Fatalf("%s: %v %v", name, ops, err)
		}
	}
	undeclared := using(module("create_b", "b"), "create_a")
	undeclared.Uses = nil
	misnamed := module("create_c", "c")
	misnamed.New = func(operation.Env) (operation.Instance, error) { return stub{"create_d"}, nil }
	noIDField := module("create_e", "e")
	noIDField.Resource.IDField = ""
	hookless := module("create_f", "f")
	hookless.Hooks = []operation.Hook{{Module: "create_a", Point: "done", Of: func(operation.Instance) (any, error) { return nil, nil }}}
	for name, mods := range map[string][]operation.Module{
		"two of one name":          {module("create_a", "a"), module("create_a", "b")},
		"two of one resource type": {module("create_a", "a"), module("create_b", "a")},
		"a port not declared":      {ok[0], undeclared},
		"a use not registered":     {ok[1]},
		"uses in a circle":         {using(module("create_a", "a"), "create_b"), ok[1]},
		"a misnamed build":         {misnamed},
		"no id field":              {noIDField},
		"a hook nobody offers":     {ok[0], hookless},
	} {
		if _, err := operation.Build(mods, operation.Env{}); err == nil {
			t.Errorf("%s: built", name)
		} else if strings.TrimSpace(err.Error()) == "" {
			t.Errorf("%s: an empty error", name)
		}
	}
}

// using is m acting through the port of the module called used.
func using(m operation.Module, used string) operation.Module {
	m.Uses = []string{used}
	build := m.New
	m.New = func(env operation.Env) (operation.Instance, error) {
		if _, err := operation.Lookup[port](env, used); err != nil {
			return nil, err
		}
		return build(env)
	}
	return m
}

// hooks is a stub that offers the point "done" and records its hooks.
type hooks struct {
	stub
	added *[]string
}

func (h hooks) AddHook(point string, hook any) error {
	*h.added = append(*h.added, point+" "+hook.(string))
	return nil
}

// A hook reaches the operation that offers its point whatever the list's
// order, made from its declaring operation as built.
func TestBuildHandsEveryHookToItsPointInAnyOrder(t *testing.T) {
	var added []string
	offers := module("create_a", "a")
	offers.New = func(operation.Env) (operation.Instance, error) { return hooks{stub{"create_a"}, &added}, nil }
	declares := module("create_b", "b")
	declares.Hooks = []operation.Hook{{Module: "create_a", Point: "done", Of: func(self operation.Instance) (any, error) {
		return "by " + self.Name(), nil
	}}}
	for _, mods := range [][]operation.Module{{offers, declares}, {declares, offers}} {
		added = nil
		if _, err := operation.Build(mods, operation.Env{}); err != nil {
			t.Fatal(err)
		}
		if len(added) != 1 || added[0] != "done by create_b" {
			t.Errorf("%s first: hooks added %q, want [done by create_b]", mods[0].Name, added)
		}
	}
}

// A module whose provider lacks its port is built as an operation that
// answers 501 and that the reconciler skips; any other failure of New is
// still a failure of Build.
func TestAModuleTheProviderCannotServeIsBuiltUnsupported(t *testing.T) {
	lacking := module("create_x", "x")
	lacking.Routes = []string{"POST /xs"}
	lacking.New = func(operation.Env) (operation.Instance, error) {
		return nil, fmt.Errorf("xs: no port: %w", operation.ErrUnsupported)
	}
	ops, err := operation.Build([]operation.Module{module("create_a", "a"), lacking}, operation.Env{})
	if err != nil || len(ops) != 2 {
		t.Fatalf("Build: %v %v", ops, err)
	}
	if !operation.Supported(ops[0]) || operation.Supported(ops[1]) || ops[1].Name() != "create_x" {
		t.Errorf("supported: %v %v, want the first only", operation.Supported(ops[0]), operation.Supported(ops[1]))
	}
	if _, err := ops[1].Resume(context.Background(), nil); !errors.Is(err, operation.ErrUnsupported) {
		t.Errorf("Resume: %v", err)
	}
	p := ops[1].Problem(fmt.Errorf("wrapped: %w", operation.ErrUnsupported))
	if p == nil || p.Status != http.StatusNotImplemented || p.Code != problem.OperationNotSupportedByProvider {
		t.Errorf("the problem: %+v", p)
	}
	if ops[1].Problem(errors.New("other")) != nil {
		t.Error("the stand-in claims another error")
	}
	failing := module("create_y", "y")
	failing.New = func(operation.Env) (operation.Instance, error) { return nil, errors.New("broken") }
	if _, err := operation.Build([]operation.Module{failing}, operation.Env{}); err == nil {
		t.Error("a failure that is no ErrUnsupported was built")
	}
}
