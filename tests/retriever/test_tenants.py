"""Tenants open on demand, at most ``max_open`` at once (least recently used
closed first, nothing acknowledged lost, folder lock and files released), and
at most ``max_tenants`` folders are ever created."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fakes import CONFIG, HashEmbedder, KeywordScorer  # noqa: E402

from earm_jax.retriever.tenants import TenantLimitError, TenantRetrievers  # noqa: E402
from earm_jax.store.lock import FolderLock  # noqa: E402


def _open_files_under(folder: Path) -> set[Path]:
    """The files under ``folder`` this process holds open (Linux)."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
        if folder in target.parents:
            held.add(target)
    return held


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
def test_least_recently_used_tenant_closes_and_keeps_its_writes(tmp_path):
    with TenantRetrievers(
        tmp_path, KeywordScorer(), HashEmbedder(), CONFIG, max_open=2
    ) as tenants:
        tenants["alice"].add(["Alice plays chess."], ids=["a1"])
        tenants["bob"].add(["Bob swims."], ids=["b1"])
        tenants["alice"].query("Who plays chess?")  # alice is now the most recent
        tenants["carol"].add(["Carol paints."], ids=["c1"])
        assert tenants.open_tenants() == ["alice", "carol"]
        # bob is closed: its lock and files are released, so another owner
        # (here a lock taken by hand) can take the folder.
        held = {p.parent.name for p in _open_files_under(tmp_path)}
        assert held == {"alice", "carol"}
        FolderLock(tmp_path / "bob").release()
        # ... and it reopens with its acknowledged write.
        assert tenants["bob"].get(["b1"])[0].text == "Bob swims."
        assert tenants.open_tenants() == ["carol", "bob"]
        assert tenants["alice"].get(["a1"])[0].text == "Alice plays chess."


def test_a_leased_tenant_stays_open_past_the_cap(tmp_path):
    with TenantRetrievers(
        tmp_path, KeywordScorer(), HashEmbedder(), CONFIG, max_open=1
    ) as tenants:
        with tenants.lease("alice") as alice:
            with tenants.lease("bob") as bob:
                assert tenants.open_tenants() == ["alice", "bob"]
                alice.add(["still open"], ids=["a"])
                bob.add(["also open"], ids=["b"])
            assert tenants.open_tenants() == ["alice"]  # bob, unheld, closed
        assert tenants.open_tenants() == ["alice"]
        assert tenants["bob"].get(["b"])[0].text == "also open"


def test_no_folder_past_max_tenants(tmp_path):
    (tmp_path / "stray").mkdir()  # not a tenant: no journal
    with TenantRetrievers(
        tmp_path, KeywordScorer(), HashEmbedder(), CONFIG, max_open=1, max_tenants=2
    ) as tenants:
        tenants.get("alice")
        tenants.get("bob")
        for name in ["carol", "dave"]:
            with pytest.raises(TenantLimitError, match="max_tenants=2"):
                tenants.get(name)
        assert not (tmp_path / "carol").exists()
        assert tenants.tenants() == ["alice", "bob"]
        tenants.get("alice")  # existing tenants still open
    # A new process (here: a new table) counts the folders already on disk.
    with TenantRetrievers(
        tmp_path, KeywordScorer(), HashEmbedder(), CONFIG, max_tenants=2
    ) as tenants:
        with pytest.raises(TenantLimitError):
            tenants.get("carol")
        assert tenants.get("bob") is not None


def test_caps_are_checked(tmp_path):
    for bad in [0, -1, 1.5, True]:
        with pytest.raises(ValueError, match="max_open"):
            TenantRetrievers(tmp_path, KeywordScorer(), HashEmbedder(), max_open=bad)


def test_runtime_options_reach_every_tenant_over_its_stored_settings(tmp_path):
    import dataclasses

    paper = dataclasses.replace(CONFIG, query_retention="keep")
    with TenantRetrievers(tmp_path, KeywordScorer(), HashEmbedder(), paper) as tenants:
        tenants["alice"].add(["Alice plays chess."])
    best = dataclasses.replace(CONFIG, preset="best")
    with TenantRetrievers(
        tmp_path,
        KeywordScorer(),
        HashEmbedder(),
        runtime={"query_retention": "none", "top_k": 2},
    ) as tenants:
        # An existing tenant keeps the settings it was created with.
        alice = tenants["alice"].config
        assert alice.preset == "paper" and alice.rank == CONFIG.rank
        assert (alice.query_retention, alice.top_k) == ("none", 2)
    # Recorded: the next open without options keeps them.
    with TenantRetrievers(tmp_path, KeywordScorer(), HashEmbedder()) as tenants:
        assert tenants["alice"].config.query_retention == "none"
    # With a config too: its settings, the options over its runtime ones.
    with TenantRetrievers(
        tmp_path / "other",
        KeywordScorer(),
        HashEmbedder(),
        best,
        runtime={"query_retention": "keep"},
    ) as tenants:
        bob = tenants["bob"].config
        assert bob.preset == "best" and bob.query_retention == "keep"
    for runtime, says in [
        ({"rank": 3}, "not rank"),
        ({"query_retention": "forever"}, "query_retention must be one of"),
    ]:
        with pytest.raises(ValueError, match=says):
            TenantRetrievers(tmp_path, KeywordScorer(), HashEmbedder(), runtime=runtime)
    learned = dataclasses.replace(CONFIG, preset="learned_calls")
    with pytest.raises(ValueError, match="learned_calls"):
        TenantRetrievers(
            tmp_path,
            KeywordScorer(),
            HashEmbedder(),
            learned,
            runtime={"query_retention": "none"},
        )


def test_a_key_file_keys_every_tenant_it_creates(tmp_path):
    from earm_jax.retriever import FolderKeyError, OnlineRetriever

    root, key = tmp_path / "root", tmp_path / "tenants.key"
    with TenantRetrievers(
        root, KeywordScorer(), HashEmbedder(), CONFIG, key_file=key
    ) as tenants:
        tenants["alice"].add(["Alice plays chess."])
        tenants["bob"].add(["Bob swims."])
    assert oct(key.stat().st_mode)[-3:] == "600"
    for name in ["alice", "bob"]:
        with pytest.raises(FolderKeyError, match="is keyed"):
            OnlineRetriever(root / name, KeywordScorer(), HashEmbedder(), CONFIG)
    with TenantRetrievers(root, KeywordScorer(), HashEmbedder(), key_file=key) as t:
        assert t["bob"].get([0])[0].text == "Bob swims."
