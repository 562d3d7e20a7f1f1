// Package dashboard is the web UI served from the binary at /dashboard:
// server-rendered pages (html/template, embedded with their stylesheet and
// one small script, no build step), for a tenant who logs in with an API
// key and for the operators (OPERATOR_KEYS), who see every tenant.
//
//   - dashboard.go: the routes, the sessions' middleware, the pages'
//     navigation and rendering;
//   - session.go: the sessions (dashboard_sessions) and their cookies;
//   - login.go: logging in and out, through the API's own authentication
//     (httpapi.Gate);
//   - overview.go, activity.go, health.go, chart.go: the Overview and its
//     charts, drawn as SVG by the server;
//   - payments.go, actions.go: the payments, a payment's timeline, and the
//     actions on it, sent through the same services as the API's;
//   - attention.go: Needs attention (operators): keys in manual review
//     and old unknowns, orphans, parked events, and the actions on them;
//   - webhooks.go: a tenant's endpoints, deliveries and resends;
//   - live.go, stream.go: the changes the relay publishes, pushed to the
//     open pages over server-sent events.
//
// It reads through the services the API uses, never the tables of another
// package. A page is one entry of pages (its path, title and who may see
// it) and one handler.
package dashboard

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/authorizations"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/delivery"
	"github.com/paymentsapi/paymentsapi/internal/endpoints"
	"github.com/paymentsapi/paymentsapi/internal/eventlog"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/orphans"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
)

// basePath is where the dashboard is mounted.
const basePath = httpapi.DashboardPath

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets/dashboard.css assets/dashboard.js
var assetFS embed.FS

// Deps are what the dashboard reads and acts through.
type Deps struct {
	// DB holds the dashboard's sessions, and the tenants' keys the
	// operators' list of tenants reads (package apikeys).
	DB                *pgxpool.Pool
	Payments          *payments.Service
	Refunds           *refunds.Service
	Captures, Cancels *authorizations.Service
	Events            *eventlog.Log
	Deliveries        *delivery.Resends
	Endpoints         *endpoints.Service
	// Engine lists the keys that need a person (Needs attention), and
	// Reconciler asks the provider about one now, or settles one as an
	// operator decided.
	Engine     *idempotency.Engine
	Reconciler *idempotency.Reconciler
	// Orphans audits the provider for objects no row explains; nil when
	// the provider cannot list its objects. StuckAfter is how old an
	// unfinished key must be for Needs attention (default 15 minutes).
	Orphans    *orphans.Auditor
	StuckAfter time.Duration
	// Live pushes the relay's changes to the pages; Health, when set,
	// draws the service's metrics for operators.
	Live   *Live
	Health *Health
	Clock  clock.Clock
	Log    *slog.Logger
	// DemoSecret, in dev mode only, is the demo API key the login form is
	// filled in with; "" elsewhere.
	DemoSecret string
}

// server is the dashboard for one Gate.
type server struct {
	Deps
	gate     httpapi.Gate
	sessions sessions
	pages    map[string]*template.Template
}

// navItem is one page of the navigation.
type navItem struct {
	Path     string // under basePath
	Title    string
	Operator bool // operators only
}

// nav lists the pages, in the navigation's order. A page for operators
// answers 403 to a tenant, and is not in a tenant's navigation.
var nav = []navItem{
	{Path: "/", Title: "Overview"},
	{Path: "/payments", Title: "Payments"},
	{Path: "/webhooks", Title: "Webhooks"},
	{Path: "/attention", Title: "Needs attention", Operator: true},
	{Path: "/tenants", Title: "Tenants", Operator: true},
}

// Handler returns the maker of the dashboard's handler, for
// httpapi.Deps.Dashboard.
func Handler(d Deps) func(httpapi.Gate) http.Handler {
	return func(gate httpapi.Gate) http.Handler {
		s := &server{Deps: d, gate: gate, sessions: sessions{db: d.DB, clock: d.Clock}, pages: parsePages()}
		return s.routes()
	}
}

