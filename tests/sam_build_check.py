#!/usr/bin/env python3
"""Checks what `sam build` built, as `sam deploy` would upload it, and what `sam deploy`
sends with a saved samconfig.toml. Run by tests/sam-build.sh with target/tools/venv's
python, under tests/moto.sh (AWS_ENDPOINT_URL names moto).

    sam_build_check.py BUILD_DIR [--qemu QEMU --sysroot DIR]

For each function of BUILD_DIR/template.yaml (the template `sam build` wrote):

- **the binary**: an ELF for AArch64 (e_machine 183), 64-bit, dynamically linked against
  glibc as Lambda's provided.al2023 runs it; its panics unwind (a panic=abort build
  would kill the process and fail a whole SQS batch). (That SAM builds each function's
  package alone, without the workspace's test features, is template.yaml's CodeUri:
  tests/check_template.py checks it.)
- **its size**: within Lambda's 250 MB for a function's unzipped package, and the zip
  SAM uploads.
- **it starts and answers the Lambda Runtime API**, run by qemu-aarch64 against a
  stand-in Runtime API on 127.0.0.1 (a real process; only the Runtime API endpoint is a
  stand-in, as in tests of Lambda runtimes):
  1. with no configuration, it posts `Config.Missing` naming NODEWRIGHT_CLUSTER_NAME to
     `/runtime/init/error` and exits with a failure;
  2. configured as the stack configures it (the template's environment, its parameters'
     defaults), against moto (EKS DescribeCluster, the DynamoDB table) and a kubeconfig
     naming a closed port, it completes its cold start, asks for an invocation
     (`/runtime/invocation/next`) and answers it on `/response` or `/error`.
  Without --qemu (no way to run arm64 code here) this is said, and skipped.

Then the deploy path with a saved samconfig.toml, through SAM CLI's own code (its
`sam deploy --guided` prompts, answered, and its config file), with no AWS account: the
managed bucket, the upload and the change set are replaced by a recorder of the
parameters a change set would get (SAM's own merge), and the one identity call SAM
makes goes to moto:
- `sam deploy --guided` saves every parameter's answer in samconfig.toml;
- a routine `sam deploy` sends every parameter as saved (DryRun, AdoptKarpenterNodes
  included): none is left to the stack's previous value or the template's default;
- an edit of samconfig.toml is what the next routine deploy sends;
- `sam deploy --parameter-overrides DryRun=...` changes that deploy only: the next
  routine deploy sends samconfig.toml's value again (why the docs say to edit the file).
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = ("ProvisionerFunction", "InterruptionFunction", "DisruptionFunction")
# Lambda: 250 MB for a function's code and layers, unzipped.
UNZIPPED_LIMIT = 250 * 1024 * 1024
CLUSTER = "sam-build-check"
TABLE = "sam-build-check"
START_TIMEOUT = 180  # seconds: an unoptimized binary under qemu, its first TLS setup included

problems: list[str] = []


def fail(message: str) -> None:
    problems.append(message)
    print(f"FAIL {message}")


def load_template(path: Path) -> dict:
    from cfnlint.decode import decode

    template, matches = decode(str(path))
    if matches:
        raise SystemExit(f"{path}: cannot parse: {matches}")
    return json.loads(json.dumps(template))


# --------------------------------------------------------------------------- the binary


def check_binary(name: str, path: Path) -> None:
    data = path.read_bytes()
    if data[:4] != b"\x7fELF":
        return fail(f"{name}: {path} is not an ELF file")
    if data[4] != 2 or data[5] != 1:
        return fail(f"{name}: {path} is not a 64-bit little-endian ELF")
    machine = struct.unpack("<H", data[18:20])[0]
    if machine != 183:
        return fail(f"{name}: {path} is for ELF machine {machine}, not AArch64 (183)")
    if b"/lib/ld-linux-aarch64.so.1" not in data:
        fail(f"{name}: {path} does not load with glibc's AArch64 loader (/lib/ld-linux-aarch64.so.1)")
    # Panics must unwind (see [profile.release] in Cargo.toml). Which panic runtime was
    # linked tells: panic_unwind brings in std's handler for foreign exceptions, and
    # panic_abort leaves its source path. Sections and symbols do not tell: .eh_frame,
    # .gcc_except_table and the unwinder (zig links libunwind statically, and the binary
    # is stripped) are there either way, because the prebuilt std is built to unwind.
    # Checked by hand against a panic=abort build from cargo lambda, which this rejects.
    if b"Rust cannot catch foreign exceptions" not in data or b"/panic_abort/" in data:
        fail(f"{name}: {path} was built with panic=abort (set panic = \"unwind\" in [profile.release])")
    size = len(data)
    with tempfile.TemporaryFile() as tmp:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("bootstrap", data)
        zipped = tmp.tell()
    if size > UNZIPPED_LIMIT:
        fail(f"{name}: {path} is {size / 1048576:.1f} MB, over Lambda's 250 MB unzipped")
    print(
        f"{name:<22} {size / 1048576:7.1f} MB ({zipped / 1048576:.1f} MB zipped)  arm64 ELF, panics unwind  {path}"
    )


# --------------------------------------------------------------------------- runtime API


class RuntimeApi:
    """A stand-in for Lambda's Runtime API (2018-06-01) on 127.0.0.1: hands out one
    invocation, records what the runtime posts, and holds later `next` calls as Lambda
    holds a frozen environment's."""

    def __init__(self, event: dict, deadline_ms: int):
        self.event = json.dumps(event).encode()
        self.deadline_ms = deadline_ms
        self.calls: list[tuple[str, str, dict, bytes]] = []
        self.handed_out = False
        self.done = threading.Event()
        self.answered = threading.Event()
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _record(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                api.calls.append((self.command, self.path, headers, body))
                return body

            def _reply(self, status: int, body: bytes = b"", headers: dict | None = None):
                try:
                    self.send_response(status)
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the process was stopped while its `next` was held

            def do_GET(self):
                self._record()
                if self.path == "/2018-06-01/runtime/invocation/next" and not api.handed_out:
                    api.handed_out = True
                    return self._reply(
                        200,
                        api.event,
                        {
                            "Lambda-Runtime-Aws-Request-Id": "sam-build-check-1",
                            "Lambda-Runtime-Deadline-Ms": str(api.deadline_ms),
                            "Lambda-Runtime-Invoked-Function-Arn": "arn:aws:lambda:us-east-1:123456789012:function:sam-build-check",
                            "Lambda-Runtime-Trace-Id": "Root=1-00000000-000000000000000000000000;Sampled=0",
                        },
                    )
                api.done.wait(START_TIMEOUT)
                self._reply(500, b'{"errorMessage": "stand-in Runtime API stopped"}')

            def do_POST(self):
                self._record()
                self._reply(202, b'{"status": "OK"}')
                if "/response" in self.path or self.path.endswith("/error"):
                    api.answered.set()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host}:{port}"

    def posts(self, suffix: str) -> list[tuple[dict, bytes]]:
        return [(h, b) for m, p, h, b in self.calls if m == "POST" and p.endswith(suffix)]

    def stop(self) -> None:
        self.done.set()
        self.server.shutdown()
        self.server.server_close()


