"""The deployment recipes (files under ``deploy/``, shown on docs/deploying.md), run as far as this
machine allows.

No cluster and no Docker engine here, so each recipe is run at the level where its promise lives:
the file layout and ownership the platform produces (the kubelet's Secret projection with
``defaultMode`` and ``fsGroup``, a Compose bind-mounted secret), read by a process that has dropped
root for the pod's user; and the exact commands of the CronJob and the cron line, run against a
temporary source of truth with a stand-in ``kubectl`` that projects what it is given to apply.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state.keys import lifecycle as life

from .mounts import KubeletVolume, as_user, needs_root

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent
DEPLOYING = (ROOT / "docs" / "deploying.md").read_text()


def yaml_scalar(text: str, name: str) -> str:
    """The value of the one ``name: value`` line in a recipe (enough for these flat recipes)."""
    found: list[str] = re.findall(rf"^\s*{re.escape(name)}:\s*([^\s#]+)", text, re.MULTILINE)
    assert len(found) == 1, (name, found)
    return found[0].strip("\"'")


@pytest.mark.parametrize(
    "recipe",
    [
        "rotate-and-ship.sh",
        "kubernetes/ship-secret.sh",
        "kubernetes/deployment.yaml",
        "kubernetes/rotate-cronjob.yaml",
        "kubernetes/rbac.yaml",
        "kubernetes/pvc.yaml",
        "kubernetes/install.sh",
        "kubernetes/ops.Dockerfile",
        "kubernetes/proxy-sidecar.yaml",
        "kubernetes/networkpolicy.yaml",
        "container/Dockerfile",
        "compose/compose.yaml",
        "host/mrtr-state-rotate.cron",
        "host/mcp-server.service",
    ],
)
def test_every_recipe_is_on_the_deploying_page_as_it_is(recipe: str) -> None:
    """The page includes each file itself (a snippet), so its copy cannot drift from it."""
    assert f'--8<-- "deploy/{recipe}"' in DEPLOYING


# --- Kubernetes -----------------------------------------------------------------------------


@needs_root
def test_the_deployments_secret_volume_reads_as_its_non_root_pod(open_dir: Path) -> None:
    """Both Secrets (the encrypted keyset and its KEK's passphrase) as the kubelet projects
    them with fsGroup, opened by a process running as the pod's user and groups."""
    import yaml

    spec = (DEPLOY / "kubernetes" / "deployment.yaml").read_text()
    assert "subPath" not in spec.replace("a subPath mount never updates", "")
    pod = yaml.safe_load(spec)["spec"]["template"]["spec"]
    context = pod["securityContext"]
    user, group, fs_group = context["runAsUser"], context["runAsGroup"], context["fsGroup"]
    (server,) = pod["containers"]
    env = {e["name"]: e["value"] for e in server["env"]}
    mounts = {m["name"]: Path(m["mountPath"]) for m in server["volumeMounts"]}
    modes = {v["name"]: v["secret"]["defaultMode"] for v in pod["volumes"]}
    keyset_path = Path(env["MRTR_STATE_KEYSET"])
    passphrase_path = Path(env["MRTR_STATE_KEK"].removeprefix("passphrase:file:"))
    assert mounts["keyset"] == keyset_path.parent and mounts["keyset-kek"] == passphrase_path.parent
    # read-only volumes with fsGroup: the kubelet chowns to root:fsGroup and adds group read
    volume = KubeletVolume(open_dir / "secret", mode=modes["keyset"] | 0o040, gid=fs_group)
    kek_volume = KubeletVolume(open_dir / "kek", mode=modes["keyset-kek"] | 0o040, gid=fs_group)
    kek_volume.project({passphrase_path.name: b"the random passphrase install.sh made\n"})
    kek = f"passphrase:file:{kek_volume.path(passphrase_path.name)}"
    keyset = ms.Keyset.generate(("A256GCM",))
    encrypted = open_dir / "source.json"
    keyset.save(encrypted, kek=kek)
    volume.project({keyset_path.name: encrypted.read_bytes()})
    mounted = volume.path(keyset_path.name)
    token = ms.mint(keyset, "hello")

    def verify() -> object:
        return ms.verify(ms.Keyset.load(mounted, kek=kek), token).state

    assert as_user(user, (group, fs_group), verify) == "hello"
    # without fsGroup the same Secret is root:root 0400, which the pod cannot open
    bare = KubeletVolume(open_dir / "bare", mode=modes["keyset"])
    bare.project({keyset_path.name: encrypted.read_bytes()})
    with pytest.raises(ms.KeysetError, match=r"cannot read keyset .*: Permission denied"):
        as_user(user, (group,), lambda: ms.Keyset.load(bare.path(keyset_path.name), kek=kek))


FAKE_KUBECTL = '''#!{python}
"""kubectl, as far as ship-secret.sh uses it: render a Secret, and apply it to a Secret volume."""
import base64, json, os, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.mounts import KubeletVolume

log = Path(os.environ["FAKE_KUBE_LOG"])
with log.open("a") as out:
    out.write(" ".join(sys.argv[1:3]) + "\\n")
if sys.argv[1:3] == ["create", "secret"]:
    name = sys.argv[4]
    source = next(a for a in sys.argv if a.startswith("--from-file=")).split("=", 1)[1]
    key, path = source.split("=", 1)
    data = base64.b64encode(Path(path).read_bytes()).decode()
    print(json.dumps({{"kind": "Secret", "metadata": {{"name": name}}, "data": {{key: data}}}}))
elif sys.argv[1] == "apply":
    secret = json.load(sys.stdin)
    broken = Path(os.environ["FAKE_KUBE_FAIL_ONCE"])
    if broken.exists():
        broken.unlink()
        sys.exit("error: the server is currently unable to handle the request")
    files = {{k: base64.b64decode(v) for k, v in secret["data"].items()}}
    KubeletVolume(Path(os.environ["FAKE_KUBE_VOLUME"])).project(files)
    with log.open("a") as out:
        out.write("applied\\n")
    print("secret/" + secret["metadata"]["name"] + " configured")
else:
    sys.exit("fake kubectl: unexpected " + " ".join(sys.argv[1:]))
'''


def test_the_rotate_cronjob_ships_until_a_ship_succeeds(tmp_path: Path) -> None:
    spec = (DEPLOY / "kubernetes" / "rotate-cronjob.yaml").read_text()
    command = re.findall(r"^\s+- (/\S+)$", spec, re.MULTILINE)
    env = dict(re.findall(r"- name: (\w+)\s*(?:#.*)?\n\s+value: (\S+)", spec, re.MULTILINE))
    assert env["MRTR_STATE_RETENTION"] == "65m" and env["SECRET_NAME"] == "mcp-keyset"
    assert env["MRTR_STATE_ROTATE_EVERY"] == "30d"
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    # the KEK Secret's mount: a passphrase file, where the kubelet would put it
    kek_mount = tmp_path / "kek"
    kek_mount.mkdir(mode=0o700)
    (kek_mount / "passphrase").write_text("a random passphrase the install made\n")
    (kek_mount / "passphrase").chmod(0o400)
    env["MRTR_STATE_KEK"] = env["MRTR_STATE_KEK"].replace("/var/run/mrtr-state-kek", str(kek_mount))
    kek = env["MRTR_STATE_KEK"]
    tools = tmp_path / "bin"
    tools.mkdir()
    kubectl = tools / "kubectl"
    kubectl.write_text(FAKE_KUBECTL.format(python=sys.executable, root=str(ROOT)))
    kubectl.chmod(0o755)
    volume = tmp_path / "volume"
    fail_once = tmp_path / "apiserver-down"
    log = tmp_path / "kubectl.log"
    argv = [
        part.replace("/opt/mrtr-state", str(ROOT)).replace("/state", str(state)) for part in command
    ]
    base_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MRTR_STATE_")},
        **env,
        "PATH": f"{tools}:{BIN}:{os.environ['PATH']}",
        "FAKE_KUBE_LOG": str(log),
        "FAKE_KUBE_VOLUME": str(volume),
        "FAKE_KUBE_FAIL_ONCE": str(fail_once),
    }

    def cron_run(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, env={**base_env, **extra}, capture_output=True, text=True, timeout=60
        )

    def applies() -> int:
        return log.read_text().count("applied") if log.exists() else 0

    source = state / "keyset" / "keyset.json"
    month_ago = int(time.time()) - 30 * 86400  # the primary is due for its successor
    ms.Keyset.generate(("A256GCM",), now=month_ago).save(source, kek=kek)
    first_primary = ms.Keyset.load(source, kek=kek).primary("A256GCM").kid

    fail_once.touch()  # the API server is down for this run
    failed = cron_run()
    assert failed.returncode != 0, failed.stderr
    report = json.loads(failed.stdout)
    assert [c["action"] for c in report["changes"]] == ["add"]  # rotate added a pending key
    pending = report["changes"][0]["kid"]
    assert not (volume / "keyset.json").exists() and applies() == 0
    assert "apply -f" in log.read_text()  # it was tried

    # the next run has nothing to rotate, yet ships: the last ship did not succeed
    retried = cron_run()
    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout)["changes"] == []
    assert applies() == 1 and "shipped keyset" in retried.stderr
    replica = ms.Keyset.load(volume / "keyset.json", reload_interval=0, kek=kek)
    assert replica.get(pending) is not None and replica.primary("A256GCM").kid == first_primary

    # unchanged: nothing applied
    quiet = cron_run()
    assert quiet.returncode == 0 and applies() == 1, quiet.stderr
    assert "unchanged since it was last shipped" in quiet.stderr

    # the propagation delay has passed: promoted, shipped, followed by the running replica
    promoted = cron_run(MRTR_STATE_PROPAGATION="0s")
    assert promoted.returncode == 0, promoted.stderr
    assert applies() == 2
    assert replica.primary("A256GCM").kid == pending
    assert (volume / "keyset.json").is_symlink()
    # the snapshot it shipped is gone, and no secret reached the job's output
    assert not [p.name for p in source.parent.iterdir() if p.name.startswith(".keyset-ship")]
    secrets = [key.to_jwk()["k"] for key in ms.Keyset.load(source, kek=kek)]
    for run in (failed, retried, quiet, promoted):
        assert not any(secret in run.stdout + run.stderr for secret in secrets)


