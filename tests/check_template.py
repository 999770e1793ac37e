#!/usr/bin/env python3
"""Checks on template.yaml that cfn-lint and `sam validate` cannot make: least-privilege
IAM, the interruption queue's settings, the DynamoDB table staying identical to
infra/dynamodb-table.json, the alarms (each one there, each notifying AlarmTopicArn and
nothing else, each on a metric the functions really publish), the dashboard, and the
operators' read-only policy granting reads only, and each function built by `sam build`
from its own package (CodeUri), not the workspace root.

Run by tests/lint.sh with the venv's python (cfn-lint provides the YAML loader that
understands !Ref/!Sub/!GetAtt). Exit status 0 when every check passes; 1 otherwise,
with one line per problem.

The script then tests itself: it breaks copies of the template in ways each check must
catch (the TerminateInstances statement loses its tag condition, a wildcard action is
added, ...) and fails if any breakage goes unnoticed, so a check that silently matches
nothing cannot pass.

Policy documents are read in both forms the template uses: YAML statements, and JSON
strings under Fn::Sub (needed where the condition KEY contains ${ClusterName}).
Intrinsics are reduced to the ${...} text they stand for: !Ref X -> "${X}",
!GetAtt X.Arn -> "${X.Arn}", !Sub "s" -> "s". Both branches of an Fn::If are checked.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import re
import sys
from pathlib import Path

from cfnlint.decode import decode

ROOT = Path(__file__).resolve().parent.parent

CLUSTER_TAG = "kubernetes.io/cluster/${ClusterName}"
RESOURCE_TAG = f"aws:ResourceTag/{CLUSTER_TAG}"
REQUEST_TAG = f"aws:RequestTag/{CLUSTER_TAG}"
NODE_ROLE_ARN = "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/${NodeRoleName}"
CLUSTER_ARN = "arn:${AWS::Partition}:eks:${AWS::Region}:${AWS::AccountId}:cluster/${ClusterName}"
# The instance profiles nodewright manages for EC2NodeClass roles are named
# <cluster>_<hash>, as Karpenter names them.
INSTANCE_PROFILE_ARN = "arn:${AWS::Partition}:iam::${AWS::AccountId}:instance-profile/${ClusterName}_*"
# Karpenter v1.7+ creates a role's profile under this path (and records its name in the
# class's status): read, to be reused, never changed.
KARPENTER_PROFILE_ARN = "arn:${AWS::Partition}:iam::${AWS::AccountId}:instance-profile/karpenter/${AWS::Region}/${ClusterName}/*"
REGION_TAG = "topology.kubernetes.io/region"
# Instance-profile actions and the tag conditions each needs: (aws:RequestTag keys,
# aws:ResourceTag keys) that must be conditioned with StringEquals, each to the value
# Karpenter's controller policy requires.
INSTANCE_PROFILE_ACTIONS = {
    "iam:GetInstanceProfile": ((), ()),
    "iam:CreateInstanceProfile": ((CLUSTER_TAG, REGION_TAG), ()),
    "iam:TagInstanceProfile": ((CLUSTER_TAG, REGION_TAG), (CLUSTER_TAG, REGION_TAG)),
    "iam:AddRoleToInstanceProfile": ((), (CLUSTER_TAG, REGION_TAG)),
    "iam:RemoveRoleFromInstanceProfile": ((), (CLUSTER_TAG, REGION_TAG)),
    "iam:DeleteInstanceProfile": ((), (CLUSTER_TAG, REGION_TAG)),
}
TAG_VALUES = {CLUSTER_TAG: "owned", REGION_TAG: "${AWS::Region}"}
TABLE_RESOURCES = {"${StateTable.Arn}", "${StateTable.Arn}/index/*"}
DYNAMODB_ACTIONS = {
    "dynamodb:ConditionCheckItem",
    "dynamodb:DeleteItem",
    "dynamodb:DescribeTable",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
    "dynamodb:Scan",
    "dynamodb:TransactWriteItems",
    "dynamodb:UpdateItem",
}
# Parameters a template may declare without using (none today: every one is used).
UNUSED_PARAMETERS_ALLOWED: set[str] = set()
LAUNCH_ACTIONS = ("ec2:RunInstances", "ec2:CreateFleet")
# What the operators' policy may allow: reads of the table and of the DLQ's depth.
OPERATOR_ACTIONS = {
    "dynamodb:GetItem": TABLE_RESOURCES,
    "dynamodb:Query": TABLE_RESOURCES,
    "dynamodb:Scan": TABLE_RESOURCES,
    "dynamodb:DescribeTable": TABLE_RESOURCES,
    "sqs:GetQueueAttributes": {"${InterruptionDeadLetterQueue.Arn}"},
}
# The alarms the stack must have: (namespace, metric, dimension name, dimension value).
REQUIRED_ALARMS = [
    ("AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "${InterruptionDeadLetterQueue.QueueName}"),
    ("AWS/Lambda", "Errors", "FunctionName", "${ProvisionerFunction}"),
    ("AWS/Lambda", "Errors", "FunctionName", "${InterruptionFunction}"),
    ("AWS/Lambda", "Errors", "FunctionName", "${DisruptionFunction}"),
    ("nodewright", "provisioner_shortfall", "Function", "provisioner"),
    ("nodewright", "pods_pending_oldest_age_seconds", None, None),
    ("nodewright", "nodeclaims_stuck", None, None),
]
ALARM_ACTIONS = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
# Where the functions' metric names are written (as string literals).
METRIC_SOURCES = ["shared/lambda/src/metrics.rs", "functions/interruption/src/lib.rs"]


# --------------------------------------------------------------------------- loading


def load(path: Path) -> dict:
    template, matches = decode(str(path))
    if matches:
        raise SystemExit(f"{path}: cannot parse: {matches}")
    # cfn-lint's node classes subclass dict/str/list: make plain values.
    return json.loads(json.dumps(template))


def text(value) -> str | list | dict:
    """An intrinsic reduced to the ${...} text it stands for; other values unchanged."""
    if isinstance(value, dict) and len(value) == 1:
        (key, arg), = value.items()
        if key == "Fn::Sub":
            return arg if isinstance(arg, str) else arg[0]
        if key == "Ref":
            return "${" + arg + "}"
        if key == "Fn::GetAtt":
            return "${" + (arg if isinstance(arg, str) else ".".join(arg)) + "}"
    return value


def as_list(value) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def branches(value) -> list:
    """The values a property may take: both branches of Fn::If, AWS::NoValue dropped."""
    if isinstance(value, dict) and list(value) == ["Fn::If"]:
        _, yes, no = value["Fn::If"]
        return branches(yes) + branches(no)
    if value == {"Ref": "AWS::NoValue"}:
        return []
    return [value]


class PolicyDoc:
    """One policy document found in the template, with a way to write it back (used by
    the self-tests to break a copy of the template)."""

    def __init__(self, where: str, holder: dict, key: str):
        self.where, self.holder, self.key = where, holder, key
        raw = holder[key]
        self.is_sub_json = isinstance(raw, dict) and list(raw) == ["Fn::Sub"]
        if self.is_sub_json:
            sub = raw["Fn::Sub"]
            self.doc = json.loads(sub if isinstance(sub, str) else sub[0])
        else:
            self.doc = raw

    def statements(self) -> list[dict]:
        out = []
        for s in as_list(self.doc.get("Statement")):
            out.extend(branches(s))
        return out

    def save(self) -> None:
        if self.is_sub_json:
            self.holder[self.key] = {"Fn::Sub": json.dumps(self.doc, indent=2)}
        else:
            self.holder[self.key] = self.doc


def policy_docs(template: dict) -> list[PolicyDoc]:
    docs = []
    for name, res in template.get("Resources", {}).items():
        props = res.get("Properties", {})
        kind = res.get("Type")
        if kind == "AWS::IAM::Role":
            for policy in as_list(props.get("Policies")):
                for p in branches(policy):
                    docs.append(PolicyDoc(f"{name}/{p.get('PolicyName')}", p, "PolicyDocument"))
        elif kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            docs.append(PolicyDoc(name, props, "PolicyDocument"))
    return docs


def actions(stmt: dict) -> list[str]:
    return [a for a in as_list(stmt.get("Action")) if isinstance(a, str)]


def resources(stmt: dict) -> list[str]:
    return [text(r) for r in as_list(stmt.get("Resource"))]


def allows(stmt: dict, action: str) -> bool:
    """Whether the statement's Action patterns cover `action` (ec2:*, ec2:Term*, * too)."""
    return any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in actions(stmt))