def error_type(headers: dict, body: bytes) -> str:
    """The errorType of a post to an error endpoint: its JSON body's, else its header's
    (lambda_runtime sends `unhandled` there for an invocation's error)."""
    try:
        kind = json.loads(body).get("errorType", "")
    except (ValueError, AttributeError):
        kind = ""
    return kind or headers.get("lambda-runtime-function-error-type", "")


def lambda_environment(api: RuntimeApi, function: str, memory: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "RUST_LOG")}
    return keep | {
        "AWS_LAMBDA_RUNTIME_API": api.address,
        "AWS_LAMBDA_FUNCTION_NAME": f"sam-build-check-{function}",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": memory,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/sam-build-check/{function}",
        "AWS_LAMBDA_LOG_STREAM_NAME": "sam-build-check",
        "AWS_LAMBDA_LOG_FORMAT": "JSON",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EXECUTION_ENV": "AWS_Lambda_provided.al2023",
    }


def run(cmd: list[str], env: dict, api: RuntimeApi, log: Path, until) -> int | None:
    """Runs the function until `until()` holds or it exits; returns its exit status
    (None when it was still running and was stopped)."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and proc.poll() is None and not until():
            time.sleep(0.1)
        status = proc.poll()
        if status is None:
            proc.kill()
            proc.wait()
        return status


def resolve_environment(template: dict, name: str, values: dict[str, str]) -> dict[str, str]:
    """The environment the stack gives the function: Globals and its own variables, each
    !Ref resolved to a parameter's default (or `values`)."""
    variables = dict(template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {}))
    variables |= template["Resources"][name].get("Properties", {}).get("Environment", {}).get("Variables", {})
    params = template.get("Parameters", {})
    out = {}
    for key, value in variables.items():
        if isinstance(value, dict) and "Ref" in value:
            ref = value["Ref"]
            if ref in values:
                value = values[ref]
            elif ref in params and "Default" in params[ref]:
                value = params[ref]["Default"]
            else:
                raise SystemExit(f"{name}: {key} refers to {ref}, which has no value here")
        if not isinstance(value, (str, int, float)):
            raise SystemExit(f"{name}: {key} = {value!r} cannot be resolved here")
        out[key] = str(value)
    return out


