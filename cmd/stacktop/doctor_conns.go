package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/stacktop/stacktop/internal/conntrack"
)

// printConnectionHooks attaches the connection tracker as `top`/`stream`
// would and shows the backend each of its hooks got, and why others were
// refused.
func printConnectionHooks(out io.Writer) error {
	t, err := conntrack.Open(conntrack.Config{})
	if err != nil {
		fmt.Fprintf(out, "\nconnection hooks: cannot attach: %v\n", err)
		return nil
	}
	choices := t.Choices()
	if err := t.Close(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nconnection hooks (top, stream)")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOOK\tBACKEND\tREFUSED")
	for _, c := range choices {
		var refused []string
		for _, r := range c.Refused {
			refused = append(refused, fmt.Sprintf("%s: %s", r.Backend, r.Reason))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Hook, c.Backend, strings.Join(refused, "; "))
	}
	return tw.Flush()
}
