"""Kubernetes manifests (harness.deploy.k8s): one pod per node with all its GPUs, quoting, names, and the API schema
of two Kubernetes versions (kubernetes-validate, strict: unknown fields refused). No cluster: nothing is applied."""

from __future__ import annotations

import re

import pytest

from harness.cli import main
from harness.deploy import imagematrix, k8s

yaml = pytest.importorskip("yaml")

DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
OLD_VERSION = "1.30.0"

BASE = """
[bases.b]
tag = "convbench/base:test"
suite = "bookworm"
mirror = "http://deb.debian.org/debian"
include = ["python3"]
python = "3.11"
glibc = "2.36"
"""
ROW = """
[[row]]
name = "{name}"
base = "b"
gpu = true
cuda = "13.0"
cudnn = "9.19.0.56"
torch = "2.11.0"
onnxruntime = "onnxruntime-gpu==1.27.0"
sm = ["9.0"]
requirements = ["torch==2.11.0", "onnxruntime-gpu==1.27.0"]
"""
POOL = """
[[pool]]
name = "{pool}"
sm = "9.0"
gpus_per_node = 8
slurm_partition = "p"
{extra}
"""


def matrix_file(tmp_path, row1="r1", row2="r2", pool="h200", extra='nodes = 3\nk8s_node_selector = { "a" = "b" }'):
    path = tmp_path / "matrix.toml"
    path.write_text(BASE + ROW.format(name=row1) + ROW.format(name=row2) + POOL.format(pool=pool, extra=extra))
    return path


def docs(files, name):
    return list(yaml.safe_load_all(files[name]))


def pod_of(cronjob):
    return cronjob["spec"]["jobTemplate"]["spec"]["template"]


def unexpand(value: str) -> str:
    """What Kubernetes makes of a command or env value: `$$` is one `$`."""
    return value.replace("$$", "$")


def env_of(container):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def rendered_variants():
    m = imagematrix.load_matrix()
    rows = list(m.rows.values())
    return {"defaults": k8s.render_k8s(m, rows),
            "flags": k8s.render_k8s(m, rows, registry="reg.local/x", cases="quick", schedule="@daily",
                                    time_zone="Europe/Berlin", cpu="7500m", memory="30Gi", deadline=3600,
                                    collect_schedule="30 6 * * 1-5")}


