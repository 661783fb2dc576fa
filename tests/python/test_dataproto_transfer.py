"""mooncake.dataproto_transfer against a real cluster (master + storage node
from conftest): every leaf codec round-trips, row shards (equal and
byte-balanced), ranged reads and the scratch fallback, cleanup of failed
puts, removal, refusals. The cases follow Mooncake's test_dataproto_transfer.py
(read for what it checks), on crescent's real store instead of a dict."""
import numpy as np
import pytest
import torch

import mooncake.dataproto_transfer as dpt
from mooncake.dataproto_transfer import (DataProtoMaterializePolicy, DataProtoShardPolicy,
                                         InMemoryMooncakeStore, MooncakeDataProtoTransferBackend,
                                         RemoteDataProtoShardedRef, choose_leaf_codec,
                                         chunk_offsets_by_size)


class DataProto:
    """The DataProto shape integrations pass (ROLL / verl): batch tensors,
    object-array columns, meta_info."""

    def __init__(self, batch=None, non_tensor_batch=None, meta_info=None):
        self.batch, self.non_tensor_batch = batch or {}, non_tensor_batch or {}
        self.meta_info = meta_info or {}

    @classmethod
    def from_dict(cls, tensors, non_tensors=None, meta_info=None):
        return cls(dict(tensors), dict(non_tensors or {}), meta_info)

    def __len__(self):
        for v in list(self.batch.values()) + list(self.non_tensor_batch.values()):
            return len(v)
        return 0


def objs(values):
    a = np.empty(len(values), dtype=object)
    a[:] = values
    return a


def skewed():
    rows = 8
    return DataProto.from_dict(
        {"input_ids": torch.arange(rows * 2, dtype=torch.int64).reshape(rows, 2)},
        {"text": objs(["x", "y" * 4096, "z", "w" * 4096, "a", "b", "c", "d"]),
         "ragged": objs([torch.arange(i + 1, dtype=torch.float32) for i in range(rows)])},
        {"source": "test", "step": 3})


def backend(store):
    return MooncakeDataProtoTransferBackend(store, key_prefix="dpt", dataproto_cls=DataProto)


def same(a, b):
    assert a.batch.keys() == b.batch.keys() and a.non_tensor_batch.keys() == b.non_tensor_batch.keys()
    for k in a.batch:
        assert torch.equal(a.batch[k], b.batch[k]), k
    for k in a.non_tensor_batch:
        for x, y in zip(a.non_tensor_batch[k], b.non_tensor_batch[k]):
            if isinstance(y, torch.Tensor):
                assert torch.equal(x, y) and x.dtype == y.dtype, k
            elif isinstance(y, np.ndarray):
                np.testing.assert_array_equal(x, y)
                assert x.dtype == y.dtype, k
            else:
                assert x == y and type(x) is type(y), (k, x, y)


def test_every_codec_roundtrips_through_the_store(mstore):
    b = backend(mstore)
    data = DataProto.from_dict(
        {"ids": torch.arange(12, dtype=torch.int32).reshape(4, 3),
         "mask": torch.ones(4, 2, dtype=torch.bool), "bf": torch.randn(4, 2).bfloat16()},
        {"tensors": objs([torch.zeros(2, 3), None, torch.ones(1), torch.arange(4.)]),
         "numbers": objs([None, [1, 2], np.array([3, 4], dtype=np.int32), (5,)]),
         "scalars": objs([1, 2.5, None, True]),
         "blobs": objs([b"\x00\xff", bytearray(b"ab"), None, b""]),
         "text": objs(["héllo", "", None, "x" * 1000]),
         "json": objs([{"a": [1, 2]}, None, {"b": "c"}, [1, {"d": None}]]),
         "mixed": objs([{"t": b"\x01", "u": [1, 2]}, "s", 3, None])},
        {"source": "codecs", "nested": {"list": [1, 2.5, "x"], "bytes": b"raw"}})
    ref = b.put_dataproto(data, partition="p")
    codecs = {l["path"]: l["codec"] for l in ref.manifest["leaves"]}
    assert codecs == {"non_tensor_batch.tensors": "ragged_tensor",
                      "non_tensor_batch.numbers": "typed_ragged",
                      "non_tensor_batch.scalars": "ndarray",
                      "non_tensor_batch.blobs": "bytes_ragged",
                      "non_tensor_batch.text": "utf8_ragged",
                      "non_tensor_batch.json": "json_ragged",
                      "non_tensor_batch.mixed": "msgpack_ragged"}
    numbers = next(l for l in ref.manifest["leaves"] if l["path"].endswith("numbers"))
    assert numbers["metadata"]["dtype"] == "int64"  # promoted over the non-null rows
    got = b.materialize_dataproto(ref)
    want = data
    want.non_tensor_batch["scalars"] = objs([1, 2.5, None, 1])  # promoted to float64
    got.non_tensor_batch["scalars"] = objs([int(v) if v == 1 else v
                                            for v in got.non_tensor_batch["scalars"]])
    same(got, want)
    assert got.meta_info["source"] == "codecs" and got.meta_info["nested"]["bytes"] == b"raw"
    assert got.meta_info["mooncake_materialize_profile"]["direct_range_group_count"] == 7
    b.remove_dataproto(ref)
    assert mstore.is_exist(ref.manifest_key) == 0
    assert mstore.is_exist(ref.manifest["meta_info_key"]) == 0