def events_for(name: str) -> dict:
    if name == "InterruptionFunction":
        # An SQS batch of one record that is not an EventBridge event: the function
        # acknowledges it (a retry cannot fix it) and answers with no batch item failure.
        return {
            "Records": [
                {
                    "messageId": "00000000-0000-0000-0000-000000000001",
                    "receiptHandle": "sam-build-check",
                    "body": "not an EventBridge event",
                    "attributes": {
                        "ApproximateReceiveCount": "1",
                        "SentTimestamp": "1764400000000",
                        "SenderId": "AIDAEXAMPLE",
                        "ApproximateFirstReceiveTimestamp": "1764400000000",
                    },
                    "messageAttributes": {},
                    "md5OfBody": "0",
                    "eventSource": "aws:sqs",
                    "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:sam-build-check",
                    "awsRegion": "us-east-1",
                }
            ]
        }
    return {
        "version": "0",
        "id": "00000000-0000-0000-0000-000000000002",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/sam-build-check"],
        "detail": {},
    }


def prepare_moto(workdir: Path) -> Path:
    """The cluster and the table in moto; a kubeconfig naming a port nobody listens on."""
    import boto3

    url = os.environ["AWS_ENDPOINT_URL"]
    eks = boto3.client("eks", endpoint_url=url, region_name="us-east-1")
    if CLUSTER not in eks.list_clusters()["clusters"]:
        eks.create_cluster(
            name=CLUSTER,
            roleArn="arn:aws:iam::123456789012:role/eks",
            resourcesVpcConfig={"subnetIds": ["subnet-1"]},
            kubernetesNetworkConfig={"serviceIpv4Cidr": "10.100.0.0/16"},
        )
    ddb = boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1")
    if TABLE not in ddb.list_tables()["TableNames"]:
        props = json.loads((ROOT / "infra" / "dynamodb-table.json").read_text())
        ddb.create_table(
            TableName=TABLE,
            AttributeDefinitions=props["AttributeDefinitions"],
            KeySchema=props["KeySchema"],
            GlobalSecondaryIndexes=props.get("GlobalSecondaryIndexes", []),
            BillingMode=props.get("BillingMode", "PAY_PER_REQUEST"),
        )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{closed}", "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": "sam-build-check"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return kubeconfig


