"""mooncake.structured_object_store and mooncake._fast_copy against a real
cluster (master + storage node started by conftest's fixture)."""
import ctypes
import os
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import make_store
from mooncake.store import MooncakeDistributedStore, ReplicateConfig
from mooncake import structured_object_store as sos
from mooncake.structured_object_store import (
    BundleTransferPolicy, FieldSchema, MooncakeBundleTransfer, MooncakeDataProtoRef,
    RemoteBundleRef, StructuredObjectPayload, export_dataproto_ref, import_dataproto_ref)


def all_keys(manifest):
    keys = [c["key"] for c in manifest["meta"]["chunks"]]
    for spec in manifest["buffers"].values():
        keys += [c["key"] for c in spec["chunks"]]
    return keys


def test_bundle_roundtrip_chunks_and_remove(mstore):
    bt = MooncakeBundleTransfer(mstore, key_prefix="t/bundle", default_chunk_bytes=1000)
    big = bytes(range(256)) * 10  # 2560 bytes -> 3 chunks
    ref = bt.put_bundle(b"hdr", {"a": big, "empty": b"", "v": memoryview(b"xyz")},
                        partition="p0", max_inflight_put=4)
    assert isinstance(ref, RemoteBundleRef) and ref.manifest_key.startswith("t/bundle/p0/")
    assert [c["size"] for c in ref.manifest["buffers"]["a"]["chunks"]] == [1000, 1000, 560]
    assert ref.manifest["buffers"]["empty"]["chunks"] == []
    keys = all_keys(ref.manifest)
    assert all(mstore.is_exist(k) == 1 for k in keys + [ref.manifest_key])
    # read through a ref that only names the manifest key (another process' view)
    meta, bufs = bt.get_bundle({"manifest_key": ref.manifest_key})
    assert meta == b"hdr" and bufs == {"a": big, "empty": b"", "v": b"xyz"}
    bt.remove_bundle(ref)
    assert all(mstore.is_exist(k) == 0 for k in keys + [ref.manifest_key])
    with pytest.raises(KeyError, match="not found"):
        bt.get_bundle({"manifest_key": ref.manifest_key})
    bt.remove_bundle(ref)  # missing objects: not an error


