"""Mooncake modules crescent does not provide, under their names.

Importing one raises ImportError whose message names the module and why
(the hardware it needs, or that crescent does not implement that layer),
instead of a bare ModuleNotFoundError. docs/python.md lists them.
"""

# module -> why it is not here
WHY = {
    "ep": "expert-parallel all-to-all over CUDA/NVSHMEM (needs GPUs)",
    "pg": "torch.distributed process-group backend over GPU memory (needs GPUs)",
    "mooncake_ep_buffer": "expert-parallel GPU buffers (needs GPUs)",
    "mooncake_elastic_buffer": "elastic GPU buffers for expert parallelism (needs GPUs)",
    "nvlink_allocator": "NVLink / CUDA memory allocator (needs GPUs)",
    "diffusion": "diffusion-model GPU tensor transfer (needs GPUs)",
    "diffusion_connector": "diffusion-model GPU tensor transfer (needs GPUs)",
    "transfer_engine_topology_check": "RDMA NIC / GPU topology probing (no RDMA or GPUs here)",
    "transfer_engine_topology_dump": "RDMA NIC / GPU topology probing (no RDMA or GPUs here)",
    "mooncake_ssd_register": "NVMe-oF SSD segments (crescent's disk tier is crescent-node --ssd_path)",
    "mooncake_ssd_unregister": "NVMe-oF SSD segments (crescent's disk tier is crescent-node --ssd_path)",
    "spdk_tgt_create": "SPDK NVMe-oF targets (no NVMe-oF here)",
    "mooncake_connector_v1": "Mooncake's vLLM P2P connector; crescent's serving integration is "
                             "src/conductor (vLLM's MooncakeStoreConnector uses mooncake.store, "
                             "which is here)",
    "vllm_v1_proxy_server": "vLLM disaggregation proxy; crescent's scheduler is crescent-conductor",
    "transfer_engine_exp": "experimental Transfer Engine bindings (use mooncake.engine)",
}


def refuse(module):
    short = module.rsplit(".", 1)[-1]
    raise ImportError("%s is not provided by crescent: %s" % (module, WHY[short]), name=module)


def refuse_framework(module, framework):
    """Import-time refusal of a module that drives an inference framework absent here."""
    raise ImportError("%s needs %s, which is not installed (crescent provides the "
                      "framework-free parts of its package)" % (module, framework), name=module)
