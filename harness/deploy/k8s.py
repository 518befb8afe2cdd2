"""Kubernetes manifests for the fleet night, rendered from the image matrix (docker/fleet/k8s-*.j2).

Per pool, one CronJob whose Indexed Job runs one pod on each of the pool's nodes, holding all the node's GPUs;
the rows that fit the pool run one after another inside that pod (the template says why). A common file holds
the results volume, the policy that gives the pods no network, and the collector's CronJob.

Every value reaches YAML through the ``q`` filter (a JSON string, which is a YAML double-quoted scalar) after
it is checked here: text with a control or line-breaking character is refused, names are made DNS-1123 labels,
and values Kubernetes expands in a container's command and env (``$(VAR)``) have their ``$`` doubled.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata

from .imagematrix import CONTAINER_UID, Matrix, MatrixError, Row
from .manifests import pool_rows, templates

CRONJOB_NAME_MAX = 52  # the CronJob controller appends 11 characters to name each Job
LABEL_MAX = 63
DEFAULT_SCHEDULE = "0 1 * * *"
DEFAULT_COLLECT_SCHEDULE = "0 7 * * *"

# What a row's init container runs. Values come from env vars and are quoted for the shell, so nothing rendered
# is ever parsed by it; the exit status goes to /status and the container exits 0, so the next row still runs.
ROW_SCRIPT = ('convbench run --no-docker --host-name "$CONVBENCH_NODE" --name-gpus-by uuid '
              '--cases "$CONVBENCH_CASES" --results /results; echo "$?" > "/status/$CONVBENCH_ROW"')
# The pod's last container: one line per row, and a failed pod when any row failed or left no status.
VERDICT_SCRIPT = ('failed=0; for row in $CONVBENCH_ROWS; do rc=missing; '
                  '[ -f "/status/$row" ] && read -r rc < "/status/$row"; '
                  'echo "convbench row $row on $CONVBENCH_NODE: exit $rc"; [ "$rc" = 0 ] || failed=1; done; '
                  'exit "$failed"')
COLLECT_SCRIPT = ('convbench collect /results --store /store/fleet.sqlite && '
                  'convbench report --store /store/fleet.sqlite --out /store/report')
assert "$(" not in ROW_SCRIPT + VERDICT_SCRIPT + COLLECT_SCRIPT  # Kubernetes would expand it; the shell reads them

_QUANTITY = re.compile(r"^(\d+(\.\d+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*?/,-]+$")
_MACRO = re.compile(r"^@(yearly|annually|monthly|weekly|daily|midnight|hourly)$")
_TIME_ZONE = re.compile(r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$")


class K8sError(MatrixError):
    """A value that cannot be placed into a manifest; one line, naming the value."""


def check_text(what: str, value) -> str:
    """``value`` as one line of text: control, format and line-breaking characters (and surrogates) refused."""
    if not isinstance(value, str):
        raise K8sError(f"{what} must be text, got {value!r}")
    bad = [ch for ch in value if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn")]
    if bad:
        raise K8sError(f"{what} holds a control or line-breaking character ({bad[0]!r}): {value!r}")
    return value


def yaml_scalar(value) -> str:
    """The ``q`` filter: a checked value as JSON, which YAML reads back as exactly that value."""
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(check_text("a value", value), ensure_ascii=False)
    if isinstance(value, dict):
        return json.dumps({check_text("a key", k): check_text(f"the value of {k!r}", v) for k, v in value.items()},
                          ensure_ascii=False)
    raise K8sError(f"cannot place {value!r} into a manifest")


def expand_escaped(value: str) -> str:
    """For a container's command, args and env values, which Kubernetes expands: ``$(x)`` stays ``$(x)``."""
    return value.replace("$", "$$")


