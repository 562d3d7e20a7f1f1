package delivery_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/delivery"
	"github.com/paymentsapi/paymentsapi/internal/endpoints"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// previousReleaseInsert is how the release before migration 00043 created
// an endpoint: its secret in the clear.
const previousReleaseInsert = `
	INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, description, status, secret, secret_id, created_at)
	SELECT $1, $2, $3, $4, $5, $6, $7, $1, $8 WHERE true`

// legacyHook registers, for the tenant, an endpoint at the receiver's path
// as the release before 00043 did (its secret in the clear), and tells the
// receiver its secret.
func (e *env) legacyHook(tenant, path string) endpoint {
	e.t.Helper()
	secret, err := outbound.NewSecret()
	if err != nil {
		e.t.Fatal(err)
	}
	ep := endpoint{id: endpoints.NewID(), secret: secret, path: path}
	if _, err := e.pool.Exec(context.Background(), previousReleaseInsert, ep.id, tenant, e.recv.srv.URL+path, nil, "",
		"enabled", secret, e.clk.Now()); err != nil {
		e.t.Fatal(err)
	}
	e.recv.expect(path, secret)
	return ep
}

// sealTheClear seals the secrets left in the clear, as the release of
// 00043 did at its start, so that the contract step after it may run.
func (e *env) sealTheClear() {
	e.t.Helper()
	ctx := context.Background()
	rows, err := e.pool.Query(ctx, `SELECT id, secret FROM webhook_endpoints WHERE secret <> ''`)
	if err != nil {
		e.t.Fatal(err)
	}
	clear, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ ID, Secret string }])
	if err != nil {
		e.t.Fatal(err)
	}
	for _, c := range clear {
		sealed, err := e.secrets.Seal(c.Secret, c.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.pool.Exec(ctx, `UPDATE webhook_endpoints SET secret_sealed = $2, secret = '' WHERE id = $1`, c.ID, sealed); err != nil {
			e.t.Fatal(err)
		}
	}
}

// whsecAnywhere lists every column of every table of the database that
// holds "whsec_" somewhere: text of any kind, arrays and JSON as their
// text, bytea as bytes (the answers stored for replay).
func whsecAnywhere(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
		SELECT c.table_name, c.column_name, c.data_type
		FROM information_schema.columns c
		JOIN information_schema.tables tb ON tb.table_schema = c.table_schema AND tb.table_name = c.table_name
		WHERE c.table_schema = 'public' AND tb.table_type = 'BASE TABLE'
		  AND c.data_type IN ('text', 'character varying', 'character', 'json', 'jsonb', 'ARRAY', 'bytea')`)
	if err != nil {
		t.Fatal(err)
	}
	type column struct{ table, name, typ string }
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.table, &c.name, &c.typ)
	})
	if err != nil || len(cols) < 20 {
		t.Fatalf("columns: %d, %v", len(cols), err)
	}
	var found []string
	for _, c := range cols {
		test := fmt.Sprintf(`position('whsec_' IN %s::text) > 0`, pgx.Identifier{c.name}.Sanitize())
		if c.typ == "bytea" {
			test = fmt.Sprintf(`position('whsec_'::bytea IN %s) > 0`, pgx.Identifier{c.name}.Sanitize())
		}
		var n int
		if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s`, pgx.Identifier{c.table}.Sanitize(), test)).Scan(&n); err != nil {
			t.Fatalf("%s.%s: %v", c.table, c.name, err)
		}
		if n > 0 {
			found = append(found, fmt.Sprintf("%s.%s (%d rows)", c.table, c.name, n))
		}
	}
	return found
}

