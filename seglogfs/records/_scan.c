/* seglogfs.records._scan: one pass over the records area of a RecordBatch v2 (the bytes after its
 * 61-byte header, or their decompressed form), in C.
 *
 * A record is (docs/kafka-format.md section 1): length varint, attributes int8, timestampDelta
 * varlong, offsetDelta varint, keyLength varint + key, valueLength varint + value, header count
 * varint, then per header keyLength varint + key, valueLength varint + value. Varints are zig-zag,
 * 7 bits a byte, least significant group first; an int32 varint takes at most 5 bytes, an int64 at
 * most 10 (more is malformed, as in Kafka). Lengths of -1 mean null (keys, values, header values).
 *
 * Every read is checked against the end of the area and of the record: hostile bytes give
 * MalformedRecords (a ValueError naming the record and its byte position), never a read out of
 * bounds. The GIL is kept: a batch takes microseconds, and handing the GIL over can cost a switch
 * interval when another thread is waiting for it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_scan_walk.h"

/* The rows of scan()'s output, one column per record. */
enum {
    ROW_START,          /* the record's length prefix, within the area */
    ROW_END,            /* the end of its body */
    ROW_TS_DELTA,
    ROW_OFFSET_DELTA,
    ROW_KEY_START,
    ROW_KEY_LENGTH,     /* -1: null */
    ROW_VALUE_START,
    ROW_VALUE_LENGTH,   /* -1: null */
    ROW_HEADERS_START,  /* the header count varint */
    ROW_HEADER_COUNT,
    ROWS
};

/* ------------------------------------------------------------------------- scan */

typedef struct {
    int64_t *out;
    Py_ssize_t count;
} Columns;

static void store_columns(const Rec *r, Py_ssize_t i, void *ctx)
{
    Columns *c = (Columns *)ctx;
    int64_t *o = c->out + i;
    Py_ssize_t n = c->count;
    o[ROW_START * n] = r->start;
    o[ROW_END * n] = r->end;
    o[ROW_TS_DELTA * n] = r->ts_delta;
    o[ROW_OFFSET_DELTA * n] = r->offset_delta;
    o[ROW_KEY_START * n] = r->key_start;
    o[ROW_KEY_LENGTH * n] = r->key_length;
    o[ROW_VALUE_START * n] = r->value_start;
    o[ROW_VALUE_LENGTH * n] = r->value_length;
    o[ROW_HEADERS_START * n] = r->headers_start;
    o[ROW_HEADER_COUNT * n] = r->header_count;
}

PyDoc_STRVAR(scan_doc,
"scan(area, count, out) -> int\n\n"
"Parse ``count`` records from the start of ``area``; write their fields into ``out`` (a writable\n"
"int64 buffer of ROWS * count items, row-major: one row a field, one column a record). Returns the\n"
"position after the last record. MalformedRecords when a record does not parse.");

static PyObject *scan(PyObject *self, PyObject *args)
{
    Py_buffer area, out;
    Py_ssize_t count, end = -1;
    if (!PyArg_ParseTuple(args, "y*nw*", &area, &count, &out)) {
        return NULL;
    }
    if (check_count(count) == 0) {
        if (out.len / (Py_ssize_t)sizeof(int64_t) / ROWS < count) {
            PyErr_SetString(PyExc_ValueError, "out must hold ROWS * count int64 items");
        } else {
            Columns c = {(int64_t *)out.buf, count};
            end = walk((const uint8_t *)area.buf, area.len, count, store_columns, &c);
        }
    }
    PyBuffer_Release(&area);
    PyBuffer_Release(&out);
    return end < 0 ? NULL : PyLong_FromSsize_t(end);
}

/* ------------------------------------------------------------------------- bounds */

typedef struct {
    int32_t *starts;
    int64_t *deltas;
    int identity; /* every offset delta so far equals its record's index */
} Bounds;

