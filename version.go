// SPDX-License-Identifier: Apache-2.0

// Package stacktop holds the release version, read from the VERSION file at
// the repository's root so that every way of building the binary (make,
// go build, go install) reports the same one, and a fresh clone needs no tag.
package stacktop

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var versionFile string

// Version is the release this tree is, such as "0.1.0".
var Version = strings.TrimSpace(versionFile)
