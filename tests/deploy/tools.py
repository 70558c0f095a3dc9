"""Helpers for tests/deploy.rs. The Helm chart is linted and rendered with Helm's own Go SDK
(PyPI helm-python-sdk): the helm CLI is not installable from the registries this project uses.

    python3 tools.py lint CHART_DIR [VALUES_JSON]    # helm lint --strict; exit 1 on any finding
    python3 tools.py render CHART_DIR [VALUES_JSON]  # helm template: the manifests, as YAML
    python3 tools.py json < FILE.yaml                # YAML documents → one JSON array
"""

import json
import sys



def main() -> int:
    cmd = sys.argv[1]
    if cmd == "json":
        import yaml

        json.dump([d for d in yaml.safe_load_all(sys.stdin) if d is not None], sys.stdout)
        return 0
    import helm_python
    from helm_python import chart as helm_chart

    path = sys.argv[2]
    values = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
    if cmd == "lint":
        report = helm_chart.lint(path, values, strict=True, kube_version="v1.30.0")
        findings = [m for m in report.get("messages") or [] if m.get("severity", 0) >= 2]
        findings += [{"error": e} for e in report.get("errors") or []]
        for m in report.get("messages") or []:
            print(f"[{m.get('severity')}] {m.get('path')}: {m.get('error')}", file=sys.stderr)
        if report.get("total_charts_linted") != 1 or findings:
            print(f"lint failed: {json.dumps(report)}", file=sys.stderr)
            return 1
        print("1 chart linted, no findings")
        return 0
    if cmd == "render":
        chart = helm_python.Chart.load(path)
        manifests = chart.render(values, name="zkgate", namespace="default", is_install=True)
        for name in sorted(manifests):
            body = manifests[name].strip()
            if name.endswith(".yaml") and body:
                print(f"---\n# Source: {name}\n{body}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