// After endpoints are created and rotated (each way), and events are
// delivered, no secret is anywhere in the database in the clear: not in
// the endpoints' rows, not in the answers stored for replay.
func TestNoSecretIsStoredInTheClear(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	a := e.hook(tenantA, "/a")
	b := e.hook(tenantA, "/b")
	r := e.do(tenantA, "POST", "/webhook-endpoints/"+a.id+"/rotate-secret", "rot-a", "")
	if r.status != http.StatusOK {
		t.Fatalf("rotate: %v", r)
	}
	rotated := r.json(t)["secret"].(string)
	if r := e.do(tenantA, "POST", "/webhook-endpoints/"+b.id+"/rotate-secret", "rot-b", `{"previousSecretExpiresIn":"0s"}`); r.status != http.StatusOK {
		t.Fatalf("rotate at once: %v", r)
	}
	e.recv.expect("/a", a.secret, rotated)
	e.recv.expect("/b", e.reveal(tenantA, b.id))
	e.record("tenant_a", succeeded)
	if n := e.runOnce(e.worker(delivery.Config{})); n != 2 {
		t.Fatalf("claimed %d, want 2", n)
	}
	if found := whsecAnywhere(t, e.pool); len(found) > 0 {
		t.Errorf("whsec_ in the clear in %v", found)
	}
}

// reveal is GET /webhook-endpoints/{id}/secret (200 expected): the secret.
func (e *env) reveal(apiKey, id string) string {
	e.t.Helper()
	r := e.do(apiKey, "GET", "/webhook-endpoints/"+id+"/secret", "", "")
	if r.status != http.StatusOK || r.header.Get("Cache-Control") != "no-store" {
		e.t.Fatalf("GET the secret of %s: %v %v", id, r, r.header)
	}
	v := r.json(e.t)
	if v["endpointId"] != id {
		e.t.Fatalf("GET the secret of %s: %v", id, r)
	}
	return v["secret"].(string)
}

// The first answer of a create and of a rotation shows the secret; their
// replays answer "secret": null and "secretShownOnce": true, and GET
// /webhook-endpoints/{id}/secret reveals the current secret to its tenant,
// and to no other.
func TestReplaysShowNoSecretAndItIsRevealedToItsTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	body := jsonBody(map[string]any{"url": e.recv.srv.URL + "/x"})
	first := e.do(tenantA, "POST", "/webhook-endpoints", "create-1", body)
	v := first.json(t)
	id, secret := v["endpointId"].(string), v["secret"].(string)
	if first.status != http.StatusCreated || !strings.HasPrefix(secret, "whsec_") || v["secretShownOnce"] != true {
		t.Fatalf("create: %v", first)
	}
	replayed := func(r response) {
		t.Helper()
		v := r.json(t)
		if s, ok := v["secret"]; !ok || s != nil || v["secretShownOnce"] != true || r.header.Get("Idempotent-Replayed") != "true" ||
			strings.Contains(string(r.body), "whsec_") || v["endpointId"] != id {
			t.Errorf("replay: %v, want the endpoint with \"secret\": null and \"secretShownOnce\": true", r)
		}
	}
	replayed(e.do(tenantA, "POST", "/webhook-endpoints", "create-1", body))
	if got := e.reveal(tenantA, id); got != secret {
		t.Errorf("revealed %q, want the created secret", got)
	}

	rot := e.do(tenantA, "POST", "/webhook-endpoints/"+id+"/rotate-secret", "rot-1", "")
	newSecret, _ := rot.json(t)["secret"].(string)
	if rot.status != http.StatusOK || !strings.HasPrefix(newSecret, "whsec_") || newSecret == secret || rot.json(t)["secretShownOnce"] != true {
		t.Fatalf("rotate: %v", rot)
	}
	replayed(e.do(tenantA, "POST", "/webhook-endpoints/"+id+"/rotate-secret", "rot-1", ""))
	if got := e.reveal(tenantA, id); got != newSecret {
		t.Errorf("revealed %q after the rotation, want the new secret", got)
	}

	for _, tc := range []struct{ apiKey, id string }{{tenantB, id}, {tenantA, "we_nope"}} {
		r := e.do(tc.apiKey, "GET", "/webhook-endpoints/"+tc.id+"/secret", "", "")
		if r.status != http.StatusNotFound || strings.Contains(string(r.body), "whsec_") {
			t.Errorf("GET the secret of %s as another tenant, or of none: %v", tc.id, r)
		}
	}
	if r := e.do(tenantA, "DELETE", "/webhook-endpoints/"+id, "", ""); r.status != http.StatusNoContent {
		t.Fatal(r)
	}
	if r := e.do(tenantA, "GET", "/webhook-endpoints/"+id+"/secret", "", ""); r.status != http.StatusNotFound {
		t.Errorf("GET the secret of a deleted endpoint: %v", r)
	}
}