def test_one_pod_per_node_holding_all_its_gpus_every_row_in_turn():
    m = imagematrix.load_matrix()
    files = k8s.render_k8s(m, list(m.rows.values()), registry="reg.local/x")
    assert set(files) == {"k8s/convbench-common.yaml", "k8s/convbench-p40.yaml", "k8s/convbench-a100.yaml",
                          "k8s/convbench-h200.yaml"}
    for name, pool in m.pools.items():
        (cj,) = docs(files, f"k8s/convbench-{name}.yaml")
        assert cj["kind"] == "CronJob" and cj["metadata"]["name"] == f"convbench-{name}"
        assert cj["spec"]["schedule"] == k8s.DEFAULT_SCHEDULE and "timeZone" not in cj["spec"]
        assert cj["spec"]["concurrencyPolicy"] == "Forbid" and cj["spec"]["startingDeadlineSeconds"] > 0
        job = cj["spec"]["jobTemplate"]["spec"]
        assert job["completionMode"] == "Indexed" and job["completions"] == job["parallelism"] == pool.nodes
        assert job["backoffLimitPerIndex"] == 0 and job["activeDeadlineSeconds"] > 0
        assert job["ttlSecondsAfterFinished"] > 0
        pod = pod_of(cj)
        spec = pod["spec"]
        assert spec["nodeSelector"] == pool.k8s_node_selector and spec["restartPolicy"] == "Never"
        (term,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        assert term["labelSelector"]["matchLabels"]["convbench/pool"] == name
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == imagematrix.CONTAINER_UID
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        fits = [r.name for r in m.rows.values() if r.runs_on(pool.sm)]
        inits = spec["initContainers"]
        assert [unexpand(env_of(c)["CONVBENCH_ROW"]) for c in inits] == fits  # every row, in matrix order
        for c, row in zip(inits, fits, strict=True):
            assert c["image"] == f"reg.local/x/convbench:{row}"
            res = c["resources"]
            assert res["limits"]["nvidia.com/gpu"] == pool.gpus_per_node  # the whole node
            assert res["requests"] == {"cpu": "4", "memory": "16Gi"}
            assert {k: v for k, v in res["limits"].items() if k != "nvidia.com/gpu"} == res["requests"]
            assert env_of(c)["CONVBENCH_NODE"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
            script = c["command"][2]
            assert c["command"][:2] == ["sh", "-c"]
            assert script.startswith('convbench run --no-docker --host-name "$CONVBENCH_NODE" --name-gpus-by uuid')
            assert '--results /results' in script and "--job" not in script  # the asv suite
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] is True
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
            assert {v["mountPath"] for v in c["volumeMounts"]} == {"/results", "/tmp", "/status"}
        (verdict,) = spec["containers"]
        assert "nvidia.com/gpu" not in verdict["resources"]["limits"]
        assert unexpand(env_of(verdict)["CONVBENCH_ROWS"]).split() == fits
        vols = {v["name"]: v for v in spec["volumes"]}
        assert vols["results"]["persistentVolumeClaim"]["claimName"] == "convbench-results"
        assert vols["tmp"]["emptyDir"]["sizeLimit"]
    common = docs(files, "k8s/convbench-common.yaml")
    assert [d["kind"] for d in common] == ["PersistentVolumeClaim", "PersistentVolumeClaim", "NetworkPolicy",
                                           "CronJob"]
    assert common[0]["spec"]["accessModes"] == ["ReadWriteMany"]
    policy = common[2]["spec"]
    assert policy["podSelector"] == {"matchLabels": {"app": "convbench"}} and policy["policyTypes"] == [
        "Ingress", "Egress"] and policy["ingress"] == policy["egress"] == []
    collect = pod_of(common[3])["spec"]
    assert collect["containers"][0]["command"][2].startswith("convbench collect /results --store /store/")
    assert collect["volumes"][0]["persistentVolumeClaim"] == {"claimName": "convbench-results", "readOnly": True}
    assert pod_of(common[3])["metadata"]["labels"]["app"] == "convbench"  # no network either


def test_the_scripts_are_not_expanded_by_kubernetes():
    for script in (k8s.ROW_SCRIPT, k8s.VERDICT_SCRIPT, k8s.COLLECT_SCRIPT):
        assert "$(" not in script


@pytest.mark.parametrize("version", [OLD_VERSION, "latest"])
@pytest.mark.parametrize("variant", ["defaults", "flags"])
def test_every_document_is_valid_for_the_kubernetes_api(variant, version):
    kv = pytest.importorskip("kubernetes_validate")
    version = kv.utils.latest_version() if version == "latest" else version
    files = rendered_variants()[variant]
    kinds = []
    for name in files:
        for doc in docs(files, name):
            kv.validate(doc, version, strict=True)  # raises on an unknown field, a wrong type, a missing field
            kinds.append(doc["kind"])
    assert kinds.count("CronJob") == 4 and "NetworkPolicy" in kinds


def test_the_latest_schema_is_newer_than_the_old_one():
    kv = pytest.importorskip("kubernetes_validate")
    latest = tuple(int(x) for x in kv.utils.latest_version().split("."))
    assert latest > tuple(int(x) for x in OLD_VERSION.split("."))


@pytest.mark.parametrize("break_it", ["misspelled", "wrong type", "unknown in container"])
def test_the_schema_check_catches_a_broken_document(break_it):
    kv = pytest.importorskip("kubernetes_validate")
    (cj,) = docs(rendered_variants()["defaults"], "k8s/convbench-h200.yaml")
    kv.validate(cj, OLD_VERSION, strict=True)
    spec = pod_of(cj)["spec"]
    if break_it == "misspelled":
        spec["restartPolcy"] = spec.pop("restartPolicy")
    elif break_it == "wrong type":
        cj["spec"]["jobTemplate"]["spec"]["completions"] = "two"
    else:
        spec["initContainers"][0]["securityContext"]["readOnlyRootFs"] = True
    for version in (OLD_VERSION, kv.utils.latest_version()):
        with pytest.raises(kv.ValidationError):
            kv.validate(cj, version, strict=True)


def test_hostile_values_parse_back_to_exactly_what_was_given(tmp_path):
    pool = "p" + "._-x" * 15 + "q"  # 62 characters, a matrix-valid pool name that is no DNS label
    row1, row2 = "r" * 63, "r" * 62 + "_"
    selector = {'nvidia.com/gpu.product': 'H"200\' $(x) {} : #x [a] & *b !c % @d `e\\', "k: {}": "ünï ${HOME}"}
    extra = f"nodes = 5\nk8s_node_selector = {{ {', '.join(f'{_toml(k)} = {_toml(v)}' for k, v in selector.items())} }}"
    m = imagematrix.load_matrix(matrix_file(tmp_path, row1=row1, row2=row2, pool=pool, extra=extra))
    assert m.pools[pool].k8s_node_selector == selector
    cases = 'quick"; rm -rf / #$(x) ${y} `z` {a: b} - [c] \'d\' \\e'
    registry = 'reg.local:5000/a"b\'$(c){}: #'
    files = k8s.render_k8s(m, list(m.rows.values()), registry=registry, cases=cases)
    (name,) = [n for n in files if n != "k8s/convbench-common.yaml"]
    (cj,) = docs(files, name)
    cj_name = cj["metadata"]["name"]
    assert name == f"k8s/{cj_name}.yaml" and len(cj_name) <= k8s.CRONJOB_NAME_MAX and DNS_LABEL.match(cj_name)
    label = cj["metadata"]["labels"]["convbench/pool"]
    assert len(label) <= 63 and DNS_LABEL.match(label)
    spec = pod_of(cj)["spec"]
    assert spec["nodeSelector"] == selector
    inits = spec["initContainers"]
    names = [c["name"] for c in inits]
    assert len(set(names)) == 2 and all(len(n) <= 63 and DNS_LABEL.match(n) for n in names)
    for c, row in zip(inits, (row1, row2), strict=True):
        env = env_of(c)
        assert unexpand(env["CONVBENCH_CASES"]) == cases and unexpand(env["CONVBENCH_ROW"]) == row
        assert c["image"] == f"{registry}/convbench:{row}" and unexpand(env["CONVBENCH_IMAGE"]) == c["image"]
        assert "#$$(x)" in env["CONVBENCH_CASES"]  # escaped: Kubernetes would expand a bare $(x)
        assert c["command"][2] == k8s.ROW_SCRIPT
    assert cj["spec"]["jobTemplate"]["spec"]["completions"] == 5
    common = docs(files, "k8s/convbench-common.yaml")
    assert pod_of(common[3])["spec"]["containers"][0]["image"] == f"{registry}/convbench:{row1}"
    kv = pytest.importorskip("kubernetes_validate")
    for doc in [cj, *common]:
        kv.validate(doc, OLD_VERSION, strict=True)


def _toml(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def test_names_are_dns_labels_unique_per_text():
    assert k8s.dns_name("convbench-h200") == "convbench-h200"
    seen = {k8s.dns_name(t, 52) for t in ("a.b", "a_b", "a-b", "A-B", "x" * 60, "x" * 61, "..")}
    assert len(seen) == 7 and all(len(n) <= 52 and DNS_LABEL.match(n) for n in seen)


@pytest.mark.parametrize("flag,value", [("--cases", "quick\nrm"), ("--cases", "a\rb"), ("--cases", "a\u2028b"),
                                        ("--cases", "a\x00b"), ("--cases", "a\u0085b"), ("--registry", "r\n/"),
                                        ("--schedule", "0 1 * * *\n"), ("--schedule", "every night"),
                                        ("--time-zone", "Europe/Berlin\nx"), ("--time-zone", "a b"),
                                        ("--cpu", "4; x"), ("--memory", "0"), ("--deadline", "0"),
                                        ("--collect-schedule", "* *")])
def test_the_cli_refuses_a_bad_value_in_one_line(tmp_path, capsys, flag, value):
    assert main(["images", "render", "--k8s", "--out", str(tmp_path), flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err and "Traceback" not in err, err
    assert not list(tmp_path.iterdir())


def test_a_control_character_in_the_matrix_is_refused_in_one_line(tmp_path, capsys):
    path = matrix_file(tmp_path, extra='k8s_node_selector = { "a" = "b\\nc: d" }')
    assert main(["images", "--matrix", str(path), "render", "--k8s"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "k8s_node_selector" in err, err


@pytest.mark.parametrize("nodes,ok", [("", 1), ("nodes = 4", 4), ("nodes = 0", None), ("nodes = true", None),
                                      ('nodes = "2"', None)])
def test_pool_nodes_is_a_positive_integer_defaulting_to_one(tmp_path, nodes, ok):
    path = matrix_file(tmp_path, extra=f'{nodes}\nk8s_node_selector = {{ "a" = "b" }}')
    if ok is None:
        with pytest.raises(imagematrix.MatrixError, match="nodes"):
            imagematrix.load_matrix(path)
    else:
        assert imagematrix.load_matrix(path).pools["h200"].nodes == ok


def test_render_cli_writes_the_files(tmp_path, capsys):
    assert main(["images", "render", "--k8s", "--out", str(tmp_path), "--time-zone", "Etc/UTC"]) == 0
    written = sorted(p.name for p in (tmp_path / "k8s").iterdir())
    assert written == ["convbench-a100.yaml", "convbench-common.yaml", "convbench-h200.yaml", "convbench-p40.yaml"]
    (cj,) = yaml.safe_load_all((tmp_path / "k8s" / "convbench-h200.yaml").read_text())
    assert cj["spec"]["timeZone"] == "Etc/UTC"


def test_the_pod_scripts_run_every_row_and_fail_visibly(tmp_path):
    """The init containers' and the verdict's shell lines, run by sh with a stand-in `convbench`."""
    import os
    import shutil
    import subprocess

    sh = shutil.which("sh") or pytest.skip("no sh")
    (tmp_path / "bin").mkdir()
    (tmp_path / "status").mkdir()
    fake = tmp_path / "bin" / "convbench"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_OUT.$CONVBENCH_ROW"; [ "$CONVBENCH_ROW" != bad ]\n')
    fake.chmod(0o755)
    cases = 'q"$(x) y'
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", CONVBENCH_NODE="node-1",
               CONVBENCH_CASES=cases, ARGS_OUT=str(tmp_path / "args"))
    status = str(tmp_path / "status") + "/"
    for row in ("good", "bad"):  # a failing row exits 0, so the rows after it still run
        res = subprocess.run([sh, "-c", k8s.ROW_SCRIPT.replace("/status/", status)], env=dict(env, CONVBENCH_ROW=row))
        assert res.returncode == 0
    args = (tmp_path / "args.good").read_text().splitlines()
    assert args == ["run", "--no-docker", "--host-name", "node-1", "--name-gpus-by", "uuid", "--cases", cases,
                    "--results", "/results"]
    verdict = k8s.VERDICT_SCRIPT.replace("/status/", status)
    for rows, rc in (("good", 0), ("good bad", 1), ("good never-ran", 1)):
        res = subprocess.run([sh, "-c", verdict], env=dict(env, CONVBENCH_ROWS=rows), capture_output=True, text=True)
        assert res.returncode == rc and len(res.stdout.splitlines()) == len(rows.split()), res.stdout
