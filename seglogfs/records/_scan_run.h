/* Runs of whole RecordBatch v2 batches, straight from a .log's bytes: their ``records`` and
 * ``records.jsonl`` byte counts (count_run), or one view's bytes (render_run), in one C call for many
 * batches (seglogfs/segment_totals.py). Only the plain case is done here: an uncompressed v2 batch
 * whose CRC-32C holds, whose offsets carry on right after the one before (no gap: a baseOffset is
 * outside the CRC, and only the careful survey of seglogfs/segment_survey.py judges one after a gap),
 * below the next segment's base, and whose records parse and fill it exactly; for ``jsonl``, every record on
 * the fast path of plain_jsonl. The run stops before the first batch that is anything else (legacy,
 * compressed, damaged, a torn tail): the caller takes that one through the Python decoders, which
 * give the same bytes, and starts another run after it. Included by _scan.c after its visitors. */
#ifndef SEGLOGFS_SCAN_RUN_H
#define SEGLOGFS_SCAN_RUN_H

#define RUN_HEADER 61
#define ATTR_COMPRESSION 0x07
#define ATTR_LOG_APPEND_TIME 0x08
#define ATTR_CONTROL 0x20
/* Runs over at least this many bytes let the other threads run meanwhile (a count of a 4 MiB chunk
 * takes milliseconds: held, it would stall every request); shorter ones, an append's, keep the GIL. */
#define RELEASE_GIL_BYTES (256 * 1024)

static uint32_t crc_table[8][256];

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_HW_CRC 1
#include <cpuid.h>
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(const uint8_t *p, size_t n)
{
    uint64_t c = 0xFFFFFFFFu;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n; n--) {
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    }
    return c32 ^ 0xFFFFFFFFu;
}
#endif

static int hw_crc; /* the CPU has the SSE4.2 crc32 instruction: set at import */

static void crc32c_init(void)
{
#ifdef HAVE_HW_CRC
    unsigned int eax, ebx, ecx, edx;
    hw_crc = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_SSE4_2);
#endif
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) {
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        }
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        for (int k = 1; k < 8; k++) {
            crc_table[k][n] = (crc_table[k - 1][n] >> 8) ^ crc_table[0][crc_table[k - 1][n] & 0xFF];
        }
    }
}


static uint32_t crc32c(const uint8_t *p, size_t n)
{
#ifdef HAVE_HW_CRC
    if (hw_crc) {
        return crc32c_hw(p, n);
    }
#endif
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF]
            ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]]
            ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) {
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    }
    return c ^ 0xFFFFFFFFu;
}

static inline int64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = v << 8 | p[i];
    }
    return (int64_t)v;
}

static inline int32_t be32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

static inline int16_t be16(const uint8_t *p)
{
    return (int16_t)((uint16_t)p[0] << 8 | p[1]);
}

typedef struct {
    Py_ssize_t size;
    int64_t base_offset, next_offset, base_timestamp, max_timestamp, count;
    int attributes;
} RunBatch;

/* The plain batch at p (avail bytes left), or 0 when the run stops there. */
static int run_batch(const uint8_t *p, Py_ssize_t avail, int64_t prev_next, int64_t limit, RunBatch *b,
                     int check_crc)
{
    if (avail < RUN_HEADER) {
        return 0;
    }
    int64_t length = be32(p + 8);
    if (p[16] != 2 || length < RUN_HEADER - 12 || length + 12 > avail) {
        return 0;
    }
    b->size = (Py_ssize_t)(length + 12);
    b->attributes = be16(p + 21);
    int32_t last_delta = be32(p + 23);
    b->base_offset = be64(p);
    b->next_offset = b->base_offset + (int64_t)last_delta + 1;
    b->base_timestamp = be64(p + 27);
    b->max_timestamp = be64(p + 35);
    b->count = be32(p + 57);
    if ((b->attributes & ATTR_COMPRESSION) || last_delta < 0 || b->base_offset != prev_next
        || b->next_offset > limit || b->count < 0 || b->count > (b->size - RUN_HEADER) / 7) {
        return 0;
    }
    if (check_crc && crc32c(p + 21, (size_t)(b->size - 21)) != (uint32_t)be32(p + 17)) {
        return 0;
    }
    return 1;
}

