"""crescent_serving: a real (small) transformer served through crescent.

Prefill workers, decode workers and a router run as separate processes; the KV
cache moves through crescent's store (mooncake.store API) and the router asks
crescent-conductor's /schedule where each request runs. See docs/serving.md.
"""
