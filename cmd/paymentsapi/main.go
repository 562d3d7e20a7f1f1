// Command paymentsapi is the payments service. With no configuration it
// starts an embedded PostgreSQL under ./.data and an in-process provider
// simulator, and prints a curl command to try it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "paymentsapi:", err)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// run is the whole program: everything it needs from the OS is a parameter,
// so tests start the real server in-process.
func run(ctx context.Context, args []string, getenv func(string) string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "serve") {
		args = args[1:]
	}
	return serve(ctx, args, getenv, stdout, stderr)
}
