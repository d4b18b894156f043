// SPDX-License-Identifier: Apache-2.0

package promweb

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"go.yaml.in/yaml/v2"
)

// basicAuthUsers reads how many users the web configuration file at path
// requires basic auth from.
func basicAuthUsers(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var c struct {
		Users map[string]string `yaml:"basic_auth_users"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		return 0, err
	}
	return len(c.Users), nil
}

// requireAuth fails closed when the web configuration file, re-read on every
// request, no longer requires the basic auth it required at start: emptied,
// truncated, or replaced by one without users. exporter-toolkit would take
// such a file as "no authentication"; an operator who really wants that
// restarts stacktop. (A corrupt or unreadable file exporter-toolkit already
// answers with 500, and TLS handshakes fail without a usable certificate.)
func requireAuth(path string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := basicAuthUsers(path)
		if err == nil && n == 0 {
			err = fmt.Errorf("it required basic auth at start and now names no user")
		}
		if err != nil {
			slog.Error("refusing request: web configuration no longer requires authentication", "file", path, "err", err)
			http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			return
		}
		next.ServeHTTP(w, r)
	})
}
