"""The three PATCH flavours the API server accepts, applied to plain JSON objects.

Called from the store's `patch` (and so from the server's PATCH handler).

- JSON merge patch (RFC 7386, `application/merge-patch+json`): maps merge, `null`
  deletes, lists are replaced whole.
- Strategic merge patch (`application/strategic-merge-patch+json`): like merge patch,
  except the lists Kubernetes tags with a merge key are merged element by element
  (containers by name, status conditions by type, ownerReferences by uid, ...),
  `$patch: delete` removes one element and `$patch: replace` replaces a map or list.
  Lists without a tag are atomic, exactly as on a real server: `spec.taints` and
  `spec.tolerations` are NOT merged by key (NodeSpec.Taints carries no patchStrategy),
  so a patch carrying one taint replaces the node's whole taint list. Custom resources
  (LeaderWorkerSet) refuse strategic merge patch with 415, as a real server does.
- JSON patch (RFC 6902, `application/json-patch+json`) via the `jsonpatch` package.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from fleetsim.kube.errors import BadRequest, Invalid, UnsupportedMediaType

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"

_PODSPEC_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
}
_CONTAINER_KEYS: dict[str, str] = {
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
}


def _merge_key(path: tuple[str, ...]) -> str | None:
    """The patchMergeKey Kubernetes declares for the list at `path`, or None (atomic).

    `path` holds map keys only (list elements add no segment), so `spec.containers.env`
    is the env list of any container.
    """
    if not path:
        return None
    last, parent = path[-1], path[:-1]
    if path == ("metadata", "ownerReferences"):
        return "uid"
    if path in (("status", "conditions"), ("status", "addresses")):
        return "type"
    if path == ("status", "containerStatuses"):
        return None
    if last in _PODSPEC_KEYS and parent and parent[-1] == "spec":
        return _PODSPEC_KEYS[last]
    if last in _CONTAINER_KEYS and len(parent) >= 1 and parent[-1] in _PODSPEC_KEYS:
        return _CONTAINER_KEYS[last]
    return None


def _merges_primitives(path: tuple[str, ...]) -> bool:
    # `finalizers` is declared patchStrategy=merge on a list of strings.
    return path == ("metadata", "finalizers")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            if key.startswith("$deleteFromPrimitiveList/"):
                field = key.split("/", 1)[1]
                result[field] = [x for x in result.get(field) or [] if x not in value]
            elif key.startswith("$setElementOrder/"):
                pass  # ordering hint only; merged order is good enough for readers
            else:
                raise BadRequest(f"unknown patch directive {key!r}")
            continue
        sub = (*path, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, sub)
        else:
            merged = strategic_merge_patch(result.get(key), value, sub)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    return result


def _merge_list(current: Any, patch: list[Any], path: tuple[str, ...]) -> list[Any]:
    current = current if isinstance(current, list) else []
    if _merges_primitives(path):
        return current + [x for x in patch if x not in current]
    key = _merge_key(path)
    if key is None:
        return [x for x in copy.deepcopy(patch) if not (isinstance(x, dict) and "$patch" in x)]
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [x for x in copy.deepcopy(patch) if not (isinstance(x, dict) and "$patch" in x)]
    out = copy.deepcopy(current)
    for element in patch:
        if not isinstance(element, dict) or key not in element:
            raise BadRequest(f"map: {element!r} does not contain declared merge key: {key}")
        idx = next(
            (i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == element[key]),
            None,
        )
        if element.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(strategic_merge_patch({}, element, path))
        else:
            out[idx] = strategic_merge_patch(out[idx], element, path)
    return out


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise BadRequest("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    try:
        patch = jsonpatch.JsonPatch(operations)
    except (jsonpatch.InvalidJsonPatch, TypeError) as exc:
        raise BadRequest(str(exc)) from exc
    try:
        return patch.apply(target)
    except jsonpatch.JsonPatchConflict as exc:
        raise Invalid(
            f"the server rejected our request due to an error in our request: {exc}"
        ) from exc
    except jsonpatch.JsonPatchException as exc:
        raise Invalid(str(exc)) from exc
    except (jsonpatch.JsonPointerException, KeyError, IndexError, TypeError) as exc:
        raise Invalid(
            f"the server rejected our request due to an error in our request: {exc}"
        ) from exc


def apply_patch(target: dict[str, Any], body: Any, content_type: str, *, custom: bool) -> Any:
    """Apply a decoded patch `body` of `content_type`; the target is not modified."""
    ctype = content_type.split(";")[0].strip().lower()
    if ctype == MERGE:
        if not isinstance(body, dict):
            raise BadRequest(
                "json: cannot unmarshal array into Go value of type map[string]interface {}"
            )
        return merge_patch(target, body)
    if ctype == STRATEGIC:
        if custom:
            raise UnsupportedMediaType(
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {JSON}, {MERGE}, {APPLY}"
            )
        if not isinstance(body, dict):
            raise BadRequest(
                "json: cannot unmarshal array into Go value of type map[string]interface {}"
            )
        return strategic_merge_patch(target, body)
    if ctype == JSON:
        return json_patch(target, body)
    raise UnsupportedMediaType(
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{JSON}, {MERGE}, {STRATEGIC}"
    )
