"""``mooncake.model_loader_mooncake``: model weights in the store.

crescent's own implementation of Mooncake's module:

* ``create_store(setup={...})`` or ``create_store(init_all={...})``: a set-up
  MooncakeDistributedStore (``init_all`` is Mooncake's dummy-client mode,
  not applicable here: the store answers -1011 and this raises RuntimeError).
* ``save_model_to_mooncake(model, store, prefix, tp_rank=0,
  use_gpu_direct=True, io_threads=8)``: ``{prefix}/manifest.json`` = the
  JSON list of the state-dict names, then every tensor with ``put_tensor``
  under ``{prefix}/rank_{tp_rank}/{name}`` (io_threads at a time).
* ``MooncakeModelLoader``: Mooncake defines it only when SGLang is
  importable (it subclasses SGLang's loader). SGLang is not installed here,
  so, as in Mooncake without SGLang, the name does not exist: importing it
  raises ImportError naming the reason.
"""
import importlib
import json
from concurrent.futures import ThreadPoolExecutor

import torch

from mooncake import store as mc_store

__all__ = ["save_model_to_mooncake", "create_store"]


def create_store(**setup_kwargs):
    """A MooncakeDistributedStore set up from setup={...} (setup()'s
    keywords) or init_all={...}; RuntimeError when that fails."""
    store = mc_store.MooncakeDistributedStore()
    if "setup" in setup_kwargs:
        c = setup_kwargs["setup"]
        rc = store.setup(c["local_hostname"], c["metadata_server"],
                         c.get("global_segment_size", 16 << 20),
                         c.get("local_buffer_size", 16 << 20), c.get("protocol", "tcp"),
                         c.get("rdma_devices", ""), c.get("master_server_addr", "127.0.0.1:50051"))
    elif "init_all" in setup_kwargs:
        c = setup_kwargs["init_all"]
        rc = store.init_all(c.get("protocol", "tcp"), c["device_name"],
                            c.get("mount_segment_size", 16 << 20))
    else:
        raise ValueError("create_store requires a 'setup' or 'init_all' config block")
    if rc != 0:
        raise RuntimeError("MooncakeDistributedStore setup failed: %d" % rc)
    return store


def save_model_to_mooncake(model, store, prefix, tp_rank=0, use_gpu_direct=True, io_threads=8):
    """Writes the manifest and every parameter/buffer of model's state dict
    (see the module doc). RuntimeError naming the first failure."""
    state = model.state_dict()
    names = list(state)
    key = "%s/manifest.json" % prefix
    rc = store.put(key, json.dumps(names).encode())
    if rc != 0:
        raise RuntimeError("Failed to write manifest to %s, rc=%d" % (key, rc))

    def upload(name):
        t = state[name]
        if not isinstance(t, torch.Tensor):
            raise TypeError("state dict entry %s is not a tensor" % name)
        t = t.contiguous()
        if t.device.type != "cpu":
            t = t.cpu()  # crescent stores host memory whatever use_gpu_direct says
        ret = store.put_tensor("%s/rank_%d/%s" % (prefix, tp_rank, name), t)
        if ret != 0:
            raise RuntimeError("put_tensor failed for %s with code %d" % (name, ret))

    with ThreadPoolExecutor(max_workers=max(1, int(io_threads))) as pool:
        for f in [pool.submit(upload, n) for n in names]:
            f.result()


def __getattr__(name):
    if name == "MooncakeModelLoader":
        try:
            importlib.import_module("sglang.srt.model_loader.loader")
        except Exception as e:  # noqa: BLE001 - any failure means: no SGLang
            raise ImportError("mooncake.model_loader_mooncake.MooncakeModelLoader needs SGLang "
                              "(sglang.srt), which is not installed: %s" % e,
                              name=__name__) from None
        raise ImportError("MooncakeModelLoader for SGLang is not provided by crescent",
                          name=__name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))

