package apidocs_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/paymentsapi/paymentsapi/api"
	"github.com/paymentsapi/paymentsapi/internal/apidocs"
	"github.com/paymentsapi/paymentsapi/internal/testio"
)

// docsServer serves the page and the spec, as the API does.
func docsServer(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(api.OpenAPI)
	})
	h := apidocs.Handler()
	mux.Handle(apidocs.Path, h)
	mux.Handle(apidocs.Path+"/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp, b.String()
}

func TestHandlerServesThePageAndItsScript(t *testing.T) {
	t.Parallel()
	srv := docsServer(t)
	for _, path := range []string{apidocs.Path, apidocs.Path + "/"} {
		resp, page := get(t, srv.URL+path, nil)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q does not keep the page on its server", path, csp)
		}
		for _, want := range []string{`spec-url="/openapi.yaml"`, `<script src="` + apidocs.Path + `/redoc.standalone.js">`} {
			if !strings.Contains(page, want) {
				t.Errorf("GET %s: the page lacks %s", path, want)
			}
		}
	}
	resp, script := get(t, srv.URL+apidocs.Path+"/redoc.standalone.js", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
		t.Fatalf("script: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !strings.Contains(script, `"`+apidocs.RedocVersion+`"`) {
		t.Errorf("the embedded bundle is not Redoc %s: update RedocVersion with the bundle", apidocs.RedocVersion)
	}
	etag := resp.Header.Get("ETag")
	if again, _ := get(t, srv.URL+apidocs.Path+"/redoc.standalone.js", map[string]string{"If-None-Match": etag}); etag == "" || again.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation with ETag %q: %d, want 304", etag, again.StatusCode)
	}
	if resp, _ := get(t, srv.URL+apidocs.Path+"/other.js", nil); resp.StatusCode != 404 {
		t.Errorf("an unknown asset: %d, want 404", resp.StatusCode)
	}
}

// TestDocsPageRendersInABrowser loads the page in headless Chromium, with
// every host but the test server unresolvable, and checks that every
// operation of api/openapi.yaml is rendered. With APIDOCS_SCREENSHOT set to
// a file name it also saves a screenshot there (`make docs-screenshot`).
func TestDocsPageRendersInABrowser(t *testing.T) {
	t.Parallel()
	bin := testio.Chromium(t)
	srv := docsServer(t)
	url := srv.URL + apidocs.Path

	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	var summaries []string
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			summaries = append(summaries, op.Summary)
		}
	}
	if len(summaries) < 10 {
		t.Fatalf("only %d operations in the spec", len(summaries))
	}

	dom := runChromium(t, bin, "--dump-dom", url)
	for _, s := range summaries {
		if !strings.Contains(dom, htmlEscape(s)) {
			t.Errorf("the rendered page lacks the operation %q", s)
		}
	}
	if strings.Contains(dom, "Something went wrong") || !strings.Contains(dom, "Payments API") {
		t.Errorf("Redoc did not render the spec:\n%.3000s", dom)
	}

	if out := os.Getenv("APIDOCS_SCREENSHOT"); out != "" {
		abs, err := filepath.Abs(out)
		if err != nil {
			t.Fatal(err)
		}
		runChromium(t, bin, "--screenshot="+abs, "--window-size=1400,1000", "--hide-scrollbars", url)
		if fi, err := os.Stat(abs); err != nil || fi.Size() == 0 {
			t.Fatalf("no screenshot at %s: %v", abs, err)
		}
		if err := os.WriteFile(abs+".sha256", []byte(pageHash(t)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot saved to %s, with the hash of the page it shows", abs)
	}
}

// runChromium runs headless Chromium on the page and returns its stdout.
// Only the loopback test server resolves: the page must need nothing else.
func runChromium(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--disable-extensions", "--disable-background-networking", "--user-data-dir=" + t.TempDir(),
		`--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1`,
		"--virtual-time-budget=20000",
	}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, stderr.String())
	}
	return string(out)
}

// htmlEscape escapes text as Chromium serializes a text node.
func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// pageHash is the SHA-256 of what the /docs page is made of: the spec and
// the page's own files. The screenshot in docs/ records the hash of the
// page it shows beside it (api-reference.png.sha256).
func pageHash(t *testing.T) string {
	t.Helper()
	h := sha256.New()
	h.Write(api.OpenAPI)
	for _, name := range []string{"assets/index.html", "assets/redoc.standalone.js"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// The README's screenshot of /docs (docs/api-reference.png) shows the page as it now is: a change
// to the spec or to the page leaves it stale until `make docs-screenshot`
// takes it again.
func TestTheScreenshotShowsTheCurrentPage(t *testing.T) {
	t.Parallel()
	recorded, err := os.ReadFile("../../docs/api-reference.png.sha256")
	if err != nil {
		t.Fatalf("no hash beside the screenshot: %v (make docs-screenshot)", err)
	}
	if got := pageHash(t); strings.TrimSpace(string(recorded)) != got {
		t.Fatalf("docs/api-reference.png shows an older /docs page (hash %.12s, the page is %.12s now): run make docs-screenshot",
			strings.TrimSpace(string(recorded)), got)
	}
}