def test_structured_object_members_slices_and_destinations(mstore):
    bt = MooncakeBundleTransfer(mstore, default_chunk_bytes=4096)
    arr = np.arange(3000, dtype=np.float32).reshape(1000, 3)   # 12000 bytes: 3 chunks
    ten = torch.arange(64, dtype=torch.bfloat16).reshape(16, 4)
    objs = np.empty(3, dtype=object)
    objs[:] = ["x", {"k": [1, 2]}, None]
    payload = StructuredObjectPayload(
        metadata={"step": 7, "tags": ("a", "b")},
        buffers={"arr": arr, "ten": ten, "raw": bytearray(b"raw!"), "obj": objs,
                 "val": {"n": 3, "s": "str", "l": [1.5, None]}})
    ref = bt.put_structured_object(payload, config=ReplicateConfig())
    res = bt.materialize(bt.read_spec(ref))
    assert res.metadata == {"step": 7, "tags": ["a", "b"]}
    np.testing.assert_array_equal(res.objects["arr"], arr)
    assert res.objects["ten"].dtype == torch.bfloat16 and torch.equal(res.objects["ten"], ten)
    assert res.objects["raw"] == bytearray(b"raw!")
    assert res.objects["obj"].dtype == object and list(res.objects["obj"]) == list(objs)
    assert res.objects["val"] == {"n": 3, "s": "str", "l": [1.5, None]}

    # selected members, row slices (rows 400..899 step 2: reads chunks 1-2 only)
    spec = bt.read_spec({"manifest_key": ref.manifest_key}).select_members(["arr", "ten"])
    spec = spec.slice_member("arr", axis=0, start=400, end=900, step=2)
    spec = spec.slice_member("ten", axis=1, start=1, end=3)
    res = bt.materialize(spec)
    assert set(res.objects) == {"arr", "ten"}
    np.testing.assert_array_equal(res.objects["arr"], arr[400:900:2])
    assert torch.equal(res.objects["ten"], ten[:, 1:3])
    empty = bt.materialize(bt.read_spec(ref).select_members(["arr"])
                           .slice_member("arr", 0, 10, 10))
    assert empty.objects["arr"].shape == (0, 3)

    # into caller memory
    dst_np = np.zeros_like(arr)
    dst_t = torch.zeros(16, 4, dtype=torch.bfloat16)
    dst_b = bytearray(4)
    res = bt.materialize_into(bt.read_spec(ref).select_members(["arr", "ten", "raw"]),
                              {"arr": dst_np, "ten": dst_t, "raw": dst_b})
    assert res.objects["arr"] is dst_np and res.objects["ten"] is dst_t
    np.testing.assert_array_equal(dst_np, arr)
    assert torch.equal(dst_t, ten) and dst_b == b"raw!"
    with pytest.raises(ValueError, match="destination for arr"):
        bt.materialize_into(bt.read_spec(ref), {"arr": np.zeros((999, 3), np.float32)})
    with pytest.raises(ValueError, match="read-only"):
        bt.materialize_into(bt.read_spec(ref), {"raw": b"1234"})
    with pytest.raises(KeyError, match="no member 'nope'"):
        bt.materialize(bt.read_spec(ref).select_members(["nope"]))

    # put_object / get_object: a mapping, and a single value
    r1 = bt.put_object({"a": np.ones(4, np.int64), "b": b"x"})
    got = bt.get_object(r1)
    assert set(got) == {"a", "b"} and got["b"] == b"x"
    np.testing.assert_array_equal(got["a"], np.ones(4, np.int64))
    r2 = bt.put_object(torch.tensor([1.0, 2.0]))
    assert torch.equal(bt.get_object(r2), torch.tensor([1.0, 2.0]))
    bt.release_result(res)  # nothing borrowed: a no-op that must not fail


def _dataproto(n):
    nt = np.empty(n, dtype=object)
    nt[:] = ["prompt %d" % i for i in range(n)]
    return SimpleNamespace(
        batch={"ids": torch.arange(n * 4, dtype=torch.int64).reshape(n, 4),
               "mask": torch.ones(n, 4, dtype=torch.bool)},
        non_tensor_batch={"text": nt},
        meta_info={"temperature": 0.5, "step": 1})