def condition(stmt: dict, operator: str, key: str):
    return stmt.get("Condition", {}).get(operator, {}).get(key)


def resource_type(arn: str) -> str:
    """`instance` for arn:...:instance/*, `*` for the bare wildcard."""
    if arn == "*":
        return "*"
    last = arn.split(":")[-1]
    return last.split("/")[0]


# --------------------------------------------------------------------------- checks


def check_iam(template: dict) -> list[str]:
    problems = []
    docs = policy_docs(template)
    if not docs:
        return ["no IAM policy documents found"]
    for doc in docs:
        for i, s in enumerate(doc.statements()):
            at = f"{doc.where} statement {s.get('Sid', i)}"
            if s.get("Effect") != "Allow":
                continue
            if "NotAction" in s or "NotResource" in s:
                problems.append(f"{at}: Allow with NotAction/NotResource")
            for a in actions(s):
                if a == "*" or a.endswith(":*") or a in ("iam:*", "dynamodb:*"):
                    problems.append(f"{at}: wildcard action {a!r}")
            owned_resource = condition(s, "StringEquals", RESOURCE_TAG) == "owned"
            owned_request = condition(s, "StringEquals", REQUEST_TAG) == "owned"
            types = {resource_type(r) for r in resources(s) if isinstance(r, str)}

            for a in ("ec2:TerminateInstances", "ec2:DeleteLaunchTemplate", "ec2:RebootInstances"):
                if allows(s, a) and not owned_resource:
                    problems.append(f"{at}: allows {a} without {RESOURCE_TAG} = owned")

            if any(allows(s, a) for a in LAUNCH_ACTIONS):
                if types & {"*", "instance", "volume", "fleet"} and not owned_request:
                    problems.append(f"{at}: launches on instance/volume/fleet without {REQUEST_TAG} = owned")
                if types & {"*", "launch-template"} and not owned_resource:
                    problems.append(f"{at}: launches from launch templates without {RESOURCE_TAG} = owned")
            if allows(s, "ec2:CreateLaunchTemplate") and not owned_request:
                problems.append(f"{at}: allows ec2:CreateLaunchTemplate without {REQUEST_TAG} = owned")
            if allows(s, "ec2:CreateTags"):
                create_action = set(as_list(condition(s, "StringEquals", "ec2:CreateAction")))
                if not owned_request or not create_action or not create_action <= {
                    "RunInstances",
                    "CreateFleet",
                    "CreateLaunchTemplate",
                }:
                    problems.append(f"{at}: ec2:CreateTags must be tag-on-create only (ec2:CreateAction + {REQUEST_TAG})")

            if allows(s, "iam:PassRole"):
                if resources(s) != [NODE_ROLE_ARN]:
                    problems.append(f"{at}: iam:PassRole on {resources(s)} (only the node role is allowed)")
                passed_to = text(condition(s, "StringEquals", "iam:PassedToService") or "")
                if passed_to not in ("ec2.${AWS::URLSuffix}", "ec2.amazonaws.com"):
                    problems.append(f"{at}: iam:PassRole without iam:PassedToService = ec2")
            other_iam = [
                a for a in actions(s) if a.lower().startswith("iam:") and a != "iam:PassRole" and a not in INSTANCE_PROFILE_ACTIONS
            ]
            if other_iam:
                problems.append(f"{at}: IAM actions other than iam:PassRole and instance-profile ones: {other_iam}")
            for a, (request_keys, resource_keys) in INSTANCE_PROFILE_ACTIONS.items():
                if not allows(s, a):
                    continue
                if not doc.where.startswith("ProvisionerRole/"):
                    problems.append(f"{at}: allows {a}; only the provisioner manages instance profiles")
                readable = [INSTANCE_PROFILE_ARN, KARPENTER_PROFILE_ARN] if a == "iam:GetInstanceProfile" else [INSTANCE_PROFILE_ARN]
                if not resources(s) or not set(resources(s)) <= set(readable):
                    problems.append(f"{at}: {a} on {resources(s)} (only {' and '.join(readable)})")
                for prefix, keys in (("aws:RequestTag/", request_keys), ("aws:ResourceTag/", resource_keys)):
                    for key in keys:
                        if condition(s, "StringEquals", prefix + key) != TAG_VALUES[key]:
                            problems.append(f"{at}: allows {a} without {prefix}{key} = {TAG_VALUES[key]}")

            if allows(s, "arc-zonal-shift:GetManagedResource"):
                if not doc.where.startswith("ProvisionerRole/"):
                    problems.append(f"{at}: allows arc-zonal-shift:GetManagedResource; only the provisioner's role reads zonal shifts")
                if text(condition(s, "StringEquals", "arc-zonal-shift:ResourceIdentifier") or "") != CLUSTER_ARN:
                    problems.append(f"{at}: arc-zonal-shift:GetManagedResource without arc-zonal-shift:ResourceIdentifier = this cluster")

            ddb = [a for a in actions(s) if a.lower().startswith("dynamodb:")]
            if ddb:
                extra = set(ddb) - DYNAMODB_ACTIONS
                if extra:
                    problems.append(f"{at}: DynamoDB actions not used by nodewright: {sorted(extra)}")
                outside = [r for r in resources(s) if r not in TABLE_RESOURCES]
                if outside:
                    problems.append(f"{at}: DynamoDB access beyond the table and its indexes: {outside}")
    return problems


