// SPDX-License-Identifier: Apache-2.0

package promweb

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"github.com/stacktop/stacktop/internal/testenv/reexec"
)

// idleHelperSpec is the idle-clients helper's parameter, "n addr": the file
// limit here (20,000) cannot hold 20,000 client and the server's sockets in
// one process.
const idleHelperSpec = "PROMWEB_IDLE_CLIENTS"

func TestMain(m *testing.M) {
	reexec.Main(m, reexec.Helpers{"idle-clients": idleClients})
}

// idleClients opens n connections to addr (idleHelperSpec): every other one
// sends a request without credentials and keeps the connection after the
// 401, the rest never send anything. It prints "ready <401s>" and holds
// them all until its stdin closes.
func idleClients() error {
	var n int
	var addr string
	if _, err := fmt.Sscan(os.Getenv(idleHelperSpec), &n, &addr); err != nil {
		return fmt.Errorf("bad spec: %w", err)
	}
	conns := make([]net.Conn, 0, n)
	unauthorized := 0
	for i := range n {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		conns = append(conns, c)
		if i%2 == 1 {
			continue
		}
		// The server may already have evicted it for a newer one: then
		// the write or the read fails, which is the defence working.
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")); err != nil {
			continue
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil && resp.StatusCode == http.StatusUnauthorized {
			unauthorized++
		}
	}
	fmt.Println("ready", unauthorized)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return nil
}

func authConfig(t *testing.T, user, pass string) (path, content string) {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	content = "basic_auth_users:\n  " + user + ": " + string(hash) + "\n"
	return writeFile(t, "web.yml", content), content
}

// 20,000 idle connections, half of them kept open after a 401 (no
// credentials needed for that), do not stop an authenticated scrape from
// being answered within a second, and the server holds no more than
// --web.max-connections of them.
func TestIdleConnectionsDoNotStarveScrapes(t *testing.T) {
	cfg, _ := authConfig(t, "prometheus", "s3cret")
	addr, srv := serveReady(t, Options{ConfigFile: cfg})
	const helpers, perHelper = 2, 10000
	var wg sync.WaitGroup
	var unauthorized [helpers]int
	for h := range helpers {
		cmd := reexec.Command(t, "idle-clients", fmt.Sprintf("%s=%d %s", idleHelperSpec, perHelper, addr))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stdin.Close(); cmd.Wait() })
		wg.Go(func() {
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "ready ")))
			if err != nil {
				t.Errorf("idle client %d: %q", h, line)
			}
			unauthorized[h] = n
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if unauthorized[0]+unauthorized[1] == 0 {
		t.Error("no idle client got its 401: the test did not keep any connection open after one")
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	for i := range 5 {
		start := time.Now()
		code, _, body := get(t, client, "http://"+addr+"/metrics", basicAuth("prometheus", "s3cret"))
		took := time.Since(start)
		if code != http.StatusOK || took >= time.Second {
			t.Errorf("scrape %d after %d idle connections: status %d in %v, want 200 in < 1s", i, helpers*perHelper, code, took)
		}
		if i == 0 {
			t.Logf("scrape after %d idle connections (%d kept open after a 401): %v, evictions %s", helpers*perHelper,
				unauthorized[0]+unauthorized[1], took, metricLine(body, `stacktop_http_connections_closed_total{reason="evicted"}`))
		}
	}
	if n := srv.limit.open(); n > DefaultMaxConnections {
		t.Errorf("server holds %d connections, limit %d", n, DefaultMaxConnections)
	}
}

func metricLine(body, prefix string) string {
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(strings.TrimPrefix(line, prefix))
		}
	}
	return "(none)"
}

// slowCollector takes turns like the exporter does (one scrape reads the
// kernel maps at a time) and takes a while each time.
type slowCollector struct {
	mu   sync.Mutex
	desc *prometheus.Desc
}

func (c *slowCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c *slowCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1)
}

// Concurrent scrapes wait for each other; none is turned away with 503.
func TestConcurrentScrapesWait(t *testing.T) {
	o := Options{ListenAddresses: []string{"127.0.0.1:0"}, TelemetryPath: "/metrics", MaxConnections: DefaultMaxConnections}
	ls, err := o.Listen()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&slowCollector{desc: prometheus.NewDesc("stacktop_test_slow", "A slow source.", nil, nil)})
	srv, err := o.NewServer(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- srv.Serve(ctx, ls) }()
	defer func() { cancel(); <-done }()
	const scrapes = 32 // 8 got 503 before
	var wg sync.WaitGroup
	codes := make([]int, scrapes)
	for i := range scrapes {
		wg.Go(func() {
			resp, err := http.Get("http://" + ls[0].Addr().String() + "/metrics")
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("concurrent scrape %d: status %d, want 200", i, c)
		}
	}
}