def test_dataproto_put_get_rows_handles_and_append(cluster, mstore):
    bt = MooncakeBundleTransfer(mstore, default_chunk_bytes=64)
    dp = _dataproto(6)
    ref = bt.put(dp, namespace="rl", partition="train", stage="rollout")
    assert isinstance(ref, MooncakeDataProtoRef) and ref.batch_size == 6
    out = bt.get(ref)
    assert torch.equal(out.batch["ids"], dp.batch["ids"])
    assert torch.equal(out.batch["mask"], dp.batch["mask"])
    assert list(out.non_tensor_batch["text"]) == list(dp.non_tensor_batch["text"])
    assert out.meta_info == {"temperature": 0.5, "step": 1}

    part = bt.get_dataproto(ref, batch_fields=["ids"], non_tensor_fields=["text"],
                            meta_info_keys=["step"], rows=slice(1, 5, 2))
    assert torch.equal(part.batch["ids"], dp.batch["ids"][1:5:2])
    assert list(part.non_tensor_batch["text"]) == ["prompt 1", "prompt 3"]
    assert part.meta_info == {"step": 1}
    picked = bt.get(ref, fields=["ids"], rows=[5, 0, -1], data_cls=dict)
    assert torch.equal(picked["batch"]["ids"], dp.batch["ids"][[5, 0, 5]])

    # a JSON handle read by a second client
    handle = json.loads(json.dumps(export_dataproto_ref(ref)))
    other = make_store(cluster, cls=MooncakeDistributedStore)
    try:
        got = MooncakeBundleTransfer(other).get(handle, fields=["ids"])
        assert torch.equal(got.batch["ids"], dp.batch["ids"])
    finally:
        other.close()

    # append a stage; the previous ref stays as it was
    adv = torch.randn(6)
    ref2 = bt.append_dataproto_fields(ref, {"adv": adv}, stage="reward")
    assert set(ref2.field_index) == {"ids", "mask", "text", "adv"} and "adv" not in ref.field_index
    assert torch.equal(bt.get(ref2, fields=["adv"]).batch["adv"], adv)
    view = bt.dataproto_manifest_view(ref2)
    assert view["fields"]["adv"] == {"stage": "reward", "section": "batch",
                                     "encoding": "torch_tensor", "dtype": "float32",
                                     "shape": [6]}
    with pytest.raises(ValueError, match="overwrite=True"):
        bt.append_dataproto_fields(ref, {"ids": torch.zeros(6, 4)}, stage="again")
    with pytest.raises(ValueError, match="rows"):
        bt.append_dataproto_fields(ref, {"x": torch.zeros(5)}, stage="short")
    reward_key = ref2.stage_refs["reward"].manifest_key
    bt.cleanup_dataproto_append(ref, ref2)
    assert mstore.is_exist(reward_key) == 0
    assert torch.equal(bt.get(ref, fields=["ids"]).batch["ids"], dp.batch["ids"])


def test_flat_dict_and_field_schemas(mstore):
    bt = MooncakeBundleTransfer(mstore)
    data = {"x": np.arange(8, dtype=np.int32).reshape(4, 2), "name": ["a", "b", "c", "d"],
            "cfg": {"lr": 0.1}}
    ref = bt.put(data, type="dict",
                 field_schemas={"cfg": FieldSchema("json", metadata={"section": "meta_info"})})
    assert ref.field_index["x"].section == "batch"
    assert ref.field_index["name"].section == "non_tensor_batch"
    assert ref.meta_info == {"cfg": {"lr": 0.1}}
    out = bt.get(ref, type="dict", rows=slice(2, None))
    np.testing.assert_array_equal(out["x"], data["x"][2:])
    assert list(out["name"]) == ["c", "d"] and out["cfg"] == {"lr": 0.1}


def test_bad_arguments(mstore):
    with pytest.raises(TypeError, match="put/get/remove"):
        MooncakeBundleTransfer(object())
    with pytest.raises(ValueError, match="chunk_bytes"):
        MooncakeBundleTransfer(mstore, default_chunk_bytes=0)
    with pytest.raises(ValueError, match="key_prefix"):
        MooncakeBundleTransfer(mstore, key_prefix="//")
    bt = MooncakeBundleTransfer(mstore)
    with pytest.raises(TypeError, match="meta must be bytes-like"):
        bt.put_bundle("text", {})
    with pytest.raises(TypeError, match="buffer b must be bytes-like"):
        bt.put_bundle(b"", {"b": 3})
    with pytest.raises(ValueError, match="chunk_bytes"):
        bt.put_bundle(b"", {}, chunk_bytes=True)
    with pytest.raises(ValueError, match="max_inflight_put"):
        bt.put_bundle(b"", {}, max_inflight_put=0)
    with pytest.raises(ValueError, match="partition"):
        bt.put_bundle(b"", {}, partition="a/b")
    with pytest.raises(TypeError, match="requires buffers"):
        StructuredObjectPayload(metadata={})
    with pytest.raises(TypeError, match="member x: .*cannot be stored"):
        bt.put_object({"x": object()})
    with pytest.raises(ValueError, match="unsupported Mooncake payload type"):
        bt.put({}, type="yaml")
    with pytest.raises(TypeError, match="DataProto-like"):
        bt.put(42)
    with pytest.raises(ValueError, match="has 3 rows, others have 2"):
        bt.put({"a": np.zeros(2), "b": np.zeros(3)}, type="dict")
    with pytest.raises(ValueError, match="reserved"):
        bt.put_structured_object(StructuredObjectPayload(
            {sos.STRUCTURED_FIELD_SPECS_KEY: 1}, {}))
    with pytest.raises(ValueError, match="not a Mooncake DataProto ref handle"):
        import_dataproto_ref({"type": "other"})
    with pytest.raises(ValueError, match="unknown stage"):
        import_dataproto_ref({"type": sos.DATAPROTO_REF_HANDLE_TYPE, "version": 1,
                              "kind": "bundle_stages", "batch_size": 1, "stage_refs": {},
                              "field_index": {"f": {"stage": "s", "member": "f",
                                                    "section": "batch"}}})
    with pytest.raises(TypeError, match="expected MooncakeDataProtoRef"):
        bt.get("not a ref")
    ref = bt.put({"a": np.zeros(2)}, type="dict")
    with pytest.raises(KeyError, match="no fields"):
        bt.get(ref, fields=["zzz"])
    with pytest.raises(IndexError, match="out of range"):
        bt.get(ref, rows=[2])
    with pytest.raises(ValueError, match="not a bundle manifest"):
        mstore.put("plain", b"not json")
        bt.get_bundle({"manifest_key": "plain"})


