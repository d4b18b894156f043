// SPDX-License-Identifier: Apache-2.0

package kube

import "testing"

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
