// Package apidocs serves the API reference (a page to read, not to send requests from): Redoc's
// standalone bundle (npm package redoc, RedocVersion), vendored in assets/
// and embedded in the binary, on a page that renders the spec the same
// server serves at /openapi.yaml. Nothing is loaded from elsewhere: the
// page's Content-Security-Policy lets it reach its own server only (Redoc's
// sidebar links a logo on a CDN; the browser blocks it and Redoc hides it).
//
// To update Redoc: `make apidocs-redoc REDOC_VERSION=x.y.z`, then update
// RedocVersion and check the page (TestDocsPageRendersInABrowser).
package apidocs

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"time"
)

// RedocVersion is the version of the vendored Redoc bundle.
const RedocVersion = "2.5.4"

// Path is where Handler must be mounted: the page is Path, its script
// Path + "/redoc.standalone.js".
const Path = "/docs"

//go:embed assets/index.html assets/redoc.standalone.js
var assets embed.FS

// contentSecurityPolicy keeps the page on its own server. Redoc styles
// with inline <style> elements and runs its search index in a worker made
// from a blob.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src blob:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page at Path and its script. Mount it at Path.
func Handler() http.Handler {
	page := mustAsset("assets/index.html")
	script := mustAsset("assets/redoc.standalone.js")
	mux := http.NewServeMux()
	servePage := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", contentSecurityPolicy)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		serve(w, r, "text/html; charset=utf-8", page)
	}
	mux.HandleFunc("GET "+Path, servePage)
	mux.HandleFunc("GET "+Path+"/{$}", servePage)
	mux.HandleFunc("GET "+Path+"/redoc.standalone.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		serve(w, r, "text/javascript; charset=utf-8", script)
	})
	return mux
}

// serve answers body with a strong ETag, so that browsers revalidate
// cheaply and a new binary's assets are never served stale.
func serve(w http.ResponseWriter, r *http.Request, contentType string, body []byte) {
	sum := sha256.Sum256(body)
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:16])+`"`)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

// mustAsset reads an embedded file; they are compiled in, so a failure is
// a broken build.
func mustAsset(name string) []byte {
	b, err := assets.ReadFile(name)
	if err != nil {
		panic("apidocs: " + err.Error())
	}
	return b
}
