"""Merge, strategic-merge and JSON patch semantics, checked on plain objects."""

from __future__ import annotations

import pytest

from fleetsim.kube.errors import BadRequest, Invalid, UnsupportedMediaType
from fleetsim.kube.patch import (
    JSON,
    MERGE,
    STRATEGIC,
    apply_patch,
    merge_patch,
    strategic_merge_patch,
)

POD = {
    "metadata": {"labels": {"app": "llm", "serving": "true"}, "finalizers": ["a"]},
    "spec": {
        "containers": [
            {"name": "vllm", "image": "v1", "env": [{"name": "A", "value": "1"}]},
            {"name": "sidecar", "image": "s1"},
        ],
        "tolerations": [{"key": "x", "operator": "Exists"}],
    },
    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
}


def test_merge_patch_replaces_lists_and_null_deletes() -> None:
    out = merge_patch(
        POD, {"metadata": {"labels": {"serving": None}}, "spec": {"containers": [{"name": "only"}]}}
    )
    assert out["metadata"]["labels"] == {"app": "llm"}
    assert out["spec"]["containers"] == [{"name": "only"}]
    assert POD["metadata"]["labels"]["serving"] == "true"  # the input is untouched


def test_strategic_patch_merges_containers_by_name_and_env_by_name() -> None:
    out = strategic_merge_patch(
        POD,
        {
            "spec": {
                "containers": [
                    {"name": "vllm", "image": "v2", "env": [{"name": "B", "value": "2"}]}
                ]
            }
        },
    )
    vllm, sidecar = out["spec"]["containers"]
    assert vllm["image"] == "v2" and [e["name"] for e in vllm["env"]] == ["A", "B"]
    assert sidecar == {"name": "sidecar", "image": "s1"}


def test_strategic_patch_directives_delete_and_replace() -> None:
    out = strategic_merge_patch(
        POD, {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}
    )
    assert [c["name"] for c in out["spec"]["containers"]] == ["vllm"]
    out = strategic_merge_patch(POD, {"metadata": {"labels": {"$patch": "replace", "new": "1"}}})
    assert out["metadata"]["labels"] == {"new": "1"}
    out = strategic_merge_patch(POD, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
    assert out["metadata"]["finalizers"] == []


def test_strategic_patch_merges_finalizers_and_conditions_but_replaces_tolerations() -> None:
    out = strategic_merge_patch(
        POD,
        {
            "metadata": {"finalizers": ["b"]},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "example.com/gate", "status": "True"},
                ]
            },
            "spec": {"tolerations": [{"key": "y", "operator": "Exists"}]},
        },
    )
    assert out["metadata"]["finalizers"] == ["a", "b"]
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "False"},
        {"type": "example.com/gate", "status": "True"},
    ]
    assert out["spec"]["tolerations"] == [{"key": "y", "operator": "Exists"}]


def test_strategic_patch_element_without_its_merge_key_is_a_bad_request() -> None:
    with pytest.raises(BadRequest):
        strategic_merge_patch(POD, {"spec": {"containers": [{"image": "v3"}]}})


def test_json_patch_test_failure_is_invalid_and_a_non_list_is_bad_request() -> None:
    with pytest.raises(Invalid):
        apply_patch(
            POD, [{"op": "test", "path": "/metadata/labels/app", "value": "x"}], JSON, custom=False
        )
    with pytest.raises(BadRequest):
        apply_patch(POD, {"op": "add"}, JSON, custom=False)
    out = apply_patch(
        POD,
        [{"op": "replace", "path": "/spec/containers/0/image", "value": "v9"}],
        JSON,
        custom=False,
    )
    assert out["spec"]["containers"][0]["image"] == "v9"


def test_custom_resources_refuse_strategic_merge_patch() -> None:
    with pytest.raises(UnsupportedMediaType):
        apply_patch({}, {"spec": {}}, STRATEGIC, custom=True)
    assert apply_patch({"a": 1}, {"b": 2}, MERGE, custom=True) == {"a": 1, "b": 2}
