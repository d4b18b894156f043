// SPDX-License-Identifier: Apache-2.0

package promweb

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"github.com/stacktop/stacktop/internal/clierr"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidateRejectsBadInput(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		want string // in the message, besides the flag name
	}{
		{"no port", Options{ListenAddresses: []string{"127.0.0.1"}}, `--web.listen-address "127.0.0.1"`},
		{"port out of range", Options{ListenAddresses: []string{"127.0.0.1:99999"}}, `port "99999"`},
		{"port not a number", Options{ListenAddresses: []string{"localhost:metrics"}}, `port "metrics"`},
		{"garbage host", Options{ListenAddresses: []string{"not a host:9877"}}, `host "not a host"`},
		{"second address bad", Options{ListenAddresses: []string{":9877", "[::1:9877"}}, `"[::1:9877"`},
		{"relative path", Options{TelemetryPath: "metrics"}, `--web.telemetry-path "metrics": must be a plain absolute path`},
		{"root path", Options{TelemetryPath: "/"}, `--web.telemetry-path "/": must be a plain absolute path`},
		{"health path", Options{TelemetryPath: "/-/healthy"}, `--web.telemetry-path "/-/healthy": is where /-/healthy and /-/ready are served`},
		{"ready path", Options{TelemetryPath: "/-/ready"}, `--web.telemetry-path "/-/ready"`},
		{"wildcard", Options{TelemetryPath: "/{x}"}, `--web.telemetry-path "/{x}"`},
		{"open wildcard", Options{TelemetryPath: "/{"}, `--web.telemetry-path "/{"`},
		{"rest wildcard", Options{TelemetryPath: "/{x...}"}, `--web.telemetry-path "/{x...}"`},
		{"wildcard inside", Options{TelemetryPath: "/a{b}c"}, `--web.telemetry-path "/a{b}c"`},
		{"space", Options{TelemetryPath: "/x /y"}, `--web.telemetry-path "/x /y"`},
		{"trailing space", Options{TelemetryPath: "/ "}, `--web.telemetry-path "/ "`},
		{"query", Options{TelemetryPath: "/metrics?x=1"}, `--web.telemetry-path "/metrics?x=1"`},
		{"subtree", Options{TelemetryPath: "/metrics/"}, `--web.telemetry-path "/metrics/"`},
		{"dot dot", Options{TelemetryPath: "/a/../metrics"}, `--web.telemetry-path "/a/../metrics": must not hold "." or ".." segments`},
		{"double slash", Options{TelemetryPath: "//metrics"}, `--web.telemetry-path "//metrics"`},
		{"no connections", Options{MaxConnections: -1}, `--web.max-connections "-1": must be between 1 and 65536`},
		{"config missing", Options{ConfigFile: "/nonexistent/web.yml"}, "no such file"},
		{"config not yaml", Options{ConfigFile: writeFile(t, "web.yml", "basic_auth_users: [oops")}, "--web.config.file"},
		{"config unknown key", Options{ConfigFile: writeFile(t, "web.yml", "basic_auth_user:\n  a: b\n")}, "basic_auth_user"},
		{"password not bcrypt", Options{ConfigFile: writeFile(t, "web.yml", "basic_auth_users:\n  alice: secret\n")}, "hash"},
		{"tls cert missing", Options{ConfigFile: writeFile(t, "web.yml", "tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n")}, "nope.crt"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := c.opts
			if o.ListenAddresses == nil {
				o.ListenAddresses = []string{DefaultAddress}
			}
			if o.TelemetryPath == "" {
				o.TelemetryPath = "/metrics"
			}
			if o.MaxConnections == 0 {
				o.MaxConnections = DefaultMaxConnections
			}
			err := o.Validate()
			if clierr.Code(err) != clierr.ExitUsage {
				t.Fatalf("Validate() = %v (exit %d), want a usage error (exit 2)", err, clierr.Code(err))
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("message %q does not contain %q", err, c.want)
			}
		})
	}
}

func TestValidateAcceptsGoodInput(t *testing.T) {
	for _, a := range []string{"127.0.0.1:9877", "[::1]:9877", ":9877", "0.0.0.0:0", "localhost:9877", "node-1.example.:80"} {
		o := Options{ListenAddresses: []string{a}, TelemetryPath: "/metrics", MaxConnections: DefaultMaxConnections}
		if err := o.Validate(); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
}

func TestPortInUseIsAFailureNamingTheAddress(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	o := Options{ListenAddresses: []string{busy.Addr().String()}}
	_, err = o.Listen()
	if clierr.Code(err) != clierr.ExitFailure || !strings.Contains(err.Error(), busy.Addr().String()+": the port is already in use") {
		t.Fatalf("Listen() = %v (exit %d), want exit 1 saying the port is in use", err, clierr.Code(err))
	}
}

// serve starts the server on a free loopback port and returns its address.
func serve(t *testing.T, o Options) string {
	t.Helper()
	addr, _ := serveReady(t, o)
	return addr
}

// serveReady is serve that also returns the server, to make it ready.
func serveReady(t *testing.T, o Options) (string, *Server) {
	t.Helper()
	o.ListenAddresses = []string{"127.0.0.1:0"}
	if o.TelemetryPath == "" {
		o.TelemetryPath = "/metrics"
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ls, err := o.Listen()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stacktop_test_value", Help: "A test value."},
		func() float64 { return 42 }))
	srv, err := o.NewServer(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ls) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ls[0].Addr().String(), srv
}

