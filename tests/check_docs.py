#!/usr/bin/env python3
"""Checks that the user docs agree with what they describe, where the two can drift:

- README.md's parameter table has one row per template.yaml parameter (a row may name
  two, `A` / `B` or `A` + `B`), no row for a parameter the template lacks, and its
  default column is the template's Default (`required`: none; `empty`: "").
- Every memory size the docs recommend for `ProvisionerMemorySize` or
  `DisruptionMemorySize` (README's parameter table, docs/operations.md's sizing table) is
  one of the parameter's AllowedValues in template.yaml, so a reader can deploy what the
  docs say. A failure names the doc line at fault.
- Every environment variable template.yaml sets on the functions is in
  docs/operations.md's Settings table.
- One source for every figure: the memory sizes README.md's parameter table and
  template.yaml's parameter descriptions recommend for a cluster size are the ones
  docs/operations.md's "What to deploy" table gives for that size; every cost in bold in
  README.md is one docs/operations.md's Cost section gives; template.yaml quotes no
  measured figure (CPU-seconds, peak memory): it points to docs/operations.md.
- docs/cli.md's list of the rejection codes `disrupt` reports names every variant of
  core's `RejectCode` (shared/core/src/disruption/mod.rs), and nothing else.
- The Rust version README.md asks for is Cargo.toml's `rust-version`.
- infra/crds.md installs the Karpenter release whose CRDs the tests run against
  (tests/kube/up.sh's CRD set) and applies every CRD of that release.

Run by tests/lint.sh with the venv's python (cfn-lint provides the YAML loader that
understands !Ref/!Sub/!GetAtt). Exit status 0 when every check passes; 1 otherwise, with
one line per problem. Then, as tests/check_template.py does, it tests itself: each
deliberate breakage of a copy of the docs must be reported, so a check that silently
matches nothing cannot pass.

What counts as a recommended memory size: in README's row, each number that is not a
node count (a node count follows `~` or precedes "nodes"); in operations.md's sizing
table, the numbers of each cell of a `...MemorySize` row, leaving out what is in
parentheses (measurements) and cells that give an approximate figure ("about 2–3 GB"),
which are estimates, not settings.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

from cfnlint.decode import decode

ROOT = Path(__file__).resolve().parent.parent
DOCS = {
    "README.md": ROOT / "README.md",
    "docs/operations.md": ROOT / "docs" / "operations.md",
    "infra/crds.md": ROOT / "infra" / "crds.md",
    "Cargo.toml": ROOT / "Cargo.toml",
    "tests/kube/up.sh": ROOT / "tests" / "kube" / "up.sh",
    "template.yaml": ROOT / "template.yaml",
    "docs/cli.md": ROOT / "docs" / "cli.md",
    "shared/core/src/disruption/mod.rs": ROOT / "shared" / "core" / "src" / "disruption" / "mod.rs",
}
MEMORY_PARAMETERS = ("ProvisionerMemorySize", "DisruptionMemorySize")
# The CRDs of Karpenter v1.15 (aws/karpenter-provider-aws pkg/apis/crds, and the
# karpenter-crd chart). When the test control plane has been built, the files of the set
# tests/kube/up.sh installs are required too (target/kube/crds/<set>/).
REQUIRED_CRDS = {
    "karpenter.sh_nodepools",
    "karpenter.k8s.aws_ec2nodeclasses",
    "karpenter.sh_nodeclaims",
    "karpenter.sh_nodeoverlays",
    "autoscaling.x-k8s.io_capacitybuffers",
}
NUMBER = r"\d{1,3}(?:,\d{3})+|\d+"


def load_template(path: Path) -> dict:
    template, matches = decode(str(path))
    if matches:
        raise SystemExit(f"{path}: cannot parse: {matches}")
    return json.loads(json.dumps(template))


def table_rows(text: str, header_start: str) -> list[tuple[int, list[str]]]:
    """The rows of the first markdown table whose header line starts with
    `header_start`, as (1-based line number, cells), the separator row left out."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(header_start):
            rows = []
            for j in range(i + 2, len(lines)):
                if not lines[j].startswith("|"):
                    break
                cells = [c.strip() for c in lines[j].strip().strip("|").split("|")]
                rows.append((j + 1, cells))
            return rows
    return []


def section(text: str, heading: str) -> str:
    """The text from `heading` (a line) to the next heading of the same level."""
    level = heading.split(" ")[0] + " "
    lines = text.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        return ""
    out = []
    for line in lines[start + 1 :]:
        if line.startswith(level):
            break
        out.append(line)
    return "\n".join(out)


def to_int(number: str) -> int:
    return int(number.replace(",", ""))


