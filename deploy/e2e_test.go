// SPDX-License-Identifier: Apache-2.0

package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/sys/unix"

	"github.com/stacktop/stacktop/internal/features"
	"github.com/stacktop/stacktop/internal/testenv"
)

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
	dir                 string // web.yml, prometheus.yml and the storage
}

func startStack(t *testing.T, serveArgs ...string) *stack {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "prometheus") // before anything starts
	s := &stack{serveAddr: testenv.FreeLoopbackAddr(t), user: "prometheus", password: "e2e-secret"}
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
	testenv.Eventually(t, 30*time.Second, "stacktop serve answering", func() error {
		_, err := s.scrape(false)
		return err
	})
	s.dir = dir
	s.promAddr = s.startPrometheus(t)
	return s
}

// startPrometheus starts another Debian Prometheus scraping the stack's
// serve, with extra flags, and returns its address once it scrapes.
func (s *stack) startPrometheus(t *testing.T, flags ...string) string {
	t.Helper()
	addr := testenv.FreeLoopbackAddr(t)
	data := filepath.Join(s.dir, "data-"+strings.ReplaceAll(addr, ":", "-"))
	start(t, exec.Command(testenv.RequireTool(t, "prometheus"), append([]string{
		"--config.file", filepath.Join(s.dir, "prometheus.yml"),
		"--storage.tsdb.path", data, "--web.listen-address", addr, "--log.level", "warn"}, flags...)...))
	testenv.Eventually(t, 30*time.Second, "Prometheus scraping stacktop", func() error {
		up, err := query(addr, `up{job="stacktop"}`)
		if err != nil {
			return err
		}
		if len(up) != 1 || up[0].Value != 1 {
			return fmt.Errorf("up = %v", up)
		}
		return nil
	})
	return addr
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

// trafficComm names the thread that makes the test's traffic, so its bytes
// are told apart from everything else on the host (15 characters, the
// kernel's limit).
const trafficComm = "sts-e2e-traffic"

// value returns the single value expr evaluates to, or 0 when it is empty.
func value(t *testing.T, promAddr, expr string) float64 {
	t.Helper()
	res, err := query(promAddr, expr)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) == 0 {
		return 0
	}
	return res[0].Value
}

