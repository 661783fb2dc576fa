"""mooncake.model_loader.vllm_loader: Mooncake's vLLM integration (subclasses vLLM's loaders).
vLLM is not installed here; see mooncake.model_loader for what works without it."""
from mooncake._not_here import refuse_framework

refuse_framework(__name__, "vLLM")