// signatures returns how many signatures path's receipt number i carried.
func (rc *receiver) signatures(t *testing.T, path string, i int) int {
	t.Helper()
	got := rc.receipts(path)
	if len(got) <= i {
		t.Fatalf("%s got %d requests, want a %d-th", path, len(got), i+1)
	}
	return len(got[i].sigs)
}

// A rotation with "previousSecretExpiresIn": "0s" stops the old secret at
// once; "1h" keeps it an hour, the default 24 hours (by the test clock).
// Anything outside 0s to 24h is 400, and another overlap under the same
// key is another command (422).
func TestRotationChoosesHowLongTheOldSecretSigns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	w := e.worker(delivery.Config{})
	hooks := map[string]endpoint{}
	for _, name := range []string{"now", "hour", "default"} {
		hooks[name] = e.hook(tenantA, "/"+name)
	}
	for name, body := range map[string]string{"now": `{"previousSecretExpiresIn":"0s"}`, "hour": `{"previousSecretExpiresIn":"1h"}`, "default": `{}`} {
		ep := hooks[name]
		r := e.do(tenantA, "POST", "/webhook-endpoints/"+ep.id+"/rotate-secret", "rot-"+name, body)
		if r.status != http.StatusOK {
			t.Fatalf("rotate %s: %v", name, r)
		}
		fresh := r.json(t)["secret"].(string)
		if name == "now" {
			e.recv.expect(ep.path, fresh)
		} else {
			e.recv.expect(ep.path, ep.secret, fresh)
		}
		hooks[name] = endpoint{id: ep.id, secret: fresh, path: ep.path}
	}
	if r := e.do(tenantA, "POST", "/webhook-endpoints/"+hooks["default"].id+"/rotate-secret", "rot-default", `{"previousSecretExpiresIn":"24h"}`); r.status != http.StatusOK ||
		r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the default overlap named: %v, want the replay of the rotation without a body", r)
	}
	e.record("tenant_a", succeeded)
	e.runOnce(w)
	for name, want := range map[string]int{"now": 1, "hour": 2, "default": 2} {
		if n := e.recv.signatures(t, "/"+name, 0); n != want {
			t.Errorf("%s, just after the rotation: %d signatures, want %d", name, n, want)
		}
	}
	e.clk.Advance(time.Hour + time.Second)
	e.recv.expect("/hour", hooks["hour"].secret)
	e.record("tenant_a", succeeded)
	e.runOnce(w)
	for name, want := range map[string]int{"now": 1, "hour": 1, "default": 2} {
		if n := e.recv.signatures(t, "/"+name, 1); n != want {
			t.Errorf("%s, an hour after the rotation: %d signatures, want %d", name, n, want)
		}
	}
	e.clk.Advance(23 * time.Hour)
	e.recv.expect("/default", hooks["default"].secret)
	e.record("tenant_a", succeeded)
	e.runOnce(w)
	if n := e.recv.signatures(t, "/default", 2); n != 1 {
		t.Errorf("default, 24 hours after the rotation: %d signatures, want 1", n)
	}

	path := "/webhook-endpoints/" + hooks["now"].id + "/rotate-secret"
	for _, bad := range []string{`"24h1s"`, `"-1s"`, `"soon"`, `"1d"`, `3600`} {
		r := e.do(tenantA, "POST", path, "rot-bad", `{"previousSecretExpiresIn":`+bad+`}`)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "previousSecretExpiresIn") {
			t.Errorf("previousSecretExpiresIn %s: %v, want 400 naming it", bad, r)
		}
	}
	if r := e.do(tenantA, "POST", path, "rot-now", `{"previousSecretExpiresIn":"2h"}`); r.status != http.StatusUnprocessableEntity {
		t.Errorf("another overlap under the key: %v, want 422", r)
	}
}

