// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"testing"
	"time"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/kube"
)

// A pod's connections carry its namespace, pod and container on the
// aggregate, TCP and per-connection series; two containers of one pod that
// share a process name stay apart.
func TestPodLabels(t *testing.T) {
	c := NewConnections(1)
	e := connExporter(c)
	nginx, sidecar := tcp(1000, conn.New, 100, 0), tcp(1001, conn.New, 7, 0)
	nginx.Cgroup, sidecar.Cgroup = "/kubepods/pod1/a", "/kubepods/pod1/b"
	nginx.Names = kube.Names{Namespace: "shop", Pod: "web-0", Container: "nginx"}
	sidecar.Names = kube.Names{Namespace: "shop", Pod: "web-0", Container: "proxy"}
	nginx.Retrans = 3
	c.Add(snap(0, nginx, sidecar))
	c.Add(snap(time.Second))
	compare(t, e, `
# HELP stacktop_received_bytes_total Bytes received by sockets, per process name, cgroup and protocol.
# TYPE stacktop_received_bytes_total counter
stacktop_received_bytes_total{cgroup="/kubepods/pod1/a",comm="curl",container="nginx",namespace="shop",pod="web-0",proto="tcp"} 100
stacktop_received_bytes_total{cgroup="/kubepods/pod1/b",comm="curl",container="proxy",namespace="shop",pod="web-0",proto="tcp"} 7
# HELP stacktop_tcp_retransmits_total TCP segments retransmitted.
# TYPE stacktop_tcp_retransmits_total counter
stacktop_tcp_retransmits_total{cgroup="/kubepods/pod1/a",comm="curl",container="nginx",namespace="shop",pod="web-0"} 3
stacktop_tcp_retransmits_total{cgroup="/kubepods/pod1/b",comm="curl",container="proxy",namespace="shop",pod="web-0"} 0
`, "stacktop_received_bytes_total", "stacktop_tcp_retransmits_total")
	c.Add(snap(2*time.Second, nginx))
	compare(t, e, `
# HELP stacktop_connection_received_bytes_total Bytes received on one connection (only with --connections.per-connection-series).
# TYPE stacktop_connection_received_bytes_total counter
stacktop_connection_received_bytes_total{cgroup="/kubepods/pod1/a",comm="curl",container="nginx",local_addr="198.18.100.1",local_port="1000",namespace="shop",pid="42",pod="web-0",proto="tcp",remote_addr="198.18.100.2",remote_port="80"} 100
`, "stacktop_connection_received_bytes_total")
}
