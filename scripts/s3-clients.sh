#!/usr/bin/env bash
# The S3 listener tested with real S3 clients: awscli (aws-cli), boto3, s5cmd and pyarrow, pinned
# in tests/s3-clients/requirements.txt and installed into target/s3-clients-venv (once;
# again when the pins change), against the gateway binary `make test` builds and s3s-fs
# as an origin. Arguments go to pytest (e.g. -k boto3).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${RASA_S3_CLIENTS_VENV:-target/s3-clients-venv}
reqs=tests/s3-clients/requirements.txt
# shellcheck source=scripts/venv.sh
. scripts/venv.sh
venv_with "$venv" "$reqs" s3-clients
cargo build -q --locked --workspace --bins
# pytest exits 5 when it collects no test: that, like any failure, fails this script.
VIRTUAL_ENV=$PWD/$venv "$venv/bin/python" -m pytest tests/s3-clients -q --timeout 300 -p no:cacheprovider "$@"