/* The records' bytes of a plain batch in one view: values (jsonl 0) or JSON lines (jsonl 1), written
 * through out->out when set; -1 when they are not plain (or do not fill the batch). */
static int64_t run_view(const uint8_t *p, const RunBatch *b, int jsonl, Out *out)
{
    if (b->attributes & ATTR_CONTROL) {
        return 0;
    }
    const uint8_t *area = p + RUN_HEADER;
    Py_ssize_t limit = b->size - RUN_HEADER;
    Py_ssize_t end, failed;
    Fault fault = {0};
    int64_t before = out->nbytes;
    if (!jsonl) {
        Values v = {0};
        v.o = *out;
        v.min_delta = INT64_MIN;
        v.area = area;
        end = walk_quiet(area, limit, (Py_ssize_t)b->count, out->out ? copy_value : count_value, &v, &failed, &fault);
        *out = v.o;
    } else {
        Lines l = {0};
        l.o = *out;
        l.min_delta = INT64_MIN;
        l.base_offset = b->base_offset;
        l.base_timestamp = b->base_timestamp;
        l.fixed = (b->attributes & ATTR_LOG_APPEND_TIME) != 0;
        l.fixed_timestamp = b->max_timestamp;
        l.type_name = l.fixed ? "LogAppendTime" : "CreateTime";
        l.type_length = (Py_ssize_t)strlen(l.type_name);
        l.plain = 1;
        l.area = area;
        end = walk_quiet(area, limit, (Py_ssize_t)b->count, line, &l, &failed, &fault);
        *out = l.o;
        if (!l.plain) {
            end = -1;
        }
    }
    if (end != limit || out->changed) {
        return -1; /* a record that does not parse: the Python decoders say what is wrong */
    }
    return out->nbytes - before;
}

typedef struct {
    Values v;
    Lines l;
} Both;

static void count_both(const Rec *r, Py_ssize_t i, void *ctx)
{
    Both *b = (Both *)ctx;
    count_value(r, i, &b->v);
    line(r, i, &b->l);
}

/* Both views' byte counts of a plain batch in one walk of its records; 0 when the batch is not plain
 * (its jsonl takes the slow path) or its records do not fill it. */
static int run_counts(const uint8_t *p, const RunBatch *b, int64_t *values, int64_t *jsonl)
{
    *values = *jsonl = 0;
    if (b->attributes & ATTR_CONTROL) {
        return 1;
    }
    Both both = {0};
    const uint8_t *area = p + RUN_HEADER;
    Py_ssize_t limit = b->size - RUN_HEADER;
    both.v.min_delta = both.l.min_delta = INT64_MIN;
    both.v.area = both.l.area = area;
    both.l.base_offset = b->base_offset;
    both.l.base_timestamp = b->base_timestamp;
    both.l.fixed = (b->attributes & ATTR_LOG_APPEND_TIME) != 0;
    both.l.fixed_timestamp = b->max_timestamp;
    both.l.type_name = both.l.fixed ? "LogAppendTime" : "CreateTime";
    both.l.type_length = (Py_ssize_t)strlen(both.l.type_name);
    both.l.plain = 1;
    Py_ssize_t failed;
    Fault fault = {0};
    Py_ssize_t end = walk_quiet(area, limit, (Py_ssize_t)b->count, count_both, &both, &failed, &fault);
    if (end != limit || !both.l.plain) {
        return 0;
    }
    *values = both.v.o.nbytes;
    *jsonl = both.l.o.nbytes;
    return 1;
}

PyDoc_STRVAR(count_run_doc,
"count_run(buf, next_offset, limit_offset, check_crc=True) -> (bytes, batches, consumed)\n\n"
"Walk the plain batches at the start of ``buf`` (see _scan_run.h); for each, four int64 (native\n"
"order) in the bytes: its end within ``buf``, its next offset, its ``records`` bytes and its\n"
"``records.jsonl`` bytes. ``next_offset``: the offset the first batch must start at;\n"
"``limit_offset``: the offset no batch may reach. Stops at the first batch that is not plain.\n"
"``check_crc`` false: batches this process has just encoded (their CRC is its own).");

