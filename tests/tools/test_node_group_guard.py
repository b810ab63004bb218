"""The node-group guard: a pending deletion of a group whose generation still hosts replicas stops `make up`."""

from __future__ import annotations

import json

import pytest

from tools import node_group_guard as guard

OLD, NEW = "0da3900dc4", "360e580ed6"
URN = ("urn:pulumi:prod::llm-serving::llmserving:gpu:GpuNodeGroup$aws:eks/nodeGroup:NodeGroup::"
       "gpu-p5-48xlarge-node-group")


def _state(*groups: tuple[str, bool]) -> dict:
    return {"deployment": {"resources": [
        {"urn": URN, "type": "aws:eks/nodeGroup:NodeGroup", **({"delete": True} if pending else {}),
         "outputs": {"labels": {"llm-serving/node-generation": generation}}}
        for generation, pending in groups
    ]}}


def _pods(*generations: str) -> dict:
    return {"items": [
        {"metadata": {"namespace": "llm-serving", "name": f"llama-70b-{i}"},
         "spec": {"nodeSelector": {"llm-serving/node-generation": generation}}, "status": {"phase": "Running"}}
        for i, generation in enumerate(generations)
    ]}


def test_refuses_a_pending_deletion_whose_generation_still_hosts_replicas():
    code, lines = guard.verdict(_state((OLD, True), (NEW, False)), _pods(OLD, NEW), "prod")
    assert code == 1
    assert lines[0] == (f"refused: {URN} (generation {OLD}) is pending deletion and still hosts 1 replica pod(s): "
                        "llm-serving/llama-70b-0")
    assert lines[1].startswith("Recovery, keeping the replicas: 1) `pulumi refresh --stack prod`.")


def test_allows_a_pending_deletion_once_every_replica_moved():
    assert guard.verdict(_state((OLD, True), (NEW, False)), _pods(NEW, NEW), "prod") == (
        0, [f"ok: {URN} (generation {OLD}) is pending deletion and hosts no replica"])


def test_allows_a_state_without_pending_deletions_and_refuses_blind():
    assert guard.verdict(_state((NEW, False)), None, "prod") == (0, [])
    code, lines = guard.verdict(_state((OLD, True)), None, "prod")
    assert code == 1 and "the replicas it hosts are unknown (no pods given)" in lines[0]


def test_command_reads_the_exports_and_exits_with_the_verdict(tmp_path, capsys):
    state, pods = tmp_path / "state.json", tmp_path / "pods.json"
    state.write_text(json.dumps(_state((OLD, True), (NEW, False))))
    pods.write_text(json.dumps(_pods(OLD)))
    assert guard.main([str(state), "--pods", str(pods), "--stack", "prod"]) == 1
    assert "still hosts 1 replica pod(s)" in capsys.readouterr().err
    pods.write_text("not json")
    assert guard.main([str(state), "--pods", str(pods)]) == 2


def test_a_replica_still_draining_on_the_old_generation_is_counted():
    draining = _pods(OLD)
    draining["items"][0]["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"  # Terminating: still Running
    code, lines = guard.verdict(_state((OLD, True)), draining, "prod")
    assert code == 1 and "still hosts 1 replica pod(s): llm-serving/llama-70b-0" in lines[0]


def test_without_pods_the_command_reads_the_stacks_own_cluster(tmp_path, capsys, monkeypatch):
    from stacks.preflight import session

    state = tmp_path / "state.json"
    state.write_text(json.dumps(_state((OLD, True), (NEW, False))))
    asked = []
    monkeypatch.setattr(session, "cluster_pods", lambda cluster, region: asked.append((cluster, region)) or _pods(NEW))
    monkeypatch.delenv("AWS_REGION", raising=False)
    assert guard.main([str(state), "--stack", "prod"]) == 0
    assert asked == [("llm-prod", "us-east-1")]
    assert capsys.readouterr().out == f"ok: {URN} (generation {OLD}) is pending deletion and hosts no replica\n"


def test_a_cluster_that_cannot_be_read_refuses_with_the_reason(tmp_path, capsys, monkeypatch):
    from stacks.preflight import session

    def unreachable(cluster, region):
        raise session.NoCredentials("no AWS credentials found")

    state = tmp_path / "state.json"
    state.write_text(json.dumps(_state((OLD, True))))
    monkeypatch.setattr(session, "cluster_pods", unreachable)
    assert guard.main([str(state), "--stack", "prod"]) == 1
    err = capsys.readouterr().err
    assert (f"refused: {URN} is pending deletion and the replicas it hosts are unknown (cannot list the pods of "
            "cluster llm-prod in us-east-1: no AWS credentials found)") in err
    assert "Recovery, keeping the replicas: 1) `pulumi refresh --stack prod`." in err
    assert guard.main([str(state), "--stack", "no-such-stack"]) == 1
    assert "cannot read the stack file of 'no-such-stack'" in capsys.readouterr().err


def test_no_pending_deletion_needs_no_cluster(tmp_path, monkeypatch):
    from stacks.preflight import session

    state = tmp_path / "state.json"
    state.write_text(json.dumps(_state((NEW, False))))
    monkeypatch.setattr(session, "cluster_pods", lambda *_: pytest.fail("the cluster was read"))
    assert guard.main([str(state), "--stack", "prod"]) == 0
