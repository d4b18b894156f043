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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
}

// Register adds the flags to fs.
func (o *Options) Register(fs *pflag.FlagSet) {
	fs.StringArrayVar(&o.ListenAddresses, "web.listen-address", []string{DefaultAddress},
		"address to listen on, host:port (repeat for several; use :9877 or 0.0.0.0:9877 to serve every interface)")
	fs.StringVar(&o.TelemetryPath, "web.telemetry-path", "/metrics", "path under which metrics are served")
	fs.StringVar(&o.ConfigFile, "web.config.file", "",
		"exporter-toolkit web configuration file enabling TLS and/or basic auth (see docs/METRICS.md)")
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
	if !strings.HasPrefix(o.TelemetryPath, "/") {
		return clierr.Usage("web.telemetry-path", o.TelemetryPath, "must start with /")
	}
	if err := web.Validate(o.ConfigFile); err != nil {
		return clierr.Usage("web.config.file", o.ConfigFile, "%v", err)
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

// Serve answers on ls until ctx ends, then shuts down gracefully. reg is
// served at the telemetry path in the Prometheus text format or, when the
// scraper asks for it, OpenMetrics; "/" links to it.
func (o *Options) Serve(ctx context.Context, ls []net.Listener, reg *prometheus.Registry, version string) error {
	mux := http.NewServeMux()
	mux.Handle(o.TelemetryPath, promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		EnableOpenMetrics: true,
		// A source that fails is reported in stacktop_scrape_error; the
		// rest of the scrape is still worth serving.
		ErrorHandling:       promhttp.ContinueOnError,
		ErrorLog:            slog.NewLogLogger(slog.Default().Handler(), slog.LevelError),
		MaxRequestsInFlight: 8,
	})))
	if o.TelemetryPath != "/" {
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        "stacktop",
			Description: "eBPF network stack latency and per-process connection metrics",
			Version:     version,
			Links:       []web.LandingLinks{{Address: o.TelemetryPath, Text: "Metrics"}},
		})
		if err != nil {
			return fmt.Errorf("landing page: %w", err)
		}
		mux.Handle("/", landing)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	flags := &web.FlagConfig{
		WebListenAddresses: &o.ListenAddresses,
		WebSystemdSocket:   new(bool),
		WebConfigFile:      &o.ConfigFile,
	}
	done := make(chan error, 1)
	go func() { done <- web.ServeMultiple(ls, srv, flags, slog.Default()) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve metrics: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down metrics server: %w", err)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve metrics: %w", err)
	}
	return nil
}