def test_failed_put_leaves_nothing_behind(mstore):
    """A chunk put that the store refuses: put_bundle raises with the store's
    code and removes the chunks it had written."""
    written = []

    class FailThird:
        def __init__(self, s):
            self.s = s

        def put(self, key, value, config=None):
            if len(written) == 2:
                return -600
            written.append(key)
            return self.s.put(key, value)

        def __getattr__(self, name):
            return getattr(self.s, name)

    bt = MooncakeBundleTransfer(FailThird(mstore), default_chunk_bytes=10)
    with pytest.raises(RuntimeError, match="failed: -600"):
        bt.put_bundle(b"m", {"a": b"x" * 40}, policy=BundleTransferPolicy(max_inflight_put=1))
    assert len(written) == 2 and all(mstore.is_exist(k) == 0 for k in written)


def test_fast_copy():
    from mooncake._fast_copy import concat_arrays_into
    a = np.arange(5, dtype=np.int32)
    b = np.frombuffer(b"hello", dtype=np.uint8)
    dst = (ctypes.c_uint8 * 25)()
    assert concat_arrays_into([a, b], ctypes.addressof(dst)) == 25
    assert bytes(dst) == a.tobytes() + b"hello"
    dst2 = (ctypes.c_uint8 * 5)()
    assert concat_arrays_into([a, b], ctypes.addressof(dst2), 5, 1, 5, 4) == 5
    assert bytes(dst2) == b"hello"
    # Mooncake's test_fast_copy.py: (arrays, dest_ptr, dest_size, start, count)
    arrs = [np.arange(3, dtype=np.uint8), np.arange(4, dtype=np.uint8) + 10,
            np.arange(2, dtype=np.uint8) + 20]
    want = np.concatenate(arrs[1:])
    d = ctypes.create_string_buffer(want.nbytes)
    assert concat_arrays_into(arrs, ctypes.addressof(d), len(d), 1, 2) == want.nbytes
    assert d.raw == want.tobytes()
    small = ctypes.create_string_buffer(7)
    with pytest.raises(ValueError, match="destination buffer too small"):
        concat_arrays_into([np.arange(4, dtype=np.uint8)] * 2, ctypes.addressof(small), 7)
    assert bytes(small) == bytes(7)  # nothing copied
    assert concat_arrays_into([np.arange(4, dtype=np.uint8)], ctypes.addressof(small), 0, 0, 0) == 0
    assert concat_arrays_into([a], 0, start=3) == 0
    with pytest.raises(TypeError, match="list"):
        concat_arrays_into((a,), ctypes.addressof(dst))
    with pytest.raises(TypeError, match=r"arrays\[1\] is not an ndarray"):
        concat_arrays_into([a, b"x"], ctypes.addressof(dst))
    with pytest.raises(ValueError, match="C-contiguous"):
        concat_arrays_into([np.zeros((4, 4))[:, 1]], ctypes.addressof(dst))
    with pytest.raises(ValueError, match="NULL"):
        concat_arrays_into([a], 0)


