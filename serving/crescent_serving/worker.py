"""A prefill or decode worker process.

    python3 -m crescent_serving.worker --role prefill --id p0 \
        --master 127.0.0.1:50051 --metadata http://127.0.0.1:8080/metadata \
        [--model '{"n_layer": 2, ...}'] [--host 127.0.0.1] [--blocks 512] [--whole-kv]

Prints "READY id=<id> rpc=<endpoint> events=<endpoint>" once it serves.
Methods: hello, prefill (prefill role), decode and reserve (decode role),
shutdown. Each worker also runs a Transfer Engine (P2P handshake) with its
KV pool registered, for the P2P handoff (Router.generate(p2p=True)).
"""
import argparse
import json
import sys

from .engine import DecodeEngine, PrefillEngine
from .events import KVEventPublisher
from .kvstore import KVStore, open_store
from .model import ModelConfig, set_deterministic_threads
from .rpc import BadRequest, serve

# the parameters each method takes: {name: (types, required)}; anything else
# is refused with BadRequest before a handler runs
_LIST, _OPT_DICT, _INT = (list,), (dict, type(None)), (int,)
SCHEMAS = {
    "hello": {},
    "stats": {},
    "shutdown": {},
    "wait_subscribed": {"seconds": ((int, float), False)},
    "prefill": {"req_id": ((str,), True), "tokens": (_LIST, True), "reuse": ((bool,), False),
                "layer_wise": ((bool, type(None)), False), "push": (_OPT_DICT, False),
                "max_new": (_INT, False)},
    "decode": {"req_id": ((str,), True), "tokens": (_LIST, True), "first_token": (_INT, True),
               "params": (_OPT_DICT, True), "max_new": (_INT, True)},
    "reserve": {"req_id": ((str,), True), "n_tokens": (_INT, True), "max_new": (_INT, True)},
}
MAX_REQ_ID = 256


def _check_req_id(req_id):
    # it becomes part of store keys (t/<req>/...)
    if not req_id or len(req_id) > MAX_REQ_ID:
        raise BadRequest("req_id: 1 to %d characters, got %d" % (MAX_REQ_ID, len(req_id)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--role", choices=("prefill", "decode"), required=True)
    ap.add_argument("--id", required=True)
    ap.add_argument("--master", required=True)
    ap.add_argument("--metadata", required=True)
    ap.add_argument("--model", default="{}", help="ModelConfig fields as JSON")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--protocol", default="tcp")
    ap.add_argument("--blocks", type=int, default=512, help="KV pool blocks")
    ap.add_argument("--whole-kv", action="store_true", help="save the whole KV at the end (not layer-wise)")
    ap.add_argument("--load-batch-pages", type=int, default=128)
    ap.add_argument("--max-request-bytes", type=int, default=16 << 20,
                    help="larger RPC requests are dropped unread")
    a = ap.parse_args(argv)
    set_deterministic_threads()
    cfg = ModelConfig(**json.loads(a.model))
    store = open_store(a.host, a.metadata, a.master, a.protocol)
    kv = KVStore(store, cfg)
    pub = None
    if a.role == "prefill":
        eng = PrefillEngine(cfg, kv, a.blocks, layer_wise=not a.whole_kv)
        pub = KVEventPublisher(a.host, cfg.block_size)
    else:
        eng = DecodeEngine(cfg, kv, a.blocks, a.load_batch_pages)

    from mooncake.engine import TransferEngine
    te = TransferEngine()
    rc = te.initialize(a.host, "P2PHANDSHAKE", "tcp", "")
    if rc != 0:
        raise RuntimeError("TransferEngine.initialize(%s): %d" % (a.host, rc))
    eng.enable_p2p(te)

    def hello():
        return {"id": a.id, "role": a.role, "fp": cfg.fingerprint(), "shape": cfg.shape(),
                "events": pub.endpoint if pub else None}

    def stats():
        """Counters a test (or an operator) reads: prefills run so far."""
        return {"prefills": getattr(eng, "prefills_run", 0)}

    def prefill(req_id, tokens, reuse=True, layer_wise=None, push=None, max_new=0):
        if a.role != "prefill":
            raise RuntimeError("worker %s is a decode worker" % a.id)
        _check_req_id(req_id)
        # layer_wise holds for this request only: never for the next caller's
        default = eng.conn.layer_wise
        if layer_wise is not None:
            eng.set_layer_wise(layer_wise)
        try:
            r = eng.prefill(req_id, tokens, reuse, push, max_new=max_new)
        finally:
            eng.set_layer_wise(default)
        pub.block_stored(r.pop("events"))
        return r

    def decode(req_id, tokens, first_token, params, max_new):
        if a.role != "decode":
            raise RuntimeError("worker %s is a prefill worker" % a.id)
        _check_req_id(req_id)
        if params and params.get("p2p_rid"):
            return eng.decode_p2p(req_id, tokens, first_token, params, max_new)
        return eng.decode(req_id, tokens, first_token, params, max_new)

    def reserve(req_id, n_tokens, max_new):
        if a.role != "decode":
            raise RuntimeError("worker %s is a prefill worker" % a.id)
        _check_req_id(req_id)
        return eng.reserve(req_id, n_tokens, max_new)

    def wait_subscribed(seconds=30.0):
        return pub.wait_subscribed(min(float(seconds), 60.0)) if pub else True

    def shutdown():
        return "bye"

    def ready(ep):
        print("READY id=%s rpc=%s events=%s" % (a.id, ep, pub.endpoint if pub else "-"), flush=True)

    serve(a.host, {"hello": hello, "stats": stats, "prefill": prefill, "decode": decode,
                   "reserve": reserve, "wait_subscribed": wait_subscribed, "shutdown": shutdown},
          ready, schemas=SCHEMAS, max_request=a.max_request_bytes)
    if pub:
        pub.close()
    kv.close()
    te.close()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
