package sim

import (
	"log/slog"
	"net/http"
	"time"
)

// keyed is what the idempotency protocol needs of a record: charges and
// refunds are created and looked up by key in exactly the same way.
type keyed interface {
	created() time.Time
	countRequest() int // increments requestCount and returns it
	countLookup() int  // increments lookupCount and returns it
	logAttrs() []any   // id, status and amount, for the logs
}

// store holds the records of one kind: every one in creation order and the
// newest per key. Its users hold s.mu.
type store[R any, P interface {
	*R
	keyed
}] struct {
	all   []P
	byKey map[string]P
}

func newStore[R any, P interface {
	*R
	keyed
}]() store[R, P] {
	return store[R, P]{byKey: make(map[string]P)}
}

func (st *store[R, P]) add(key string, p P) {
	st.all = append(st.all, p)
	st.byKey[key] = p
}

// copies returns a copy of every record under s.mu.
func (st *store[R, P]) copies(s *Simulator) []R {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]R, len(st.all))
	for i, p := range st.all {
		out[i] = *p
	}
	return out
}

// since returns a copy of every record created at or after t, in creation
// order, under s.mu.
func (st *store[R, P]) since(s *Simulator, t time.Time) []R {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []R{}
	for _, p := range st.all {
		if !p.created().Before(t) {
			out = append(out, *p)
		}
	}
	return out
}

// listSince reads the optional since parameter of a listing (RFC 3339): the
// zero time when it is absent. It answers 400 invalid_request and reports
// false when it is malformed.
func listSince(w http.ResponseWriter, r *http.Request) (time.Time, bool) {
	v := r.URL.Query().Get("since")
	if v == "" {
		return time.Time{}, true
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "since must be an RFC 3339 time")
		return time.Time{}, false
	}
	return t, true
}

// refusal is an error answer to a create that records nothing.
type refusal struct {
	status    int
	code, msg string
}

// create runs the create protocol of one kind ("charge", "refund") for key.
// Under s.mu: when key's newest record is still live (KeyTTL), it answers
// that record again and counts the request if same says the parameters are
// the same, or answers 422 idempotency_key_reused if not. Otherwise build
// makes the new record with the Effect that decides how it is answered, or a
// refusal, which records nothing. So concurrent creates with one key make
// exactly one record.
func create[R any, P interface {
	*R
	keyed
}](s *Simulator, w http.ResponseWriter, r *http.Request, log *slog.Logger, kind string,
	st *store[R, P], key string, same func(P) bool, build func() (P, Effect, *refusal)) {
	s.mu.Lock()
	if prev, ok := st.byKey[key]; ok && s.live(prev.created()) {
		if !same(prev) {
			s.mu.Unlock()
			log.Info("sim: "+kind+" idempotency key reused with other parameters", prev.logAttrs()...)
			writeError(w, http.StatusUnprocessableEntity, CodeKeyReused, "this idempotency key was used with other parameters")
			return
		}
		n := prev.countRequest()
		snap := *prev
		s.mu.Unlock()
		log.Info("sim: "+kind+" replayed", append(P(&snap).logAttrs(), "requestCount", n)...)
		writeJSON(w, http.StatusOK, snap)
		return
	}
	p, effect, no := build()
	if no != nil {
		s.mu.Unlock()
		log.Info("sim: "+kind+" refused, nothing recorded", "error", no.code)
		writeError(w, no.status, no.code, no.msg)
		return
	}
	st.add(key, p)
	s.mu.Unlock()
	log = log.With(p.logAttrs()...)
	log.Info("sim: " + kind + " created")
	s.deliver(w, r, log, effect, func() any {
		s.mu.Lock()
		defer s.mu.Unlock()
		return *p
	})
}

// lookup runs the lookup protocol of one kind: find (called under s.mu)
// returns the record for key, or nil, answered 404 not_found. A record
// found has its lookupCount incremented, and is returned as it is then, for
// the caller to answer; ok is false when an answer was written already.
func lookup[R any, P interface {
	*R
	keyed
}](s *Simulator, w http.ResponseWriter, r *http.Request, kind string, find func(key string) P) (rec R, log *slog.Logger, ok bool) {
	key, ok := queryKey(w, r)
	if !ok {
		return rec, nil, false
	}
	log = s.log.With("idempotencyKey", key)
	s.mu.Lock()
	p := find(key)
	if p == nil {
		s.mu.Unlock()
		log.Info("sim: " + kind + " lookup found nothing")
		writeError(w, http.StatusNotFound, CodeNotFound, "no "+kind+" was created with this idempotency key")
		return rec, nil, false
	}
	n := p.countLookup()
	rec = *p
	s.mu.Unlock()
	return rec, log.With(append(P(&rec).logAttrs(), "lookupCount", n)...), true
}

// queryKey returns the idempotencyKey query parameter, or answers 400 and
// reports false.
func queryKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.URL.Query().Get("idempotencyKey")
	if key == "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "the idempotencyKey query parameter is required")
	}
	return key, key != ""
}
