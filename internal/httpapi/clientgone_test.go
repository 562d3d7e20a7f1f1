package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A request whose client went away ends with context.Canceled: it is
// logged as a client that closed the request, with nginx's 499 as its
// status, never as a failed request (500). An error that merely wraps
// context.Canceled while the request's context is alive is not that.
func TestClientGoneIsNotA500(t *testing.T) {
	ew := newErrorWriter(time.Second, nil, nil)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	ctx, cancel := context.WithCancel(withLogger(context.Background(), log))
	cancel()
	r := httptest.NewRequest(http.MethodPost, "/payments", nil).WithContext(ctx)
	w := httptest.NewRecorder()
	ew.write(w, r, fmt.Errorf("claim key: %w", context.Canceled))
	if w.Code != StatusClientClosedRequest {
		t.Errorf("status %d, want %d", w.Code, StatusClientClosedRequest)
	}
	if !strings.Contains(logs.String(), "client closed the request") || strings.Contains(logs.String(), "request failed") {
		t.Errorf("logs:\n%s", logs.String())
	}

	logs.Reset()
	r = httptest.NewRequest(http.MethodPost, "/payments", nil).WithContext(withLogger(context.Background(), log))
	w = httptest.NewRecorder()
	ew.write(w, r, errors.Join(errors.New("something else"), context.Canceled))
	if w.Code == StatusClientClosedRequest {
		t.Errorf("a live request's error answered %d", w.Code)
	}
}