func get(t *testing.T, client *http.Client, url string, header http.Header) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(body)
}

func basicAuth(user, pass string) http.Header {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(user, pass)
	return r.Header
}

func TestBasicAuthFromWebConfig(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, Options{ConfigFile: writeFile(t, "web.yml", "basic_auth_users:\n  prometheus: "+string(hash)+"\n")})
	url := "http://" + addr + "/metrics"
	for _, c := range []struct {
		name   string
		header http.Header
		want   int
	}{
		{"no credentials", http.Header{}, http.StatusUnauthorized},
		{"wrong password", basicAuth("prometheus", "guess"), http.StatusUnauthorized},
		{"unknown user", basicAuth("mallory", "s3cret"), http.StatusUnauthorized},
		{"right credentials", basicAuth("prometheus", "s3cret"), http.StatusOK},
	} {
		code, _, body := get(t, http.DefaultClient, url, c.header)
		if code != c.want {
			t.Errorf("%s: status %d, want %d", c.name, code, c.want)
		}
		if code == http.StatusOK && !strings.Contains(body, "stacktop_test_value 42") {
			t.Errorf("%s: metrics missing from body:\n%s", c.name, body)
		}
	}
}

func TestOpenMetricsNegotiation(t *testing.T) {
	url := "http://" + serve(t, Options{}) + "/metrics"
	_, h, body := get(t, http.DefaultClient, url, http.Header{})
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") || strings.Contains(body, "# EOF") {
		t.Errorf("default scrape: Content-Type %q, want the Prometheus text format", ct)
	}
	_, h, body = get(t, http.DefaultClient, url, http.Header{"Accept": {"application/openmetrics-text;version=1.0.0"}})
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") || !strings.HasSuffix(body, "# EOF\n") {
		t.Errorf("OpenMetrics scrape: Content-Type %q, body ends %q", ct, body[max(0, len(body)-20):])
	}
	code, _, landing := get(t, http.DefaultClient, strings.TrimSuffix(url, "metrics"), http.Header{})
	if code != http.StatusOK || !strings.Contains(landing, `href="/metrics"`) {
		t.Errorf("landing page: status %d, no link to /metrics:\n%s", code, landing)
	}
}

func TestTLSFromWebConfig(t *testing.T) {
	certPEM, keyPEM := selfSigned(t)
	dir := t.TempDir()
	for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "web.yml")
	// Relative paths are resolved against the config file's directory.
	if err := os.WriteFile(cfg, []byte("tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := serve(t, Options{ConfigFile: cfg})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	code, _, body := get(t, client, "https://"+addr+"/metrics", http.Header{})
	if code != http.StatusOK || !strings.Contains(body, "stacktop_test_value 42") {
		t.Errorf("HTTPS scrape: status %d body:\n%s", code, body)
	}
}

// selfSigned returns a certificate for 127.0.0.1 and its key, PEM-encoded.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "stacktop test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// TestTelemetryPathIgnoresQueries: metrics are served at the telemetry path
// whatever query the scrape carries (Prometheus's params), and only there.
func TestTelemetryPathIgnoresQueries(t *testing.T) {
	addr := serve(t, Options{TelemetryPath: "/node-1/stacktop.metrics"})
	for path, want := range map[string]int{
		"/node-1/stacktop.metrics":     http.StatusOK,
		"/node-1/stacktop.metrics?x=1": http.StatusOK,
		"/node-1/stacktop.metrics/":    http.StatusNotFound,
		"/node-1":                      http.StatusNotFound,
	} {
		code, _, body := get(t, http.DefaultClient, "http://"+addr+path, nil)
		if code != want || want == http.StatusOK && !strings.Contains(body, "stacktop_test_value 42") {
			t.Errorf("GET %s: status %d, want %d:\n%.200s", path, code, want, body)
		}
	}
}

// TestExporterMetrics: the metrics about the exporter process are served,
// one family per name in OpenMetrics too, unless
// --web.disable-exporter-metrics leaves them out.
func TestExporterMetrics(t *testing.T) {
	openMetrics := http.Header{"Accept": {"application/openmetrics-text;version=1.0.0"}}
	for _, disabled := range []bool{false, true} {
		url := "http://" + serve(t, Options{DisableExporterMetrics: disabled}) + "/metrics"
		_, _, body := get(t, http.DefaultClient, url, openMetrics)
		families := map[string]int{}
		for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) `).FindAllStringSubmatch(body, -1) {
			families[m[1]]++
		}
		for name, n := range families {
			if n > 1 {
				t.Errorf("disabled %v: %d families named %s", disabled, n, name)
			}
		}
		for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_start_time_seconds", "promhttp_metric_handler_requests"} {
			if _, ok := families[name]; ok == disabled {
				t.Errorf("disabled %v: family %s exported %v", disabled, name, ok)
			}
		}
		if families["stacktop_test_value"] != 1 {
			t.Errorf("disabled %v: the registry's own metric is missing:\n%s", disabled, body)
		}
	}
}
