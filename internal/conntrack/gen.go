package conntrack

//go:generate go tool bpf2go -target bpfel -type conn -type flow_key -type flow -type owner -type listener_key conns ../../bpf/conns.bpf.c
