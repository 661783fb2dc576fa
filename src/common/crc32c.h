/* CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected), the checksum of
 * iSCSI, ext4 metadata and RocksDB. Used for on-disk object integrity (SSD and
 * shared-filesystem tiers) and by the security code.
 *
 * The x86-64 SSE4.2 crc32 instruction is used when the CPU has it (checked
 * once, at first call); otherwise a portable slicing-by-8 table. Both give
 * identical results (tests/common/test_crc32c.c checks both against RFC 3720
 * vectors). */
#ifndef CR_COMMON_CRC32C_H
#define CR_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends `crc` (0 for a fresh checksum; the previous return value to continue
 * one) over `len` bytes at `buf`. cr__crc32c(0, "123456789", 9) == 0xE3069283.
 * Thread-safe, no allocation. */
uint32_t cr__crc32c(uint32_t crc, const void *buf, size_t len);

/* The same computed by the portable table only (for tests and for CPUs
 * without SSE4.2). */
uint32_t cr__crc32c_portable(uint32_t crc, const void *buf, size_t len);

/* 1 when cr__crc32c uses the hardware instruction on this CPU. */
int cr__crc32c_hw(void);

#endif
