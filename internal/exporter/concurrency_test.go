// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stacktop/stacktop/internal/conn"
	"github.com/stacktop/stacktop/internal/hist"
)

// Scrapes from several Prometheus servers at once, while snapshots keep
// arriving, each get a complete and consistent set of metrics (run with
// -race to check the locking).
func TestConcurrentScrapes(t *testing.T) {
	c := NewConnections(5)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(New(Config{
		Latency:     &fakeLatency{series: []hist.Series{series("udp-socket-read", "", "", map[int]uint64{9: 1}, 300)}},
		Connections: c,
	}))
	c.Add(snap(0, tcp(1000, conn.New, 0, 0)))
	first, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := uint64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			c.Add(snap(time.Duration(i)*time.Second, tcp(1000, conn.Update, i, i), tcp(uint16(i), conn.Closed, 1, 1)))
		}
	})
	for range 4 {
		wg.Go(func() {
			for range 50 {
				mfs, err := reg.Gather()
				if err != nil {
					t.Error(err)
					return
				}
				if len(mfs) != len(first) {
					t.Errorf("scrape with %d metric families, the first had %d", len(mfs), len(first))
					return
				}
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
}
