package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// apiClient sends the API the requests of the load: create a payment under a
// key, as a client would.
type apiClient struct {
	http   *http.Client
	base   string
	secret string
}

// newAPIClient returns a client that keeps up to conns connections open to
// the API and never opens more.
func newAPIClient(base, secret string, conns int) *apiClient {
	return &apiClient{
		http: &http.Client{
			Timeout: time.Minute,
			Transport: &http.Transport{
				Proxy:               nil, // loopback: never through a proxy from the environment
				MaxConnsPerHost:     conns,
				MaxIdleConnsPerHost: conns,
				IdleConnTimeout:     5 * time.Minute,
				DisableCompression:  true,
			},
		},
		base:   base,
		secret: secret,
	}
}

// close closes the client's idle connections.
func (c *apiClient) close() { c.http.CloseIdleConnections() }

// answer is the API's answer to one request, or the error that came instead.
type answer struct {
	Status   int
	Replayed bool   // Idempotent-Replayed: true
	Location string // of a created payment
	Latency  time.Duration
	Err      error
}

// kind names an answer in the report: "201", "201 replayed", "409", "error".
func (a answer) kind() string {
	switch {
	case a.Err != nil:
		return "error: " + a.Err.Error()
	case a.Replayed:
		return strconv.Itoa(a.Status) + " replayed"
	default:
		return strconv.Itoa(a.Status)
	}
}

// paymentBody is the JSON of a payment command, unique by reference.
func paymentBody(reference string) []byte {
	return []byte(`{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"` + reference +
		`","paymentMethod":"pm_card_visa"}`)
}

// createPayment posts a payment command under key. wait > 0 sends
// Prefer: wait=N (seconds).
func (c *apiClient) createPayment(ctx context.Context, key string, body []byte, wait int) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/payments", bytes.NewReader(body))
	if err != nil {
		return answer{Err: err}
	}
	req.Header.Set("Authorization", "Bearer "+c.secret)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	if wait > 0 {
		req.Header.Set("Prefer", "wait="+strconv.Itoa(wait))
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{Err: err, Latency: time.Since(start)}
	}
	_, err = io.Copy(io.Discard, resp.Body) // read to the end: the connection is reused
	resp.Body.Close()
	a := answer{
		Status:   resp.StatusCode,
		Replayed: resp.Header.Get("Idempotent-Replayed") == "true",
		Location: resp.Header.Get("Location"),
		Latency:  time.Since(start),
		Err:      err,
	}
	return a
}

// workload is a closed loop: conns workers, each sending its next request as
// soon as the previous one is answered, until the duration is over.
type workload struct {
	Name     string
	Kind     phaseKind
	Conns    int
	Duration time.Duration
	// Request returns worker's seq-th request: the key and the body.
	Request func(worker, seq int) (key string, body []byte)
	// OK says whether an answer is the one the workload expects.
	OK func(answer) bool
}

// run drives the API with w and returns what came back. Every answer's
// latency counts, expected or not; Ops counts the expected ones.
func (w workload) run(ctx context.Context, c *apiClient) phase {
	type workerResult struct {
		ok, failed int
		unexpected map[string]int
		latencies  []time.Duration
	}
	results := make([]workerResult, w.Conns)
	start := time.Now()
	deadline := start.Add(w.Duration)
	var wg sync.WaitGroup
	for i := range w.Conns {
		wg.Go(func() {
			r := workerResult{unexpected: map[string]int{}}
			for seq := 0; time.Now().Before(deadline) && ctx.Err() == nil; seq++ {
				key, body := w.Request(i, seq)
				a := c.createPayment(ctx, key, body, 0)
				r.latencies = append(r.latencies, a.Latency)
				if w.OK(a) {
					r.ok++
				} else {
					r.failed++
					r.unexpected[a.kind()]++
				}
			}
			results[i] = r
		})
	}
	wg.Wait()
	p := phase{Name: w.Name, Kind: w.Kind, Elapsed: time.Since(start), Unexpected: map[string]int{}}
	for _, r := range results {
		p.Ops += r.ok
		p.Failed += r.failed
		p.Latencies = append(p.Latencies, r.latencies...)
		for k, n := range r.unexpected {
			p.Unexpected[k] += n
		}
	}
	slices.Sort(p.Latencies)
	return p
}