static void store_bounds(const Rec *r, Py_ssize_t i, void *ctx)
{
    Bounds *b = (Bounds *)ctx;
    b->starts[i] = (int32_t)r->start;
    b->deltas[i] = r->offset_delta;
    b->identity &= r->offset_delta == i;
}

PyDoc_STRVAR(bounds_doc,
"bounds(area, count, starts, deltas) -> (end, identity)\n\n"
"Parse ``count`` records from the start of ``area`` (every field checked, as scan does); write each\n"
"record's start into ``starts`` (int32 buffer of count items; the area must be under 2 GiB) and its\n"
"offset delta into ``deltas`` (int64). Returns the position after the last record and whether every\n"
"offset delta equals its record's index.");

static PyObject *bounds(PyObject *self, PyObject *args)
{
    Py_buffer area, starts, deltas;
    Py_ssize_t count, end = -1;
    Bounds b = {NULL, NULL, 1};
    if (!PyArg_ParseTuple(args, "y*nw*w*", &area, &count, &starts, &deltas)) {
        return NULL;
    }
    if (check_count(count) == 0) {
        if (starts.len / (Py_ssize_t)sizeof(int32_t) < count || deltas.len / (Py_ssize_t)sizeof(int64_t) < count) {
            PyErr_SetString(PyExc_ValueError, "starts must hold count int32, deltas count int64 items");
        } else if (area.len > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "bounds: the area must be under 2 GiB (its starts are int32)");
        } else {
            b.starts = (int32_t *)starts.buf;
            b.deltas = (int64_t *)deltas.buf;
            end = walk((const uint8_t *)area.buf, area.len, count, store_bounds, &b);
        }
    }
    PyBuffer_Release(&area);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&deltas);
    if (end < 0) {
        return NULL;
    }
    return Py_BuildValue("nO", end, b.identity ? Py_True : Py_False);
}

/* ------------------------------------------------------------------------- one record */

PyDoc_STRVAR(record_doc,
"record(data) -> (ts_delta, offset_delta, key_start, key_length, value_start, value_length,\n"
"                 headers_start, header_count)\n\n"
"The one record that ``data`` holds exactly (length prefix included); MalformedRecords otherwise.");

static PyObject *record(PyObject *self, PyObject *args)
{
    Py_buffer data;
    Rec r;
    Fault fault = {0};
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*", &data)) {
        return NULL;
    }
    if (data.len == 0) {
        PyErr_SetString(MalformedRecords, "record 0 at byte 0: no bytes");
    } else if (parse_record((const uint8_t *)data.buf, 0, data.len, &r, &fault) < 0) {
        raise_fault(0, &fault);
    } else if (r.end != data.len) {
        PyErr_Format(MalformedRecords, "record length %zd does not match its %zd bytes", r.end, data.len);
    } else {
        result = Py_BuildValue("LLnLnLnL", (long long)r.ts_delta, (long long)r.offset_delta, r.key_start,
                               (long long)r.key_length, r.value_start, (long long)r.value_length,
                               r.headers_start, (long long)r.header_count);
    }
    PyBuffer_Release(&data);
    return result;
}

/* ------------------------------------------------------------------------- two-pass output */

/* The output of a two-pass function: a counting walk sums nbytes (out NULL); the second walk writes
 * at out + nbytes, never past cap. The area may be shared memory (an mmap of a file that another
 * process writes): the second walk can meet other bytes than the first, so every write is checked
 * against cap, and what the second walk wrote is checked again (changed) instead of trusted. */
typedef struct {
    uint8_t *out;
    int64_t nbytes, cap;
    int changed;
} Out;

/* Where the next n bytes go, or NULL (changed set) when they would pass the end of the output. */
static inline uint8_t *reserve(Out *o, int64_t n)
{
    if (n > o->cap - o->nbytes) {
        o->changed = 1;
        return NULL;
    }
    uint8_t *at = o->out + o->nbytes;
    o->nbytes += n;
    return at;
}

