"""The HTTP API reference page of the book (docs/reference/http-api.md), drawn from the
OpenAPI document the gateway generates (openapi/openapi.json): every route with its
parameters, request body and answers, and every schema with its fields.

    python3 scripts/docs/http_reference.py openapi/openapi.json > docs/reference/http-api.md
"""

from __future__ import annotations

import json
import sys

HEAD = """<!-- Generated from openapi/openapi.json by scripts/docs/http_reference.py (make docs); make test keeps it current. -->
# HTTP API reference

Every route of the gateway, from its OpenAPI 3.1 document (`GET /openapi.json`; Swagger UI
at `/docs` on a running gateway). Errors are `application/problem+json` with a stable
`code` (see [the HTTP API guide](../guide/http-api.md)).
"""


def ref_name(schema: dict) -> str:
    """A schema as a short type: a `$ref`'s name linked to its section, or its type."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[`{name}`](#{name.lower()})"
    if "oneOf" in schema or "anyOf" in schema:
        return " or ".join(ref_name(s) for s in schema.get("oneOf", schema.get("anyOf", [])))
    t = schema.get("type", "object")
    if isinstance(t, list):
        t = " or ".join(x for x in t)
    if t == "array":
        return f"array of {ref_name(schema.get('items', {}))}"
    fmt = schema.get("format")
    return f"{t} ({fmt})" if fmt else str(t)


def one_line(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def routes(doc: dict) -> list[str]:
    out = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if method not in ("get", "put", "post", "delete", "head", "patch"):
                continue
            out.append(f"\n## `{method.upper()} {path}`\n")
            out.append(one_line(op.get("summary")) + "\n")
            if op.get("description"):
                out.append(op["description"].strip() + "\n")
            params = op.get("parameters", [])
            if params:
                out.append("| Parameter | In | Type | Required | Meaning |\n|---|---|---|---|---|")
                for p in params:
                    out.append(f"| `{p['name']}` | {p['in']} | {ref_name(p.get('schema', {}))} | "
                               f"{'yes' if p.get('required') else 'no'} | {one_line(p.get('description'))} |")
                out.append("")
            body = op.get("requestBody")
            if body:
                kinds = ", ".join(f"`{ct}` {ref_name(c.get('schema', {}))}" for ct, c in body.get("content", {}).items())
                out.append(f"Body: {kinds}. {one_line(body.get('description'))}\n")
            out.append("| Status | Meaning | Body |\n|---|---|---|")
            for status, r in op.get("responses", {}).items():
                kinds = ", ".join(f"`{ct}` {ref_name(c.get('schema', {}))}" for ct, c in r.get("content", {}).items())
                out.append(f"| {status} | {one_line(r.get('description'))} | {kinds} |")
    return out


def schemas(doc: dict) -> list[str]:
    out = ["\n# Schemas\n"]
    for name, s in doc.get("components", {}).get("schemas", {}).items():
        out.append(f"\n## {name}\n")
        if s.get("description"):
            out.append(one_line(s["description"]) + "\n")
        props = s.get("properties", {})
        if props:
            required = set(s.get("required", []))
            out.append("| Field | Type | Required | Meaning |\n|---|---|---|---|")
            for f, fs in props.items():
                out.append(f"| `{f}` | {ref_name(fs)} | {'yes' if f in required else 'no'} | {one_line(fs.get('description'))} |")
        elif "enum" in s:
            out.append("One of: " + ", ".join(f"`{v}`" for v in s["enum"]) + ".")
        elif "oneOf" in s:
            out.append("One of: " + ", ".join(ref_name(x) if "$ref" in x else f"`{x.get('enum', [x.get('type')])[0]}`"
                                              for x in s["oneOf"]) + ".")
        else:
            out.append(f"Type: {ref_name(s)}.")
    return out


def main() -> None:
    doc = json.load(open(sys.argv[1]))
    print(HEAD + "\n".join(routes(doc) + schemas(doc)))


if __name__ == "__main__":
    main()