def test_rotate_and_ship_without_a_ship_command_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(DEPLOY / "rotate-and-ship.sh"), str(tmp_path / "keyset.json")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "usage: rotate-and-ship.sh" in done.stderr


# --- Docker Compose -------------------------------------------------------------------------

COMPOSE = DEPLOY / "compose" / "compose.yaml"


def compose() -> dict[str, Any]:
    import yaml

    spec: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return spec


def test_the_compose_file_is_valid_compose() -> None:
    """Parsed by compose_spec (the Compose Specification, strictly: an unknown or misspelled
    key, a wrong duration, networks beside network_mode are all refused)."""
    from compose_spec import PyCompose

    parsed = PyCompose.from_yaml(COMPOSE.read_text())
    assert sorted(parsed.service_names()) == ["mcp-server", "mrtr-state-proxy", "mrtr-state-rotate"]


def test_every_keyset_reader_mounts_the_folder_the_one_writer_rotates() -> None:
    """The keyset is a folder mount (a file secret or a mount of the file alone never shows the
    file a rotation renames into place); the rotation service is its one writer; every service
    that opens it runs as the uid that owns it and gets the KEK from the passphrase secret."""
    spec = compose()
    services = spec["services"]
    opening = {
        name: s for name, s in services.items() if "MRTR_STATE_KEYSET" in s.get("environment", {})
    }
    assert sorted(opening) == ["mrtr-state-proxy", "mrtr-state-rotate"]
    writers = []
    for name, service in opening.items():
        env = service["environment"]
        folder = str(Path(env["MRTR_STATE_KEYSET"]).parent)
        mounts = [v.split(":") for v in service["volumes"]]
        (mount,) = [m for m in mounts if m[1] == folder]
        assert mount[0] == "./keys" and not mount[0].endswith(".json"), name
        if mount[2:] != ["ro"]:
            writers.append(name)
        assert not env["MRTR_STATE_KEYSET"].startswith("/run/secrets/"), name
        secret = env["MRTR_STATE_KEK"].removeprefix("passphrase:file:/run/secrets/")
        assert secret in service["secrets"] and "file" in spec["secrets"][secret], name
        assert service["user"] == services["mrtr-state-rotate"]["user"], name  # 0600, its owner
    assert writers == ["mrtr-state-rotate"]
    assert "secrets" not in spec or all(
        "keyset.json" not in s.get("file", "") for s in spec["secrets"].values()
    )