/* After a counting walk left its byte count in o->nbytes: a bytes object of that size, filled by
 * walking the same records again with ``visit`` writing through reserve(o, ...). */
static PyObject *second_pass(const uint8_t *p, Py_ssize_t limit, Py_ssize_t count, Visit visit, void *ctx,
                             Out *o)
{
    PyObject *result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)o->nbytes);
    if (result == NULL) {
        return NULL;
    }
    o->out = (uint8_t *)PyBytes_AS_STRING(result);
    o->cap = o->nbytes;
    o->nbytes = 0;
    o->changed = 0;
    if (walk(p, limit, count, visit, ctx) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    if (o->changed || o->nbytes != o->cap) {
        Py_DECREF(result);
        PyErr_SetString(MalformedRecords, "the records changed while they were read");
        return NULL;
    }
    return result;
}

/* ------------------------------------------------------------------------- values + "\n" */

typedef struct {
    Out o;
    int64_t min_delta;  /* records below this offset delta are left out */
    const uint8_t *area;
} Values;

static void count_value(const Rec *r, Py_ssize_t i, void *ctx)
{
    Values *v = (Values *)ctx;
    if (r->offset_delta >= v->min_delta) {
        v->o.nbytes += (r->value_length > 0 ? r->value_length : 0) + 1;
    }
}

static void copy_value(const Rec *r, Py_ssize_t i, void *ctx)
{
    Values *v = (Values *)ctx;
    if (r->offset_delta >= v->min_delta) {
        int64_t n = r->value_length > 0 ? r->value_length : 0;
        uint8_t *to = reserve(&v->o, n + 1);
        if (to != NULL) {
            memcpy(to, v->area + r->value_start, (size_t)n);
            to[n] = '\n';
        }
    }
}

PyDoc_STRVAR(values_doc,
"values(area, count, min_delta, build) -> (bytes | int, end)\n\n"
"The values of the records whose offset delta is >= ``min_delta``, each followed by a newline (a\n"
"null value is an empty line), in one bytes object, or (``build`` false) the length of that; and the\n"
"position after the last record of the area.");

static PyObject *values(PyObject *self, PyObject *args)
{
    Py_buffer area;
    Py_ssize_t count, end = -1;
    int build;
    Values v = {0};
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*nLp", &area, &count, &v.min_delta, &build)) {
        return NULL;
    }
    v.area = (const uint8_t *)area.buf;
    if (check_count(count) == 0) {
        end = walk(v.area, area.len, count, count_value, &v); /* validates every record before copying */
    }
    if (end >= 0) {
        result = build ? second_pass(v.area, area.len, count, copy_value, &v, &v.o)
                       : PyLong_FromLongLong(v.o.nbytes);
    }
    PyBuffer_Release(&area);
    if (result == NULL) {
        return NULL;
    }
    return Py_BuildValue("Nn", result, end);
}

/* ------------------------------------------------------------------------- JSON lines */

/* Bytes copied between quotes as they are: printable ASCII but the quote and the backslash
 * (seglogfs/jsonl.py's _PLAIN). */
static uint8_t not_plain[256]; /* 1 for the bytes that need escaping or decoding; set at import */

/* Eight bytes at a time (exact, as booleans: a byte below 0x20, at or above 0x80, or equal to a quote
 * or a backslash makes the word non-zero), then the table for the rest. */
#define BYTES8(b) (0x0101010101010101ull * (uint64_t)(b))
static inline uint64_t zero_byte(uint64_t w)
{
    return (w - BYTES8(0x01)) & ~w & BYTES8(0x80);
}

static inline int plain_bytes(const uint8_t *p, int64_t n)
{
    uint64_t bad = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        bad |= (w & BYTES8(0x80)) | ((w - BYTES8(0x20)) & ~w & BYTES8(0x80)) | zero_byte(w ^ BYTES8('"'))
               | zero_byte(w ^ BYTES8('\\'));
    }
    for (; i < n; i++) { /* no early exit: the loop stays branch-free */
        bad |= not_plain[p[i]];
    }
    return !bad;
}

