"""Block keys: the conductor's rolling prefix hash (src/conductor/hash.c).

    h(block 0) = XXH3_64(tokens of block 0 as little-endian u32)
    h(block i) = XXH3_64(le64(h(block i-1)) || le64(XXH3_64(tokens of block i)))

Only full blocks are hashed. The same 64-bit values name the blocks in the
store's keys, in the KV events (BlockStored.block_hashes) and in the
conductor's index, so the three agree by construction.
"""
import struct

import xxhash


def block_hash(tokens):
    return xxhash.xxh3_64_intdigest(struct.pack("<%dI" % len(tokens), *tokens))


def chain(prev, h):
    return xxhash.xxh3_64_intdigest(struct.pack("<QQ", prev, h))


def prefix_hashes(tokens, block_size):
    """Rolling hashes of every full block of tokens."""
    out = []
    prev = 0
    for i in range(len(tokens) // block_size):
        h = block_hash(tokens[i * block_size:(i + 1) * block_size])
        prev = h if i == 0 else chain(prev, h)
        out.append(prev)
    return out