def without_parentheses(cell: str) -> str:
    previous = None
    while previous != cell:
        previous, cell = cell, re.sub(r"\([^()]*\)", " ", cell)
    return cell


# --------------------------------------------------------------------------- checks


def check_parameter_table(template: dict, docs: dict[str, str]) -> list[str]:
    problems = []
    params = template.get("Parameters", {})
    rows = table_rows(docs["README.md"], "| parameter | default |")
    if not rows:
        return ["README.md: no parameter table (a header `| parameter | default | meaning |`)"]
    seen: dict[str, int] = {}
    for line, cells in rows:
        names = re.findall(r"`([A-Za-z0-9]+)`", cells[0])
        if not names:
            problems.append(f"README.md:{line}: a parameter row names no parameter: {cells[0]!r}")
        default_cell = cells[1] if len(cells) > 1 else ""
        for name in names:
            if name in seen:
                problems.append(f"README.md:{line}: parameter {name} has a second row (first at line {seen[name]})")
            seen[name] = line
            if name not in params:
                problems.append(f"README.md:{line}: {name} is not a template.yaml parameter")
                continue
            declared = params[name].get("Default")
            if default_cell == "required":
                if declared is not None:
                    problems.append(f"README.md:{line}: {name} is `required` here, but template.yaml gives it the default {declared!r}")
            elif default_cell == "empty":
                if declared != "":
                    problems.append(f"README.md:{line}: {name} defaults to empty here, to {declared!r} in template.yaml")
            else:
                written = default_cell.strip("`")
                if declared is None or written != str(declared):
                    problems.append(f"README.md:{line}: {name} defaults to {default_cell} here, to {declared!r} in template.yaml")
    for name in params:
        if name not in seen:
            problems.append(f"README.md: the parameter table has no row for template.yaml's parameter {name}")
    return problems


def recommended_sizes(docs: dict[str, str]) -> list[tuple[str, int, str, int]]:
    """(doc, line, parameter, MB) for every memory size the docs recommend."""
    found = []
    for line, cells in table_rows(docs["README.md"], "| parameter | default |"):
        for param in MEMORY_PARAMETERS:
            if f"`{param}`" in cells[0] and len(cells) > 2:
                text = without_parentheses(cells[2])
                for m in re.finditer(rf"(~?)({NUMBER})(\s*(?:-node|nodes?\b))?", text):
                    if m.group(1) or m.group(3):
                        continue  # a node count
                    found.append(("README.md", line, param, to_int(m.group(2))))
    for line, cells in table_rows(docs["docs/operations.md"], "| stack parameter |"):
        for param in MEMORY_PARAMETERS:
            if f"`{param}`" not in cells[0]:
                continue
            for cell in cells[1:]:
                text = without_parentheses(cell)
                if re.search(r"\babout\b|~|\bGB\b", text):
                    continue  # an estimate, not a setting
                for m in re.finditer(NUMBER, text):
                    found.append(("docs/operations.md", line, param, to_int(m.group(0))))
    return found


def check_memory_sizes(template: dict, docs: dict[str, str]) -> list[str]:
    problems = []
    params = template.get("Parameters", {})
    sizes = recommended_sizes(docs)
    for param in MEMORY_PARAMETERS:
        if not any(p == param for _, _, p, _ in sizes):
            problems.append(f"no recommended size found for {param} in README.md or docs/operations.md (the check reads nothing)")
    for doc, line, param, mb in sizes:
        allowed = params.get(param, {}).get("AllowedValues")
        if allowed is None:
            problems.append(f"{doc}:{line}: recommends {mb} MB for {param}, which template.yaml does not declare with AllowedValues")
        elif mb not in [int(v) for v in allowed]:
            problems.append(
                f"{doc}:{line}: recommends {mb} MB for {param}, which template.yaml's AllowedValues "
                f"{[int(v) for v in allowed]} refuse: change the doc's figure or allow the size"
            )
    return problems


def sizing_table(docs: dict[str, str]) -> dict[str, dict[int, int | None]]:
    """docs/operations.md's "What to deploy" table: parameter -> node count -> MB (None
    where the cell is an estimate or empty)."""
    text = docs["docs/operations.md"]
    header = next((l for l in text.splitlines() if l.startswith("| stack parameter |")), "")
    counts = []
    for cell in [c.strip() for c in header.strip().strip("|").split("|")][1:]:
        m = re.search(NUMBER, cell)
        counts.append(to_int(m.group(0)) if m else None)
    table: dict[str, dict[int, int | None]] = {}
    for _, cells in table_rows(text, "| stack parameter |"):
        for param in MEMORY_PARAMETERS:
            if f"`{param}`" not in cells[0]:
                continue
            sizes: dict[int, int | None] = {}
            for count, cell in zip(counts, cells[1:]):
                if count is None:
                    continue
                plain = without_parentheses(cell)
                m = re.search(NUMBER, plain)
                sizes[count] = None if (not m or re.search(r"\babout\b|~|\bGB\b", plain)) else to_int(m.group(0))
            table[param] = sizes
    return table


