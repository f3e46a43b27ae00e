#!/usr/bin/env bash
# Removes everything a test-bed node left on the machine, whether it stopped cleanly or was
# killed:   node-sweep.sh NODE_ROOT...
# NODE_ROOT/node.env names the node's network namespace and cgroup (written before anything
# was started); without it there is nothing of a node to remove. What it removes: the
# containers and their shims, every process in the node's cgroups or whose command line
# names NODE_ROOT, the mounts under NODE_ROOT (container root filesystems, pod volumes, pod
# network namespaces), the node's cgroups, its network namespace (with the bridge, the veths
# and every iptables rule kube-proxy and the CNI plugins wrote there), the global sysctls the
# kubelet rewrote, and NODE_ROOT itself. Safe to run twice.
set -uo pipefail

kill_node_processes() {
  local root="$1" cgroup="$2" round pid pids
  for round in $(seq 1 50); do
    pids=()
    if [[ -n "$cgroup" ]]; then
      while read -r pid; do pids+=("$pid"); done < <(cat /sys/fs/cgroup/*/"$cgroup"/cgroup.procs \
        /sys/fs/cgroup/*/"$cgroup"/**/cgroup.procs 2>/dev/null | sort -u)
    fi
    for pid in /proc/[0-9]*; do
      pid="${pid#/proc/}"
      [[ "$pid" == "$$" || "$pid" == "$BASHPID" ]] && continue
      if { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qF -- "$root/"; then pids+=("$pid"); fi
    done
    [[ ${#pids[@]} -eq 0 ]] && return 0
    [[ $round -eq 1 ]] && echo "gw-node-sweep: killing ${#pids[@]} process(es) of $root" >&2
    kill -KILL "${pids[@]}" 2>/dev/null
    sleep 0.2
  done
  echo "gw-node-sweep: processes of $root still alive after 10 s: ${pids[*]}" >&2
}

sweep_node() {
  local root="$1"
  [[ -f "$root/node.env" ]] || return 0
  local NETNS="" CGROUP="" sock
  # shellcheck disable=SC1091
  source "$root/node.env"
  sock="$root/containerd/containerd.sock"

  # Containers first, through containerd while it still answers, so runc unmounts their
  # root filesystems itself.
  if [[ -S "$sock" ]] && timeout 5 ctr --address "$sock" version >/dev/null 2>&1; then
    local t c
    for t in $(timeout 10 ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      timeout 10 ctr --address "$sock" -n k8s.io tasks kill -s KILL "$t" >/dev/null 2>&1
    done
    sleep 0.5
    for t in $(timeout 10 ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      timeout 10 ctr --address "$sock" -n k8s.io tasks delete -f "$t" >/dev/null 2>&1
    done
    for c in $(timeout 10 ctr --address "$sock" -n k8s.io containers ls -q 2>/dev/null); do
      timeout 10 ctr --address "$sock" -n k8s.io containers rm "$c" >/dev/null 2>&1
    done
  fi

  kill_node_processes "$root" "$CGROUP"

  # Deepest first; lazy, so a mount still busy for a moment does not stop the sweep.
  local m
  while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done < <(awk -v r="$root/" 'index($5, r) == 1 { print $5 }' /proc/self/mountinfo | sort -r)

  if [[ -n "$CGROUP" ]]; then
    local d
    while read -r d; do rmdir "$d" 2>/dev/null; done < <(find /sys/fs/cgroup/*/"$CGROUP" -depth -type d 2>/dev/null)
  fi

  if [[ -n "$NETNS" ]] && ip netns list 2>/dev/null | grep -qw -- "$NETNS"; then
    ip netns del "$NETNS" 2>/dev/null || echo "gw-node-sweep: could not delete network namespace $NETNS" >&2
  fi

  if [[ -f "$root/sysctl.saved" ]]; then
    local line
    while read -r line; do [[ -n "$line" ]] && sysctl -qw "$line" >/dev/null 2>&1; done <"$root/sysctl.saved"
  fi

  rm -rf "$root"
}

shopt -s globstar nullglob
for root in "$@"; do
  root="${root%/}"
  sweep_node "$root"
done
exit 0
