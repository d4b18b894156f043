// SPDX-License-Identifier: Apache-2.0

package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newManCmd writes the man pages, one per command, generated from the same
// flags and help texts as --help; the Debian package (scripts/deb.sh) ships
// them.
func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write the man pages (stacktop.1, stacktop-serve.1, …) into DIR",
		Hidden: true, // for packagers, not users
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			header := &doc.GenManHeader{Title: "STACKTOP", Section: "1", Source: "stacktop " + version, Manual: "stacktop manual"}
			return doc.GenManTree(cmd.Root(), header, args[0])
		},
	}
}