def test_the_proxy_is_the_servers_one_way_in_and_its_admin_port_is_loopback() -> None:
    spec = compose()
    services = spec["services"]
    proxy = services["mrtr-state-proxy"]
    args = dict(arg.removeprefix("--").split("=", 1) for arg in proxy["command"] if "=" in arg)
    upstream = args["upstream"].removeprefix("http://").split("/")[0]
    host = upstream.split(":")[0]
    server = services[host]
    assert "ports" not in server and "network_mode" not in server
    (network,) = server["networks"]
    assert spec["networks"][network]["internal"] is True and network in proxy["networks"]
    assert args["admin-listen"].startswith("127.0.0.1:")  # the healthcheck runs inside
    admin_port = args["admin-listen"].rsplit(":", 1)[1]
    assert f"http://127.0.0.1:{admin_port}/readyz" in " ".join(proxy["healthcheck"]["test"])
    published = [p.split(":") for p in proxy["ports"]]
    assert [p[-1] for p in published] == [args["listen"].rsplit(":", 1)[1]]  # never the admin port
    assert all(p[0] == "127.0.0.1" for p in published)
    assert proxy["depends_on"]["mrtr-state-rotate"]["condition"] == "service_healthy"
    rotate = services["mrtr-state-rotate"]
    assert rotate["network_mode"] == "none" and rotate["init"] is True
    assert rotate["environment"]["MRTR_STATE_ROTATE_EVERY"] == "30d"


