#!/usr/bin/env bash
# Kills what the harness sessions given as arguments left running, then removes them:
#   sweep.sh SESSION_DIR...
# A session's nodes (node-*/ folders) are removed first by node/node-sweep.sh: containers,
# mounts, cgroups and network namespaces are more than a pid file can name.
# Each pid file holds "<pid> <command name>"; a pid is killed (with its process group)
# only while /proc still shows that command, so a recycled pid is never hit.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for dir in "$@"; do
  [[ -d "$dir" ]] || continue
  for node in "$dir"/node-*/; do
    [[ -d "$node" ]] && bash "$here/node/node-sweep.sh" "$node"
  done
  for f in "$dir"/pids/*.pid; do
    [[ -f "$f" ]] || continue
    read -r pid comm <"$f" || continue
    # A zombie is already dead: only its parent's wait is missing.
    state="$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null)"
    if [[ "$state" != Z && "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$comm" ]]; then
      echo "gw-test-sweep: killing leftover $comm (pid $pid) of $dir" >&2
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    fi
  done
  rm -rf "$dir"
done
exit 0