func (s *server) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(securityHeaders)
	r.Get("/assets/{name}", serveAsset)
	r.Get("/login", s.loginPage)
	r.Post("/login", s.login)
	r.Group(func(r chi.Router) {
		r.Use(s.requireSession, checkCSRF)
		r.Get("/", s.overview)
		r.Get("/payments", s.paymentList)
		r.Get("/payments/{paymentId}", s.paymentPage)
		r.Post("/payments/{paymentId}/{action:capture|cancel|refund}", s.act)
		r.Get("/webhooks", s.webhooks)
		r.Post("/webhooks/resend", s.resend)
		r.Get("/live", s.stream)
		r.Post("/logout", s.logout)
		r.Group(func(r chi.Router) {
			r.Use(operatorsOnly(s))
			r.Get("/tenants", s.tenantList)
			r.Get("/attention", s.attention)
			r.Post("/attention/ask", s.askNow)
			r.Post("/attention/resolve", s.resolve)
			r.Post("/attention/unpark", s.unpark)
		})
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) { s.problem(w, r, http.StatusNotFound, "No such page.") })
	return r
}

// contentSecurityPolicy keeps the pages on their own server: their script
// and stylesheet are theirs, and no form posts elsewhere.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

func serveAsset(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	b, err := assetFS.ReadFile("assets/" + name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	ct := "text/css; charset=utf-8"
	if strings.HasSuffix(name, ".js") {
		ct = "text/javascript; charset=utf-8"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

// session is who a request's session is.
type session struct {
	who    httpapi.Who
	token  token
	secret string // to authenticate again, as the stream does
}

type sessionKey struct{}

func sessionOf(r *http.Request) session {
	s, _ := r.Context().Value(sessionKey{}).(session)
	return s
}

// requireSession admits a request whose session is live and whose secret
// still authenticates (a revoked key's session ends with it); a GET
// without one is sent to the login form, anything else refused 401.
func (s *server) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, ok := tokenCookie(r, sessionCookie)
		if !ok {
			s.toLogin(w, r, "")
			return
		}
		secret, err := s.sessions.open(r.Context(), t)
		if errors.Is(err, errNoSession) {
			s.toLogin(w, r, "Your session has ended: log in again.")
			return
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		who, err := s.gate.Recheck(r.Context(), secret)
		if errors.Is(err, httpapi.ErrUnknownSecret) {
			_ = s.sessions.end(r.Context(), t)
			s.toLogin(w, r, "The key you logged in with no longer works: it was revoked.")
			return
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		ctx := context.WithValue(r.Context(), sessionKey{}, session{who: who, token: t, secret: secret})
		next.ServeHTTP(w, r.WithContext(actor.WithActor(ctx, who.Actor())))
	})
}

// toLogin sends a GET to the login form, with why; other methods are
// refused.
func (s *server) toLogin(w http.ResponseWriter, r *http.Request, why string) {
	http.SetCookie(w, cookie(sessionCookie, "", -1, s.gate.HTTPS(r)))
	if r.Method != http.MethodGet || r.URL.Path == basePath+"/live" {
		s.problem(w, r, http.StatusUnauthorized, "Log in first.")
		return
	}
	q := url.Values{}
	if why != "" {
		q.Set("why", why)
	}
	if r.URL.RequestURI() != basePath+"/" {
		q.Set("next", r.URL.RequestURI())
	}
	target := basePath + "/login"
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// checkCSRF refuses 403 a POST whose form does not carry its session's
// token: a page of another site cannot send one.
func checkCSRF(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && !sameToken(r.PostFormValue("csrf"), sessionOf(r).token.csrf()) {
			http.Error(w, "This form is out of date or was not sent by the dashboard (its CSRF token is missing or wrong): reload the page and send it again.", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// operatorsOnly refuses 403 a tenant's session.
func operatorsOnly(s *server) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if sessionOf(r).who.Operator == "" {
				s.problem(w, r, http.StatusForbidden, "This page is for operators only.")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// tenantOf is whose data a request reads: a tenant's session, always its
// own; an operator's, the tenant it names (the tenant parameter), if any.
func tenantOf(r *http.Request) string {
	if who := sessionOf(r).who; who.Operator == "" {
		return who.Tenant
	}
	return strings.TrimSpace(r.FormValue("tenant"))
}

// view is what every page's template gets.
type view struct {
	Title    string
	Path     string // the page's, under basePath, for the navigation
	Nav      []navItem
	Who      string
	Operator bool
	Tenant   string // whose data the page shows ("" for an operator who chose none)
	CSRF     string
	// Live is the query of the page's stream (GET /dashboard/live); "": the
	// page is not live.
	Live string
	Base string
	// TQ is the query that keeps an operator on the tenant it chose
	// (tenant=...), for the page's links; "" for a tenant.
	TQ   string
	Data any
}

// newView is the view of a page of r's session.
func newView(r *http.Request, title, path string, data any) view {
	ses := sessionOf(r)
	v := view{Title: title, Path: path, Operator: ses.who.Operator != "", Tenant: tenantOf(r), CSRF: ses.token.csrf(),
		Base: basePath, Data: data}
	if v.Operator {
		v.Who = "operator " + ses.who.Operator
		if v.Tenant != "" {
			v.TQ = url.Values{"tenant": {v.Tenant}}.Encode()
		}
	} else {
		v.Who = "tenant " + ses.who.Tenant
	}
	for _, item := range nav {
		if !item.Operator || v.Operator {
			v.Nav = append(v.Nav, item)
		}
	}
	return v
}

// render writes page with v.
func (s *server) render(w http.ResponseWriter, r *http.Request, status int, page string, v view) {
	t, ok := s.pages[page]
	if !ok {
		s.fail(w, r, errors.New("no template "+page))
		return
	}
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, "layout", v); err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// problem answers a page that says what went wrong.
func (s *server) problem(w http.ResponseWriter, r *http.Request, status int, message string) {
	v := newView(r, http.StatusText(status), "", message)
	if sessionOf(r).token == (token{}) {
		v.Nav = nil
	}
	s.render(w, r, status, "problem.html", v)
}

// fail logs err and answers 500.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	s.Log.ErrorContext(r.Context(), "dashboard page failed", "path", r.URL.Path, "error", err)
	s.problem(w, r, http.StatusInternalServerError, "Something went wrong on our side; the logs say what.")
}

// rowData is a payment's row of the list, in its page's view.
type rowData struct {
	P payments.View
	V view
}

// parsePages parses each page's template with the layout and the shared
// parts.
func parsePages() map[string]*template.Template {
	funcs := template.FuncMap{
		"when": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") + " UTC" },
		"whenPtr": func(t *time.Time) string {
			if t == nil {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05") + " UTC"
		},
		"lower": strings.ToLower,
		// tenantQ is a query, encoded already: as a plain string,
		// html/template would escape its "=" too.
		"tenantQ": func(tenant string) template.URL { return template.URL(url.Values{"tenant": {tenant}}.Encode()) }, //nolint:gosec
		"minutes": func(d time.Duration) string { return strconv.Itoa(int(d.Minutes())) + " minutes" },
		"row":     func(p payments.View, v view) rowData { return rowData{P: p, V: v} },
		"tenantsOf": func(v view, rows []tenantRow) view {
			v.Data = rows
			return v
		},
	}
	shared := []string{"templates/layout.html", "templates/parts.html"}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	pages := map[string]*template.Template{}
	for _, name := range names {
		base := strings.TrimPrefix(name, "templates/")
		if base == "layout.html" || base == "parts.html" {
			continue
		}
		pages[base] = template.Must(template.New(base).Funcs(funcs).ParseFS(templateFS, append(shared, name)...))
	}
	return pages
}