// TestPrometheusEndToEnd runs stacktop serve and Debian's Prometheus and
// checks, through Prometheus's HTTP API, what a user of the dashboard sees.
func TestPrometheusEndToEnd(t *testing.T) {
	// -p: socket reads and connections of this test process only, so what
	// Prometheus shows is the test's traffic, not the host's; both
	// socket-read probes (serve's default has only the TCP one).
	s := startStack(t, "--bpf.stats", "-p", strconv.Itoa(os.Getpid()), "--latency.probes", "tcp-socket-read,udp-socket-read")
	peer := testenv.NewPeer(t, "sts-e2e", 100)

	// Traffic in rounds until Prometheus has seen it: the first scrapes
	// after start-up only set the baseline rate() needs. Each round is
	// tcpMessages messages of 100 bytes from the peer, each answered with one
	// byte, and udpDatagrams datagrams from the peer.
	const tcpMessages, udpDatagrams = 200, 20
	var rounds int
	p99 := `histogram_quantile(0.99, sum by (le, hook) (rate(netstack_latency_seconds_bucket[1m])))`
	testenv.Eventually(t, 40*time.Second, "finite p99 for both socket-read hooks", func() error {
		if err := testenv.OnNamedThread(trafficComm, func() error {
			peer.TCPToHost(t, testenv.V4, tcpMessages, 0)
			peer.UDPToHost(t, testenv.V4, udpDatagrams, 0)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		rounds++
		res, err := query(s.promAddr, p99)
		if err != nil {
			return err
		}
		finite := map[string]float64{}
		for _, r := range res {
			if !math.IsNaN(r.Value) && !math.IsInf(r.Value, 0) {
				finite[r.Metric["hook"]] = r.Value
			}
		}
		if _, ok := finite["tcp-socket-read"]; !ok {
			return fmt.Errorf("p99 per hook: %v", res)
		}
		if _, ok := finite["udp-socket-read"]; !ok {
			return fmt.Errorf("p99 per hook: %v", res)
		}
		t.Logf("p99 after %d traffic rounds: tcp-socket-read %gs, udp-socket-read %gs",
			rounds, finite["tcp-socket-read"], finite["udp-socket-read"])
		return nil
	})

	// Every round's connections closed before Prometheus could scrape them
	// open: their bytes must still be in the thread's counters. Both ends
	// are the test's thread, but only the connecting end has its name: the
	// host's end is an accepted socket, owned by the process and named by
	// its main thread (docs/CONNECTIONS.md). The connecting end sends 100
	// bytes per message and receives 1.
	t.Run("bytes of the traffic's process", func(t *testing.T) {
		for _, c := range []struct {
			metric, proto string
			want          float64
		}{
			{"stacktop_received_bytes_total", "tcp", float64(rounds * tcpMessages * 1)},
			{"stacktop_sent_bytes_total", "tcp", float64(rounds * tcpMessages * 100)},
			{"stacktop_received_packets_total", "udp", float64(rounds * udpDatagrams)},
		} {
			expr := fmt.Sprintf(`sum(%s{comm=%q, proto=%q})`, c.metric, trafficComm, c.proto)
			var got float64
			testenv.Eventually(t, 10*time.Second, expr, func() error {
				if got = value(t, s.promAddr, expr); got < c.want {
					return fmt.Errorf("%g, want at least %g", got, c.want)
				}
				return nil
			})
			// Only the test's thread has this name: nothing else may count.
			if got != c.want {
				t.Errorf("%s = %g, want exactly the %g the test moved", expr, got, c.want)
			}
		}
	})

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
	// stacktop data (Grafana's variables replaced by catch-all values), and
	// shows something.
	t.Run("dashboard queries", func(t *testing.T) {
		for where, expr := range dashboardQueries(t) {
			if strings.HasPrefix(where, "variable ") {
				expr = "count(" + expr + ")"
			}
			res, err := query(s.promAddr, expr)
			if err != nil {
				t.Errorf("%s: %v", where, errors.Unwrap(err))
			} else if len(res) == 0 {
				t.Errorf("%s: no data for %s", where, expr)
			}
		}
	})
}

// TestSystemdUnitCapabilitiesSuffice runs stacktop serve as the systemd unit
// does: as an unprivileged user holding only the unit's ambient
// capabilities. Every probe and the connection tracking must come up.
func TestSystemdUnitCapabilitiesSuffice(t *testing.T) {
	addr := testenv.FreeLoopbackAddr(t)
	cmd := exec.Command(testenv.Binary(t), "serve", "--web.listen-address", addr, "--interval", "1s")
	asUnit(t, cmd)
	start(t, cmd)
	testenv.Eventually(t, 30*time.Second, "the unprivileged exporter ready (programs attached)", func() error {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	})
	var body string
	testenv.Eventually(t, 30*time.Second, "metrics from the unprivileged exporter", func() error {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err
	})
	// Which backend a hook gets is the kernel's call (tracepoint on the CI
	// host, which refuses fentry; fentry on the matrix's 6.12): what the
	// unit must allow is that each hook attaches with one of them.
	for _, want := range []string{
		`(?m)^stacktop_probe_backend_info\{backend="[a-z]+",hook="tcp-socket-read"\} 1$`,
		`(?m)^stacktop_probe_backend_info\{backend="[a-z]+",hook="tcp-state"\} 1$`,
		// The refresh test-runs its program at attach: the unit's
		// capabilities allow that (on 5.10 the iterator attaches).
		`(?m)^stacktop_probe_backend_info\{backend="(run|iterator)",hook="tcp-counters"\} 1$`,
		`(?m)^stacktop_scrape_error\{source="latency"\} 0$`,
		`(?m)^stacktop_scrape_error\{source="connections"\} 0$`,
		`(?m)^stacktop_scrape_error\{source="bpf_programs"\} 0$`,
	} {
		if !regexp.MustCompile(want).MatchString(body) {
			t.Errorf("metrics lack a line matching %s", want)
		}
	}
}

// TestSystemdUnitCapabilitiesKnowPreexistingOwners: with only the unit's
// capabilities, as another user, stacktop may not read a root process's
// /proc/PID/fd. The owners of a TCP listener and a UDP socket that process
// opened before start-up still come from the kernel: pid, process name and
// cgroup.
func TestSystemdUnitCapabilitiesKnowPreexistingOwners(t *testing.T) {
	release := features.KernelRelease()
	if kernelBefore(release, 5, 11) {
		testenv.Unsupported(t, "%s: owners of sockets open at start-up come from the task_file iterator (5.11+), or from /proc as root", release)
	}
	// On 6.1 the kernel matrix finds the UDP socket's owner but not the
	// TCP listener's (6.12 and later find both; 6.2–6.11 are not in the
	// matrix): a known gap, in docs/CONNECTIONS.md, not asserted there.
	tcpOwnerKnown := !kernelBefore(release, 6, 12)
	// A plain TCP listener: Go makes listeners MPTCP where the kernel has
	// it, and an MPTCP listener's owner is found on 6.12 and later only
	// (docs/CONNECTIONS.md).
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	server, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	tcpPort, udpPort := l.Addr().(*net.TCPAddr).Port, server.LocalAddr().(*net.UDPAddr).Port
	cmd := exec.Command(testenv.Binary(t), "stream", "--format", "json", "--count", "2",
		"--interval", "500ms", "--port", fmt.Sprintf("%d,%d", tcpPort, udpPort))
	asUnit(t, cmd)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	// A UDP flow shows once datagrams cross it: send until stacktop is done.
	done := make(chan struct{})
	defer close(done)
	go func() {
		c, err := net.DialUDP("udp", nil, server.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
				_, _ = c.Write([]byte("ping"))
			}
		}
	}()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, stderr.String())
	}
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	cgroup := regexp.MustCompile(`(?m)^0::(.*)$`).FindSubmatch(self)
	if cgroup == nil {
		t.Fatalf("no cgroup v2 path in /proc/self/cgroup:\n%s", self)
	}
	want := fmt.Sprintf("pid %d, comm %q, cgroup %q", os.Getpid(), strings.TrimSpace(string(comm)), cgroup[1])
	seen := map[string]int{}
	for line := range strings.Lines(string(out)) {
		var r struct {
			Proto     string `json:"proto"`
			LocalPort int    `json:"local_port"`
			State     string `json:"state"`
			PID       int    `json:"pid"`
			Comm      string `json:"comm"`
			Cgroup    string `json:"cgroup"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		var what string
		switch {
		case r.Proto == "tcp" && r.LocalPort == tcpPort && r.State == "LISTEN":
			what = "the TCP listener"
		case r.Proto == "udp" && r.LocalPort == udpPort:
			what = "the UDP socket"
		default:
			continue
		}
		seen[what]++
		got := fmt.Sprintf("pid %d, comm %q, cgroup %q", r.PID, r.Comm, r.Cgroup)
		switch {
		case got == want:
		case what == "the TCP listener" && !tcpOwnerKnown:
			t.Logf("%s: %s's owner: %s (a known gap before 6.12)", release, what, got)
		default:
			t.Errorf("%s's owner: %s; want %s", what, got, want)
		}
	}
	if seen["the TCP listener"] == 0 || seen["the UDP socket"] == 0 {
		t.Errorf("records of the sockets: %v, want both:\n%s", seen, out)
	}
}

// kernelBefore tells whether a kernel release (6.1.0-50-cloud-amd64) is
// older than major.minor.
func kernelBefore(release string, major, minor int) bool {
	var maj, min int
	if _, err := fmt.Sscanf(release, "%d.%d", &maj, &min); err != nil {
		return false
	}
	return maj < major || maj == major && min < minor
}

// asUnit makes cmd run as the systemd unit runs stacktop: as an
// unprivileged user (nobody) holding only the unit's ambient capabilities.
func asUnit(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	testenv.RequireRoot(t)
	unit, err := os.ReadFile("systemd/stacktop.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^AmbientCapabilities=(.+)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("unit sets no AmbientCapabilities")
	}
	capNumbers := map[string]uintptr{"CAP_BPF": unix.CAP_BPF, "CAP_PERFMON": unix.CAP_PERFMON,
		"CAP_NET_ADMIN": unix.CAP_NET_ADMIN, "CAP_SYS_RESOURCE": unix.CAP_SYS_RESOURCE}
	permitted, err := permittedCaps()
	if err != nil {
		t.Fatal(err)
	}
	var caps []uintptr
	for _, name := range strings.Fields(string(m[1])) {
		n, ok := capNumbers[name]
		switch {
		case !ok:
			t.Fatalf("capability %s of the unit is unknown to this test", name)
		case permitted&(1<<n) == 0:
			// A container may withhold one (this CI sandbox lacks
			// CAP_SYS_RESOURCE); running with fewer still proves enough.
			t.Logf("%s is not ours to grant; running without it", name)
		default:
			caps = append(caps, n)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: 65534, Gid: 65534},
		AmbientCaps: caps,
	}
}

// permittedCaps returns this process's permitted capability set.
func permittedCaps() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^CapPrm:\s*([0-9a-f]+)$`).FindSubmatch(b)
	if m == nil {
		return 0, errors.New("no CapPrm in /proc/self/status")
	}
	return strconv.ParseUint(string(m[1]), 16, 64)
}

