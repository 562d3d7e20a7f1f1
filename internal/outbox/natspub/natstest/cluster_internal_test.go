package natstest

import (
	"net"
	"strings"
	"testing"
	"time"
)

// TestAClusterPortTakenByAnotherProcessIsNoticed: the ports a cluster's
// routes name are found free and released before the servers start, so
// another process can take one in between. The server on it never becomes
// ready, and startCluster says so (StartCluster then tries new ports)
// rather than handing the test a cluster that is one node short, and
// StartCluster's retry then starts it on new ports.
func TestAClusterPortTakenByAnotherProcessIsNoticed(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ports := append(freePorts(t, 2), taken.Addr().(*net.TCPAddr).Port)
	c, err := startCluster(t, ports, time.Second)
	if err == nil {
		c.shutdown()
		t.Fatal("a cluster with a taken port started")
	}
	if !strings.Contains(err.Error(), "n3 not ready") {
		t.Fatalf("err = %v, want n3 not ready", err)
	}

	// StartCluster's way: on new ports, the cluster starts.
	attempts := 0
	c, err = startClusterRetrying(t, func() []int {
		attempts++
		if attempts == 1 {
			return ports // the taken port again
		}
		return freePorts(t, 3)
	}, time.Second)
	if err != nil || len(c.Servers) != 3 || attempts != 2 {
		t.Fatalf("after a taken port: cluster %v, %v, in %d attempts; want 3 servers in 2", c, err, attempts)
	}
}
