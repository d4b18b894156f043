// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkNames is the cost the tracker adds to every record of every
// refresh: a cgroup answered before, outside pods and in one.
//
//	go test -run '^$' -bench Names -benchmem ./internal/kube
func BenchmarkNames(b *testing.B) {
	k := fakeKubelet{b, b.TempDir()}
	k.addContainer("shop", "web-7c5f9d8b4-x2x9q", webUID, "nginx", webID)
	r := NewResolver(k.dir)
	for name, cg := range map[string]string{
		"outside": "/system.slice/nginx.service",
		"pod":     podSlice(webUID) + "/cri-containerd-" + webID + ".scope",
	} {
		b.Run(name, func(b *testing.B) {
			r.Names(cg)
			b.ReportAllocs()
			for b.Loop() {
				r.Names(cg)
			}
		})
	}
}

// BenchmarkRescanUnlistedPod is what a pod cgroup the log directory does
// not list costs at each rescan (every rescanEvery while it stays): with
// neither directory changed, two stat(2) calls whatever their size.
//
//	go test -run '^$' -bench RescanUnlistedPod -benchmem ./internal/kube
func BenchmarkRescanUnlistedPod(b *testing.B) {
	k := fakeKubelet{b, b.TempDir()}
	for i := range 2000 {
		k.addContainer("shop", fmt.Sprintf("web-%d", i), fmt.Sprintf("%08d-fdcc-454b-97bd-aadfdeb4c340", i), "nginx",
			fmt.Sprintf("%064d", i))
	}
	past := time.Now().Add(-time.Hour)
	for _, d := range []string{"pods", "containers"} {
		if err := os.Chtimes(filepath.Join(k.dir, d), past, past); err != nil {
			b.Fatal(err)
		}
	}
	r := NewResolver(k.dir)
	r.rescanEvery = 0
	unlisted := podSlice("1e597579-417e-482f-bf65-5fe170c3aebd")
	r.Names(unlisted)
	b.ReportAllocs()
	for b.Loop() {
		r.Names(unlisted)
	}
}