def test_sharded_put_byte_balances_skewed_rows(mstore):
    b = backend(mstore)
    data = skewed()
    ref = b.put_dataproto(data, partition="s", shard_policy=DataProtoShardPolicy(
        enabled=True, num_shards=4, byte_balanced=True, max_inflight_get=2))
    assert isinstance(ref, RemoteDataProtoShardedRef)
    ranges = [tuple(r) for r in ref.manifest["profile"]["shard_ranges"]]
    assert ranges != [(0, 2), (2, 4), (4, 6), (6, 8)] and ranges[0][0] == 0
    assert ranges[-1][1] == 8 and all(l[1] == r[0] for l, r in zip(ranges, ranges[1:]))
    assert ref.manifest["policy"]["byte_balanced"] is True
    got = b.materialize_dataproto(ref, materialize_policy=DataProtoMaterializePolicy(
        max_inflight_get=2))
    same(got, data)
    assert got.meta_info["source"] == "test"
    assert got.meta_info["mooncake_materialize_profile"]["max_inflight_get"] == 2
    # equal-row shards; removal takes every shard and then the parent manifest
    ref2 = b.put_dataproto(data, partition="s", shard_policy=DataProtoShardPolicy(
        enabled=True, num_shards=2, byte_balanced=False))
    assert [tuple(r) for r in ref2.manifest["profile"]["shard_ranges"]] == [(0, 4), (4, 8)]
    b.remove_dataproto(ref2)
    for shard in ref2.manifest["shards"]:
        assert mstore.is_exist(shard["manifest_key"]) == 0
    assert mstore.is_exist(ref2.manifest_key) == 0
    same(b.materialize_dataproto(ref), data)  # the other one is untouched


