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
// rather than handing the test a cluster that is one node short.
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
}