def check_functions(template: dict) -> list[str]:
    problems = []
    functions = {n: r for n, r in template["Resources"].items() if r.get("Type") == "AWS::Serverless::Function"}
    if not functions:
        return ["no AWS::Serverless::Function"]
    for name, res in functions.items():
        props = res.get("Properties", {})
        if "Role" not in props or "Policies" in props:
            problems.append(f"{name}: needs an explicit Role and no SAM Policies (every permission is checked here)")
        events = props.get("Events", {})
        for ev_name, ev in events.items():
            if ev.get("Type") == "SQS":
                if "ReportBatchItemFailures" not in as_list(ev.get("Properties", {}).get("FunctionResponseTypes")):
                    problems.append(f"{name}.{ev_name}: SQS event source without ReportBatchItemFailures")
        if any(ev.get("Type") in ("Schedule", "ScheduleV2") for ev in events.values()):
            if props.get("ReservedConcurrentExecutions") != 1:
                problems.append(f"{name}: scheduled function without ReservedConcurrentExecutions: 1")
        if res.get("Metadata", {}).get("BuildMethod") == "rust-cargolambda":
            problems += check_rust_package(name, props.get("CodeUri"), res["Metadata"].get("BuildProperties", {}))
    return problems


def check_rust_package(name: str, code_uri, build_properties: dict) -> list[str]:
    """`sam build` runs `cargo lambda build --release --bin <Binary>` in CodeUri. From the
    workspace root cargo unifies every member's features into the function (the
    engine's simulator, the kube crate's test control plane, tokio's test-util): CodeUri
    must be the function's own package, the one that defines the [[bin]] Binary."""
    if not isinstance(code_uri, str):
        return [f"{name}: CodeUri {code_uri!r} is not a directory of this repository"]
    manifest = ROOT / code_uri / "Cargo.toml"
    if not manifest.is_file():
        return [f"{name}: CodeUri {code_uri} has no Cargo.toml"]
    text = manifest.read_text()
    if "[package]" not in text:
        return [
            f"{name}: CodeUri {code_uri} is the workspace root: `sam build` would compile every member's "
            "features (test code) into the function; give the function's package directory"
        ]
    binary = build_properties.get("Binary")
    names = re.findall(r'^name\s*=\s*"([^"]+)"', text, re.M)
    if binary not in names:
        return [f"{name}: BuildProperties.Binary {binary!r} is not a target of {code_uri}/Cargo.toml ({names})"]
    return []


