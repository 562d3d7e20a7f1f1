package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/paymentsapi/paymentsapi/client"
)

// group is a command of subcommands, such as `paymentsctl events list`:
// the first argument names the subcommand, the rest are its own.
func group(name string, subcommands map[string]command) command {
	return func(ctx context.Context, c *client.Client, args []string, out *output) int {
		names := make([]string, 0, len(subcommands))
		for n := range subcommands {
			names = append(names, n)
		}
		slices.Sort(names)
		if len(args) == 0 {
			return out.usage(fmt.Errorf("%s needs a subcommand: %s", name, strings.Join(names, ", ")))
		}
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			return out.usage(flag.ErrHelp)
		}
		sub, ok := subcommands[args[0]]
		if !ok {
			return out.usage(fmt.Errorf("%s: unknown subcommand %q (want %s)", name, args[0], strings.Join(names, ", ")))
		}
		return sub(ctx, c, args[1:], out)
	}
}

// followPages appends to *items the items of every page after the one
// whose nextCursor is *next, fetched by fetch from a cursor, and leaves
// *next empty: a list command's -all, printed as one list.
func followPages[T any](items *[]T, next *string, fetch func(cursor string) ([]T, string, error)) error {
	for *next != "" {
		more, cursor, err := fetch(*next)
		if err != nil {
			return err
		}
		*items, *next = append(*items, more...), cursor
	}
	return nil
}
