"""mooncake.weight_transfer: manifests, the resharding planner, WeightStore
through a real cluster (master + storage node from conftest) and the direct
Transfer Engine movers between two real engines. Weights are numpy arrays in
host memory; every test checks the bytes that arrive, element by element."""
import json

import numpy as np
import pytest

from mooncake.engine import TransferEngine
from mooncake.weight_transfer import (
    CopyRange, MemoryRegistrationLease, MooncakeTransferEngineReader,
    MooncakeTransferEngineSink, ParallelRank, PlacementManifest, RuntimeFragment,
    RuntimeManifest, StoredFragment, TensorDescriptor, TransferEngineError, WeightManifest,
    WeightStore, WeightStoreError, placement_manifest_from_runtime_manifest,
    plan_runtime_transfer, plan_runtime_transfer_to_local_target,
    resolve_executor_plan)

# three tensors: sharded on dim 0, sharded on dim 1 (strided copies), replicated
SHAPES = {"w.qkv": ((12, 6), 0), "w.out": ((4, 12), 1), "w.norm": ((5,), None)}


def full(tid):
    shape, _ = SHAPES[tid]
    n = int(np.prod(shape))
    return (np.arange(n, dtype=np.float32) * 3 + len(tid)).reshape(shape)


def descriptors():
    return tuple(TensorDescriptor(tid, shape, "float32", 4, pd) for tid, (shape, pd)
                 in sorted(SHAPES.items()))


