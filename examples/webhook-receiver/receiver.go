package main

import (
	"container/list"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// maxBodyBytes bounds a delivery's body: an event carries one payment or
// refund, a few KiB.
const maxBodyBytes = 1 << 20

// Event is a verified delivery: its webhook-id, and the message's members.
type Event struct {
	// ID is the webhook-id header: the event's id, the same on every
	// attempt, so the key to deduplicate by.
	ID string
	// Type is the event's type, such as payment.succeeded.
	Type string `json:"type"`
	// Timestamp is when the event happened (not when it was sent).
	Timestamp time.Time `json:"timestamp"`
	// Data is the payment (payment.*) or the refund (refund.*) as of the
	// event. Deliveries come in no guaranteed order: compare its updatedAt
	// with what you hold before you overwrite anything.
	Data json.RawMessage `json:"data"`
}

// Receiver is the HTTP handler of a webhook endpoint. It verifies each
// delivery with the Standard Webhooks library, drops the ones it has seen
// already (by webhook-id), and hands the new ones to a queue that a worker
// drains, so that it answers within a few milliseconds whatever the work an
// event causes: the sender waits 10 s at most, and a slow answer is a failed
// delivery that comes back.
type Receiver struct {
	wh    *standardwebhooks.Webhook
	log   *slog.Logger
	seen  *seenIDs
	queue chan Event
}

// NewReceiver returns a Receiver that verifies with secret (the whole
// "whsec_..." string the registration answered) and queues up to
// queueSize events for the worker; it remembers the last rememberIDs ids.
func NewReceiver(secret string, queueSize, rememberIDs int, log *slog.Logger) (*Receiver, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, err
	}
	return &Receiver{wh: wh, log: log, seen: newSeenIDs(rememberIDs), queue: make(chan Event, queueSize)}, nil
}

// Events is the queue of new, verified events, for the worker. It is never
// closed while the Receiver serves; Close closes it.
func (rc *Receiver) Events() <-chan Event { return rc.queue }

// Close closes the queue: call it once the HTTP server stopped serving.
func (rc *Receiver) Close() { close(rc.queue) }

func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "deliveries are POSTed", http.StatusMethodNotAllowed)
		return
	}
	// The signature covers the exact bytes: read them before any decoding.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "the body could not be read", http.StatusBadRequest)
		return
	}
	// The library checks the signature against the secret (any one of
	// the space-separated signatures: during a rotation there are two)
	// and refuses a timestamp more than 5 minutes from now, so a captured
	// delivery cannot be replayed later. A 4xx is retried by the sender
	// like any failure, so a receiver with a wrong secret loses nothing:
	// fix the secret and the retries get through.
	if err := rc.wh.Verify(body, r.Header); err != nil {
		rc.log.Warn("rejected a delivery", "webhook_id", r.Header.Get(standardwebhooks.HeaderWebhookID), "err", err)
		http.Error(w, "signature verification failed", http.StatusBadRequest)
		return
	}
	ev := Event{ID: r.Header.Get(standardwebhooks.HeaderWebhookID)}
	if err := json.Unmarshal(body, &ev); err != nil {
		// Signed by the service, yet not its message shape: nothing a
		// retry would change, so acknowledge it and look at it by hand.
		rc.log.Error("a signed delivery is not an event message", "webhook_id", ev.ID, "err", err)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if !rc.seen.add(ev.ID) {
		// Delivery is at least once: a retry whose first answer was lost,
		// or a resend, brings the same webhook-id again. Acknowledge it,
		// or the sender keeps retrying.
		rc.log.Info("duplicate delivery ignored", "webhook_id", ev.ID, "type", ev.Type)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	select {
	case rc.queue <- ev:
		w.WriteHeader(http.StatusNoContent)
	default:
		// The worker is behind: refuse rather than wait, and forget the id
		// so that the sender's retry is taken as new.
		rc.seen.remove(ev.ID)
		w.Header().Set("Retry-After", "5")
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}
}

// seenIDs is a bounded set of webhook-ids: the newest max ids, the oldest
// forgotten first. Memory only, so a restart forgets everything and a
// duplicate older than the last max ids gets through.
//
// A real receiver keeps the ids where it keeps the effect of the event: a
// table with the webhook-id as its primary key, inserted in the same
// database transaction as the change the event causes (the order marked
// paid), so that the event's effect and "seen" commit together or not at
// all, and a crash between the two cannot lose one or apply one twice.
type seenIDs struct {
	mu    sync.Mutex
	max   int
	order *list.List               // oldest first
	index map[string]*list.Element // the ids in order
}

func newSeenIDs(max int) *seenIDs {
	return &seenIDs{max: max, order: list.New(), index: make(map[string]*list.Element, max)}
}

// add records id and reports whether it is new.
func (s *seenIDs) add(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.index[id]; ok {
		return false
	}
	s.index[id] = s.order.PushBack(id)
	if s.order.Len() > s.max {
		oldest := s.order.Front()
		s.order.Remove(oldest)
		delete(s.index, oldest.Value.(string))
	}
	return true
}

// remove forgets id.
func (s *seenIDs) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.index[id]; ok {
		s.order.Remove(e)
		delete(s.index, id)
	}
}
