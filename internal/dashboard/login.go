package dashboard

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/httpapi"
)

// loginTTL is how long a login form may wait for its POST.
const loginTTL = time.Hour

// loginView is the login form's.
type loginView struct {
	Secret string // dev mode: the demo key, filled in
	Demo   bool
	Why    string // why the form is shown again
	Next   string // where to go once logged in
	CSRF   string
}

// loginPage shows the form, with a fresh token of its own in a cookie and
// in the form: its POST must carry both.
func (s *server) loginPage(w http.ResponseWriter, r *http.Request) {
	s.showLogin(w, r, http.StatusOK, r.URL.Query().Get("why"))
}

func (s *server) showLogin(w http.ResponseWriter, r *http.Request, status int, why string) {
	t, err := newToken()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.SetCookie(w, cookie(loginCookie, t.String(), loginTTL, s.gate.HTTPS(r)))
	lv := loginView{Secret: s.DemoSecret, Demo: s.DemoSecret != "", Why: why, Next: safeNext(r.FormValue("next")), CSRF: t.csrf()}
	s.render(w, r, status, "login.html", view{Title: "Log in", Base: basePath, Data: lv})
}

// login authenticates the secret typed as the API would (the same
// throttle of failed authentications), and starts a session.
func (s *server) login(w http.ResponseWriter, r *http.Request) {
	t, ok := tokenCookie(r, loginCookie)
	if !ok || !sameToken(r.PostFormValue("csrf"), t.csrf()) {
		http.Error(w, "This form is out of date or was not sent by the dashboard (its CSRF token is missing or wrong): reload the page and send it again.", http.StatusForbidden)
		return
	}
	secret := strings.TrimSpace(r.PostFormValue("secret"))
	_, err := s.gate.Login(r, secret)
	var throttled *httpapi.ThrottledError
	switch {
	case errors.As(err, &throttled):
		w.Header().Set("Retry-After", retryAfter(throttled.Wait))
		s.showLogin(w, r, http.StatusTooManyRequests, "Too many failed attempts from your address: wait "+throttled.Wait.Round(time.Second).String()+" and try again.")
		return
	case errors.Is(err, httpapi.ErrUnknownSecret):
		s.showLogin(w, r, http.StatusUnauthorized, "That is neither an active API key nor an operator's key.")
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	session, err := s.sessions.create(r.Context(), secret)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	secure := s.gate.HTTPS(r)
	http.SetCookie(w, cookie(loginCookie, "", -1, secure))
	http.SetCookie(w, cookie(sessionCookie, session.String(), sessionTTL, secure))
	next := safeNext(r.PostFormValue("next"))
	if next == "" {
		next = basePath + "/"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the session, here and for every instance.
func (s *server) logout(w http.ResponseWriter, r *http.Request) {
	if err := s.sessions.end(r.Context(), sessionOf(r).token); err != nil {
		s.fail(w, r, err)
		return
	}
	http.SetCookie(w, cookie(sessionCookie, "", -1, s.gate.HTTPS(r)))
	http.Redirect(w, r, basePath+"/login?why="+"You+have+logged+out.", http.StatusSeeOther)
}

// safeNext is next if it is a dashboard page of this server, else "": the
// form never sends anyone elsewhere.
func safeNext(next string) string {
	if !strings.HasPrefix(next, basePath+"/") || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return ""
	}
	return next
}

// retryAfter is d in whole seconds, rounded up, as Retry-After says it.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(int((d + time.Second - 1) / time.Second))
}