def test_the_rotation_service_creates_then_rotates_what_the_proxy_follows(tmp_path: Path) -> None:
    """The rotation service's own command, run here on a folder standing for ./keys: its first
    round creates the keyset, encrypted under the passphrase secret; a later round rotates it,
    and a keyset loaded from the folder as the proxy loads it follows, with no restart. (The
    loop ends when the stand-in mrtr-state on PATH fails after three rounds; rotation is made
    due after a second rather than 30 days.)"""
    rotate = compose()["services"]["mrtr-state-rotate"]
    env = dict(rotate["environment"])
    keys, secret = tmp_path / "keys", tmp_path / "keyset-passphrase"
    keys.mkdir(mode=0o700)
    secret.write_text("a random passphrase from the operator\n")
    secret.chmod(0o600)

    def here(value: str) -> str:
        return value.replace("/var/run/mrtr-state", str(keys)).replace(
            "/run/secrets/keyset_passphrase", str(secret)
        )

    env = {name: here(value) for name, value in env.items()}
    tools = tmp_path / "bin"
    tools.mkdir()
    rounds = tmp_path / "rounds"
    (tools / "mrtr-state").write_text(
        f"#!/bin/sh\necho round >> {rounds}\n"
        f'[ "$(wc -l < {rounds})" -le 3 ] || exit 1\nexec {BIN / "mrtr-state"} "$@"\n'
    )
    (tools / "mrtr-state").chmod(0o755)
    (tools / "sleep").write_text(f"#!/bin/sh\nexec {shutil.which('sleep')} 1.1\n")
    (tools / "sleep").chmod(0o755)
    command = rotate["entrypoint"]
    assert command[:2] == ["/bin/sh", "-c"] and "sleep 900" in command[2]
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MRTR_STATE_")},
        **env,
        "MRTR_STATE_ROTATE_EVERY": "1s",
        "MRTR_STATE_PROPAGATION": "0s",
        "PATH": f"{tools}:{os.environ['PATH']}",
    }
    keyset = keys / "keyset.json"
    first = subprocess.run(
        [*command[:2], command[2].replace("sleep 900", "exit 0")],  # one round only
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert first.returncode == 0, first.stderr
    assert "mrtr-state-encrypted-keyset" in keyset.read_text()
    assert keyset.stat().st_mode & 0o777 == 0o600
    kek = env["MRTR_STATE_KEK"]
    proxy_view = ms.Keyset.load(env["MRTR_STATE_KEYSET"], kek=kek, reload_interval=0)
    before = proxy_view.primary("A256GCM").kid
    rounds.unlink()
    loop = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=60)
    assert loop.returncode == 0, loop.stderr  # the loop ended when rotate "failed"
    changes = [c for line in loop.stdout.splitlines() for c in json.loads(line)["changes"]]
    assert {"add", "promote"} <= {c["action"] for c in changes}
    assert proxy_view.primary("A256GCM").kid != before  # followed, no restart