def test_dataproto_catalog_publish_resolve_get_and_retire(mstore):
    """mooncake.dataproto_catalog: two fragments published for keys of one
    partition, a read across both in key order, tags merged, idempotent
    publish, and the store objects of a fragment removed once no key and no
    pinned reader refers to it."""
    from mooncake.dataproto_catalog import DataProtoCatalog, DataProtoCatalogTransfer
    cat = DataProtoCatalog()
    bt = MooncakeBundleTransfer(mstore, default_chunk_bytes=256)
    client = DataProtoCatalogTransfer(bt, lambda name, *a, **k: getattr(cat, name)(*a, **k))
    d1, d2 = _dataproto(3), _dataproto(2)
    d2.batch["ids"] += 100
    r1 = client.put(d1, partition="p", keys=["a", "b", "c"], tags=[{"s": 1}] * 3)
    assert r1["keys"] == ["a", "b", "c"] and set(r1["fields"]) == {"ids", "mask", "text"}
    client.put(d2, partition="p", keys=["d", "e"])
    client.put(None, partition="p", keys=["a"], tags=[{"t": 2}])
    assert cat.list("p")["p"]["a"] == {"s": 1, "t": 2} and cat.list("zz") == {}
    out = client.get("p", ["e", "a", "c"], ["ids", "text"])
    assert torch.equal(out.batch["ids"], torch.stack([d2.batch["ids"][1], d1.batch["ids"][0],
                                                      d1.batch["ids"][2]]))
    assert list(out.non_tensor_batch["text"]) == ["prompt 1", "prompt 0", "prompt 2"]
    assert out.meta_info == {"temperature": 0.5, "step": 1} and out.tags[1] == {"s": 1, "t": 2}
    assert not cat._pins  # the read was released

    # a pinned reader keeps a fragment whose keys are removed
    res = client.resolve("p", ["d"])
    fid = next(iter(res["handles"]))
    client.remove("p", ["d", "e"])
    assert mstore.is_exist(fid) == 1
    client.release_read(res["read_token"])
    assert mstore.is_exist(fid) == 0 and cat._retired == {}
    client.release_read(res["read_token"])  # idempotent

    # publish is idempotent per operation id; mismatches and bad input refused
    h = export_dataproto_ref(bt.put(_dataproto(1)))
    first = cat.publish("op1", "q", ["x"], handle=h)
    assert cat.publish("op1", "q", ["other"], handle=h) == first
    with pytest.raises(ValueError, match="does not match 2 logical keys"):
        cat.update("q", ["y", "z"], handle=h)
    with pytest.raises(ValueError, match="management mismatch"):
        cat.update("q", ["y"], handle=h)
    with pytest.raises(ValueError, match="requires tags or a DataProto handle"):
        cat.update("q", ["y"])
    with pytest.raises(ValueError, match="unique"):
        cat.update("q", ["y", "y"], tags=[{}, {}])
    with pytest.raises(ValueError, match="same length"):
        cat.update("q", ["y"], tags=[{}, {}])
    with pytest.raises(ValueError, match="not found"):
        cat.resolve("q", ["nope"])
    with pytest.raises(ValueError, match="not ready"):
        cat.update("q", ["y"], tags=[{}])
        cat.resolve("q", ["x", "y"], ["ids"])
    with pytest.raises(ValueError, match="does not match 2 logical keys"):
        client.put(_dataproto(3), partition="q", keys=["m", "n"])

    # drain retires every managed fragment and removes its objects
    res = cat.resolve("q", ["x"], pin=True)
    with pytest.raises(RuntimeError, match="active read"):
        client.drain()
    cat.release_read(res["read_token"])
    keys_a = bt.resolve_manifest(RemoteBundleRef(
        import_dataproto_ref(h).stage_refs["default"].manifest_key, {}))
    client.drain()
    assert all(mstore.is_exist(k) == 0 for k in all_keys(keys_a))
    assert cat._retired == {}
    with pytest.raises(RuntimeError, match="drained"):
        cat.update("q", ["x"], tags=[{}])
    client.close()


