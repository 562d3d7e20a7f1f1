// Package natstest runs a real NATS server with JetStream inside a test
// binary (github.com/nats-io/nats-server/v2, embedded), one per test.
package natstest

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Start runs a NATS server with JetStream on a free loopback port, its
// storage in a temporary directory, and returns its client URL. The server
// is shut down when the test ends.
func Start(t testing.TB) string {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		ServerName: "natstest",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   filepath.Join(t.TempDir(), "jetstream"),
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("natstest: NATS server not ready in 10s")
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv.ClientURL()
}

// Connect opens a client connection to url for the test, closed when the
// test ends, and its JetStream context.
func Connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return nc, js
}
