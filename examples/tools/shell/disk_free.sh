#!/bin/sh
# disk_free: a toolmesh command tool in POSIX shell, with no JSON parser.
#
# The contract (docs/tools-in-any-language.md): the arguments arrive as one
# JSON object on stdin; the result is the JSON printed on stdout; a failure is
# a message on stderr and a non-zero exit code, which the agent receives as an
# `is_error` result.
#
# The registry validates the arguments against the input_schema in
# sidecar.yaml before this script runs, and that schema allows no quote,
# backslash or control character in `path`: so `sed` can pick the values out
# safely, and `path` can go into the JSON output as it is.
#
#   echo '{"path": "/"}' | ./disk_free.sh
#   {"path": "/", "total_kb": 61202244, "used_kb": 31337000, "available_kb": 26726540, "used_percent": 54}
set -eu

args=$(cat)
path=$(printf '%s' "$args" | sed -n 's/.*"path"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
delay=$(printf '%s' "$args" | sed -n 's/.*"delay"[[:space:]]*:[[:space:]]*\([0-9][0-9]*\).*/\1/p')

# Only to try the tool's timeout: the sidecar kills the whole process group
# when it passes, `sleep` included.
if [ -n "$delay" ]; then sleep "$delay"; fi

# If df fails (no such path), its message goes to stderr and `set -e` exits
# with its code: the agent gets "command failed (exit code 1): df: ...".
usage=$(df -Pk -- "$path")
# df -P: "Filesystem 1024-blocks Used Available Capacity Mounted-on", then one line.
set -- $(printf '%s\n' "$usage" | awk 'NR == 2 { print $2, $3, $4, $5 }')
printf '{"path": "%s", "total_kb": %s, "used_kb": %s, "available_kb": %s, "used_percent": %s}\n' \
  "$path" "$1" "$2" "$3" "${4%\%}"