// nativeScale is how native bucket bounds relate to stacktop's: 2^-30 s per
// nanosecond bucket bound of 10^-9 s (docs/METRICS.md, Native histograms).
const nativeScale = 0x1p-30 / 1e-9

// With native histograms on, Debian's Prometheus negotiates protobuf and
// ingests the native buckets; one without keeps the classic ones. Over the
// same data they agree: histogram_count and histogram_sum equal _count and
// _sum exactly, and histogram_quantile over the native buckets is the
// classic quantile times nativeScale.
func TestNativeHistogramsEndToEnd(t *testing.T) {
	// udp-socket-read is not in serve's default probe set.
	s := startStack(t, "-p", strconv.Itoa(os.Getpid()), "--no-collector.connections", "--latency.probes", "udp-socket-read,tcp-socket-read")
	native := s.startPrometheus(t, "--enable-feature=native-histograms")
	peer := testenv.NewPeer(t, "sts-native", 101)
	peer.UDPToHost(t, testenv.V4, 300, 0)
	// No more UDP of ours (the test's HTTP queries are TCP reads of this
	// process, so tcp-socket-read keeps moving): the udp-socket-read counts
	// serve has now are final, and both Prometheus servers have them after
	// their next scrape.
	const hook = "udp-socket-read"
	sel := fmt.Sprintf(`{hook=%q}`, hook)
	final := s.metric(t, "netstack_latency_seconds_count"+sel)
	if final == 0 {
		t.Fatalf("%s recorded nothing", hook)
	}
	testenv.Eventually(t, 20*time.Second, hook+" count in both Prometheus servers", func() error {
		classic := value(t, s.promAddr, "netstack_latency_seconds_count"+sel)
		nat := value(t, native, "histogram_count(netstack_latency_seconds"+sel+")")
		if classic != final || nat != final {
			return fmt.Errorf("classic %g, native %g, serve %g", classic, nat, final)
		}
		return nil
	})
	classicSum := value(t, s.promAddr, "netstack_latency_seconds_sum"+sel)
	if nativeSum := value(t, native, "histogram_sum(netstack_latency_seconds"+sel+")"); nativeSum != classicSum {
		t.Errorf("%s: histogram_sum %g, _sum %g", hook, nativeSum, classicSum)
	}
	for _, q := range []float64{0.5, 0.9, 0.99} {
		classic := value(t, s.promAddr, fmt.Sprintf("histogram_quantile(%g, netstack_latency_seconds_bucket%s)", q, sel))
		nat := value(t, native, fmt.Sprintf("histogram_quantile(%g, netstack_latency_seconds%s)", q, sel))
		if ratio := nat / classic; math.Abs(ratio-nativeScale) > 1e-9 {
			t.Errorf("%s p%g: native %g, classic %g: ratio %.12f, want %.12f", hook, q*100, nat, classic, ratio, nativeScale)
		} else {
			t.Logf("%s p%g: native %.9gs, classic %.9gs (count %g)", hook, q*100, nat, classic, final)
		}
	}
	// The dashboard's latency panels read the classic series where
	// Prometheus keeps them and the native ones where it keeps only those
	// (2.42 with native histograms drops the classic series of a native
	// histogram): each must answer on both servers.
	for where, expr := range dashboardQueries(t) {
		if !strings.Contains(expr, "netstack_latency_seconds") || strings.Contains(expr, "_bucket") && !strings.Contains(expr, " or ") {
			continue // the heatmap reads classic buckets only (docs/METRICS.md)
		}
		for server, addr := range map[string]string{"classic": s.promAddr, "native": native} {
			testenv.Eventually(t, 10*time.Second, where+" on the "+server+" server", func() error {
				res, err := query(addr, "count("+expr+")") // a native result has no float value
				if err == nil && len(res) == 0 {
					err = errors.New("no result")
				}
				return err
			})
		}
	}
}

// metric returns the value of one series of serve's own exposition.
func (s *stack) metric(t *testing.T, series string) float64 {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+s.serveAddr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(s.user, s.password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}
