"""The HTTP API with the Kafka listeners' users and ACLs (issue 17, point 7): with
--http-authentication basic,bearer, requests need a SCRAM user's password (HTTP Basic)
or an OAUTHBEARER JWT (Bearer), else 401 with WWW-Authenticate; with --authorizer acl
each endpoint needs what its Kafka counterpart needs (403 with the Kafka error name),
listings show what the caller may describe, and the audit log names the principal.
The `strata` CLI passes --user (password from STRATA_PASSWORD) or --token.
"""

from __future__ import annotations

import base64
import os
import subprocess

import pytest
import requests
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from conftest import strata_bin
from strata_testlib import wait_until
from test_oauth import SigningKey, start_oauth_broker
from test_sasl import add_users

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


def basic(user: str, password: str | None = None) -> dict:
    pair = f"{user}:{USERS[user] if password is None else password}".encode()
    return {"Authorization": "Basic " + base64.b64encode(pair).decode()}


@pytest.fixture
def secured(broker_factory, tmp_path):
    key = SigningKey("rsa-http")
    b = start_oauth_broker(broker_factory, tmp_path, [key],
                           "--http-authentication", "basic,bearer",
                           "--authorizer", "acl",
                           "--super-users", "User:admin;User:ANONYMOUS")
    add_users(b.plaintext, USERS, iterations=4096)
    admin = AdminClient({"bootstrap.servers": b.plaintext})
    bindings = [
        AclBinding(ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED, "User:alice", "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED, "User:alice", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, "alice-g", ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "svc-", ResourcePatternType.PREFIXED, "User:svc-orders", "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(15)
    return b, key


def test_credentials_are_required_and_checked(secured):
    b, key = secured
    url = b.http_url
    # Open endpoints stay open: probes and scrapers carry no credentials.
    for path in ("/healthz", "/readyz", "/metrics", "/v1/openapi.json"):
        assert requests.get(url + path, timeout=10).status_code == 200, path
    r = requests.get(url + "/v1/topics", timeout=10)
    assert r.status_code == 401
    assert "Basic" in r.headers["WWW-Authenticate"] and "Bearer" in r.headers["WWW-Authenticate"]
    assert r.json()["kafka_error"] == "SASL_AUTHENTICATION_FAILED"
    for headers in (basic("alice", "wrong"),
                    {"Authorization": "Basic " + base64.b64encode(b"nobody:x").decode()},
                    {"Authorization": "Basic !!!"},
                    {"Authorization": "Bearer not-a-jwt"},
                    {"Authorization": "Bearer " + key.token(lifetime=-120)},
                    {"Authorization": "Digest abc"}):
        r = requests.get(url + "/v1/topics", headers=headers, timeout=10)
        assert r.status_code == 401, (headers, r.text)
    assert requests.get(url + "/v1/topics", headers=basic("alice"), timeout=10).status_code == 200
    token = {"Authorization": "Bearer " + key.token(sub="svc-orders")}
    assert requests.get(url + "/v1/topics", headers=token, timeout=10).status_code == 200


def test_each_endpoint_needs_what_its_kafka_counterpart_needs(secured):
    b, key = secured
    url = b.http_url
    admin_h = basic("admin")
    for topic in ("alice-orders", "secret"):
        r = requests.post(url + "/v1/topics", json={"name": topic, "partitions": 1}, headers=admin_h, timeout=15)
        assert r.status_code == 201, r.text

    # alice writes and reads her topic through the HTTP API, in her group.
    r = requests.post(url + "/v1/topics/alice-orders/produce",
                      json={"messages": [{"value": "a"}, {"value": "b"}]}, headers=basic("alice"), timeout=15)
    assert r.status_code == 200, r.text
    r = requests.post(url + "/v1/topics/alice-orders/consume",
                      json={"group_id": "alice-g", "auto_offset_reset": "earliest", "timeout_ms": 5000},
                      headers=basic("alice"), timeout=30, allow_redirects=True)
    assert r.status_code == 200, r.text
    assert [m["value"] for m in r.json()["messages"]] == ["a", "b"]

    def refused(method: str, path: str, user: str, kafka_error: str, **kw):
        r = requests.request(method, url + path, headers=basic(user), timeout=15, **kw)
        assert r.status_code == 403, (method, path, user, r.status_code, r.text)
        assert r.json()["kafka_error"] == kafka_error, r.text

    refused("POST", "/v1/topics/secret/produce", "alice", "TOPIC_AUTHORIZATION_FAILED",
            json={"messages": [{"value": "x"}]})
    refused("POST", "/v1/topics/alice-orders/consume", "alice", "GROUP_AUTHORIZATION_FAILED",
            json={"group_id": "other-group"})
    refused("POST", "/v1/topics/alice-orders/produce", "bob", "TOPIC_AUTHORIZATION_FAILED",
            json={"messages": [{"value": "x"}]})
    refused("GET", "/v1/topics/secret", "alice", "TOPIC_AUTHORIZATION_FAILED")
    refused("DELETE", "/v1/topics/alice-orders", "alice", "TOPIC_AUTHORIZATION_FAILED")
    refused("PATCH", "/v1/topics/alice-orders/configs", "alice", "TOPIC_AUTHORIZATION_FAILED",
            json={"set": {"retention.ms": "1000"}})
    refused("POST", "/v1/topics", "alice", "TOPIC_AUTHORIZATION_FAILED", json={"name": "alice-new"})
    refused("POST", "/v1/topics/alice-orders/partitions/0/disable", "alice",
            "CLUSTER_AUTHORIZATION_FAILED", json={"reason": "no"})
    refused("GET", "/v1/audit", "bob", "CLUSTER_AUTHORIZATION_FAILED")
    # Groups: the group service decides, as for Kafka's group APIs. Moving a group's
    # offsets commits them, which needs READ on the topic too (as OffsetCommit does).
    refused("GET", "/v1/groups/alice-g", "bob", "GROUP_AUTHORIZATION_FAILED")
    refused("DELETE", "/v1/groups/alice-g", "alice", "GROUP_AUTHORIZATION_FAILED")
    refused("POST", "/v1/groups/alice-g/offsets", "alice", "TOPIC_AUTHORIZATION_FAILED",
            json={"topic": "secret", "to": "earliest"})
    described = requests.get(url + "/v1/groups/alice-g", headers=basic("alice"), timeout=10)
    assert described.status_code == 200, described.text

    # Listings show what the caller may describe.
    listed = requests.get(url + "/v1/topics", headers=basic("alice"), timeout=10).json()["topics"]
    assert [t["name"] for t in listed] == ["alice-orders"]
    assert requests.get(url + "/v1/topics", headers=basic("bob"), timeout=10).json()["topics"] == []
    everything = requests.get(url + "/v1/topics", headers=admin_h, timeout=10).json()["topics"]
    assert sorted(t["name"] for t in everything) == ["alice-orders", "secret"]

    # A bearer token's subject is the principal, with its own ACLs.
    token = {"Authorization": "Bearer " + key.token(sub="svc-orders")}
    r = requests.post(url + "/v1/topics", json={"name": "svc-in", "partitions": 1}, headers=admin_h, timeout=15)
    assert r.status_code == 201
    r = requests.post(url + "/v1/topics/svc-in/produce", json={"messages": [{"value": "t"}]},
                      headers=token, timeout=15)
    assert r.status_code == 200, r.text

    # Nothing a refusal asked for happened, and the audit names who asked.
    assert requests.get(url + "/v1/topics/alice-orders", headers=admin_h, timeout=10).status_code == 200
    entries = requests.get(url + "/v1/audit?limit=100", headers=admin_h, timeout=10).json()["entries"]
    created = [e for e in entries if e["action"] == "topic.create"]
    assert {e["principal"] for e in created if e["ok"]} == {"User:admin"}
    assert any(e["principal"] == "User:alice" and not e["ok"] and "may not CREATE" in str(e["outcome"])
               for e in created), created
    deleted = [e for e in entries if e["action"] == "group.delete"]
    assert [(e["principal"], e["resource"], e["ok"], e["via"]) for e in deleted] == [
        ("User:alice", "group:alice-g", False, "http")], deleted
    assert deleted[0]["outcome"].startswith("GROUP_AUTHORIZATION_FAILED"), deleted

    # Producing to a topic that does not exist would create it: that needs CREATE, as a
    # Kafka producer's Metadata request does. alice may write alice-* but not create.
    refused("POST", "/v1/topics/alice-new/produce", "alice", "TOPIC_AUTHORIZATION_FAILED",
            json={"messages": [{"value": "x"}]})
    assert requests.get(url + "/v1/topics/alice-new", headers=admin_h, timeout=10).status_code == 404
    admin = AdminClient({"bootstrap.servers": b.plaintext})
    grant = AclBinding(ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED, "User:alice",
                       "*", AclOperation.CREATE, AclPermissionType.ALLOW)
    for f in admin.create_acls([grant]).values():
        f.result(15)
    wait_until(lambda: requests.post(url + "/v1/topics/alice-new/produce",
                                     json={"messages": [{"value": "x"}]}, headers=basic("alice"),
                                     timeout=15).status_code == 200,
               15, "alice's produce creating alice-new once she may create it")


def test_the_cli_passes_credentials(secured):
    b, _key = secured
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    cmd = [str(strata_bin()), "topics", "list", "--http", b.http_url, "-o", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in r.stderr, r.stderr
    r = subprocess.run(cmd + ["--user", "alice"], capture_output=True, text=True, timeout=30,
                       env={**env, "STRATA_PASSWORD": USERS["alice"]})
    assert r.returncode == 0, r.stderr
    r = subprocess.run(cmd + ["--user", "alice"], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode != 0 and "STRATA_PASSWORD" in r.stderr, r.stderr
