package natstest

import (
	"errors"
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
//
// Each server's cluster port must be known before any starts (the routes
// name them), so it is a free port found and released first: another
// process may take it in between, and then that server never becomes
// ready. StartCluster then starts the whole cluster again on new ports.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c, err := startClusterRetrying(t, func() []int { return freePorts(t, n) }, 10*time.Second)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return c
}

// startClusterRetrying starts a cluster on the ports ports gives, up to
// three times, each time on new ones.
func startClusterRetrying(t testing.TB, ports func() []int, ready time.Duration) (*Cluster, error) {
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var c *Cluster
		if c, err = startCluster(t, ports(), ready); err == nil {
			return c, nil
		}
		t.Logf("natstest: attempt %d: %v", attempt, err)
	}
	return nil, err
}

// startCluster starts one server per cluster port and waits up to ready for
// each to accept connections.
func startCluster(t testing.TB, ports []int, ready time.Duration) (*Cluster, error) {
	n := len(ports)
	routes := make([]string, n)
	for i, port := range ports {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", port)
	}
	c := &Cluster{}
	ok := false
	defer func() {
		if !ok {
			c.shutdown()
		}
	}()
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
			return nil, err
		}
		srv.Start()
		c.Servers = append(c.Servers, srv)
	}
	for _, srv := range c.Servers {
		if !srv.ReadyForConnections(ready) {
			return nil, fmt.Errorf("%s not ready in %s", srv.Name(), ready)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for !c.hasMetaLeader() {
		if time.Now().After(deadline) {
			return nil, errors.New("the JetStream cluster elected no meta leader in 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ok = true
	t.Cleanup(c.shutdown)
	return c, nil
}

func (c *Cluster) shutdown() {
	for _, srv := range c.Servers {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
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

func freePorts(t testing.TB, n int) []int {
	ports := make([]int, n)
	for i := range ports {
		ports[i] = freePort(t)
	}
	return ports
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
