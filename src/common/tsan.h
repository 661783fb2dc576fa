/* ThreadSanitizer annotations (no-ops in every other build).
 *
 * CR_TSAN_IGNORE_BEGIN/END bracket a region whose memory accesses by this
 * thread TSan must not record. Use only where the ordering is real but
 * invisible to TSan, and say why at the call site: e.g. a send from a user's
 * buffer whose completion the peer acknowledges (the kernel finished reading
 * the buffer before the acknowledgement could exist, but the sending thread
 * may still be returning from sendmsg() when another thread sees the
 * completion and reuses the buffer). */
#ifndef CR_COMMON_TSAN_H
#define CR_COMMON_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define CR__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CR__TSAN 1
#endif
#endif

#ifdef CR__TSAN
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#define CR_TSAN_IGNORE_BEGIN() __tsan_ignore_thread_begin()
#define CR_TSAN_IGNORE_END() __tsan_ignore_thread_end()
#else
#define CR_TSAN_IGNORE_BEGIN() ((void)0)
#define CR_TSAN_IGNORE_END() ((void)0)
#endif

#endif