def check_one_source_of_figures(template: dict, docs: dict[str, str]) -> list[str]:
    problems = []
    table = sizing_table(docs)
    for param in MEMORY_PARAMETERS:
        if param not in table:
            problems.append(f"docs/operations.md: the sizing table (`| stack parameter |`) has no row for {param}")
            continue
        claims = []
        for line, cells in table_rows(docs["README.md"], "| parameter | default |"):
            if f"`{param}`" in cells[0] and len(cells) > 2:
                for m in re.finditer(rf"({NUMBER}) for ~({NUMBER})", without_parentheses(cells[2])):
                    claims.append((f"README.md:{line}", to_int(m.group(2)), to_int(m.group(1))))
        description = template.get("Parameters", {}).get(param, {}).get("Description", "")
        for m in re.finditer(rf"({NUMBER}) (?:at|up to(?: about)?) ({NUMBER})", description):
            claims.append((f"template.yaml {param}'s Description", to_int(m.group(2)), to_int(m.group(1))))
        if not claims:
            problems.append(f"no size recommended for {param} in README.md or template.yaml (the check reads nothing)")
        for where, nodes, mb in claims:
            given = table[param].get(nodes, "no column")
            if given != mb:
                problems.append(
                    f"{where}: recommends {mb} MB of {param} at {nodes:,} nodes; docs/operations.md's sizing table gives {given}"
                )
    cost = section(docs["docs/operations.md"], "## Cost")
    for m in re.finditer(r"\*\*\$([0-9.,]*[0-9])", docs["README.md"]):
        if f"**${m.group(1)}" not in cost:
            problems.append(f"README.md: costs ${m.group(1)}, a figure docs/operations.md's Cost section does not give")
    for n, line in enumerate(docs["template.yaml"].splitlines(), 1):
        if re.search(r"\d\s*CPU-s|\d\s*MB (?:peak|measured)|peak RSS (?:of )?\d", line):
            problems.append(f"template.yaml:{n}: quotes a measured figure; say it in docs/operations.md's Sizing table and point there")
    return problems


def check_rejection_codes(docs: dict[str, str]) -> list[str]:
    source = docs["shared/core/src/disruption/mod.rs"]
    enum = re.search(r"pub enum RejectCode \{(.*?)\n\}", source, re.S)
    if not enum:
        return ["shared/core/src/disruption/mod.rs: no `pub enum RejectCode` (the check reads nothing)"]
    body = re.sub(r"^\s*///.*$", "", enum.group(1), flags=re.M)
    variants = set(re.findall(r"^\s*([A-Z][A-Za-z]+),", body, re.M))
    listed_at = docs["docs/cli.md"].find("with `code` one of")
    if listed_at < 0:
        return ["docs/cli.md: no list of rejection codes (`with `code` one of ...`)"]
    paragraph = docs["docs/cli.md"][listed_at:].split("\n- ", 1)[0]
    listed = set(re.findall(r"`([A-Z][A-Za-z]+)`", paragraph))
    problems = [f"docs/cli.md: the rejection codes lack {v} (a RejectCode variant)" for v in sorted(variants - listed)]
    problems += [f"docs/cli.md: lists rejection code {c}, which RejectCode does not have" for c in sorted(listed - variants)]
    return problems


def template_variables(template: dict) -> set[str]:
    names = set(template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {}))
    for res in template.get("Resources", {}).values():
        if res.get("Type") == "AWS::Serverless::Function":
            names |= set(res.get("Properties", {}).get("Environment", {}).get("Variables", {}))
    return names


def check_settings(template: dict, docs: dict[str, str]) -> list[str]:
    documented = set(re.findall(r"NODEWRIGHT_[A-Z_]+", section(docs["docs/operations.md"], "## Settings")))
    if not documented:
        return ["docs/operations.md: no `## Settings` section naming NODEWRIGHT_ variables"]
    return [
        f"docs/operations.md: the Settings table lacks {name}, which template.yaml sets on the functions"
        for name in sorted(template_variables(template) - documented)
    ]