// newPayments is the workload of new payments: every request a new key and
// a new merchant reference, each answered 201 (not replayed).
func newPayments(name, prefix string, conns int, d time.Duration) workload {
	return workload{
		Name: name, Kind: kindNew, Conns: conns, Duration: d,
		Request: func(worker, seq int) (string, []byte) {
			key := fmt.Sprintf("%s-%d-%d", prefix, worker, seq)
			return key, paymentBody(key)
		},
		OK: func(a answer) bool { return a.Err == nil && a.Status == http.StatusCreated && !a.Replayed },
	}
}

// floorPayments is newPayments through the floor: its phases are reported,
// and judged, apart from the API's.
func floorPayments(name, prefix string, conns int, d time.Duration) workload {
	w := newPayments(name, prefix, conns, d)
	w.Kind = kindFloor
	return w
}

// replays is the workload of retries of payments already made (keys
// prefix-0 … prefix-(n-1)): each answered 201 from the stored answer.
func replays(name, prefix string, n, conns int, d time.Duration) workload {
	return workload{
		Name: name, Kind: kindReplay, Conns: conns, Duration: d,
		Request: func(worker, seq int) (string, []byte) {
			key := fmt.Sprintf("%s-%d", prefix, (worker*7919+seq)%n)
			return key, paymentBody(key)
		},
		OK: func(a answer) bool { return a.Err == nil && a.Status == http.StatusCreated && a.Replayed },
	}
}

// seed creates the n payments with keys prefix-0 … prefix-(n-1), conns at a
// time, and fails unless each was created.
func seed(ctx context.Context, c *apiClient, prefix string, n, conns int) error {
	next := make(chan int)
	errs := make(chan error, conns)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			for i := range next {
				key := fmt.Sprintf("%s-%d", prefix, i)
				if a := c.createPayment(ctx, key, paymentBody(key), 0); a.Err != nil || a.Status != http.StatusCreated {
					errs <- fmt.Errorf("seed payment %s: %s", key, a.kind())
					return
				}
			}
		})
	}
	var err error
	for i := range n {
		select {
		case next <- i:
			continue
		case err = <-errs:
		}
		break
	}
	close(next)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}

// storm sends n requests with one key at the same moment, each on its own
// connection and willing to wait for the original (Prefer: wait), and
// returns how long it took until all were answered, and what they were.
// The payment id is the created payment's.
func storm(ctx context.Context, base, secret, key string, n int) (stormResult, string) {
	c := newAPIClient(base, secret, n)
	defer c.close()
	body := paymentBody(key)
	answers := make([]answer, n)
	release := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range n {
		ready.Add(1)
		done.Go(func() {
			ready.Done()
			<-release
			answers[i] = c.createPayment(ctx, key, body, 10)
		})
	}
	ready.Wait()
	start := time.Now()
	close(release)
	done.Wait()
	r := stormResult{Requests: n, Elapsed: time.Since(start), Answers: map[string]int{}}
	paymentID := ""
	for _, a := range answers {
		r.Answers[a.kind()]++
		if a.Err != nil || a.Status != http.StatusCreated {
			r.Failed++
			continue
		}
		if id, ok := cutPaymentID(a.Location); ok {
			paymentID = id
		}
	}
	return r, paymentID
}

// cutPaymentID returns the payment id of a Location /payments/{id}.
func cutPaymentID(location string) (string, bool) {
	const prefix = "/payments/"
	if len(location) <= len(prefix) || location[:len(prefix)] != prefix {
		return "", false
	}
	return location[len(prefix):], true
}
