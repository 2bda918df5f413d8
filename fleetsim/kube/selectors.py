"""Label and field selectors: parsing the query-string forms and matching objects.

Called from the store's `list` and `watch` (the `labelSelector` and `fieldSelector`
query parameters) and from controllers, which turn a workload's `spec.selector`
(matchLabels / matchExpressions) into the same `LabelSelector`.
Grammar follows apimachinery's `labels.Parse`: `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
`k notin (a,b)`, `k` (exists) and `!k` (does not exist), joined by commas.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleetsim.kube.errors import BadRequest


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        # "!=" and "notin" match objects that lack the key, as in Kubernetes.
        return value not in self.values


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements

    def __str__(self) -> str:
        parts = []
        for r in self.requirements:
            if r.op == "exists":
                parts.append(r.key)
            elif r.op == "!exists":
                parts.append(f"!{r.key}")
            elif r.op in ("in", "notin"):
                parts.append(f"{r.key} {r.op} ({','.join(r.values)})")
            else:
                parts.append(f"{r.key}{r.op}{r.values[0]}")
        return ",".join(parts)


_TOKEN = re.compile(
    r"\s*(?:(?P<neg>!)\s*(?P<nkey>[^\s,=!()]+)"
    r"|(?P<key>[^\s,=!()]+)\s*(?:(?P<op>==|=|!=)\s*(?P<val>[^\s,()]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<set>[^)]*)\)"
    r"|))\s*(?:,|$)"
)


def parse_labels(text: str | None) -> LabelSelector:
    """Parse the `labelSelector` query form; raises BadRequest like the API server."""
    if not text or not text.strip():
        return LabelSelector()
    reqs: list[Requirement] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise BadRequest(f"unable to parse requirement: invalid label selector {text!r}")
        pos = m.end()
        if m.group("neg"):
            reqs.append(Requirement(m.group("nkey"), "!exists"))
        elif m.group("op"):
            op = "!=" if m.group("op") == "!=" else "="
            reqs.append(Requirement(m.group("key"), op, (m.group("val"),)))
        elif m.group("setop"):
            values = tuple(v.strip() for v in m.group("set").split(",") if v.strip())
            if not values:
                raise BadRequest(f"unable to parse requirement: empty set in {text!r}")
            reqs.append(Requirement(m.group("key"), m.group("setop"), values))
        else:
            reqs.append(Requirement(m.group("key"), "exists"))
    return LabelSelector(tuple(reqs))


_EXPRESSION_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}


def from_spec(selector: Mapping[str, Any] | None) -> LabelSelector:
    """A workload's `spec.selector` (matchLabels + matchExpressions) as a LabelSelector."""
    if not selector:
        return LabelSelector()
    reqs = [Requirement(k, "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        op = _EXPRESSION_OPS.get(expr.get("operator", ""))
        if op is None:
            raise BadRequest(f"{expr.get('operator')!r} is not a valid label selector operator")
        reqs.append(Requirement(expr["key"], op, tuple(expr.get("values") or ())))
    return LabelSelector(tuple(reqs))


def from_map(labels: Mapping[str, str] | None) -> LabelSelector:
    """A Service's plain `spec.selector` map."""
    return LabelSelector(tuple(Requirement(k, "=", (v,)) for k, v in (labels or {}).items()))


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    op: str  # "=" or "!="
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        actual = field_value(obj, self.path)
        return (actual == self.value) == (self.op == "=")


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(r.matches(obj) for r in self.requirements)


def parse_fields(text: str | None, allowed: Sequence[str]) -> FieldSelector:
    """Parse `fieldSelector`; only `allowed` paths plus metadata name/namespace are accepted."""
    if not text or not text.strip():
        return FieldSelector()
    permitted = {"metadata.name", "metadata.namespace", *allowed}
    reqs = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"([^=!]+?)\s*(==|=|!=)\s*(.*)", part)
        if not m:
            raise BadRequest(f"invalid selector: '{text}'; can't understand '{part}'")
        path, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if path not in permitted:
            raise BadRequest(f"field label not supported: {path}")
        reqs.append(FieldRequirement(path, "!=" if op == "!=" else "=", value))
    return FieldSelector(tuple(reqs))


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string a field selector compares: missing fields read as ""."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)
