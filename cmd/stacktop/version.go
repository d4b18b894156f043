// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/stacktop/stacktop"
	"github.com/stacktop/stacktop/internal/features"
)

// version is the release, from the VERSION file. commit is set at link time
// by `make build` (-ldflags "-X main.commit=…", from git rev-parse); a plain
// go build falls back to the revision Go stamps.
var (
	version = stacktop.Version
	commit  = ""
)

// buildCommit returns the VCS revision the binary was built from: the one
// linked in, else the one Go stamped (when built with -buildvcs).
func buildCommit() string {
	if commit != "" {
		return commit
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// versionText is what --version prints, as every Prometheus exporter has
// it: version, commit, Go version and platform.
func versionText() string {
	return fmt.Sprintf("stacktop %s\ncommit %s\n%s %s/%s\n",
		version, buildCommit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print version, commit, Go and kernel version",
		Example: "  stacktop version  # for a bug report: what was built, and the kernel it runs on",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "%skernel %s\n", versionText(), features.Detect().Kernel)
			return nil
		},
	}
}
