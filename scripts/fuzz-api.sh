#!/usr/bin/env bash
# Fuzzes the HTTP API with schemathesis against a freshly started gateway: every
# generated request must be answered without a 5xx and within the gateway's own OpenAPI
# document (status codes, content types, response schemas).
# Usage: scripts/fuzz-api.sh [seconds]   (make fuzz-api; a bounded run is part of make test)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
venv=${RASA_FUZZ_VENV:-target/schemathesis-venv}
if [ ! -x "$venv/bin/schemathesis" ]; then
  echo "fuzz-api: installing schemathesis into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "schemathesis==4.32.5" "hypothesis==6.170.17"
fi
bin=${RASA_GATEWAY_BIN:-target/debug/rasa-gateway}
[ -x "$bin" ] || cargo build --locked -p rasa-gateway
tmp=$(mktemp -d)
# With a token file, so the run also covers authentication: requests carry an admin
# token, and schemathesis's ignored_auth check sends some without it and expects 401.
token=$("$bin" token new fuzz --scopes admin --file "$tmp/tokens" 2>/dev/null)
"$bin" --listen 127.0.0.1:0 --memory 256MiB --arena-size 1MiB --max-object-size 1MiB \
  --token-file "$tmp/tokens" >"$tmp/out" 2>"$tmp/err" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 200); do grep -q listening "$tmp/out" && break; sleep 0.05; done
url=$(sed -n 's/.*listening on //p' "$tmp/out")
# A failed check is a failure. Hypothesis can also crash internally (seen once in its
# shrinker, "Runtime Error ... IndexError"); that says nothing about the API, so such a
# run is repeated once, and only a repeated crash fails.
for attempt in 1 2; do
  if "$venv/bin/schemathesis" run "$url/openapi.json" \
      --header "Authorization: Bearer $token" \
      --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,ignored_auth \
      --max-time "$secs" --workers 2 --seed "$attempt" --generation-database none \
      --suppress-health-check all 2>&1 | tee "$tmp/run.log"; [ "${PIPESTATUS[0]}" = 0 ]; then
    echo "fuzz-api: no 5xx and no schema violation in ${secs}s"
    exit 0
  fi
  if grep -q "FAILURES" "$tmp/run.log" || ! grep -q "Runtime Error" "$tmp/run.log" || [ "$attempt" = 2 ]; then
    echo "fuzz-api: FAILED (see above)" >&2
    exit 1
  fi
  echo "fuzz-api: schemathesis crashed internally (not an API failure); running once more" >&2
done
