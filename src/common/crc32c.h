/* CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected), the checksum of
 * iSCSI, ext4 metadata and RocksDB. Used for on-disk object integrity (SSD and
 * shared-filesystem tiers) and by the security code.
 *
 * On x86-64 the SSE4.2 crc32 instruction (three interleaved streams),
 * PCLMULQDQ folding or VPCLMULQDQ folding on 512-bit (AVX-512) or 256-bit
 * (AVX2) registers is used, whichever the CPU has and runs fastest (timed
 * once over 64 KiB in pieces of 64, 16 and 4 KiB at the first call);
 * otherwise a portable slicing-by-8 table. All give identical results
 * (tests/common/test_crc32c.c checks
 * each against the RFC 3720 vectors and the table). */
#ifndef CR_COMMON_CRC32C_H
#define CR_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends `crc` (0 for a fresh checksum; the previous return value to continue
 * one) over `len` bytes at `buf`. cr__crc32c(0, "123456789", 9) == 0xE3069283.
 * Thread-safe, no allocation. */
uint32_t cr__crc32c(uint32_t crc, const void *buf, size_t len);

/* The raw shift register (no pre- or post-inversion) extended over len
 * bytes: cr__crc32c(c, b, n) == ~cr__crc32c_raw(~c, b, n). With reg 0 it is
 * linear in the bytes, which lets pieces of one buffer be hashed apart, in
 * any order (cr__crc32c_shift). Thread-safe, no allocation. */
uint32_t cr__crc32c_raw(uint32_t reg, const void *buf, size_t len);

/* The raw register reg carried over nbytes zero bytes (multiplied by
 * x^(8 nbytes) mod P): for a buffer A||B, raw(0, A||B) ==
 * shift(raw(0, A), |B|) ^ raw(0, B). ~40 carry-less products at most. */
uint32_t cr__crc32c_shift(uint32_t reg, uint64_t nbytes);

/* The crc32c of A||B from crc32c(A), crc32c(B) and |B|. */
uint32_t cr__crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/* The same computed by the portable table only (for tests and for CPUs
 * without SSE4.2). */
/* Copies len bytes from src to dst (which must not overlap) and returns
 * the raw register of those bytes continued from reg, as cr__crc32c_raw
 * would: one pass over the bytes instead of a copy and a hash. Copies of at
 * least CR__COPY_STREAM_MIN bytes store around the cache, as
 * cr__copy_stream (common/copy.h) does. */
uint32_t cr__crc32c_copy_raw(uint32_t reg, void *dst, const void *src, size_t len);

uint32_t cr__crc32c_portable(uint32_t crc, const void *buf, size_t len);

/* One implementation by number, for tests: 0 the table, 1 the crc32
 * instruction, 2 PCLMULQDQ folding (the instruction below 64 bytes), 3
 * VPCLMULQDQ folding with AVX-512 (PCLMULQDQ below 256 bytes), 4
 * VPCLMULQDQ folding with AVX2 (PCLMULQDQ below 128 bytes).
 * Returns 0 for an implementation this CPU lacks
 * (cr__crc32c_impl_available says which). */
uint32_t cr__crc32c_impl(int impl, uint32_t crc, const void *buf, size_t len);
int cr__crc32c_impl_available(int impl);

/* 1 when cr__crc32c uses a hardware path on this CPU. */
int cr__crc32c_hw(void);

#endif