static const uint64_t powers_of_10[20] = {
    1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull, 100000000ull,
    1000000000ull, 10000000000ull, 100000000000ull, 1000000000000ull, 10000000000000ull,
    100000000000000ull, 1000000000000000ull, 10000000000000000ull, 100000000000000000ull,
    1000000000000000000ull, 10000000000000000000ull,
};

/* Decimal digits of x: log10 from the bit length (1233/4096 ~ log10(2)), corrected by one compare. */
static inline int digits(uint64_t x)
{
    if (x == 0) {
        return 1;
    }
    int t = ((64 - __builtin_clzll(x)) * 1233) >> 12;
    return t + 1 - (x < powers_of_10[t]);
}

static inline uint8_t *put_digits(uint8_t *o, uint64_t x)
{
    int n = digits(x);
    for (int i = n - 1; i >= 0; i--) {
        o[i] = (uint8_t)('0' + x % 10);
        x /= 10;
    }
    return o + n;
}

static inline uint8_t *put(uint8_t *o, const char *s, size_t n)
{
    memcpy(o, s, n);
    return o + n;
}

/* a + b wrapping around as Kafka's (Java long) sums do, and as the numpy columns do; in unsigned
 * arithmetic because a signed overflow is undefined in C. */
static inline int64_t wrapping_add(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a + (uint64_t)b);
}

typedef struct {
    Out o;
    int64_t min_delta, base_offset, base_timestamp, fixed_timestamp;
    int fixed;                 /* LogAppendTime: every record has fixed_timestamp */
    const char *type_name;     /* CreateTime, LogAppendTime, NoTimestampType */
    Py_ssize_t type_length;
    int plain;                 /* every record so far takes the fast path */
    const uint8_t *area;
} Lines;

#define JSONL_HEAD "{\"offset\":"
#define JSONL_TS ",\"timestamp\":"
#define JSONL_TYPE ",\"timestamp_type\":\""
#define JSONL_VALUE "\",\"key\":null,\"value\":\""
#define JSONL_TAIL "\",\"headers\":[]}\n"
#define LIT(s) (sizeof(s) - 1)

static void line(const Rec *r, Py_ssize_t i, void *ctx)
{
    Lines *l = (Lines *)ctx;
    if (!l->plain || r->offset_delta < l->min_delta) {
        return;
    }
    int64_t offset = wrapping_add(l->base_offset, r->offset_delta);
    int64_t stamp = l->fixed ? l->fixed_timestamp : wrapping_add(l->base_timestamp, r->ts_delta);
    int fits = r->key_length < 0 && !r->header_count && r->value_length >= 0 && offset >= 0 && stamp >= 0;
    if (l->o.out == NULL && (!fits || !plain_bytes(l->area + r->value_start, r->value_length))) {
        l->plain = 0;
        return;
    }
    if (!fits) { /* plain when counted: the bytes changed since */
        l->o.changed = 1;
        return;
    }
    int64_t size = LIT(JSONL_HEAD JSONL_TS JSONL_TYPE JSONL_VALUE JSONL_TAIL) + l->type_length
                   + digits((uint64_t)offset) + digits((uint64_t)stamp) + r->value_length;
    if (l->o.out == NULL) {
        l->o.nbytes += size;
        return;
    }
    uint8_t *o = reserve(&l->o, size);
    if (o == NULL) {
        return;
    }
    o = put(o, JSONL_HEAD, LIT(JSONL_HEAD));
    o = put_digits(o, (uint64_t)offset);
    o = put(o, JSONL_TS, LIT(JSONL_TS));
    o = put_digits(o, (uint64_t)stamp);
    o = put(o, JSONL_TYPE, LIT(JSONL_TYPE));
    o = put(o, l->type_name, (size_t)l->type_length);
    o = put(o, JSONL_VALUE, LIT(JSONL_VALUE));
    o = put(o, (const char *)l->area + r->value_start, (size_t)r->value_length);
    if (!plain_bytes(o - r->value_length, r->value_length)) { /* checked in the output: it cannot change */
        l->o.changed = 1;
    }
    put(o, JSONL_TAIL, LIT(JSONL_TAIL));
}