def dns_name(text: str, limit: int = LABEL_MAX) -> str:
    """A DNS-1123 label of at most ``limit`` characters; where ``text`` is not one already, the name ends in a
    hash of ``text`` so that different texts never share a name."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if name == text and len(name) <= limit:
        return name
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{name[:limit - 9].rstrip('-')}-{digest}".lstrip("-")


def check_quantity(what: str, value: str) -> str:
    if not isinstance(value, str) or not _QUANTITY.match(value) or not re.search(r"[1-9]", value):
        raise K8sError(f"{what} must be a positive Kubernetes quantity like 4, 500m or 16Gi, got {value!r}")
    return value


def check_schedule(what: str, value: str) -> str:
    check_text(what, value)
    fields = value.split()
    if not (_MACRO.match(value) or (len(fields) == 5 and all(_CRON_FIELD.match(f) for f in fields))):
        raise K8sError(f"{what} must be five cron fields like \"0 1 * * *\" or a macro like @daily, got {value!r}")
    return value


def check_seconds(what: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise K8sError(f"{what} must be a positive number of seconds, got {value!r}")
    return value


def render_k8s(matrix: Matrix, rows: list[Row], registry: str = "", cases: str = "default",
               schedule: str = DEFAULT_SCHEDULE, time_zone: str = "", cpu: str = "4", memory: str = "16Gi",
               deadline: int = 8 * 3600, collect_schedule: str = DEFAULT_COLLECT_SCHEDULE) -> dict[str, str]:
    """{relative path: YAML text}: k8s/convbench-common.yaml and one k8s/convbench-<pool>.yaml per pool."""
    check_text("--registry", registry)
    check_text("--cases", cases)
    if not cases:
        raise K8sError("--cases must not be empty")
    check_schedule("--schedule", schedule)
    check_schedule("--collect-schedule", collect_schedule)
    if time_zone and not _TIME_ZONE.match(check_text("--time-zone", time_zone)):
        raise K8sError(f"--time-zone must be a tz database name like Europe/Berlin, got {time_zone!r}")
    check_quantity("--cpu", cpu)
    check_quantity("--memory", memory)
    check_seconds("--deadline", deadline)
    if registry and not registry.endswith("/"):
        registry += "/"

    env = templates()
    env.filters["q"] = yaml_scalar
    env.filters["kq"] = lambda v: yaml_scalar(expand_escaped(v))  # command, args, env values
    settings = dict(schedule=schedule, time_zone=time_zone, cpu=cpu, memory=memory, uid=CONTAINER_UID,
                    starting_deadline=3600, ttl=3 * 86400, tmp_size="8Gi")

    def image(row: Row) -> str:
        return f"{registry}convbench:{row.name}"

    collector = next((r for r in rows if not r.gpu), rows[0])
    files = {"k8s/convbench-common.yaml": env.get_template("k8s-common.yaml.j2").render(
        collect_image=image(collector), collect_schedule=collect_schedule, collect_script=COLLECT_SCRIPT,
        **settings)}
    names: dict[str, str] = {}
    cronjob = env.get_template("k8s-cronjob.yaml.j2")
    for pool_name, fits in pool_rows(matrix, rows).items():
        pool = matrix.pools[pool_name]
        for key, value in pool.k8s_node_selector.items():
            check_text(f"pool {pool_name}: k8s_node_selector key", key)
            check_text(f"pool {pool_name}: k8s_node_selector[{key!r}]", value)
        name = dns_name(f"convbench-{pool_name}", CRONJOB_NAME_MAX)
        if name in names.values():
            raise K8sError(f"pools {pool_name} and {next(p for p, n in names.items() if n == name)} "
                           f"would share the CronJob name {name}")
        names[pool_name] = name
        containers = [dict(name=dns_name(f"row-{r.name}"), row=r.name, image=image(r)) for r in fits]
        if len({c["name"] for c in containers}) < len(containers):
            raise K8sError(f"pool {pool_name}: two rows would share a container name")
        files[f"k8s/{name}.yaml"] = cronjob.render(
            name=name, pool=pool, pool_label=dns_name(pool_name), sm_tag="sm_" + pool.sm.replace(".", ""),
            rows=containers, row_names=" ".join(r.name for r in fits), cases=cases, deadline=deadline,
            row_script=ROW_SCRIPT, verdict_script=VERDICT_SCRIPT, **settings)
    return files
