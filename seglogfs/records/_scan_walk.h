/* The walk over a v2 records area that every function of _scan.c shares: one record parsed whole,
 * every varint and length checked against the end of the area and of the record. Included by _scan.c
 * only (one translation unit: everything here is static). */
#ifndef SEGLOGFS_SCAN_WALK_H
#define SEGLOGFS_SCAN_WALK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static PyObject *MalformedRecords; /* a ValueError; the module creates it */

typedef struct {
    Py_ssize_t start, end, key_start, value_start, headers_start;
    int64_t ts_delta, offset_delta, key_length, value_length, header_count;
} Rec;

typedef struct {
    const char *reason;
    Py_ssize_t pos;
    int64_t value;
} Fault;

/* The varint at *pos (below limit), at most max_bytes long; 0 on success, -1 with fault set. */
static inline int read_varint(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t limit, int max_bytes,
                              int64_t *out, Fault *fault)
{
    Py_ssize_t i = *pos;
    if (i < limit && p[i] < 0x80) { /* the common one-byte case */
        uint64_t raw = p[i];
        *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
        *pos = i + 1;
        return 0;
    }
    uint64_t raw = 0;
    for (int n = 0; n < max_bytes; n++) {
        if (i >= limit) {
            fault->reason = "varint runs past the record";
            fault->pos = *pos;
            return -1;
        }
        uint8_t b = p[i++];
        raw |= (uint64_t)(b & 0x7F) << (7 * n);
        if (b < 0x80) {
            if ((max_bytes == 5 && raw > 0xFFFFFFFFu) || (n == 9 && b > 1)) {
                break; /* bits beyond the type's width */
            }
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            *pos = i;
            return 0;
        }
    }
    fault->reason = max_bytes == 5 ? "varint longer than an int32" : "varlong longer than an int64";
    fault->pos = *pos;
    return -1;
}

/* A length (-1: null when nullable) and the bytes after it, within end; their start in *start. */
static inline int read_field(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, int nullable,
                             int64_t *length, Py_ssize_t *start, const char *what, Fault *fault)
{
    Py_ssize_t at = *pos;
    if (read_varint(p, pos, end, 5, length, fault) < 0) {
        return -1;
    }
    *start = *pos;
    if (*length < (nullable ? -1 : 0) || *length > end - *pos) {
        fault->reason = what;
        fault->pos = at;
        fault->value = *length;
        return -1;
    }
    if (*length > 0) {
        *pos += (Py_ssize_t)*length;
    }
    return 0;
}

/* The record whose length prefix is at pos (below limit); 0, or -1 with fault set. */
static inline __attribute__((always_inline)) int parse_record(const uint8_t *p, Py_ssize_t pos, Py_ssize_t limit, Rec *r, Fault *fault)
{
    int64_t length, klen, vlen;
    Py_ssize_t ignored;
    r->start = pos;
    fault->value = 0;
    if (read_varint(p, &pos, limit, 5, &length, fault) < 0) {
        return -1;
    }
    if (length < 0 || length > limit - pos) {
        fault->reason = "record length runs past the batch";
        fault->pos = r->start;
        fault->value = length;
        return -1;
    }
    Py_ssize_t end = pos + (Py_ssize_t)length;
    r->end = end;
    if (pos >= end) {
        fault->reason = "record has no attributes byte";
        fault->pos = pos;
        return -1;
    }
    pos++; /* attributes: unused */
    if (read_varint(p, &pos, end, 10, &r->ts_delta, fault) < 0
        || read_varint(p, &pos, end, 5, &r->offset_delta, fault) < 0
        || read_field(p, &pos, end, 1, &r->key_length, &r->key_start, "key runs past the record", fault) < 0
        || read_field(p, &pos, end, 1, &r->value_length, &r->value_start, "value runs past the record",
                      fault) < 0) {
        return -1;
    }
    r->headers_start = pos;
    if (read_varint(p, &pos, end, 5, &r->header_count, fault) < 0) {
        return -1;
    }
    if (r->header_count < 0) {
        fault->reason = "negative header count";
        fault->pos = r->headers_start;
        fault->value = r->header_count;
        return -1;
    }
    /* Each header takes at least two bytes, so a huge count ends at the record's end. */
    for (int64_t h = 0; h < r->header_count; h++) {
        if (read_field(p, &pos, end, 0, &klen, &ignored, "header key runs past the record", fault) < 0
            || read_field(p, &pos, end, 1, &vlen, &ignored, "header value runs past the record", fault) < 0) {
            return -1;
        }
    }
    if (pos != end) {
        fault->reason = "record length does not match its fields";
        fault->pos = r->start;
        fault->value = length;
        return -1;
    }
    return 0;
}

static PyObject *raise_fault(Py_ssize_t record, const Fault *fault)
{
    if (fault->value) {
        PyErr_Format(MalformedRecords, "record %zd at byte %zd: %s (%lld)", record, fault->pos,
                     fault->reason, (long long)fault->value);
    } else {
        PyErr_Format(MalformedRecords, "record %zd at byte %zd: %s", record, fault->pos, fault->reason);
    }
    return NULL;
}

/* Walks count records from the area's start; calls visit for each (a no-op when NULL). Returns the
 * position after the last record (the caller checks it is the area's end), or -1 with the record's
 * index in *failed and what is wrong in *fault. Touches no Python object: runs without the GIL. */
typedef void (*Visit)(const Rec *r, Py_ssize_t i, void *ctx);

static inline __attribute__((always_inline)) Py_ssize_t walk_quiet(const uint8_t *p, Py_ssize_t limit, Py_ssize_t count, Visit visit, void *ctx,
                                                                   Py_ssize_t *failed, Fault *fault)
{
    Rec r;
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (pos >= limit) {
            fault->reason = "past the end of the batch's records";
            fault->pos = pos;
            fault->value = 0;
            *failed = i;
            return -1;
        }
        if (parse_record(p, pos, limit, &r, fault) < 0) {
            *failed = i;
            return -1;
        }
        if (visit != NULL) {
            visit(&r, i, ctx);
        }
        pos = r.end;
    }
    return pos;
}

/* walk_quiet, with the error set (MalformedRecords) when a record does not parse. */
static inline __attribute__((always_inline)) Py_ssize_t walk(const uint8_t *p, Py_ssize_t limit, Py_ssize_t count, Visit visit, void *ctx)
{
    Fault fault = {0};
    Py_ssize_t failed = 0;
    Py_ssize_t end = walk_quiet(p, limit, count, visit, ctx, &failed, &fault);
    if (end < 0) {
        raise_fault(failed, &fault);
    }
    return end;
}

static int check_count(Py_ssize_t count)
{
    if (count < 0) {
        PyErr_Format(MalformedRecords, "negative record count %zd", count);
        return -1;
    }
    return 0;
}

#endif /* SEGLOGFS_SCAN_WALK_H */
