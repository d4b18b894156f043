// SPDX-License-Identifier: Apache-2.0

package kube

import "testing"

// TestParseCgroup parses cgroup paths quoted from real hosts, one per
// cgroup driver, runtime, QoS class and hierarchy, each with where it was
// seen.
func TestParseCgroup(t *testing.T) {
	const (
		dockerID = "abddff03dfd7710c79a750ce3e730365cbb2c8247a974170c1062683bc3e9152"
		crioID   = "1a94cf896e4483bf8ef2203f075982a0a06e8ad016a23cf8f30109aedd8cf6f1"
	)
	cases := []struct {
		name, path string
		want       Ref
	}{
		// cgroup v1 (systemd controller), systemd driver, containerd,
		// burstable: kubernetes/kubernetes#106514.
		{"v1 systemd containerd burstable",
			"/sys/fs/cgroup/systemd/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2fc932ce_fdcc_454b_97bd_aadfdeb4c340.slice/cri-containerd-aaefb9d8feed2d453b543f6d928cede7a4dbefa6a0ae7c9b990dd234c56e93b9.scope",
			Ref{"2fc932ce-fdcc-454b-97bd-aadfdeb4c340", "aaefb9d8feed2d453b543f6d928cede7a4dbefa6a0ae7c9b990dd234c56e93b9"}},
		// The same issue: containerd without systemd cgroups under a systemd
		// kubelet, a static pod (UID: the manifest's hex digest).
		{"containerd colon form, static pod",
			"/sys/fs/cgroup/systemd/system.slice/containerd.service/kubepods-burstable-pod36b6d6be73b1065af369b3985edafa09.slice:cri-containerd:79fedb3bd23ca77c9d9ccb41909038316f713df22b54b7d942b71d3812e7c74e",
			Ref{"36b6d6be73b1065af369b3985edafa09", "79fedb3bd23ca77c9d9ccb41909038316f713df22b54b7d942b71d3812e7c74e"}},
		// cgroup v2, kind (kubelet's cgroup root kubelet.slice), containerd,
		// best effort: containerd/nri#227.
		{"v2 kind containerd besteffort",
			"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod1e597579_417e_482f_bf65_5fe170c3aebd.slice/cri-containerd-a09bc17f5aa29b0dbdec9ede5f46cf1396d2405917ab02e6f1eb1019f388396e.scope",
			Ref{"1e597579-417e-482f-bf65-5fe170c3aebd", "a09bc17f5aa29b0dbdec9ede5f46cf1396d2405917ab02e6f1eb1019f388396e"}},
		// systemd-cgls of a static pod under containerd: netdata/netdata#4868.
		{"containerd static pod",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8daa50c3a64c9ff60bb9eab7b44b56fd.slice/cri-containerd-2884d57c0e100d7a9a2f9487ce0bc2986bca3430e988af7a4865aff061f51ac5.scope",
			Ref{"8daa50c3a64c9ff60bb9eab7b44b56fd", "2884d57c0e100d7a9a2f9487ce0bc2986bca3430e988af7a4865aff061f51ac5"}},
		// cgroup v1 (cpu,cpuacct), CRI-O on OpenShift, burstable:
		// openshift/origin#26452.
		{"v1 crio burstable",
			"/sys/fs/cgroup/cpu,cpuacct/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod53725012_487e_439c_b707_844b270cbab1.slice/crio-" + crioID + ".scope",
			Ref{"53725012-487e-439c-b707-844b270cbab1", crioID}},
		// CRI-O's conmon scope, beside the container's: the pod, no
		// container. opencontainers/runc#4620.
		{"crio conmon",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod207aaad1_659f_4db8_88e0_46e0cdcc3004.slice/crio-conmon-32da98c8522068be05a7510a3eddb09cad6ed2f03286180d0e931d0d0b6224a6.scope",
			Ref{"207aaad1-659f-4db8-88e0-46e0cdcc3004", ""}},
		// minikube's node in a Docker container, CRI-O, best effort, the
		// kube-proxy container: kubernetes/minikube#11280.
		{"crio nested in a docker node",
			"/docker/d6701ec289c56e4391acb11d07474b3139466857a305490575508a8b7a9fcf22/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod2ca4a155_3599_498d_bb9d_4446693fa3ea.slice/crio-358607a37e7ada357032e7f5729c9ae6a3efdb7962acbcbe47ff6a3c5506cb1c.scope",
			Ref{"2ca4a155-3599-498d-bb9d-4446693fa3ea", "358607a37e7ada357032e7f5729c9ae6a3efdb7962acbcbe47ff6a3c5506cb1c"}},
		// Docker (dockershim), systemd driver, best effort, kube-proxy:
		// kontena/pharos-cluster#440.
		{"docker systemd besteffort",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod9692aa0e_748e_11e8_8dfa_76d458035df6.slice/docker-" + dockerID + ".scope",
			Ref{"9692aa0e-748e-11e8-8dfa-76d458035df6", dockerID}},
		// Guaranteed QoS has no QoS level: kubepods-pod<uid>.slice directly
		// under kubepods.slice (the layout noted in CJLove/rt-operator
		// notes/cgroupv1_notes.md for Docker and CRI-O; the UID and ID are
		// those of the Docker case above).
		{"docker systemd guaranteed",
			"/kubepods.slice/kubepods-pod9692aa0e_748e_11e8_8dfa_76d458035df6.slice/docker-" + dockerID + ".scope",
			Ref{"9692aa0e-748e-11e8-8dfa-76d458035df6", dockerID}},
		// cgroupfs driver, cgroup v1, best effort: Qard/container-info
		// test/fixtures (a GKE node).
		{"v1 cgroupfs besteffort",
			"/kubepods/besteffort/pod74c13223-5a00-11e9-b385-42010a80018d/34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376",
			Ref{"74c13223-5a00-11e9-b385-42010a80018d", "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376"}},
		// cgroupfs, guaranteed (pod directly under kubepods): the k3s layout
		// of CJLove/rt-operator's notes, with the IDs of the case above.
		{"cgroupfs guaranteed",
			"/kubepods/pod74c13223-5a00-11e9-b385-42010a80018d/34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376",
			Ref{"74c13223-5a00-11e9-b385-42010a80018d", "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376"}},
		// CRI-O with the cgroupfs driver prefixes the ID with crio-.
		{"cgroupfs crio",
			"/kubepods/burstable/pod53725012-487e-439c-b707-844b270cbab1/crio-" + crioID,
			Ref{"53725012-487e-439c-b707-844b270cbab1", crioID}},
		// A cgroup that the container made below its own (systemd in a
		// container, or a nested runtime) is still that container's.
		{"nested below a container",
			"/kubepods/besteffort/pod74c13223-5a00-11e9-b385-42010a80018d/34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376/init.scope",
			Ref{"74c13223-5a00-11e9-b385-42010a80018d", "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376"}},
		// The pod's own cgroup (where only a runtime's shim may run).
		{"pod cgroup", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod9692aa0e_748e_11e8_8dfa_76d458035df6.slice",
			Ref{"9692aa0e-748e-11e8-8dfa-76d458035df6", ""}},
	}
	for _, c := range cases {
		got, ok := ParseCgroup(c.path)
		if !ok || got != c.want {
			t.Errorf("%s: ParseCgroup(%q) = %+v, %v; want %+v", c.name, c.path, got, ok, c.want)
		}
	}
}

// TestParseCgroupOutsidePods keeps cgroups that are not a pod's unnamed,
// including ones whose names merely resemble a pod's.
func TestParseCgroupOutsidePods(t *testing.T) {
	for _, path := range []string{
		"/",
		"/system.slice/docker-9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d.scope", // a plain Docker container
		"/system.slice/kubelet.service",
		"/kubepods.slice",
		"/kubepods.slice/kubepods-burstable.slice",
		"/kubepods/burstable",
		"/user.slice/user-pod1000.slice",            // "pod" outside kubepods
		"/podcast/pod1234",                          // cgroupfs form outside kubepods
		"/kubepods/burstable/pod",                   // no UID
		"/kubepods/burstable/pod../x",               // not a UID
		"/kubepods.slice/kubepods-pod_x_y!.slice/z", // not a UID
	} {
		if ref, ok := ParseCgroup(path); ok {
			t.Errorf("ParseCgroup(%q) = %+v, want no pod", path, ref)
		}
	}
}
