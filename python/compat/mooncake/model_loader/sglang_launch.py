"""mooncake.model_loader.sglang_launch: Mooncake's SGLang integration (subclasses SGLang's loaders).
SGLang is not installed here; see mooncake.model_loader for what works without it."""
from mooncake._not_here import refuse_framework

refuse_framework(__name__, "SGLang")
