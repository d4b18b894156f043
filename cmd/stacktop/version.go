package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/stacktop/stacktop/internal/features"
)

// version and commit are set at link time by `make build` (-ldflags
// "-X main.version=v1.2.3 -X main.commit=…"), from git describe and rev-parse.
var (
	version = "dev"
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

// versionLine is what --version prints: the version and the commit.
var versionLine = fmt.Sprintf("stacktop %s (commit %s)", version, buildCommit())

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print version, commit, Go and kernel version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "stacktop %s\ncommit %s\n%s %s/%s\nkernel %s\n",
				version, buildCommit(), runtime.Version(), runtime.GOOS, runtime.GOARCH,
				features.Detect().Kernel)
			return nil
		},
	}
}
