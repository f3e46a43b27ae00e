#!/usr/bin/env bash
# Kills what the harness sessions given as arguments left running, then removes them:
#   sweep.sh SESSION_DIR...
# Each pid file holds "<pid> <command name>"; a pid is killed (with its process group)
# only while /proc still shows that command, so a recycled pid is never hit.
set -uo pipefail

for dir in "$@"; do
  [[ -d "$dir" ]] || continue
  for f in "$dir"/pids/*.pid; do
    [[ -f "$f" ]] || continue
    read -r pid comm <"$f" || continue
    if [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$comm" ]]; then
      echo "gw-test-sweep: killing leftover $comm (pid $pid) of $dir" >&2
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    fi
  done
  rm -rf "$dir"
done
exit 0
