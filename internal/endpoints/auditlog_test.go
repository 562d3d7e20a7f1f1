package endpoints_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// auditEvents is GET /audit-events with secret and query.
func auditEvents(e *servicetest.Env, secret, query string) (servicetest.Response, []map[string]any, string) {
	e.T.Helper()
	r := e.Get(secret, "/audit-events"+query)
	if r.Status != http.StatusOK {
		return r, nil, ""
	}
	var page struct {
		Items      []map[string]any `json:"items"`
		NextCursor string           `json:"nextCursor"`
	}
	if err := json.Unmarshal(r.Body, &page); err != nil {
		e.T.Fatal(err)
	}
	return r, page.Items, page.NextCursor
}

// An endpoint created, rotated and deleted by a tenant's key is in the
// audit log, each change naming the key and its request; only an operator
// reads it (a tenant's key is refused 403, no key 401), a page at a time.
func TestTheAuditLogHoldsEndpointChangesForOperatorsOnly(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithOperators(t))
	_, _, keyA := e.SecondKey()
	send := func(method, path, key, requestID, body string) servicetest.Response {
		t.Helper()
		h := map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "X-Request-Id": requestID}
		if key != "" {
			h["Idempotency-Key"] = key
		}
		if body != "" {
			h["Content-Type"] = "application/json"
		}
		e.Clock.Advance(time.Second) // the log's order is its events' times
		return e.Do(method, path, []byte(body), h)
	}
	created := send("POST", "/webhook-endpoints", "k-ep", "req-ep-create", `{"url":"http://127.0.0.1:9/hook"}`)
	if created.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", created.Status, created.Body)
	}
	id := created.JSON(t)["endpointId"].(string)
	if r := send("POST", "/webhook-endpoints", "k-ep", "req-ep-retry", `{"url":"http://127.0.0.1:9/hook"}`); r.Status != http.StatusCreated {
		t.Fatalf("the create's retry: %d %s", r.Status, r.Body)
	}
	if r := send("POST", "/webhook-endpoints/"+id+"/rotate-secret", "k-rot", "req-ep-rotate", ""); r.Status != http.StatusOK {
		t.Fatalf("rotate: %d %s", r.Status, r.Body)
	}
	if r := send("DELETE", "/webhook-endpoints/"+id, "", "req-ep-delete", ""); r.Status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}

	if r, _, _ := auditEvents(e, servicetest.SecretA, ""); r.Status != http.StatusForbidden || r.JSON(t)["code"] != "OPERATORS_ONLY" {
		t.Errorf("a tenant's key: %d %s, want 403 OPERATORS_ONLY", r.Status, r.Body)
	}
	if r, _, _ := auditEvents(e, "", ""); r.Status != http.StatusUnauthorized {
		t.Errorf("no key: %d %s, want 401", r.Status, r.Body)
	}
	if r, _, _ := auditEvents(e, servicetest.OperatorSecret, "?page=2"); r.Status != http.StatusBadRequest {
		t.Errorf("an unknown parameter: %d %s, want 400", r.Status, r.Body)
	}

	r, first, cursor := auditEvents(e, servicetest.OperatorSecret, "?limit=2")
	if r.Status != http.StatusOK || len(first) != 2 || cursor == "" {
		t.Fatalf("the first page: %d %s", r.Status, r.Body)
	}
	_, rest, last := auditEvents(e, servicetest.OperatorSecret, "?limit=2&cursor="+cursor)
	if len(rest) != 1 || last != "" {
		t.Fatalf("the second page: %v, cursor %q", rest, last)
	}
	var got []string
	for _, ev := range append(first, rest...) {
		got = append(got, fmt.Sprintf("%s %s %s %s %s", ev["action"], ev["actor"], ev["requestId"], ev["tenantId"], ev["targetId"]))
	}
	who := actor.API(keyA)
	want := []string{
		"webhook_endpoint.deleted " + who + " req-ep-delete tenant_a " + id,
		"webhook_endpoint.secret_rotated " + who + " req-ep-rotate tenant_a " + id,
		"webhook_endpoint.created " + who + " req-ep-create tenant_a " + id,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the audit log, newest first:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, only, _ := auditEvents(e, servicetest.OperatorSecret, "?action=webhook_endpoint.created&tenantId=tenant_a"); len(only) != 1 {
		t.Errorf("filtered by action and tenant: %v", only)
	}
}

// An endpoint's deletion and its audit record commit together: when the
// record cannot be written, the endpoint is not deleted either.
func TestAnEndpointIsNotDeletedWithoutItsAuditRecord(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	h := map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "Content-Type": "application/json", "Idempotency-Key": "k-ep"}
	created := e.Do("POST", "/webhook-endpoints", []byte(`{"url":"http://127.0.0.1:9/hook"}`), h)
	if created.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", created.Status, created.Body)
	}
	id := created.JSON(t)["endpointId"].(string)
	// The audit log refuses the deletion's record, as a full disk or a
	// lost connection between the two writes would.
	if _, err := e.Pool.Exec(context.Background(), `
		CREATE FUNCTION refuse_deletion_records() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    IF NEW.action = 'webhook_endpoint.deleted' THEN RAISE EXCEPTION 'no room for this record'; END IF;
		    RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_deletion_records BEFORE INSERT ON audit_events
		FOR EACH ROW EXECUTE FUNCTION refuse_deletion_records()`); err != nil {
		t.Fatal(err)
	}
	auth := map[string]string{"Authorization": "Bearer " + servicetest.SecretA}
	if r := e.Do("DELETE", "/webhook-endpoints/"+id, nil, auth); r.Status < 500 {
		t.Fatalf("a delete whose record cannot be written: %d %s, want a server error", r.Status, r.Body)
	}
	if r := e.Do("GET", "/webhook-endpoints/"+id, nil, auth); r.Status != http.StatusOK {
		t.Errorf("the endpoint after the failed delete: %d %s, want it still there", r.Status, r.Body)
	}
}