@needs_root
def test_the_keyset_folder_reads_as_the_proxys_user(open_dir: Path) -> None:
    """Host files as the recipe's set-up leaves them (the folder 0700 and the keyset 0600 owned
    by the services' uid, the passphrase 0600 too), opened by a process running as that uid;
    the modes a careless copy leaves are refused, naming the fix."""
    proxy = compose()["services"]["mrtr-state-proxy"]
    uid, gid = (int(part) for part in proxy["user"].split(":"))
    keys = open_dir / "keys"
    keys.mkdir(mode=0o700)
    passphrase = open_dir / "keyset-passphrase"
    passphrase.write_text("a random passphrase from the operator\n")
    passphrase.chmod(0o600)
    kek = f"passphrase:file:{passphrase}"
    host_file = keys / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(host_file, kek=kek)
    for path in (keys, host_file, passphrase):
        os.chown(path, uid, gid)
    assert as_user(uid, (gid,), lambda: len(ms.Keyset.load(host_file, kek=kek))) == 1
    host_file.chmod(0o644)  # as `cp` on a default umask leaves it
    with pytest.raises(ms.KeysetPermissions, match="chmod 600"):
        as_user(uid, (gid,), lambda: ms.Keyset.load(host_file, kek=kek))
    host_file.chmod(0o600)
    passphrase.chmod(0o644)  # a readable passphrase protects nothing: refused too
    with pytest.raises(ms.KekUnavailable, match="mode 0644"):
        as_user(uid, (gid,), lambda: ms.Keyset.load(host_file, kek=kek))


# --- a plain host: systemd and cron ---------------------------------------------------------


def test_the_cron_line_rotates_the_file_the_service_follows(tmp_path: Path) -> None:
    cron = (DEPLOY / "host" / "mrtr-state-rotate.cron").read_text()
    unit = (DEPLOY / "host" / "mcp-server.service").read_text()
    settings = dict(re.findall(r"^(MRTR_STATE_\w+)=(\S+)$", cron, re.MULTILINE))
    (line,) = [ln for ln in cron.splitlines() if ln.startswith("*/15")]
    fields = line.split(None, 6)
    assert fields[5] == "mcp" and re.search(r"^User=mcp$", unit, re.MULTILINE)
    keyset_path = "/etc/mcp/keyset.json"
    assert f"Environment=MRTR_STATE_KEYSET={keyset_path}" in unit
    etc = tmp_path / "etc-mcp"
    etc.mkdir(mode=0o700)
    logs = tmp_path / "log"
    logs.mkdir()
    command = (
        fields[6]
        .replace(keyset_path, str(etc / "keyset.json"))
        .replace("/var/log/mrtr-state", str(logs))
        .replace("/usr/local/bin/mrtr-state", str(BIN / "mrtr-state"))
    )
    month_ago = int(time.time()) - 30 * 86400  # the primary is due for its successor
    ms.Keyset.generate(("A256GCM",), now=month_ago).save(etc / "keyset.json")
    server = ms.Keyset.load(etc / "keyset.json", reload_interval=0)  # the service, running
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MRTR_STATE_")}
    subprocess.run(
        ["/bin/sh", "-c", command], env={**environment, **settings}, check=True, timeout=60
    )
    report = json.loads((logs / "rotate.log").read_text())
    (added,) = report["changes"]
    assert added["action"] == "add" and server.get(added["kid"]) is not None
    pending = ms.Keyset.load(etc / "keyset.json").get(added["kid"])
    assert pending is not None
    promote_at = life.stamp(pending.since["pending"] + 3600)  # the default propagation
    assert report["next_due"][0] == {
        "kid": added["kid"],
        "alg": "A256GCM",
        "action": "promote",
        **promote_at,
    }
