// SPDX-License-Identifier: Apache-2.0

// Package promweb serves a Prometheus registry over HTTP or HTTPS through
// prometheus/exporter-toolkit, so TLS and basic auth are configured the same
// way as for every other Prometheus exporter (--web.config.file).
package promweb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/spf13/pflag"

	"github.com/stacktop/stacktop/internal/clierr"
)

// DefaultAddress is where stacktop serve listens unless told otherwise:
// loopback only, so nothing is exposed until an operator opts in.
const DefaultAddress = "127.0.0.1:9877"

// Options are the --web.* flags, named as in every Prometheus exporter.
type Options struct {
	ListenAddresses []string
	TelemetryPath   string
	ConfigFile      string
	SystemdSocket   bool
	MaxConnections  int
	// DisableExporterMetrics leaves out the metrics about the exporter
	// process itself (go_*, process_*, promhttp_*), as node_exporter's flag.
	DisableExporterMetrics bool
}

// DefaultMaxConnections is how many HTTP connections serve holds at most: a
// few Prometheus servers and curls need a handful; the file limit is far.
const DefaultMaxConnections = 64

// Register adds the flags to fs.
func (o *Options) Register(fs *pflag.FlagSet) {
	fs.StringArrayVar(&o.ListenAddresses, "web.listen-address", []string{DefaultAddress},
		"address to listen on, host:port (repeat for several; use :9877 or 0.0.0.0:9877 to serve every interface)")
	fs.StringVar(&o.TelemetryPath, "web.telemetry-path", "/metrics", "path under which metrics are served")
	fs.StringVar(&o.ConfigFile, "web.config.file", "",
		"exporter-toolkit web configuration file enabling TLS and/or basic auth (see docs/METRICS.md)")
	fs.BoolVar(&o.SystemdSocket, "web.systemd-socket", false,
		"use the sockets systemd passes (socket activation) instead of --web.listen-address")
	fs.IntVar(&o.MaxConnections, "web.max-connections", DefaultMaxConnections,
		"HTTP connections held at most; at the limit a new one closes the longest-idle one")
	fs.BoolVar(&o.DisableExporterMetrics, "web.disable-exporter-metrics", false,
		"leave out the metrics about the exporter process itself (go_*, process_*, promhttp_*)")
}