def check_queue(template: dict) -> list[str]:
    res = template["Resources"]
    queue = res.get("InterruptionQueue", {}).get("Properties")
    if queue is None:
        return ["no InterruptionQueue"]
    problems = []
    if queue.get("SqsManagedSseEnabled") is not True and "KmsMasterKeyId" not in queue:
        problems.append("InterruptionQueue: not encrypted (SqsManagedSseEnabled)")
    retention = queue.get("MessageRetentionPeriod")
    if not isinstance(retention, int) or not 300 <= retention <= 900:
        problems.append(
            f"InterruptionQueue: MessageRetentionPeriod {retention}, expected 300..900 s "
            "(a notice is useless after minutes, but every receive must fit before expiry)"
        )
    redrive = queue.get("RedrivePolicy") or {}
    receives = redrive.get("maxReceiveCount")
    if not redrive.get("deadLetterTargetArn") or not receives:
        problems.append("InterruptionQueue: no RedrivePolicy to a dead-letter queue")
    # The consumer's timeout and batching window must fit the visibility timeout (Lambda
    # refuses the mapping otherwise), and every receive must happen before the message
    # expires: an expired message is deleted, never redriven to the DLQ.
    visibility = queue.get("VisibilityTimeout", 30)
    for name, r in res.items():
        if r.get("Type") != "AWS::Serverless::Function":
            continue
        for ev in r.get("Properties", {}).get("Events", {}).values():
            p = ev.get("Properties", {})
            if ev.get("Type") == "SQS" and text(p.get("Queue")) == "${InterruptionQueue.Arn}":
                need = r["Properties"].get("Timeout", 3) + p.get("MaximumBatchingWindowInSeconds", 0)
                if visibility < need:
                    problems.append(f"InterruptionQueue: VisibilityTimeout {visibility} < {name} timeout + batching window ({need})")
    # A killed invocation's messages come back only after the visibility timeout: past
    # 90 s, a redelivered spot warning (2 minutes) leaves no time to drain the node.
    if visibility > 90:
        problems.append(
            f"InterruptionQueue: VisibilityTimeout {visibility} > 90 s: the redelivery of a spot "
            "warning whose invocation died would come too late to drain before EC2 takes the instance"
        )
    if receives and isinstance(retention, int) and receives * visibility >= retention:
        problems.append(
            f"InterruptionQueue: {receives} receives x {visibility} s visibility >= {retention} s retention: "
            "messages would expire before reaching the DLQ"
        )
    policy = res.get("InterruptionQueuePolicy", {}).get("Properties", {}).get("PolicyDocument", {})
    for s in as_list(policy.get("Statement")):
        if s.get("Effect") == "Allow":
            if as_list(s.get("Action")) != ["sqs:SendMessage"]:
                problems.append(f"InterruptionQueuePolicy: allows {s.get('Action')} (only sqs:SendMessage)")
            if text(s.get("Principal", {}).get("Service")) not in ("events.${AWS::URLSuffix}", "events.amazonaws.com"):
                problems.append("InterruptionQueuePolicy: principal other than EventBridge")
            if not s.get("Condition", {}).get("ArnEquals", {}).get("aws:SourceArn"):
                problems.append("InterruptionQueuePolicy: no aws:SourceArn condition")
    return problems