// A server without SECRETS_KEY cannot store or read a secret: creating an
// endpoint, rotating and revealing answer 503 SECRETS_KEY_MISSING, and
// nothing is written (the key is not taken either: the same request works
// once the key is set).
func TestWithoutSecretsKeyEndpointsAreRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	withKey := newEnvOn(t, pool, devPolicy, nil)
	ep := withKey.hook(tenantA, "/kept")
	e := newEnvWith(t, pool, devPolicy, nil, nil)
	body := jsonBody(map[string]any{"url": e.recv.srv.URL + "/x"})
	for _, tc := range []struct{ method, path, key, body string }{
		{"POST", "/webhook-endpoints", "no-key", body},
		{"POST", "/webhook-endpoints/" + ep.id + "/rotate-secret", "no-key-rotate", ""},
		{"GET", "/webhook-endpoints/" + ep.id + "/secret", "", ""},
	} {
		r := e.do(tenantA, tc.method, tc.path, tc.key, tc.body)
		if r.status != http.StatusServiceUnavailable || r.json(t)["code"] != "SECRETS_KEY_MISSING" {
			t.Errorf("%s %s without SECRETS_KEY: %v, want 503 SECRETS_KEY_MISSING", tc.method, tc.path, r)
		}
	}
	var endpointsN, keys int
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM webhook_endpoints),
		(SELECT count(*) FROM idempotency_keys WHERE idempotency_key LIKE 'no-key%')`).Scan(&endpointsN, &keys); err != nil ||
		endpointsN != 1 || keys != 0 {
		t.Errorf("%d endpoints, %d keys written (%v); want the one made with a key, and no key", endpointsN, keys, err)
	}
	if r := withKey.do(tenantA, "POST", "/webhook-endpoints", "no-key", body); r.status != http.StatusCreated {
		t.Errorf("the same request with SECRETS_KEY: %v", r)
	}
}

// A tenant has at most 16 endpoints: the 17th is 409 TOO_MANY_ENDPOINTS,
// and writes nothing; a deleted one makes room. Concurrent creates cannot
// pass the cap together.
func TestAtMostSixteenEndpointsPerTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	var first string
	for i := range endpoints.MaxPerTenant {
		r := e.do(tenantA, "POST", "/webhook-endpoints", fmt.Sprintf("cap-%d", i), jsonBody(map[string]any{"url": fmt.Sprintf("%s/%d", e.recv.srv.URL, i)}))
		if r.status != http.StatusCreated {
			t.Fatalf("endpoint %d: %v", i+1, r)
		}
		if i == 0 {
			first = r.json(t)["endpointId"].(string)
		}
	}
	over := e.do(tenantA, "POST", "/webhook-endpoints", "cap-over", jsonBody(map[string]any{"url": e.recv.srv.URL + "/over"}))
	if over.status != http.StatusConflict || over.json(t)["code"] != "TOO_MANY_ENDPOINTS" {
		t.Fatalf("the 17th endpoint: %v, want 409 TOO_MANY_ENDPOINTS", over)
	}
	if n := e.count(`SELECT count(*) FROM idempotency_keys WHERE idempotency_key = 'cap-over'`); n != 0 {
		t.Errorf("the refused create left its key (%d)", n)
	}
	if r := e.do(tenantB, "POST", "/webhook-endpoints", "cap-other", jsonBody(map[string]any{"url": e.recv.srv.URL + "/b"})); r.status != http.StatusCreated {
		t.Errorf("another tenant's first endpoint: %v", r)
	}
	if r := e.do(tenantA, "DELETE", "/webhook-endpoints/"+first, "", ""); r.status != http.StatusNoContent {
		t.Fatal(r)
	}
	if r := e.do(tenantA, "POST", "/webhook-endpoints", "cap-over", jsonBody(map[string]any{"url": e.recv.srv.URL + "/over"})); r.status != http.StatusCreated {
		t.Errorf("after a delete: %v", r)
	}

	// Tenant B has one: 24 concurrent creates, 15 of them succeed, each
	// request committed on its own (the group committer's default of one
	// claim in flight would take them one after the other anyway).
	e = newEnvCommitting(t, e.pool, devPolicy, nil, e.secrets, idempotency.CommitInline)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses []int
	)
	for i := range 24 {
		wg.Go(func() {
			r := e.do(tenantB, "POST", "/webhook-endpoints", fmt.Sprintf("race-%d", i), jsonBody(map[string]any{"url": fmt.Sprintf("%s/race/%d", e.recv.srv.URL, i)}))
			mu.Lock()
			defer mu.Unlock()
			statuses = append(statuses, r.status)
		})
	}
	wg.Wait()
	created, refused := 0, 0
	for _, s := range statuses {
		switch s {
		case http.StatusCreated:
			created++
		case http.StatusConflict:
			refused++
		}
	}
	if created != 15 || refused != 9 {
		t.Errorf("concurrent creates: %d created, %d refused (%v), want 15 and 9", created, refused, statuses)
	}
	if n := e.count(`SELECT count(*) FROM webhook_endpoints WHERE tenant_id = 'tenant_b' AND deleted_at IS NULL`); n != endpoints.MaxPerTenant {
		t.Errorf("tenant B has %d endpoints, want %d", n, endpoints.MaxPerTenant)
	}
}

// count runs a count query.
func (e *env) count(query string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// A failed answer's body is kept in the delivery log (how a merchant sees
// their receiver's error), but not from a private address outside dev
// mode: what a service inside the network answers never reaches a tenant.
func TestAnAnswerFromAPrivateAddressIsKeptInDevModeOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil) // the receiver is on loopback
	e.hook(tenantA, "/inside")
	e.recv.answer("/inside", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("redis_version:7.2.4 role:master"))
	})
	for _, dev := range []bool{false, true} {
		ev := e.record("tenant_a", succeeded)
		e.runOnce(e.worker(delivery.Config{KeepPrivateAnswers: dev}))
		msg, _ := e.lastAttempt(tenantA, ev)["error"].(string)
		if !strings.Contains(msg, "500") || strings.Contains(msg, "redis_version") != dev {
			t.Errorf("dev mode %v: attempt error %q, want the 500, and its body only in dev mode", dev, msg)
		}
	}
}

// A refused URL's problem names the host, never what it resolved to; a
// port other than 443, 8443 and WEBHOOK_ALLOWED_PORTS is refused where
// neither http nor private addresses are allowed.
func TestRefusedURLsSayNothingOfTheNetwork(t *testing.T) {
	t.Parallel()
	e := newEnv(t, outbound.Policy{AllowedPorts: []int{9443}}, names(map[string][]string{
		"internal.test": {"10.20.30.40"}, "meta.test": {"169.254.169.254"}, "public.test": {"1.1.1.1"},
	}))
	for i, u := range []string{"https://internal.test/hook", "https://meta.test/latest"} {
		r := e.do(tenantA, "POST", "/webhook-endpoints", fmt.Sprintf("hidden-%d", i), jsonBody(map[string]string{"url": u}))
		detail, _ := r.json(t)["detail"].(string)
		if r.status != http.StatusBadRequest || r.json(t)["code"] != "WEBHOOK_URL_FORBIDDEN" ||
			strings.Contains(detail, "10.20") || strings.Contains(detail, "169.254") || strings.Contains(detail, "private") ||
			strings.Contains(detail, "link-local") {
			t.Errorf("%s: %v, want 400 WEBHOOK_URL_FORBIDDEN that names no address", u, r)
		}
	}
	for i, tc := range []struct {
		url string
		ok  bool
	}{
		{"https://public.test/hook", true}, {"https://public.test:8443/hook", true}, {"https://public.test:9443/hook", true},
		{"https://public.test:8080/hook", false}, {"https://public.test:6379/", false},
	} {
		r := e.do(tenantA, "POST", "/webhook-endpoints", fmt.Sprintf("port-%d", i), jsonBody(map[string]string{"url": tc.url}))
		if tc.ok && r.status != http.StatusCreated || !tc.ok && (r.status != http.StatusBadRequest || r.json(t)["code"] != "WEBHOOK_URL_FORBIDDEN") {
			t.Errorf("%s: %v, want allowed %v", tc.url, r, tc.ok)
		}
	}
}

// The contract step that drops the plaintext columns refuses to run while
// one of them still holds a secret (it would be lost for good), and runs
// once the previous release has sealed it.
func TestTheContractStepRefusesASecretStillInTheClear(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	step := pgtest.MigrationVersion(t, "webhook_secrets_contract")
	pool := pgtest.NewPoolAt(t, step-1)
	secret, err := outbound.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, previousReleaseInsert, "we_clear", "tenant_a", "https://merchant.example/hook", nil, "",
		"enabled", secret, time.Now()); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if err := database.Migrate(ctx, pool, log); err == nil || !strings.Contains(err.Error(), "not sealed yet") {
		t.Fatalf("migrate with a secret in the clear: %v, want the step refused", err)
	}
	// What the previous release's start does, without the encryption
	// this test does not need: the plaintext columns emptied.
	if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET secret_sealed = 'sealed', secret = '' WHERE id = 'we_clear'`); err != nil {
		t.Fatal(err)
	}
	if err := database.Migrate(ctx, pool, log); err != nil {
		t.Fatalf("migrate once sealed: %v", err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_name = 'webhook_endpoints' AND column_name IN ('secret', 'previous_secret')`).Scan(&left); err != nil || left != 0 {
		t.Errorf("plaintext columns left: %d, %v", left, err)
	}
}

// The answers the previous release stored for the keys that created or
// rotated an endpoint held the secret: migration 00043 replaces it with
// "secret": null and "secretShownOnce": true, and leaves every other
// answer as it was.
func TestTheMigrationScrubsTheSecretsOfStoredAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolAt(t, 42)
	const (
		stored = `{"endpointId":"we_1","url":"https://merchant.example/","eventTypes":null,"description":"","status":"enabled","secret":"whsec_Di2bPyAbJ6xwjqf+yNmfSzx8g//5mcy27VgVEpFlfHk=","createdAt":"2026-01-15T09:00:00Z"}`
		want   = `{"endpointId":"we_1","url":"https://merchant.example/","eventTypes":null,"description":"","status":"enabled","secret":null,"secretShownOnce":true,"createdAt":"2026-01-15T09:00:00Z"}`
		other  = `{"paymentId":"pay_1","description":"whsec_ in a description stays"}`
	)
	now := time.Now()
	for _, k := range []struct{ op, key, body string }{
		{endpoints.OperationCreate, "c", stored}, {endpoints.OperationRotate, "r", strings.Replace(stored, `"endpointId"`, `"rotationId":"wsr_1","endpointId"`, 1)},
		{"create_payment", "p", other},
	} {
		if _, err := pool.Exec(ctx, `
			INSERT INTO idempotency_keys (tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
			    fencing_token, response_status, response_headers, response_body, created_at, completed_at)
			VALUES ('t', $1, $2, '\x00', 'x', $2, 1, 201, '{}', convert_to($3, 'UTF8'), $4, $4)`, k.op, k.key, k.body, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := database.Migrate(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT idempotency_key, convert_from(response_body, 'UTF8') FROM idempotency_keys`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, b string
		if err := rows.Scan(&k, &b); err != nil {
			t.Fatal(err)
		}
		got[k] = b
	}
	if got["c"] != want || got["r"] != strings.Replace(want, `"endpointId"`, `"rotationId":"wsr_1","endpointId"`, 1) || got["p"] != other {
		t.Errorf("after the migration: %v", got)
	}
}
