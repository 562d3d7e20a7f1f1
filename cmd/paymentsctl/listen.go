package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/paymentsapi/paymentsapi/client"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
)

// Limits of the local receiver of `paymentsctl listen`.
const (
	// maxDeliveryBytes bounds the body of one delivery: an event is a
	// payment or a refund, a few KiB.
	maxDeliveryBytes = 1 << 20
	// forwardTimeout bounds one forward to -forward-to, as the service's
	// WEBHOOK_TIMEOUT bounds one delivery.
	forwardTimeout = 10 * time.Second
	// cleanupTimeout bounds the deletion of the temporary endpoint on exit,
	// when the command's own context is already canceled.
	cleanupTimeout = 10 * time.Second
)

// listen is `paymentsctl listen`: a local receiver for the tenant's
// webhooks, like `stripe listen`. It listens on 127.0.0.1, registers a
// temporary endpoint (POST /webhook-endpoints) for it, verifies every
// delivery with the Standard Webhooks library, prints each verified event as
// one JSON line on stdout (or forwards it, headers and body unchanged, to
// -forward-to), and deletes the endpoint when it stops (SIGINT, SIGTERM).
func listen(ctx context.Context, c *client.Client, args []string, out *output) int {
	fs := subcommandFlags("listen")
	events := fs.String("events", "", "comma-separated event types to receive, such as payment.succeeded,refund.succeeded; default: every type")
	forwardTo := fs.String("forward-to", "", "forward each verified delivery, with its webhook-* headers, to this URL instead of printing it")
	addr := fs.String("addr", "127.0.0.1:0", "the local address to receive on; the server must be able to reach it")
	if err := fs.Parse(args); err != nil {
		return out.usage(err)
	}
	if err := noArgs(fs); err != nil {
		return out.usage(err)
	}
	types, err := eventTypes(fs, "events", *events)
	if err != nil {
		return out.usage(err)
	}
	if *forwardTo != "" {
		if u, err := url.Parse(*forwardTo); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return out.usage(fmt.Errorf("listen: -forward-to %q is not an http(s) URL", *forwardTo))
		}
	}

	// Listen first: the endpoint's URL needs the port, and deliveries that
	// arrive before the receiver serves wait in the listen queue.
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		out.errorf("listen: %v", err)
		return exitError
	}
	defer ln.Close()
	endpointURL := "http://" + ln.Addr().String() + "/"
	res, err := c.CreateWebhookEndpoint(ctx, client.CreateWebhookEndpointRequest{
		URL: endpointURL, EventTypes: types, Description: "paymentsctl listen on " + ln.Addr().String(),
	})
	if err != nil {
		var p *client.Error
		if errors.As(err, &p) && p.Code == client.CodeWebhookURLForbidden {
			out.errorf("the server refuses to send webhooks to %s: %s", endpointURL, p.Detail)
			out.errorf("hint: listen needs a server that allows plain http and loopback destinations: " +
				"WEBHOOK_ALLOW_HTTP=true and WEBHOOK_ALLOW_PRIVATE=true (the defaults of dev mode, `make run`)")
			return exitError
		}
		return out.failure(err)
	}
	endpoint := res.Endpoint
	_, _ = fmt.Fprintf(out.stderr, "listening on %s for %s as endpoint %s\nwebhook signing secret: %s\n",
		endpointURL, describeTypes(types), endpoint.EndpointID, endpoint.Secret)

	rcv := &receiver{secret: endpoint.Secret, forwardTo: *forwardTo, out: out,
		forward: &http.Client{Timeout: forwardTimeout}}
	srv := &http.Server{Handler: rcv, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	code := exitOK
	select {
	case <-ctx.Done():
	case err := <-served:
		out.errorf("listen: the receiver stopped: %v", err)
		code = exitError
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	// The endpoint is temporary: without this, the service would retry its
	// deliveries to a closed port for days, then disable it.
	if err := c.DeleteWebhookEndpoint(shutdown, endpoint.EndpointID); err != nil {
		out.errorf("delete the temporary endpoint %s: %v; delete it with DELETE /webhook-endpoints/%s", endpoint.EndpointID, err, endpoint.EndpointID)
		return exitError
	}
	_, _ = fmt.Fprintf(out.stderr, "deleted endpoint %s\n", endpoint.EndpointID)
	return code
}

// eventTypes parses a comma-separated list of event types, the flag
// flagName of fs: nil (every type) when empty. The server checks the names.
func eventTypes(fs *flag.FlagSet, flagName, list string) ([]client.EventType, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var types []client.EventType
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("%s: -%s %q has an empty type", fs.Name(), flagName, list)
		}
		types = append(types, client.EventType(name))
	}
	return types, nil
}

