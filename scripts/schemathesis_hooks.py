"""schemathesis hooks for scripts/fuzz-api.sh (loaded through SCHEMATHESIS_HOOKS).

`POST /v1/batch/put` takes `application/vnd.rasa.batch`: a manifest line, then the values.
schemathesis draws the body as bytes (the document's `format: binary`); this serializer
sends those bytes as one value of a well-formed batch, so the route is fuzzed with the
values schemathesis draws (malformed framing is tests/e2e/batch.rs's business)."""

import json

import schemathesis


@schemathesis.serializer("application/vnd.rasa.batch")
def rasa_batch(ctx, value):
    data = value if isinstance(value, bytes) else str(value).encode()
    manifest = {"items": [{"key": "fuzz/batch", "length": len(data)}]}
    return json.dumps(manifest).encode() + b"\n" + data