def check_rust_version(docs: dict[str, str]) -> list[str]:
    m = re.search(r'^rust-version\s*=\s*"([^"]+)"', docs["Cargo.toml"], re.M)
    if not m:
        return ["Cargo.toml: no rust-version"]
    wanted = m.group(1)
    problems = []
    mentions = 0
    for i, line in enumerate(docs["README.md"].splitlines(), 1):
        for v in re.finditer(r"(\d+\.\d+(?:\.\d+)?) or later", line):
            if "Rust" in line[: v.start()] or "stable" in line[: v.start()]:
                mentions += 1
                if v.group(1) != wanted:
                    problems.append(f"README.md:{i}: asks for Rust {v.group(1)}, Cargo.toml's rust-version is {wanted}")
    if not mentions:
        problems.append("README.md: names no Rust version (`Rust ... X.Y.Z or later`)")
    return problems


def check_crds(docs: dict[str, str], crd_dir: Path | None = None) -> list[str]:
    problems = []
    m = re.search(r'^exec .*--crds "[^"]*/karpenter-v(\d+\.\d+\.\d+)"', docs["tests/kube/up.sh"], re.M)
    if not m:
        return ["tests/kube/up.sh: no `exec ... --crds \".../karpenter-vX.Y.Z\"` line"]
    tested = m.group(1)
    crds_md = docs["infra/crds.md"]
    pinned = re.findall(r"^export KARPENTER_VERSION=(\S+)", crds_md, re.M)
    if pinned != [tested]:
        problems.append(
            f"infra/crds.md: installs Karpenter's CRDs at {pinned or 'no KARPENTER_VERSION'}, "
            f"the tests run against v{tested}'s (tests/kube/up.sh)"
        )
    loop = re.search(r"^for crd in (.*?); do$", crds_md, re.M | re.S)
    applied = set(loop.group(1).replace("\\", " ").split()) if loop else set()
    required = set(REQUIRED_CRDS)
    crd_dir = crd_dir if crd_dir is not None else ROOT / "target" / "kube" / "crds" / f"karpenter-v{tested}"
    if crd_dir.is_dir():
        required |= {p.stem for p in crd_dir.glob("*.yaml")}
    for crd in sorted(required - applied):
        problems.append(f"infra/crds.md: the apply loop (`for crd in ...`) skips {crd} of Karpenter v{tested}")
    return problems


def check_all(template: dict, docs: dict[str, str]) -> list[str]:
    return (
        check_parameter_table(template, docs)
        + check_memory_sizes(template, docs)
        + check_one_source_of_figures(template, docs)
        + check_rejection_codes(docs)
        + check_settings(template, docs)
        + check_rust_version(docs)
        + check_crds(docs)
    )


# --------------------------------------------------------------------------- self-test


def replace_once(docs: dict[str, str], doc: str, old: str, new: str) -> None:
    if docs[doc].count(old) < 1:
        raise AssertionError(f"self-test: {old!r} not in {doc}")
    docs[doc] = docs[doc].replace(old, new, 1)


def readme_row(docs: dict[str, str], name: str) -> str:
    for line in docs["README.md"].splitlines():
        if line.startswith(f"| `{name}`"):
            return line
    raise AssertionError(f"self-test: README.md has no row starting with `{name}`")


def readme_forgets_node_repair(t, d):
    replace_once(d, "README.md", readme_row(d, "NodeRepair") + "\n", "")


def readme_says_dry_run_by_default(t, d):
    row = readme_row(d, "DryRun")
    replace_once(d, "README.md", row, row.replace("| `false` |", "| `true` |", 1))


def readme_documents_a_parameter_the_template_lacks(t, d):
    row = readme_row(d, "LogLevel")
    replace_once(d, "README.md", row, row + "\n" + row.replace("`LogLevel`", "`LogFormat`"))


def template_gains_a_parameter(t, d):
    t["Parameters"]["MetricsNamespace"] = {"Type": "String", "Default": "nodewright"}


def operations_recommends_a_size_the_template_refuses(t, d):
    t["Parameters"]["ProvisionerMemorySize"]["AllowedValues"] = [
        v for v in t["Parameters"]["ProvisionerMemorySize"]["AllowedValues"] if int(v) != 1024
    ]


def readme_recommends_a_size_the_template_refuses(t, d):
    row = readme_row(d, "DisruptionMemorySize")
    replace_once(d, "README.md", row, re.sub(r"\| ([^|]*) \|$", r"| 1,792 for ~3,000 nodes; \1 |", row))


def operations_changes_a_size_the_readme_repeats(t, d):
    replace_once(d, "docs/operations.md", "| `ProvisionerMemorySize` | 256 (default) | 256", "| `ProvisionerMemorySize` | 256 (default) | 512")


