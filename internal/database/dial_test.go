package database_test

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// Open keeps every host of a multi-host URL, sets a per-host connect
// timeout (the URL's own connect_timeout wins), a ping timeout on idle
// connections, and its own dialer (keepalives, TCP_USER_TIMEOUT); and it
// connects past a first host that accepts TCP connections but never
// answers, within about one connect timeout.
func TestOpenMultiHostPastASilentHost(t *testing.T) {
	url := pgtest.NewURL(t)
	// A host that accepts connections and never says a word: a frozen
	// server, as far as a client can tell.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	multi := hostsFirst(t, url, silent.Addr().String()) + "&connect_timeout=1"

	start := time.Now()
	pool, err := database.Open(context.Background(), multi)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Open took %s past a silent first host with connect_timeout=1", d)
	}
	cfg := pool.Config()
	if cfg.ConnConfig.ConnectTimeout != time.Second {
		t.Errorf("ConnectTimeout %s, want the URL's 1s", cfg.ConnConfig.ConnectTimeout)
	}
	if len(cfg.ConnConfig.Fallbacks) != 1 {
		t.Errorf("%d fallback hosts, want 1 (the second host of the URL)", len(cfg.ConnConfig.Fallbacks))
	}
	if cfg.PingTimeout != database.DefaultPingTimeout {
		t.Errorf("PingTimeout %s, want %s", cfg.PingTimeout, database.DefaultPingTimeout)
	}
	if cfg.ConnConfig.DialFunc == nil {
		t.Error("no DialFunc: connections would have pgx's default keepalives and no user timeout")
	}

	plain, err := database.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if got := plain.Config().ConnConfig.ConnectTimeout; got != database.DefaultConnectTimeout {
		t.Errorf("ConnectTimeout %s without connect_timeout in the URL, want %s", got, database.DefaultConnectTimeout)
	}
}

// hostsFirst returns dbURL with host (host:port) tried before its own.
func hostsFirst(t *testing.T, dbURL, host string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = host + "," + u.Host
	s := u.String()
	if u.RawQuery == "" {
		return s + "?sslmode=disable"
	}
	return s
}