PyDoc_STRVAR(plain_jsonl_doc,
"plain_jsonl(area, count, min_delta, base_offset, base_timestamp, fixed_timestamp, type_name, build)\n"
"    -> (bytes | int | None, end)\n\n"
"The records.jsonl lines (seglogfs/jsonl.py) of the records at offset delta >= ``min_delta`` when\n"
"every one takes the fast path (no key, no headers, a value of plain ASCII, offset and timestamp\n"
">= 0); None when one does not. ``fixed_timestamp`` (or None): every record's timestamp\n"
"(LogAppendTime). ``build`` false: only the length of the lines.");

static PyObject *plain_jsonl(PyObject *self, PyObject *args)
{
    Py_buffer area;
    Py_ssize_t count, end = -1;
    PyObject *fixed, *result = NULL;
    int build;
    Lines l = {0};
    if (!PyArg_ParseTuple(args, "y*nLLLOs#p", &area, &count, &l.min_delta, &l.base_offset,
                          &l.base_timestamp, &fixed, &l.type_name, &l.type_length, &build)) {
        return NULL;
    }
    l.fixed = fixed != Py_None;
    if (l.fixed) {
        l.fixed_timestamp = PyLong_AsLongLong(fixed);
    }
    l.plain = 1;
    l.area = (const uint8_t *)area.buf;
    if (!PyErr_Occurred() && check_count(count) == 0) {
        end = walk(l.area, area.len, count, line, &l);
    }
    if (end >= 0 && !l.plain) {
        result = Py_NewRef(Py_None);
    } else if (end >= 0 && !build) {
        result = PyLong_FromLongLong(l.o.nbytes);
    } else if (end >= 0) {
        result = second_pass(l.area, area.len, count, line, &l, &l.o);
    }
    PyBuffer_Release(&area);
    if (result == NULL) {
        return NULL;
    }
    return Py_BuildValue("Nn", result, end);
}

/* ------------------------------------------------------------------------- runs of batches */

#include "_scan_run.h"

/* ------------------------------------------------------------------------- one record of a batch */

#include "_scan_record.h"

/* ------------------------------------------------------------------------- module */

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {"bounds", bounds, METH_VARARGS, bounds_doc},
    {"record", record, METH_VARARGS, record_doc},
    {"values", values, METH_VARARGS, values_doc},
    {"plain_jsonl", plain_jsonl, METH_VARARGS, plain_jsonl_doc},
    {"count_run", count_run, METH_VARARGS, count_run_doc},
    {"render_run", render_run, METH_VARARGS, render_run_doc},
    {"record_in_batch", record_in_batch, METH_VARARGS, record_in_batch_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "seglogfs.records._scan",
    "RecordBatch v2 records areas parsed in one pass, in C (see _scan.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void)
{
    for (int b = 0; b < 256; b++) {
        not_plain[b] = b < 0x20 || b >= 0x80 || b == '"' || b == '\\';
    }
    crc32c_init();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    MalformedRecords = PyErr_NewExceptionWithDoc(
        "seglogfs.records._scan.MalformedRecords", "Records that do not parse (a ValueError).",
        PyExc_ValueError, NULL);
    if (MalformedRecords == NULL || PyModule_AddObjectRef(m, "MalformedRecords", MalformedRecords) < 0
        || PyModule_AddIntConstant(m, "ROWS", ROWS) < 0 || PyModule_AddIntConstant(m, "HW_CRC32C", hw_crc) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