def template_recommends_its_own_size(t, d):
    p = t["Parameters"]["DisruptionMemorySize"]
    p["Description"] = p["Description"].replace("1024 at 5,000", "1536 at 5,000")


def readme_costs_what_operations_does_not(t, d):
    m = re.search(r"\*\*\$([0-9.,]+)\*\* at 1,000", d["README.md"])
    replace_once(d, "README.md", m.group(0), "**$21.70** at 1,000")


def template_quotes_a_measurement(t, d):
    replace_once(d, "template.yaml", "      MemorySize: !Ref ProvisionerMemorySize", "      # 0.34 CPU-s a quiet minute\n      MemorySize: !Ref ProvisionerMemorySize")


def cli_forgets_a_rejection_code(t, d):
    replace_once(d, "docs/cli.md", ", `Balanced` (a `Balanced` pool's", ", (a pool's")


def settings_lose_a_variable(t, d):
    replace_once(d, "docs/operations.md", "`NODEWRIGHT_NODE_REPAIR`", "`NODE_REPAIR`")


def readme_asks_for_an_old_rust(t, d):
    m = re.search(r'rust-version\s*=\s*"([^"]+)"', d["Cargo.toml"])
    replace_once(d, "README.md", f"{m.group(1)} or later", "1.89 or later")


def crds_pinned_at_an_old_release(t, d):
    d["infra/crds.md"] = re.sub(r"^export KARPENTER_VERSION=\S+", "export KARPENTER_VERSION=1.1.1", d["infra/crds.md"], flags=re.M)


def crds_loop_skips_node_overlays(t, d):
    replace_once(d, "infra/crds.md", "karpenter.sh_nodeoverlays", "")


MUTATIONS = [
    (readme_forgets_node_repair, "no row for template.yaml's parameter NodeRepair"),
    (readme_says_dry_run_by_default, "DryRun defaults to `true` here"),
    (readme_documents_a_parameter_the_template_lacks, "LogFormat is not a template.yaml parameter"),
    (template_gains_a_parameter, "no row for template.yaml's parameter MetricsNamespace"),
    (operations_recommends_a_size_the_template_refuses, "recommends 1024 MB for ProvisionerMemorySize"),
    (readme_recommends_a_size_the_template_refuses, "recommends 1792 MB for DisruptionMemorySize"),
    (operations_changes_a_size_the_readme_repeats, "recommends 256 MB of ProvisionerMemorySize at 1,000 nodes; docs/operations.md's sizing table gives 512"),
    (template_recommends_its_own_size, "template.yaml DisruptionMemorySize's Description: recommends 1536 MB of DisruptionMemorySize at 5,000 nodes"),
    (readme_costs_what_operations_does_not, "README.md: costs $21.70"),
    (template_quotes_a_measurement, "quotes a measured figure"),
    (cli_forgets_a_rejection_code, "the rejection codes lack Balanced"),
    (settings_lose_a_variable, "the Settings table lacks NODEWRIGHT_NODE_REPAIR"),
    (readme_asks_for_an_old_rust, "asks for Rust 1.89"),
    (crds_pinned_at_an_old_release, "installs Karpenter's CRDs at ['1.1.1']"),
    (crds_loop_skips_node_overlays, "skips karpenter.sh_nodeoverlays"),
]


def self_test(template: dict, docs: dict[str, str]) -> list[str]:
    failures = []
    for mutate, expected in MUTATIONS:
        t, d = copy.deepcopy(template), dict(docs)
        try:
            mutate(t, d)
        except AssertionError as e:
            failures.append(f"{e} (the docs changed: update the self-test {mutate.__name__})")
            continue
        found = check_all(t, d)
        if not any(expected in p for p in found):
            failures.append(f"self-test: {mutate.__name__} was not caught (expected a problem containing {expected!r}; got {found})")
    return failures


def main(argv: list[str]) -> int:
    template = load_template(Path(argv[1]) if len(argv) > 1 else ROOT / "template.yaml")
    docs = {name: path.read_text() for name, path in DOCS.items()}
    problems = check_all(template, docs)
    for p in problems:
        print(f"FAIL {p}")
    failures = self_test(template, docs)
    for f in failures:
        print(f"FAIL {f}")
    if problems or failures:
        return 1
    sizes = recommended_sizes(docs)
    print(
        f"ok: README's parameter table matches template.yaml's {len(template['Parameters'])} parameters; "
        f"{len(sizes)} recommended memory sizes allowed; settings, Rust version and CRDs agree"
    )
    print(f"ok: self-test caught all {len(MUTATIONS)} deliberate breakages")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
