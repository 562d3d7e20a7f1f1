// Package failover holds the database failover tests, end to end: two
// real API processes on a PostgreSQL primary with a streaming standby
// (internal/pgcluster), both configured with the multi-host URL, under load
// from retrying clients (package client). The primary crashes, or freezes,
// and the standby is promoted; the service follows by itself, and the
// provider's books (GET /_sim/charges) and the database prove that nothing
// acknowledged was lost or charged twice.
//
// The tests build cmd/paymentsapi and cmd/providersim and drive the
// binaries from outside, as an operator's clients would. They take about a
// minute on two cores, so the failover build tag keeps them out of `go
// test ./...` and `make test`: `make test-failover` runs them, and .ci/run
// calls it.
package failover