static PyObject *count_run(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    int64_t prev_next, limit;
    int check_crc = 1;
    if (!PyArg_ParseTuple(args, "y*LL|p", &buf, &prev_next, &limit, &check_crc)) {
        return NULL;
    }
    const uint8_t *p = (const uint8_t *)buf.buf;
    Py_ssize_t pos = 0, n = 0, cap = 1024;
    int64_t *rows = PyMem_RawMalloc((size_t)cap * 4 * sizeof(int64_t));
    if (rows == NULL) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    int no_memory = 0;
    RunBatch b;
    PyThreadState *released = buf.len >= RELEASE_GIL_BYTES ? PyEval_SaveThread() : NULL;
    while (run_batch(p + pos, buf.len - pos, prev_next, limit, &b, check_crc)) {
        int64_t values, jsonl;
        if (!run_counts(p + pos, &b, &values, &jsonl)) {
            break;
        }
        if (n == cap) {
            int64_t *grown = PyMem_RawRealloc(rows, (size_t)cap * 2 * 4 * sizeof(int64_t));
            if (grown == NULL) {
                no_memory = 1;
                break;
            }
            rows = grown;
            cap *= 2;
        }
        pos += b.size;
        rows[4 * n] = pos;
        rows[4 * n + 1] = b.next_offset;
        rows[4 * n + 2] = values;
        rows[4 * n + 3] = jsonl;
        prev_next = b.next_offset;
        n++;
    }
    if (released != NULL) {
        PyEval_RestoreThread(released);
    }
    PyBuffer_Release(&buf);
    if (no_memory) {
        PyMem_RawFree(rows);
        return PyErr_NoMemory();
    }
    PyObject *out = PyBytes_FromStringAndSize((const char *)rows, (Py_ssize_t)(n * 4 * sizeof(int64_t)));
    PyMem_RawFree(rows);
    if (out == NULL) {
        return NULL;
    }
    return Py_BuildValue("Nnn", out, n, pos);
}

PyDoc_STRVAR(render_run_doc,
"render_run(buf, jsonl, next_offset, limit_offset) -> (bytes, batches, consumed, next_offset, last)\n\n"
"The ``records`` (or, ``jsonl`` true, ``records.jsonl``) bytes of the plain batches at the start of\n"
"``buf``, joined; stops as count_run does. Also the next offset after the last batch, and where\n"
"the last batch starts (-1: none).");

static PyObject *render_run(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    int jsonl;
    int64_t prev_next, limit;
    if (!PyArg_ParseTuple(args, "y*pLL", &buf, &jsonl, &prev_next, &limit)) {
        return NULL;
    }
    const uint8_t *p = (const uint8_t *)buf.buf;
    Py_ssize_t pos = 0, n = 0;
    int64_t next = prev_next;
    Out o = {0};
    RunBatch b;
    int release = buf.len >= RELEASE_GIL_BYTES;
    PyThreadState *released = release ? PyEval_SaveThread() : NULL;
    while (run_batch(p + pos, buf.len - pos, next, limit, &b, 1)) { /* count, and find where the run stops */
        int64_t before = o.nbytes;
        if (run_view(p + pos, &b, jsonl, &o) < 0) {
            o.nbytes = before; /* what its first records added: the batch is not part of the run */
            o.changed = 0;
            break;
        }
        pos += b.size;
        next = b.next_offset;
        n++;
    }
    if (released != NULL) {
        PyEval_RestoreThread(released);
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)o.nbytes);
    if (result == NULL) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    Out w = {(uint8_t *)PyBytes_AS_STRING(result), 0, o.nbytes, 0};
    Py_ssize_t at = 0, last = -1;
    int64_t again = prev_next;
    released = release ? PyEval_SaveThread() : NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!run_batch(p + at, buf.len - at, again, limit, &b, 0) || run_view(p + at, &b, jsonl, &w) < 0) {
            w.changed = 1;
            break;
        }
        last = at;
        at += b.size;
        again = b.next_offset;
    }
    if (released != NULL) {
        PyEval_RestoreThread(released);
    }
    PyBuffer_Release(&buf);
    if (w.changed || w.nbytes != w.cap) {
        Py_DECREF(result);
        PyErr_SetString(MalformedRecords, "the records changed while they were read");
        return NULL;
    }
    return Py_BuildValue("NnnLn", result, n, pos, next, last);
}

#endif /* SEGLOGFS_SCAN_RUN_H */