class Worker:
    """One parallel rank's weights in host memory, as a runtime manifest."""

    def __init__(self, name, tp, tp_size, dp=0, zero=False, generation=1, endpoint=None):
        self.name, self.arrays, frags = name, {}, []
        for tid, (shape, pd) in sorted(SHAPES.items()):
            if pd is None:
                part, off = full(tid), (0,) * len(shape)
            else:
                step = -(-shape[pd] // tp_size)
                lo, hi = tp * step, min(shape[pd], (tp + 1) * step)
                idx = [slice(None)] * len(shape)
                idx[pd] = slice(lo, hi)
                part = full(tid)[tuple(idx)]
                off = tuple(lo if d == pd else 0 for d in range(len(shape)))
            arr = np.zeros_like(part) if zero else np.ascontiguousarray(part)
            arr = np.ascontiguousarray(arr)
            self.arrays[tid] = arr
            frags.append(RuntimeFragment(
                fragment_id="%s/%s" % (name, tid), tensor_id=tid, global_offset=off,
                local_shape=arr.shape, address=arr.ctypes.data, nbytes=arr.nbytes,
                worker_id=name, endpoint=endpoint or name, rank=ParallelRank(dp=dp, tp=tp),
                lease_generation=generation, owner=arr))
        self.manifest = RuntimeManifest("m", "r1", name, descriptors(), frags,
                                        lease_id="lease-" + name)

    def check(self, tp, tp_size):
        for tid, (shape, pd) in SHAPES.items():
            want = Worker("ref", tp, tp_size).arrays[tid]
            np.testing.assert_array_equal(self.arrays[tid], want, err_msg=tid)


def run_plan(plan):
    """Execute a plan's copies in-process (the reference the movers must match)."""
    for op in plan.operations:
        for s, t, n in op.iter_segments():
            src = (op.source.owner.view(np.uint8).reshape(-1))
            dst = (op.target.owner.view(np.uint8).reshape(-1))
            dst[t:t + n] = src[s:s + n]


# -- manifests ----------------------------------------------------------------------

def test_records_validate_every_field():
    with pytest.raises(ValueError, match="global_shape must not be empty"):
        TensorDescriptor("t", (), "f32", 4, None)
    with pytest.raises(ValueError, match="partition_dim is out of range"):
        TensorDescriptor("t", (2, 2), "f32", 4, 2)
    with pytest.raises(ValueError, match="itemsize must be an integer"):
        TensorDescriptor("t", (2,), "f32", 4.0, None)
    with pytest.raises(ValueError, match="tensor_id must be a non-empty string"):
        TensorDescriptor("", (2,), "f32", 4, None)
    with pytest.raises(ValueError, match="parallel rank tp must be at least 0"):
        ParallelRank(tp=-1)
    good = dict(fragment_id="f", tensor_id="t", global_offset=(0,), local_shape=(2,),
                address=4096, nbytes=8, worker_id="w", endpoint="e", rank=ParallelRank(),
                lease_generation=0)
    RuntimeFragment(**good)
    for field, bad, msg in (("address", 0, "address must be at least 1"),
                            ("nbytes", -1, "nbytes must be at least 1"),
                            ("address", (1 << 64) - 4, "address range must fit"),
                            ("local_shape", "2", "local_shape must contain integers"),
                            ("rank", (0, 0), "rank must be a ParallelRank"),
                            ("aliases", ("a", "a"), "aliases must not contain duplicates")):
        with pytest.raises(ValueError, match=msg):
            RuntimeFragment(**dict(good, **{field: bad}))
    t = TensorDescriptor("t", (4, 3), "f32", 4, 0)
    mk = lambda **kw: RuntimeManifest("m", "r", "i", (t,), (RuntimeFragment(
        **dict(good, local_shape=(2, 3), global_offset=(0, 0), nbytes=24, **kw)),))
    mk()
    with pytest.raises(ValueError, match="fragment byte size mismatch"):
        RuntimeManifest("m", "r", "i", (t,), (RuntimeFragment(
            **dict(good, local_shape=(2, 3), global_offset=(0, 0), nbytes=20)),))
    with pytest.raises(ValueError, match="fragment is out of bounds"):
        RuntimeManifest("m", "r", "i", (t,), (RuntimeFragment(
            **dict(good, local_shape=(2, 3), global_offset=(3, 0), nbytes=24)),))
    with pytest.raises(ValueError, match="non-partition axis"):
        RuntimeManifest("m", "r", "i", (t,), (RuntimeFragment(
            **dict(good, local_shape=(4, 2), global_offset=(0, 0), nbytes=32)),))
    with pytest.raises(ValueError, match="unknown tensor_id"):
        RuntimeManifest("m", "r", "i", (), (RuntimeFragment(**good),))


def test_runtime_inventory_and_placement_manifest():
    inv = {"format_version": 1, "generation": 3, "model_id": "m", "revision": "r",
           "instance_id": "i", "lease_id": "L",
           "tensors": [{"tensor_id": "t", "global_shape": [4], "dtype": "f32", "itemsize": 4,
                        "partition_dim": 0, "layer_id": 1, "expert_id": None,
                        "layout_fingerprint": "contiguous", "fragment_id": "f%d" % k,
                        "global_offset": [2 * k], "local_shape": [2], "address": 4096 * (k + 1),
                        "nbytes": 8, "worker_id": "w%d" % k, "endpoint": "e%d" % k,
                        "rank": {"dp": 0, "tp": k, "pp": 0, "ep": 0},
                        "lease_generation": 3} for k in range(2)]}
    m = RuntimeManifest.from_runtime_inventory(inv, owner_resolver=lambda r: r["fragment_id"])
    assert [f.owner for f in m.fragments] == ["f0", "f1"] and m.lease_id == "L"
    with pytest.raises(ValueError, match="lease generation mismatch"):
        RuntimeManifest.from_runtime_inventory(dict(inv, generation=4))
    with pytest.raises(ValueError, match="unsupported runtime inventory format_version"):
        RuntimeManifest.from_runtime_inventory(dict(inv, format_version=2))
    with pytest.raises(ValueError, match="missing required field: instance_id"):
        RuntimeManifest.from_runtime_inventory({k: v for k, v in inv.items()
                                                if k != "instance_id"})
    p = placement_manifest_from_runtime_manifest(m)
    assert p.placement_id.startswith("sha256:") and len(p.digest) == 64
    assert PlacementManifest.from_json(p.to_json()) == p
    tampered = json.loads(p.to_json())
    tampered["fragments"][0]["nbytes"] = 8
    tampered["revision"] = "other"
    with pytest.raises(ValueError, match="placement_id does not match"):
        PlacementManifest.from_json(json.dumps(tampered))


def test_weight_manifest_json_is_strict():
    t = TensorDescriptor("t", (4,), "f32", 4, 0)
    frags = tuple(StoredFragment("f%d" % k, "t", (2 * k,), (2,), "g/payload/u/f%d" % k, 0, 8)
                  for k in range(2))
    m = WeightManifest("ns", "m", "r", "g", "g/manifest", (t,), frags, "2026-01-01T00:00:00Z")
    assert WeightManifest.from_json(m.to_json()) == m
    raw = json.loads(m.to_json())
    with pytest.raises(ValueError, match="schema fields"):
        WeightManifest.from_json(json.dumps(dict(raw, extra=1)))
    with pytest.raises(ValueError, match="non-finite"):
        WeightManifest.from_json(m.to_json().replace('"nbytes":8', '"nbytes":NaN', 1))
    with pytest.raises(ValueError, match="duplicate JSON field"):
        WeightManifest.from_json(m.to_json()[:-1] + ',"model_id":"x"}')
    with pytest.raises(ValueError, match="not fully covered"):
        WeightManifest("ns", "m", "r", "g", "g/manifest", (t,), frags[:1], "now")
    with pytest.raises(ValueError, match="does not belong to manifest group"):
        WeightManifest("ns", "m", "r", "g", "h/manifest", (t,), frags, "now")


# -- planner --------------------------------------------------------------------------

def test_runtime_resharding_tp2_to_tp3_with_strided_rows():
    src = [Worker("s%d" % k, k, 2) for k in range(2)]
    dst = [Worker("d%d" % k, k, 3, zero=True) for k in range(3)]
    plan = plan_runtime_transfer([w.manifest for w in src], [w.manifest for w in dst])
    assert any(op.repeat > 1 for op in plan.operations)  # dim-1 shards: strided rows
    assert plan.total_bytes == sum(a.nbytes for w in dst for a in w.arrays.values())
    assert len(plan.source_executors) == 2 and len(plan.target_executors) == 3
    run_plan(plan)
    for k, w in enumerate(dst):
        w.check(k, 3)
    # a target that moved since planning is refused
    moved = Worker("d0", 0, 3, zero=True, generation=2)
    with pytest.raises(ValueError, match="snapshot mismatch"):
        resolve_executor_plan(plan, moved.manifest, "target")
    assert resolve_executor_plan(plan, dst[1].manifest, "target").worker_id == "d1"


def test_planner_refusals():
    src = [Worker("s0", 0, 2)]
    dst = [Worker("d%d" % k, k, 2, zero=True) for k in range(2)]
    with pytest.raises(ValueError, match="no complete DP replica"):
        plan_runtime_transfer([src[0].manifest], [w.manifest for w in dst])
    with pytest.raises(ValueError, match="not fully covered"):
        plan_runtime_transfer([Worker("s%d" % k, k, 2).manifest for k in range(2)],
                              [dst[0].manifest])
    with pytest.raises(ValueError, match="manifests must not be empty"):
        plan_runtime_transfer([], [dst[0].manifest])
    # one target worker alone: the local plan
    plan = plan_runtime_transfer_to_local_target(
        [Worker("s%d" % k, k, 2).manifest for k in range(2)], dst[1].manifest)
    run_plan(plan)
    dst[1].check(1, 2)
    with pytest.raises(ValueError, match="copy range exceeds target fragment"):
        op = plan.operations[0]
        CopyRange(op.tensor_id, op.source, op.target, 0, op.target.nbytes, 1)


# -- WeightStore through a real cluster -----------------------------------------------

def upload_all(ws, workers):
    plan = ws.prepare_upload([w.manifest for w in workers], namespace="ns")
    receipts = [r for w in workers for r in ws.upload(plan, w.manifest)]
    return plan, receipts


def test_weight_store_upload_commit_and_resharded_load(mstore):
    ws = WeightStore(mstore, key_prefix="wt1", max_range_bytes=40)  # many small ranges
    src = [Worker("s%d" % k, k, 2) for k in range(2)]
    plan, receipts = upload_all(ws, src)
    assert len(receipts) == len(plan.operations) == 5  # 2+2 shards, 1 replicated
    manifest = ws.commit(plan, receipts)
    assert manifest == ws.load_manifest("wt1/ns/m/r1/manifest")
    assert ws.commit(plan, receipts) == manifest  # idempotent
    dst = [Worker("d%d" % k, k, 4, zero=True) for k in range(4)]
    load = ws.plan_load(manifest, [w.manifest for w in dst])
    for w in dst:
        ws.load(load, w.manifest)
    for k, w in enumerate(dst):
        w.check(k, 4)
    # a target re-leased after planning is refused before anything is read
    stale = Worker("d0", 0, 4, zero=True, generation=9)
    with pytest.raises(WeightStoreError, match="snapshot mismatch"):
        ws.load(load, stale.manifest)
    assert not stale.arrays["w.qkv"].any()


def test_weight_store_conflict_abort_and_receipts(mstore):
    ws = WeightStore(mstore, key_prefix="wt2")
    src = [Worker("s%d" % k, k, 2) for k in range(2)]
    first, r1 = upload_all(ws, src)
    second, r2 = upload_all(ws, src)
    with pytest.raises(WeightStoreError, match="missing upload receipts"):
        ws.commit(first, r1[:-1])
    with pytest.raises(WeightStoreError, match="duplicate upload receipt"):
        ws.commit(first, r1 + r1[:1])
    ws.commit(first, r1)
    with pytest.raises(WeightStoreError, match="conflicting weight revision"):
        ws.commit(second, r2)
    # the loser's payload is gone, the winner's stays
    assert mstore.batch_is_exist([r.object_key for r in r2]) == [0] * len(r2)
    assert mstore.batch_is_exist([r.object_key for r in r1]) == [1] * len(r1)
    third, r3 = upload_all(ws, src)
    ws.abort_upload(third, r3)
    assert mstore.batch_is_exist([r.object_key for r in r3]) == [0] * len(r3)
    with pytest.raises(WeightStoreError, match="already chose abort"):
        ws.commit(third, r3)
    with pytest.raises(WeightStoreError, match="already chose abort"):
        ws.upload(third, src[0].manifest)
    ws.finalize_upload_session(first)  # committed and published: nothing to do
    with pytest.raises(WeightStoreError, match="cannot abort a published"):
        ws.abort_upload(first, r1)
    with pytest.raises(WeightStoreError, match="stale source fragment"):
        fourth = ws.prepare_upload([w.manifest for w in src], namespace="ns")
        ws.upload(fourth, Worker("s0", 0, 2, generation=7).manifest)
    with pytest.raises(ValueError, match="range limits must be positive"):
        WeightStore(mstore, max_range_bytes=0)


# -- direct movers between two real engines --------------------------------------------

@pytest.fixture
def engines():
    a, b = TransferEngine(), TransferEngine()
    assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    assert b.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    yield a, b
    a.close()
    b.close()


def register(engine, workers):
    leases = []
    for w in workers:
        for f in w.manifest.fragments:
            assert engine.register_memory(f.address, f.nbytes) == 0
            leases.append(MemoryRegistrationLease.from_fragment(
                f, runtime_lease_id=w.manifest.lease_id))
    return leases


def test_te_sink_writes_and_reader_reads_resharded(engines):
    a, b = engines
    src = [Worker("s%d" % k, k, 2, endpoint=a.get_local_name()) for k in range(2)]
    dst = [Worker("d%d" % k, k, 3, zero=True, endpoint=b.get_local_name()) for k in range(3)]
    dst_leases = register(b, dst)
    plan = plan_runtime_transfer([w.manifest for w in src], [w.manifest for w in dst])
    sink = MooncakeTransferEngineSink(a, max_batch_operations=3)
    with pytest.raises(TransferEngineError, match="target registration leases are required"):
        sink.execute(plan, src[0].manifest, [w.manifest for w in dst])
    total = 0
    for w in src:
        for r in sink.execute(plan, w.manifest, [w.manifest for w in dst],
                              target_registrations=dst_leases):
            assert r.source_worker_id == w.name and r.target_endpoint == b.get_local_name()
            total += r.nbytes
    assert total == plan.total_bytes
    for k, w in enumerate(dst):
        w.check(k, 3)
    # target-initiated reads into fresh memory, one local plan per worker
    src_leases = register(a, src)
    fresh = [Worker("d%d" % k, k, 3, zero=True, endpoint=b.get_local_name()) for k in range(3)]
    reader = MooncakeTransferEngineReader(b)
    for w in fresh:
        local = plan_runtime_transfer_to_local_target([s.manifest for s in src], w.manifest)
        with pytest.raises(TransferEngineError, match="must be pre-registered"):
            reader.execute(local, [s.manifest for s in src], w.manifest,
                           source_pre_registered=False)
        rs = reader.execute(local, [s.manifest for s in src], w.manifest,
                            source_registrations=src_leases)
        assert sum(r.nbytes for r in rs) == local.total_bytes
    for k, w in enumerate(fresh):
        w.check(k, 3)
    with pytest.raises(TransferEngineError, match="source registration lease mismatch"):
        local = plan_runtime_transfer_to_local_target([s.manifest for s in src],
                                                      fresh[0].manifest)
        reader.execute(local, [s.manifest for s in src], fresh[0].manifest,
                       source_registrations=src_leases[1:])
