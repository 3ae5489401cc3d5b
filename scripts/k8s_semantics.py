"""What must agree across the rendered Kubernetes manifests (deploy/kubernetes), beyond
their schemas: the gateway's memory limit covers the --memory its configuration gives,
each pod's node id and advertised URL come from its own name through the headless
Service the StatefulSet names, the probes are /readyz (readiness) and /healthz
(liveness), the disk tier's directory is the volume claim's mount and --disk-size fits
the claim, and the Services and the PodDisruptionBudget select the gateway pods. And
what a platform security review asks (review III, finding 8): a NetworkPolicy admits only
labelled clients and members to the gateway pods; members speak HTTPS to each other
(certificate, key, the CA they verify each other with, an https:// advertised URL,
HTTPS probes); /metrics is not public; no container runs as root or adds a capability
(the "restricted" Pod Security Standard); no service-account token is mounted; every
image has a fixed version.

    python scripts/k8s_semantics.py RENDERED.yaml     (exit 1 naming each fault)
"""

from __future__ import annotations

import re
import sys
import tomllib

import yaml

UNITS = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "kib": 1 << 10,
         "mib": 1 << 20, "gib": 1 << 30, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tib": 1 << 40, "ti": 1 << 40}


def size(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in UNITS:
        raise ValueError(f"not a size: {text!r}")
    return int(float(m.group(1)) * UNITS[m.group(2).lower()])


def main() -> int:
    docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
    by_kind: dict[str, list[dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    faults: list[str] = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            faults.append(what)

    sts = next(s for s in by_kind["StatefulSet"] if s["metadata"]["name"] == "rasa")
    pod = sts["spec"]["template"]
    labels = pod["metadata"]["labels"]
    gw = next(c for c in pod["spec"]["containers"] if c["name"] == "gateway")
    config_map = next(c for c in by_kind["ConfigMap"] if c["metadata"]["name"].startswith("rasa-config"))
    conf = tomllib.loads(config_map["data"]["rasa.toml"])
    env = {e["name"]: e for e in gw.get("env", [])}

    memory = size(conf["memory"]["memory"]) + size(conf["memory"].get("upload_staging_memory", "256MiB"))
    limit = size(gw["resources"]["limits"]["memory"])
    check(limit >= memory + (512 << 20), f"memory limit {limit} leaves under 512 MiB beyond --memory plus staging ({memory})")
    check(size(gw["resources"]["requests"]["memory"]) == limit, "memory request != limit (the budget must be guaranteed)")
    check(env.get("POD_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name", "POD_NAME from metadata.name")
    check(env.get("RASA_NODE_ID", {}).get("value") == "$(POD_NAME)", "node id is the pod's name")
    headless = sts["spec"]["serviceName"]
    check(f"$(POD_NAME).{headless}." in env.get("RASA_ADVERTISE_URL", {}).get("value", ""), "advertised URL through the headless Service")
    check(gw["readinessProbe"]["httpGet"]["path"] == "/readyz", "readiness probe on /readyz")
    check(gw["livenessProbe"]["httpGet"]["path"] == "/healthz", "liveness probe on /healthz")
    port = conf["server"]["listen"].rsplit(":", 1)[1]
    check(str(gw["ports"][0]["containerPort"]) == port, f"container port matches listen {port}")
    mounts = {m["mountPath"]: m["name"] for m in gw["volumeMounts"]}
    claims = {c["metadata"]["name"]: c for c in sts["spec"].get("volumeClaimTemplates", [])}
    disk_dir = conf.get("disk", {}).get("disk")
    if disk_dir:
        claim = claims.get(mounts.get(disk_dir, ""))
        check(claim is not None, f"--disk {disk_dir} is a volume claim's mount")
        if claim:
            room = size(claim["spec"]["resources"]["requests"]["storage"])
            check(size(conf["disk"]["disk_size"]) <= room * 0.9, "--disk-size leaves 10% of the claim free")
    services = {s["metadata"]["name"]: s for s in by_kind["Service"]}
    check(services.get(headless, {}).get("spec", {}).get("clusterIP") == "None", f"{headless} is headless")
    for name, s in services.items():
        sel = s["spec"].get("selector", {})
        if name in (headless, "rasa"):
            check(sel and all(labels.get(k) == v for k, v in sel.items()), f"Service {name} selects the gateway pods")
    for pdb in by_kind.get("PodDisruptionBudget", []):
        sel = pdb["spec"].get("selector", {}).get("matchLabels", {})
        check(sel and all(labels.get(k) == v for k, v in sel.items()), "the PodDisruptionBudget selects the gateway pods")
    security(by_kind, pod, gw, conf, env, check)
    for f in faults:
        print(f"k8s: {sys.argv[1]}: {f}", file=sys.stderr)
    return 1 if faults else 0


def security(by_kind: dict, pod: dict, gw: dict, conf: dict, env: dict, check) -> None:
    """The platform security review's checks of the gateway pods (see the module's text)."""
    labels = pod["metadata"]["labels"]
    policies = [
        p for p in by_kind.get("NetworkPolicy", [])
        if all(labels.get(k) == v for k, v in p["spec"].get("podSelector", {}).get("matchLabels", {}).items())
        and p["spec"].get("podSelector", {}).get("matchLabels")
    ]
    check(bool(policies), "a NetworkPolicy selects the gateway pods")
    for p in policies:
        check("Ingress" in p["spec"].get("policyTypes", []), f"NetworkPolicy {p['metadata']['name']} governs ingress")
        for rule in p["spec"].get("ingress", []):
            peers = rule.get("from", [])
            check(bool(peers), f"NetworkPolicy {p['metadata']['name']}: every ingress rule names who may connect")
            for peer in peers:
                check(bool(peer.get("podSelector", {}).get("matchLabels")) and "ipBlock" not in peer,
                      f"NetworkPolicy {p['metadata']['name']}: peers are labelled pods, not everyone")
    check(env.get("RASA_ADVERTISE_URL", {}).get("value", "").startswith("https://"), "members advertise https://")
    server, cluster = conf.get("server", {}), conf.get("cluster", {})
    tls = conf.get("tls", {})
    check(bool(tls.get("tls_cert")) and bool(tls.get("tls_key")), "the gateway serves HTTPS ([tls] tls_cert, tls_key)")
    check(bool(cluster.get("cluster_ca_file")), "members verify each other's certificates (cluster_ca_file)")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        if probe in gw:
            check(gw[probe]["httpGet"].get("scheme") == "HTTPS", f"{probe} over HTTPS")
    check(not server.get("public_metrics", False), "/metrics needs a token (its labels name tenants)")
    spec = pod["spec"]
    check(spec.get("automountServiceAccountToken") is False, "no service-account token is mounted")
    pod_ctx = spec.get("securityContext", {})
    for c in spec.get("initContainers", []) + spec["containers"]:
        ctx = c.get("securityContext", {})
        user = ctx.get("runAsUser", pod_ctx.get("runAsUser"))
        non_root = ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))
        check(non_root is True and user not in (None, 0), f"container {c['name']} runs as a non-root user")
        check(ctx.get("allowPrivilegeEscalation") is False, f"container {c['name']}: no privilege escalation")
        caps = ctx.get("capabilities", {})
        check(caps.get("drop") == ["ALL"] and not caps.get("add"), f"container {c['name']} drops every capability, adds none")
        image = c["image"]
        tag = image.rsplit("/", 1)[-1].partition(":")[2]
        check(bool(tag) and tag != "latest" or "@sha256:" in image, f"container {c['name']}: image {image} has a fixed version")
    check(pod_ctx.get("seccompProfile", {}).get("type") == "RuntimeDefault", "seccomp RuntimeDefault")


if __name__ == "__main__":
    sys.exit(main())
