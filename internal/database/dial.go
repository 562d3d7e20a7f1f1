package database

import (
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The connection settings that let every connection of the service survive
// a failover. They are the same for the API's pool, the `Prefer: wait`
// listener (which copies the pool's ConnConfig), the relay, the reconciler,
// the ledger and the operator commands, since all of them open their
// connections through Open.
const (
	// DefaultConnectTimeout bounds one connection attempt to one host of a
	// multi-host DATABASE_URL: pgx starts a new timeout for each host it
	// tries (pgconn.connectPreferred), so a frozen first host costs this
	// much and no more before the next host is tried. A URL's own
	// connect_timeout wins.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultPingTimeout bounds the liveness ping pgxpool sends on a
	// connection that sat idle before handing it out. Without it the ping
	// runs under the request's context, and a connection to a frozen
	// primary would hold the request until its own deadline. A URL's own
	// pool_ping_timeout wins.
	DefaultPingTimeout = 2 * time.Second
	// keepAliveIdle, keepAliveInterval and keepAliveCount probe an idle
	// connection, so that a peer that vanished (a host that lost power, a
	// partition) is noticed in about keepAliveIdle+count*interval rather
	// than the kernel's two hours.
	keepAliveIdle     = 10 * time.Second
	keepAliveInterval = 5 * time.Second
	keepAliveCount    = 3
	// userTimeout is TCP_USER_TIMEOUT (Linux): how long data written may
	// stay unacknowledged before the kernel drops the connection. Keepalives
	// only probe idle connections; a statement sent to a host that stopped
	// acknowledging would otherwise wait for the kernel's retransmissions,
	// about fifteen minutes.
	userTimeout = keepAliveIdle + keepAliveCount*keepAliveInterval
)

// ConfigureConn sets the per-host connect timeout and the dialer with
// keepalives and a user timeout on cfg, and on each of its fallbacks (the
// other hosts of a multi-host URL), which pgx dials with cfg's DialFunc.
// The hosts themselves are left as pgx parsed them: pgx tries them in order
// and keeps the first that satisfies target_session_attrs.
//
// A connection the service opens outside Open (the outbox relay's
// replication connection) is configured with it too.
func ConfigureConn(cfg *pgconn.Config) {
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	cfg.DialFunc = dialer(cfg.ConnectTimeout).DialContext
}

// dialer returns the net.Dialer of every database connection.
func dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{
		Timeout: timeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     keepAliveIdle,
			Interval: keepAliveInterval,
			Count:    keepAliveCount,
		},
		Control: setUserTimeout(userTimeout),
	}
}