def check_runtime(template: dict, build_dir: Path, qemu: str, sysroot: str, workdir: Path) -> None:
    kubeconfig = prepare_moto(workdir)
    values = {"ClusterName": CLUSTER, "StateTable": TABLE, "ProvisionerFunction": "sam-build-check-provisioner"}
    for name in FUNCTIONS:
        binary = build_dir / template["Resources"][name]["Properties"]["CodeUri"] / "bootstrap"
        memory = str(template["Resources"][name]["Properties"].get("MemorySize", 128))
        if not memory.isdigit():
            memory = "512"
        cmd = [qemu, "-L", sysroot, str(binary)]
        started = time.monotonic()

        # 1. No configuration: the cold start fails, and says why through the Runtime API.
        api = RuntimeApi(events_for(name), 0)
        log = workdir / f"{name}.unconfigured.log"
        try:
            status = run(cmd, lambda_environment(api, name, memory), api, log, lambda: False)
        finally:
            api.stop()
        init_errors = api.posts("/runtime/init/error")
        if status in (None, 0) or not init_errors:
            fail(f"{name}: unconfigured, expected a post to /runtime/init/error and a failure exit; exit {status}, posts {[c[1] for c in api.calls]} (log: {log})")
            print(log.read_text(errors="replace")[-3000:])
            continue
        headers, body = init_errors[0]
        kind = error_type(headers, body)
        if headers.get("lambda-runtime-function-error-type") != "Config.Missing" or b"NODEWRIGHT_CLUSTER_NAME" not in body:
            fail(f"{name}: unconfigured, init error {headers} {body[:200]!r}, expected Config.Missing naming NODEWRIGHT_CLUSTER_NAME")
        unconfigured = f"init/error {kind} (exit {status})"

        # 2. Configured as the stack configures it: cold start, next, an answer.
        env = lambda_environment(api, name, memory)
        env |= resolve_environment(template, name, values)
        env |= {
            "AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT_URL"],
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_EC2_METADATA_DISABLED": "true",
            "NODEWRIGHT_KUBECONFIG": str(kubeconfig),
        }
        # The deadline leaves the provisioner one tick (it keeps 10 s free before it).
        api = RuntimeApi(events_for(name), int(time.time() * 1000) + 10_000)
        env["AWS_LAMBDA_RUNTIME_API"] = api.address
        log = workdir / f"{name}.configured.log"
        try:
            status = run(cmd, env, api, log, api.answered.is_set)
        finally:
            api.stop()
        asked = [c for c in api.calls if c[0] == "GET" and c[1] == "/2018-06-01/runtime/invocation/next"]
        responses = api.posts("/2018-06-01/runtime/invocation/sam-build-check-1/response")
        errors = api.posts("/2018-06-01/runtime/invocation/sam-build-check-1/error")
        if api.posts("/runtime/init/error"):
            h, b = api.posts("/runtime/init/error")[0]
            fail(f"{name}: configured as the stack does, the cold start failed: {error_type(h, b)} {b[:300]!r} (log: {log})")
            continue
        if not asked or not (responses or errors):
            fail(f"{name}: configured, expected /invocation/next then an answer; exit {status}, calls {[c[:2] for c in api.calls]} (log: {log})")
            print(log.read_text(errors="replace")[-3000:])
            continue
        if responses:
            answer = f"response {responses[0][1][:120].decode(errors='replace')}"
            if name == "InterruptionFunction" and b"batchItemFailures" not in responses[0][1]:
                fail(f"{name}: answered {responses[0][1][:200]!r}, expected an SQS batch response")
        else:
            h, b = errors[0]
            message = json.loads(b).get("errorMessage", "") if b.startswith(b"{") else ""
            answer = f"error {error_type(h, b)}: {message[:100]}"
            if name == "InterruptionFunction":
                fail(f"{name}: failed the batch ({b[:300]!r}); an unreadable record is acknowledged, never retried")
        print(f"{name:<22} unconfigured: {unconfigured}; as the stack configures it: next, then {answer} ({time.monotonic() - started:.1f} s under qemu)")


# --------------------------------------------------------------------------- samconfig.toml


