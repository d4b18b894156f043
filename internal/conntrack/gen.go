// SPDX-License-Identifier: Apache-2.0

package conntrack

//go:generate go tool bpf2go -target bpfel -type conn -type flow_key -type flow -type owner -type listener_key -type drop_counter -type conn_flags conns bpf/conns.bpf.c
