package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/stacktop/stacktop/internal/features"
)

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// buildCommit returns the VCS revision the binary was built from.
func buildCommit() string {
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
		Use:   "version",
		Short: "Print version, commit, Go and kernel version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "%skernel %s\n", versionText(), features.Detect().Kernel)
			return nil
		},
	}
}
