"""mooncake.weight_transfer: model weights moved between running instances
and through the store, resharded on the way (crescent's own implementation
of Mooncake's package; same names, signatures and checks).

- ``manifest``: tensor descriptors and fragments (runtime memory views,
  stored object ranges, address-free placements) with their validation;
- ``planner``: the copy plan from source fragments to target fragments
  (tensor-parallel resharding along the partition dimension, DP replica
  selection, executor snapshots that fence stale memory);
- ``store``: ``WeightStore`` upload / commit / abort / load through
  ``mooncake.store`` (batch_put_from, get_into_ranges on registered memory);
- ``te``: ``MooncakeTransferEngineSink`` / ``Reader``, direct WRITE / READ
  between workers through ``mooncake.engine``.
Host memory only here (no GPUs): fragment addresses are host addresses.
"""
from .manifest import (ParallelRank, PlacementFragment, PlacementManifest, RuntimeFragment,
                       RuntimeManifest, StoredFragment, TensorDescriptor, WeightManifest,
                       placement_manifest_from_runtime_manifest)
from .planner import (CopyRange, ExecutorTransferPlan, RuntimeLeaseSnapshot, TransferPlan,
                      plan_runtime_transfer, plan_runtime_transfer_to_local_target,
                      plan_stored_transfer, resolve_executor_plan, resolve_executor_plans)
from .store import (UploadOperation, UploadReceipt, WeightLoadPlan, WeightStore,
                    WeightStoreError, WeightUploadPlan)
from .te import (DirectReadReceipt, DirectTransferReceipt, MemoryRegistrationLease,
                 MooncakeTransferEngineReader, MooncakeTransferEngineSink, TransferEngineError)

__all__ = ["ParallelRank", "RuntimeFragment", "RuntimeManifest", "StoredFragment",
           "TensorDescriptor", "WeightManifest", "PlacementFragment", "PlacementManifest",
           "placement_manifest_from_runtime_manifest",
           "CopyRange", "ExecutorTransferPlan", "RuntimeLeaseSnapshot", "TransferPlan",
           "plan_runtime_transfer", "plan_runtime_transfer_to_local_target",
           "plan_stored_transfer", "resolve_executor_plan", "resolve_executor_plans",
           "UploadOperation", "UploadReceipt", "WeightStore", "WeightStoreError",
           "WeightLoadPlan", "WeightUploadPlan", "DirectReadReceipt", "DirectTransferReceipt",
           "MemoryRegistrationLease", "MooncakeTransferEngineReader",
           "MooncakeTransferEngineSink", "TransferEngineError"]
