package payments_test

import (
	"fmt"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
	"net/http"
	"sync/atomic"
	"testing"
)

// BenchmarkCreatePayment measures a first request end to end: HTTP,
// authentication, the claim transaction, PROVIDER_REQUEST_SENT, the provider
// call over loopback, and the result transaction.
func BenchmarkCreatePayment(b *testing.B) {
	e := servicetest.New(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r := e.Post(fmt.Sprintf("bench-%d", i), servicetest.Body("merchantReference", fmt.Sprintf(`"bench-%d"`, i)))
		if r.Status != http.StatusCreated {
			b.Fatalf("%d %s", r.Status, r.Body)
		}
	}
}

// BenchmarkReplay measures a retry answered from the stored response.
func BenchmarkReplay(b *testing.B) {
	e := servicetest.New(b)
	if r := e.Post("bench-replay", servicetest.Body()); r.Status != http.StatusCreated {
		b.Fatalf("%d %s", r.Status, r.Body)
	}
	b.ReportAllocs()
	for b.Loop() {
		if r := e.Post("bench-replay", servicetest.Body()); r.Status != http.StatusCreated {
			b.Fatalf("%d %s", r.Status, r.Body)
		}
	}
}

// BenchmarkCreatePaymentParallel measures throughput with concurrent
// clients, each with its own keys.
func BenchmarkCreatePaymentParallel(b *testing.B) {
	e := servicetest.New(b)
	b.ReportAllocs()
	var n int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := nextID(&n)
			r := e.Post(fmt.Sprintf("par-%d", i), servicetest.Body("merchantReference", fmt.Sprintf(`"par-%d"`, i)))
			if r.Status != http.StatusCreated {
				b.Errorf("%d %s", r.Status, r.Body)
				return
			}
		}
	})
}

func nextID(n *int64) int64 { return atomic.AddInt64(n, 1) }
