package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/stacktop/stacktop/internal/testenv"
)

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs cmd until the test ends, then stops it with SIGTERM; a process
// that dies early, or does not exit 0 on SIGTERM, fails the test.
func start(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("%s: %v\n%s", cmd.Args[0], err, out.String())
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Errorf("%s ignored SIGTERM\n%s", cmd.Args[0], out.String())
		}
	})
}

// eventually retries check every 200 ms until it succeeds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sample is one element of an instant-vector query result.
type sample struct {
	Metric map[string]string
	Value  float64
}

// query runs an instant query through Prometheus's HTTP API.
func query(promAddr, expr string) ([]sample, error) {
	resp, err := http.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, r.Error)
	}
	out := make([]sample, len(r.Data.Result))
	for i, s := range r.Data.Result {
		v, err := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %v: %w", expr, s.Value[1], err)
		}
		out[i] = sample{s.Metric, v}
	}
	return out, nil
}

// stack is a running stacktop serve behind basic auth and a Prometheus
// scraping it every second, both on loopback ports of their own.
type stack struct {
	serveAddr, promAddr string
	user, password      string
}

func startStack(t *testing.T, serveArgs ...string) *stack {
	t.Helper()
	testenv.RequireRoot(t)
	prometheus := requireTool(t, "prometheus")
	s := &stack{serveAddr: freeAddr(t), promAddr: freeAddr(t), user: "prometheus", password: "e2e-secret"}
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte(s.password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"web.yml": fmt.Sprintf("basic_auth_users:\n  %s: %s\n", s.user, hash),
		"prometheus.yml": fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: stacktop
    static_configs:
      - targets: [%q]
    basic_auth:
      username: %s
      password: %s
`, s.serveAddr, s.user, s.password),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"serve", "--web.listen-address", s.serveAddr,
		"--web.config.file", filepath.Join(dir, "web.yml"), "--interval", "1s"}, serveArgs...)
	start(t, exec.Command(testenv.Binary(t), args...))
	eventually(t, 30*time.Second, "stacktop serve answering", func() error {
		_, err := s.scrape(false)
		return err
	})
	start(t, exec.Command(prometheus, "--config.file", filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path", filepath.Join(dir, "data"), "--web.listen-address", s.promAddr,
		"--log.level", "warn"))
	eventually(t, 30*time.Second, "Prometheus scraping stacktop", func() error {
		up, err := query(s.promAddr, `up{job="stacktop"}`)
		if err != nil {
			return err
		}
		if len(up) != 1 || up[0].Value != 1 {
			return fmt.Errorf("up = %v", up)
		}
		return nil
	})
	return s
}

// scrape fetches the metrics page, with or without the credentials, and
// returns the HTTP status code.
func (s *stack) scrape(withCredentials bool) (int, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+s.serveAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	if withCredentials {
		req.SetBasicAuth(s.user, s.password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// TestPrometheusEndToEnd runs stacktop serve and Debian's Prometheus and
// checks, through Prometheus's HTTP API, what a user of the dashboard sees.
func TestPrometheusEndToEnd(t *testing.T) {
	s := startStack(t)

	t.Run("basic auth", func(t *testing.T) {
		for _, c := range []struct {
			credentials bool
			want        int
		}{{false, http.StatusUnauthorized}, {true, http.StatusOK}} {
			code, err := s.scrape(c.credentials)
			if err != nil || code != c.want {
				t.Errorf("scrape with credentials=%v: status %d, %v; want %d", c.credentials, code, err, c.want)
			}
		}
	})

	t.Run("self metrics", func(t *testing.T) {
		info, err := query(s.promAddr, `stacktop_build_info`)
		if err != nil || len(info) != 1 || info[0].Metric["goversion"] == "" {
			t.Errorf("stacktop_build_info through Prometheus: %v, %v", info, err)
		}
	})

	// Every dashboard query is accepted by a real Prometheus holding real
	// stacktop data (Grafana's variables replaced by catch-all values).
	t.Run("dashboard queries", func(t *testing.T) {
		for where, expr := range dashboardQueries(t) {
			if strings.HasPrefix(where, "variable ") {
				expr = "count(" + expr + ")"
			}
			if _, err := query(s.promAddr, expr); err != nil {
				t.Errorf("%s: %v", where, errors.Unwrap(err))
			}
		}
	})
}
