package idempotency

import (
	"container/list"
	"sync"
	"time"
)

// answers remembers, in this process, the final records that retries were
// recently answered from, so that the next retry of the same key is
// answered without a round trip to the database. A final record never
// changes: its answer, fingerprint and resource are written once, with the
// final state, and only clean-up touches it after that, once its replay
// window has passed. So an entry is used only inside that window (and
// dropped after it), where the database would decide the same: the stored
// answer replayed byte for byte, or 422 for another command. Anything else
// (an expired answer, a deleted key) goes to the database.
//
// It is bounded: the least recently used entry goes first.
type answers struct {
	mu      sync.Mutex
	max     int
	entries map[answerKey]*list.Element
	order   *list.List // of *answerEntry, most recently used first
}

type answerKey struct{ tenant, operation, key string }

type answerEntry struct {
	key answerKey
	rec Record
}

// DefaultReplayCache is Config.ReplayCache's default: entries, each a
// stored answer (about a kilobyte for a payment).
const DefaultReplayCache = 10_000

func newAnswers(max int) *answers {
	return &answers{max: max, entries: map[answerKey]*list.Element{}, order: list.New()}
}

func keyOf(s Scope) answerKey { return answerKey{s.Tenant, s.Operation, s.Key} }

// get returns the final record of scope, if it is remembered and its
// replay window (ttl from its completion) has not passed at now; an entry
// past it is dropped.
func (a *answers) get(s Scope, now time.Time, ttl time.Duration) (Record, bool) {
	if a == nil {
		return Record{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	el, ok := a.entries[keyOf(s)]
	if !ok {
		return Record{}, false
	}
	e := el.Value.(*answerEntry)
	if !now.Before(e.rec.CompletedAt.Add(ttl)) {
		a.order.Remove(el)
		delete(a.entries, e.key)
		return Record{}, false
	}
	a.order.MoveToFront(el)
	return e.rec, true
}

// put remembers rec, a final record with its answer, under scope.
func (a *answers) put(s Scope, rec Record) {
	if a == nil || rec.CompletedAt == nil || rec.Response == nil || rec.Response.Body == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	k := keyOf(s)
	if el, ok := a.entries[k]; ok {
		el.Value.(*answerEntry).rec = rec
		a.order.MoveToFront(el)
		return
	}
	a.entries[k] = a.order.PushFront(&answerEntry{key: k, rec: rec})
	for a.order.Len() > a.max {
		last := a.order.Back()
		a.order.Remove(last)
		delete(a.entries, last.Value.(*answerEntry).key)
	}
}
