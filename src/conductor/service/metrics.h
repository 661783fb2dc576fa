/* crescent-conductor counters: one list generates the enum, the names and
 * the Prometheus output (internal). */
#ifndef CR_CONDUCTOR_SERVICE_METRICS_H
#define CR_CONDUCTOR_SERVICE_METRICS_H

/* X(id, prometheus name, help) -- all counters */
#define CR__CSVC_METRICS(X)                                                                     \
    X(HTTP_REQUESTS, "crescent_conductor_http_requests_total", "HTTP requests handled")         \
    X(HTTP_CLIENT_ERRORS, "crescent_conductor_http_client_errors_total",                         \
      "HTTP requests answered with a 4xx status")                                                \
    X(REGISTERS, "crescent_conductor_registers_total", "publishers registered")                  \
    X(UNREGISTERS, "crescent_conductor_unregisters_total", "publishers unregistered")            \
    X(QUERIES, "crescent_conductor_queries_total", "/query and /query_by_hash requests answered") \
    X(SCHEDULES, "crescent_conductor_schedules_total", "/schedule decisions made")               \
    X(SCHEDULE_REJECTS, "crescent_conductor_schedule_rejected_total",                            \
      "/schedule requests rejected (HTTP 429) by an SLO")                                        \
    X(BATCHES, "crescent_conductor_event_batches_total", "KV event batches applied")             \
    X(EVENTS, "crescent_conductor_events_total", "KV events applied")                            \
    X(BLOCKS_STORED, "crescent_conductor_blocks_stored_total", "blocks inserted into the index") \
    X(BLOCKS_REMOVED, "crescent_conductor_blocks_removed_total", "blocks removed from the index") \
    X(CLEARS, "crescent_conductor_all_blocks_cleared_total", "AllBlocksCleared events applied")  \
    X(BAD_MSGPACK, "crescent_conductor_bad_batches_msgpack_total",                               \
      "batches rejected: malformed msgpack")                                                     \
    X(BAD_LIMIT, "crescent_conductor_bad_batches_limit_total",                                   \
      "batches rejected: larger than a configured bound")                                        \
    X(BAD_SHAPE, "crescent_conductor_bad_batches_shape_total",                                   \
      "batches rejected: not an event batch")                                                    \
    X(BAD_FIELD, "crescent_conductor_bad_batches_field_total",                                   \
      "batches rejected: a field with a wrong type or value")                                    \
    X(BAD_FRAMES, "crescent_conductor_bad_frames_total",                                         \
      "ZMQ messages with an unrecognised framing")                                               \
    X(UNKNOWN_EVENTS, "crescent_conductor_unknown_events_total",                                 \
      "events skipped for an unknown tag")                                                       \
    X(SKIPPED_EVENTS, "crescent_conductor_skipped_events_total",                                 \
      "events skipped: unknown medium, other block size or other LoRA")                          \
    X(ORPHAN_BLOCKS, "crescent_conductor_orphan_blocks_total",                                   \
      "stored blocks skipped because their parent block is unknown")                             \
    X(SEQ_GAPS, "crescent_conductor_event_seq_gaps_total",                                       \
      "batches missed according to publisher sequence numbers")                                  \
    X(MAP_FULL, "crescent_conductor_hash_map_full_total",                                        \
      "blocks not indexed because a publisher's hash map is full")                               \
    X(INDEX_FULL, "crescent_conductor_index_full_total",                                         \
      "index inserts refused at the index entry bound")                                          \
    X(EVICTIONS, "crescent_conductor_index_evictions_total",                                     \
      "blocks evicted by per-tier capacity (LRU)")                                                   \
    X(REPORTS, "crescent_conductor_reports_total",                                           \
      "actual prefill / decode-step times taken from /report (the predictor learns them)")

#define CR__CSVC_M_ENUM(id, name, help) CR__CSVC_M_##id,
enum cr__csvc_metric { CR__CSVC_METRICS(CR__CSVC_M_ENUM) CR__CSVC_M__COUNT };
#undef CR__CSVC_M_ENUM

#endif
