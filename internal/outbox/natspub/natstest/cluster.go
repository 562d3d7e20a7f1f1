package natstest

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster is a JetStream cluster of NATS servers running inside the test
// binary.
type Cluster struct {
	Servers []*server.Server
}

// StartCluster runs n NATS servers with JetStream, routed to each other as
// one cluster, and waits until JetStream has a meta leader. They are shut
// down when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	ports := make([]int, n)
	routes := make([]string, n)
	for i := range n {
		ports[i] = freePort(t)
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[i])
	}
	c := &Cluster{}
	for i := range n {
		srv, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   filepath.Join(t.TempDir(), "jetstream"),
			Cluster:    server.ClusterOpts{Name: "natstest", Host: "127.0.0.1", Port: ports[i]},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
			NoLog:      true,
			NoSigs:     true,
		})
		if err != nil {
			t.Fatalf("natstest: %v", err)
		}
		srv.Start()
		c.Servers = append(c.Servers, srv)
		t.Cleanup(func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		})
	}
	for _, srv := range c.Servers {
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatalf("natstest: %s not ready in 10s", srv.Name())
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for !c.hasMetaLeader() {
		if time.Now().After(deadline) {
			t.Fatal("natstest: the JetStream cluster elected no meta leader in 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c
}

// URL returns the client URLs of the servers still running, comma
// separated, as a client that fails over between them takes them.
func (c *Cluster) URL() string {
	var urls []string
	for _, srv := range c.Servers {
		if srv.Running() {
			urls = append(urls, srv.ClientURL())
		}
	}
	return strings.Join(urls, ",")
}

// Server returns the running server named name, or nil.
func (c *Cluster) Server(name string) *server.Server {
	for _, srv := range c.Servers {
		if srv.Name() == name && srv.Running() {
			return srv
		}
	}
	return nil
}

func (c *Cluster) hasMetaLeader() bool {
	for _, srv := range c.Servers {
		if srv.JetStreamIsLeader() {
			return true
		}
	}
	return false
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