// A web config that protected the endpoint with basic auth and then becomes
// empty, corrupt, unreadable or userless refuses every request, with or
// without the old credentials; restored, it serves again.
func TestWebConfigFailsClosed(t *testing.T) {
	cfg, good := authConfig(t, "prometheus", "s3cret")
	url := "http://" + serve(t, Options{ConfigFile: cfg}) + "/metrics"
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	write := func(content string) {
		t.Helper()
		os.RemoveAll(cfg)
		if err := os.WriteFile(cfg, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// exporter-toolkit reads the file once when it starts serving.
	if code, _, _ := get(t, client, url, basicAuth("prometheus", "s3cret")); code != http.StatusOK {
		t.Fatalf("intact web config: status %d, want 200", code)
	}
	for _, c := range []struct {
		name    string
		breakIt func()
	}{
		{"emptied", func() { write("") }},
		{"truncated to a comment", func() { write("# rotated\n") }},
		{"users removed", func() { write("http_server_config:\n  http2: false\n") }},
		{"corrupt", func() { write("basic_auth_users: [oops\n") }},
		{"removed", func() { os.Remove(cfg) }},
		{"replaced by a directory", func() { os.Remove(cfg); os.Mkdir(cfg, 0o700) }},
	} {
		c.breakIt()
		for _, creds := range []http.Header{{}, basicAuth("prometheus", "s3cret")} {
			if code, _, body := get(t, client, url, creds); code == http.StatusOK {
				t.Errorf("web config %s: status 200 (credentials %v), want a refusal:\n%.200s", c.name, creds.Get("Authorization") != "", body)
			}
		}
		write(good)
		if code, _, _ := get(t, client, url, basicAuth("prometheus", "s3cret")); code != http.StatusOK {
			t.Errorf("web config restored after %s: status %d, want 200", c.name, code)
		}
	}
}

// /-/healthy answers as soon as the server listens, /-/ready only once the
// caller says the programs are attached.
func TestHealthAndReadiness(t *testing.T) {
	addr, srv := serveReady(t, Options{})
	if code, _, _ := get(t, http.DefaultClient, "http://"+addr+"/-/healthy", http.Header{}); code != http.StatusOK {
		t.Errorf("/-/healthy: %d, want 200", code)
	}
	if code, _, body := get(t, http.DefaultClient, "http://"+addr+"/-/ready", http.Header{}); code != http.StatusServiceUnavailable {
		t.Errorf("/-/ready before SetReady: %d %q, want 503", code, body)
	}
	srv.SetReady()
	if code, _, _ := get(t, http.DefaultClient, "http://"+addr+"/-/ready", http.Header{}); code != http.StatusOK {
		t.Errorf("/-/ready after SetReady: %d, want 200", code)
	}
	code, _, landing := get(t, http.DefaultClient, "http://"+addr+"/", http.Header{})
	for _, link := range []string{`href="/metrics"`, `href="/-/healthy"`, `href="/-/ready"`} {
		if code != http.StatusOK || !strings.Contains(landing, link) {
			t.Errorf("landing page (status %d) lacks %s", code, link)
		}
	}
	// Every link of ours on it is served.
	for _, m := range regexp.MustCompile(`href="(/[^"]*)"`).FindAllStringSubmatch(landing, -1) {
		if code, _, _ := get(t, http.DefaultClient, "http://"+addr+m[1], http.Header{}); code != http.StatusOK {
			t.Errorf("landing page links %s, which answers %d", m[1], code)
		}
	}
}

// TestBodyPendingConnectionsDoNotStarveScrapes: connections that announce a
// request body and never send it, 64 (the connection limit) and 1,000,
// without credentials where the server requires them and where it does not,
// do not stop a scrape from being answered within a second (before, the
// server held each until its read timeout, 10 s, and refused new ones).
func TestBodyPendingConnectionsDoNotStarveScrapes(t *testing.T) {
	cfg, _ := authConfig(t, "prometheus", "s3cret")
	for _, tc := range []struct {
		name   string
		opts   Options
		header http.Header
	}{
		{"no auth", Options{}, nil},
		{"basic auth", Options{ConfigFile: cfg}, basicAuth("prometheus", "s3cret")},
	} {
		for _, n := range []int{DefaultMaxConnections, 1000} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, n), func(t *testing.T) {
				addr, srv := serveReady(t, tc.opts)
				for i := range n {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						t.Fatalf("connection %d: %v", i, err)
					}
					t.Cleanup(func() { c.Close() })
					// Evicted already, the write may fail: the defence working.
					_, _ = c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: test\r\nContent-Length: 100000\r\n\r\n"))
				}
				waitRequestsRead(t, addr)
				client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
				req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header = tc.header
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("scrape after %d body-pending connections: %v", n, err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("scrape after %d body-pending connections: status %d", n, resp.StatusCode)
				}
				if held := srv.limit.open(); held > DefaultMaxConnections {
					t.Errorf("server holds %d connections, limit %d", held, DefaultMaxConnections)
				}
			})
		}
	}
}

// TestRequestBodiesAreRefused: a request with a body gets 400 and its
// connection closed, whatever its method.
func TestRequestBodiesAreRefused(t *testing.T) {
	addr := serve(t, Options{})
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		resp, err := http.DefaultClient.Do(must(http.NewRequest(method, "http://"+addr+"/metrics", strings.NewReader("x"))))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !resp.Close {
			t.Errorf("%s with a body: status %d, close %v; want 400, closed", method, resp.StatusCode, resp.Close)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// waitRequestsRead waits until the server at addr has read every byte sent
// to it, as /proc/net/tcp shows its sockets' receive queues: the requests
// have all reached the server before the scrape is measured.
func waitRequestsRead(t *testing.T, addr string) {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	local := fmt.Sprintf(":%04X ", p)
	for deadline := time.Now().Add(10 * time.Second); ; {
		b, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			t.Fatal(err)
		}
		unread := 0
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			if len(f) > 4 && strings.HasSuffix(f[1]+" ", local) {
				rx, _ := strconv.ParseUint(f[4][strings.IndexByte(f[4], ':')+1:], 16, 64)
				unread += int(rx)
			}
		}
		if unread == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server left %d bytes unread for 10 s", unread)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