def _net(fill=None):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    m[2].weight.data = m[2].weight.data.to(torch.bfloat16).float()
    if fill is not None:
        with torch.no_grad():
            for p in m.parameters():
                p.fill_(fill)
    return m


def test_model_loader_save_load_seed_and_files(mstore, tmp_path):
    """mooncake.model_loader's framework-free parts against a real cluster."""
    import mooncake.model_loader as ml
    from mooncake.model_loader.config import MooncakeStoreLoaderConfig, parse_model_name
    from crescent import tensor_codec

    assert parse_model_name("mooncake:///org/m") == "org/m"
    assert parse_model_name("mooncake://m") == "m"
    with pytest.raises(ValueError, match="scheme"):
        parse_model_name("http://x/m")
    with pytest.raises(ValueError, match="Missing model name"):
        parse_model_name("mooncake:///")

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"hidden": 8}')
    (ckpt / "tokenizer_config.json").write_text("{}")
    src = _net()
    conn = ml.create_remote_connector("mooncake:///m1", device="cpu", store=mstore)
    ml.save_model(src, "mooncake:///m1", model_path=str(ckpt), rank=0, connector=conn)
    assert mstore.is_exist("m1/keys/rank_0/0.weight") == 1
    dst = _net(fill=0.0)
    ml.load_weights_into(dst, "mooncake:///m1", rank=0, connector=conn)
    for (n, a), (_, b) in zip(src.state_dict().items(), dst.state_dict().items()):
        assert torch.equal(a, b), n
    x = torch.randn(2, 4)
    assert torch.equal(src(x), dst(x))
    assert sorted(conn.list("m1/files/")) == ["m1/files/config.json",
                                              "m1/files/tokenizer_config.json"]
    local = ml.RemoteWeightIO("mooncake:///m1", connector=conn).materialize_files()
    assert open(os.path.join(local, "config.json")).read() == '{"hidden": 8}'

    # seeded from safetensors shards with an index, loaded as rank 1
    sd = _net().state_dict()
    names = list(sd)
    tensor_codec.safetensors_write(str(ckpt / "a.safetensors"), {n: sd[n] for n in names[:2]})
    tensor_codec.safetensors_write(str(ckpt / "b.safetensors"), {n: sd[n] for n in names[2:]})
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {n: ("a" if i < 2 else "b") + ".safetensors"
                        for i, n in enumerate(names)}}))
    conn2 = ml.create_mooncake_connector("mooncake:///m2", store=mstore)
    ml.seed_model_from_files(str(ckpt), "mooncake:///m2", tp_rank=1, connector=conn2,
                             batch_size=1)
    dst2 = _net(fill=0.0)
    ml.load_weights_into(dst2, "mooncake:///m2", rank=1, connector=conn2)
    assert all(torch.equal(sd[n], dst2.state_dict()[n]) for n in names)
    assert conn2.getstr("m2/files/config.json") == '{"hidden": 8}'

    # errors: missing keys, wrong sizes, bad tensors, remote files, bad index
    with pytest.raises(RuntimeError, match="m1/keys/rank_5/0.weight: error=-704"):
        ml.load_weights_into(_net(), "mooncake:///m1", rank=5, connector=conn)
    with pytest.raises(RuntimeError, match="0.weight: error=-10"):  # buffer too small
        conn.get_into("keys/rank_0/0.weight", torch.zeros(4))
    with pytest.raises(RuntimeError, match="expected 256 bytes, got 128"):
        conn.get_into("keys/rank_0/0.weight", torch.zeros(64))
    with pytest.raises(ValueError, match="not contiguous"):
        conn.get_into("keys/rank_0/0.weight", torch.zeros(8, 4).t())
    with pytest.raises(NotImplementedError):
        conn.get("x")
    with pytest.raises(ValueError, match="only local files"):
        ml.seed_model_from_files("s3://bucket/m", "mooncake:///m3", connector=conn)
    (ckpt / "model.safetensors.index.json").write_text('{"weight_map": {"w": "../x.safetensors"}}')
    with pytest.raises(ValueError, match="outside the checkpoint"):
        ml.seed_model_from_files(str(ckpt), "mooncake:///m3", connector=conn)
    with pytest.raises(ValueError, match="batch_size"):
        ml.RemoteWeightIO("mooncake:///m1", connector=conn, batch_size=0)
    # a stored index naming a path is not followed when files are pulled
    conn.setstr("m1/files/sub/../../evil", "x")
    conn.pull_files()
    assert not os.path.exists(os.path.join(local, "..", "evil"))
    for mod, fw in (("vllm_loader", "vLLM"), ("sglang_adapter", "SGLang"),
                    ("sglang_launch", "SGLang")):
        with pytest.raises(ImportError, match=fw):
            __import__("mooncake.model_loader." + mod)
    cfg = MooncakeStoreLoaderConfig.from_mapping({"master": "127.0.0.1:1", "standalone_storage": 1,
                                                  "client_server_address": "127.0.0.1:2"})
    with pytest.raises(RuntimeError, match="error code: -1011"):
        ml.MooncakeStoreConnector("mooncake:///m", config=cfg)
    with pytest.raises(ValueError, match="replica_num"):
        MooncakeStoreLoaderConfig.from_mapping({"master": "x", "replica_num": 0})
    d = conn.get_local_dir()
    conn.close()
    conn2.close()
    assert not os.path.exists(d)


