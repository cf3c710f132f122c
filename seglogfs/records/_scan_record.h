/* record_in_batch(): one record of an uncompressed v2 batch whose record bounds are known (the
 * batch passed its CRC when they were taken), found and read from the segment's file in one call:
 * the by-offset read of the mount. Included by _scan.c only (one translation unit). */
#ifndef SEGLOGFS_SCAN_RECORD_H
#define SEGLOGFS_SCAN_RECORD_H

#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

#include "_scan_walk.h"

/* Records up to this size are read into the stack; larger ones into the heap. */
#define RECORD_STACK_BYTES 4096

/* What of the size bytes at position the page cache holds, read without blocking and without
 * handing the GIL over (preadv2 RWF_NOWAIT): a by-offset read is ~100 ns of copying, and giving the
 * GIL away for it costs a wake-up of the thread that takes it and a wait to get it back (the mount's
 * other worker is often serving the previous file's RELEASE). 0 where RWF_NOWAIT is unknown. */
static Py_ssize_t cached_pread(int fd, uint8_t *buf, Py_ssize_t size, long long position)
{
#ifdef RWF_NOWAIT
    struct iovec io = {buf, (size_t)size};
    ssize_t n = preadv2(fd, &io, 1, (off_t)position, RWF_NOWAIT);
    return n < 0 ? 0 : (Py_ssize_t)n;
#else
    return 0;
#endif
}

/* The index of the record whose offset delta is delta: deltas NULL means delta i is record i. */
static Py_ssize_t record_index(const int64_t *deltas, Py_ssize_t count, int64_t delta)
{
    if (deltas == NULL) {
        return delta >= 0 && delta < count ? (Py_ssize_t)delta : -1;
    }
    Py_ssize_t lo = 0, hi = count;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (deltas[mid] < delta) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < count && deltas[lo] == delta ? lo : -1;
}

PyDoc_STRVAR(record_in_batch_doc,
"record_in_batch(fd, area_position, starts, deltas, area_size, delta)\n"
"    -> (ts_delta, offset_delta, key, value, record_bytes) | None | int\n\n"
"The record at offset delta ``delta`` of the batch whose records area starts at ``area_position`` of\n"
"the file ``fd``: ``starts`` (int32) and ``deltas`` (int64, or None when delta i is record i) are\n"
"its record bounds, ``area_size`` the area's length. None when no record has that delta; the number\n"
"of bytes read when the file ends before the record does (cut under the reader). ``key`` and\n"
"``value`` are None when null; ``record_bytes`` (length prefix included) only when the record has\n"
"headers, else None. MalformedRecords when the bytes do not parse as one record; OSError from pread.\n"
"The caller checks offset_delta == delta. The GIL is released during the read.");

static PyObject *record_in_batch(PyObject *self, PyObject *args)
{
    int fd;
    long long area_position, area_size, delta;
    Py_buffer starts, deltas = {0};
    PyObject *deltas_obj, *result = NULL;
    if (!PyArg_ParseTuple(args, "iLy*OLL", &fd, &area_position, &starts, &deltas_obj, &area_size, &delta)) {
        return NULL;
    }
    Py_ssize_t count = starts.len / (Py_ssize_t)sizeof(int32_t);
    const int64_t *delta_column = NULL;
    if (deltas_obj != Py_None) {
        if (PyObject_GetBuffer(deltas_obj, &deltas, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&starts);
            return NULL;
        }
        if (deltas.len / (Py_ssize_t)sizeof(int64_t) < count) {
            PyErr_SetString(PyExc_ValueError, "deltas must hold as many items as starts");
            goto done;
        }
        delta_column = (const int64_t *)deltas.buf;
    }
    Py_ssize_t i = record_index(delta_column, count, delta);
    if (i < 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    const int32_t *start_column = (const int32_t *)starts.buf;
    int64_t start = start_column[i];
    int64_t end = i + 1 < count ? start_column[i + 1] : area_size;
    if (start < 0 || end <= start || end > area_size || area_position < 0) {
        PyErr_Format(MalformedRecords, "record %zd at byte %lld: bounds [%lld, %lld) outside the area of %lld bytes",
                     i, (long long)start, (long long)start, (long long)end, area_size);
        goto done;
    }
    Py_ssize_t size = (Py_ssize_t)(end - start);
    uint8_t stack[RECORD_STACK_BYTES];
    uint8_t *buf = size <= RECORD_STACK_BYTES ? stack : PyMem_RawMalloc((size_t)size);
    if (buf == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t got = cached_pread(fd, buf, size, area_position + start);
    int error = 0;
    if (got < size) {
        Py_BEGIN_ALLOW_THREADS /* a disk read: the other requests go on meanwhile */
        while (got < size) {
            ssize_t n = pread(fd, buf + got, (size_t)(size - got), (off_t)(area_position + start + got));
            if (n < 0) {
                if (errno == EINTR) {
                    continue;
                }
                error = errno;
                break;
            }
            if (n == 0) {
                break;
            }
            got += n;
        }
        Py_END_ALLOW_THREADS
    }
    if (error) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
    } else if (got < size) {
        result = PyLong_FromSsize_t(got);
    } else {
        Rec r;
        Fault fault = {0};
        if (parse_record(buf, 0, size, &r, &fault) < 0) {
            raise_fault(i, &fault);
        } else if (r.end != size) {
            PyErr_Format(MalformedRecords, "record %zd at byte %lld: its length does not match its %zd bytes",
                         i, (long long)start, size);
        } else {
            PyObject *key = r.key_length < 0 ? Py_NewRef(Py_None)
                : PyBytes_FromStringAndSize((const char *)buf + r.key_start, (Py_ssize_t)r.key_length);
            PyObject *value = r.value_length < 0 ? Py_NewRef(Py_None)
                : PyBytes_FromStringAndSize((const char *)buf + r.value_start, (Py_ssize_t)r.value_length);
            PyObject *raw = r.header_count == 0 ? Py_NewRef(Py_None)
                : PyBytes_FromStringAndSize((const char *)buf, size);
            if (key != NULL && value != NULL && raw != NULL) {
                result = Py_BuildValue("LLOOO", (long long)r.ts_delta, (long long)r.offset_delta, key, value, raw);
            }
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_XDECREF(raw);
        }
    }
    if (buf != stack) {
        PyMem_RawFree(buf);
    }
done:
    PyBuffer_Release(&starts);
    if (deltas.obj != NULL) {
        PyBuffer_Release(&deltas);
    }
    return result;
}

#endif /* SEGLOGFS_SCAN_RECORD_H */