def check_samconfig(workdir: Path) -> None:
    from click.testing import CliRunner

    import samcli.commands.deploy.command as deploy_command
    import samcli.commands.deploy.deploy_context as deploy_context
    import samcli.commands.deploy.guided_context as guided_context
    import samcli.commands.package.package_context as package_context
    from samcli.cli.main import cli
    from samcli.commands._utils.template import get_template_parameters

    project = workdir / "project"
    project.mkdir()
    shutil.copy(ROOT / "template.yaml", project / "template.yaml")
    template_params = list(get_template_parameters(str(project / "template.yaml")))

    sent: list[dict] = []
    merge_parameters = deploy_context.DeployContext.merge_parameters

    class NoUpload:
        """In place of PackageContext: nothing is uploaded."""

        def __init__(self, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def run(self):
            pass

    class RecordChangeSet(NoUpload):
        """In place of DeployContext: records the parameters a change set would get
        (SAM's own merge: a parameter not overridden keeps the stack's previous value)."""

        def __init__(self, **kwargs):
            self.parameter_overrides = kwargs.get("parameter_overrides") or {}

        def run(self):
            from samcli.yamlhelper import yaml_parse

            template = yaml_parse((project / "template.yaml").read_text())
            merged = merge_parameters(template, dict(self.parameter_overrides))
            sent.append({p["ParameterKey"]: p.get("ParameterValue", "<previous value>") for p in merged})

    bucket = lambda profile, region: "aws-sam-cli-managed-default-samclisourcebucket-check"  # noqa: E731
    guided_context.manage_stack = bucket
    deploy_command.manage_stack = bucket
    package_context.PackageContext = NoUpload
    deploy_context.DeployContext = RecordChangeSet

    answers = {"ClusterName": "prod", "NodeRoleName": "KarpenterNodeRole-prod", "DryRun": "true"}
    lines = ["nodewright-prod", "us-east-1"]  # stack name, region
    lines += [answers.get(p, "") for p in template_params]  # every parameter, in the template's order
    lines += ["n", "y", "n", "y", "", ""]  # confirm changes, IAM roles, rollback, save, file, environment
    runner = CliRunner()
    cwd = os.getcwd()
    os.chdir(project)
    try:

        def sam(*args: str, input: str | None = None) -> dict:
            before = len(sent)
            result = runner.invoke(cli, ["deploy", *args], input=input, catch_exceptions=True)
            if result.exit_code != 0 or len(sent) != before + 1:
                raise SystemExit(f"sam deploy {' '.join(args)}: exit {result.exit_code}\n{result.output[-3000:]}\n{result.exception!r}")
            return sent[-1]

        sam("--guided", input="\n".join(lines) + "\n")
        saved = tomllib.loads((project / "samconfig.toml").read_text())["default"]["deploy"]["parameters"]
        saved_params = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', saved.get("parameter_overrides", "")))
        missing = [p for p in template_params if p not in saved_params]
        if missing:
            fail(f"samconfig.toml: `sam deploy --guided` did not save {missing}: a routine `sam deploy` would leave them to the stack's previous values")

        routine = sam()
        left = [k for k, v in routine.items() if v == "<previous value>"]
        if left:
            fail(f"a routine `sam deploy` leaves {left} to the stack's previous values instead of samconfig.toml's")
        if routine.get("DryRun") != "true" or routine.get("AdoptKarpenterNodes") != "false":
            fail(f"a routine `sam deploy` sends DryRun={routine.get('DryRun')}, AdoptKarpenterNodes={routine.get('AdoptKarpenterNodes')}, not the saved answers")

        # What the docs say to do: edit samconfig.toml.
        path = project / "samconfig.toml"
        text = path.read_text()
        text = text.replace('DryRun=\\"true\\"', 'DryRun=\\"false\\"').replace(
            'AdoptKarpenterNodes=\\"false\\"', 'AdoptKarpenterNodes=\\"true\\"'
        )
        path.write_text(text)
        edited = sam()
        if (edited.get("DryRun"), edited.get("AdoptKarpenterNodes")) != ("false", "true"):
            fail(f"after editing samconfig.toml, `sam deploy` sends DryRun={edited.get('DryRun')}, AdoptKarpenterNodes={edited.get('AdoptKarpenterNodes')}")
        if {k: v for k, v in edited.items() if k not in ("DryRun", "AdoptKarpenterNodes")} != {
            k: v for k, v in routine.items() if k not in ("DryRun", "AdoptKarpenterNodes")
        }:
            fail("editing two values of samconfig.toml changed other parameters too")

        # The trap the docs warn about: a command-line override is not saved.
        once = sam("--parameter-overrides", "DryRun=true")
        again = sam()
        if once.get("DryRun") != "true" or again.get("DryRun") != "false":
            fail(
                f"`sam deploy --parameter-overrides DryRun=true` sent {once.get('DryRun')}, the next `sam deploy` "
                f"{again.get('DryRun')}: the docs' warning no longer matches SAM"
            )
        print(
            f"samconfig.toml: `sam deploy --guided` saved all {len(template_params)} parameters; a routine `sam deploy` "
            f"sends each as saved (DryRun={routine['DryRun']}, AdoptKarpenterNodes={routine['AdoptKarpenterNodes']}), "
            f"an edit of the file is what the next deploy sends, and `--parameter-overrides DryRun=true` lasted one deploy "
            f"(the next sent DryRun={again['DryRun']} from the file)"
        )
    finally:
        os.chdir(cwd)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir", type=Path)
    parser.add_argument("--qemu")
    parser.add_argument("--sysroot")
    args = parser.parse_args()

    template = load_template(args.build_dir / "template.yaml")
    for name in FUNCTIONS:
        res = template["Resources"].get(name)
        if res is None:
            fail(f"{args.build_dir}/template.yaml: no {name}")
            continue
        arch = res["Properties"].get("Architectures") or template.get("Globals", {}).get("Function", {}).get("Architectures")
        if arch != ["arm64"]:
            fail(f"{name}: Architectures {arch}, expected [arm64]")
        binary = args.build_dir / res["Properties"]["CodeUri"] / "bootstrap"
        if not binary.is_file():
            fail(f"{name}: {binary} was not built")
            continue
        check_binary(name, binary)
    if problems:
        return 1

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if args.qemu:
            check_runtime(template, args.build_dir, args.qemu, args.sysroot, workdir)
        else:
            print("NOT RUN: no qemu-aarch64 here to run arm64 code: the functions' ELF headers were checked, not whether they start")
        check_samconfig(workdir)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