def test_weight_store_import_verify_materialize_delete(mstore, tmp_path):
    """mooncake.weight_store against a real cluster: a checkpoint directory in
    chunks, its manifest and indexes, verification, a damaged chunk found,
    materialized files, deletion."""
    import mooncake.weight_store as ws
    src = tmp_path / "ckpt"
    (src / "sub").mkdir(parents=True)
    weights = bytes(range(256)) * 9  # 2304 bytes -> 3 chunks of 1000
    (src / "model-1.safetensors").write_bytes(weights)
    (src / "config.json").write_text('{"a": 1}')
    (src / "sub" / "notes.txt").write_text("hi")
    (src / "empty.bin").write_bytes(b"")
    (src / ".hidden").write_text("skip me")
    (src / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "model-1.safetensors"}}))
    c = ws.ModelFileCacheClient(mstore, file_chunk_size=1000)
    m = c.import_model(checkpoint_id="ck-1", model_id="org/model", revision="r1",
                       source_uri=str(src))
    assert m.status == ws.READY and m.total_size == sum(
        p.stat().st_size for p in src.rglob("*") if p.is_file() and p.name != ".hidden")
    paths = [r.path for r in m.files]
    assert paths == sorted(["config.json", "empty.bin", "model-1.safetensors",
                            "model.safetensors.index.json", "sub/notes.txt"])
    rec = next(r for r in m.files if r.path == "model-1.safetensors")
    assert rec.type == "WEIGHT" and len(rec.chunks) == 3
    assert rec.chunks[1] == ws.model_file_chunk_key("ck-1", "model-1.safetensors", 1)
    assert c.list_models() == ["ck-1"]
    assert json.loads(mstore.get(ws.model_id_index_key("org/model"))) == ["ck-1"]
    assert c.inspect_model("ck-1") == m
    out = tmp_path / "out" / "w.safetensors"
    c.materialize_file("ck-1", "model-1.safetensors", str(out))
    assert out.read_bytes() == weights
    with pytest.raises(KeyError):
        c.materialize_file("ck-1", "nope", str(out))
    with pytest.raises(ValueError, match="already exists"):
        c.import_model(checkpoint_id="ck-1", model_id="org/model", revision="r1",
                       source_uri=str(src))

    # a damaged chunk: verify and materialize refuse it, no partial output left
    assert mstore.upsert(rec.chunks[2], b"x" * 304) == 0
    with pytest.raises(ValueError, match="sha256 mismatch for model-1.safetensors"):
        c.verify_model("ck-1")
    out2 = tmp_path / "out" / "w2"
    with pytest.raises(ValueError, match="sha256"):
        c.materialize_file("ck-1", "model-1.safetensors", str(out2))
    assert not out2.exists() and not (tmp_path / "out" / "w2.part").exists()

    c.delete_model("ck-1")
    assert c.list_models() == [] and mstore.is_exist(rec.chunks[0]) == 0
    with pytest.raises(KeyError, match="no readable manifest"):
        c.inspect_model("ck-1")

    # bad input
    for bad in ("", "../x", "a/b", "-x"):
        with pytest.raises(ValueError, match="checkpoint_id"):
            c.import_model(checkpoint_id=bad, model_id="m", revision="r", source_uri=str(src))
    with pytest.raises(ValueError, match="directory"):
        c.import_model(checkpoint_id="ck-2", model_id="m", revision="r",
                       source_uri=str(src / "config.json"))
    (src / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "missing.safetensors"}}))
    with pytest.raises(ValueError, match="missing files"):
        c.import_model(checkpoint_id="ck-2", model_id="m", revision="r", source_uri=str(src))
    with pytest.raises(ValueError, match="file_chunk_size"):
        ws.ModelFileCacheClient(mstore, file_chunk_size=0)
    with pytest.raises(ValueError, match="invalid model status"):
        ws.ModelFileManifest("c", "m", "r", "DONE", "/", 0, 0, 0, [], None)


