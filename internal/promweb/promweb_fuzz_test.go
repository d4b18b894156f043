// SPDX-License-Identifier: Apache-2.0

package promweb

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stacktop/stacktop/internal/clierr"
)

// FuzzValidate: any listen address and any web configuration file content
// is accepted or refused with exit 2 naming the flag; nothing panics.
func FuzzValidate(f *testing.F) {
	f.Add("127.0.0.1:9877", "")
	f.Add(":0", "tls_server_config:\n  cert_file: /nonexistent\n  key_file: /nonexistent\n")
	f.Add("[::1]:9877", "basic_auth_users:\n  alice: $2y$10$abcdefghijklmnopqrstuv\n")
	f.Add("host-:1", "http_server_config:\n  http2: [\n")
	f.Fuzz(func(t *testing.T, addr, config string) {
		path := filepath.Join(t.TempDir(), "web.yml")
		if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		o := Options{ListenAddresses: []string{addr}, TelemetryPath: "/metrics", ConfigFile: path}
		if err := o.Validate(); err != nil && clierr.Code(err) != clierr.ExitUsage {
			t.Fatalf("Validate(%q, %q) = %v, exit %d; want 2", addr, config, err, clierr.Code(err))
		}
	})
}