def check_rules(template: dict) -> list[str]:
    wanted = {
        ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
        ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
        ("aws.ec2", "EC2 Instance State-change Notification"),
        ("aws.health", "AWS Health Event"),
        ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
    }
    # The queue policy lets EventBridge send only for the rules it names: a rule left
    # out of it matches its events and delivers none.
    policy = template["Resources"].get("InterruptionQueuePolicy", {}).get("Properties", {}).get("PolicyDocument", {})
    allowed = {
        text(arn)
        for st in as_list(policy.get("Statement"))
        if st.get("Effect") == "Allow"
        for arn in as_list(st.get("Condition", {}).get("ArnEquals", {}).get("aws:SourceArn"))
    }
    found = set()
    problems = []
    for name, r in template["Resources"].items():
        if r.get("Type") != "AWS::Events::Rule":
            continue
        p = r.get("Properties", {})
        if not any(text(t.get("Arn")) == "${InterruptionQueue.Arn}" for t in p.get("Targets", [])):
            continue
        if "${" + name + ".Arn}" not in allowed:
            problems.append(f"{name}: targets InterruptionQueue, but InterruptionQueuePolicy does not let it send (aws:SourceArn)")
            continue
        pattern = p.get("EventPattern", {})
        for src in as_list(pattern.get("source")):
            for dt in as_list(pattern.get("detail-type")):
                found.add((src, dt))
    return problems + [f"no EventBridge rule sends {src} {dt!r} to InterruptionQueue" for src, dt in sorted(wanted - found)]


def check_table(template: dict, expected: dict | None) -> list[str]:
    table = template["Resources"].get("StateTable")
    if table is None or table.get("Type") != "AWS::DynamoDB::Table":
        return ["no StateTable (AWS::DynamoDB::Table)"]
    if expected is None:
        return []
    actual = table.get("Properties", {})
    if actual == expected:
        return []
    keys = sorted(set(actual) | set(expected))
    differ = [k for k in keys if actual.get(k) != expected.get(k)]
    return [f"StateTable Properties differ from infra/dynamodb-table.json in: {', '.join(differ)}"]