def test_weight_store_cli(cluster, tmp_path):
    """python3 -m mooncake.weight_store.cli: config init, import (which verifies),
    list, materialize-file, delete; a failure exits 1 with the reason. (Each
    command is its own store client process: kept to a few.)"""
    import subprocess
    import sys
    src = tmp_path / "ck"
    src.mkdir()
    (src / "w.safetensors").write_bytes(b"\x01" * 3000)
    (src / "config.json").write_text("{}")
    cfg = tmp_path / "ws.json"
    store_flags = ["--config", str(cfg)]

    def cli(*args, ok=True):
        r = subprocess.run([sys.executable, "-m", "mooncake.weight_store.cli", *args],
                           capture_output=True, text=True, timeout=120)
        assert (r.returncode == 0) == ok, r.stderr
        return json.loads(r.stdout) if ok else r.stderr

    assert cli(*store_flags, "config", "init", "--local-hostname", "127.0.0.1",
               "--metadata-server", cluster["metadata"],
               "--master-server-addr", cluster["master"],
               "--local-buffer-size", "16MB")["written"]
    m = cli("model", "import", "--checkpoint-id", "cli-1", "--model-id", "m", "--revision",
            "r", "--source", str(src), "--file-chunk-size", "1KB", *store_flags)
    assert m["status"] == "READY" and len(m["files"]) == 2
    assert cli(*store_flags, "model", "list") == ["cli-1"]
    out = tmp_path / "o" / "w"
    cli(*store_flags, "model", "materialize-file", "cli-1", "--path", "w.safetensors",
        "--output", str(out))
    assert out.read_bytes() == b"\x01" * 3000
    assert cli(*store_flags, "model", "delete", "cli-1")["deleted"]
    assert "no readable manifest" in cli(*store_flags, "model", "inspect", "cli-1", ok=False)
