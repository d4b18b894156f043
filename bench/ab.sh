#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/ab.sh: a quick side-by-side of arbitrary commands against no command,
# for questions the harness's named tools do not ask (a build with one part
# of a program taken out, an empty program at a hook). As root:
#
#   bench/ab.sh [-r ROUNDS] [-d SECONDS] [-c CONNECTIONS] [-s SECONDS] [-k] 'COMMAND' ...
#
# nginx (one worker, pinned to CPU 0, keep-alive, a 3-byte answer) listens on
# 127.0.0.1:18160; wrk (one thread, CPU 1) loads it for -d seconds per round
# (with -k, one connection per request: wrk sends Connection: close),
# in the order none, COMMAND1, none, COMMAND2, ..., none, ROUNDS times. Each
# command starts, in a process group of its own, -s seconds (3) before its
# round; after it the whole group gets SIGINT (SIGKILL 5 s later if any of
# it is still running), and the next round starts only once none is. A
# round's
# ratio is its requests/s over the mean of the two baseline rounds around it;
# per command the mean, standard deviation, count, minimum and maximum of
# those ratios are printed, and the same for wrk's p99 latency (mean, minimum
# and maximum of the ratios: p99 is far noisier than requests/s here, so a
# `sleep` command as a control belongs in any p99 question). No confidence
# verdicts: that is bench/run.sh.
set -eu
rounds=6 duration=5 conns=100 settle=3 close=""
usage() {
	echo "usage: $0 [-r ROUNDS] [-d SECONDS] [-c CONNECTIONS] [-s SECONDS] [-k] 'COMMAND' ..." >&2
	exit 2
}
while getopts r:d:c:s:kh opt; do
	case $opt in
	r) rounds=$OPTARG ;;
	d) duration=$OPTARG ;;
	c) conns=$OPTARG ;;
	s) settle=$OPTARG ;;
	k) close=1 ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || usage
for v in "$rounds" "$duration" "$conns" "$settle"; do
	case $v in '' | *[!0-9]* | 0*) echo "$0: -r, -d, -c and -s take whole numbers above 0, not \"$v\"" >&2; exit 2 ;; esac
done
[ "$(id -u)" = 0 ] || { echo "$0: needs root (the commands load BPF programs)" >&2; exit 77; }
for tool in nginx wrk taskset python3; do
	command -v $tool >/dev/null || { echo "$0: $tool is not installed (scripts/deps.sh, bench/run.sh install it)" >&2; exit 1; }
done

dir=$(mktemp -d /tmp/stacktop-ab.XXXXXX)
mkdir -p "$dir/tmp"
cat >"$dir/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 1;
worker_cpu_affinity 1;
worker_rlimit_nofile 4096;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4000; }
http {
	access_log off;
	keepalive_timeout 300s;
	keepalive_requests 100000000;
	client_body_temp_path $dir/tmp;
	proxy_temp_path $dir/tmp;
	fastcgi_temp_path $dir/tmp;
	uwsgi_temp_path $dir/tmp;
	scgi_temp_path $dir/tmp;
	server {
		listen 127.0.0.1:18160 backlog=4096;
		location / { default_type text/plain; return 200 "ok\n"; }
	}
}
EOF
nginx -c "$dir/nginx.conf" -p "$dir" &
nginx_pid=$!
trap 'kill $nginx_pid 2>/dev/null; wait $nginx_pid 2>/dev/null; rm -rf "$dir"' EXIT
sleep 0.5

measure() { # requests/s and p99 (µs) of a wrk run of $1 seconds
	taskset -c 1 wrk --latency -t1 -c"$conns" -d"$1"s ${close:+-H "Connection: close"} http://127.0.0.1:18160/ | awk '/^ +99%/ { v=$2; if (v ~ /us$/) p=v+0; else if (v ~ /ms$/) p=(v+0)*1000; else p=(v+0)*1e6 } /^Requests\/sec/ { r=$2 } END { print r, p }'
}
measure 1 >/dev/null # warm-up
: >"$dir/rounds"
for _ in $(seq "$rounds"); do
	for i in $(seq $#); do
		echo "none $(measure "$duration")" >>"$dir/rounds"
		# setsid: the command's processes form a group of their own (a
		# command string with a redirect or a pipe is not exec'd by bash,
		# so signalling bash alone would leave them running).
		setsid bash -c "${!i}" >/dev/null 2>"$dir/cmd$i.err" &
		cmd_pid=$!
		sleep "$settle"
		if ! kill -0 $cmd_pid 2>/dev/null; then
			echo "$0: command $i exited before its round: ${!i}" >&2
			cat "$dir/cmd$i.err" >&2
			exit 1
		fi
		echo "cmd$i $(measure "$duration")" >>"$dir/rounds"
		kill -INT -- -$cmd_pid 2>/dev/null || true
		for _ in $(seq 50); do kill -0 -- -$cmd_pid 2>/dev/null || break; sleep 0.1; done
		kill -KILL -- -$cmd_pid 2>/dev/null || true
		wait $cmd_pid || true
		while kill -0 -- -$cmd_pid 2>/dev/null; do sleep 0.1; done
	done
done
echo "none $(measure "$duration")" >>"$dir/rounds"

python3 - "$dir/rounds" "$@" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
ratios = {}
p99s = {}
for i, (name, value, p99) in enumerate(rows):
    if name != "none":
        base = (float(rows[i - 1][1]) + float(rows[i + 1][1])) / 2
        ratios.setdefault(name, []).append(float(value) / base)
        pb = (float(rows[i - 1][2]) + float(rows[i + 1][2])) / 2
        p99s.setdefault(name, []).append(float(p99) / pb)
for i, command in enumerate(sys.argv[2:], 1):
    r = ratios[f"cmd{i}"]
    sd = statistics.stdev(r) if len(r) > 1 else 0.0
    p = p99s[f"cmd{i}"]
    print(f"mean {statistics.mean(r):.4f}  sd {sd:.4f}  n {len(r)}  min {min(r):.4f}  max {max(r):.4f}  p99 ratio mean {statistics.mean(p):.3f} min {min(p):.3f} max {max(p):.3f}  {command}")
EOF