def used_names(value, out: set) -> set:
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "Ref" and isinstance(v, str):
                out.add(v)
            elif k == "Fn::Sub":
                s = v if isinstance(v, str) else v[0]
                out.update(m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", s))
                if not isinstance(v, str):
                    used_names(v[1], out)
            else:
                used_names(v, out)
    elif isinstance(value, list):
        for v in value:
            used_names(v, out)
    return out


def check_parameters(template: dict) -> list[str]:
    used = used_names({k: v for k, v in template.items() if k not in ("Parameters", "Metadata")}, set())
    unused = set(template.get("Parameters", {})) - used - UNUSED_PARAMETERS_ALLOWED
    return [f"parameter {p} is not used" for p in sorted(unused)]


def emitted_metrics() -> set[str]:
    """Every snake_case string literal of the files that publish nodewright's metrics."""
    names: set[str] = set()
    for rel in METRIC_SOURCES:
        path = ROOT / rel
        if path.exists():
            names.update(re.findall(r'"([a-z][a-z0-9_]*)"', path.read_text()))
    return names


def nodewright_metrics_in_dashboard(body: str) -> set[str]:
    return set(re.findall(r'"nodewright", "([a-z0-9_]+)"', body)) | set(re.findall(r'MetricName=\\"([a-z0-9_]+)\\"', body))


def dashboard_metrics_without_the_cluster(body: str) -> list[str]:
    """The dashboard's nodewright metrics (a metric array or a SEARCH) that do not name
    the stack's cluster."""
    missing = []
    for array in re.findall(r'\["nodewright", "[a-z0-9_]+"[^\]]*\]', body):
        if '"ClusterName", "${ClusterName}"' not in array:
            missing.append(array)
    for search in re.findall(r"SEARCH\('\{nodewright,[^']*'", body):
        if 'ClusterName=\\"${ClusterName}\\"' not in search:
            missing.append(search)
    return missing


def check_operations(template: dict, emitted: set[str] | None) -> list[str]:
    problems = []
    res = template["Resources"]
    alarms = {n: r.get("Properties", {}) for n, r in res.items() if r.get("Type") == "AWS::CloudWatch::Alarm"}
    cond = template.get("Conditions", {}).get("HasAlarmTopic")
    if cond != {"Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]}]}:
        problems.append("condition HasAlarmTopic must be AlarmTopicArn != \"\"")
    if template.get("Parameters", {}).get("AlarmTopicArn", {}).get("Default") != "":
        problems.append("parameter AlarmTopicArn must default to \"\" (no actions)")
    for ns, metric, dim, value in REQUIRED_ALARMS:
        found = [
            n
            for n, p in alarms.items()
            if p.get("Namespace") == ns
            and p.get("MetricName") == metric
            and (dim is None or any(d.get("Name") == dim and text(d.get("Value")) == value for d in p.get("Dimensions", [])))
        ]
        if not found:
            problems.append(f"no alarm on {ns} {metric}" + (f" for {dim}={value}" if dim else ""))
    for n, p in alarms.items():
        for key in ("AlarmActions", "OKActions"):
            if p.get(key) != ALARM_ACTIONS:
                problems.append(f"{n}: {key} must go to AlarmTopicArn when it is set, and nowhere else")
        for key in ("InsufficientDataActions",):
            if key in p:
                problems.append(f"{n}: {key} not expected")
        if p.get("Namespace") == "nodewright" and emitted is not None and p.get("MetricName") not in emitted:
            problems.append(f"{n}: metric {p.get('MetricName')} is not published by the functions")
        # Two stacks in one account and region publish the same names: an alarm that
        # does not select its cluster watches both.
        if p.get("Namespace") == "nodewright" and not any(
            d.get("Name") == "ClusterName" and text(d.get("Value")) == "${ClusterName}" for d in p.get("Dimensions", [])
        ):
            problems.append(f"{n}: does not select its cluster (dimension ClusterName = ClusterName)")
    dashboards = [r for r in res.values() if r.get("Type") == "AWS::CloudWatch::Dashboard"]
    if not dashboards:
        problems.append("no AWS::CloudWatch::Dashboard")
    for d in dashboards:
        body = text(d.get("Properties", {}).get("DashboardBody"))
        if not isinstance(body, str):
            problems.append("Dashboard: DashboardBody must be a Fn::Sub string")
            continue
        try:
            json.loads(re.sub(r"\$\{[^}]+\}", "x", body))
        except ValueError as e:
            problems.append(f"Dashboard: DashboardBody is not JSON: {e}")
        if emitted is not None:
            for m in sorted(nodewright_metrics_in_dashboard(body) - emitted):
                problems.append(f"Dashboard: metric {m} is not published by the functions")
        for m in dashboard_metrics_without_the_cluster(body):
            problems.append(f"Dashboard: {m} does not select its cluster (ClusterName = ${{ClusterName}})")
    policy = res.get("OperatorReadOnlyPolicy")
    if policy is None or policy.get("Type") != "AWS::IAM::ManagedPolicy":
        problems.append("no OperatorReadOnlyPolicy (AWS::IAM::ManagedPolicy)")
    else:
        doc = PolicyDoc("OperatorReadOnlyPolicy", policy["Properties"], "PolicyDocument")
        for s in doc.statements():
            for a in actions(s):
                allowed = OPERATOR_ACTIONS.get(a)
                if s.get("Effect") == "Allow" and allowed is None:
                    problems.append(f"OperatorReadOnlyPolicy: allows {a} (reads only: {sorted(OPERATOR_ACTIONS)})")
                elif s.get("Effect") == "Allow" and not set(resources(s)) <= allowed:
                    problems.append(f"OperatorReadOnlyPolicy: {a} on {resources(s)}")
        outputs = template.get("Outputs", {})
        if not any(o.get("Value") == {"Ref": "OperatorReadOnlyPolicy"} for o in outputs.values()):
            problems.append("OperatorReadOnlyPolicy: its ARN is not an output")
    return problems


def check_all(template: dict, table_json: dict | None, emitted: set[str] | None = None) -> list[str]:
    return (
        check_iam(template)
        + check_functions(template)
        + check_queue(template)
        + check_rules(template)
        + check_table(template, table_json)
        + check_parameters(template)
        + check_operations(template, emitted)
    )


# --------------------------------------------------------------------------- self-test


def find_statement(template: dict, action: str, where: str | None = None):
    for doc in policy_docs(template):
        if where and not doc.where.startswith(where):
            continue
        for s in doc.statements():
            if s.get("Effect") == "Allow" and action in actions(s):
                return doc, s
    raise AssertionError(f"self-test: no statement allows {action}")


def drop_terminate_condition(t):
    doc, s = find_statement(t, "ec2:TerminateInstances", "ProvisionerRole")
    s.pop("Condition")
    doc.save()


def reboot_any_instance(t):
    # The branch that exists only with RebootForRepair is checked too.
    doc, s = find_statement(t, "ec2:RebootInstances", "ProvisionerRole")
    s.pop("Condition")
    doc.save()


def read_every_resources_zonal_shifts(t):
    # The branch that exists only with ZonalShift is checked too.
    doc, s = find_statement(t, "arc-zonal-shift:GetManagedResource", "ProvisionerRole")
    s.pop("Condition")
    doc.save()


def terminate_with_ec2_wildcard_elsewhere(t):
    doc, s = find_statement(t, "ec2:DescribeInstances", "InterruptionRole")
    s["Action"] = ["ec2:Describe*", "ec2:Term*"]
    doc.save()


def launch_instances_without_request_tag(t):
    doc, s = find_statement(t, "ec2:RunInstances")
    s["Resource"] = as_list(s["Resource"]) + ["arn:${AWS::Partition}:ec2:${AWS::Region}:${AWS::AccountId}:instance/*"]
    doc.save()


def pass_any_role(t):
    doc, s = find_statement(t, "iam:PassRole")
    s["Resource"] = "*"
    doc.save()


def create_instance_profiles_untagged(t):
    doc, s = find_statement(t, "iam:CreateInstanceProfile")
    s.pop("Condition")
    doc.save()


def set_roles_of_any_instance_profile(t):
    doc, s = find_statement(t, "iam:AddRoleToInstanceProfile")
    del s["Condition"]["StringEquals"][RESOURCE_TAG]
    doc.save()


def tag_instance_profiles_in_any_region(t):
    doc, s = find_statement(t, "iam:TagInstanceProfile")
    del s["Condition"]["StringEquals"][f"aws:RequestTag/{REGION_TAG}"]
    doc.save()


def read_every_instance_profile(t):
    doc, s = find_statement(t, "iam:GetInstanceProfile")
    s["Resource"] = "*"
    doc.save()


def read_karpenters_profiles_of_every_cluster(t):
    doc, s = find_statement(t, "iam:GetInstanceProfile")
    s["Resource"] = [INSTANCE_PROFILE_ARN, "arn:${AWS::Partition}:iam::${AWS::AccountId}:instance-profile/karpenter/*"]
    doc.save()


def delete_instance_profiles_from_the_interruption_role(t):
    doc, s = find_statement(t, "eks:DescribeCluster", "InterruptionRole")
    s["Action"] = [s["Action"], "iam:DeleteInstanceProfile"]
    doc.save()


def add_iam_wildcard(t):
    doc, s = find_statement(t, "eks:DescribeCluster")
    s["Action"] = [s["Action"], "iam:*"]
    doc.save()


def dynamodb_on_every_table(t):
    doc, s = find_statement(t, "dynamodb:GetItem")
    s["Resource"] = as_list(s["Resource"]) + ["arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/*"]
    doc.save()


def build_from_the_workspace_root(t):
    t["Resources"]["ProvisionerFunction"]["Properties"]["CodeUri"] = "."


def forget_batch_item_failures(t):
    ev = t["Resources"]["InterruptionFunction"]["Properties"]["Events"]["Interruptions"]["Properties"]
    ev.pop("FunctionResponseTypes")


def unlimited_provisioner_concurrency(t):
    t["Resources"]["ProvisionerFunction"]["Properties"].pop("ReservedConcurrentExecutions")


def queue_without_dlq(t):
    t["Resources"]["InterruptionQueue"]["Properties"].pop("RedrivePolicy")


def redeliver_after_the_spot_deadline(t):
    t["Resources"]["InterruptionQueue"]["Properties"]["VisibilityTimeout"] = 160


def rule_the_queue_refuses(t):
    doc = t["Resources"]["InterruptionQueuePolicy"]["Properties"]["PolicyDocument"]
    arns = doc["Statement"][0]["Condition"]["ArnEquals"]["aws:SourceArn"]
    arns[:] = [a for a in arns if text(a) != "${CapacityReservationInterruptionRule.Arn}"]


def table_drifts(t):
    t["Resources"]["StateTable"]["Properties"]["TimeToLiveSpecification"]["AttributeName"] = "ttl"


def vpc_branch_wildcard(t):
    # The Fn::If branch that only exists with private subnets is checked too.
    for p in t["Resources"]["ProvisionerRole"]["Properties"]["Policies"]:
        if isinstance(p, dict) and p.get("Fn::If", [None])[0] == "UseVpc":
            p["Fn::If"][1]["PolicyDocument"]["Statement"][0]["Action"].append("*")
            return
    raise AssertionError("self-test: no conditional policy")


def dlq_alarm_gone(t):
    del t["Resources"]["DeadLetterQueueAlarm"]


def disruption_errors_unwatched(t):
    del t["Resources"]["DisruptionErrorsAlarm"]


def alarm_notifies_a_fixed_topic(t):
    t["Resources"]["ProvisionerShortfallAlarm"]["Properties"]["AlarmActions"] = ["arn:aws:sns:us-east-1:123456789012:ops"]


def alarm_on_a_metric_nobody_publishes(t):
    t["Resources"]["ClaimStuckAlarm"]["Properties"]["MetricName"] = "claims_stuck"


def dashboard_on_a_metric_nobody_publishes(t):
    d = t["Resources"]["Dashboard"]["Properties"]
    d["DashboardBody"] = {"Fn::Sub": text(d["DashboardBody"]).replace('"cluster_cost_per_hour"', '"cost_per_hour"')}


def alarm_on_every_clusters_metric(t):
    dims = t["Resources"]["ProvisionerShortfallAlarm"]["Properties"]["Dimensions"]
    dims[:] = [d for d in dims if d["Name"] != "ClusterName"]


def dashboard_on_every_clusters_cost(t):
    d = t["Resources"]["Dashboard"]["Properties"]
    d["DashboardBody"] = {
        "Fn::Sub": text(d["DashboardBody"]).replace(
            '["nodewright", "cluster_cost_per_hour", "ClusterName", "${ClusterName}"]', '["nodewright", "cluster_cost_per_hour"]'
        )
    }


def dashboard_searches_every_cluster(t):
    d = t["Resources"]["Dashboard"]["Properties"]
    d["DashboardBody"] = {"Fn::Sub": text(d["DashboardBody"]).replace(' ClusterName=\\"${ClusterName}\\"', "", 1)}


def operator_policy_writes(t):
    doc, s = find_statement(t, "dynamodb:DescribeTable", "OperatorReadOnlyPolicy")
    s["Action"] = as_list(s["Action"]) + ["dynamodb:PutItem"]
    doc.save()


def operator_policy_reads_every_queue(t):
    doc, s = find_statement(t, "sqs:GetQueueAttributes", "OperatorReadOnlyPolicy")
    s["Resource"] = "*"
    doc.save()


MUTATIONS = [
    (drop_terminate_condition, "ec2:TerminateInstances without"),
    (terminate_with_ec2_wildcard_elsewhere, "ec2:TerminateInstances without"),
    (reboot_any_instance, "ec2:RebootInstances without"),
    (read_every_resources_zonal_shifts, "arc-zonal-shift:GetManagedResource without"),
    (launch_instances_without_request_tag, "launches on instance/volume/fleet without"),
    (pass_any_role, "iam:PassRole on"),
    (create_instance_profiles_untagged, f"allows iam:CreateInstanceProfile without {REQUEST_TAG} = owned"),
    (set_roles_of_any_instance_profile, f"allows iam:AddRoleToInstanceProfile without {RESOURCE_TAG} = owned"),
    (tag_instance_profiles_in_any_region, f"allows iam:TagInstanceProfile without aws:RequestTag/{REGION_TAG}"),
    (read_every_instance_profile, "iam:GetInstanceProfile on ['*']"),
    (read_karpenters_profiles_of_every_cluster, "instance-profile/karpenter/*'] (only"),
    (delete_instance_profiles_from_the_interruption_role, "only the provisioner manages instance profiles"),
    (add_iam_wildcard, "wildcard action 'iam:*'"),
    (dynamodb_on_every_table, "DynamoDB access beyond the table"),
    (build_from_the_workspace_root, "ProvisionerFunction: CodeUri . is the workspace root"),
    (forget_batch_item_failures, "without ReportBatchItemFailures"),
    (unlimited_provisioner_concurrency, "without ReservedConcurrentExecutions"),
    (queue_without_dlq, "no RedrivePolicy"),
    (redeliver_after_the_spot_deadline, "VisibilityTimeout 160 > 90 s"),
    (rule_the_queue_refuses, "CapacityReservationInterruptionRule: targets InterruptionQueue, but InterruptionQueuePolicy does not let it send"),
    (table_drifts, "differ from infra/dynamodb-table.json in: TimeToLiveSpecification"),
    (vpc_branch_wildcard, "wildcard action '*'"),
    (dlq_alarm_gone, "no alarm on AWS/SQS ApproximateNumberOfMessagesVisible"),
    (disruption_errors_unwatched, "no alarm on AWS/Lambda Errors for FunctionName=${DisruptionFunction}"),
    (alarm_notifies_a_fixed_topic, "ProvisionerShortfallAlarm: AlarmActions must go to AlarmTopicArn"),
    (alarm_on_a_metric_nobody_publishes, "ClaimStuckAlarm: metric claims_stuck is not published"),
    (dashboard_on_a_metric_nobody_publishes, "Dashboard: metric cost_per_hour is not published"),
    (alarm_on_every_clusters_metric, "ProvisionerShortfallAlarm: does not select its cluster"),
    (dashboard_on_every_clusters_cost, 'Dashboard: ["nodewright", "cluster_cost_per_hour"] does not select its cluster'),
    (dashboard_searches_every_cluster, "Dashboard: SEARCH('{nodewright,ClusterName,state}"),
    (operator_policy_writes, "OperatorReadOnlyPolicy: allows dynamodb:PutItem"),
    (operator_policy_reads_every_queue, "OperatorReadOnlyPolicy: sqs:GetQueueAttributes on ['*']"),
]


def self_test(template: dict, emitted: set[str]) -> list[str]:
    """Each mutation of a copy must be reported, with the expected message."""
    failures = []
    # The table check is exercised against the template's own table, so it is tested
    # even before infra/dynamodb-table.json exists in this checkout.
    own_table = copy.deepcopy(template["Resources"]["StateTable"]["Properties"])
    for mutate, expected in MUTATIONS:
        broken = copy.deepcopy(template)
        mutate(broken)
        found = check_all(broken, own_table, emitted)
        if not any(expected in p for p in found):
            failures.append(f"self-test: {mutate.__name__} was not caught (expected a problem containing {expected!r}; got {found})")
    return failures


def main(argv: list[str]) -> int:
    path = Path(argv[1]) if len(argv) > 1 else ROOT / "template.yaml"
    table_path = ROOT / "infra" / "dynamodb-table.json"
    template = load(path)
    table_json = json.loads(table_path.read_text()) if table_path.exists() else None

    emitted = emitted_metrics()
    problems = check_all(template, table_json, emitted)
    for p in problems:
        print(f"FAIL {p}")
    failures = self_test(template, emitted)
    for f in failures:
        print(f"FAIL {f}")
    if problems or failures:
        return 1
    statements = sum(len(d.statements()) for d in policy_docs(template))
    table_note = "compared with infra/dynamodb-table.json" if table_json is not None else "infra/dynamodb-table.json absent: not compared"
    print(f"ok: {statements} IAM statements in {len(policy_docs(template))} policy documents checked; table {table_note}")
    print(f"ok: self-test caught all {len(MUTATIONS)} deliberate breakages")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
