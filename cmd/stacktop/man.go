// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/stacktop/stacktop/internal/clierr"
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
			if err := doc.GenManTree(cmd.Root(), header, args[0]); err != nil {
				return err
			}
			return addSections(args[0], "*.1", manSections)
		},
	}
}

// newMarkdownCmd writes the command line reference, docs/cli/ (`make
// cli-docs`), from the same flags and help texts as --help and the man pages.
func newMarkdownCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "markdown DIR",
		Short:  "Write the command line reference (stacktop.md, stacktop_serve.md, …) into DIR",
		Hidden: true, // for the docs, not users
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.Root().DisableAutoGenTag = true // no date: the files are checked in
			if err := doc.GenMarkdownTree(cmd.Root(), args[0]); err != nil {
				return err
			}
			return addSections(args[0], "*.md", markdownSections)
		},
	}
}

// exitStatus is what every command's exit status means.
var exitStatus = []struct{ code, meaning string }{
	{strconv.Itoa(clierr.ExitOK), "success"},
	{strconv.Itoa(clierr.ExitFailure), "failure at run time (a program the kernel refused, an output that could not be written)"},
	{strconv.Itoa(clierr.ExitUsage), "bad usage or bad input: the message names the flag and the value"},
	{strconv.Itoa(clierr.ExitPrivileges), "missing privileges: the message names the capability and what it is needed for"},
}

// manSections adds EXIT STATUS before SEE ALSO, and names cobra's EXAMPLE
// section as man-pages(7) does.
func manSections(page []byte) []byte {
	var b bytes.Buffer
	b.WriteString(".SH EXIT STATUS\n")
	for _, s := range exitStatus {
		fmt.Fprintf(&b, ".TP\n.B %s\n%s\n\n", s.code, s.meaning)
	}
	page = bytes.Replace(page, []byte(".SH EXAMPLE\n"), []byte(".SH EXAMPLES\n"), 1)
	return insertBefore(page, ".SH SEE ALSO", b.Bytes())
}

// markdownSections adds the exit status before SEE ALSO.
func markdownSections(page []byte) []byte {
	var b bytes.Buffer
	b.WriteString("### Exit status\n\n| Status | Meaning |\n|---|---|\n")
	for _, s := range exitStatus {
		fmt.Fprintf(&b, "| %s | %s |\n", s.code, s.meaning)
	}
	b.WriteString("\n")
	return insertBefore(page, "### SEE ALSO", b.Bytes())
}

// insertBefore inserts section before the heading, or at the end without it.
func insertBefore(page []byte, heading string, section []byte) []byte {
	i := bytes.Index(page, []byte(heading))
	if i < 0 {
		return append(page, section...)
	}
	return append(page[:i:i], append(section, page[i:]...)...)
}

// addSections rewrites every file of dir matching pattern with add.
func addSections(dir, pattern string, add func([]byte) []byte) error {
	files, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		return err
	}
	for _, f := range files {
		page, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(f, add(page), 0o644); err != nil {
			return err
		}
	}
	return nil
}