def test_adaptive_policy_and_feedback(mstore, monkeypatch):
    b = backend(mstore)
    small = DataProto.from_dict({"ids": torch.arange(8).reshape(4, 2)}, {}, {})
    ref = b.put_dataproto(small, shard_policy=DataProtoShardPolicy(adaptive=True))
    assert ref.manifest.get("layout") != "row_sharded_v1"  # small and dense: one object
    monkeypatch.setattr(dpt, "RAGGED_TENSOR_PART_CHUNK_BYTES", 16)
    policy = DataProtoShardPolicy(adaptive=True, target_shard_bytes=1024,
                                  small_payload_threshold=1, max_shards=8, max_inflight_get=8)
    ref = b.put_dataproto(skewed(), shard_policy=policy)
    assert ref.manifest["policy"]["selected_shards"] > 1
    assert ref.manifest["policy"]["max_inflight_get"] <= 4
    assert ref.manifest["policy"]["byte_balanced"] is False  # rows not skewed enough
    assert ref.manifest["profile"]["transfer_profile"]["total_bytes"] > 0
    first = b.materialize_dataproto(ref)
    same(first, skewed())
    n1 = first.meta_info["mooncake_materialize_profile"]["max_inflight_get"]
    assert n1 <= 4
    dpt._TRANSFER_ADAPTIVE_STATES[id(mstore)].pressure_level = "throttle"
    second = b.materialize_dataproto(ref, materialize_policy=DataProtoMaterializePolicy(
        adaptive_feedback=False))
    prof = second.meta_info["mooncake_materialize_profile"]
    assert prof["max_inflight_get"] <= max(1, n1 // 2)
    assert prof["parallel_feedback"]["max_inflight_get"] == prof["max_inflight_get"]
    # one 65 MiB row among small ones is "skewed": the shards are byte-balanced
    # (decided without storing it: 65 MiB does not fit this test's node)
    from mooncake.structured_object_store import _dataproto_envelope
    big = DataProto.from_dict({"ids": torch.arange(4).reshape(4, 1)},
                              {"text": objs(["a", "x" * (65 << 20), "b", "c"])}, {})
    decision = b._select_transfer_decision(_dataproto_envelope(big), DataProtoShardPolicy(
        adaptive=True, target_shard_bytes=32 << 20, small_payload_threshold=1, max_shards=4))
    assert decision.byte_balanced and decision.profile.row_skewed and decision.shard_count == 3
    ranges = b._select_shard_ranges(_dataproto_envelope(big), 3, True)
    assert ranges == [(0, 1), (1, 2), (2, 4)]  # the big row alone (equal rows: 0-2, 2-3, 3-4)


def test_chunked_payloads_use_ranged_reads_or_a_scratch_copy(mstore, monkeypatch):
    monkeypatch.setattr(dpt, "RAGGED_TENSOR_PART_CHUNK_BYTES", 16)
    b = backend(mstore)
    data = DataProto.from_dict({"ids": torch.arange(4).reshape(4, 1)},
                               {"ragged": objs([torch.arange(16.) + i for i in range(4)])}, {})
    ref = b.put_dataproto(data)
    leaf = ref.manifest["leaves"][0]
    assert len(leaf["payload"]["data"]["chunks"]) == 4  # one 64-byte row per part
    got = b.materialize_dataproto(ref)
    prof = got.meta_info["mooncake_materialize_profile"]
    assert prof["direct_range_group_count"] == 1 and prof["direct_range_fallback_count"] == 0
    assert prof["scratch_copy_s"] == 0.0
    same(got, data)

    other = MooncakeDataProtoTransferBackend(mstore, key_prefix="dpt", dataproto_cls=DataProto)
    # the same store, but registering the 256-byte read buffer fails
    other.store = type("Proxy", (), {"__getattr__": lambda s, n: getattr(mstore, n),
                                     "register_buffer": lambda s, p, n:
                                     -1 if n == 256 else mstore.register_buffer(p, n)})()
    got = other.materialize_dataproto(ref)
    prof = got.meta_info["mooncake_materialize_profile"]
    assert prof["direct_range_fallback_count"] == 1 and prof["range_group_count"] == 1
    same(got, data)


def test_failed_puts_leave_nothing_behind(mstore, monkeypatch):
    class Failing:
        """The real store, with one call made to fail."""

        def __init__(self, fail):
            self.fail = fail

        def __getattr__(self, name):
            return getattr(mstore, name)

        def batch_put_from(self, keys, ptrs, sizes, config=None):
            if self.fail != "batch":
                return mstore.batch_put_from(keys, ptrs, sizes)
            rcs = mstore.batch_put_from(keys[:1], ptrs[:1], sizes[:1])
            return list(rcs) + [-1] * (len(keys) - 1)

        def put_parts(self, key, *parts, config=None):
            rc = mstore.put_parts(key, *parts)
            return -1 if self.fail == "parts" and "chunk/1" in key else rc

    monkeypatch.setattr(dpt, "RAGGED_TENSOR_PART_CHUNK_BYTES", 16)
    data = DataProto.from_dict({"a": torch.arange(8).reshape(4, 2), "b": torch.ones(4, 2)},
                               {"r": objs([torch.arange(16.)] * 4)}, {})
    for fail, msg in (("batch", "batch_put_from failed"), ("parts", "put_parts failed")):
        b = MooncakeDataProtoTransferBackend(Failing(fail), key_prefix="fail-" + fail,
                                             dataproto_cls=DataProto)
        with pytest.raises(RuntimeError, match=msg):
            b.put_dataproto(data)
        assert mstore.remove_by_regex("^fail-%s/" % fail, True) == 0  # nothing was left
    # meta_info msgpack cannot hold: refused before anything stays
    b = backend(mstore)
    bad = DataProto.from_dict({"a": torch.arange(4).reshape(4, 1)}, {}, {"obj": object()})
    with pytest.raises(TypeError):
        b.put_dataproto(bad, partition="bad")
    with pytest.raises(TypeError, match="np.ndarray\\(dtype=object\\)"):
        b.put_dataproto(DataProto.from_dict({}, {"x": [1, 2]}, {}), partition="bad")


def test_helpers_and_refusals(mstore):
    assert chunk_offsets_by_size([10, 10, 10, 10], 25) == [0, 2, 4]
    assert chunk_offsets_by_size([100, 1], 10) == [0, 1, 2]
    assert choose_leaf_codec([None, None]).codec == "msgpack_ragged"
    assert choose_leaf_codec([torch.ones(1), torch.ones(1, dtype=torch.int8)]).codec != \
        "ragged_tensor"
    with pytest.raises(ImportError, match="dataproto_cls is required"):
        MooncakeDataProtoTransferBackend(mstore).materialize_dataproto(
            backend(mstore).put_dataproto(skewed()))
    # the in-memory store stands in for a cluster with the same calls
    mem = MooncakeDataProtoTransferBackend(InMemoryMooncakeStore(), dataproto_cls=DataProto)
    same(mem.materialize_dataproto(mem.put_dataproto(skewed())), skewed())
    view = backend(mstore).manifest_view(backend(mstore).put_dataproto(skewed()))
    assert view.row_count == 8 and set(view.non_tensor_fields) == {"text", "ragged"}
