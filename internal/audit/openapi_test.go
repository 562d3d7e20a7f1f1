package audit_test

import (
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// Every answer of GET /audit-events is the one the spec documents and
// CONTRACT.md promises (servicetest.CheckSpec).
func TestAuditLogAnswersConformToTheOpenAPISpec(t *testing.T) {
	t.Parallel()
	servicetest.CheckSpec(t,
		servicetest.SpecGroup{Name: "the audit log", Options: []servicetest.Option{servicetest.WithOperators(t)}, Run: func(t *testing.T, c *servicetest.Conformance) {
			if r := c.E.Do("POST", "/webhook-endpoints", []byte(`{"url":"http://127.0.0.1:9/hook"}`), servicetest.CreateHeaders(servicetest.SecretA, "k-ep")); r.Status != 201 {
				t.Fatalf("create an endpoint: %d %s", r.Status, r.Body)
			}
			c.Check(servicetest.Exchange{Name: "200 audit events", Method: "GET", Path: "/audit-events?limit=10", Header: servicetest.Bearer(servicetest.OperatorSecret), Status: 200})
			c.Check(servicetest.Exchange{Name: "403 audit events to a tenant's key", Method: "GET", Path: "/audit-events", Header: servicetest.Bearer(servicetest.SecretA),
				Status: 403, Code: "OPERATORS_ONLY"})
			c.Check(servicetest.Exchange{Name: "401 audit events without a key", Method: "GET", Path: "/audit-events", Header: nil,
				Status: 401, Code: "UNAUTHORIZED", SpecRejects: "security requirements failed"})
		}},
	)
}
