//go:build gendocs

// This file exists only in `go run -tags gendocs ./cmd/stacktop DIR`, which
// the packaging (scripts/package.sh) runs to write the man pages and shell
// completions from the same command tree the binary has, so they cannot
// drift from --help. The build tag keeps the doc generator and its
// dependencies out of the shipped binary.

package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// init runs before main: under this tag the program generates and exits.
func init() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run -tags gendocs ./cmd/stacktop DIR")
		os.Exit(2)
	}
	if err := generateDocs(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// generateDocs writes DIR/man/*.1 (one page per command; the date comes from
// SOURCE_DATE_EPOCH when set, so the pages are reproducible) and the bash,
// zsh and fish completions under DIR/completion/.
func generateDocs(dir string) error {
	root := newRootCmd(os.Stdout, os.Stderr)
	root.DisableAutoGenTag = true
	man := filepath.Join(dir, "man")
	comp := filepath.Join(dir, "completion")
	for _, d := range []string{man, comp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	header := &doc.GenManHeader{Title: "STACKTOP", Section: "1", Source: "stacktop " + version, Manual: "stacktop manual"}
	if err := doc.GenManTree(root, header, man); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	for name, gen := range map[string]func(*cobra.Command, string) error{
		"stacktop.bash": func(c *cobra.Command, f string) error { return c.GenBashCompletionFileV2(f, true) },
		"_stacktop":     (*cobra.Command).GenZshCompletionFile,
		"stacktop.fish": func(c *cobra.Command, f string) error { return c.GenFishCompletionFile(f, true) },
	} {
		if err := gen(root, filepath.Join(comp, name)); err != nil {
			return fmt.Errorf("completion %s: %w", name, err)
		}
	}
	return nil
}