func describeTypes(types []client.EventType) string {
	if len(types) == 0 {
		return "every event type"
	}
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// receiver is the local endpoint: it verifies each delivery, then prints or
// forwards it. It deduplicates nothing: a developer watching deliveries
// wants to see a retry or a resend arrive.
type receiver struct {
	secret    string
	forwardTo string
	forward   *http.Client
	out       *output
	mu        sync.Mutex // one line at a time on stdout
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "deliveries are POSTed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxDeliveryBytes))
	if err != nil {
		http.Error(w, "the body could not be read", http.StatusBadRequest)
		return
	}
	id := r.Header.Get(outbound.HeaderID)
	// Verified with the library, as a real receiver does, before anything
	// is printed: what listen shows is what a receiver would accept.
	if err := outbound.Verify(rc.secret, r.Header, body); err != nil {
		rc.note("rejected delivery %q: %v", id, err)
		http.Error(w, "signature verification failed", http.StatusBadRequest)
		return
	}
	if rc.forwardTo == "" {
		rc.print(id, body)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	status, err := rc.relay(r.Context(), r.Header, body)
	if err != nil {
		// Not a 2xx: the service keeps the delivery and retries it on its
		// schedule, as it would if the forward target were the endpoint.
		// Not the target's own status either: a 410 would disable the
		// temporary endpoint.
		rc.note("forward %q to %s: %v", id, rc.forwardTo, err)
		http.Error(w, "the forward target failed", http.StatusBadGateway)
		return
	}
	rc.note("forwarded %q to %s: %d", id, rc.forwardTo, status)
	w.WriteHeader(http.StatusNoContent)
}

// relay sends the delivery to forwardTo with its content type and its
// webhook-* headers, so that the target verifies it as it would verify the
// service's delivery (with the secret listen printed). It returns the
// target's status, and an error unless it is a 2xx.
func (rc *receiver) relay(ctx context.Context, header http.Header, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rc.forwardTo, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range []string{outbound.HeaderID, outbound.HeaderTimestamp, outbound.HeaderSignature} {
		req.Header.Set(h, header.Get(h))
	}
	resp, err := rc.forward.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDeliveryBytes))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("it answered %d", resp.StatusCode)
	}
	return resp.StatusCode, nil
}

// print writes a verified delivery as one JSON line: its webhook-id, then
// the message's members (type, timestamp, data).
func (rc *receiver) print(id string, body []byte) {
	var msg struct {
		Type      string          `json:"type"`
		Timestamp string          `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}
	var line []byte
	if err := json.Unmarshal(body, &msg); err == nil {
		line, err = json.Marshal(struct {
			ID        string          `json:"id"`
			Type      string          `json:"type"`
			Timestamp string          `json:"timestamp"`
			Data      json.RawMessage `json:"data"`
		}{id, msg.Type, msg.Timestamp, msg.Data})
		if err != nil {
			line = nil
		}
	}
	if line == nil { // signed but not the expected shape: show it as it came
		var compact bytes.Buffer
		if json.Compact(&compact, body) != nil {
			rc.note("delivery %q is signed but not JSON", id)
			return
		}
		line = compact.Bytes()
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	_, _ = fmt.Fprintf(rc.out.stdout, "%s\n", line)
}

// note tells something on stderr, one line at a time.
func (rc *receiver) note(format string, args ...any) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.out.errorf(format, args...)
}