// hostname matches a syntactically valid DNS name; anything else that is not
// an IP address cannot be listened on.
var hostname = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$`)

// Validate checks every flag without side effects; errors name the flag and
// its value (exit 2).
func (o *Options) Validate() error {
	for _, a := range o.ListenAddresses {
		if err := validateAddress(a); err != nil {
			return clierr.Usage("web.listen-address", a, "%v", err)
		}
	}
	if err := validatePath(o.TelemetryPath); err != nil {
		return clierr.Usage("web.telemetry-path", o.TelemetryPath, "%v", err)
	}
	if o.MaxConnections < 1 || o.MaxConnections > 1<<16 {
		return clierr.Usage("web.max-connections", strconv.Itoa(o.MaxConnections), "must be between 1 and 65536")
	}
	if err := web.Validate(o.ConfigFile); err != nil {
		return clierr.Usage("web.config.file", o.ConfigFile, "%v", err)
	}
	return nil
}

// plainPath is an absolute path of non-empty segments of letters, digits and
// "-._~": nothing that http.ServeMux would read as a pattern (wildcards
// "{x}", a method, a host, a subtree's trailing "/") or change (".", "..",
// "//"), nor a query or fragment, which a scrape's path never holds.
var plainPath = regexp.MustCompile(`^(/[A-Za-z0-9._~-]+)+$`)

func validatePath(p string) error {
	switch {
	case !plainPath.MatchString(p):
		return errors.New(`must be a plain absolute path such as /metrics: segments of letters, digits and "-._~", no query, no trailing /`)
	case slices.ContainsFunc(strings.Split(p, "/"), func(s string) bool { return s == "." || s == ".." }):
		return errors.New(`must not hold "." or ".." segments`)
	case p == "/-" || strings.HasPrefix(p, "/-/"):
		return errors.New("is where /-/healthy and /-/ready are served")
	}
	return nil
}

func validateAddress(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return errors.New("want host:port, e.g. 127.0.0.1:9877, [::1]:9877 or :9877")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (port != "0" && n == 0) {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	if host != "" && net.ParseIP(host) == nil && !hostname.MatchString(host) {
		return fmt.Errorf("host %q is neither an IP address nor a host name", host)
	}
	return nil
}

// Listen opens every listen address, before any BPF program is loaded, so a
// port already in use is reported at once. Failures exit 1: the input is
// valid, the machine is not ready for it.
func (o *Options) Listen() ([]net.Listener, error) {
	if o.SystemdSocket {
		ls, err := activation.Listeners()
		if err != nil {
			return nil, fmt.Errorf("--web.systemd-socket: %w", err)
		}
		if len(ls) == 0 {
			return nil, errors.New("--web.systemd-socket: systemd passed no socket (is a stacktop.socket unit active?)")
		}
		return ls, nil
	}
	var ls []net.Listener
	for _, a := range o.ListenAddresses {
		l, err := net.Listen("tcp", a)
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, fmt.Errorf("cannot listen on %s: the port is already in use (another stacktop serve?); pick another with --web.listen-address", a)
			}
			return nil, fmt.Errorf("cannot listen on %s: %w", a, err)
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// Timeouts of the HTTP server. A scrape is one small GET: its headers and
// body arrive at once, so a client that takes longer is stuck or hostile.
// Keep-alive connections stay open for two of Prometheus's default one-minute
// scrape intervals; the connection limit, not this, protects against many.
const (
	readTimeout  = 10 * time.Second
	writeTimeout = time.Minute // encoding a large scrape to a slow reader
	idleTimeout  = 2 * time.Minute
)

// Server serves one registry, with the landing page and the health
// endpoints of every Prometheus exporter.
type Server struct {
	opts  *Options
	reg   *prometheus.Registry
	ready atomic.Bool
	limit *connLimit
	srv   *http.Server
}

// NewServer prepares a server for reg; version is shown on the landing page.
// /-/ready answers 503 until SetReady is called.
func (o *Options) NewServer(reg *prometheus.Registry, version string) (*Server, error) {
	s := &Server{opts: o, reg: reg, limit: newConnLimit(o.MaxConnections)}
	if err := reg.Register(s.limit.closed); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(o.TelemetryPath, o.metricsHandler(reg))
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "Healthy")
	})
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "Not ready: the BPF programs are not attached yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "Ready")
	})
	landing, err := web.NewLandingPage(web.LandingConfig{
		Name:        "stacktop",
		Description: "eBPF network stack latency and per-process connection metrics",
		Version:     version,
		Profiling:   "false", // no pprof handler is served
		Links: []web.LandingLinks{
			{Address: o.TelemetryPath, Text: "Metrics"},
			{Address: "/-/healthy", Text: "Health"},
			{Address: "/-/ready", Text: "Readiness"},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("landing page: %w", err)
	}
	mux.Handle("/", landing)
	var handler http.Handler = mux
	if o.ConfigFile != "" {
		if n, err := basicAuthUsers(o.ConfigFile); err != nil {
			return nil, clierr.Usage("web.config.file", o.ConfigFile, "%v", err)
		} else if n > 0 {
			handler = requireAuth(o.ConfigFile, mux)
		}
	}
	// exporter-toolkit authenticates in front of handler, before any body
	// could be read.
	s.srv = &http.Server{
		Handler:           s.limit.serving(refuseBodies(handler)),
		ConnContext:       withConn,
		ReadHeaderTimeout: readTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ConnState:         s.limit.track,
	}
	return s, nil
}

// metricsHandler serves reg and, unless they are disabled, the metrics
// about the exporter process itself.
func (o *Options) metricsHandler(reg *prometheus.Registry) http.Handler {
	opts := promhttp.HandlerOpts{
		EnableOpenMetrics: true,
		// A source that fails is reported in stacktop_scrape_error; the
		// rest of the scrape is still worth serving.
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      slog.NewLogLogger(slog.Default().Handler(), slog.LevelError),
		// No MaxRequestsInFlight: concurrent scrapes wait for each other
		// (the exporter reads the kernel maps for one at a time) instead of
		// getting 503; the connection limit bounds how many can wait.
	}
	if o.DisableExporterMetrics {
		return promhttp.HandlerFor(reg, opts)
	}
	own := prometheus.NewRegistry()
	own.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.InstrumentMetricHandler(own, promhttp.HandlerFor(prometheus.Gatherers{reg, withoutAllocTotal(own)}, opts))
}

// withoutAllocTotal leaves go_memstats_alloc_bytes_total out of g: in
// OpenMetrics a counter's family drops "_total", so it would be a second
// family named go_memstats_alloc_bytes beside the gauge of that name
// (prometheus/client_golang#829), which OpenMetrics parsers reject.
func withoutAllocTotal(g prometheus.Gatherer) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		return slices.DeleteFunc(mfs, func(mf *dto.MetricFamily) bool {
			return mf.GetName() == "go_memstats_alloc_bytes_total"
		}), err
	})
}

// refuseBodies answers a request that carries a body with 400 and closes
// its connection. No endpoint takes one, and after the reply the server
// would read the body to reuse the connection: a client that announces one
// and never sends it would hold the connection until readTimeout.
func refuseBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 { // -1: chunked, length unknown
			w.Header().Set("Connection", "close")
			http.Error(w, "request bodies are not accepted", http.StatusBadRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// SetReady makes /-/ready answer 200: the BPF programs are attached.
func (s *Server) SetReady() { s.ready.Store(true) }

// Serve answers on ls until ctx ends, then shuts down gracefully. The
// registry is served at the telemetry path in the Prometheus text format or,
// when the scraper asks for it, OpenMetrics; "/" links to it.
func (s *Server) Serve(ctx context.Context, ls []net.Listener) error {
	limited := make([]net.Listener, len(ls))
	for i, l := range ls {
		limited[i] = s.limit.listener(l)
	}
	flags := &web.FlagConfig{
		WebListenAddresses: &s.opts.ListenAddresses,
		WebSystemdSocket:   &s.opts.SystemdSocket,
		WebConfigFile:      &s.opts.ConfigFile,
	}
	done := make(chan error, 1)
	go func() { done <- web.ServeMultiple(limited, s.srv, flags, slog.Default()) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve metrics: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down metrics server: %w", err)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve metrics: %w", err)
	}
	return nil
}
