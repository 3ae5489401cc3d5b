#!/usr/bin/env bash
# Runs a command with TMPDIR set to a fresh directory of its own, removed when the command
# ends (passed or failed): what the tests leave in temporary files — gateways' data and
# logs, s3s-fs and etcd directories, files written for uploads — goes with it instead of
# piling up in /tmp run after run (12 GB had, here). The directory is short (/tmp/rasa-test.*),
# so unix-socket paths under it stay within their limit.
#
#   scripts/with-tmpdir.sh COMMAND [ARG...]
set -uo pipefail
dir=$(mktemp -d "${TMPDIR:-/tmp}/rasa-test.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
TMPDIR="$dir" "$@"
