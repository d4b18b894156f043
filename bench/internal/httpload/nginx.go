// SPDX-License-Identifier: Apache-2.0

// Package httpload runs the overhead workload: one nginx worker serving a
// tiny fixed response from its own prefix and configuration, and wrk
// measuring requests per second and latency percentiles against it.
package httpload

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"text/template"
	"time"
)

// Nginx is a running nginx master with one worker.
type Nginx struct {
	cmd *exec.Cmd
	dir string
}

var nginxConf = template.Must(template.New("nginx.conf").Parse(`# written by the stacktop benchmark; one worker, tiny response, no logging
daemon off;
master_process on;
worker_processes 1;
{{if .CPU}}worker_cpu_affinity {{.CPU}};
{{end}}worker_rlimit_nofile 4096;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;
events { worker_connections 4000; }
http {
	access_log off;
	keepalive_timeout 300s;
	keepalive_requests 100000000;
	client_body_temp_path {{.Dir}}/tmp;
	proxy_temp_path {{.Dir}}/tmp;
	fastcgi_temp_path {{.Dir}}/tmp;
	uwsgi_temp_path {{.Dir}}/tmp;
	scgi_temp_path {{.Dir}}/tmp;
	server {
{{range .Listen}}		listen {{.}} backlog=4096;
{{end}}		location / { default_type text/plain; return 200 "ok\n"; }
	}
}
`))

// StartNginx writes a configuration under dir and starts nginx listening
// on every address in listen. cpu, when not negative, pins the worker to
// that CPU so that run-to-run variance does not come from migrations.
func StartNginx(dir string, listen []netip.AddrPort, cpu int) (*Nginx, error) {
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return nil, err
	}
	data := struct {
		Dir, CPU string
		Listen   []netip.AddrPort
	}{Dir: dir, Listen: listen}
	if cpu >= 0 {
		data.CPU = cpuMask(cpu)
	}
	var conf bytes.Buffer
	if err := nginxConf.Execute(&conf, data); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, conf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	// -e: without it nginx opens its compiled-in error log before reading
	// the configuration.
	cmd := exec.Command("nginx", "-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting nginx: %w", err)
	}
	n := &Nginx{cmd: cmd, dir: dir}
	for _, a := range listen {
		if err := waitListening(a, 10*time.Second); err != nil {
			n.Stop()
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			return nil, fmt.Errorf("nginx not listening on %s: %w\n%s", a, err, log)
		}
	}
	return n, nil
}

// cpuMask renders nginx's worker_cpu_affinity bit mask for one CPU.
func cpuMask(cpu int) string {
	b := make([]byte, cpu+1)
	for i := range b {
		b[i] = '0'
	}
	b[0] = '1'
	return string(b)
}

func waitListening(a netip.AddrPort, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", a.String())
		if err == nil {
			return c.Close()
		}
		if ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts nginx down and waits for it.
func (n *Nginx) Stop() {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	_ = n.cmd.Wait()
}
